/** Where the package's own files are (dist/ bundles, src/ when run from source, the installed extension). */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';

let root: string | undefined;

/** The directory holding our package.json, found by walking up from this module. */
export function packageRoot(): string {
  if (root) return root;
  let dir = __dirname;
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if (JSON.parse(readFileSync(pkg, 'utf8')).name === 'search-agent-studio') return (root = dir);
      } catch {
        /* keep walking */
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`cannot find the search-agent-studio package above ${__dirname}`);
    dir = up;
  }
}

/** The trainer package's parent directory (the PYTHONPATH entry of `python -m search_agent_trainer`). */
export function trainerDir(): string {
  return join(packageRoot(), 'trainer');
}

/** The demo corpus that ships with the project (the embedded default for the env server). */
export function demoCorpusPath(): string {
  return join(packageRoot(), 'examples', 'demo', 'corpus.jsonl');
}

/**
 * The data that ships with the package, by stable name (`builtin:demo/train`): a run config refers to it this way
 * rather than by a path into the installed (versioned) extension, which moves on every update. The trainer resolves
 * the same names (trainer/search_agent_trainer/config.py: BUILTIN_DATA). `trl-tiny/model` is a model directory (the
 * random Qwen2-style model of engine "trl" on CPU: config and tokenizer, `model.random_init`). `demo-multihop/…` is the
 * demo world with as many rivers as towns, the two-hop recipe's (scripts/make-demo-corpus.ts, docs/demo.md).
 */
export const BUILTIN_DATA = {
  'demo/train': 'demo/train.jsonl',
  'demo/eval': 'demo/eval.jsonl',
  'demo/corpus': 'demo/corpus.jsonl',
  'demo-multihop/train': 'demo-multihop/train.jsonl',
  'demo-multihop/eval': 'demo-multihop/eval.jsonl',
  'demo-multihop/corpus': 'demo-multihop/corpus.jsonl',
  'trl-tiny/model': 'trl-tiny/model',
} as const;

/** The file a `builtin:NAME` data reference stands for; throws naming the known ones for an unknown name. */
export function builtinDataPath(spec: string): string {
  const name = spec.slice('builtin:'.length) as keyof typeof BUILTIN_DATA;
  const file = BUILTIN_DATA[name];
  if (!file)
    throw new Error(
      `unknown built-in data "${spec}"; the built-ins are ${Object.keys(BUILTIN_DATA)
        .map((k) => `builtin:${k}`)
        .join(', ')}`,
    );
  return join(packageRoot(), 'examples', file);
}

/** A path in a run config: `builtin:demo/train` (data that ships with the package), absolute, or relative to `base`. */
export function resolveConfigPath(p: string, base: string): string {
  if (p.startsWith('builtin:')) return builtinDataPath(p);
  return isAbsolute(p) ? p : resolve(base, p);
}

/**
 * Compatibility with run.json written before it kept `builtin:` names (it held them resolved: absolute paths into the
 * install that started the run, which an extension update moves): a path that no longer exists but ends in
 * `examples/<a BUILTIN_DATA file>` is that built-in data, returned as its `builtin:NAME` when this install has it.
 * Anything else: undefined (the path stays as it is, and a missing one is reported as missing). The trainer does the
 * same (trainer/search_agent_trainer/config.py: former_builtin_name).
 */
export function formerBuiltinName(p: string): string | undefined {
  if (!isAbsolute(p) || existsSync(p)) return undefined;
  const tail = p.replace(/\\/g, '/').replace(/\/+$/, '');
  for (const [name, file] of Object.entries(BUILTIN_DATA)) {
    if (tail.endsWith(`/examples/${file}`))
      return existsSync(join(packageRoot(), 'examples', file)) ? `builtin:${name}` : undefined;
  }
  return undefined;
}
