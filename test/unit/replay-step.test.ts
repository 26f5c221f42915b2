/**
 * `search-agent-studio replay-step` (issue 46) on a real 4-step tiny run whose weights move every step (the real CLI
 * and the real trainer's replay_step: make_batch, window_stats, objective): a step replayed at the weights that
 * trained it matches — ids, per-token log-probs, the recorded loss and gradient norm —; at another step's checkpoint,
 * or at its own with a planted perturbation of one weight tensor, it does not, and says where. And `whatif --ablate`:
 * one command forking rollouts with the run's retriever, an empty one and a random one.
 */
import assert from 'node:assert/strict';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { agrees, describeReplay, type ReplayStepResult, stepRecords } from '../../src/core/audit/replayStep';
import { replayCheckpoint, runReplayStep } from '../../src/core/host/replayStep';
import { findPython, pythonCandidates } from '../../src/core/python';
import { RandomRetriever } from '../../src/core/retrieval/random';
import type { Rollout } from '../../src/core/run/format';
import { streamRollouts } from '../../src/core/store/rollouts';
import { scratchDir } from '../support/scratch';
import { sharedVariedRun } from '../support/tinyRun';

const ROOT = resolve(__dirname, '../..');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

describe('replay-step: a recorded step through the trainer at a checkpoint', function () {
  this.timeout(900_000);
  let run: string;
  let python: string;
  before(async () => {
    const found = await findPython(pythonCandidates([], ROOT));
    assert.ok(found.found, 'a Python with torch is needed (run scripts/setup.sh)');
    python = found.found.executable;
    run = await sharedVariedRun(scratchDir('sas-replay-step-'));
  });

  it('step 3 at step 2’s checkpoint (the weights that sampled and trained it): everything matches, exit 0', async () => {
    const r = await cli('replay-step', run, '--step', '3', '--json', '--python', python);
    assert.equal(r.exitCode, 0, r.stderr + r.stdout.slice(0, 2000));
    const o = JSON.parse(r.stdout) as ReplayStepResult;
    assert.equal(o.checkpoint_step, 2);
    assert.ok(o.ids_identical && o.text_identical && o.loss_mask_identical);
    assert.ok(o.logprob.compared > 0 && o.logprob.flagged === 0, JSON.stringify(o.logprob));
    assert.ok(o.logprob.max_abs_diff < o.tolerance);
    // the microscope's view: one Δ per recorded token, null where not compared (the prompt, observations)
    const records: Rollout[] = [];
    for await (const row of streamRollouts(join(run, 'rollouts', 'step-000003')))
      if (row.record) records.push(row.record); // the run recorded a token store
    for (const d of o.rollouts_detail) {
      const rec = records.find((x) => x.id === d.id)!;
      const tk = rec.tokens!;
      assert.equal(d.delta.length, tk.ids!.length);
      d.delta.forEach((x, i) =>
        assert.equal(x === null, !(tk.loss_mask[i] === 1 && typeof tk.logprob?.[i] === 'number'), `${d.id} token ${i}`),
      );
    }
    // the recorded loss and gradient norm (one mini-batch of one epoch: comparable), recomputed
    assert.ok(o.comparable.loss);
    assert.deepEqual(o.metrics.map((m) => m.key).sort(), ['actor/grad_norm', 'actor/kl_loss', 'actor/pg_loss']);
    assert.ok(
      o.metrics.every((m) => m.agrees),
      JSON.stringify(o.metrics),
    );
    assert.ok(
      o.metrics.find((m) => m.key === 'actor/grad_norm')!.recorded > 0,
      'the step trained: a real gradient was recomputed',
    );
  });

  it('step 3 at its own checkpoint (after its update): the log-probs and the loss differ, exit 1, the worst tokens named', async () => {
    const r = await cli('replay-step', run, '--step', '3', '--checkpoint', 'step-000003', '--python', python);
    assert.equal(r.exitCode, 1, r.stderr);
    assert.match(r.stdout, /MISMATCH/);
    assert.match(r.stdout, /ids\s+identical/);
    assert.match(r.stdout, /\d+ tokens over, max \|Δ\| [\d.e-]+ — #\d+ /);
    assert.match(r.stdout, /actor\/pg_loss .*DIFFERS/);
  });

  it('a planted change — one weight tensor perturbed in a copy of the right checkpoint — is seen, token by token', async () => {
    const planted = join(scratchDir('sas-replay-plant-'), 'step-000002');
    cpSync(join(run, 'checkpoints', 'step-000002'), planted, { recursive: true });
    const p = await execa(
      python,
      [
        '-c',
        'import sys, torch; s = torch.load(sys.argv[1]); k = sorted(s)[0]; s[k] = s[k] + 0.05 * torch.randn(s[k].shape, generator=torch.Generator().manual_seed(0)); torch.save(s, sys.argv[1]); print(k)',
        join(planted, 'trainable.pt'),
      ],
      { reject: false },
    );
    assert.equal(p.exitCode, 0, p.stderr);
    const r = await cli('replay-step', run, '--step', '3', '--checkpoint', planted, '--json', '--python', python);
    assert.equal(r.exitCode, 1, r.stderr);
    const o = JSON.parse(r.stdout) as ReplayStepResult;
    assert.ok(o.ids_identical, 'the ids are the recorded ones: the weights are what changed');
    assert.ok(o.logprob.flagged > 0 && o.logprob.max_abs_diff > o.tolerance);
    assert.ok(o.rollouts_detail.some((d) => d.flagged.length > 0));
    assert.equal(o.match, false);
  });

  it('a step recorded in part (train.record.groups): ids and log-probs compare, the full step’s loss and gradient norm are not comparable, exit 0', async () => {
    // step 3's store rewritten by the trainer's own writer as the recorder writes a sampled step: one whole GRPO
    // group of the two (the one with the widest rewards), its sas.store metadata saying recorded 2 of 4
    const copy = join(scratchDir('sas-replay-sampled-'), 'run');
    cpSync(run, copy, { recursive: true });
    const p = await execa(
      python,
      [
        '-c',
        [
          'import sys',
          'from search_agent_trainer import token_store as ts',
          'd = sys.argv[1] + "/rollouts"',
          'recs = ts.read_step(d + "/step-000003")',
          'gs = {}',
          '[gs.setdefault(r["group"], []).append(r) for r in recs]',
          'keep = max(gs.values(), key=lambda g: max(r["reward"] for r in g) - min(r["reward"] for r in g))',
          'ts.records_to_step(d, "step-000003", keep, {"step": 3, "split": "train", "recorded": len(keep), "of": len(recs)})',
          'print(len(keep), len(recs))',
        ].join('\n'),
        copy,
      ],
      { reject: false, env: { PYTHONPATH: join(ROOT, 'trainer') } },
    );
    assert.equal(p.exitCode, 0, p.stderr);
    assert.equal(p.stdout.trim(), '2 4');
    const r = await cli('replay-step', copy, '--step', '3', '--json', '--python', python);
    assert.equal(r.exitCode, 0, r.stderr + r.stdout.slice(0, 2000));
    const o = JSON.parse(r.stdout) as ReplayStepResult;
    assert.equal(o.rollouts, 2);
    assert.equal(o.step_rollouts, 4);
    assert.ok(o.ids_identical && o.text_identical && o.loss_mask_identical);
    assert.ok(o.logprob.compared > 0 && o.logprob.flagged === 0, JSON.stringify(o.logprob));
    assert.equal(o.comparable.loss, false);
    assert.match(o.comparable.why ?? '', /step 3 recorded 2 of 4 rollouts \(/);
    assert.deepEqual(o.metrics, [], 'the step’s metrics cover all 4 rollouts: nothing compared');
    assert.equal(o.match, true);
    const text = await cli('replay-step', copy, '--step', '3', '--python', python);
    assert.equal(text.exitCode, 0, text.stderr);
    assert.match(text.stdout, /\(2 of the step's 4 rollouts, recorded, .*\): MATCH/);
    assert.match(text.stdout, /recorded\s+not comparable: step 3 recorded 2 of 4 rollouts/);
  });

  it('--checkpoint as a relative directory is taken from the working directory (the trainer runs in its own)', async () => {
    const r = await execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/cli/main.ts'),
        'replay-step',
        '.',
        '--step',
        '3',
        '--checkpoint',
        join('checkpoints', 'step-000002'),
        '--json',
        '--python',
        python,
      ],
      { reject: false, cwd: run },
    );
    assert.equal(r.exitCode, 0, r.stderr + r.stdout.slice(0, 2000));
    assert.equal((JSON.parse(r.stdout) as ReplayStepResult).checkpoint_step, 2);
  });

  it('records that cannot be read are named: a step whose token file is cut short is not "no rollouts recorded"', async () => {
    const copy = join(scratchDir('sas-replay-cut-'), 'run');
    cpSync(run, copy, { recursive: true });
    const tokens = join(copy, 'rollouts', 'step-000003', 'tokens.parquet');
    writeFileSync(tokens, readFileSync(tokens).subarray(0, 300));
    const r = await cli('replay-step', copy, '--step', '3', '--python', python);
    assert.equal(r.exitCode, 2, r.stderr);
    assert.match(
      r.stderr,
      /step 3 of .*: no training rollout could be read; 1 record that may be the step's could not be read \(.*step-000003:1: tokens\.parquet/,
    );
    // another step's damage is not this step's
    assert.deepEqual((await stepRecords(copy, 2)).malformed, []);
    // a step read in part: the rest replays and matches, the unread record is named, and the exit is 2 (bad input,
    // as in audit), not 0 — a gate on the exit status must not pass on a step it could not read whole
    const part = join(scratchDir('sas-replay-part-'), 'run');
    cpSync(run, part, { recursive: true });
    // the last row's meta cut (pyarrow, as the recorder writes it; the schema's metadata kept)
    await execa(python, [
      '-c',
      [
        'import sys, pyarrow as pa, pyarrow.parquet as pq',
        't = pq.read_table(sys.argv[1])',
        'm = t.column("meta").to_pylist(); m[-1] = "{cut"',
        'i = t.schema.get_field_index("meta")',
        'pq.write_table(t.set_column(i, t.schema.field(i), pa.array(m, t.schema.field(i).type)), sys.argv[1])',
      ].join('\n'),
      join(part, 'rollouts', 'step-000003', 'rollouts.parquet'),
    ]);
    const p = await cli('replay-step', part, '--step', '3', '--python', python);
    assert.equal(p.exitCode, 2, p.stderr + p.stdout);
    assert.match(p.stdout, /: MATCH/);
    assert.match(p.stdout, /malformed\s+1 record that may be the step's could not be read/);
    assert.match(p.stderr, /step-000003:4: meta: invalid JSON in rollouts\.parquet.*\(skipped\)/);
    // in the report: the malformed records, named as the cause of a step not comparable
    const o = JSON.parse(
      (await cli('replay-step', run, '--step', '3', '--json', '--python', python)).stdout,
    ) as ReplayStepResult;
    const text = describeReplay(
      {
        ...o,
        comparable: { loss: false, why: 'step 3 recorded 3 of 4 rollouts (record sampling)' },
        malformed: [
          {
            file: 'r/step-000003.jsonl',
            line: 4,
            field: '',
            message: 'invalid JSON',
            text: 'r/step-000003.jsonl:4: invalid JSON',
          },
        ],
      },
      [],
    ).join('\n');
    assert.match(
      text,
      /malformed\s+1 record that may be the step's could not be read \(r\/step-000003\.jsonl:4: invalid JSON\)/,
    );
    assert.match(
      text,
      /not comparable: the step's malformed records \(above\) were not replayed; step 3 recorded 3 of 4/,
    );
  });

  it('an aborted replay (Ctrl-C) stops the trainer at once instead of running to the end', async () => {
    const { records } = await stepRecords(run, 3);
    const ac = new AbortController();
    const replay = runReplayStep({ python, runDir: run, checkpoint: 'step-000002', records, signal: ac.signal });
    setTimeout(() => ac.abort(), 200);
    const t0 = Date.now();
    await assert.rejects(replay, /stopped/);
    assert.ok(Date.now() - t0 < 5_000, `stopped in ${Date.now() - t0} ms`);
  });

  it('bad usage: no such step, no checkpoint before it, a step with no tokens: exit 2 naming why', async () => {
    const none = await cli('replay-step', run, '--step', '99', '--python', python);
    assert.equal(none.exitCode, 2);
    assert.match(none.stderr, /step 99 .*no training rollouts recorded \(steps with rollouts: 1–4\)/);
    assert.equal(replayCheckpoint(['step-000001'], 3), undefined);
    assert.equal(replayCheckpoint(['step-000001', 'step-000002'], 3), 'step-000002');
    // a TRL run's step 0 is its initial-model/ (it saves no step-000000): the weights that sampled step 1
    assert.equal(replayCheckpoint(['initial-model', 'step-000001'], 1), 'initial-model');
    assert.equal(replayCheckpoint(['step-000001'], 1), undefined);
    assert.ok(agrees(0, 2e-10) && agrees(1, 1.0005) && !agrees(1, 1.01));
  });

  it('whatif --ablate forks each rollout with the run’s retriever, an empty one and a random one, in one command', async () => {
    const r = await cli(
      'whatif',
      run,
      '--ablate',
      '--checkpoint',
      'step-000004',
      '--filter',
      'split == "val"',
      '--step',
      '4',
      '--limit',
      '2',
      '--json',
      '--python',
      python,
    );
    assert.equal(r.exitCode, 0, r.stderr);
    const o = JSON.parse(r.stdout);
    assert.equal(o.rows.length, 2);
    for (const row of o.rows)
      for (const arm of ['run', 'empty', 'random'])
        assert.equal(typeof row.arms[arm].reward, 'number', JSON.stringify(row));
    assert.equal(o.summary.checkpoint, 'step-000004');
    assert.match(o.summary.random_pool.from, /corpus\.jsonl$/, "the demo run's corpus");
    assert.ok(o.summary.random_pool.documents > 10);
    assert.equal(typeof o.summary.reliance, 'number');
    const usage = await cli('whatif', run, '--python', python);
    assert.equal(usage.exitCode, 2);
    assert.match(usage.stderr, /--retriever-url URL\) or ask for the ablation \(--ablate\)/);
  });

  it('the random retriever: k distinct documents of its pool, the same for the same query', async () => {
    const pool = Array.from({ length: 20 }, (_, i) => ({ id: String(i), contents: `t${i}\nx` }));
    const rr = new RandomRetriever(pool, 1);
    const [a, b] = await rr.retrieve(['q', 'another'], 5);
    assert.equal(new Set(a!.map((h) => h.document.id)).size, 5);
    assert.deepEqual((await rr.retrieve(['q'], 5))[0], a);
    assert.notDeepEqual(a, b);
    assert.equal((await new RandomRetriever(pool.slice(0, 2)).retrieve(['q'], 5))[0]!.length, 2);
  });
});
