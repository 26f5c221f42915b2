/**
 * House rules that keep the layers apart, checked on the source itself:
 *  - src/core is pure TypeScript: no `vscode` import, no import from the extension layer;
 *  - one folder per webview, one contract per panel: see the last block;
 *  - webviews never use HTML sinks (model and document text is hostile input).
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..');

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile() && /\.(ts|tsx|mts|cts|js|mjs)$/.test(d.name))
    .map((d) => join(d.parentPath, d.name));
}

/** Every module a file imports: static imports, re-exports, `require(...)` and `import(...)`. */
export function importsOf(source: string): string[] {
  return ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName);
}

const HTML_SINKS = /\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|DOMParser|createContextualFragment)\b/;

describe('architecture', () => {
  it('finds vscode imports in every form it can be written (positive control)', () => {
    const forms = [
      "import * as vscode from 'vscode';",
      "import type { Uri } from 'vscode';",
      "export { window } from 'vscode';",
      "const v = require('vscode');",
      "const v = await import('vscode');",
    ];
    for (const f of forms) assert.ok(importsOf(f).includes('vscode'), f);
  });

  it('src/core imports neither vscode nor the extension layer', () => {
    const files = sourceFiles('src/core');
    assert.ok(files.length > 0);
    const offenders = files.flatMap((file) =>
      importsOf(readFileSync(file, 'utf8'))
        .filter((m) => m === 'vscode' || m.startsWith('vscode/') || /(^|\/)extension(\/|$)/.test(m))
        .map((m) => `${relative(ROOT, file)} imports ${m}`),
    );
    assert.deepEqual(offenders, []);
  });

  it('webviews use no HTML sinks', () => {
    const offenders = sourceFiles('webview').filter((f) => HTML_SINKS.test(readFileSync(f, 'utf8')));
    assert.deepEqual(offenders.map((f) => relative(ROOT, f)), []);
    assert.ok(HTML_SINKS.test('el.innerHTML = x'), 'positive control');
  });
});

/**
 * One folder per webview; webview↔host messages typed, one contract per panel (docs/webview-protocol.md). The
 * messaging (src/core/protocol/messaging.ts) imports nothing; each webview/<panel>/ has its contract
 * src/core/protocol/<panel>.ts (the folder's name in camelCase), which imports types only (`import type`: erased, no
 * code of src/core in the browser bundle but the contract's own); a webview file imports its own folder,
 * webview/shared/, packages, messaging and its own panel's contract — nothing of another panel.
 */
