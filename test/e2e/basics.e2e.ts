/**
 * What a new user hit in the editor (issue 44), in real VS Code (code-server) on fixture runs: the dashboard's alarm
 * lane (one strip per run above each chart's plot, a legend entry, a toggle, the per-alarm threshold of the setting:
 * search-repeat in 2 of 8 rollouts marked, in 1 of 8 not), the basics TensorBoard and W&B users expect (smoothing,
 * log scale per chart, chart search and pinning, wall time on the x-axis, a run at step 1 drawn, distinct colours per
 * series and per overlaid run); the inspector's columns widening for rows a filter shows and its `drift` filter
 * saying "not checked"; the replay's Next leak and Next drift bringing their chip into view; the GRPO group view
 * keeping answers' words whole in a narrow panel.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Frame } from 'playwright-core';
import { loadTokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';
import { recordOf, writeTokenizerDir } from '../unit/bpe';
import { boxOf, CodeServerSession, ROOT, until } from './harness';

const LONG_ANSWERS = [
  'The Grand Duchy of Luxembourg in Western Europe',
  'Saint Petersburg on the Neva river delta',
  'Zekrouv the cartographer of Koben',
];

/** A search-R1 rollout without tokens (what the audit and the group view need). */
function rollout(
  id: string,
  step: number,
  group: string,
  sample: number,
  opts: { queries?: string[]; answer?: string; reward?: number } = {},
): string {
  const q = opts.queries ?? ['Koben founder'];
  const response = `${q.map((x) => `<search> ${x} </search>\n\n<information>Doc 1(Title: Koben) Koben was founded by Zekrouv.</information>\n\n`).join('')}<answer> ${opts.answer ?? 'Zekrouv'} </answer>`;
  return JSON.stringify({
    v: 1,
    id,
    step,
    group,
    sample,
    split: 'train',
    question: 'Who founded Koben?',
    golden: ['Zekrouv'],
    prompt: `Question: Who founded Koben?\n(question ${group})\n`,
    response,
    reward: opts.reward ?? 1,
    finish: 'answer',
    searches: q.length,
  });
}

