/**
 * Compiling a reward module on the fly with esbuild: the user's `.reward.ts` / `.js` bundled with our reward API
 * (`search-agent-studio/reward`) into one script that defines a global, plus a source map back to the user's
 * TypeScript. The module runs in the sandbox (sandbox.ts), where nothing outside the script exists, so whatever it
 * imports is read here, at compile time: only files inside the module's own folder tree (symbolic links followed to
 * where they lead) and the reward API may be imported; anything else — `../secret.json`, `/etc/passwd` as text, a
 * package outside the folder, a Node built-in — is a compile error naming the import and where it is.
 */
import { existsSync, realpathSync } from 'node:fs';
import { builtinModules, SourceMap } from 'node:module';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { parse as parseJs } from 'acorn';
import { packageRoot } from '../paths';

export const REWARD_API_MODULE = 'search-agent-studio/reward';
/** The global the compiled script assigns: `{ default: RewardDefinition, makeTrajectory }`. */
export const REWARD_GLOBAL = '__sasRewardModule';
/** The file name the script's stack frames carry. */
export const BUNDLE_NAME = 'reward-bundle.js';

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
function esbuild(): Esbuild {
  // esbuild is a native package, external to our bundles and shipped in the VSIX for its platform.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (esbuildModule ??= require('esbuild') as Esbuild);
}

const realpath = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
};
const inside = (dir: string, p: string) => {
  const r = relative(dir, p);
  return r === '' || (!r.startsWith('..') && !isAbsolute(r) && !r.startsWith(`..${sep}`));
};

/** Compiles a reward module file (or an in-memory source for it) into a sandbox script. */
export async function compileRewardModule(file: string, contents?: string): Promise<CompiledReward> {
  const abs = resolve(file);
  const api = rewardApiPath();
  // What may be imported: the module's folder tree (where the module really is), and the reward API's own sources.
  const root = dirname(realpath(abs));
  const apiRoot = dirname(dirname(realpath(api)));
  const nodeBuiltins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
  // A synthetic entry: the user's default export, and our trajectory builder for the worker.
  const entry = `import def from ${JSON.stringify(`./${basename(abs)}`)};\nexport { makeTrajectory } from ${JSON.stringify(REWARD_API_MODULE)};\nexport default def;\n`;
  let result;
  try {
    result = await esbuild().build({
      stdin: { contents: entry, resolveDir: dirname(abs), sourcefile: '<reward entry>', loader: 'ts' },
      bundle: true,
      write: false,
      absWorkingDir: dirname(abs),
      format: 'iife',
      globalName: REWARD_GLOBAL,
      platform: 'neutral',
      target: 'es2022',
      sourcemap: 'external',
      outfile: `${abs}.bundle.js`,
      logLevel: 'silent',
      mainFields: ['module', 'main'],
      plugins: [
        {
          name: 'sas-reward',
          setup(b) {
            b.onResolve({ filter: /^search-agent-studio\/reward$/ }, () => ({ path: api }));
            b.onResolve({ filter: /.*/ }, async (args) => {
              if ((args.pluginData as { sas?: boolean } | undefined)?.sas) return undefined;
              if (nodeBuiltins.has(args.path) || args.path.startsWith('node:')) {
                return {
                  errors: [
                    {
                      text: `"${args.path}" cannot be imported: reward modules run sandboxed, without Node built-ins (compute from the trajectory and example they receive)`,
                    },
                  ],
                };
              }
              // The entry's own import of the module.
              if (args.kind === 'entry-point') return undefined;
              const fromApi =
                args.importer !== '' &&
                inside(apiRoot, realpath(args.importer)) &&
                !inside(root, realpath(args.importer));
              const r = await b.resolve(args.path, {
                kind: args.kind,
                importer: args.importer,
                resolveDir: args.resolveDir,
                namespace: args.namespace,
                pluginData: { sas: true },
                with: args.with,
              });
              if (r.errors.length) return { errors: r.errors };
              const refuse = (why: string) => ({
                errors: [
                  {
                    text: `"${args.path}" cannot be imported: ${why}; a reward module may import only files in its own folder (${root}) and below, and ${REWARD_API_MODULE}`,
                  },
                ],
              });
              if (r.external || r.namespace !== 'file' || !r.path)
                return refuse('it is not a file of the module’s folder');
              const real = realpath(r.path);
              if (fromApi ? !inside(apiRoot, real) : !inside(root, real))
                return refuse(
                  real === r.path
                    ? `${real} is outside the module's folder`
                    : `it leads to ${real}, outside the module's folder`,
                );
              return {
                path: r.path,
                namespace: 'file',
                ...(r.sideEffects === false ? { sideEffects: false } : {}),
                pluginData: r.pluginData,
              };
            });
            if (contents !== undefined) {
              b.onLoad({ filter: new RegExp(`^${abs.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }, () => ({
                contents,
                loader: abs.endsWith('.js') ? 'js' : 'ts',
                resolveDir: dirname(abs),
              }));
            }
          },
        },
      ],
    });
  } catch (e) {
    const errors = (
      e as { errors?: { text: string; location?: { file: string; line: number; column: number } | null }[] }
    ).errors;
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
      const where = loc?.file && loc.file !== '<reward entry>' ? resolve(dirname(abs), loc.file) : abs;
      throw new RewardCompileError(where, loc?.line ?? 1, (loc?.column ?? 0) + 1, first.text);
    }
    throw e;
  }
  const code = result.outputFiles.find((f) => f.path.endsWith('.js'))!.text;
  const map = result.outputFiles.find((f) => f.path.endsWith('.map'))!.text;
  return { file: abs, map, ...instrumentThrows(code, map, abs) };
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
