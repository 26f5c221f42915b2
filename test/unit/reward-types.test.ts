/**
 * The reward API's published types (dist/reward-api.d.ts, generated from src/core/rewards/api.ts): the example
 * reward modules type-check against them alone, as a user's module does, and a mistake is caught.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { execa } from 'execa';
import ts from 'typescript';
import { openReward } from '../../src/core/rewards/scoring';
import { rewardTemplate } from '../../src/core/rewards/template';

const ROOT = join(__dirname, '..', '..');

function check(files: string[]): string[] {
  const program = ts.createProgram(files, {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    types: [],
    lib: ['lib.es2022.d.ts'],
    skipLibCheck: false,
  });
  return ts
    .getPreEmitDiagnostics(program)
    .map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
}

describe('reward API types for reward modules', function () {
  this.timeout(60_000);
  let dir: string;
  let dts: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-reward-types-'));
    dts = join(dir, 'reward-api.d.ts');
    await execa(process.execPath, [join(ROOT, 'scripts', 'reward-types.mjs'), dts]);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the example modules type-check against the generated declarations alone', () => {
    const examples = readdirSync(join(ROOT, 'examples', 'rewards')).map((f) => join(ROOT, 'examples', 'rewards', f));
    assert.ok(examples.length >= 4);
    assert.deepEqual(check([dts, ...examples]), []);
  });

  it('a wrong use is a type error (the types are real, not any)', () => {
    const bad = join(dir, 'bad.reward.ts');
    writeFileSync(
      bad,
      "import { defineReward, em } from 'search-agent-studio/reward';\nexport default defineReward({ name: 'x', score(traj, example) { return em(traj.searches, example.golden) + traj.nope; } });\n",
    );
    const errors = check([dts, bad]);
    assert.ok(
      errors.some((e) => /string\[\]' is not assignable to parameter of type 'string'/.test(e)),
      errors.join('\n'),
    );
    assert.ok(
      errors.some((e) => /Property 'nope' does not exist/.test(e)),
      errors.join('\n'),
    );
  });
});

describe('New Reward Function template', function () {
  this.timeout(60_000);
  it('type-checks against the generated types and scores in the sandbox', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-template-'));
    try {
      const types = join(dir, 'reward-api.d.ts');
      await execa(process.execPath, [join(ROOT, 'scripts', 'reward-types.mjs'), types]);
      const file = join(dir, 'rewards', 'my-reward.reward.ts');
      mkdirSync(join(dir, 'rewards'));
      writeFileSync(file, rewardTemplate('my-reward'));
      assert.deepEqual(check([types, file]), [], 'with the declarations the plugin adds, it type-checks');
      const r = await openReward(file, { workers: 1 });
      try {
        const out = await r.sandbox.score([
          { id: 'a', prompt: '', response: '<think>x</think>\n<answer> Paris </answer>', golden: ['Paris'] },
          { id: 'b', prompt: '', response: 'Paris', golden: ['Paris'] },
        ]);
        assert.deepEqual(out, [
          { id: 'a', reward: 1, parts: { em: 1, format: 1 } },
          { id: 'b', reward: 0, parts: { em: 0, format: 0 } },
        ]);
      } finally {
        await r.sandbox.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A real tsserver (the one VS Code runs), talked to over its stdin/stdout protocol. */
class TsServer {
  private seq = 0;
  private buf = '';
  private waiting = new Map<number, (body: unknown) => void>();
  private child;
  constructor(args: string[]) {
    this.child = execa(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/lib/tsserver.js'), '--disableAutomaticTypingAcquisition', ...args],
      { buffer: false, stdin: 'pipe', reject: false },
    );
    this.child.stdout!.setEncoding('utf8');
    this.child.stdout!.on('data', (chunk: string) => {
      this.buf += chunk;
      for (;;) {
        const m = /Content-Length: (\d+)\r\n\r\n/.exec(this.buf);
        if (!m) return;
        const start = m.index + m[0].length;
        const body = Buffer.from(this.buf.slice(start), 'utf8');
        const n = Number(m[1]);
        if (body.length < n) return;
        const msg = JSON.parse(body.subarray(0, n).toString('utf8'));
        this.buf = body.subarray(n).toString('utf8');
        if (msg.type === 'response') this.waiting.get(msg.request_seq)?.(msg.body);
      }
    });
  }
  request(command: string, args: unknown): Promise<unknown> {
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.waiting.set(seq, resolve);
      this.child.stdin!.write(`${JSON.stringify({ seq, type: 'request', command, arguments: args })}\n`);
    });
  }
  async errors(file: string): Promise<string[]> {
    await this.request('open', { file });
    const body = (await this.request('semanticDiagnosticsSync', { file })) as { text: string }[];
    return body.map((d) => d.text);
  }
  stop(): void {
    this.child.kill();
  }
}

describe('reward API types in any workspace (the TypeScript server plugin)', function () {
  this.timeout(120_000);
  let dir: string;
  let probe: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-ts-plugin-'));
    // The extension's layout, as the VSIX has it: dist/reward-api.d.ts and node_modules/<plugin>/index.js.
    probe = join(dir, 'extension');
    const pluginDir = join(probe, 'node_modules', 'search-agent-studio-reward-types');
    mkdirSync(pluginDir, { recursive: true });
    await execa(process.execPath, [join(ROOT, 'scripts', 'reward-types.mjs'), join(probe, 'dist', 'reward-api.d.ts')]);
    await build({
      entryPoints: [join(ROOT, 'src/ts-plugin/rewardTypes.ts')],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      outfile: join(pluginDir, 'index.js'),
      footer: { js: 'module.exports = module.exports.default;' },
      logLevel: 'silent',
    });
    writeFileSync(
      join(pluginDir, 'package.json'),
      JSON.stringify({ name: 'search-agent-studio-reward-types', main: 'index.js' }),
    );
    // A user's workspace: no tsconfig, no node_modules, the shipped example modules copied in, and a mistake.
    mkdirSync(join(dir, 'workspace', 'rewards'), { recursive: true });
    for (const f of readdirSync(join(ROOT, 'examples', 'rewards')))
      copyFileSync(join(ROOT, 'examples', 'rewards', f), join(dir, 'workspace', 'rewards', f));
    writeFileSync(
      join(dir, 'workspace', 'rewards', 'bad.reward.ts'),
      "import { defineReward } from 'search-agent-studio/reward';\nexport default defineReward({ name: 'bad', score(traj) { return traj.searches > 1 ? 1 : 0; } });\n",
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('without the plugin the module does not resolve (what a user saw); with it the examples check and a mistake is caught', async () => {
    const plain = new TsServer([]);
    const withPlugin = new TsServer([
      '--globalPlugins',
      'search-agent-studio-reward-types',
      '--pluginProbeLocations',
      probe,
    ]);
    try {
      const em = join(dir, 'workspace', 'rewards', 'em-format.reward.ts');
      assert.ok((await plain.errors(em)).some((e) => /Cannot find module 'search-agent-studio\/reward'/.test(e)));
      assert.deepEqual(await withPlugin.errors(em), []);
      for (const f of readdirSync(join(ROOT, 'examples', 'rewards')))
        assert.deepEqual(await withPlugin.errors(join(dir, 'workspace', 'rewards', f)), [], f);
      const bad = await withPlugin.errors(join(dir, 'workspace', 'rewards', 'bad.reward.ts'));
      assert.ok(
        bad.some((e) => /Operator '>' cannot be applied to types 'string\[\]' and 'number'/.test(e)),
        bad.join('\n'),
      );
    } finally {
      plain.stop();
      withPlugin.stop();
    }
  });
});
