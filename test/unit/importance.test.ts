/**
 * The importance-sampling preview (src/core/audit/importance.ts): what truncated IS (w = min(ρ, C)) would clip and
 * masked IS (drop ρ outside [1/C, C]) would drop, token by token and by sequence; masked tokens are never touched.
 */
import assert from 'node:assert/strict';
import { importancePreview } from '../../src/core/audit';

describe('audit: the importance-sampling preview (TIS / MIS)', () => {
  // Δ on trained tokens: +1 (ρ 2.72), −1 (ρ 0.37), +0.1, −0.5 (ρ 0.61); masked tokens hold anything
  const tokens = {
    loss_mask: [0, 1, 1, 1, 1, 0, 1],
    rollout_logprob: [null, -2, -1, -1, -1, -40, null],
    logprob: [0, -1, -2, -0.9, -1.5, 0, -1],
  };

  it('token level, cap 2: TIS clips ρ > 2 only; MIS drops ρ outside [0.5, 2]; masked and unscored tokens never', () => {
    const p = importancePreview(tokens)!;
    assert.equal(p.level, 'token');
    assert.equal(p.cap, 2);
    assert.deepEqual(p.clipped, [1]);
    assert.deepEqual(p.dropped, [1, 2]);
    assert.equal(p.scored, 4);
    assert.ok(Math.abs(p.seq_ratio - Math.exp(1 - 1 + 0.1 - 0.5)) < 1e-12);
  });

  it('a larger cap clips and drops less; a cap ≤ 1 is refused', () => {
    const p = importancePreview(tokens, { isCap: 2.5 })!;
    assert.deepEqual(p.clipped, [1]);
    assert.deepEqual(p.dropped, [1, 2]);
    const q = importancePreview(tokens, { isCap: 3 })!;
    assert.deepEqual([q.clipped, q.dropped], [[], []]);
    assert.deepEqual(importancePreview(tokens, { isCap: 1.5 })!.dropped, [1, 2, 4]);
    assert.throws(() => importancePreview(tokens, { isCap: 1 }), /cap must be > 1/);
  });

  it('sequence level: ρ_seq = exp(Σ Δ) decides for all its trained tokens at once', () => {
    const p = importancePreview(tokens, { isLevel: 'sequence' })!;
    assert.deepEqual([p.clipped, p.dropped], [[], []], 'ρ_seq = exp(−0.4) = 0.67 lies in [0.5, 2]');
    const low = importancePreview(tokens, { isLevel: 'sequence', isCap: 1.2 })!;
    assert.deepEqual(low.clipped, [], 'ρ_seq < 1: nothing to truncate');
    assert.deepEqual(low.dropped, [1, 2, 3, 4], 'ρ_seq = 0.67 < 1/1.2: MIS drops the whole sequence');
    const high = importancePreview(
      { loss_mask: [1, 1, 0], rollout_logprob: [-3, -3, 0], logprob: [-1, -1, -99] },
      { isLevel: 'sequence' },
    )!;
    assert.deepEqual(
      [high.clipped, high.dropped],
      [
        [0, 1],
        [0, 1],
      ],
    );
  });

  it('no preview without both log-prob arrays; a huge Σ Δ does not overflow the decision', () => {
    assert.equal(importancePreview({ loss_mask: [1], logprob: [-1] }), null);
    const n = 2000;
    const p = importancePreview(
      { loss_mask: Array(n).fill(1), rollout_logprob: Array(n).fill(-1), logprob: Array(n).fill(0) },
      { isLevel: 'sequence' },
    )!;
    assert.equal(p.clipped.length, n);
  });
});
