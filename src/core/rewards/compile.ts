/**
 * Compiling a reward module on the fly with esbuild: the user's `.reward.ts` / `.js` bundled with our reward API
 * (`search-agent-studio/reward`) into one script that defines a global, plus a source map back to the user's
 * TypeScript. Node built-ins cannot be imported: modules run sandboxed (sandbox.ts).
 */
import { existsSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';
import { packageRoot } from '../paths';

export const REWARD_API_MODULE = 'search-agent-studio/reward';
/** The global the compiled script assigns: `{ default: RewardDefinition, makeTrajectory }`. */
export const REWARD_GLOBAL = '__sasRewardModule';

export interface CompiledReward {
  /** The module's path (or `builtin:…`). */
  file: string;
  code: string;
  /** The source map (v3 JSON), mapping the script to the user's files. */
  map: string;
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

/** Compiles a reward module file (or an in-memory source for it) into a sandbox script. */
export async function compileRewardModule(file: string, contents?: string): Promise<CompiledReward> {
  const abs = resolve(file);
  const api = rewardApiPath();
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
            b.onResolve({ filter: /.*/ }, (args) => {
              if (nodeBuiltins.has(args.path)) {
                return { errors: [{ text: `"${args.path}" cannot be imported: reward modules run sandboxed, without Node built-ins (compute from the trajectory and example they receive)` }] };
              }
              return undefined;
            });
            if (contents !== undefined) {
              b.onLoad({ filter: new RegExp(`^${abs.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }, () => ({ contents, loader: abs.endsWith('.js') ? 'js' : 'ts', resolveDir: dirname(abs) }));
            }
          },
        },
      ],
    });
  } catch (e) {
    const errors = (e as { errors?: { text: string; location?: { file: string; line: number; column: number } | null }[] }).errors;
    const first = errors?.[0];
    if (first && /No matching export in .* for import "default"/.test(first.text)) {
      throw new RewardCompileError(abs, 1, 1, 'no default export: a reward module must `export default defineReward({ name, score(traj, example) })`');
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
  return { file: abs, code, map };
}
