/**
 * The GRPO group view's model (src/core/audit/groups.ts) on crafted groups: samples side by side, where their
 * streams part, and why a zero-variance group is one.
 */
import assert from 'node:assert/strict';
import { groupViews, type LocatedRollout, sampleAdvantage, zeroVarianceReason } from '../../src/core/audit';
import type { Rollout, TokenRole } from '../../src/core/run/format';

const at = (record: Rollout, line: number): LocatedRollout => ({ record, file: 'step-000003.jsonl', line });
const base = (o: Partial<Rollout>): Rollout => ({
  v: 2,
  id: `r${o.sample}`,
  step: 3,
  split: 'train',
  group: 7,
  question: 'capital of France?',
  golden: ['Paris'],
  prompt: 'Q: capital of France?\n',
  response: '',
  ...o,
});
const answer = (a: string) => `<think>t</think><answer>${a}</answer>`;
/** Token arrays: the prompt's ids [1, 2], then the given generated ids, a GRPO advantage broadcast over them. */
const tokens = (gen: number[], advantage: number) => {
  const ids = [1, 2, ...gen];
  const role: TokenRole[] = ids.map((_, i) => (i < 2 ? 'prompt' : 'generated'));
  return {
    text: ids.map(String),
    ids,
    role,
    loss_mask: role.map((r) => (r === 'generated' ? 1 : 0)) as (0 | 1)[],
    advantage: ids.map((_, i) => (i < 2 ? null : advantage)),
  };
};

describe('audit: the GRPO group view', () => {
  it('samples side by side: reward, advantage, answer, EM, searches, finish, and where each leaves the first sample', () => {
    const g = groupViews([
      at(base({ sample: 1, reward: 0, response: answer('Lyon'), finish: 'answer', tokens: tokens([5, 6, 8], -1) }), 2),
      at(
        base({
          sample: 0,
          reward: 1,
          response: `<search>france</search>${answer('Paris')}`,
          finish: 'answer',
          tokens: tokens([5, 6, 7], 1),
        }),
        1,
      ),
      at(base({ id: 'other', group: 8, sample: 0, reward: 1, response: answer('x') }), 3),
    ]);
    assert.equal(g.length, 2);
    const v = g[0]!;
    assert.deepEqual(
      v.samples.map((s) => [
        s.sample,
        s.reward,
        s.advantage,
        s.answer,
        s.em,
        s.searches,
        s.finish,
        s.divergesAt,
        s.line,
      ]),
      [
        [0, 1, 1, 'Paris', 1, 1, 'answer', null, 1],
        [1, 0, -1, 'Lyon', 0, 0, 'answer', 4, 2],
      ],
    );
    assert.equal(v.divergeAt, 4, 'the streams share the prompt and two generated tokens');
    assert.equal(v.unit, 'tokens');
    assert.equal(v.zeroVariance, false);
    assert.equal(v.reason, undefined);
    assert.equal(v.rewardMean, 0.5);
    assert.equal(g[1]!.divergeAt, null, 'one sample: nothing to compare');
    assert.equal(g[1]!.zeroVariance, false, 'one sample is not a zero-variance group');
  });

  it('zero variance and its reason: all truncated, all invalid format, all correct, all wrong, merely equal', () => {
    const group = (...rs: Partial<Rollout>[]) => groupViews(rs.map((r, k) => at(base({ sample: k, ...r }), k + 1)))[0]!;
    const right = group({ reward: 1, response: answer('Paris') }, { reward: 1, response: answer('paris') });
    assert.deepEqual(
      [right.zeroVariance, right.reason, right.unit, right.divergeAt],
      [true, 'all-correct', 'chars', '<think>t</think><answer>'.length],
    );
    assert.equal(
      group({ reward: 0, response: answer('Lyon') }, { reward: 0, response: answer('Nice') }).reason,
      'all-wrong',
    );
    assert.equal(
      group({ reward: 0, response: 'Paris' }, { reward: 0, response: 'no tags' }).reason,
      'all-invalid-format',
    );
    assert.equal(
      group(
        { reward: 0, response: '<think>and so on', finish: 'length' },
        { reward: 0, response: '<think>more', finish: 'length' },
      ).reason,
      'all-truncated',
      'truncated comes first: it is why they are wrong and unformatted',
    );
    assert.equal(
      group({ reward: 0.2, response: answer('Paris') }, { reward: 0.2, response: answer('Lyon') }).reason,
      'equal-rewards',
    );
    assert.equal(
      group({ reward: 0, response: answer('Lyon') }, { response: answer('Nice') }).zeroVariance,
      false,
      'a reward not recorded: not known to be equal',
    );
    assert.equal(
      zeroVarianceReason([
        { finish: 'length', formatValid: true, em: 1 },
        { finish: 'answer', formatValid: true, em: 1 },
      ]),
      'all-correct',
    );
  });

  it('the advantage is read from the first scored trained token (prompt positions hold null or anything)', () => {
    const r = base({ sample: 0, tokens: { ...tokens([5], 0.7), advantage: [9, 9, 0.7] } });
    assert.equal(sampleAdvantage(r), 0.7);
    assert.equal(sampleAdvantage(base({ sample: 0 })), null);
  });
});
