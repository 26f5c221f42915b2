/** The dashboard's pure parts: sparse series get markers, the legend's nearest recorded value, a run's header. */
import assert from 'node:assert/strict';
import type { MetricsRow } from '../../src/core/protocol';
import { runStages } from '../../src/core/run/config';
import { emptyText, nearest, questionKinds, runStatus, sparseSeries, stageMarks } from '../../webview/dashboard/model';

describe('dashboard model', () => {
  it('held-out EM logged every 20 steps is sparse (markers); a per-step series is not', () => {
    // 41 steps; series 1 recorded at every step, series 2 at steps 0, 20, 40, series 3 nowhere.
    assert.deepEqual([...sparseSeries([41, 3, 0], 41)], [2]);
  });

  it('the by-kind charts have one series per question kind with held-out EM in any row (sorted), none without', () => {
    const rows: MetricsRow[] = [
      { step: 1, 'critic/score/mean': 0.2 },
      { step: 20, 'val/em': 0.3, 'val/em_by_kind/river': 0.1, 'val/em_by_kind/birthplace': 0.5, 'val/searches_by_kind/river': 2, 'val/answer_retrieved_by_kind/founder': 1 },
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
    const warming = { id: 'r', dir: '/r', state: 'running' as const, step: 0, total: 120, phase: 'warmup', warmup: { step: 150, steps: 300, loss: 2.3141 } };
    assert.equal(runStatus(warming), 'running · warm-up 150/300 · loss 2.314');
    assert.match(emptyText([warming]), /^Warm start .*: step 150 of 300, loss 2\.314\./);
    assert.match(emptyText([]), /^No metrics yet/);
  });

  it('a curriculum run (train.stages) is marked where each later stage starts, and its header names the stage', () => {
    const config = { data: { hops_mix: { '1': 1 } }, train: { stages: [{ steps: 200 }, { steps: 320, hops_mix: { '1': 1, '2': 3 } }, { steps: 10, hops_mix: null }] } };
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
    assert.deepEqual(marks.get(200), ['stage 2 of 3 starts after step 200 (hops_mix 1: 1, 2: 3; the KL reference, optimizer and LR schedule restart)']);
    assert.match(marks.get(520)![0]!, /^stage 3 of 3 .*the data's own mix/);
    assert.match(stageMarks([run, { ...run, id: 'other' }]).get(200)![1]!, /^other: stage 2 of 3/, 'overlaid runs name theirs');
    assert.equal(stageMarks([{ id: 'r', dir: '/r', state: 'finished', step: 3 }]).size, 0);
  });
});
