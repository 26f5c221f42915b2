/**
 * House rules that keep the layers apart, checked on the source itself:
 *  - src/core is pure TypeScript: no `vscode` import, no import from the extension layer;
 *  - one folder per webview, one contract per panel: see the last block;
 *  - webviews never use HTML sinks (model and document text is hostile input).
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..');

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile() && /\.(ts|tsx|mts|cts|js|mjs)$/.test(d.name))
    .map((d) => join(d.parentPath, d.name));
}

/** Every module a file imports: static imports, re-exports, `require(...)` and `import(...)`. */
function importsOf(source: string): string[] {
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
    assert.deepEqual(
      offenders.map((f) => relative(ROOT, f)),
      [],
    );
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
  const aliases = Object.keys(
    (JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')) as { compilerOptions: { paths?: object } })
      .compilerOptions.paths ?? {},
  );

  /** Where a relative specifier points, from the repository root, without extension; null for a package. */
  function target(file: string, spec: string): string | null {
    if (!spec.startsWith('.'))
      return aliases.some((a) => spec === a || spec.startsWith(`${a}/`)) ? `alias:${spec}` : null;
    return relative(ROOT, join(file, '..', spec))
      .replace(/\\/g, '/')
      .replace(/\.(ts|js|mjs)$/, '');
  }

  /** What a webview file (repository-relative path, and its import specifiers) imports that it may not. */
  function webviewOffenders(file: string, specs: string[]): string[] {
    const panel = /^webview\/([^/]+)\//.exec(file)?.[1];
    const allowed = (t: string) =>
      t === `${PROTOCOL}/messaging` ||
      t.startsWith('webview/shared/') ||
      (panel !== undefined &&
        panel !== 'shared' &&
        (t.startsWith(`webview/${panel}/`) || t === `${PROTOCOL}/${camel(panel)}`));
    return specs
      .filter((s) => {
        const t = target(join(ROOT, file), s);
        return t !== null && !allowed(t);
      })
      .map((s) => `${file} imports ${s}`);
  }

  /** What a contract module imports that it may not: only `import type` / `export type … from`, from messaging or
   * src/core outside the protocol folder (a type two panels share lives with the core code that builds it). */
  function contractOffenders(file: string, source: string): string[] {
    const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
    const declared: string[] = [];
    const offenders: string[] = [];
    for (const st of sf.statements) {
      if (
        !(ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) ||
        !st.moduleSpecifier ||
        !ts.isStringLiteral(st.moduleSpecifier)
      )
        continue;
      const spec = st.moduleSpecifier.text;
      declared.push(spec);
      const typeOnly = ts.isImportDeclaration(st) ? st.importClause?.isTypeOnly === true : st.isTypeOnly;
      if (!typeOnly) offenders.push(`${file} imports ${spec} (not \`import type\`)`);
      const t = target(join(ROOT, file), spec);
      if (
        t === null ||
        !(t === `${PROTOCOL}/messaging` || (t.startsWith('src/core/') && !t.startsWith(`${PROTOCOL}/`)))
      )
        offenders.push(`${file} imports ${spec} (not messaging or src/core)`);
    }
    // require(...) and import(...) are code too.
    for (const spec of importsOf(source))
      if (!declared.includes(spec)) offenders.push(`${file} imports ${spec} (not \`import type\`)`);
    return offenders;
  }

  it('every webview folder has its contract module, and every contract its folder and webview name', () => {
    assert.ok(panels.length >= 5, `found panels: ${panels.join(', ')}`);
    assert.deepEqual(contracts, panels.map(camel).sort());
    const names =
      /export type WebviewName\s*=([^;]*);/.exec(readFileSync(join(ROOT, PROTOCOL, 'messaging.ts'), 'utf8'))?.[1] ?? '';
    assert.deepEqual([...names.matchAll(/'([^']+)'/g)].map((m) => m[1]).sort(), panels);
  });

  it('the messaging module imports nothing (it runs in every webview)', () => {
    assert.deepEqual(importsOf(readFileSync(join(ROOT, PROTOCOL, 'messaging.ts'), 'utf8')), []);
  });

  it('a contract module imports types only, from messaging and src/core', () => {
    const offenders = contracts.flatMap((c) =>
      contractOffenders(`${PROTOCOL}/${c}.ts`, readFileSync(join(ROOT, PROTOCOL, `${c}.ts`), 'utf8')),
    );
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
    const offenders = sourceFiles('webview').flatMap((file) =>
      webviewOffenders(relative(ROOT, file).replace(/\\/g, '/'), importsOf(readFileSync(file, 'utf8'))),
    );
    assert.deepEqual(offenders, []);
    // Positive controls.
    const f = 'webview/replay/main.ts';
    assert.deepEqual(
      webviewOffenders(f, [
        './strips',
        '../shared/dom',
        'uplot',
        '../../src/core/protocol/messaging',
        '../../src/core/protocol/replay',
      ]),
      [],
    );
    assert.equal(webviewOffenders(f, ['../../src/core/protocol/dashboard']).length, 1);
    assert.equal(webviewOffenders(f, ['../dashboard/model']).length, 1);
    assert.equal(webviewOffenders(f, ['../../src/core/rewards/report']).length, 1);
    assert.equal(webviewOffenders(f, ['search-agent-studio/reward']).length, 1);
    assert.equal(webviewOffenders('webview/shared/bridge.ts', ['../../src/core/protocol/replay']).length, 1);
  });
});

/**
 * The module graph of src/ and webview/, from the source: every import, re-export, `require(...)`, `import(...)`
 * and `import('…')` type of a relative path, resolved to the file it names, and whether it is type-only (`import
 * type`, `export type`, an import whose every name is `type`, an `import('…')` type): those vanish from the built
 * code but still say which module knows about which, so the rules below count them (one exception: the protocol's).
 */
interface ImportEdge {
  from: string;
  to: string;
  typeOnly: boolean;
}

const MODULE = /\.(ts|tsx|mts|cts)$/;

/** The module specifiers a source imports, each with whether the import is type-only. */
function moduleImports(source: string): { spec: string; typeOnly: boolean }[] {
  const sf = ts.createSourceFile('module.ts', source, ts.ScriptTarget.Latest, true);
  const out: { spec: string; typeOnly: boolean }[] = [];
  const named = (b: ts.NamedImportBindings | ts.NamedExportBindings | undefined) =>
    !!b &&
    (ts.isNamedImports(b) || ts.isNamedExports(b)) &&
    b.elements.length > 0 &&
    b.elements.every((e) => e.isTypeOnly);
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const c = node.importClause;
      out.push({
        spec: node.moduleSpecifier.text,
        typeOnly: !!c && (c.isTypeOnly || (!c.name && named(c.namedBindings))),
      });
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      out.push({ spec: node.moduleSpecifier.text, typeOnly: node.isTypeOnly || named(node.exportClause) });
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      out.push({ spec: node.moduleReference.expression.text, typeOnly: node.isTypeOnly });
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      out.push({ spec: node.argument.literal.text, typeOnly: true });
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require')) &&
      node.arguments.length === 1 &&
      ts.isStringLiteralLike(node.arguments[0]!)
    ) {
      out.push({ spec: (node.arguments[0] as ts.StringLiteralLike).text, typeOnly: false });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** Every module of src/ and webview/ (paths relative to the root) and the edges between them. */
function moduleGraph(): { modules: string[]; edges: ImportEdge[]; unresolved: string[] } {
  const modules = [...sourceFiles('src'), ...sourceFiles('webview')].filter(
    (f) => MODULE.test(f) && !f.endsWith('.d.ts'),
  );
  const known = new Set(modules);
  const edges: ImportEdge[] = [];
  const unresolved: string[] = [];
  for (const file of modules) {
    for (const { spec, typeOnly } of moduleImports(readFileSync(file, 'utf8'))) {
      if (!spec.startsWith('.')) continue; // a package
      const base = join(file, '..', spec).replace(/\.[cm]?js$/, '');
      const to = [`${base}.ts`, `${base}.tsx`, join(base, 'index.ts')].find((c) => known.has(c));
      if (to) edges.push({ from: relative(ROOT, file), to: relative(ROOT, to), typeOnly });
      else if (!MODULE.test(spec) && existsSync(join(file, '..', spec)))
        continue; // a data file (package.json)
      else unresolved.push(`${relative(ROOT, file)} imports ${spec}`);
    }
  }
  return { modules: modules.map((f) => relative(ROOT, f)), edges, unresolved };
}

/** The strongly connected components of more than one module (or a module importing itself): the import cycles. */
function importCycles(modules: readonly string[], edges: readonly Pick<ImportEdge, 'from' | 'to'>[]): string[][] {
  const next = new Map<string, string[]>(modules.map((m) => [m, []]));
  for (const e of edges) next.get(e.from)?.push(e.to);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const connect = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || next.get(v)!.includes(v)) cycles.push(scc.sort());
  };
  for (const m of modules) if (!index.has(m)) connect(m);
  return cycles;
}

