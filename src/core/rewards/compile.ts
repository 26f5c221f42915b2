/**
 * Compiling a reward module on the fly with esbuild: the user's `.reward.ts` / `.js` bundled with our reward API
 * (`search-agent-studio/reward`) into one script that defines a global, plus a source map back to the user's
 * TypeScript. The module runs in the sandbox (sandbox.ts), where nothing outside the script exists, so whatever it
 * imports is read here, at compile time — and only here, by this file: esbuild is handed every file's contents and
 * reads nothing itself. Resolution is ours (relative and absolute paths, `index` files, packages in a `node_modules`
 * inside the folder), every file is read by us with bounds, no `tsconfig.json` is read (esbuild's defaults; a
 * tsconfig's `extends` or `paths` could lead anywhere), and input source-map comments (`//# sourceMappingURL=…`,
 * which esbuild follows to any path, `/dev/zero` included) are neutralized before esbuild sees a file. So:
 *  - only files inside the module's own folder tree (symbolic links followed to where they lead) and the reward API
 *    may be imported; anything else — `../secret.json`, `/etc/passwd` as text, a package outside the folder, a Node
 *    built-in — is a compile error naming the import and where it is, and is never opened;
 *  - a file must be a regular file (not a FIFO or a device) of at most `COMPILE_LIMITS.fileBytes`, all of them
 *    together at most `COMPILE_LIMITS.totalBytes`: esbuild's own memory is bounded by what it is given;
 *  - esbuild gets `COMPILE_LIMITS.timeoutMs`; past it, its process is stopped and the compile fails (another module's
 *    build in flight in that process is run again, once, in a new one).
 */
import { closeSync, constants, existsSync, fstatSync, openSync, readSync, realpathSync, statSync } from 'node:fs';
import { builtinModules, SourceMap } from 'node:module';
import { basename, dirname, extname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { parse as parseJs } from 'acorn';
import type { Loader, Message, Plugin } from 'esbuild';
import { packageRoot } from '../paths';

export const REWARD_API_MODULE = 'search-agent-studio/reward';
/** The global the compiled script assigns: `{ default: RewardDefinition, makeTrajectory }`. */
export const REWARD_GLOBAL = '__sasRewardModule';
/** The file name the script's stack frames carry. */
export const BUNDLE_NAME = 'reward-bundle.js';

/** Bounds on compiling one reward module (also documented in docs/rewards.md). */
export const COMPILE_LIMITS = {
  /** Bytes of one file: the module, or one it imports. */
  fileBytes: 8 * 1024 * 1024,
  /** Bytes of every file read for one module together. */
  totalBytes: 16 * 1024 * 1024,
  /** How long esbuild may take. */
  timeoutMs: 30_000,
  /**
   * Characters of a script that is instrumented (instrumentThrows: parsing it takes ~100 bytes of memory per
   * character of a dense data literal); a larger one is run as it is, its throws and loops located from stacks only.
   */
  instrumentChars: 1024 * 1024,
};

export interface CompiledReward {
  /** The module's path (or `builtin:…`). */
  file: string;
  code: string;
  /** The source map (v3 JSON), mapping the script (before `shifts`) to the user's files. */
  map: string;
  /**
   * Where each `throw` statement of the script is in the user's files: the script reports a thrown non-Error value
   * (`throw 'x'`) with its site's number (instrumentThrows).
   */
  throwSites?: { file: string; line: number; column: number }[];
  /** Where each loop of the user's files is: a time limit that stops one reports it (instrumentThrows). */
  loopSites?: { file: string; line: number; column: number }[];
  /** Text inserted into the script, per 0-based line: [column in the script as run, length] (for stack columns). */
  shifts?: Record<number, [number, number][]>;
}

/** A compile error, located: `file:line:column: message`. */
export class RewardCompileError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    readonly column: number,
    readonly detail: string,
  ) {
    super(`${file}:${line}:${column}: ${detail}`);
    this.name = 'RewardCompileError';
  }
}

/** Where the reward API's source is: our TypeScript when running from source, else the shipped bundle. */
export function rewardApiPath(): string {
  const root = packageRoot();
  const src = join(root, 'src', 'core', 'rewards', 'api.ts');
  if (existsSync(src)) return src;
  const dist = join(root, 'dist', 'reward-api.mjs');
  if (existsSync(dist)) return dist;
  throw new Error(`the reward API is missing from ${root} (neither src/core/rewards/api.ts nor dist/reward-api.mjs)`);
}

