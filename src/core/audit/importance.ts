/**
 * A preview of the off-policy corrections an engine can apply to the rollout-vs-trainer mismatch (DESIGN §7): which
 * trained tokens — or which whole sequences — a correction with cap C would clip or drop. Nothing is trained here; it
 * says what such a correction would do to the recorded rollouts.
 *
 * The importance ratio of a trained token is ρ_t = π_trainer(y_t) / π_rollout(y_t) = exp(logprob_t − rollout_logprob_t)
 * (src/core/audit/logprob.ts); of a sequence, ρ_seq = Π_t ρ_t = exp(Σ_t Δ_t) over its trained tokens.
 *
 * - Truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
 *   RL training"): the policy gradient is weighted by w = min(ρ, C). A token (or, at sequence level, a sequence)
 *   with ρ > C is **clipped**: its weight is C, not ρ.
 * - Masked importance sampling (MIS; the masked variant of the same correction, as in veRL's rollout correction
 *   `mode: mask`): a token (sequence) with ρ outside [1/C, C] is **dropped** from the loss (weight 0).
 *
 * Tokens with loss_mask 0, and trained tokens missing either log-prob, are never clipped or dropped: they are not
 * in the loss, or there is no ratio to correct.
 */
import type { ImportanceLevel, ImportancePreview } from '../protocol/replay';
import { logprobDeltas } from './logprob';

export type { ImportanceLevel, ImportancePreview };

export interface ImportanceOptions {
  /** Token-level ratios ρ_t, or the sequence-level ratio ρ_seq. Default token. */
  isLevel?: ImportanceLevel;
  /** The cap C (> 1): TIS clips ρ > C, MIS drops ρ outside [1/C, C]. Default 2 (the audit's [0.5, 2] band). */
  isCap?: number;
}

export const IMPORTANCE_DEFAULTS: Required<ImportanceOptions> = { isLevel: 'token', isCap: 2 };

type Numbers = readonly (number | null)[] | undefined;

/** What TIS and MIS with cap C would do to one rollout; null when the record lacks either log-prob array. */
export function importancePreview(
  tokens: { loss_mask: readonly number[]; logprob?: Numbers; rollout_logprob?: Numbers },
  options: ImportanceOptions = {},
): ImportancePreview | null {
  const deltas = logprobDeltas(tokens);
  if (!deltas) return null;
  const level = options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel;
  const cap = options.isCap ?? IMPORTANCE_DEFAULTS.isCap;
  if (!(cap > 1)) throw new RangeError(`the importance-sampling cap must be > 1 (got ${cap})`);
  const logCap = Math.log(cap);
  const scored: number[] = [];
  let sum = 0;
  for (let i = 0; i < deltas.length; i++) {
    const d = deltas[i];
    if (d === null || d === undefined || !Number.isFinite(d)) continue;
    scored.push(i);
    sum += d;
  }
  const out: ImportancePreview = {
    level,
    cap,
    clipped: [],
    dropped: [],
    seq_ratio: Math.exp(sum),
    scored: scored.length,
  };
  if (level === 'sequence') {
    // log ρ_seq against ±log C (exp(sum) may overflow; the comparison in log space does not)
    if (sum > logCap) out.clipped = scored;
    if (Math.abs(sum) > logCap) out.dropped = scored;
    return out;
  }
  for (const i of scored) {
    const d = deltas[i]!;
    if (d > logCap) out.clipped.push(i);
    if (Math.abs(d) > logCap) out.dropped.push(i);
  }
  return out;
}
