/** Generated benchmark inputs, cached under .bench/ (ignored by git). */
import { createWriteStream, existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { makeRollouts } from './generate';

export const BENCH_DIR = join(__dirname, '..', '.bench');

/** A rollout JSONL file of about `bytes` bytes (token arrays included), generated once. */
export async function rolloutFile(
  bytes: number,
  name = `rollouts-${Math.round(bytes / 1e6)}mb.jsonl`,
): Promise<string> {
  mkdirSync(BENCH_DIR, { recursive: true });
  const path = join(BENCH_DIR, name);
  if (existsSync(path) && statSync(path).size >= bytes) return path;
  console.log(`generating ${path} (${(bytes / 1e9).toFixed(2)} GB)…`);
  const pool = makeRollouts(2000, { seed: 3, tokens: true });
  const tmp = `${path}.tmp`;
  const out = createWriteStream(tmp);
  let written = 0;
  let i = 0;
  while (written < bytes) {
    const line = `${pool[i % pool.length]!.record(i)}\n`;
    written += Buffer.byteLength(line);
    i++;
    if (!out.write(line)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
  renameSync(tmp, path);
  return path;
}
