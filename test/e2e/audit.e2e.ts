/**
 * The instruments of issue 18 in real VS Code (code-server), on a fixture run whose model directory holds a real
 * byte-level BPE tokenizer.json the test writes: the inspector's `drift` and `is.dropped` filters; the replay's drift
 * marker with both sides, the Δ overlay (masked tokens excluded, ratio flags) and the importance-sampling preview;
 * the replay's per-token strips (issue 46); the dashboard's mismatch chart, an alarm in the alarm lane above the charts, and the GRPO group view opened from the
 * zero-variance chart and from the palette (Show GRPO Groups…: the run, then the step).
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Frame } from 'playwright-core';
import type { Rollout } from '../../src/core/run/format';
import { loadTokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';
import { recordOf, writeTokenizerDir } from '../unit/bpe';
import { boxOf, CodeServerSession, ROOT, until } from './harness';

const WORDS = [' Paris', ' Lyon', 'is', '<answer>', '</answer>', 'user', 'assistant', ' capital', ' France'];
const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';

/** The workspace: runs/audit-run with step 2's rollouts (a drifting, off-policy sample; an all-wrong group) and metrics for steps 1–3. */
async function workspace(): Promise<{ dir: string; drift: number; flagged: number[] }> {
  const dir = scratchDir('sas-audit-ws-');
  cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), dir, { recursive: true });
  const model = writeTokenizerDir(join(dir, 'models', 'bpe'), WORDS);
  const codec = await loadTokenizerCodec(model);
  const run = join(dir, 'runs', 'audit-run');
  mkdirSync(join(run, 'rollouts'), { recursive: true });
  writeFileSync(
    join(run, 'run.json'),
    JSON.stringify({
      v: 1,
      id: 'audit-run',
      status: 'finished',
      created: '2026-11-01T00:00:00Z',
      config: { model: { path: model }, train: { stages: [{ steps: 1 }, { steps: 2, hops_mix: { '2': 1 } }] } },
      step: 3,
      total_steps: 3,
    }),
  );
  const base: Partial<Rollout> = {
    step: 2,
    split: 'train',
    question: 'The capital of France?',
    golden: ['Paris'],
    finish: 'answer',
  };
  // " Paris" sampled as " Par" + "is" (drift), and a trainer that disagrees with the sampler on two trained tokens.
  const drifting = recordOf(
    codec,
    PROMPT,
    [
      { text: '<answer>', role: 'generated' },
      { text: ' Par', role: 'generated' },
      { text: 'is', role: 'generated' },
      { text: ' </answer>', role: 'generated' },
    ],
    { ...base, id: 'drifting', group: 1, sample: 0, reward: 1 },
  );
  const tk = drifting.tokens!;
  const first = tk.role.indexOf('generated');
  tk.rollout_logprob = tk.role.map((r) => (r === 'generated' ? -1 : null));
  // Δ = −2 at the first generated token (ratio 0.14), +1.5 at the last (ratio 4.5); the prompt's values are garbage (masked)
  tk.logprob = tk.role.map((r, i) => (r !== 'generated' ? -60 : i === first ? -3 : i === tk.ids.length - 1 ? 0.5 : -1));
  // the other recorded arrays, for the per-token strips (issue 46): null off the generated tokens
  const gen = (f: (i: number) => number) => tk.role.map((r, i) => (r === 'generated' ? f(i) : null));
  tk.advantage = gen(() => 0.5);
  tk.entropy = gen((i) => 0.1 * (i - first));
  tk.ref_logprob = gen(() => -1.2);
  tk.value = gen(() => 0.3);
  const clean = (
    id: string,
    group: number,
    sample: number,
    answer: string,
    reward: number,
    extra: Partial<Rollout> = {},
  ) =>
    recordOf(codec, PROMPT, [{ text: `<think>ok</think>\n<answer> ${answer} </answer>`, role: 'generated' }], {
      ...base,
      id,
      group,
      sample,
      reward,
      ...extra,
    });
  const rows = [
    drifting,
    clean('lyon', 1, 1, 'Lyon', 0),
    clean('wrong-a', 0, 0, 'Lyon', 0),
    clean('wrong-b', 0, 1, 'Lyon or Paris', 0),
  ];
  writeFileSync(join(run, 'rollouts', 'step-000002.jsonl'), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  // the recorder's note beside a JSONL step: 4 of the step's 8 rollouts were kept (train.record.groups)
  writeFileSync(
    join(run, 'rollouts', 'step-000002.recording.json'),
    JSON.stringify({ step: 2, split: 'train', recorded: 4, of: 8 }),
  );
  const metric = (step: number, zero: number) =>
    JSON.stringify({
      step,
      'critic/score/mean': 0.25 * step,
      'reward/frac_zero_std_groups': zero,
      'response_length/mean': 10 + step,
      'actor/entropy': 1 / step,
    });
  writeFileSync(join(run, 'metrics.jsonl'), `${[metric(1, 0), metric(2, 0.5), metric(3, 0.25)].join('\n')}\n`);
  return { dir, drift: codec.encode(PROMPT + '<answer>').length, flagged: [first, tk.ids.length - 1] };
}

