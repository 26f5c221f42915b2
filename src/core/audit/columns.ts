/**
 * The audit's token checks over a token store's typed columns (src/core/run/columns.ts): the same results as
 * maskLeaks, checkLogprobs and importancePreview over the record's arrays (test/unit/token-store.test.ts compares
 * them on random records), without building those arrays — the inspector's facts and `audit` over a store spend
 * their time on the checks, not on allocating and collecting a few arrays per rollout.
 */
import type { ImportancePreview } from '../protocol/replay';
import type { TokenColumnsView } from '../run/columns';
import { IMPORTANCE_DEFAULTS, type ImportanceOptions } from './importance';
import { LOGPROB_DEFAULTS, type LogprobCheck, type LogprobOptions, nucleusExcess, processedNucleus } from './logprob';
import type { MaskLeaks } from './masks';

const GENERATED = 0;

/** maskLeaks (masks.ts) over the columns, with auditMask's counts of trained and generated tokens. */
export function columnsMaskLeaks(
  c: TokenColumnsView,
  engineMask?: readonly number[],
  excluded = false,
): MaskLeaks & { trained: number; generated: number } {
  const leaks: number[] = [];
  let trained = 0;
  let generated = 0;
  const { role, loss_mask: mask } = c;
  const n = Math.min(role.length, mask.length);
  for (let i = 0; i < n; i++) {
    const gen = role[i] === GENERATED;
    const m = mask[i]!;
    if (m === 1) trained++;
    if (gen) generated++;
    if (m !== (gen ? 1 : 0) && !(excluded && gen)) leaks.push(i);
  }
  const mismatch: number[] = [];
  if (engineMask) {
    const k = Math.min(engineMask.length, mask.length);
    for (let i = 0; i < k; i++) if (engineMask[i] !== mask[i]) mismatch.push(i);
    for (let i = k; i < Math.max(engineMask.length, mask.length); i++) mismatch.push(i);
  }
  const all = mismatch.length ? [...new Set([...leaks, ...mismatch])].sort((a, b) => a - b) : leaks;
  return { leaks: all, mask_mismatch: mismatch, engine_mask: engineMask !== undefined, trained, generated };
}

/** checkLogprobs (logprob.ts) over the columns: null when either log-prob column is absent. */
export function columnsLogprobs(
  c: TokenColumnsView,
  options: LogprobOptions = {},
  meta?: unknown,
): LogprobCheck | null {
  const { logprob, rollout_logprob: rollout, loss_mask: mask } = c;
  if (!logprob || !rollout) return null;
  const lo = Math.log(options.ratioLow ?? LOGPROB_DEFAULTS.ratioLow);
  const hi = Math.log(options.ratioHigh ?? LOGPROB_DEFAULTS.ratioHigh);
  const nucleus = processedNucleus(meta);
  const out: LogprobCheck = {
    max_abs_diff: 0,
    mean_abs_diff: 0,
    flagged: [],
    compared: 0,
    unscored: 0,
    seq_log_ratio: 0,
    ...(nucleus !== null ? { nucleus_top_p: nucleus } : {}),
  };
  let sum = 0;
  const n = Math.min(mask.length, logprob.length, rollout.length);
  for (let i = 0; i < n; i++) {
    if (mask[i] !== 1) continue;
    const a = logprob[i]!;
    const b = rollout[i]!;
    if (!Number.isFinite(a) || !Number.isFinite(b)) {
      out.unscored++;
      continue;
    }
    const d = nucleusExcess(a - b, nucleus);
    out.compared++;
    const ad = Math.abs(d);
    sum += ad;
    out.seq_log_ratio += d;
    if (ad > out.max_abs_diff) out.max_abs_diff = ad;
    if (d < lo || d > hi) out.flagged.push(i);
  }
  out.mean_abs_diff = out.compared ? sum / out.compared : 0;
  return out;
}

/** importancePreview (importance.ts) over the columns. */
export function columnsImportance(c: TokenColumnsView, options: ImportanceOptions = {}): ImportancePreview | null {
  const { logprob, rollout_logprob: rollout, loss_mask: mask } = c;
  if (!logprob || !rollout) return null;
  const level = options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel;
  const cap = options.isCap ?? IMPORTANCE_DEFAULTS.isCap;
  if (!(cap > 1)) throw new RangeError(`the importance-sampling cap must be > 1 (got ${cap})`);
  const logCap = Math.log(cap);
  const n = mask.length;
  let sum = 0;
  let scored = 0;
  const out: ImportancePreview = { level, cap, clipped: [], dropped: [], seq_ratio: 1, scored: 0 };
  for (let i = 0; i < n; i++) {
    if (mask[i] !== 1) continue;
    const d = logprob[i]! - rollout[i]!;
    if (!Number.isFinite(d)) continue;
    scored++;
    sum += d;
    if (level === 'token') {
      if (d > logCap) out.clipped.push(i);
      if (Math.abs(d) > logCap) out.dropped.push(i);
    }
  }
  out.seq_ratio = Math.exp(sum);
  out.scored = scored;
  if (level === 'sequence' && (sum > logCap || Math.abs(sum) > logCap)) {
    const all: number[] = [];
    for (let i = 0; i < n; i++) if (mask[i] === 1 && Number.isFinite(logprob[i]! - rollout[i]!)) all.push(i);
    if (sum > logCap) out.clipped = all;
    if (Math.abs(sum) > logCap) out.dropped = all;
  }
  return out;
}