type Esbuild = typeof import('esbuild');
let esbuildModule: Esbuild | undefined;
/** Times esbuild's process was stopped (a compile past its limit): a build that overlapped one is run again. */
let esbuildStops = 0;
function esbuild(): Esbuild {
  // esbuild is a native package, external to our bundles and shipped in the VSIX for its platform.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (esbuildModule ??= require('esbuild') as Esbuild);
}

/**
 * Tests only: esbuild as the compiler sees it (a wrapper of the real one that holds a build until told, to make the
 * overlap of a stopped process and another build happen on purpose); undefined: the real one again.
 */
export function esbuildForTests(m: Esbuild | undefined): void {
  esbuildModule = m;
}

const realpath = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
};
/** Whether path `p` is `dir` or lies under it (both resolved). */
export const inside = (dir: string, p: string) => {
  const r = relative(dir, p);
  return r === '' || (!r.startsWith('..') && !isAbsolute(r));
};

/** The namespace of every file esbuild gets from us (never `file`: esbuild then reads nothing of its own). */
const NS = 'sas-reward';
/** What an import without a `type` is read as, by extension. */
const LOADERS: Record<string, Loader> = {
  '.ts': 'ts',
  '.mts': 'ts',
  '.cts': 'ts',
  '.tsx': 'tsx',
  '.js': 'js',
  '.mjs': 'js',
  '.cjs': 'js',
  '.jsx': 'jsx',
  '.json': 'json',
  '.txt': 'text',
};
/** The extensions an import may leave out, in the order they are tried (esbuild's own, without CSS). */
const EXTENSIONS = ['.tsx', '.ts', '.jsx', '.js', '.mts', '.cts', '.mjs', '.cjs', '.json'];
/** TypeScript's `import './x.js'` of `x.ts`. */
const TS_FOR_JS: Record<string, string[]> = {
  '.js': ['.ts', '.tsx'],
  '.jsx': ['.tsx'],
  '.mjs': ['.mts'],
  '.cjs': ['.cts'],
};

const kindOf = (p: string): 'file' | 'dir' | 'other' | undefined => {
  try {
    const st = statSync(p);
    return st.isFile() ? 'file' : st.isDirectory() ? 'dir' : 'other';
  } catch {
    return undefined;
  }
};

/**
 * Neutralizes the source-map comments esbuild would follow (`//# sourceMappingURL=…`, `//@ …`, `/*# … *\/`: it reads
 * the file or URL named, and then the files that map lists). The `=` becomes `\u003d`, which is the same character
 * in a string, a template or a regular expression, so only the comment — the only place the pattern means
 * anything to esbuild — changes.
 */