/**
 * src/core's layers, lowest first: a module may import modules of its own folder (or root file) and of lower layers,
 * never of its own layer's other members or of a higher one. A folder (or a root-level file) is a unit; a new one must
 * be placed here. Read upwards:
 *  - leaves: the webview ↔ host protocol (it may import types from anywhere in the core, nothing else: it is bundled
 *    into the webviews; a future protocol/ folder is the same unit), the schema builder, where the package's files
 *    are, the version, worker threads, the webview HTML builder, the charts;
 *  - the text of a trajectory (tags: parser, dialects, transcripts) and a Python's probe;
 *  - the run format (records, config, presets, token columns, fields from loose sources);
 *  - the rollout store (files, run directories, token store, veRL dumps as read) and the memory planner;
 *  - what reads through the store: tokenizers (a run's own, found by its config), retrieval (corpora), importers;
 *  - rewards (metrics, the reward API and sandbox, and scoring, which reads any source through the importers);
 *  - the audit (leaks, drift, log-prob gap, health, summaries over rollouts);
 *  - the inspector and replay (tables, filters and worker over the audit), and the run host (processes, runs, the
 *    memory check, replay-step and fork);
 *  - the doctor (the host's engines and the Python probe, in one report).
 */
const CORE_LAYERS: readonly (readonly string[])[] = [
  ['protocol', 'schema', 'paths', 'version', 'workers', 'webviewHtml', 'charts'],
  ['tags', 'python'],
  ['run'],
  ['store', 'plan'],
  ['tokens', 'retrieval', 'importers'],
  ['rewards'],
  ['audit'],
  ['inspect', 'host'],
  ['doctor'],
];

