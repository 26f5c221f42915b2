/** The extension manifest says what the foundation issue and DESIGN require, and matches the code. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

describe('extension manifest', () => {
  it('names the product and its entry points', () => {
    assert.equal(pkg.name, 'search-agent-studio');
    assert.equal(pkg.displayName, 'Search Agent Studio');
    assert.equal(pkg.main, './dist/extension.js');
    assert.deepEqual(pkg.extensionKind, ['workspace']);
    assert.deepEqual(pkg.bin, { 'search-agent-studio': './dist/cli.js' });
  });

  it('the built CLI (dist/cli.js, what `bin` names) loads every module it bundles and reads a config', function () {
    // the tests run the sources; a package the bundle cannot resolve fails only in dist/ (jsonc-parser's UMD main did:
    // "Cannot find module './impl/format'" at every start of the CLI)
    const cli = join(ROOT, 'dist', 'cli.js');
    if (!existsSync(cli)) this.skip(); // `npm run build` makes it (the test command builds first)
    const dir = mkdtempSync(join(tmpdir(), 'sas-cli-'));
    const file = join(dir, 'typo.run.json');
    writeFileSync(file, '{\n  "rollout": {\n    "batchsize": 4\n  }\n}\n');
    const r = spawnSync(process.execPath, [cli, 'plan', file], { encoding: 'utf8' });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /line 3: rollout\.batchsize: is not a known field \(did you mean batch_size\?\)/);
  });

  it('targets a VS Code no newer than 1.100 (the code-server used in e2e tests)', () => {
    const m = /^\^(\d+)\.(\d+)\.(\d+)$/.exec(pkg.engines.vscode);
    assert.ok(m, pkg.engines.vscode);
    assert.ok(Number(m[1]) === 1 && Number(m[2]) <= 100, pkg.engines.vscode);
    // @types/vscode must not promise APIs the engine lacks.
    assert.ok(
      pkg.devDependencies['@types/vscode'].startsWith(`1.${m[2]}.`) ||
        Number(pkg.devDependencies['@types/vscode'].split('.')[1]) <= Number(m[2]),
    );
  });

  it('puts every command in the "Search Agent" category and registers each one in code', () => {
    const commands: { command: string; category: string }[] = pkg.contributes.commands;
    assert.ok(commands.length > 0);
    const files = readdirSync(join(ROOT, 'src/extension'), { recursive: true, withFileTypes: true }).filter(
      (d) => d.isFile() && d.name.endsWith('.ts'),
    );
    const code = files.map((d) => readFileSync(join(d.parentPath, d.name), 'utf8')).join('\n');
    for (const c of commands) {
      assert.equal(c.category, 'Search Agent', c.command);
      assert.ok(
        new RegExp(`registerCommand\\(\\s*'${c.command.replace(/\./g, '\\.')}'`).test(code),
        `${c.command} is registered in src/extension`,
      );
    }
  });

  it('limits untrusted workspaces and restricts every setting that names an executable', () => {
    const u = pkg.capabilities.untrustedWorkspaces;
    assert.equal(u.supported, 'limited');
    assert.ok(u.description.length > 20);
    const settings = Object.keys(pkg.contributes.configuration.properties);
    const executables = settings.filter((s) => /(Path|Executable|Command)$/.test(s));
    assert.ok(executables.includes('searchAgent.pythonPath'));
    for (const s of executables) assert.ok(u.restrictedConfigurations.includes(s), `${s} is restricted`);
  });

  it('packages from an allowlist (.vscodeignore starts by excluding everything)', () => {
    const ignore = readFileSync(join(ROOT, '.vscodeignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    assert.equal(ignore[0], '**');
    assert.ok(
      ignore.slice(1).every((l) => l.startsWith('!')),
      'only re-inclusions after **',
    );
    // TypeScript ships only as the reward API's declarations and the example reward modules (the built-ins).
    // Of docs/, the run-config schema (the editor validates *.run.json with it), the pages and their pictures (the
    // walkthrough's) ship.
    const docs = new Set(['!docs/schema/run-config.schema.json', '!docs/*.md', '!docs/images/*.png']);
    assert.deepEqual(
      ignore.filter(
        (l) =>
          (/^!(src|test|webview|scripts|bench|docs)\b|fixtures|\.map/.test(l) && !docs.has(l)) ||
          (/\.ts$/.test(l) && !/(\.reward\.ts|reward-api\.d\.ts)$/.test(l)),
      ),
      [],
    );
  });

  it('contributes the Get Started walkthrough: its pictures exist, its links run contributed commands or open shipped docs', () => {
    const [w] = pkg.contributes.walkthroughs;
    assert.equal(w.id, 'searchAgent.gettingStarted');
    assert.deepEqual(
      w.steps.map((s: { id: string }) => s.id),
      ['setup', 'openDemo', 'train', 'inspect', 'replay', 'reward'],
    );
    const ids = new Set((pkg.contributes.commands as { command: string }[]).map((c) => c.command));
    for (const step of w.steps as {
      id: string;
      description: string;
      media: { image?: string; markdown?: string };
      completionEvents: string[];
    }[]) {
      const media = step.media.image ?? step.media.markdown!;
      assert.ok(existsSync(join(ROOT, media)), `${step.id}: ${media}`);
      const links = [...step.description.matchAll(/\]\(command:([\w.]+)(\?[^)]*)?\)/g)];
      assert.ok(links.length > 0, `${step.id} has a command link`);
      for (const [, id, args] of links) {
        assert.ok(ids.has(id!), `${step.id}: ${id} is contributed`);
        if (id === 'searchAgent.openDocs')
          assert.ok(
            existsSync(join(ROOT, 'docs', `${JSON.parse(decodeURIComponent(args!.slice(1)))[0]}.md`)),
            `${step.id}: ${args}`,
          );
      }
      for (const e of step.completionEvents) assert.ok(ids.has(e.replace(/^onCommand:/, '')), `${step.id}: ${e}`);
    }
  });

  it('contributes training: the palette commands, the Runs view, *.run.json validation against a shipped schema', () => {
    const ids = (pkg.contributes.commands as { command: string }[]).map((c) => c.command);
    for (const id of [
      'searchAgent.newTrainingRun',
      'searchAgent.startTraining',
      'searchAgent.stopTraining',
      'searchAgent.resumeTraining',
      'searchAgent.startRetriever',
      'searchAgent.stopRetriever',
      'searchAgent.openDashboard',
    ])
      assert.ok(ids.includes(id), id);
    assert.deepEqual(
      pkg.contributes.views.searchAgent.map((v: { id: string }) => v.id),
      ['searchAgent.runs'],
    );
    const v = pkg.contributes.jsonValidation[0];
    assert.equal(v.fileMatch, '*.run.json');
    assert.ok(existsSync(join(ROOT, v.url)), v.url);
    const ignore = readFileSync(join(ROOT, '.vscodeignore'), 'utf8');
    assert.ok(ignore.includes(`!${v.url.replace(/^\.\//, '')}`), 'the schema ships in the VSIX');
    assert.ok(pkg.capabilities.untrustedWorkspaces.restrictedConfigurations.includes('searchAgent.pythonPath'));
  });
});
