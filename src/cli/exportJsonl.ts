/**
 * `search-agent-studio export jsonl <run-dir | step-dir | rollouts.jsonl> --out <F.jsonl | DIR>`: rollouts as v2
 * JSONL records, from the token store (or JSONL: copied record by record, validated). `--out` a `.jsonl` file: every
 * row in order in one file; otherwise a directory: one file per step (`step-000042.jsonl`, `val-step-000042.jsonl`),
 * the layout `train.record.format: "jsonl"` writes, each step's recording (`step-000042.recording.json`: recorded of
 * its rollouts) beside it. Numbers are the store's float32 values, printed as the shortest
 * decimal that reads back as the same float32. Each file is written to a temporary name and renamed.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { UnreadableInput } from '../core/importers';
import type { Rollout } from '../core/run/format';
import { formatIssue } from '../core/run/format';
import { RECORDING_SUFFIX, readPart, rolloutFiles, stepRecording } from '../core/store/rollouts';
import { STORE_FILES, shortFloat32 } from '../core/store/tokenStore';
import type { CliIo } from './command';
import { checkOutputDir, OutputError, OutputFile, writeErrorReason } from './output';

const STORE_PATHS = Object.values(STORE_FILES);
/** What a directory export of a run writes: a step's JSONL and its recording. */
const EXPORTED = /^(val-)?step-\d+(\.jsonl|\.recording\.json)$/;

/** A record as one JSONL line: token numbers of a store as their shortest float32 decimals. */
export function recordLine(r: Rollout): string {
  if (!r.tokens) return JSON.stringify(r);
  const t = r.tokens as Record<string, unknown>;
  const tokens: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(t))
    tokens[k] =
      k === 'text' || k === 'ids' || k === 'role' || k === 'loss_mask' || !Array.isArray(v)
        ? v
        : v.map((x: number | null) => (x === null ? null : shortFloat32(x)));
  return JSON.stringify({ ...r, tokens });
}

export async function exportJsonl(src: string, out: string, io: CliIo): Promise<number> {
  const parts = await rolloutFiles(src);
  // nothing recorded (a run stopped before its first step's rollouts, a directory without any): no empty file that
  // would pass for an export, and the exit status of `audit`'s "nothing to audit"
  if (!parts.length)
    throw new UnreadableInput(src, 'no recorded rollouts to export (no rollouts/ step or .jsonl file)');
  const single = out.endsWith('.jsonl');
  // Each output file refuses to be one of the parts read, is written to a temporary name and renamed (output.ts).
  const inputs = parts.flatMap((p) => (p.endsWith('.jsonl') ? [p] : STORE_PATHS.map((f) => join(p, f))));
  // the files a directory export writes: one per part, named as the part (and its recording)
  const names = new Set(parts.map((p) => `${basename(p).replace(/\.jsonl$/, '')}.jsonl`));
  if (!single) {
    // a folder of the user's is never written into: new, empty, or an earlier export's (its step files only)
    await checkOutputDir(out, {
      inputs: parts,
      ours: async (d) => (await readdir(d)).every((n) => n.startsWith('.') || EXPORTED.test(n) || names.has(n)),
      what: 'an earlier export of step files',
    });
    await mkdir(out, { recursive: true }).catch((e: unknown) => {
      throw new OutputError(out, writeErrorReason(e));
    });
  }
  let rows = 0;
  let bad = 0;
  let file: OutputFile | undefined;
  try {
    if (single) file = await OutputFile.create(out, inputs);
    for (const part of parts) {
      if (!single) file = await OutputFile.create(join(out, `${basename(part).replace(/\.jsonl$/, '')}.jsonl`), inputs);
      let unreadable = false;
      for await (const row of readPart(part)) {
        if (!row.record) {
          bad++;
          unreadable ||= row.errors.some((e) => e.unreadable);
          for (const e of row.errors.slice(0, 1)) io.err(`${formatIssue(e)} (skipped)\n`);
          continue;
        }
        await file!.write(`${recordLine(row.record)}\n`);
        rows++;
      }
      if (single) continue;
      // a step that could not be read whole gets no file (one with part of it would pass for the step)
      if (unreadable) {
        await file!.abort();
        io.err(`${basename(part)}: not exported (the step could not be read)\n`);
      } else {
        await file!.commit();
        // what the step recorded of its rollouts, as the recorder writes it beside a JSONL step: a sampled store
        // exported stays labelled as a sample
        const recording = await stepRecording(part);
        if (recording) {
          const side = await OutputFile.create(
            join(out, `${basename(part).replace(/\.jsonl$/, '')}${RECORDING_SUFFIX}`),
            inputs,
          );
          try {
            await side.write(JSON.stringify(recording));
            await side.commit();
          } finally {
            await side.abort();
          }
        }
      }
    }
    await file?.commit();
  } finally {
    await file?.abort();
  }
  io.out(
    `exported ${rows} rollouts from ${parts.length} ${parts.length === 1 ? 'part' : 'parts'} of ${src} to ${out}${bad ? ` (${bad} malformed, skipped)` : ''}\n`,
  );
  return bad ? 2 : 0;
}
