// Counterfactual replay's host (src/core/host/fork.ts) and CLI (`fork`, `whatif`) against the real env server and
// the real policy server (the trainer's fork.py) over a 2-step tiny run: a greedy held-out rollout forked at turn 2
// with nothing edited comes back unchanged, the policy server is reused across forks and gone after stop().
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { defaultCheckpoint, ForkHost, findRollout, generationTurns, listCheckpoints } from '../../src/core/host/fork';
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
    assert.equal(defaultCheckpoint(cps, { step: 0, split: 'val' }), 'step-000001');
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
    for (const row of out.rows)
      assert.ok(typeof row.reward_before === 'number' && typeof row.reward_after === 'number', JSON.stringify(row));
    assert.equal(out.summary.rollouts, 2);
    assert.equal(out.summary.improved + out.summary.worsened + out.summary.unchanged, 2);
    const bad = await cli('whatif', runDir, '--filter', 'reward ==', '--retriever-url', env.url);
    assert.equal(bad.exitCode, 2);
    assert.match(bad.stderr, /--filter/);
  });
});