async function workspace(): Promise<{ dir: string; leak: number; drift: number }> {
  const dir = scratchDir('sas-basics-ws-');
  cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), dir, { recursive: true });
  const runJson = (id: string, created: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ v: 1, id, status: 'finished', created, config: {}, step: 30, total_steps: 30, ...extra });
  // lane-run: 30 steps of metrics, 100 s apart (wall time), a gradient norm over five decades (the log scale); rollouts
  // at steps 5 (search-repeat in 2 of 8: 25%, marked), 6 (1 of 8: under the threshold) and 7 (an enumerated answer).
  const lane = join(dir, 'runs', 'lane-run');
  mkdirSync(join(lane, 'rollouts'), { recursive: true });
  writeFileSync(join(lane, 'run.json'), runJson('lane-run', '2026-11-02T00:00:00Z'));
  const metrics = Array.from({ length: 30 }, (_, i) => {
    const step = i + 1;
    return JSON.stringify({
      step,
      time: 1_700_000_000 + 100 * step,
      'critic/score/mean': step % 2,
      'reward/em/mean': 0.5,
      'actor/grad_norm': 10 ** ((step % 6) - 3),
      'actor/entropy': 1 + 1 / step,
      'response_length/mean': 100 + step,
      'reward/frac_zero_std_groups': 0.25,
    });
  });
  writeFileSync(join(lane, 'metrics.jsonl'), `${metrics.join('\n')}\n`);
  const steps: Record<number, string[]> = {
    5: Array.from({ length: 8 }, (_, k) =>
      rollout(`s5-${k}`, 5, `${k >> 1}`, k & 1, {
        queries: k < 2 ? ['Koben founder', 'koben  FOUNDER'] : ['Koben founder'],
      }),
    ),
    6: Array.from({ length: 8 }, (_, k) =>
      rollout(`s6-${k}`, 6, `${k >> 1}`, k & 1, { queries: k < 1 ? ['Koben', 'Koben'] : ['Koben founder'] }),
    ),
    // Step 7: group ids longer than the first rows' (the inspector widens its column), long answers (the group view).
    7: Array.from({ length: 8 }, (_, k) =>
      rollout(`s7-${k}`, 7, `train:7:longer-group-${k >> 1}`, k & 1, {
        answer: k === 0 ? 'Zekrouv or Koben' : LONG_ANSWERS[k % 3],
        reward: k === 0 ? 1 : 0,
      }),
    ),
  };
  for (const [step, rows] of Object.entries(steps))
    writeFileSync(join(lane, 'rollouts', `step-${String(step).padStart(6, '0')}.jsonl`), `${rows.join('\n')}\n`);
  // one-step: a run at step 1 (one metrics line): its points must show.
  const one = join(dir, 'runs', 'one-step');
  mkdirSync(one, { recursive: true });
  writeFileSync(join(one, 'run.json'), runJson('one-step', '2026-11-01T00:00:00Z', { step: 1, total_steps: 1 }));
  writeFileSync(
    join(one, 'metrics.jsonl'),
    `${JSON.stringify({ step: 1, time: 1_700_000_100, 'critic/score/mean': 0.25, 'reward/em/mean': 0.125, 'actor/entropy': 2.5 })}\n`,
  );
  // drift-run: one long rollout (a long prompt: its tokens start below the fold) with a leak and a drift near its end.
  const model = writeTokenizerDir(join(dir, 'models', 'bpe'), [
    ' Paris',
    ' Lyon',
    'is',
    '<answer>',
    '</answer>',
    ' capital',
    ' France',
    ' of',
    ' the',
  ]);
  const codec = await loadTokenizerCodec(model);
  const drift = join(dir, 'runs', 'drift-run');
  mkdirSync(join(drift, 'rollouts'), { recursive: true });
  // …with a checkpoint to fork from, and a Python of its own that does not exist (the fork's no-Python message).
  writeFileSync(
    join(drift, 'run.json'),
    runJson('drift-run', '2026-10-01T00:00:00Z', {
      config: { model: { path: model } },
      step: 1,
      python: '/nonexistent/run/python3',
    }),
  );
  mkdirSync(join(drift, 'checkpoints', 'step-000001'), { recursive: true });
  writeFileSync(join(drift, 'checkpoints', 'step-000001', 'trainer_state.json'), '{}');
  const prompt = `Question: the capital of France?\n${Array.from({ length: 120 }, (_, i) => `Fact ${i}: the capital of France is Paris.`).join('\n')}\n`;
  const rec = recordOf(
    codec,
    prompt,
    [
      { text: '<answer>', role: 'generated' },
      { text: '\n\nDoc 1(Title: France) the capital of France is Paris.\n\n', role: 'retrieved' },
      { text: ' Par', role: 'generated' },
      { text: 'is', role: 'generated' },
      { text: ' </answer>', role: 'generated' },
    ],
    { id: 'long', step: 1, split: 'train', golden: ['Paris'], reward: 1, finish: 'answer' },
  );
  const tk = rec.tokens!;
  const leak = tk.role.lastIndexOf('retrieved');
  tk.loss_mask[leak] = 1;
  writeFileSync(join(drift, 'rollouts', 'step-000001.jsonl'), `${JSON.stringify(rec)}\n`);
  // The drift: " Par" + "is" where the tokenizer has " Paris" (the last three tokens: " Par", "is", then " </answer>"'s).
  return { dir, leak, drift: tk.ids.length - codec.encode(' </answer>').length - 2 };
}

const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);
/** The dashboard's charts as the page shows them: key, hidden or not. */
const chartsNow = (f: Frame) =>
  f.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('.chart')].map((c) => ({ key: c.dataset.chart!, hidden: c.hidden })),
  );

