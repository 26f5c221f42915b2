// The run host against the real env server and the real trainer (tiny policy, a few steps): a complete run,
// cancellation mid-step, a crash, a port in use, bad configs, and no orphan processes after any of them.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { ENGINE_HOSTS } from '../../src/core/host/engines';
import { EnvServerError, isAlive } from '../../src/core/host/processes';
import { envServerArgs, loadRunConfig, loadRunDirConfig, RunConfigError } from '../../src/core/host/runConfig';
import { RunDirError, RunHost, type RunHostOptions } from '../../src/core/host/runHost';
import { formerBuiltinName } from '../../src/core/paths';
import { findPython, pythonCandidates } from '../../src/core/python';
import { EventSchema, MetricsSchema, RunJsonSchema } from '../../src/core/run/format';
import { validate } from '../../src/core/schema/schema';
import { runModelDir } from '../../src/core/store/rollouts';
import { scratchDir } from '../support/scratch';

const ROOT = resolve(__dirname, '../..');
const FIXTURE = join(ROOT, 'test/fixtures/runs/tiny.run.json');
const launcher = {
  node: process.execPath,
  args: ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/server/main.ts')],
};

let python: string;
let tmp: string;

/** The fixture config with absolute paths and `patch` merged into its sections. */
async function config(patch: Record<string, Record<string, unknown>> = {}, name = 'tiny.run.json'): Promise<string> {
  const c = JSON.parse(readFileSync(FIXTURE, 'utf8'));
  delete c.$schema;
  c.data.train = join(ROOT, 'examples/demo/train.jsonl');
  c.data.eval = join(ROOT, 'examples/demo/eval.jsonl');
  for (const [k, v] of Object.entries(patch)) c[k] = { ...(c[k] ?? {}), ...v };
  const dir = await mkdtemp(join(tmp, 'cfg-'));
  const file = join(dir, name);
  await writeFile(file, JSON.stringify(c, null, 1));
  return file;
}

