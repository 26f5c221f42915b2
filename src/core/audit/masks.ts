/**
 * Leaks (DESIGN §6–7): the loss mask against the role of each token — the project's one mask audit
 * ({@link auditMask}: the inspector's, the replay's and the run audit's) — and, when an engine's recorder keeps the
 * mask the engine trained with beside ours (`meta.engine_loss_mask`, docs/run-format.md), the two masks against each
 * other: wherever they disagree the engine trained on something other than what the roles say.
 *
 * The mask audit (DESIGN §6): the loss mask must be 1 exactly on the tokens the policy generated and 0 on the
 * prompt, the retrieved information and the environment's feedback. A token whose mask disagrees with its role is
 * a *leak*: a retrieved token with mask 1 trains the policy to produce documents it only read (the bug
 * Search-R1's masking exists to prevent); a generated token with mask 0 is a token the policy was never trained on.
 *
 * With masking turned off on purpose (the ablation, `algorithm.loss_masking: false`) every non-generated response
 * token is a leak by this definition: the audit reports what was trained on, whatever the intent.
 *
 * A sample its engine left out of the loss as a whole (`meta.sample_excluded`: NeMo-RL's `sample_loss_mask` 0,
 * slime's `remove_sample`) has a mask of 0 everywhere: nothing of it was trained on, so nothing of it leaked, and its
 * generated tokens are not `generated-masked` — they were not trained on because the sample was not.
 */
import type { LeakKind, MaskAudit } from '../protocol/replay';
import type { TokenRole } from '../run/format';

export type { LeakKind, MaskAudit };

/** The mask the design asks for, for one role. */
export function expectedMask(role: TokenRole): 0 | 1 {
  return role === 'generated' ? 1 : 0;
}

export function leakKind(role: TokenRole, mask: number): LeakKind | null {
  if (mask === expectedMask(role)) return null;
  if (role === 'generated') return 'generated-masked';
  return role === 'retrieved'
    ? 'trained-on-retrieved'
    : role === 'prompt'
      ? 'trained-on-prompt'
      : 'trained-on-feedback';
}

/**
 * Why a record's engine left its whole sample out of the loss (`meta.sample_excluded`, written by the readers of
 * NeMo-RL's and slime's dumps), if it did.
 */
export function sampleExcluded(meta: Record<string, unknown> | undefined): string | undefined {
  const x = meta?.sample_excluded;
  return typeof x === 'string' && x ? x : undefined;
}

/**
 * Audits token arrays; arrays of different lengths are audited over their common prefix (the schema reports the
 * rest). `excluded`: the sample was left out of the loss as a whole ({@link sampleExcluded}), so a generated token
 * with mask 0 is not a leak.
 */
export function auditMask(role: readonly TokenRole[], lossMask: readonly number[], excluded = false): MaskAudit {
  const byKind: Record<LeakKind, number> = {
    'trained-on-retrieved': 0,
    'trained-on-prompt': 0,
    'trained-on-feedback': 0,
    'generated-masked': 0,
  };
  const leaks: number[] = [];
  let trained = 0;
  let generated = 0;
  const n = Math.min(role.length, lossMask.length);
  for (let i = 0; i < n; i++) {
    const r = role[i]!;
    const m = lossMask[i]!;
    if (m === 1) trained++;
    if (r === 'generated') generated++;
    const k = leakKind(r, m);
    if (k && !(excluded && k === 'generated-masked')) {
      leaks.push(i);
      byKind[k]++;
    }
  }
  return { leaks, byKind, trained, generated };
}

/** The next (or previous) leak after `from`, wrapping around; undefined when there is none. */
export function nextLeak(leaks: readonly number[], from: number, direction: 1 | -1 = 1): number | undefined {
  if (!leaks.length) return undefined;
  if (direction === 1) return leaks.find((i) => i > from) ?? leaks[0];
  for (let k = leaks.length - 1; k >= 0; k--) if (leaks[k]! < from) return leaks[k];
  return leaks[leaks.length - 1];
}

export interface MaskLeaks {
  /** Token indices whose loss_mask disagrees with their role, or where the engine's mask disagrees with loss_mask; ascending. */
  leaks: number[];
  /** Of those, the indices where the engine's mask and loss_mask disagree (empty when the record has no engine mask). */
  mask_mismatch: number[];
  /** Whether the record carries an engine's mask. */
  engine_mask: boolean;
}

/** The engine's mask a record carries (`meta.engine_loss_mask`: an array of 0/1), if any. */
export function engineMaskOf(meta: Record<string, unknown> | undefined): number[] | undefined {
  const m = meta?.engine_loss_mask;
  return Array.isArray(m) && m.every((x) => x === 0 || x === 1) ? (m as number[]) : undefined;
}

export function maskLeaks(
  tokens: { role: readonly TokenRole[]; loss_mask: readonly number[] },
  engineMask?: readonly number[],
  excluded = false,
): MaskLeaks {
  const { leaks } = auditMask(tokens.role, tokens.loss_mask, excluded);
  const mismatch: number[] = [];
  if (engineMask) {
    const n = Math.min(engineMask.length, tokens.loss_mask.length);
    for (let i = 0; i < n; i++) if (engineMask[i] !== tokens.loss_mask[i]) mismatch.push(i);
    // an engine mask of another length disagrees on every token only one of them has
    for (let i = n; i < Math.max(engineMask.length, tokens.loss_mask.length); i++) mismatch.push(i);
  }
  const all = mismatch.length ? [...new Set([...leaks, ...mismatch])].sort((a, b) => a - b) : leaks;
  return { leaks: all, mask_mismatch: mismatch, engine_mask: engineMask !== undefined };
}