export function withoutSourceMapComments(code: string): string {
  return code.replace(/(\/[/*][#@]) sourceMappingURL=/g, '$1 sourceMappingURL\\u003d');
}

type Resolved = { path: string } | { error: string };

/**
 * Compiles a reward module file (or an in-memory source for it) into a sandbox script. Fails with a
 * RewardCompileError naming the file, line and column (the import, for an import refused).
 */
export async function compileRewardModule(file: string, contents?: string): Promise<CompiledReward> {
  const abs = resolve(file);
  const api = realpath(rewardApiPath());
  // What may be imported: the module's folder tree (where the module really is), and the reward API's own sources.
  const shown = dirname(abs);
  const root = dirname(realpath(abs));
  const apiRoot = dirname(dirname(api));
  const nodeBuiltins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
  /** A path inside the module's folder as the user named the folder (the module's own path is not resolved). */
  const mainReal = realpath(abs);
  const present = (real: string) =>
    real === mainReal ? abs : inside(root, real) ? join(shown, relative(root, real)) : real;
  const outside = `outside the module's folder`;

  /** A file the path names, with the extensions and `index` files an import may leave out. */
  const probe = (p: string, boundary: string): Resolved | undefined => {
    const check = (f: string): Resolved => {
      const real = realpath(f);
      if (!inside(boundary, real)) return { error: `${real} is ${outside}${real !== f ? ` (${f} leads there)` : ''}` };
      return kindOf(real) === 'file' ? { path: real } : { error: `${present(real)} is not a regular file` };
    };
    const kind = kindOf(p);
    if (kind === 'file' || kind === 'other') return check(p);
    for (const ext of EXTENSIONS) if (kindOf(p + ext) === 'file') return check(p + ext);
    const ext = extname(p);
    for (const ts of TS_FOR_JS[ext] ?? []) {
      const q = p.slice(0, -ext.length) + ts;
      if (kindOf(q) === 'file') return check(q);
    }
    if (kind === 'dir')
      for (const ext of EXTENSIONS) if (kindOf(join(p, `index${ext}`)) === 'file') return check(join(p, `index${ext}`));
    return undefined;
  };

  /** A package in a `node_modules` of the module's folder (from the importer's folder up to the module's). */
  const resolvePackage = (spec: string, fromDir: string): Resolved => {
    const m = /^((?:@[^/]+\/)?[^/@][^/]*)(\/.*)?$/.exec(spec);
    if (!m) return { error: 'it is not a path or a package name' };
    const [, name, sub] = m;
    let dir = fromDir;
    for (;;) {
      const pkgDir = join(dir, 'node_modules', name!);
      if (kindOf(pkgDir) === 'dir') {
        if (!inside(root, realpath(pkgDir))) return { error: `${realpath(pkgDir)} is ${outside}` };
        if (sub) return probe(join(pkgDir, sub), root) ?? { error: `${join(pkgDir, sub)} does not exist` };
        let entry: string | undefined;
        const pkgJson = join(pkgDir, 'package.json');
        if (kindOf(pkgJson) === 'file' && inside(root, realpath(pkgJson))) {
          const text = readBounded(realpath(pkgJson), 1024 * 1024);
          if (typeof text !== 'string') return text;
          let pkg: { exports?: unknown; module?: unknown; main?: unknown };
          try {
            pkg = JSON.parse(text) as typeof pkg;
          } catch (e) {
            return { error: `${pkgJson} is not JSON: ${(e as Error).message}` };
          }
          entry = exportOf(pkg.exports) ?? [pkg.module, pkg.main].find((x): x is string => typeof x === 'string');
        }
        return (
          (entry !== undefined ? probe(join(pkgDir, entry), root) : undefined) ??
          probe(join(pkgDir, 'index'), root) ?? { error: `${pkgDir} has no entry file` }
        );
      }
      if (dir === root || !inside(root, dir)) break;
      const up = dirname(dir);
      if (up === dir) break;
      dir = up;
    }
    return {
      error: `there is no package "${name}" in a node_modules folder of the module's folder (${shown}); packages outside it are not read`,
    };
  };

  let total = 0;
  /** A file's text, read with bounds (the file was checked to be a regular one; checked again on the open file). */
  const readBounded = (path: string, max = COMPILE_LIMITS.fileBytes): string | { error: string } => {
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
    } catch (e) {
      return { error: `${present(path)} cannot be read: ${(e as Error).message}` };
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) return { error: `${present(path)} is not a regular file` };
      const mb = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MB`;
      if (st.size > max)
        return { error: `${present(path)} is ${mb(st.size)}, more than a reward module's file may be (${mb(max)})` };
      if (total + st.size > COMPILE_LIMITS.totalBytes)
        return {
          error: `the files of the module come to more than ${mb(COMPILE_LIMITS.totalBytes)} with ${present(path)} (${mb(st.size)})`,
        };
      // One byte more than it said: a file that grows while read is refused, not read on.
      const buf = Buffer.alloc(st.size + 1);
      let n = 0;
      for (;;) {
        const got = readSync(fd, buf, n, buf.length - n, null);
        if (got === 0) break;
        n += got;
        if (n > st.size) return { error: `${present(path)} grew while it was read` };
      }
      total += n;
      return buf.toString('utf8', 0, n);
    } finally {
      closeSync(fd);
    }
  };

  /** The loader of an import: its `with { type }`, else its extension. */
  const loaderOf = (path: string, withAttrs: Record<string, string> | undefined): Loader | { error: string } => {
    for (const [key, value] of Object.entries(withAttrs ?? {})) {
      if (key !== 'type') return { error: `importing with the "${key}" attribute is not supported` };
      if (value === 'text') return 'text';
      if (value === 'json') return 'json';
      if (value === 'bytes') return 'binary';
      return { error: `importing with a type attribute of "${value}" is not supported` };
    }
    const loader = LOADERS[extname(path).toLowerCase()];
    return (
      loader ?? {
        error: `there is no loader for "${extname(path) || basename(path)}" files (import it with { type: 'text' } to read it as text)`,
      }
    );
  };

  const refuse = (spec: string, why: string) => ({
    errors: [
      {
        text: `"${spec}" cannot be imported: ${why}; a reward module may import only files in its own folder (${shown}) and below, and ${REWARD_API_MODULE}`,
      },
    ],
  });

  const plugin: Plugin = {
    name: 'sas-reward',
    setup(b) {
      b.onResolve({ filter: /.*/ }, (args) => {
        const spec = args.path;
        if (spec === REWARD_API_MODULE)
          return { path: api, namespace: NS, pluginData: { loader: LOADERS[extname(api)] ?? 'js' } };
        if (nodeBuiltins.has(spec) || spec.startsWith('node:')) {
          return {
            errors: [
              {
                text: `"${spec}" cannot be imported: reward modules run sandboxed, without Node built-ins (compute from the trajectory and example they receive)`,
              },
            ],
          };
        }
        // The entry (stdin, ours) imports the module; every other importer is a file we resolved, by its real path.
        const fromEntry = args.namespace !== NS;
        const fromDir = fromEntry ? dirname(mainReal) : dirname(args.importer);
        // The reward API's own files import each other (inside its folder); the module's files, inside theirs.
        const fromApi = !fromEntry && inside(apiRoot, args.importer) && !inside(root, args.importer);
        const boundary = fromApi ? apiRoot : root;
        let r: Resolved;
        if (fromEntry)
          r =
            contents !== undefined || kindOf(mainReal) === 'file'
              ? { path: mainReal }
              : { error: `${abs} ${kindOf(mainReal) ? 'is not a regular file' : 'does not exist'}` };
        else if (/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(spec) && !isAbsolute(spec))
          return refuse(spec, 'it is not a file of the module’s folder');
        else if (spec.startsWith('./') || spec.startsWith('../') || spec === '.' || spec === '..' || isAbsolute(spec)) {
          const p = resolve(fromDir, spec);
          // Refused by its name alone: nothing outside the folder is opened, or even looked at.
          if (!inside(boundary, p)) return refuse(spec, `${p} is ${outside}`);
          r = probe(p, boundary) ?? { error: `${present(p)} does not exist` };
        } else if (fromApi) return refuse(spec, 'the reward API imports no packages');
        else r = resolvePackage(spec, fromDir);
        if ('error' in r) return refuse(spec, r.error);
        if (fromEntry && contents !== undefined)
          return { path: r.path, namespace: NS, pluginData: { loader: LOADERS[extname(abs)] ?? 'ts' } };
        const loader = loaderOf(r.path, args.with);
        if (typeof loader !== 'string') return refuse(spec, loader.error);
        // Its size, before anything is read (the open file is checked again when it is).
        const size = kindOf(r.path) === 'file' ? statSync(r.path).size : 0;
        if (size > COMPILE_LIMITS.fileBytes)
          return refuse(
            spec,
            `${present(r.path)} is ${(size / 1024 / 1024).toFixed(1)} MB, more than a reward module's file may be (${COMPILE_LIMITS.fileBytes / 1024 / 1024} MB)`,
          );
        return { path: r.path, namespace: NS, pluginData: { loader } };
      });
      b.onLoad({ filter: /.*/, namespace: NS }, (args) => {
        const loader = ((args.pluginData as { loader?: Loader } | undefined)?.loader ?? 'js') as Loader;
        let text: string;
        if (args.path === mainReal && contents !== undefined) {
          if (Buffer.byteLength(contents) > COMPILE_LIMITS.fileBytes)
            return { errors: [{ text: `the module is more than ${COMPILE_LIMITS.fileBytes / 1024 / 1024} MB` }] };
          text = contents;
        } else {
          const read = readBounded(args.path);
          if (typeof read !== 'string') return { errors: [{ text: read.error }] };
          text = read;
        }
        const code = loader === 'ts' || loader === 'tsx' || loader === 'js' || loader === 'jsx';
        return { contents: code ? withoutSourceMapComments(text) : text, loader };
      });
    },
  };

  // A synthetic entry: the user's default export, and our trajectory builder for the worker.
  const entry = `import def from ${JSON.stringify(`./${basename(abs)}`)};\nexport { makeTrajectory } from ${JSON.stringify(REWARD_API_MODULE)};\nexport default def;\n`;
  /** A path esbuild names (`sas-reward:/real/path`, or the entry), as the user's file. */
  const named = (p: string) => (p.startsWith(`${NS}:`) ? present(p.slice(NS.length + 1)) : p);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timedOut = false;
  let result;
  // esbuild's one process is shared by every compile of this process (the Reward Lab's, the env server's): one past
  // its limit stops it, and a build of another module in flight then fails with "the service was stopped" — not its
  // own failure: it is run again, once, in the next process
  for (let attempt = 0; ; attempt++) {
    const stops = esbuildStops;
    try {
      result = await buildOnce();
      break;
    } catch (e) {
      if (timedOut || attempt > 0 || esbuildStops === stops) throw e;
    }
  }
  async function buildOnce() {
    try {
      const build = esbuild().build({
        stdin: { contents: entry, resolveDir: shown, sourcefile: '<reward entry>', loader: 'ts' },
        bundle: true,
        write: false,
        absWorkingDir: shown,
        format: 'iife',
        globalName: REWARD_GLOBAL,
        platform: 'neutral',
        target: 'es2022',
        sourcemap: 'external',
        outfile: `${abs}.bundle.js`,
        logLevel: 'silent',
        // No tsconfig.json is looked for (its `extends` and `paths` could name any file): esbuild's defaults.
        tsconfigRaw: '{}',
        plugins: [plugin],
      });
      const limit = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          timedOut = true;
          reject(new Error('timeout'));
        }, COMPILE_LIMITS.timeoutMs);
      });
      build.catch(() => undefined);
      return await Promise.race([build, limit]);
    } catch (e) {
      if (timedOut) {
        // A build that does not end: its process is stopped (the next compile starts a new one).
        esbuildStops++;
        await esbuild()
          .stop()
          .catch(() => undefined);
        throw new RewardCompileError(
          abs,
          1,
          1,
          `compiling took longer than ${COMPILE_LIMITS.timeoutMs / 1000} s and was stopped`,
        );
      }
      const errors = (e as { errors?: Message[] }).errors;
      const first = errors?.[0];
      if (first && /No matching export in .* for import "default"/.test(first.text)) {
        throw new RewardCompileError(
          abs,
          1,
          1,
          'no default export: a reward module must `export default defineReward({ name, score(traj, example) })`',
        );
      }
      if (first) {
        const loc = first.location;
        const where = loc?.file && loc.file !== '<reward entry>' ? resolve(shown, named(loc.file)) : abs;
        throw new RewardCompileError(where, loc?.line ?? 1, (loc?.column ?? 0) + 1, first.text);
      }
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }
  const code = result.outputFiles.find((f) => f.path.endsWith('.js'))!.text;
  const rawMap = JSON.parse(result.outputFiles.find((f) => f.path.endsWith('.map'))!.text) as { sources: string[] };
  // The map's sources as paths relative to the module's folder (as esbuild writes files of its own namespace).
  rawMap.sources = rawMap.sources.map((s) => (s.startsWith(`${NS}:`) ? relative(shown, named(s)) : s));
  const map = JSON.stringify(rawMap);
  return { file: abs, map, ...instrumentThrows(code, map, abs) };
}