/** src/'s and webview/'s layers, lowest first: the core under the env server under the CLI; the editor and the webviews over the core. */
const SRC_LAYERS: readonly (readonly string[])[] = [
  ['src/core', 'src/ts-plugin'],
  ['src/server'],
  ['src/cli', 'src/extension', 'webview'],
];

/** The protocol's unit, whose type-only imports are allowed upwards (and are not counted in cycles). */
const PROTOCOL = 'protocol';

/** A src/core module's unit: its folder under src/core, or its own name for a root-level file. */
function coreUnit(path: string): string | undefined {
  const m = /^src\/core\/([^/]+?)(\/|\.[cm]?tsx?$)/.exec(path.split('\\').join('/'));
  return m?.[1];
}

/** A module's unit in SRC_LAYERS: src/<folder>, or webview. */
function srcUnit(path: string): string {
  const p = path.split('\\').join('/');
  return p.startsWith('webview/') ? 'webview' : p.split('/').slice(0, 2).join('/');
}

/** The edges that break a layer order: an import of a unit not strictly below, other than the unit's own modules. */
function layerViolations(
  edges: readonly ImportEdge[],
  layers: readonly (readonly string[])[],
  unitOf: (path: string) => string | undefined,
): string[] {
  const level = new Map(layers.flatMap((units, i) => units.map((u) => [u, i] as const)));
  const out: string[] = [];
  for (const e of edges) {
    const a = unitOf(e.from);
    const b = unitOf(e.to);
    if (a === undefined || b === undefined || a === b) continue;
    if (a === PROTOCOL && e.typeOnly && unitOf === coreUnit) continue;
    const la = level.get(a);
    const lb = level.get(b);
    if (la === undefined || lb === undefined) out.push(`${e.from} → ${e.to}: ${la === undefined ? a : b} has no layer`);
    else if (lb >= la)
      out.push(`${e.from} → ${e.to}: ${a} (layer ${la}) imports ${b} (layer ${lb})${e.typeOnly ? ' (type-only)' : ''}`);
  }
  return out;
}