describe('architecture: one contract per webview', () => {
  const PROTOCOL = 'src/core/protocol';
  const camel = (folder: string) => folder.replace(/-(\w)/g, (_, c: string) => c.toUpperCase());
  const panels = readdirSync(join(ROOT, 'webview'), { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'shared')
    .map((d) => d.name)
    .sort();
  const contracts = readdirSync(join(ROOT, PROTOCOL))
    .filter((f) => f.endsWith('.ts') && f !== 'messaging.ts')
    .map((f) => f.slice(0, -3))
    .sort();
  const aliases = Object.keys((JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')) as { compilerOptions: { paths?: object } }).compilerOptions.paths ?? {});

  /** Where a relative specifier points, from the repository root, without extension; null for a package. */
  function target(file: string, spec: string): string | null {
    if (!spec.startsWith('.')) return aliases.some((a) => spec === a || spec.startsWith(`${a}/`)) ? `alias:${spec}` : null;
    return relative(ROOT, join(file, '..', spec)).replace(/\\/g, '/').replace(/\.(ts|js|mjs)$/, '');
  }

  /** What a webview file (repository-relative path, and its import specifiers) imports that it may not. */
  function webviewOffenders(file: string, specs: string[]): string[] {
    const panel = /^webview\/([^/]+)\//.exec(file)?.[1];
    const allowed = (t: string) =>
      t === `${PROTOCOL}/messaging` ||
      t.startsWith('webview/shared/') ||
      (panel !== undefined && panel !== 'shared' && (t.startsWith(`webview/${panel}/`) || t === `${PROTOCOL}/${camel(panel)}`));
    return specs.filter((s) => {
      const t = target(join(ROOT, file), s);
      return t !== null && !allowed(t);
    }).map((s) => `${file} imports ${s}`);
  }

  /** What a contract module imports that it may not: only `import type` / `export type … from`, from messaging or
   * src/core outside the protocol folder (a type two panels share lives with the core code that builds it). */
  function contractOffenders(file: string, source: string): string[] {
    const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
    const declared: string[] = [];
    const offenders: string[] = [];
    for (const st of sf.statements) {
      if (!(ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) || !st.moduleSpecifier || !ts.isStringLiteral(st.moduleSpecifier)) continue;
      const spec = st.moduleSpecifier.text;
      declared.push(spec);
      const typeOnly = ts.isImportDeclaration(st) ? st.importClause?.isTypeOnly === true : st.isTypeOnly;
      if (!typeOnly) offenders.push(`${file} imports ${spec} (not \`import type\`)`);
      const t = target(join(ROOT, file), spec);
      if (t === null || !(t === `${PROTOCOL}/messaging` || (t.startsWith('src/core/') && !t.startsWith(`${PROTOCOL}/`)))) offenders.push(`${file} imports ${spec} (not messaging or src/core)`);
    }
    // require(...) and import(...) are code too.
    for (const spec of importsOf(source)) if (!declared.includes(spec)) offenders.push(`${file} imports ${spec} (not \`import type\`)`);
    return offenders;
  }

  it('every webview folder has its contract module, and every contract its folder and webview name', () => {
    assert.ok(panels.length >= 5, `found panels: ${panels.join(', ')}`);
    assert.deepEqual(contracts, panels.map(camel).sort());
    const names = /export type WebviewName\s*=([^;]*);/.exec(readFileSync(join(ROOT, PROTOCOL, 'messaging.ts'), 'utf8'))?.[1] ?? '';
    assert.deepEqual([...names.matchAll(/'([^']+)'/g)].map((m) => m[1]).sort(), panels);
  });

  it('the messaging module imports nothing (it runs in every webview)', () => {
    assert.deepEqual(importsOf(readFileSync(join(ROOT, PROTOCOL, 'messaging.ts'), 'utf8')), []);
  });

  it('a contract module imports types only, from messaging and src/core', () => {
    const offenders = contracts.flatMap((c) => contractOffenders(`${PROTOCOL}/${c}.ts`, readFileSync(join(ROOT, PROTOCOL, `${c}.ts`), 'utf8')));
    assert.deepEqual(offenders, []);
    // Positive controls: code, another panel's contract, the extension layer, require.
    const f = `${PROTOCOL}/replay.ts`;
    assert.equal(contractOffenders(f, "import { hostEndpoint } from './messaging';").length, 1);
    assert.equal(contractOffenders(f, "import { type Contract } from './messaging';").length, 1);
    assert.equal(contractOffenders(f, "import type { DashboardRun } from './dashboard';").length, 1);
    assert.equal(contractOffenders(f, "import type { OpenedWebview } from '../../extension/webviewPanel';").length, 1);
    assert.equal(contractOffenders(f, "export type { RewardReport } from '../rewards/report';").length, 0);
    assert.equal(contractOffenders(f, "const r = require('../rewards/report');").length, 1);
  });

  it("a webview file imports only its own folder, webview/shared, packages, messaging and its panel's contract", () => {
    const offenders = sourceFiles('webview').flatMap((file) => webviewOffenders(relative(ROOT, file).replace(/\\/g, '/'), importsOf(readFileSync(file, 'utf8'))));
    assert.deepEqual(offenders, []);
    // Positive controls.
    const f = 'webview/replay/main.ts';
    assert.deepEqual(webviewOffenders(f, ['./strips', '../shared/dom', 'uplot', '../../src/core/protocol/messaging', '../../src/core/protocol/replay']), []);
    assert.equal(webviewOffenders(f, ['../../src/core/protocol/dashboard']).length, 1);
    assert.equal(webviewOffenders(f, ['../dashboard/model']).length, 1);
    assert.equal(webviewOffenders(f, ['../../src/core/rewards/report']).length, 1);
    assert.equal(webviewOffenders(f, ['search-agent-studio/reward']).length, 1);
    assert.equal(webviewOffenders('webview/shared/bridge.ts', ['../../src/core/protocol/replay']).length, 1);
  });
});
