/** The dashboard's pure parts: sparse series get markers, the legend's nearest recorded value, a run's header;
 * smoothing, colours, the alarm lane, wall time and the chart search (issue 44). */
import assert from 'node:assert/strict';
import type { MetricsRow } from '../../src/core/protocol/dashboard';
import { runStages } from '../../src/core/run/config';
import {
  alarmLane,
  alarmNames,
  chartMatches,
  emptyText,
  fmtDuration,
  type LaneMark,
  laneText,
  nearest,
  paletteColor,
  questionKinds,
  runStatus,
  smoothEma,
  sparseSeries,
  stageMarks,
  stepTimes,
  thresholdOf,
} from '../../webview/dashboard/model';

describe('dashboard model', () => {
  it('held-out EM logged every 20 steps is sparse (markers); a per-step series is not', () => {
    // 41 steps; series 1 recorded at every step, series 2 at steps 0, 20, 40, series 3 nowhere.
    assert.deepEqual([...sparseSeries([41, 3, 0], 41)], [2]);
  });

  it('the by-kind charts have one series per question kind with held-out EM in any row (sorted), none without', () => {
    const rows: MetricsRow[] = [
      { step: 1, 'critic/score/mean': 0.2 },
      {
        step: 20,
        'val/em': 0.3,
        'val/em_by_kind/river': 0.1,
        'val/em_by_kind/birthplace': 0.5,
        'val/searches_by_kind/river': 2,
        'val/answer_retrieved_by_kind/founder': 1,
      },
      { step: 40, 'val/em_by_kind/author-birthplace': 0.25, 'val/em_by_kind/river': 0.2 },
    ];
    assert.deepEqual(questionKinds(rows), ['author-birthplace', 'birthplace', 'river']);
    assert.deepEqual(questionKinds(rows.slice(0, 1)), []);
  });

  it('hovering between evaluations shows the nearest recorded value (ties: the earlier step)', () => {
    const col = [0.1, null, null, null, 0.3, null, null];
    assert.deepEqual(nearest(col, 0), { value: 0.1, at: 0 });
    assert.deepEqual(nearest(col, 1), { value: 0.1, at: 0 });
    assert.deepEqual(nearest(col, 2), { value: 0.1, at: 0 });
    assert.deepEqual(nearest(col, 3), { value: 0.3, at: 4 });
    assert.deepEqual(nearest(col, 6), { value: 0.3, at: 4 });
    assert.equal(nearest([null, null], 1), undefined);
  });

  it('a run header says stopped after Stop, and shows the warm start while it runs', () => {
    assert.equal(runStatus({ id: 'r', dir: '/r', state: 'stopped', step: 9, total: 120 }), 'stopped · step 9/120');
    const warming = {
      id: 'r',
      dir: '/r',
      state: 'running' as const,
      step: 0,
      total: 120,
      phase: 'warmup',
      warmup: { step: 150, steps: 300, loss: 2.3141 },
    };
    assert.equal(runStatus(warming), 'running · warm-up 150/300 · loss 2.314');
    assert.match(emptyText([warming]), /^Warm start .*: step 150 of 300, loss 2\.314\./);
    assert.match(emptyText([]), /^No metrics yet/);
  });

  it('a curriculum run (train.stages) is marked where each later stage starts, and its header names the stage', () => {
    const config = {
      data: { hops_mix: { '1': 1 } },
      train: { stages: [{ steps: 200 }, { steps: 320, hops_mix: { '1': 1, '2': 3 } }, { steps: 10, hops_mix: null }] },
    };
    const stages = runStages(config);
    assert.deepEqual(stages, [
      { start: 0, steps: 200, hopsMix: { '1': 1 } },
      { start: 200, steps: 320, hopsMix: { '1': 1, '2': 3 } },
      { start: 520, steps: 10, hopsMix: null },
    ]);
    assert.deepEqual(runStages({ train: { steps: 5 } }), []);
    const run = { id: 'r', dir: '/r', state: 'running' as const, step: 200, total: 530, stages };
    assert.equal(runStatus(run), 'running · step 200/530 · stage 1/3');
    assert.equal(runStatus({ ...run, step: 201 }), 'running · step 201/530 · stage 2/3');
    assert.equal(runStatus({ ...run, state: 'finished', step: 530 }), 'finished · step 530/530 · stage 3/3');
    const marks = stageMarks([run]);
    assert.deepEqual([...marks.keys()], [200, 520]);
    assert.deepEqual(marks.get(200), [
      'stage 2 of 3 starts after step 200 (hops_mix 1: 1, 2: 3; the KL reference, optimizer and LR schedule restart)',
    ]);
    assert.match(marks.get(520)![0]!, /^stage 3 of 3 .*the data's own mix/);
    assert.match(
      stageMarks([run, { ...run, id: 'other' }]).get(200)![1]!,
      /^other: stage 2 of 3/,
      'overlaid runs name theirs',
    );
    assert.equal(stageMarks([{ id: 'r', dir: '/r', state: 'finished', step: 3 }]).size, 0);
  });
});

describe('dashboard basics (issue 44)', () => {
  it("smoothing is TensorBoard's debiased EMA: the first value kept, a constant series unchanged, missing values skipped", () => {
    assert.deepEqual(smoothEma([1, 2, 3], 0), [1, 2, 3], 'weight 0: as recorded');
    const s = smoothEma([1, null, 3, 5], 0.5);
    // EMA: 0.5·1 = 0.5 → /(1−0.5) = 1; then 0.25 + 1.5 = 1.75 → /(1−0.25) = 2.333…; then 0.875 + 2.5 = 3.375 → /(1−0.125) = 3.857…
    assert.equal(s[0], 1);
    assert.equal(s[1], null);
    assert.ok(Math.abs(s[2]! - 7 / 3) < 1e-12, String(s[2]));
    assert.ok(Math.abs(s[3]! - 27 / 7) < 1e-12, String(s[3]));
    for (const v of smoothEma([0.4, 0.4, 0.4, 0.4], 0.9))
      assert.ok(Math.abs(v! - 0.4) < 1e-12, 'debiased: a constant stays itself');
  });

  it('a single point is drawn (a marker): the dashboard at step 1', () => {
    assert.deepEqual([...sparseSeries([1, 1, 0], 1)], [1, 2]);
    assert.deepEqual(
      [...sparseSeries([1, 30], 30)],
      [1],
      'one value among many steps: a marker; a full series: a line',
    );
  });

  it('series colours are distinct within a chart: the seven held-out-by-hops series, two runs of it overlaid, sixteen question kinds', () => {
    const theme = ['#3794ff', '#d18616', '#89d185', '#b180d7', '#f14c4c', '#cca700'];
    const rgb = (c: string): [number, number, number] => {
      const hsl = /^hsl\((\d+) (\d+)% (\d+)%\)$/.exec(c);
      if (!hsl) return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16) / 255) as [number, number, number];
      const [h, s, l] = [Number(hsl[1]), Number(hsl[2]) / 100, Number(hsl[3]) / 100];
      const k = (n: number) => (n + h / 30) % 12;
      const a = s * Math.min(l, 1 - l);
      return [0, 8, 4].map((n) => l - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1))) as [number, number, number];
    };
    for (const n of [7, 14, 16]) {
      const colors = Array.from({ length: n }, (_, i) => paletteColor(i, theme));
      assert.equal(new Set(colors).size, n, `${n} series: ${colors.join(' ')}`);
      for (let i = 0; i < n; i++)
        for (let j = i + 1; j < n; j++) {
          const [a, b] = [rgb(colors[i]!), rgb(colors[j]!)];
          const d = Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);
          assert.ok(
            d > 0.12,
            `${colors[i]} and ${colors[j]} (series ${i} and ${j} of ${n}) are too close: ${d.toFixed(3)}`,
          );
        }
    }
  });

  it("the alarm lane: a step is marked where an alarm's share of the step's rollouts reaches its threshold; any alarm name", () => {
    const rows: MetricsRow[] = [
      { step: 1, 'audit/rollouts': 64, 'audit/alarm/search-repeat': 6, 'audit/leaks': 0 },
      { step: 2, 'audit/rollouts': 64, 'audit/alarm/search-repeat': 20, 'audit/alarm/reward-injection': 1 },
      { step: 3, 'audit/rollouts': 64, 'audit/alarm/answer-enumeration': 1 },
      { step: 4, 'audit/rollouts': 64, 'audit/leaks': 3 },
    ];
    const t = { '*': 0, 'search-repeat': 0.25 };
    const lane = alarmLane(rows, t);
    assert.deepEqual(
      lane.map((m) => m.step),
      [1, 2, 3],
    );
    const shown = (m: LaneMark) => m.alarms.filter((a) => a.shown).map((a) => a.name);
    assert.deepEqual(
      lane.map(shown),
      [[], ['search-repeat', 'reward-injection'], ['answer-enumeration']],
      '6 of 64 (9%) is under 25%; 20 of 64 is over; a new alarm name counts',
    );
    assert.equal(laneText(lane[0]!, t), 'search-repeat 6 of 64 rollouts (9%) — under its lane threshold 25%');
    assert.equal(
      laneText(lane[1]!, t),
      'search-repeat 20 of 64 rollouts (31%); reward-injection 1 of 64 rollouts (2%)',
    );
    assert.deepEqual(
      alarmLane(rows).map(shown),
      [['search-repeat'], ['search-repeat', 'reward-injection'], ['answer-enumeration']],
      'no threshold: any rollout',
    );
    assert.equal(thresholdOf({ '*': 0.1 }, 'length-capped'), 0.1);
    assert.deepEqual(
      alarmNames(rows, ['answer-enumeration', 'search-repeat']),
      ['answer-enumeration', 'search-repeat', 'reward-injection'],
      'the known ones in order, then the others',
    );
  });

  it('wall time: seconds since the run’s first metrics line, per step (a step’s first line); formatted for the axis', () => {
    const times = stepTimes([
      { step: 0, time: 1000 },
      { step: 1, time: 1030 },
      { step: 2, time: 1090 },
      { step: 2, time: 1095 },
      { step: 3 },
    ] as MetricsRow[]);
    assert.deepEqual(
      [...times],
      [
        [0, 0],
        [1, 30],
        [2, 90],
      ],
    );
    assert.equal(stepTimes([{ step: 1 }]).size, 0, 'no time recorded: no wall-time axis');
    assert.deepEqual([45, 90, 600, 3900].map(fmtDuration), ['45s', '1m30', '10m', '1h05']);
  });

  it('the chart search matches every word against the title, series labels and metric names', () => {
    const spec = { title: 'KL', metrics: [{ key: 'actor/ppo_kl', label: 'policy vs rollout' }] };
    assert.equal(chartMatches(spec, ''), true);
    assert.equal(chartMatches(spec, 'kl'), true);
    assert.equal(chartMatches(spec, 'ppo rollout'), true);
    assert.equal(chartMatches(spec, 'entropy'), false);
  });
});
