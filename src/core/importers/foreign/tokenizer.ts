/**
 * Where a `--tokenizer` names a tokenizer: a model directory, a `tokenizer.json`, or a Hugging Face model id
 * (`Qwen/Qwen3-4B`, as dumps' configs name models) found in the local Hugging Face cache (`$HF_HUB_CACHE`,
 * `$HF_HOME/hub`, `~/.cache/huggingface/hub`: `models--Qwen--Qwen3-4B/snapshots/<rev>/tokenizer.json`). Nothing is
 * downloaded.
 */
import { readdir, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

/** The local path a tokenizer spec stands for; a model id not in the cache is an error naming where it looked. */
export async function resolveTokenizer(spec: string): Promise<string> {
  if (await exists(spec)) return spec;
  if (!/^[\w.-]+\/[\w.-]+$/.test(spec))
    throw new Error(
      `${spec}: no such file or directory (expected a model directory, a tokenizer.json, or a Hugging Face model id in the local cache)`,
    );
  const caches = [
    process.env.HF_HUB_CACHE,
    process.env.HF_HOME && join(process.env.HF_HOME, 'hub'),
    join(homedir(), '.cache', 'huggingface', 'hub'),
  ].filter((x): x is string => !!x);
  const dir = `models--${spec.replace('/', '--')}`;
  for (const c of caches) {
    const snaps = join(c, dir, 'snapshots');
    for (const rev of await readdir(snaps).catch(() => [] as string[]))
      if (await exists(join(snaps, rev, 'tokenizer.json'))) return join(snaps, rev);
  }
  throw new Error(
    `${spec}: not a path, and no tokenizer.json for this model id in the Hugging Face cache (${caches.join(', ')}); give the model directory`,
  );
}