/** The file an `exports` field names for the package itself (a string, `"."`, or conditions). */
function exportOf(exports: unknown): string | undefined {
  if (typeof exports === 'string') return exports;
  if (!exports || typeof exports !== 'object' || Array.isArray(exports)) return undefined;
  const o = exports as Record<string, unknown>;
  if ('.' in o) return exportOf(o['.']);
  for (const c of ['import', 'module', 'default', 'require']) {
    const v = exportOf(o[c]);
    if (v !== undefined) return v;
  }
  return undefined;
}

interface AstNode {
  type: string;
  start: number;
  end: number;
  loc?: { start: { line: number; column: number } };
  argument?: AstNode;
  body?: AstNode | AstNode[];
}

type Site = { file: string; line: number; column: number };
const LOOPS = new Set(['ForStatement', 'ForInStatement', 'ForOfStatement', 'WhileStatement', 'DoWhileStatement']);

/**
 * Instruments the script so that failures without a usable stack still name the user's file and line, parsing it
 * (acorn) so the statements are found exactly, whatever strings or regular expressions hold:
 *  - each `throw x` becomes `throw __sasThrow(site, x)` (the same value thrown; the harness records the site), so a
 *    thrown non-Error — `throw 'x'`, `throw {}`, which carry no stack — is reported at its `throw`;
 *  - each loop in the user's own files (not the reward API's) sets `__sasLoop = site` as its body starts, and resets it
 *    when the loop is left normally, so a time limit that stops a loop names that loop (QuickJS's own stack frames only
 *    name the enclosing function).
 * The source map describes the script before these insertions; `shifts` lets stack columns be mapped back.
 */
