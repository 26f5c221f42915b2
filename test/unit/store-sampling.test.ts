// A token store that recorded a sample of a step (the recorder's `train.record.groups`: `sas.store` {"recorded", "of"}
// in each step's metadata; docs/run-format.md#the-token-store): `inspect` and `audit` say the counts are over the
// sample, and the run-level zero-std-high takes the trainer's reward/frac_zero_std_groups (over every rollout of the
// step) where it logged one, not the sample — which always keeps flagged groups, so it leans toward them.
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { audit } from '../../src/cli/audit';
import { exportJsonl } from '../../src/cli/exportJsonl';
import { inspect } from '../../src/cli/inspect';
import { emptyStepAudit, runAdvisories } from '../../src/core/audit';
import { RunAudit } from '../../src/core/audit/run';
import type { Rollout } from '../../src/core/run/format';
import { samplingOf, storeRecording } from '../../src/core/store/rollouts';
import { writeStoreStep } from '../../src/core/store/tokenStore';
import { scratchDir } from '../support/scratch';

/** One GRPO group of 4 at step 1, every reward 0: the group the sampler kept (16 groups, 4 of them flat). */
function group(): Rollout[] {
  return Array.from({ length: 4 }, (_, i) => ({
    v: 2,
    id: `run:train:1:0:${i}`,
    step: 1,
    group: 'train:1:0',
    sample: i,
    split: 'train',
    question: 'q',
    golden: ['g'],
    prompt: 'Question: q',
    response: '<answer> x </answer>',
    reward: 0,
    finish: 'answer',
    turns: 1,
    searches: 0,
  }));
}

async function sampledRun(metrics: boolean): Promise<string> {
  const dir = scratchDir('sas-store-sampled-');
  await writeStoreStep(join(dir, 'rollouts'), 'step-000001', group(), {
    step: 1,
    split: 'train',
    recorded: 4,
    of: 64,
  });
  writeFileSync(
    join(dir, 'run.json'),
    JSON.stringify({ v: 1, id: 'run', status: 'finished', created: 'x', config: {} }),
  );
  if (metrics)
    writeFileSync(
      join(dir, 'metrics.jsonl'),
      `${JSON.stringify({ step: 1, 'reward/frac_zero_std_groups': 0.25, 'record/rollouts': 4 })}\n`,
    );
  return dir;
}

function io() {
  const o = { out: '', err: '' };
  return { o, out: (s: string) => void (o.out += s), err: (s: string) => void (o.err += s) };
}

