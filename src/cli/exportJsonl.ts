/**
 * `search-agent-studio export jsonl <run-dir | step-dir | rollouts.jsonl> --out <F.jsonl | DIR>`: rollouts as v2
 * JSONL records, from the token store (or JSONL: copied record by record, validated). `--out` a `.jsonl` file: every
 * row in order in one file; otherwise a directory: one file per step (`step-000042.jsonl`, `val-step-000042.jsonl`),
 * the layout `train.record.format: "jsonl"` writes. Numbers are the store's float32 values, printed as the shortest
 * decimal that reads back as the same float32. Each file is written to a temporary name and renamed.
 */
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Rollout } from '../core/run/format';
import { formatIssue } from '../core/run/format';
import { readPart, rolloutFiles } from '../core/store/rollouts';
import { shortFloat32 } from '../core/store/tokenStore';
import type { CliIo } from './command';

/** A record as one JSONL line: token numbers of a store as their shortest float32 decimals. */
export function recordLine(r: Rollout): string {
  if (!r.tokens) return JSON.stringify(r);
  const t = r.tokens as Record<string, unknown>;
  const tokens: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(t)) tokens[k] = k === 'text' || k === 'ids' || k === 'role' || k === 'loss_mask' || !Array.isArray(v) ? v : v.map((x: number | null) => (x === null ? null : shortFloat32(x)));
  return JSON.stringify({ ...r, tokens });
}

export async function exportJsonl(src: string, out: string, io: CliIo): Promise<number> {
  const parts = await rolloutFiles(src);
  const single = out.endsWith('.jsonl');
  if (!single) await mkdir(out, { recursive: true });
  else await mkdir(dirname(out), { recursive: true });
  let rows = 0;
  let bad = 0;
  let handle: Awaited<ReturnType<typeof open>> | undefined;
  let tmp = '';
  let target = '';
  const begin = async (file: string) => {
    target = file;
    tmp = join(dirname(file), `.${basename(file)}.tmp-${process.pid}`);
    handle = await open(tmp, 'w');
  };
  const end = async () => {
    if (!handle) return;
    await handle.close();
    handle = undefined;
    await rename(tmp, target);
  };
  try {
    if (single) await begin(out);
    for (const part of parts) {
      if (!single) await begin(join(out, `${basename(part).replace(/\.jsonl$/, '')}.jsonl`));
      let buf = '';
      for await (const row of readPart(part)) {
        if (!row.record) {
          bad++;
          for (const e of row.errors.slice(0, 1)) io.err(`${formatIssue(e)} (skipped)\n`);
          continue;
        }
        buf += `${recordLine(row.record)}\n`;
        rows++;
        if (buf.length > 1 << 22) {
          await handle!.write(buf);
          buf = '';
        }
      }
      if (buf) await handle!.write(buf);
      if (!single) await end();
    }
    await end();
  } catch (e) {
    await handle?.close();
    if (tmp) await rm(tmp, { force: true });
    throw e;
  }
  io.out(`exported ${rows} rollouts from ${parts.length} ${parts.length === 1 ? 'part' : 'parts'} of ${src} to ${out}${bad ? ` (${bad} malformed, skipped)` : ''}\n`);
  return bad ? 2 : 0;
}