export function instrumentThrows(
  code: string,
  map: string,
  moduleFile: string,
): Pick<CompiledReward, 'code' | 'throwSites' | 'loopSites' | 'shifts'> {
  if (code.length > COMPILE_LIMITS.instrumentChars) return { code };
  let ast: AstNode;
  try {
    ast = parseJs(code, { ecmaVersion: 'latest', sourceType: 'script', locations: true }) as unknown as AstNode;
  } catch {
    return { code };
  }
  const sm = new SourceMap(JSON.parse(map));
  const root = dirname(moduleFile);
  const siteOf = (n: AstNode): Site | undefined => {
    const { line, column } = n.loc!.start;
    const e = sm.findEntry(line - 1, column) as {
      originalSource?: string;
      originalLine?: number;
      originalColumn?: number;
    };
    return e.originalSource
      ? { file: resolve(root, e.originalSource), line: (e.originalLine ?? 0) + 1, column: (e.originalColumn ?? 0) + 1 }
      : undefined;
  };
  const throwSites: Site[] = [];
  const loopSites: Site[] = [];
  const inserts: { at: number; text: string; order: number }[] = [];
  let order = 0;
  const insert = (at: number, text: string) => inserts.push({ at, text, order: order++ });
  const walk = (n: unknown, parent?: AstNode) => {
    if (!n || typeof n !== 'object') return;
    if (Array.isArray(n)) {
      for (const c of n) walk(c, parent);
      return;
    }
    const node = n as AstNode & Record<string, unknown>;
    if (node.type === 'ThrowStatement' && node.argument) {
      const site = throwSites.length;
      throwSites.push(siteOf(node) ?? { file: moduleFile, line: 0, column: 0 });
      insert(node.argument.start, `__sasThrow(${site}, `);
    }
    const loop = LOOPS.has(node.type) && node.body && !Array.isArray(node.body) ? siteOf(node) : undefined;
    const user = loop && inside(root, loop.file) && !loop.file.includes(`${sep}node_modules${sep}`);
    // A labelled loop is wrapped with its label (a label cannot be moved inside a block).
    const outer = parent?.type === 'LabeledStatement' ? parent : node;
    if (user) {
      const body = node.body as AstNode;
      const id = loopSites.length;
      loopSites.push(loop!);
      insert(outer.start, '{');
      if (body.type === 'BlockStatement') insert(body.start + 1, `__sasLoop = ${id};`);
      else {
        insert(body.start, `{ __sasLoop = ${id}; `);
      }
    }
    for (const key of Object.keys(node)) if (key !== 'loc' && typeof node[key] === 'object') walk(node[key], node);
    if (node.type === 'ThrowStatement' && node.argument) insert(node.argument.end, ')');
    if (user) {
      const body = node.body as AstNode;
      if (body.type !== 'BlockStatement') insert(body.end, ' }');
      insert(outer.end, ' __sasLoop = -1; }');
    }
  };
  walk(ast);
  if (!inserts.length) return { code };
  // In text order; at one position, in the order the walk made them (an outer insertion before an inner one opens,
  // after an inner one closes: the walk emits them nested).
  inserts.sort((a, b) => a.at - b.at || a.order - b.order);
  const lineStarts = [0];
  for (let i = 0; i < code.length; i++) if (code.charCodeAt(i) === 10) lineStarts.push(i + 1);
  const lineOf = (pos: number) => {
    let lo = 0;
    let hi = lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (lineStarts[mid]! <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const shifts: NonNullable<CompiledReward['shifts']> = {};
  let out = '';
  let last = 0;
  for (const ins of inserts) {
    out += code.slice(last, ins.at) + ins.text;
    last = ins.at;
    const line = lineOf(ins.at);
    const list = (shifts[line] ??= []);
    const before = list.reduce((sum, [, len]) => sum + len, 0);
    list.push([ins.at - lineStarts[line]! + before, ins.text.length]);
  }
  out += code.slice(last);
  return { code: out, throwSites, loopSites, shifts };
}
