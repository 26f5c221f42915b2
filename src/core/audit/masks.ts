/**
 * Leaks (DESIGN §6–7): the loss mask against the role of each token — the project's one mask audit
 * ({@link auditMask}, src/core/inspect/audit.ts) — and, when an engine's recorder keeps the mask the engine trained
 * with beside ours (`meta.engine_loss_mask`, docs/run-format.md), the two masks against each other: wherever they
 * disagree the engine trained on something other than what the roles say.
 */
import { auditMask } from '../inspect/audit';
import type { TokenRole } from '../run/format';

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

export function maskLeaks(tokens: { role: readonly TokenRole[]; loss_mask: readonly number[] }, engineMask?: readonly number[]): MaskLeaks {
  const { leaks } = auditMask(tokens.role, tokens.loss_mask);
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