describe('what a new user hit: the dashboard basics, the alarm lane, inspector, replay and group view (code-server)', function () {
  let s: CodeServerSession;
  let fx: Awaited<ReturnType<typeof workspace>>;
  let dash: Frame;

  before(async function () {
    fx = await workspace();
    // No usable Python (the named one does not exist, python3 on PATH has no torch): the fork's message offers to set one up.
    // The lane's thresholds: the default's, and at their highest (a whole step's rollouts) for the group and search
    // alarms of issue 46 that this synthetic fixture trips in a few rollouts of each step (flat groups, a search after
    // the document named the answer, rewards that differ while every answer is wrong): the lane's mechanics are under
    // test here, those alarms in instruments2.test.ts. (Each group asks its own prompt: no group-split.)
    const quiet = Object.fromEntries(['zero-std-high', 'phantom-advantage', 'search-after-found'].map((k) => [k, 1]));
    s = await CodeServerSession.start({
      workspace: fx.dir,
      settings: {
        'searchAgent.dashboard.alarmThresholds': { '*': 0, 'search-repeat': 0.25, ...quiet },
        'searchAgent.pythonPath': '/nonexistent/python3',
      },
    });
    await s.waitForLog('extension', /activated/, 60_000);
  });
  after(async () => {
    await s?.stop();
  });

  /** Opens the dashboard on a run from its Runs view row (the inline action). */
  async function dashboardOn(run: string): Promise<Frame> {
    await s.runCommand('Search Agent: Focus on Runs View');
    const row = s.page.locator('.monaco-list-row', { hasText: run });
    await row.first().waitFor({ timeout: 30_000 });
    for (let attempt = 1; ; attempt++) {
      await row.first().hover();
      await row.first().locator('.action-label[aria-label="Open Training Dashboard"]').click();
      const f = await s.webviewFrame('dashboard');
      try {
        await until(
          `the dashboard on ${run}`,
          async () =>
            JSON.stringify(
              await f.evaluate(() => [...document.querySelectorAll('.run')].map((e) => (e as HTMLElement).dataset.run)),
            ) === JSON.stringify([run]),
          7_500,
        );
        return f;
      } catch (e) {
        if (attempt >= 3) throw e;
      }
    }
  }

  it('alarms get a lane of their own above each chart (not marks through it): the steps over their threshold, a legend entry, a toggle', async () => {
    dash = await dashboardOn('lane-run');
    await until('the alarm lane', async () => (await data(dash, 'alarmSteps')) === '5,7', 30_000);
    const reward = dash.locator('.chart[data-chart="reward"]');
    await until(
      'ticks in the reward chart’s lane',
      async () => (await reward.locator('.lane-tick').count()) === 2,
      15_000,
    );
    assert.deepEqual(
      await reward.locator('.lane-tick').evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.step))),
      [5, 7],
      'step 6 (1 of 8 rollouts, 12%) is under search-repeat’s 25%',
    );
    assert.match(
      (await reward.locator('.lane-tick').first().getAttribute('title')) ?? '',
      /^step 5: search-repeat 2 of 8 rollouts \(25%\)(; [^;]+ — under its lane threshold 100%)* — click for its rollouts$/,
    );
    assert.match(
      (await reward.locator('.lane-tick').nth(1).getAttribute('title')) ?? '',
      /^step 7: answer-enumeration 1 of 8 rollouts \(13%\)/,
    );
    assert.equal(await dash.locator('.alarm-mark').count(), 0, 'no mark through any plot');
    // The lane sits above the plot: a series at the top of the chart is never under it.
    const [laneBox, overBox] = [
      await reward.locator('.alarm-lane').boundingBox(),
      await reward.locator('.u-over').boundingBox(),
    ];
    assert.ok(
      laneBox && overBox && laneBox.y + laneBox.height <= overBox.y + 0.5,
      `lane ${JSON.stringify(laneBox)} above the plot ${JSON.stringify(overBox)}`,
    );
    // The ticks sit over their steps, inside the plot's x range: step 5 left of step 7.
    const [t5, t7] = [
      await boxOf(reward.locator('.lane-tick').first()),
      await boxOf(reward.locator('.lane-tick').nth(1)),
    ];
    assert.ok(
      overBox!.x < t5.x && t5.x < t7.x && t7.x + t7.width < overBox!.x + overBox!.width,
      `ticks ${t5.x}, ${t7.x} in the plot ${overBox!.x}–${overBox!.x + overBox!.width}`,
    );
    // The legend has an "alarms" entry; at step 5 it names the alarm.
    const legend = reward.locator('.u-legend .alarm-series');
    assert.equal((await legend.locator('.u-label').textContent())?.trim(), 'alarms');
    // The toggle hides every lane; the legend entry shows them again.
    await dash.locator('[data-testid="alarm-toggle"]').uncheck();
    await until('lanes hidden', async () => (await dash.locator('.alarm-lane:not([hidden])').count()) === 0, 5_000);
    assert.equal(await data(dash, 'alarmLane'), 'false');
    await legend.locator('.u-label').click();
    await until(
      'lanes shown again',
      async () =>
        (await dash.locator('.alarm-lane:not([hidden]) .lane-tick').count()) > 0 &&
        (await data(dash, 'alarmLane')) === 'true',
      5_000,
    );
    assert.equal(
      await dash.locator('[data-testid="alarm-toggle"]').isChecked(),
      true,
      'the toolbar follows the legend',
    );
  });

  it('smoothing (debiased EMA, the raw values under it), a log scale per chart, chart search, pinning, wall time on the x-axis', async () => {
    const rewardValue = async () => {
      const over = dash.locator('.chart[data-chart="reward"] .u-over');
      const b = await boxOf(over);
      await s.page.mouse.move(b.x + b.width * 0.98, b.y + b.height / 2);
      return (
        (
          await dash.locator('.chart[data-chart="reward"] .u-legend .u-series').nth(1).locator('.u-value').textContent()
        )?.trim() ?? ''
      );
    };
    assert.match(
      await until(
        'a raw value',
        async () => {
          const v = await rewardValue();
          return /^[01]\.000$/.test(v) ? v : undefined;
        },
        10_000,
      ),
      /^[01]\.000$/,
    );
    // Smoothing 0.9: the 0/1 reward reads as its running mean, the raw value beside it.
    await dash.locator('[data-testid="smoothing"]').evaluate((el) => {
      (el as HTMLInputElement).value = '0.9';
      el.dispatchEvent(new Event('input', { bubbles: true }));
    });
    assert.equal(await data(dash, 'smoothing'), '0.9');
    const smoothed = await until(
      'a smoothed value',
      async () => {
        const v = await rewardValue();
        return /^0\.[1-8]\d\d \(raw [01]\.000\)$/.test(v) ? v : undefined;
      },
      10_000,
    );
    assert.match(smoothed, /^0\.[1-8]\d\d \(raw [01]\.000\)$/);
    // Log scale on the gradient norm (1e-3 … 1e2): ticks by decades; off again.
    const grad = dash.locator('.chart[data-chart="grad"]');
    await grad.locator('[data-testid="log-scale"]').check();
    // (uPlot draws axes on the canvas: the chart's box says what its scales are.)
    const y = await until(
      'the log axis',
      async () => {
        const v = (await grad.getAttribute('data-y')) ?? '';
        return v.startsWith('log ') ? v : undefined;
      },
      10_000,
    );
    const [lo, hi] = y.slice(4).split('…').map(Number);
    assert.ok(lo! <= 0.001 && hi! >= 100, `the log scale spans the decades: ${y}`);
    assert.ok(await grad.locator('[data-testid="log-scale"]').isChecked());
    // Search: only the charts whose title or metrics match.
    await dash.locator('[data-testid="chart-search"]').fill('entropy');
    await until(
      'only the entropy chart',
      async () => JSON.stringify((await chartsNow(dash)).filter((c) => !c.hidden).map((c) => c.key)) === '["entropy"]',
      5_000,
    );
    await dash.locator('[data-testid="chart-search"]').fill('');
    await until(
      'every chart with data again',
      async () => (await chartsNow(dash)).filter((c) => !c.hidden).length >= 6,
      5_000,
    );
    // Pin: the gradient norm goes first, into the pinned section.
    await grad.locator('[data-testid="pin"]').click();
    await until(
      'pinned',
      async () => (await dash.locator('[data-testid="pinned"] .chart').first().getAttribute('data-chart')) === 'grad',
      5_000,
    );
    assert.ok(await dash.locator('[data-testid="pinned"] .chart[data-chart="grad"]').isVisible());
    const order = await dash
      .locator('.chart:not([hidden])')
      .evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.chart));
    assert.equal(order[0], 'grad', `the pinned chart first: ${order.join(', ')}`);
    // Wall time: the x-axis in time since the run started (the steps are 100 s apart: 30 steps ≈ 48 min).
    await dash.locator('[data-testid="x-axis"]').selectOption('time');
    const x = await until(
      'the wall-time axis',
      async () => {
        const v = (await dash.locator('.chart[data-chart="reward"]').getAttribute('data-x')) ?? '';
        return v.startsWith('time ') ? v : undefined;
      },
      10_000,
    );
    const [x0, x1] = x.slice(5).split('…').map(Number);
    assert.ok(
      x0! < 100 && x1! >= 2900 && x1! < 3100,
      `seconds since the run started (steps 100 s apart, the first at 0): ${x}`,
    );
    assert.equal(await data(dash, 'xAxis'), 'time');
    assert.ok(
      (await dash.locator('.chart[data-chart="reward"] .lane-tick').count()) === 2,
      'the lane follows the wall-time axis',
    );
    // Back to steps, no smoothing, unpinned (the webview keeps these in its state).
    await dash.locator('[data-testid="x-axis"]').selectOption('step');
    await dash.locator('[data-testid="smoothing"]').evaluate((el) => {
      (el as HTMLInputElement).value = '0';
      el.dispatchEvent(new Event('input', { bubbles: true }));
    });
    await grad.locator('[data-testid="log-scale"]').uncheck();
    await dash.locator('[data-testid="pinned"] .chart[data-chart="grad"] [data-testid="pin"]').click();
  });

  it('a run at step 1 draws its points (markers); series colours are distinct within a chart and per overlaid run', async () => {
    // A fresh dashboard: a retry would otherwise find the one this test overlaid lane-run on.
    await s.runCommand('View: Close All Editors');
    await until('no dashboard left', async () => !(await s.hasWebview('dashboard')), 15_000);
    const one = await dashboardOn('one-step');
    await until('one point per series', async () => Number(await data(one, 'points')) === 3, 15_000);
    const markers = await data(one, 'markers');
    for (const m of ['reward: reward', 'reward: EM (train)', 'entropy: entropy'])
      assert.ok(markers.includes(m), `${m} is drawn with a marker (${markers})`);
    // The canvas of the reward chart has pixels of the reward series' colour near its point.
    assert.ok(await one.locator('.chart[data-chart="reward"]').isVisible());
    // Overlay lane-run: every series of the by-hops chart in its own colour, across both runs (7 × 2).
    await one.locator('[data-testid="add-run"]').click();
    await s.pickQuickItem('lane-run');
    await until('two runs', async () => (await data(one, 'runs')) === '2', 15_000);
    const colours = await one.evaluate(() => {
      const out: Record<string, string[]> = {};
      for (const c of document.querySelectorAll<HTMLElement>('.chart'))
        out[c.dataset.chart!] = [...c.querySelectorAll('.u-legend .u-series:not(.raw-series):not(.alarm-series)')]
          .slice(1)
          .map((e) => getComputedStyle(e.querySelector('.u-marker')!).borderColor);
      return out;
    });
    for (const key of ['hops', 'reward', 'alarms'])
      assert.equal(new Set(colours[key]).size, colours[key]!.length, `${key}: ${JSON.stringify(colours[key])}`);
    assert.equal(colours.hops!.length, 14);
    // A click on a point opens that step's rollouts (lane-run's nearest saved step at or before it), overlaid too.
    const over = one.locator('.chart[data-chart="entropy"] .u-over');
    await over.scrollIntoViewIfNeeded();
    const b = await boxOf(over);
    // clicked again if no tab came: under load a click can land while the chart redraws (CI once; the retry passed)
    const tab = s.page.locator('.tabs-container .tab[data-resource-name="step-000007.jsonl"]').first();
    await until(
      'the step-7 rollouts opened by a click on a point',
      async () => {
        await s.page.mouse.click(b.x + b.width * 0.6, b.y + b.height / 2);
        return tab
          .waitFor({ timeout: 15_000 })
          .then(() => true)
          .catch(() => false);
      },
      60_000,
    );
  });

  it('the inspector widens a column for the rows a filter shows, and its drift filter says "not checked" (no tokenizer), not "0 match"', async () => {
    const insp = await s.openRunInInspector('lane-run');
    await until(
      'all rows',
      async () => (await data(insp, 'total')) === '24' && (await data(insp, 'busy')) === 'false',
      30_000,
    );
    const filter = async (expr: string) => {
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
    };
    await filter('step == 7');
    await until(
      'the step-7 rows',
      async () => (await insp.locator('.rows .row[data-index] .cell.group').count()) === 8,
      10_000,
    );
    await until(
      'the group column fits them',
      async () => {
        const cut = await insp
          .locator('.rows .row[data-index] .cell.group')
          .evaluateAll((els) => els.filter((e) => e.scrollWidth > e.clientWidth + 1).length);
        return cut === 0 ? true : undefined;
      },
      10_000,
    );
    await filter('drift');
    const status = (await insp.locator('[data-testid="status"]').textContent()) ?? '';
    assert.match(status, /drift not checked: /);
    assert.doesNotMatch(status, /\b0 match\b/);
    assert.match(await data(insp, 'notChecked'), /^drift not checked/);
    await filter('');
  });

  it('the replay’s Next leak and Next drift bring their chip into view (the tokens start below the fold)', async () => {
    // A fresh inspector (one left open is re-rendered under the test when another opens: its frame detaches).
    await s.runCommand('View: Close All Editors');
    await until('no inspector left', async () => !(await s.hasWebview('rollouts')), 15_000);
    const insp = await s.openRunInInspector('drift-run');
    await until('the row', async () => (await insp.locator('.rows .row[data-index="0"]').count()) === 1, 30_000);
    await insp.locator('.rows .row[data-index="0"]').dblclick();
    const r = await s.webviewFrame('replay', 30_000);
    await until(
      'the replay',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === 'long',
      15_000,
    );
    const inView = (sel: string) =>
      r
        .locator(sel)
        .first()
        .evaluate((el) => {
          const b = el.getBoundingClientRect();
          return b.top >= 0 && b.bottom <= window.innerHeight;
        });
    assert.equal(await r.evaluate(() => window.scrollY), 0, 'it opens at its top');
    await r.locator('[data-testid="next-leak"]').click();
    await until('at the leak', async () => (await data(r, 'token')) === String(fx.leak), 5_000);
    assert.ok(await inView('.chip[data-col="0"].current'), 'the leak’s chip is on screen');
    await r.evaluate(() => window.scrollTo(0, 0));
    await r.locator('body').press('Home');
    await r.locator('[data-testid="next-drift"]').click();
    await until('at the drift', async () => (await data(r, 'token')) === String(fx.drift), 5_000);
    assert.ok(await inView('.chip[data-col="0"].current'), 'the drift’s chip is on screen');
  });

  it("Fork here with no usable Python: the run's own Python tried first, the message names each, and offers Set Up Trainer Environment", async () => {
    const r = await s.webviewFrame('replay', 30_000);
    await until(
      'the fork form',
      async () => (await r.locator('[data-testid="fork-turn"] option').count()) >= 1,
      30_000,
    );
    // The rollout (train step 1) was written by step 0's weights, and the run's only checkpoint is step 1's: nothing
    // is preselected (a later policy is not the one that wrote it), the panel says why, and Fork asks for a choice.
    assert.equal(await r.locator('[data-testid="fork-checkpoint"]').inputValue(), '');
    assert.deepEqual(await r.locator('[data-testid="fork-checkpoint"] option').allTextContents(), [
      'choose a checkpoint',
      'step-000001 (after the rollout)',
    ]);
    const why =
      /^rollout long \(train step 1\) was produced by the weights of step 0, and this run has no checkpoint at or before it/;
    assert.match((await r.locator('[data-testid="fork-status"]').textContent()) ?? '', why);
    await r.locator('[data-testid="fork-run"]').click();
    assert.match((await r.locator('[data-testid="fork-status"]').textContent()) ?? '', why);
    // chosen knowingly: the first fork from a checkpoint says it starts the policy server (not every fork does)
    await r.locator('[data-testid="fork-checkpoint"]').selectOption('step-000001');
    const said = await r.evaluate(() => {
      (document.querySelector('[data-testid="fork-run"]') as HTMLElement).click();
      return document.querySelector('[data-testid="fork-status"]')!.textContent;
    });
    assert.match(
      said ?? '',
      /^forking… \(starting the policy server for step-000001: the first fork from a checkpoint takes longer\)$/,
    );
    const status = await until(
      'the fork to fail',
      async () => {
        const t = (await r.locator('[data-testid="fork-status"]').textContent()) ?? '';
        return t.startsWith('fork failed') ? t : undefined;
      },
      60_000,
    );
    assert.match(status, /^fork failed: No usable Python for the trainer \(torch ≥ [\d.]+\) was found\. Tried:/);
    const run = status.indexOf('/nonexistent/run/python3');
    assert.ok(
      run >= 0 && run < status.indexOf('/nonexistent/python3'),
      `the run's own Python (run.json) first, then the setting: ${status}`,
    );
    await s.waitForLog('extension', /fork: python candidate \/nonexistent\/run\/python3: /, 10_000);
    const setUp = r.locator('[data-testid="fork-setup"]');
    assert.ok(await setUp.isVisible(), 'Set Up Trainer Environment beside the message');
    await setUp.click();
    await s.page
      .locator('.quick-input-list .monaco-list-row', { hasText: 'In the extension’s storage' })
      .first()
      .waitFor({ timeout: 15_000 });
    await s.page.keyboard.press('Escape');
  });

  it('the GRPO group view keeps answers’ words whole in a narrow panel', async () => {
    await s.runCommand('Search Agent: Show GRPO Groups…');
    await s.pickQuickItem('lane-run');
    await s.pickQuickItem('step 7');
    const g = await s.webviewFrame('groups', 30_000);
    await until('the groups of step 7', async () => (await data(g, 'groups')) === '4', 15_000);
    await g.evaluate(() => (document.body.style.width = '420px'));
    const broken = await g.evaluate(() => {
      const out: string[] = [];
      for (const td of document.querySelectorAll('td.answer')) {
        const node = td.firstChild;
        if (!node || node.nodeType !== Node.TEXT_NODE) continue;
        const text = node.textContent ?? '';
        for (const m of text.matchAll(/\S+/g)) {
          const range = document.createRange();
          range.setStart(node, m.index!);
          range.setEnd(node, m.index! + m[0].length);
          const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
          if (lines.size > 1) out.push(m[0]);
        }
      }
      return out;
    });
    await g.evaluate(() => (document.body.style.width = ''));
    assert.deepEqual(broken, [], 'no word of an answer is broken across lines');
  });
});
