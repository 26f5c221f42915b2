/** The dashboard's pure parts: sparse series get markers, the legend's nearest recorded value, a run's header. */
import assert from 'node:assert/strict';
import { emptyText, nearest, runStatus, sparseSeries } from '../../webview/dashboard/model';

describe('dashboard model', () => {
  it('held-out EM logged every 20 steps is sparse (markers); a per-step series is not', () => {
    // 41 steps; series 1 recorded at every step, series 2 at steps 0, 20, 40, series 3 nowhere.
    assert.deepEqual([...sparseSeries([41, 3, 0], 41)], [2]);
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
});