describe('a sampled token store', function () {
  this.timeout(120_000);

  it('storeRecording / samplingOf read what each step recorded', async () => {
    const dir = await sampledRun(false);
    const rec = await storeRecording(dir);
    assert.deepEqual(rec, [{ step: 1, split: 'train', recorded: 4, of: 64 }]);
    assert.deepEqual(samplingOf(rec), {
      steps: 1,
      of_steps: 1,
      recorded: 4,
      of: 64,
      by_step: { 1: { recorded: 4, of: 64 } },
    });
    assert.equal(samplingOf([{ step: 1, split: 'train', recorded: 8, of: 8 }]), undefined);
  });

  it("a JSONL run says so too: the recorder writes each step's recording beside its JSONL file (step-N.recording.json)", async () => {
    const dir = scratchDir('sas-jsonl-sampled-');
    mkdirSync(join(dir, 'rollouts'));
    writeFileSync(
      join(dir, 'rollouts', 'step-000001.jsonl'),
      group()
        .map((r) => `${JSON.stringify(r)}\n`)
        .join(''),
    );
    writeFileSync(
      join(dir, 'rollouts', 'step-000001.recording.json'),
      JSON.stringify({ step: 1, split: 'train', recorded: 4, of: 64 }),
    );
    // a step recorded whole, and an older run's step with no recording: neither is a sample
    writeFileSync(
      join(dir, 'rollouts', 'step-000002.jsonl'),
      group()
        .map((r) => `${JSON.stringify({ ...r, id: r.id.replace(':1:', ':2:'), step: 2 })}\n`)
        .join(''),
    );
    writeFileSync(
      join(dir, 'rollouts', 'step-000002.recording.json'),
      JSON.stringify({ step: 2, split: 'train', recorded: 4, of: 4 }),
    );
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({ v: 1, id: 'run', status: 'finished', created: 'x', config: {} }),
    );
    assert.deepEqual(await storeRecording(dir), [
      { step: 1, split: 'train', recorded: 4, of: 64 },
      { step: 2, split: 'train', recorded: 4, of: 4 },
    ]);
    const c = io();
    assert.equal(await inspect(dir, { json: false, out: c.out, err: c.err }), 0);
    assert.match(c.o.out, /recorded 4 of 64 training rollouts \(sampled\) at 1 of 2 training steps/);
    // a sampled token store exported as JSONL (one file per step) stays labelled
    const store = await sampledRun(false);
    const exported = join(scratchDir('sas-export-sampled-'), 'rollouts');
    const e = io();
    assert.equal(await exportJsonl(store, exported, { out: e.out, err: e.err }), 0, e.o.err);
    assert.deepEqual(readdirSync(exported).sort(), ['step-000001.jsonl', 'step-000001.recording.json']);
    assert.deepEqual(await storeRecording(exported), [{ step: 1, split: 'train', recorded: 4, of: 64 }]);
    // no recording beside it: as before (nothing said)
    rmSync(join(dir, 'rollouts', 'step-000001.recording.json'));
    rmSync(join(dir, 'rollouts', 'step-000002.recording.json'));
    assert.deepEqual(await storeRecording(dir), []);
  });

  it("zero-std-high: the trainer's full-step metric wins over the recorded groups; a sample's own rate says so", () => {
    const step = { ...emptyStepAudit(1), rollouts: 4, groups: { groups: 1, zeroStd: 1 } };
    const metrics = [{ step: 1, 'reward/frac_zero_std_groups': 0.25 }];
    const sampled = { 1: { recorded: 4, of: 64 } };
    assert.deepEqual(runAdvisories([step], metrics, {}, sampled), []);
    // a step recorded whole: its groups are every group of the step
    assert.equal(runAdvisories([step], metrics)[0]?.over, undefined);
    assert.equal(runAdvisories([step], metrics).length, 1);
    const high = runAdvisories([step], [{ step: 1, 'reward/frac_zero_std_groups': 0.75 }], {}, sampled);
    assert.equal(high.length, 1);
    assert.equal(high[0]!.over, 'trainer');
    assert.equal(high[0]!.value, 0.75);
    const bySample = runAdvisories([step], [], {}, { 1: { recorded: 4, of: 64 } });
    assert.equal(bySample.length, 1);
    assert.equal(bySample[0]!.over, 'sample');
    assert.match(bySample[0]!.message, /over the recorded sample: 4 of 64 rollouts/);
  });

  it('audit: exit 0 where the trainer says 25%, the sample labelled; without metrics the advisory says it is over the sample', async () => {
    const dir = await sampledRun(true);
    let c = io();
    assert.equal(await audit(dir, { json: false, out: c.out, err: c.err }), 0, c.o.out);
    assert.match(c.o.out, /recorded 4 of 64 training rollouts \(sampled\)/);
    assert.doesNotMatch(c.o.out, /zero-std-high/);
    c = io();
    assert.equal(await audit(dir, { json: true, out: c.out, err: c.err }), 0);
    const j = JSON.parse(c.o.out) as { summary: { sampled: { recorded: number; of: number } } };
    assert.deepEqual([j.summary.sampled.recorded, j.summary.sampled.of], [4, 64]);
    // the dashboard's run audit: the same rule
    const series = await new RunAudit(dir).update();
    assert.ok(series?.length);
    assert.ok(series.every((s) => !s.alarms['zero-std-high']));

    const bare = await sampledRun(false);
    c = io();
    assert.equal(await audit(bare, { json: true, out: c.out, err: c.err }), 1);
    const b = JSON.parse(c.o.out) as { advisories: { name: string; over?: string; message: string }[] };
    assert.deepEqual(
      b.advisories.map((a) => [a.name, a.over]),
      [['zero-std-high', 'sample']],
    );
  });

  it('inspect: the summary says the store is sampled and takes the trainer rate for the learning-signal warning', async () => {
    const dir = await sampledRun(true);
    let c = io();
    assert.equal(await inspect(dir, { json: false, out: c.out, err: c.err }), 0);
    assert.match(c.o.out, /recorded 4 of 64 training rollouts \(sampled\) at 1 of 1 training steps/);
    assert.match(c.o.out, /GRPO groups {3}1 recorded, all rewards equal in 1 \(100\.0% of the sample\)/);
    assert.match(c.o.out, /trainer {7}all rewards equal in 25\.0% of the groups/);
    assert.doesNotMatch(c.o.out, /no learning signal/);
    c = io();
    assert.equal(await inspect(dir, { json: true, out: c.out, err: c.err }), 0);
    const j = JSON.parse(c.o.out) as {
      summary: { sampled: { recorded: number }; trainer_frac_zero_std: { mean: number; steps: number } };
    };
    assert.equal(j.summary.sampled.recorded, 4);
    assert.deepEqual(j.summary.trainer_frac_zero_std, { mean: 0.25, steps: 1 });
  });
});
