// Builds every bundle: the extension (node, `vscode` external), the env server (node), the CLI (node, with a
// shebang) and one browser bundle per folder under webview/ (except shared/). Usage:
//   node esbuild.mjs [--watch] [--production]

import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as esbuild from 'esbuild';

const watch = process.argv.includes('--watch');
const production = process.argv.includes('--production');
const root = import.meta.dirname;
const dist = join(root, 'dist');

/** Native modules are not bundled: they ship in node_modules (see .vscodeignore). esbuild compiles reward modules at run time. */
const nativeExternals = ['onnxruntime-node', 'esbuild'];

const nodeCommon = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  sourcemap: production ? false : 'linked',
  minify: production,
  logLevel: 'info',
  external: nativeExternals,
  // jsonc-parser's `main` is a UMD build whose inner `require('./impl/…')` calls esbuild cannot follow (the bundle
  // failed at start with "Cannot find module './impl/format'"): bundle its ES module build instead (Node running the
  // sources in tests keeps the UMD one, which it loads fine)
  alias: { 'jsonc-parser': 'jsonc-parser/lib/esm/main.js' },
};

export function webviewNames() {
  return readdirSync(join(root, 'webview'), { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'shared' && existsSync(join(root, 'webview', d.name, 'main.ts')))
    .map((d) => d.name)
    .sort();
}

const webviewEntries = webviewNames().flatMap((name) => {
  const entries = [{ in: join(root, 'webview', name, 'main.ts'), out: name }];
  if (existsSync(join(root, 'webview', name, 'style.css')))
    entries.push({ in: join(root, 'webview', name, 'style.css'), out: name });
  return entries;
});

const builds = [
  {
    ...nodeCommon,
    entryPoints: { extension: 'src/extension/extension.ts' },
    outdir: dist,
    external: ['vscode', ...nativeExternals],
  },
  { ...nodeCommon, entryPoints: { server: 'src/server/main.ts' }, outdir: dist },
  // The rollout inspector's worker thread (indexing, filters, search off the extension host's thread).
  { ...nodeCommon, entryPoints: { 'inspector-worker': 'src/core/inspect/worker.ts' }, outdir: dist },
  // Its facts threads (src/core/inspect/factsPool.ts finds it beside the bundle that spawns it).
  { ...nodeCommon, entryPoints: { 'inspector-facts-worker': 'src/core/inspect/factsWorker.ts' }, outdir: dist },
  // The dashboard's audit thread (re-tokenising and checking a run's rollouts off the extension host's thread).
  { ...nodeCommon, entryPoints: { 'audit-worker': 'src/core/audit/worker.ts' }, outdir: dist },
  // The reward sandbox's threads: QuickJS in WebAssembly runs the user's reward module (src/core/rewards/sandbox.ts
  // finds it beside the bundle that spawns it, and the engine's dist/quickjs.wasm, copied below).
  {
    ...nodeCommon,
    entryPoints: { 'reward-worker': 'src/core/rewards/rewardWorker.ts' },
    outdir: dist,
    // The engine's Emscripten loader is an ES module that locates itself with import.meta.url (as yargs in the CLI).
    define: { 'import.meta.url': '__sasImportMetaUrl' },
    banner: { js: "var __sasImportMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
  },
  // The env server's BM25 search threads (src/core/retrieval/bm25Pool.ts finds it beside the bundle that spawns it).
  { ...nodeCommon, entryPoints: { 'bm25-worker': 'src/core/retrieval/bm25Worker.ts' }, outdir: dist },
  // The TypeScript server plugin that gives reward modules the reward API's types in any workspace; the VSIX ships it
  // as node_modules/search-agent-studio-reward-types/index.js (scripts/package.mjs), where tsserver looks for it.
  {
    ...nodeCommon,
    entryPoints: { index: 'src/ts-plugin/rewardTypes.ts' },
    outdir: join(dist, 'ts-plugin'),
    footer: { js: 'module.exports = module.exports.default;' },
  },
  // The reward API as an ES module: reward modules are bundled with it at run time (src/core/rewards/compile.ts).
  {
    ...nodeCommon,
    platform: 'neutral',
    format: 'esm',
    sourcemap: false,
    entryPoints: { 'reward-api': 'src/core/rewards/api.ts' },
    outdir: dist,
    outExtension: { '.js': '.mjs' },
  },
  {
    ...nodeCommon,
    entryPoints: { cli: 'src/cli/main.ts' },
    outdir: dist,
    // yargs is an ES module that locates itself with import.meta.url; in this CommonJS bundle that is the bundle's URL.
    define: { 'import.meta.url': '__sasImportMetaUrl' },
    banner: { js: "#!/usr/bin/env node\nvar __sasImportMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
    plugins: [
      { name: 'chmod', setup: (b) => b.onEnd((r) => r.errors.length === 0 && chmodSync(join(dist, 'cli.js'), 0o755)) },
    ],
  },
  {
    bundle: true,
    platform: 'browser',
    target: 'es2022',
    format: 'esm',
    sourcemap: production ? false : 'linked',
    minify: production,
    logLevel: 'info',
    entryPoints: webviewEntries,
    outdir: join(dist, 'webview'),
  },
];

function copyAssets() {
  // vscode-elements' <vscode-icon> needs the codicon stylesheet (and its font) in the page.
  const codicons = join(root, 'node_modules', '@vscode', 'codicons', 'dist');
  mkdirSync(join(dist, 'codicons'), { recursive: true });
  for (const f of ['codicon.css', 'codicon.ttf']) cpSync(join(codicons, f), join(dist, 'codicons', f));
  // The reward sandbox's engine (QuickJS compiled to WebAssembly; src/core/rewards/sandbox.ts).
  cpSync(
    join(root, 'node_modules', '@jitl', 'quickjs-wasmfile-release-sync', 'dist', 'emscripten-module.wasm'),
    join(dist, 'quickjs.wasm'),
  );
}

if (!watch) rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
copyAssets();
if (watch) {
  const contexts = await Promise.all(builds.map((b) => esbuild.context(b)));
  await Promise.all(contexts.map((c) => c.watch()));
  console.log('[esbuild] watching for changes…');
} else {
  await Promise.all(builds.map((b) => esbuild.build(b)));
}
