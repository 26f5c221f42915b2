// The Search-R1-scale benchmark (bench/searchr1.bench.ts over bench/searchr1_sim.py) at a tiny size, so neither rots:
// the simulation writes its steps through the trainer's recorder into the token store, and every measurement runs.
// No timing is asserted (timings are the benchmark's, as ratios, in docs/benchmarks.md).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { run } from '../../bench/searchr1.bench';
import { findPython, pythonCandidates } from '../../src/core/python';
import { storeSteps } from '../../src/core/store/tokenStore';
import { scratchDir } from '../support/scratch';

const ROOT = resolve(__dirname, '../..');

describe('bench searchr1 (tiny)', function () {
  this.timeout(600_000);

  it('simulates a run through the real recorder and measures every view over it', async function () {
    if (!(await findPython(pythonCandidates([], ROOT))).found) this.skip();
    const dir = scratchDir('sas-bench-sim-');
    const lines = await run({ steps: 2, rollouts: 20, metricsSteps: 12, dir, quick: true });
    const sim = JSON.parse(readFileSync(join(dir, 'sim.json'), 'utf8')) as {
      rollouts: number;
      tokens: number;
      errors: string[];
      record: { recorded: { steps: number; rollouts: number } };
      compare: { ratio: number };
    };
    assert.deepEqual(sim.errors, []);
    assert.equal(sim.rollouts, 40);
    assert.deepEqual(sim.record.recorded, { ...sim.record.recorded, steps: 2, rollouts: 40 });
    assert.ok(sim.tokens >= 40 * 500 && sim.tokens <= 40 * 4000, `${sim.tokens} tokens: 500-4,000 a trajectory`);
    assert.ok(sim.compare.ratio > 0);
    assert.equal((await storeSteps(join(dir, 'run', 'rollouts'))).length, 2);
    assert.ok(existsSync(join(dir, 'run', 'metrics.jsonl')));
    for (const what of [
      'bytes/token',
      'writer vs dumps',
      'submit median',
      'first rows',
      'filter answered',
      'replay of one rollout',
      'audit of the whole run',
      'dashboard:',
    ]) {
      assert.ok(
        lines.some((l) => l.includes(what)),
        `a line about ${what}`,
      );
    }
    assert.ok(
      lines.some((l) => /audit of the whole run \(40 rollouts\)/.test(l)),
      lines.join('\n'),
    );
  });
});
