/**
 * The runs on disk as the Runs view, the status bar and the dashboard read them: the reward averaged over the last
 * steps (one batch's reward is noise), the last held-out EM, and a running run's warm-up progress and loss; and what
 * "Show GRPO Groups…" offers per step (the share, or number, of zero-variance groups, from metrics and run.json).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { progressOf, readRun, rolloutFile, SMOOTHING, zeroVarianceSteps } from '../../src/core/host/runs';

describe('reading a run directory', () => {
  let dir: string;
  beforeEach(() => {
    dir = join(mkdtempSync(join(tmpdir(), 'sas-runs-')), 'demo-1');
    mkdirSync(dir);
  });
  afterEach(() => rmSync(join(dir, '..'), { recursive: true, force: true }));

  const runJson = (status: string, pid = process.pid) =>
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({
        v: 1,
        id: 'demo-1',
        status,
        created: '2026-01-01T00:00:00Z',
        config: {},
        step: 30,
        total_steps: 120,
        pid,
      }),
    );

  it('the smoothed reward is the mean over the last steps; held-out EM is the last evaluation', async () => {
    runJson('stopped');
    const rows = Array.from({ length: 30 }, (_, i) => ({
      step: i + 1,
      'critic/score/mean': i % 2 ? 1 : 0,
      ...(i % 20 === 19 ? { 'val/em': 0.25 } : {}),
    }));
    writeFileSync(
      join(dir, 'metrics.jsonl'),
      `${JSON.stringify({ step: 0, 'val/em': 0.0 })}\n${rows.map((r) => JSON.stringify(r)).join('\n')}\n`,
    );
    const info = (await readRun(dir))!;
    assert.equal(info.last?.reward, 1, 'the last batch');
    assert.equal(info.last?.rewardSmoothed, 0.5, `the mean of the last ${SMOOTHING}`);
    assert.equal(info.last?.valEm, 0.25);
    assert.equal(info.progress, undefined, 'a stopped run has no progress');
  });

  it('a running run in its warm start: the phase, the warm-up step, steps and loss from events.jsonl', async () => {
    runJson('running');
    const ev = (e: Record<string, unknown>) => JSON.stringify({ time: '2026-01-01T00:00:00Z', ...e });
    writeFileSync(
      join(dir, 'events.jsonl'),
      [
        ev({ event: 'started', total: 120 }),
        ev({ event: 'progress', step: 0, total: 120, phase: 'warmup', warmup_step: 25, warmup_steps: 300, loss: 3.5 }),
        ev({
          event: 'progress',
          step: 0,
          total: 120,
          phase: 'warmup',
          warmup_step: 150,
          warmup_steps: 300,
          loss: 2.314,
        }),
        '',
      ].join('\n'),
    );
    const info = (await readRun(dir))!;
    assert.equal(info.state, 'running');
    assert.deepEqual(info.progress, {
      phase: 'warmup',
      step: 0,
      total: 120,
      warmup: { step: 150, steps: 300, loss: 2.314 },
    });
    assert.deepEqual(progressOf({ event: 'progress', step: 3, total: 120, phase: 'update' }), {
      phase: 'update',
      step: 3,
      total: 120,
    });
    assert.equal(progressOf({ event: 'metrics', step: 3 }), undefined);
  });

  it("zero-variance groups per step: counted from run.json's rollout.batch_size, else a fraction; malformed lines skipped", async () => {
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({ v: 1, id: 'demo-1', status: 'finished', config: { rollout: { batch_size: 8, n: 8 } }, step: 3 }),
    );
    writeFileSync(
      join(dir, 'metrics.jsonl'),
      `${JSON.stringify({ step: 0, 'val/em': 0 })}\n${JSON.stringify({ step: 1, 'reward/frac_zero_std_groups': 0.375 })}\n{"step": 2, \n${JSON.stringify({ step: 3, 'reward/frac_zero_std_groups': 0 })}\n`,
    );
    assert.deepEqual(
      [...(await zeroVarianceSteps(dir))],
      [
        [1, { frac: 0.375, groups: 8 }],
        [3, { frac: 0, groups: 8 }],
      ],
    );
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({ v: 1, id: 'demo-1', status: 'finished', config: {}, step: 3 }),
    );
    assert.deepEqual(
      (await zeroVarianceSteps(dir)).get(1),
      { frac: 0.375 },
      'an imported run without the config: the fraction only',
    );
    assert.equal(rolloutFile(dir, 42), join(dir, 'rollouts', 'step-000042.jsonl'));
    // a step of the token store: its directory (only a committed one has rollouts.parquet)
    mkdirSync(join(dir, 'rollouts', 'step-000042'), { recursive: true });
    assert.equal(rolloutFile(dir, 42), join(dir, 'rollouts', 'step-000042.jsonl'), 'not committed: not a step');
    writeFileSync(join(dir, 'rollouts', 'step-000042', 'rollouts.parquet'), '');
    assert.equal(rolloutFile(dir, 42), join(dir, 'rollouts', 'step-000042'));
    assert.deepEqual((await readRun(dir))!.rolloutSteps, [42]);
  });
});
