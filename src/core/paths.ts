/** Where the package's own files are (dist/ bundles, src/ when run from source, the installed extension). */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

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

/** The demo corpus that ships with the project (the embedded default for the env server). */
export function demoCorpusPath(): string {
  return join(packageRoot(), 'examples', 'demo', 'corpus.jsonl');
}

/**
 * The data that ships with the package, by stable name (`builtin:demo/train`): a run config refers to it this way
 * rather than by a path into the installed (versioned) extension, which moves on every update. The trainer resolves
 * the same names (trainer/search_agent_trainer/config.py: BUILTIN_DATA). `trl-tiny/model` is a model directory (the
 * random Qwen2-style model of engine "trl" on CPU: config and tokenizer, `model.random_init`).
 */
export const BUILTIN_DATA = { 'demo/train': 'demo/train.jsonl', 'demo/eval': 'demo/eval.jsonl', 'demo/corpus': 'demo/corpus.jsonl', 'trl-tiny/model': 'trl-tiny/model' } as const;

/** The file a `builtin:NAME` data reference stands for; throws naming the known ones for an unknown name. */
export function builtinDataPath(spec: string): string {
  const name = spec.slice('builtin:'.length) as keyof typeof BUILTIN_DATA;
  const file = BUILTIN_DATA[name];
  if (!file) throw new Error(`unknown built-in data "${spec}"; the built-ins are ${Object.keys(BUILTIN_DATA).map((k) => `builtin:${k}`).join(', ')}`);
  return join(packageRoot(), 'examples', file);
}