describe('audit instruments: replay microscope, dashboard, GRPO groups (code-server)', function () {
  let s: CodeServerSession;
  let fx: Awaited<ReturnType<typeof workspace>>;
  const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);

  before(async () => {
    fx = await workspace();
    s = await CodeServerSession.start({ workspace: fx.dir });
    await s.waitForLog('extension', /activated/, 60_000);
  });
  after(async () => {
    await s?.stop();
  });

  it('the inspector filters drift and is.dropped; the replay shows the drift marker with both sides, the Δ overlay and the IS preview', async () => {
    const insp = await s.openRunInInspector('audit-run');
    await until(
      'all rows analysed',
      async () => (await data(insp, 'total')) === '4' && (await data(insp, 'busy')) === 'false',
      30_000,
    );
    for (const expr of ['drift', 'is.dropped > 0']) {
      const before = await data(insp, 'seq');
      await insp.locator('[data-testid="filter"]').fill(expr);
      await insp.locator('[data-testid="filter"]').press('Enter');
      await until(
        `the filter ${expr}`,
        async () =>
          (await data(insp, 'seq')) !== before &&
          (await data(insp, 'appliedSeq')) === (await data(insp, 'seq')) &&
          (await data(insp, 'busy')) === 'false',
        15_000,
      );
      assert.equal(await data(insp, 'view'), '1', expr);
    }
    await insp.locator('.rows .row[data-index="0"]').dblclick();
    const r = await s.webviewFrame('replay', 30_000);
    // (chips are the tokens' [data-i]; the legend's sample chips carry the same classes)
    await until(
      'the replay of the drifting rollout',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === 'drifting',
      15_000,
    );
    assert.match(
      (await r.locator('[data-testid="header"]').textContent()) ?? '',
      new RegExp(`drift at token ${fx.drift}`),
    );
    // "Next drift": the position jumps to the drift, and the recorded and re-encoded pieces show side by side, as text.
    await r.locator('[data-testid="next-drift"]').click();
    await until('at the drift', async () => (await data(r, 'token')) === String(fx.drift), 5_000);
    assert.ok(await r.locator('[data-testid="drift-pane"]').isVisible());
    assert.equal(await r.locator('[data-testid="drift-recorded"] li.drift-first code').textContent(), '" Par"');
    assert.equal(await r.locator('[data-testid="drift-reencoded"] li.drift-first code').textContent(), '" Paris"');
    assert.equal(await r.locator('.chip[data-i].current.drift-at').count(), 1, 'the drifting chip is marked');
    // The Δ overlay: trained tokens coloured, masked ones excluded, the two off-band ratios flagged.
    await r.locator('[data-testid="overlay"]').selectOption('delta');
    await until('the Δ overlay', async () => (await data(r, 'overlay')) === 'delta', 5_000);
    assert.match(
      (await r.locator('[data-testid="legend"]').textContent()) ?? '',
      /Δ = logprob − rollout_logprob:.*excluded \(loss mask 0\)/,
    );
    assert.equal(
      await r.locator('.chip[data-i].excluded').count(),
      await r.locator('.chip[data-i].role-prompt').count(),
      'every prompt token is excluded',
    );
    assert.equal(await r.locator('.chip[data-i].excluded:not(.role-prompt)').count(), 0);
    assert.deepEqual(
      await r
        .locator('.chip[data-i].ratio-flag')
        .evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.i))),
      fx.flagged,
    );
    await r.locator('.chip[data-i].role-prompt').first().hover();
    assert.match(
      (await r.locator('[data-testid="hovercard"]').textContent()) ?? '',
      /excluded \(loss mask 0: never compared\)/,
    );
    // The ratio colouring and the importance-sampling preview (cap 2: TIS clips ρ 4.5; MIS drops both).
    await r.locator('[data-testid="overlay"]').selectOption('ratio');
    await r.locator('[data-testid="is-toggle"]').check();
    await until('the IS preview', async () => (await r.locator('.chip[data-i].is-dropped').count()) === 2, 5_000);
    assert.match(
      (await r.locator('[data-testid="is-summary"]').textContent()) ?? '',
      /1 clipped \(TIS\) · 2 dropped \(MIS\)/,
    );
    await r.locator('[data-testid="is-cap"]').fill('5');
    await r.locator('[data-testid="is-cap"]').press('Enter');
    await until(
      'cap 5 recomputed by the host',
      async () =>
        /0 clipped \(TIS\) · 1 dropped \(MIS\)/.test(
          (await r.locator('[data-testid="is-summary"]').textContent()) ?? '',
        ),
      10_000,
    );
    assert.equal(await r.locator('.chip[data-i].is-dropped').count(), 1);
  });

  it('the replay draws a per-token strip for every recorded array, masked tokens dimmed, one legend; a click on a cell moves there', async () => {
    const r = await s.webviewFrame('replay', 30_000);
    await until('the strips', async () => r.locator('[data-testid="strips"]').isVisible(), 10_000);
    const strips = await r
      .locator('[data-testid="strips"] .strip')
      .evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.strip));
    assert.deepEqual(strips, [
      'ratio',
      'delta',
      'advantage',
      'entropy',
      'ref_logprob',
      'value',
      'logprob',
      'rollout_logprob',
      'kl',
    ]);
    const n = await r.locator('.chip[data-col="0"][data-i]').count();
    const prompt = await r.locator('.chip[data-col="0"][data-i].role-prompt').count();
    for (const k of strips) {
      assert.equal(
        await r.locator(`[data-testid="strip-${k}"] .strip-cell[data-i]`).count(),
        n,
        `${k}: one cell per token`,
      );
      assert.equal(
        await r.locator(`[data-testid="strip-${k}"] .strip-cell[data-i].masked`).count(),
        prompt,
        `${k}: the masked (prompt) tokens dimmed`,
      );
    }
    // the chips' palettes: Δ −2 at the first generated token is the diverging scale's lowest bucket, +1.5 at the last near its top
    const cls = (k: string, i: number) =>
      r.locator(`[data-testid="strip-${k}"] .strip-cell[data-i="${i}"]`).getAttribute('class');
    assert.match((await cls('delta', fx.flagged[0]!)) ?? '', /\bov-d0\b/);
    assert.match((await cls('delta', fx.flagged[1]!)) ?? '', /\bov-d7\b/);
    assert.match((await cls('advantage', 0)) ?? '', /\bov-none\b/, 'not recorded on the prompt');
    assert.match(
      (await r.locator('[data-testid="strip-legend"]').textContent()) ?? '',
      /diverging \(Δ, ratio, advantage, KL\).*sequential \(log-probs, entropy, value\).*not recorded.*masked/,
    );
    assert.match(
      (await r.locator('[data-testid="strip-ratio"] .strip-range').textContent()) ?? '',
      /^0\.135 … 7\.389$/,
      'the ratio scale shown as exp of the Δ scale (±2)',
    );
    await r.locator(`[data-testid="strip-entropy"] .strip-cell[data-i="${fx.flagged[1]}"]`).click();
    await until('moved to the clicked token', async () => (await data(r, 'token')) === String(fx.flagged[1]), 5_000);
    assert.equal(
      await r.locator(`.strip-cell.current[data-i="${fx.flagged[1]}"]`).count(),
      strips.length,
      'the current token marked in every strip',
    );
  });

  it('the dashboard charts the log-prob mismatch, marks the alarm in its lane, and opens the GRPO groups from the zero-variance chart', async () => {
    await s.runCommand('Search Agent: Open Training Dashboard');
    const dash = await s.webviewFrame('dashboard', 30_000);
    await until('the mismatch chart', async () => dash.locator('.chart[data-chart="logprob"]').isVisible(), 30_000);
    // the audit's series are points at step 2 (the one step with rollouts)
    assert.ok(await dash.locator('.chart[data-chart="drift"]').isVisible());
    await until(
      'the alarm in the reward chart’s lane',
      async () => (await dash.locator('.chart[data-chart="reward"] .lane-tick').count()) > 0,
      15_000,
    );
    assert.match(
      (await dash.locator('.chart[data-chart="reward"] .lane-tick').first().getAttribute('title')) ?? '',
      /^step 2: (.+; )?answer-enumeration 1 of 4 rollouts \(25%\)/,
    );
    // The fixture is a two-stage curriculum (train.stages): its second stage is marked where it starts, on every chart.
    await until(
      'the stage mark',
      async () => (await dash.locator('body').getAttribute('data-stage-steps')) === '1',
      15_000,
    );
    assert.match(
      (await dash.locator('.chart[data-chart="reward"] .stage-mark').first().getAttribute('title')) ?? '',
      /^stage 2 of 2 starts after step 1 \(hops_mix 2: 1; the KL reference, optimizer and LR schedule restart\)$/,
    );
    assert.match((await dash.locator('[data-run="audit-run"]').textContent()) ?? '', /step 3\/3 · stage 2\/2/);
    // Click step 2 on the zero-variance chart.
    const over = dash.locator('.chart[data-chart="zero"] .u-over');
    const box = await boxOf(over);
    await over.hover({ position: { x: box.width / 2, y: box.height / 2 } });
    await over.click({ position: { x: box.width / 2, y: box.height / 2 } });
    const g = await s.webviewFrame('groups', 30_000);
    await until('the groups of step 2', async () => (await data(g, 'groups')) === '2', 15_000);
    assert.match((await g.locator('h2').textContent()) ?? '', /step 2/);
    // a sampled step says so: the groups shown lean toward the flagged ones
    assert.match(
      (await g.locator('[data-testid="sampled"]').textContent()) ?? '',
      /A sample: 4 of the step's 8 rollouts were recorded/,
    );
    const zero = g.locator('section.group[data-zero="true"]');
    assert.equal(await zero.count(), 1);
    assert.equal(await zero.getAttribute('data-reason'), 'all-wrong');
    assert.match((await zero.locator('[data-testid="reason"]').textContent()) ?? '', /all wrong/);
    const other = g.locator('section.group[data-group="1"] tbody tr');
    assert.equal(await other.count(), 2);
    assert.deepEqual((await other.nth(1).locator('td').allTextContents()).slice(0, 4), ['1', '0', '–', 'Lyon']);
    // A sample replays on click.
    await other.nth(1).click();
    const r = await s.webviewFrame('replay', 30_000);
    await until(
      'the replay of the clicked sample',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === 'lyon',
      15_000,
    );
  });

  it("the palette's Show GRPO Groups… asks for the run, then the step (with its share of zero-variance groups), and opens that step's groups", async () => {
    await s.runCommand('View: Close All Editors');
    await until('no groups view left', async () => !(await s.hasWebview('groups')), 15_000);
    await s.runCommand('Search Agent: Show GRPO Groups…');
    await s.pickQuickItem('audit-run');
    // the step pick: steps with rollouts (only step 2), described from metrics.jsonl (no rollout.batch_size in run.json: a share)
    const row = s.page.locator('.quick-input-list .monaco-list-row', {
      has: s.page.locator('.label-name', { hasText: 'step 2' }),
    });
    await row.first().waitFor({ timeout: 15_000 });
    assert.equal(await s.page.locator('.quick-input-list .monaco-list-row').count(), 1, 'only the steps with rollouts');
    assert.match((await row.first().locator('.label-description').textContent()) ?? '', /50% of groups zero-variance/);
    await row.first().click();
    const g = await s.webviewFrame('groups', 30_000);
    await until('the groups of step 2', async () => (await data(g, 'groups')) === '2', 15_000);
    assert.match((await g.locator('h2').textContent()) ?? '', /step 2/);
    assert.equal(await g.locator('section.group[data-zero="true"]').getAttribute('data-reason'), 'all-wrong');
  });
});
