// Counterfactual replay's host (src/core/host/fork.ts) and CLI (`fork`, `whatif`) against the real env server and
// the real policy server (the trainer's fork.py) over a 2-step tiny run: a greedy held-out rollout forked at turn 2
// with nothing edited comes back unchanged, the policy server is reused across forks and gone after stop().
import assert from 'node:assert/strict';
import { chmodSync, cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import {
  defaultCheckpoint,
  ForkHost,
  findRollout,
  forkCheckpointChoices,
  generationTurns,
  INITIAL_MODEL,
  listCheckpoints,
  PolicyProcess,
} from '../../src/core/host/fork';
import { type EnvServerProcess, isAlive, startEnvServerProcess } from '../../src/core/host/processes';
import { RunHost } from '../../src/core/host/runHost';
import { findPython, pythonCandidates } from '../../src/core/python';
import { scratchDir } from '../support/scratch';

const ROOT = resolve(__dirname, '../..');
const launcher = {
  node: process.execPath,
  args: ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/server/main.ts')],
};
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

describe('fork: the policy server behind counterfactual replay', function () {
  this.timeout(300_000);
  let python: string;
  let runDir: string;
  let env: EnvServerProcess;
  const id = (step: number, group: number) => `${runDir.split('/').pop()}:val:${step}:${group}:0`;

  before(async () => {
    const found = await findPython(pythonCandidates([], ROOT));
    assert.ok(found.found, 'a Python with torch is needed (run scripts/setup.sh)');
    python = found.found.executable;
    const tmp = scratchDir('sas-fork-');
    const host = await RunHost.start({
      python,
      config: join(ROOT, 'test/fixtures/runs/tiny.run.json'),
      runDir: join(tmp, 'run'),
      serverLauncher: launcher,
    });
    const outcome = await host.done;
    assert.equal(outcome.status, 'finished', outcome.error?.message);
    runDir = outcome.runDir;
    env = await startEnvServerProcess(
      ['--port', '0', '--corpus', join(ROOT, 'examples/demo/corpus.jsonl'), '--reward', 'builtin:em'],
      { launcher },
    );
  });
  after(async () => env?.child.stop(3_000));

  it('defaults to the checkpoint that produced a rollout: step k for held-out, k − 1 for training rollouts', async () => {
    const cps = await listCheckpoints(runDir);
    assert.deepEqual(cps, ['step-000001', 'step-000002']);
    assert.equal(defaultCheckpoint(cps, { step: 2, split: 'val' }), 'step-000002');
    assert.equal(defaultCheckpoint(cps, { step: 2, split: 'train' }), 'step-000001');
    // never one trained after the rollout: none at or before its step is none (the CLI says so, naming them)
    assert.equal(defaultCheckpoint(cps, { step: 0, split: 'val' }), undefined);
    assert.equal(defaultCheckpoint(cps, { step: 1, split: 'train' }), undefined);
    // a TRL run (no step-000000): its initial-model/ is its step-0 checkpoint
    const trl = scratchDir('sas-fork-trl-');
    mkdirSync(join(trl, 'checkpoints', 'step-000001'), { recursive: true });
    writeFileSync(join(trl, 'checkpoints', 'step-000001', 'config.json'), '{}');
    mkdirSync(join(trl, INITIAL_MODEL));
    writeFileSync(join(trl, INITIAL_MODEL, 'config.json'), '{}');
    const trlCps = await listCheckpoints(trl);
    assert.deepEqual(trlCps, [INITIAL_MODEL, 'step-000001']);
    assert.equal(defaultCheckpoint(trlCps, { step: 0, split: 'val' }), INITIAL_MODEL);
    assert.equal(defaultCheckpoint(trlCps, { step: 1, split: 'train' }), INITIAL_MODEL);
    // the editor's fork panel: no default preselects nothing and says why; the later checkpoints are named as such
    const none = forkCheckpointChoices(cps, { id: 'r1', step: 1, split: 'train' });
    assert.equal(none.defaultCheckpoint, undefined);
    assert.match(none.noDefault ?? '', /rollout r1 \(train step 1\) was produced by the weights of step 0.*choose one/);
    assert.deepEqual(none.later, ['step-000001', 'step-000002']);
    const some = forkCheckpointChoices(cps, { id: 'r2', step: 1, split: 'val' });
    assert.equal(some.defaultCheckpoint, 'step-000001');
    assert.equal(some.noDefault, undefined);
    assert.deepEqual(some.later, ['step-000002']);
  });

  it('fork and whatif usage errors exit 2 before any server starts: turn, checkpoint, retriever URL, edit, limit, step', async () => {
    const usage = async (args: string[], why: RegExp) => {
      const r = await cli(...args, '--python', '/nonexistent/python3'); // no Python is looked for: nothing starts
      assert.equal(r.exitCode, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, why);
    };
    const val = id(2, 0);
    await usage(['fork', runDir, val, '--turn', '9'], /--turn 9: rollout .* has \d generation turns? \(1\.\.\d\)/);
    await usage(
      ['fork', runDir, val, '--turn', '1', '--checkpoint', 'step-000009'],
      /--checkpoint step-000009: neither a complete checkpoint of .* \(step-000001, step-000002\)/,
    );
    await usage(
      ['fork', runDir, val, '--turn', '1', '--retriever-url', 'localhost'],
      /--retriever-url "localhost": not an http\(s\) URL/,
    );
    await usage(['fork', runDir, val, '--turn', '1', '--query', 'x'], /there is none before turn 1/);
    // a training rollout of step 1 was sampled by step 0's weights: this run has no checkpoint that old
    await usage(
      ['fork', runDir, `${runDir.split('/').pop()}:train:1:0:0`, '--turn', '1'],
      /train step 1\) was produced by the weights of step 0, and .* has no checkpoint at or before step 0 \(it has step-000001, step-000002\); name one with --checkpoint/,
    );
    for (const limit of ['-1', '1.5', '0'])
      await usage(['whatif', runDir, '--ablate', '--limit', limit], /--limit must be an integer ≥ 1/);
    await usage(
      ['whatif', runDir, '--ablate', '--step', 'abc'],
      /--step must be a step number \(an integer ≥ 0\), got something that is not a number/,
    );
    await usage(
      ['whatif', runDir, '--ablate', '--checkpoint', 'nope'],
      /--checkpoint nope: neither a complete checkpoint/,
    );
    await usage(['whatif', runDir, '--retriever-url', 'ftp://x'], /not an http\(s\) URL/);
  });

  it('a record that cannot be read is named, not passed over: a cut line, a token file cut short', async () => {
    const copy = join(scratchDir('sas-fork-corrupt-'), 'run');
    cpSync(runDir, copy, { recursive: true });
    const rollouts = join(copy, 'rollouts');
    const val2 = readdirSync(rollouts).find((f) => /^val-step-0*2(\.jsonl)?$/.test(f))!;
    const target = id(2, 0).replace(/^[^:]+/, 'run');
    if (val2.endsWith('.jsonl')) {
      const file = join(rollouts, val2);
      const lines = readFileSync(file, 'utf8').split('\n');
      writeFileSync(file, [lines[0]!.slice(0, 100), ...lines.slice(1)].join('\n')); // the first line cut
      await assert.rejects(
        findRollout(copy, target),
        new RegExp(
          `no rollout with id .*1 record could not be read, and it may be one of them: .*${val2}:1: invalid JSON`,
        ),
      );
    } else {
      const tokens = join(rollouts, val2, 'tokens.parquet');
      writeFileSync(tokens, readFileSync(tokens).subarray(0, 200)); // cut short
      await assert.rejects(findRollout(copy, target), new RegExp(`cannot be read whole: .*${val2}:1: tokens.parquet`));
    }
  });

  it('stop() does not wait for a policy server still loading its model: it is stopped, its start rejects', async () => {
    // a stand-in for a model that takes a minute to load: a "Python" that sleeps before it would be ready
    const slow = join(scratchDir('sas-fork-slow-'), 'python');
    writeFileSync(slow, '#!/bin/sh\nexec sleep 60\n');
    chmodSync(slow, 0o755);
    const ac = new AbortController();
    const start = PolicyProcess.start({
      python: slow,
      runDir,
      checkpoint: 'step-000001',
      envUrl: env.url,
      signal: ac.signal,
    });
    await new Promise((r) => setTimeout(r, 300));
    const t0 = Date.now();
    ac.abort();
    await assert.rejects(start, /the policy server for step-000001: it was stopped while it loaded/);
    assert.ok(Date.now() - t0 < 5_000, `stopped in ${Date.now() - t0} ms`);
    // and through the host: stop() while the first fork's server loads
    const host = new ForkHost({ python: slow, envUrl: env.url });
    const rec = await findRollout(runDir, id(2, 0));
    const fork = host.fork(runDir, rec, { turn: 1 });
    fork.catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    const t1 = Date.now();
    await host.stop();
    assert.ok(Date.now() - t1 < 5_000, `host stopped in ${Date.now() - t1} ms`);
    await assert.rejects(fork, /stopped while it loaded/);
  });

  it('forks a greedy held-out rollout at turn 2 unedited: the same tokens; one policy server, reused, gone after stop()', async () => {
    const host = new ForkHost({ python, serverLauncher: launcher });
    try {
      const rec = await findRollout(runDir, id(2, 0));
      assert.ok(generationTurns(rec) >= 2);
      const a = await host.fork(runDir, rec, { turn: 2 });
      assert.equal(a.checkpoint, 'step-000002');
      assert.equal(a.continuations[0]!.diverges_at, null);
      assert.deepEqual(a.continuations[0]!.tokens.ids, rec.tokens!.ids);
      assert.equal(a.continuations[0]!.response, rec.response);
      const pids = await host.pids();
      assert.equal(pids.length, 1);
      assert.ok(isAlive(pids[0]!));
      const b = await host.fork(runDir, await findRollout(runDir, id(2, 1)), { turn: 1 });
      assert.equal(b.continuations[0]!.diverges_at, null);
      assert.deepEqual(await host.pids(), pids, 'the same policy server answers the second fork');
      await assert.rejects(host.fork(runDir, rec, { turn: 9 }), /--turn 9: rollout .* has \d generation turns/);
      await host.stop();
      assert.ok(!isAlive(pids[0]!), 'the policy server is gone after stop()');
    } finally {
      await host.stop();
    }
  });

  it('fork --json prints exactly {continuations: [{response, answer, reward, diverges_at, tokens}]}; bad usage exits 2', async () => {
    const r = await cli('fork', runDir, id(2, 0), '--turn', '2', '--json', '--env-url', env.url, '--python', python);
    assert.equal(r.exitCode, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual(Object.keys(out), ['continuations']);
    assert.deepEqual(Object.keys(out.continuations[0]), ['response', 'answer', 'reward', 'diverges_at', 'tokens']);
    assert.equal(out.continuations[0].diverges_at, null);
    const bad = await cli('fork', runDir, id(2, 0), '--turn', '0', '--env-url', env.url);
    assert.equal(bad.exitCode, 2);
    assert.match(bad.stderr, /--turn must be an integer ≥ 1/);
  });

  it("fork tries the run's own Python first (run.json python), as train --resume does, and says when it is not usable", async () => {
    const file = join(runDir, 'run.json');
    const saved = readFileSync(file, 'utf8');
    try {
      writeFileSync(file, JSON.stringify({ ...JSON.parse(saved), python: '/nonexistent/python3' }));
      const r = await execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'fork',
          runDir,
          id(2, 0),
          '--turn',
          '2',
          '--json',
          '--env-url',
          env.url,
        ],
        { reject: false, cwd: ROOT },
      );
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(
        r.stderr,
        /note: the Python the run started in \(\/nonexistent\/python3\) is not usable \(.*\); forking in \//,
      );
      assert.equal(JSON.parse(r.stdout).continuations[0].diverges_at, null);
    } finally {
      writeFileSync(file, saved);
    }
  });

  it('whatif forks the filtered rollouts with another retriever and prints the reward before and after', async () => {
    const r = await cli(
      'whatif',
      runDir,
      '--step',
      '2',
      '--filter',
      'split == "val" && group ~ /:[01]$/',
      '--retriever-url',
      env.url,
      '--env-url',
      env.url,
      '--json',
      '--python',
      python,
    );
    assert.equal(r.exitCode, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.rows.length, 2);
    // before and after are both greedy forks from one checkpoint: with the run's own retriever named as the other,
    // nothing differs (against the recorded, sampled rollout the decoding would)
    for (const row of out.rows) {
      assert.ok(typeof row.reward_before === 'number' && typeof row.reward_after === 'number', JSON.stringify(row));
      assert.ok(typeof row.searches_before === 'number' && row.searches_after === row.searches_before);
      assert.equal(row.diverges_at, null, JSON.stringify(row));
      assert.ok('reward_recorded' in row);
    }
    assert.equal(out.summary.rollouts, 2);
    assert.equal(out.summary.unchanged, 2);
    // a fork that fails (a training rollout of step 1: sampled by step 0's weights, and this run has no checkpoint
    // that old) fails the command: exit 1, the error in its row
    const failed = await cli(
      'whatif',
      runDir,
      '--step',
      '1',
      '--filter',
      'split == "train"',
      '--limit',
      '1',
      '--retriever-url',
      env.url,
      '--env-url',
      env.url,
      '--python',
      python,
    );
    assert.equal(failed.exitCode, 1, failed.stderr);
    assert.match(failed.stdout, /error\s+error\s+.*no checkpoint at or before step 0/);
    assert.match(failed.stdout, /failed 1/);
    // --ablate too, its text naming each arm's error
    const ablated = await cli(
      'whatif',
      runDir,
      '--ablate',
      '--step',
      '1',
      '--filter',
      'split == "train"',
      '--limit',
      '1',
      '--env-url',
      env.url,
      '--python',
      python,
    );
    assert.equal(ablated.exitCode, 1, ablated.stderr);
    assert.match(ablated.stdout, /\n {4}run: rollout .* no checkpoint at or before step 0/);
  });
});
