/**
 * prime-rl's token exports (`trainer.enable_token_export`; src/prime_rl/trainer/rl/token_export.py, schema v1):
 * `<output_dir>/token_exports/step_<step>/rank_<rank>.jsonl` (an earlier layout: `token_exports/rank_<rank>.jsonl`
 * holding every step), one JSON object per exported micro-sequence: `schema_version`, `step`, `rank`, `micro_step`,
 * `micro_sequence_idx`, `export_sequence_idx`, `env_name`, and per token `token_ids`, `position_ids`, `loss_mask`
 * (booleans), `advantages`, `inference_logprobs` (the sampler's), `trainer_logprobs`, `entropy`, `mismatch_kl`,
 * `log_importance_ratio`, `importance_ratio`, `prob_delta`, `is_masked`, `is_masked_high`, `is_masked_low`,
 * `rl_weights`, `ce_weights`, `ref_kl_weights` (null where not computed). A micro-sequence is packed: several
 * samples back to back, each starting where `position_ids` goes back to 0. Log-probs are aligned with the ids
 * (prime-rl shifts them right after computing them on shifted labels). A `STABLE` file in a step directory says
 * every rank has flushed it. No rewards, groups or roles are exported.
 */
import { readdir, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { LocatedIssue } from '../../run/format';
import { readJsonLines, SampleError, type TokenSample } from './sample';

export type SampleItem = { sample: TokenSample; issues?: undefined } | { sample?: undefined; issues: LocatedIssue[] };

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const bit = (v: unknown): number => (v === true || v === 1 ? 1 : 0);

async function isDir(p: string): Promise<boolean> {
  return stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

/**
 * The export directories a path stands for: itself (a `token_exports/` or a `step_N/`), its `token_exports/`, or
 * the `<run_id>/token_exports/` of each run under it (prime-rl's multi-run layout).
 */
async function exportDirs(path: string): Promise<string[]> {
  if (!(await isDir(path))) return [];
  if (await isDir(join(path, 'token_exports'))) return [join(path, 'token_exports')];
  if (/^(token_exports|step_\d+)$/.test(basename(path))) return [path];
  const runs: string[] = [];
  for (const n of (await readdir(path).catch(() => [] as string[])).sort())
    if (await isDir(join(path, n, 'token_exports'))) runs.push(join(path, n, 'token_exports'));
  return runs.length ? runs : [path];
}

/** The step of a file (`step_<N>/rank_R.jsonl`), if its path says it. */
export function primeRlStepOf(file: string): number | undefined {
  const m = /step_(\d+)[\\/]rank_\d+\.jsonl$/.exec(file);
  return m ? Number(m[1]) : undefined;
}

/** The export files of a path, by step then rank; with `stableOnly`, only steps every rank has flushed (a live run). */
export async function primeRlFiles(path: string, stableOnly = false): Promise<string[]> {
  if (!(await isDir(path))) return [path];
  const rank = (n: string) => Number(/rank_(\d+)\.jsonl$/.exec(n)?.[1] ?? 0);
  const out: string[] = [];
  for (const dir of await exportDirs(path)) {
    const names = await readdir(dir).catch(() => [] as string[]);
    out.push(
      ...names
        .filter((n) => /^rank_\d+\.jsonl$/.test(n))
        .sort((a, b) => rank(a) - rank(b))
        .map((n) => join(dir, n)),
    );
    if (/^step_\d+$/.test(basename(dir))) continue; // a step directory itself
    const steps = names.filter((n) => /^step_\d+$/.test(n)).sort((a, b) => Number(a.slice(5)) - Number(b.slice(5)));
    for (const s of steps) {
      const files = await readdir(join(dir, s)).catch(() => [] as string[]);
      if (stableOnly && !files.includes('STABLE')) continue;
      out.push(
        ...files
          .filter((n) => /^rank_\d+\.jsonl$/.test(n))
          .sort((a, b) => rank(a) - rank(b))
          .map((n) => join(dir, s, n)),
      );
    }
  }
  return out;
}

const ARRAYS: [keyof NonNullable<TokenSample['arrays']>, string][] = [
  ['rollout_logprob', 'inference_logprobs'],
  ['logprob', 'trainer_logprobs'],
  ['entropy', 'entropy'],
  ['advantage', 'advantages'],
];
/** The per-token arrays kept as counts in meta (how many tokens each flag was set on). */
const FLAGS = ['is_masked', 'is_masked_high', 'is_masked_low'];

function listField(o: Record<string, unknown>, k: string, n: number, required: boolean): unknown[] | undefined {
  const v = o[k];
  if (v === undefined || v === null) {
    if (required) throw new SampleError(k, 'missing (a list per token)');
    return undefined;
  }
  if (!Array.isArray(v)) throw new SampleError(k, `expected a list per token, got ${typeof v}`);
  if (n >= 0 && v.length !== n) throw new SampleError(k, `has ${v.length} entries but token_ids has ${n}`);
  return v;
}

/** The samples packed in one exported line: split where position_ids returns to 0. */
export function primeRlSamples(o: Record<string, unknown>, file: string, line: number): TokenSample[] {
  const ids = listField(o, 'token_ids', -1, true)!;
  const n = ids.length;
  const lossMask = listField(o, 'loss_mask', n, true)!.map(bit);
  const positions = listField(o, 'position_ids', n, false);
  const arrays = ARRAYS.map(([ours, theirs]) => [ours, listField(o, theirs, n, false)] as const);
  const present = Object.keys(o).filter((k) => Array.isArray(o[k]) && (o[k] as unknown[]).some((x) => x !== null));
  const step = num(o.step) ?? primeRlStepOf(file);
  const rank = num(o.rank) ?? Number(/rank_(\d+)\.jsonl$/.exec(file)?.[1] ?? NaN);
  const starts = [0];
  if (positions) for (let i = 1; i < n; i++) if (positions[i] === 0) starts.push(i);
  const out: TokenSample[] = [];
  for (let k = 0; k < starts.length; k++) {
    const a = starts[k]!;
    const b = starts[k + 1] ?? n;
    const mask = lossMask.slice(a, b);
    if (!mask.includes(1)) continue; // padding or a sample with nothing trained (prime-rl exports none of those)
    const flags: Record<string, number> = {};
    for (const f of FLAGS) {
      const v = o[f];
      if (Array.isArray(v) && v.length === n) flags[f] = v.slice(a, b).filter((x) => x === true || x === 1).length;
    }
    out.push({
      engine: 'prime-rl',
      file,
      line,
      ...(starts.length > 1 ? { part: k } : {}),
      ...(step !== null && step !== undefined ? { step } : {}),
      ...(Number.isFinite(rank) ? { rank: rank as number } : {}),
      ids: ids.slice(a, b) as number[],
      loss_mask: mask,
      arrays: Object.fromEntries(arrays.filter(([, v]) => v).map(([ours, v]) => [ours, v!.slice(a, b).map(num)])),
      engine_arrays: present,
      meta: {
        prime_rl: {
          ...(typeof o.env_name === 'string' ? { env_name: o.env_name } : {}),
          ...(num(o.micro_step) !== null ? { micro_step: o.micro_step } : {}),
          ...(num(o.micro_sequence_idx) !== null ? { micro_sequence_idx: o.micro_sequence_idx } : {}),
          ...(num(o.export_sequence_idx) !== null ? { export_sequence_idx: o.export_sequence_idx } : {}),
          ...(num(o.schema_version) !== null ? { schema_version: o.schema_version } : {}),
          ...(typeof o.training_mode === 'string' ? { training_mode: o.training_mode } : {}),
          ...flags,
        },
      },
    });
  }
  return out;
}

/** Token samples of prime-rl exports, in order; a malformed line is an issue (file, line, field) and the rest go on. */
export async function* readPrimeRl(path: string, files?: string[]): AsyncGenerator<SampleItem> {
  for (const file of files ?? (await primeRlFiles(path)))
    yield* readJsonLines(file, 'a prime-rl token export line', (o, line) =>
      primeRlSamples(o, file, line).map((sample) => ({ sample })),
    );
}