/** The edges the cycle rule counts: all of them, but the protocol's type-only ones (it names the types it carries). */
function cycleEdges(edges: readonly ImportEdge[]): ImportEdge[] {
  return edges.filter((e) => !(e.typeOnly && coreUnit(e.from) === PROTOCOL && coreUnit(e.to) !== PROTOCOL));
}

describe('architecture: layers and import cycles', () => {
  const graph = moduleGraph();

  it('reads every import form, type-only ones as such (positive control)', () => {
    const forms = [
      ["import { a } from './a';", false],
      ["import type { a } from './a';", true],
      ["import { type a, type b } from './a';", true],
      ["import { type a, b } from './a';", false],
      ["import a, { type b } from './a';", false],
      ["import './a';", false],
      ["export * from './a';", false],
      ["export type { a } from './a';", true],
      ["export { type a } from './a';", true],
      ["const a = require('./a');", false],
      ["const a = await import('./a');", false],
      ["let a: import('./a').A;", true],
      ["import a = require('./a');", false],
    ] as const;
    for (const [form, typeOnly] of forms) {
      assert.deepEqual(moduleImports(form), [{ spec: './a', typeOnly }], form);
    }
  });

  it('resolves every relative import in src/ and webview/ to a module (no edge goes uncounted)', () => {
    assert.ok(
      graph.modules.length > 100 && graph.edges.length > 400,
      `${graph.modules.length} modules, ${graph.edges.length} edges`,
    );
    assert.deepEqual(graph.unresolved, []);
  });

  it('finds a planted cycle and a planted upward import (positive control)', () => {
    // The imports that tied the layers in knots before, put back: each is both a cycle and an upward import.
    const planted: ImportEdge[] = [
      { from: 'src/core/store/rollouts.ts', to: 'src/core/importers/index.ts', typeOnly: false },
      { from: 'src/core/audit/index.ts', to: 'src/core/inspect/table.ts', typeOnly: true },
      { from: 'src/core/run/format.ts', to: 'src/core/rewards/scoring.ts', typeOnly: false },
    ];
    for (const e of planted) {
      const edges = [...graph.edges, e];
      assert.ok(
        importCycles(graph.modules, cycleEdges(edges)).some((c) => c.includes(e.from) && c.includes(e.to)),
        `${e.from} → ${e.to}: no cycle found`,
      );
      assert.equal(layerViolations([e], CORE_LAYERS, coreUnit).length, 1, `${e.from} → ${e.to}: not an upward import`);
    }
    assert.deepEqual(
      importCycles(
        ['a', 'b', 'c'],
        [
          { from: 'a', to: 'b' },
          { from: 'b', to: 'c' },
          { from: 'c', to: 'a' },
        ],
      ),
      [['a', 'b', 'c']],
    );
    assert.deepEqual(importCycles(['a', 'b'], [{ from: 'a', to: 'b' }]), []);
    // The protocol's type-only imports are allowed upwards; a value import from it is not.
    assert.deepEqual(
      layerViolations(
        [{ from: 'src/core/protocol/rewardLab.ts', to: 'src/core/rewards/scoring.ts', typeOnly: true }],
        CORE_LAYERS,
        coreUnit,
      ),
      [],
    );
    assert.equal(
      layerViolations(
        [{ from: 'src/core/protocol.ts', to: 'src/core/rewards/scoring.ts', typeOnly: false }],
        CORE_LAYERS,
        coreUnit,
      ).length,
      1,
    );
  });

  it('has no import cycles in src/ and webview/ (type-only imports count)', () => {
    assert.deepEqual(importCycles(graph.modules, cycleEdges(graph.edges)), []);
  });

  it('places every unit of src/core in a layer, once', () => {
    const units = new Set(graph.modules.map(coreUnit).filter((u): u is string => u !== undefined));
    const listed = CORE_LAYERS.flat();
    assert.equal(new Set(listed).size, listed.length, 'a unit listed twice');
    assert.deepEqual([...units].filter((u) => !listed.includes(u)).sort(), [], 'units with no layer');
  });

  it('src/core imports go down its layers, or stay in their own folder', () => {
    assert.deepEqual(layerViolations(graph.edges, CORE_LAYERS, coreUnit), []);
  });

  it('src/ and webview/ imports go down their layers (core < server < cli; the extension and webviews over the core)', () => {
    assert.deepEqual(layerViolations(graph.edges, SRC_LAYERS, srcUnit), []);
  });
});
