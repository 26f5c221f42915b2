// The shortcuts the inspector's facts take (they are most of its CPU over a big run) give the long way's answers:
// answerIn's word test before normalising a whole passage, pythonBlank for `not s.strip()`, a token-store record read
// without its token texts saying so rather than throwing when asked.
import assert from 'node:assert/strict';
import { rng } from '../../bench/util'; // mulberry32: the same inputs in every run
import { answerIn, normalizeAnswer } from '../../src/core/rewards/normalize';
import { tokenTextUnread } from '../../src/core/run/columns';
import { type Rollout, rolloutSpans } from '../../src/core/run/format';
import { StoreStep, writeStoreStep } from '../../src/core/store/tokenStore';
import { pythonBlank, pythonStrip } from '../../src/core/tags/searchr1';
import { scratchDir } from '../support/scratch';

describe("the facts' shortcuts", () => {
  // pieces that make normalisation matter: punctuation inside words, articles, Unicode letters and spaces, case
  const PIECES = [
    'paris',
    'Paris',
    'u.s.',
    'us',
    'the',
    'a',
    'an',
    'théa',
    'an_',
    '—',
    ' ',
    '  ',
    '\u00a0',
    '\n',
    ',',
    "'s",
    'x-y',
    'xy',
    'É',
    'é',
    'The',
  ];

  it('answerIn: the same answer as normalising the whole text, on random texts and answers', () => {
    const r = rng(7);
    const pick = (n: number) => Array.from({ length: n }, () => PIECES[Math.floor(r() * PIECES.length)]!).join('');
    const longWay = (text: string, golden: string[]) => {
      const t = ` ${normalizeAnswer(text)} `;
      return golden.some((g) => {
        const n = normalizeAnswer(g);
        return n !== '' && t.includes(` ${n} `);
      })
        ? 1
        : 0;
    };
    let hits = 0;
    for (let i = 0; i < 20_000; i++) {
      const text = pick(1 + Math.floor(r() * 30));
      const golden = Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(1 + Math.floor(r() * 4)));
      const want = longWay(text, golden);
      hits += want;
      assert.equal(answerIn(text, golden), want, `${JSON.stringify(text)} ${JSON.stringify(golden)}`);
    }
    assert.ok(hits > 500 && hits < 19_500, `both answers drawn (${hits} found)`);
    assert.equal(answerIn('In the U.S., Paris is…', ['us']), 1);
    assert.equal(answerIn('Parisian life', ['Paris']), 0);
  });

  it('pythonBlank is `not s.strip()`', () => {
    for (const s of ['', ' ', '\n\t', '\u00a0\u3000', '\x1c', ' a ', 'a', '\u200b', ' \u2028x'])
      assert.equal(pythonBlank(s), !pythonStrip(s), JSON.stringify(s));
  });

  it('a store record read without its token texts says so; read with them, its spans come from the tokens', async () => {
    const dir = scratchDir('sas-facts-text-');
    const rec: Rollout = {
      v: 2,
      id: 'r',
      prompt: 'P',
      response: '<search> q </search>\n\n<information>Doc 1(Title: T) t</information>',
      tokens: {
        text: ['P', '<search> q </search>', '\n\n<information>Doc 1(Title: T) t</information>'],
        ids: [1, 2, 3],
        role: ['prompt', 'generated', 'retrieved'],
        loss_mask: [0, 1, 0],
      },
    };
    const stepDir = await writeStoreStep(dir, 'step-000001', [rec]);
    const step = await StoreStep.open(stepDir);
    const audit = (await step.rows(0, 1, 'audit'))[0]!.record!;
    assert.equal(tokenTextUnread(audit.tokens), true);
    assert.throws(() => audit.tokens!.text, /tokens\.text was not read/);
    assert.equal(rolloutSpans(audit), undefined);
    const all = (await step.rows(0, 1, 'all'))[0]!.record!;
    assert.equal(tokenTextUnread(all.tokens), false);
    assert.deepEqual(
      rolloutSpans(all)?.map((s) => s.role),
      ['generated', 'retrieved'],
    );
    // texts set by a reader: no longer unread
    audit.tokens!.text = ['P', 'x', 'y'];
    assert.equal(tokenTextUnread(audit.tokens), false);
  });
});
