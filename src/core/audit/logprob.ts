/**
 * The log-prob microscope (DESIGN §7): the gap between the rollout engine's log-probs (`tokens.rollout_logprob`, at
 * sampling time) and the trainer's (`tokens.logprob`, the old log-prob of the update), over trained tokens only.
 *
 * Δ = logprob − rollout_logprob, and the importance ratio r = exp(Δ) = π_trainer / π_rollout, the weight truncated
 * importance sampling (TIS) caps and masked importance sampling (MIS) drops outside a band. Tokens with loss_mask 0
 * are never compared: their stored values may be anything (0, or null where nothing was sampled) — counting them is
 * how one framework showed "tens of nats" of divergence that did not exist. A null or missing value on a trained
 * token is skipped too (not recorded), and counted.
 *
 * What the rollout log-probs are (`meta.rollout_logprob_kind`, written by the TRL and veRL engines): "raw" (or no
 * kind) is log π_T, the temperature-scaled softmax over the whole vocabulary, what the trainer computes; "processed"
 * is vLLM's processed_logprobs of a nucleus (`meta.rollout_top_p` p < 1): log π_T − log Z renormalised over the
 * nucleus, whose mass Z is at least p. Against those, Δ sits in [log p, 0] with no mismatch at all, so the check
 * measures a processed record's Δ from that band (its `excess`: 0 inside, the distance outside) — the part the
 * nucleus does not explain — and says so (`nucleus_top_p`).
 */

export interface LogprobOptions {
  /** The band of acceptable ratios exp(Δ); a trained token outside it is flagged. Default [0.5, 2]. */
  ratioLow?: number;
  ratioHigh?: number;
}

export const LOGPROB_DEFAULTS: Required<LogprobOptions> = { ratioLow: 0.5, ratioHigh: 2 };

export interface LogprobCheck {
  /** max |Δ| over the compared tokens (0 when none). */
  max_abs_diff: number;
  /** mean |Δ| over the compared tokens (0 when none). */
  mean_abs_diff: number;
  /** Trained-token indices (into tokens.ids) whose ratio exp(Δ) lies outside [ratioLow, ratioHigh], ascending. */
  flagged: number[];
  /** Trained tokens with both values recorded. */
  compared: number;
  /** Trained tokens where either value is missing or null. */
  unscored: number;
  /** The sequence-level log-ratio Σ Δ over compared tokens (its exp is the sequence-level importance ratio). */
  seq_log_ratio: number;
  /** Set when the rollout log-probs are a nucleus's processed ones (top_p): the figures above are then Δ's excess over
   * the band [log top_p, 0] the nucleus explains. */
  nucleus_top_p?: number;
}

/** The nucleus a record's rollout log-probs were renormalised over (meta.rollout_logprob_kind "processed" and
 * meta.rollout_top_p < 1), or null when they are comparable with the trainer's as they are. */
export function processedNucleus(meta: unknown): number | null {
  if (!meta || typeof meta !== 'object') return null;
  const m = meta as { rollout_logprob_kind?: unknown; rollout_top_p?: unknown };
  const p = m.rollout_top_p;
  return m.rollout_logprob_kind === 'processed' && typeof p === 'number' && p > 0 && p < 1 ? p : null;
}

/** Δ less the part a nucleus p explains: 0 inside [log p, 0], the distance to the band outside it. */
export function nucleusExcess(d: number, topP: number | null): number {
  if (topP === null) return d;
  const low = Math.log(topP);
  return d > 0 ? d : d < low ? d - low : 0;
}

type Numbers = readonly (number | null)[] | undefined;

/** Compares the two log-prob arrays over loss_mask 1; null when the record lacks either array. `meta`: the record's
 * (its rollout_logprob_kind, see above). */
export function checkLogprobs(
  tokens: { loss_mask: readonly number[]; logprob?: Numbers; rollout_logprob?: Numbers },
  options: LogprobOptions = {},
  meta?: unknown,
): LogprobCheck | null {
  const { logprob, rollout_logprob: rollout, loss_mask: mask } = tokens;
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
    const a = logprob[i];
    const b = rollout[i];
    if (typeof a !== 'number' || typeof b !== 'number' || !Number.isFinite(a) || !Number.isFinite(b)) {
      out.unscored++;
      continue;
    }
    const d = nucleusExcess(a - b, nucleus);
    out.compared++;
    sum += Math.abs(d);
    out.seq_log_ratio += d;
    if (Math.abs(d) > out.max_abs_diff) out.max_abs_diff = Math.abs(d);
    if (d < lo || d > hi) out.flagged.push(i);
  }
  out.mean_abs_diff = out.compared ? sum / out.compared : 0;
  return out;
}

/** Δ per token for the replay's overlay: null where the token is not trained or either value is missing. */
export function logprobDeltas(tokens: {
  loss_mask: readonly number[];
  logprob?: Numbers;
  rollout_logprob?: Numbers;
}): (number | null)[] | null {
  const { logprob, rollout_logprob: rollout, loss_mask: mask } = tokens;
  if (!logprob || !rollout) return null;
  return mask.map((m, i) => {
    const a = logprob[i];
    const b = rollout[i];
    return m === 1 && typeof a === 'number' && typeof b === 'number' ? a - b : null;
  });
}