function jsonl(file: string): unknown[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

async function waitGone(pids: number[], ms = 10_000): Promise<number[]> {
  const until = Date.now() + ms;
  for (;;) {
    const alive = pids.filter(isAlive);
    if (!alive.length || Date.now() > until) return alive;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Processes whose command line mentions `text` (a run directory), from /proc. */
function processesMentioning(text: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (
        readFileSync(`/proc/${d}/cmdline`, 'utf8')
          .split('\0')
          .some((a) => a.includes(text))
      )
        out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

async function until(ok: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function withEngine(file: string, engine: string): Promise<string> {
  const c = JSON.parse(readFileSync(file, 'utf8'));
  await writeFile(file, JSON.stringify({ ...c, engine }));
  return file;
}

function start(options: Partial<RunHostOptions>, events: Record<string, unknown>[] = []): Promise<RunHost> {
  return RunHost.start({
    python,
    serverLauncher: launcher,
    runsParent: join(tmp, 'runs'),
    onEvent: (e) => events.push(e),
    stopGraceMs: 30_000,
    ...options,
  });
}

describe('run host: env server + trainer processes', function () {
  this.timeout(180_000);

  before(async () => {
    const found = await findPython(pythonCandidates([], ROOT));
    assert.ok(
      found.found,
      `a Python with torch is needed (run scripts/setup.sh): ${found.tried.map((t) => `${t.executable}: ${t.error}`).join('; ')}`,
    );
    python = found.found.executable;
    tmp = scratchDir('sas-host-');
  });

  it('runs a config to the end: run directory complete and valid, both processes gone', async () => {
    const events: Record<string, unknown>[] = [];
    const host = await start({ config: await config() }, events);
    assert.match(host.server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const pids = [host.server.child.pid, host.trainer.pid];
    const outcome = await host.done;
    assert.equal(outcome.status, 'finished', JSON.stringify(outcome.error));
    assert.equal(outcome.step, 2);
    assert.match(host.id, /^tiny-\d{8}-\d{6}$/);
    const run = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8'));
    assert.deepEqual(validate(RunJsonSchema, run), []);
    assert.equal(run.status, 'finished');
    const metrics = jsonl(join(host.runDir, 'metrics.jsonl'));
    for (const m of metrics) assert.deepEqual(validate(MetricsSchema, m), []);
    assert.deepEqual(
      metrics.map((m) => (m as { step: number }).step),
      [0, 1, 2],
    );
    assert.equal(
      typeof (metrics[0] as Record<string, unknown>)['val/em'],
      'number',
      'held-out EM before the first update',
    );
    for (const e of jsonl(join(host.runDir, 'events.jsonl'))) assert.deepEqual(validate(EventSchema, e), []);
    assert.ok(readdirSync(join(host.runDir, 'rollouts')).includes('step-000001'), 'step 1 recorded in the token store');
    assert.ok(existsSync(join(host.runDir, 'checkpoints', 'step-000002')));
    // DESIGN §4.2: logs/ holds the env server's log too
    assert.match(readFileSync(join(host.runDir, 'logs', 'server.log'), 'utf8'), /retriever: /);
    // The events the host passed on are the trainer's stdout events.
    assert.deepEqual([...new Set(events.map((e) => e.event))].sort(), [
      'checkpoint',
      'eval',
      'finished',
      'metrics',
      'progress',
      'started',
    ]);
    assert.deepEqual(await waitGone(pids), [], 'no process left behind');
  });

  it('stop mid-step: status stopped, a checkpoint, resumable; nothing left running', async () => {
    const events: Record<string, unknown>[] = [];
    const host = await start(
      {
        config: await config({ train: { steps: 50, eval_every: 0, checkpoint_every: 0 }, test: { step_delay_s: 1.5 } }),
      },
      events,
    );
    const pids = [host.server.child.pid, host.trainer.pid];
    await new Promise<void>((res) => {
      const t = setInterval(() => {
        if (events.some((e) => e.event === 'progress' && e.step === 2 && e.phase === 'rollout')) {
          clearInterval(t);
          res();
        }
      }, 50);
    });
    const outcome = await host.stop();
    assert.equal(outcome.status, 'stopped');
    assert.ok(outcome.step >= 1 && outcome.step < 50, `stopped at ${outcome.step}`);
    const run = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'stopped');
    assert.ok(
      existsSync(join(host.runDir, 'checkpoints', `step-${String(outcome.step).padStart(6, '0')}`)),
      'checkpointed where it stopped',
    );
    assert.deepEqual(await waitGone(pids), []);

    // Resume from the run directory alone (its run.json has the config).
    const resumed = await start({ runDir: host.runDir, resume: true });
    const stepSeen = new Promise<void>((res) => {
      const t = setInterval(() => {
        const run2 = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8'));
        if (run2.step > outcome.step) {
          clearInterval(t);
          res();
        }
      }, 100);
    });
    await stepSeen;
    const second = await resumed.stop();
    assert.equal(second.status, 'stopped');
    assert.ok(second.step > outcome.step, `resumed past ${outcome.step} (now ${second.step})`);
    assert.deepEqual(await waitGone([resumed.server.child.pid, resumed.trainer.pid]), []);
  });

  it('run.json keeps builtin: names as the config wrote them (relative paths absolute); a resume resolves them in the install that resumes', async () => {
    const c = JSON.parse(readFileSync(FIXTURE, 'utf8'));
    delete c.$schema;
    const dir = await mkdtemp(join(tmp, 'builtin-'));
    await copyFile(join(ROOT, 'examples/demo/eval.jsonl'), join(dir, 'mine.jsonl'));
    c.data = { ...c.data, train: 'builtin:demo/train', eval: 'mine.jsonl' };
    c.retriever = { kind: 'demo', topk: 2, corpus: 'builtin:demo/corpus' };
    c.train = { steps: 1, eval_every: 0, checkpoint_every: 1 };
    const file = join(dir, 'builtin.run.json');
    await writeFile(file, JSON.stringify(c));
    const host = await start({ config: file });
    assert.equal((await host.done).status, 'finished');
    const stored = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8')).config;
    assert.deepEqual(
      [stored.data.train, stored.retriever.corpus],
      ['builtin:demo/train', 'builtin:demo/corpus'],
      'not a path into the install that started the run',
    );
    assert.equal(
      stored.data.eval,
      join(dir, 'mine.jsonl'),
      'a relative path is kept absolute: the run directory is elsewhere',
    );
    // Resuming reads the names from run.json and resolves them in the package running now.
    const loaded = await loadRunDirConfig(host.runDir);
    assert.equal(loaded.config.data.train, 'builtin:demo/train');
    assert.deepEqual(envServerArgs(loaded).slice(4, 6), ['--corpus', join(ROOT, 'examples/demo/corpus.jsonl')]);
    const resumed = await start({ runDir: host.runDir, resume: true });
    assert.equal((await resumed.done).status, 'finished');
    assert.deepEqual(
      JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8')).config,
      stored,
      'the resume writes the names back, not paths',
    );
  });

  it('a run.json of an older version (built-in data as paths into an install that is gone) resumes in this one; other missing paths stay an error naming the key', async () => {
    const gone = '/gone/search-agent-studio-0.0.9/examples/';
    const c = JSON.parse(readFileSync(FIXTURE, 'utf8'));
    delete c.$schema;
    c.data = { ...c.data, train: `${gone}demo/train.jsonl`, eval: `${gone}demo/eval.jsonl` };
    c.retriever = { kind: 'demo', topk: 2, corpus: `${gone}demo/corpus.jsonl` };
    c.train = { steps: 1, eval_every: 0, checkpoint_every: 1 };
    const runDir = join(await mkdtemp(join(tmp, 'old-')), 'run');
    await mkdir(runDir);
    const runJson = join(runDir, 'run.json');
    await writeFile(
      runJson,
      JSON.stringify({
        v: 1,
        id: 'run',
        status: 'stopped',
        created: '2025-01-01T00:00:00.000Z',
        updated: '2025-01-01T00:00:00.000Z',
        config: c,
        versions: {},
        step: 0,
        total_steps: 1,
      }),
    );
    const loaded = await loadRunDirConfig(runDir);
    assert.deepEqual(
      [loaded.config.data.train, loaded.config.data.eval, loaded.config.retriever?.corpus],
      ['builtin:demo/train', 'builtin:demo/eval', 'builtin:demo/corpus'],
    );
    assert.deepEqual(envServerArgs(loaded).slice(4, 6), ['--corpus', join(ROOT, 'examples/demo/corpus.jsonl')]);
    const resumed = await start({ runDir, resume: true });
    assert.equal((await resumed.done).status, 'finished');
    const stored = JSON.parse(readFileSync(runJson, 'utf8')).config;
    assert.deepEqual(
      [stored.data.train, stored.data.eval, stored.retriever.corpus],
      ['builtin:demo/train', 'builtin:demo/eval', 'builtin:demo/corpus'],
      'written back with the names',
    );
    // A missing path that is no built-in data: the resume is refused naming run.json, the key and the path.
    await writeFile(
      runJson,
      JSON.stringify({
        ...JSON.parse(readFileSync(runJson, 'utf8')),
        config: { ...c, data: { ...c.data, train: '/gone/data/train.jsonl' } },
      }),
    );
    await assert.rejects(
      start({ runDir, resume: true }),
      (e: Error) =>
        e instanceof RunConfigError &&
        e.message.startsWith(`${runJson}: data.train: no such file or directory: /gone/data/train.jsonl`),
    );
    // The step itself: only a missing path ending in examples/<a built-in file> is mapped, to a name this install has.
    assert.equal(formerBuiltinName(`${gone}trl-tiny/model/`), 'builtin:trl-tiny/model');
    assert.equal(formerBuiltinName(`${gone}demo/mine.jsonl`), undefined);
    assert.equal(formerBuiltinName('/gone/data/train.jsonl'), undefined);
    assert.equal(
      formerBuiltinName(join(ROOT, 'examples/demo/train.jsonl')),
      undefined,
      'a path that exists is left alone',
    );
    assert.equal(formerBuiltinName('examples/demo/train.jsonl'), undefined, 'a relative path is the config’s own');
  });

  it('the model directory of a run (run.json model.path, for its tokenizer): builtin: names and an older run.json’s paths resolve here', async () => {
    const dir = await mkdtemp(join(tmp, 'model-'));
    for (const path of ['builtin:trl-tiny/model', '/gone/search-agent-studio-0.0.9/examples/trl-tiny/model']) {
      await writeFile(join(dir, 'run.json'), JSON.stringify({ config: { model: { kind: 'hf', path } } }));
      assert.equal(await runModelDir(dir), join(ROOT, 'examples/trl-tiny/model'), path);
    }
    await writeFile(join(dir, 'run.json'), JSON.stringify({ config: { model: { kind: 'hf', path: 'model' } } }));
    assert.equal(await runModelDir(dir), join(dir, 'model'));
  });

  it('a trainer crash: status failed with the traceback; the server is stopped too', async () => {
    const host = await start({ config: await config({ test: { crash_at_step: 2 } }) });
    const pids = [host.server.child.pid, host.trainer.pid];
    const outcome = await host.done;
    assert.equal(outcome.status, 'failed');
    assert.equal(outcome.exit.code, 1);
    assert.match(outcome.error?.message ?? '', /crash at step 2, on purpose/);
    assert.match(outcome.error?.traceback ?? '', /Traceback[\s\S]*RuntimeError/);
    const run = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'failed');
    assert.equal(run.step, 1, 'the last completed step stays recorded');
    assert.deepEqual(await waitGone(pids), []);
  });

  it('a new run in a run directory that holds something, or a resume while its trainer runs: RunDirError, nothing spawned', async () => {
    const dir = join(tmp, 'taken');
    await mkdir(join(dir, 'checkpoints', 'step-000040'), { recursive: true });
    await writeFile(join(dir, 'metrics.jsonl'), '{"step":40}\n');
    await assert.rejects(start({ config: await config(), runDir: dir }), (e: Error) => {
      assert.ok(e instanceof RunDirError, String(e));
      assert.match(e.message, /exists and is not empty .*--resume, or name another --run-dir/);
      return e.message.startsWith(dir);
    });
    assert.deepEqual(processesMentioning(dir), []);
    // run.json says running, and its pid (this process) is alive: a second trainer would interleave with the first
    const running = join(tmp, 'running');
    await mkdir(running);
    const c = JSON.parse(readFileSync(await config(), 'utf8'));
    await writeFile(
      join(running, 'run.json'),
      JSON.stringify({ status: 'running', pid: process.pid, step: 3, config: c }),
    );
    await assert.rejects(
      start({ resume: true, runDir: running }),
      (e: Error) => e instanceof RunDirError && e.message.includes(`still running (trainer pid ${process.pid})`),
    );
    assert.deepEqual(processesMentioning(running), []);
  });

  it('data.train a directory: the trainer exits 2, an invalid config (no resume), and the run directory it made is removed', async () => {
    const dataDir = join(tmp, 'a-directory');
    await mkdir(dataDir, { recursive: true });
    const runDir = join(tmp, 'invalid-run');
    const host = await start({ config: await config({ data: { train: dataDir } }), runDir });
    const outcome = await host.done;
    assert.equal(outcome.exit.code, 2);
    assert.equal(outcome.invalidConfig, true);
    assert.match(outcome.error?.message ?? '', /^data\.train: .*a directory/);
    assert.equal(outcome.removed, true);
    assert.equal(existsSync(runDir), false, 'no dead run that looks resumable');
  });

  it('a port in use: a message saying so, and nothing started', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    try {
      await assert.rejects(start({ config: await config(), port }), (e: Error) => {
        assert.ok(e instanceof EnvServerError);
        assert.match(e.message, new RegExp(`port ${port} is already in use`));
        return true;
      });
    } finally {
      blocker.close();
    }
  });

  it('an invalid config or a missing dataset: RunConfigError naming the file and the key, before anything is spawned', async () => {
    const bad = await config({ rollout: { n: 'five' } });
    await assert.rejects(
      start({ config: bad }),
      (e: Error) => e instanceof RunConfigError && e.message.includes(bad) && /rollout\.n/.test(e.message),
    );
    const missing = await config({ data: { train: '/nonexistent/train.jsonl' } });
    await assert.rejects(loadRunConfig(missing), /data\.train: no such file or directory: \/nonexistent\/train\.jsonl/);
    const broken = join(tmp, 'broken.run.json');
    await writeFile(broken, '{\n  "data": {\n    "train": "x",,\n  }\n}\n');
    await assert.rejects(loadRunConfig(broken), (e: Error) =>
      /broken\.run\.json:3:\d+: not valid JSON/.test(e.message),
    );
    // each problem with the line its key is written on, and the known field a mistyped one likely meant
    const typo = join(tmp, 'typo.run.json');
    await writeFile(typo, '{\n  "name": "t",\n  "rollout": {\n    "batchsize": 4,\n    "n": "five"\n  }\n}\n');
    await assert.rejects(loadRunConfig(typo), (e: Error) => {
      assert.match(e.message, /typo\.run\.json: line 1: data: is required; line 1: model: is required/);
      assert.match(e.message, /line 4: rollout\.batchsize: is not a known field \(did you mean batch_size\?\)/);
      assert.match(e.message, /line 5: rollout\.n: expected an integer, got string/);
      return true;
    });
    // a directory named where a config is wanted (a run directory, a data folder): said so, not Node's EISDIR
    await assert.rejects(
      loadRunConfig(tmp),
      (e: Error) =>
        e instanceof RunConfigError && e.message.includes(tmp) && /a directory, not a run config/.test(e.message),
    );
  });

  it('engine verl: veRL’s preparation refuses the config naming the key, the env server started for it stops, nothing is left', async function () {
    if (!existsSync(join(ROOT, '.venv-verl', 'bin', 'python'))) this.skip(); // .venv-verl: bash scripts/setup-verl.sh
    const before = processesMentioning(tmp).length;
    const f = await config({
      model: { kind: 'hf', path: join(ROOT, 'examples/trl-tiny/model') },
      rollout: { n: 2 },
      optim: { mini_batch_size: 3, micro_batch_size: 1 },
    }).then(async (c) => withEngine(c, 'verl'));
    await assert.rejects(
      start({ config: f }),
      (e: Error) =>
        e instanceof RunConfigError &&
        e.message.includes(f) &&
        /optim\.mini_batch_size \(3\) must be a multiple of rollout\.n \(2\)/.test(e.message),
    );
    assert.equal(processesMentioning(tmp).length, before);
  });

  it('engine verl: what veRL does its own way reaches the host as notes (the CLI and the editor show them as warnings)', async function () {
    if (!existsSync(join(ROOT, '.venv-verl', 'bin', 'python'))) this.skip();
    this.timeout(180_000);
    const f = await config({
      model: { kind: 'hf', path: join(ROOT, 'examples/trl-tiny/model'), dtype: 'fp32' },
      rollout: { n: 2 },
      optim: { mini_batch_size: 4, micro_batch_size: 2 },
    }).then(async (c) => withEngine(c, 'verl'));
    const runDir = await mkdtemp(join(tmp, 'verl-notes-'));
    const launch = await ENGINE_HOSTS.verl!.launch({
      python: process.execPath,
      trainerDir: join(ROOT, 'trainer'),
      runDir,
      envUrl: 'http://127.0.0.1:9',
      resume: false,
      loaded: await loadRunConfig(f),
    });
    assert.ok(
      launch.notes?.some((n) => n.startsWith('model.dtype fp32')),
      JSON.stringify(launch.notes),
    );
    assert.ok(launch.args.includes('search_agent_trainer.engines.verl.main'), launch.args.join(' '));
  });

  it('engine trl on two processes (accelerate launch, gloo): Stop checkpoints, the run is stopped, every process ends', async function () {
    this.timeout(600_000);
    const events: Record<string, unknown>[] = [];
    const c = JSON.parse(readFileSync(join(ROOT, 'examples/trl-tiny.run.json'), 'utf8'));
    delete c.$schema;
    for (const k of ['train', 'eval'] as const) c.data[k] = join(ROOT, 'examples', c.data[k]);
    c.model.path = join(ROOT, 'examples', c.model.path);
    Object.assign(c, {
      devices: 2,
      train: { steps: 30, eval_every: 0, checkpoint_every: 0 },
      test: { step_delay_s: 1 },
    });
    c.data.eval_size = 2;
    const file = join(await mkdtemp(join(tmp, 'trl-')), 'trl.run.json');
    await writeFile(file, JSON.stringify(c));
    const host = await start({ config: file }, events);
    await until(() => events.some((e) => e.event === 'metrics' && e.step === 1), 400_000);
    assert.ok(
      processesMentioning(host.runDir).length >= 4,
      'the supervisor, accelerate launch and two training processes',
    );
    const outcome = await host.stop();
    assert.equal(outcome.status, 'stopped', JSON.stringify(outcome.error));
    const run = JSON.parse(readFileSync(join(host.runDir, 'run.json'), 'utf8'));
    assert.deepEqual([run.status, run.stop_reason, run.engine], ['stopped', 'signal', 'trl']);
    assert.ok(
      existsSync(join(host.runDir, 'checkpoints', `step-${String(run.step).padStart(6, '0')}`, 'trainer_state.json')),
      'checkpointed where it stopped',
    );
    assert.equal(events.filter((e) => e.event === 'started').length, 1, 'events from rank 0 only');
    assert.deepEqual(await waitGone(processesMentioning(host.runDir), 30_000), [], 'no training process left behind');
    assert.deepEqual(await waitGone([host.server.child.pid]), []);
  });

  it('server arguments follow the retriever section (none = the ablation)', async () => {
    const loaded = await loadRunConfig(
      await config({ retriever: { kind: 'none', topk: 5 }, reward: { module: 'builtin:f1' } }),
    );
    const args = envServerArgs(loaded, { port: 0 });
    assert.deepEqual(args, ['--port', '0', '--topk', '5', '--retriever', 'none', '--reward', 'builtin:f1']);
  });

  it('a host that dies (SIGKILL) leaves no orphans: the trainer and server notice and stop', async () => {
    const script = join(tmp, 'host.ts');
    await writeFile(
      script,
      `import { RunHost } from ${JSON.stringify(join(ROOT, 'src/core/host/runHost.ts'))};
       (async () => {
         const host = await RunHost.start({ config: ${JSON.stringify(await config({ train: { steps: 50, eval_every: 0 }, test: { step_delay_s: 1 } }))},
           python: ${JSON.stringify(python)}, runsParent: ${JSON.stringify(join(tmp, 'runs'))},
           serverLauncher: ${JSON.stringify(launcher)},
           onEvent: (e) => { if (e.event === 'progress') console.log(JSON.stringify({ pids: [host.server.child.pid, host.trainer.pid], dir: host.runDir })); } });
       })();`,
    );
    const child = execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), script], {
      reject: false,
      buffer: false,
      env: { SAS_ORPHAN_IDLE_MS: '3000' },
    });
    const info = await new Promise<{ pids: number[]; dir: string }>((res, rej) => {
      let buf = '';
      child.stdout!.on('data', (d: Buffer) => {
        buf += d.toString();
        const line = buf.split('\n').find((l) => l.startsWith('{'));
        if (line) res(JSON.parse(line));
      });
      void child.then(() => rej(new Error('the host exited first')));
    });
    assert.ok(info.pids.every(isAlive));
    child.kill('SIGKILL');
    await child;
    assert.deepEqual(
      await waitGone(info.pids, 30_000),
      [],
      'trainer and server stop by themselves once their host is gone',
    );
    const run = JSON.parse(readFileSync(join(info.dir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'stopped', 'the trainer stopped the way SIGTERM stops it (resumable)');
  });
});
