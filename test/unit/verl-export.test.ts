import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { checkRunConfig, loadRunConfig } from '../../src/core/host/runConfig';
import {
  findVerlPython,
  VERL_VERSION,
  VerlUnavailableError,
  verlLaunch,
  verlPythonCandidates,
} from '../../src/core/host/verl';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');
const VERL_PYTHON = join(ROOT, '.venv-verl', 'bin', 'python');
const DEMO = join(ROOT, 'examples', 'demo');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

function config(dir: string, extra: Record<string, unknown> = {}): string {
  mkdirSync(join(dir, 'model'), { recursive: true }); // a Hugging Face model directory (export does not load it)
  const file = join(dir, 'c.run.json');
  const cfg = {
    engine: 'verl',
    data: { train: join(DEMO, 'train.jsonl'), eval: join(DEMO, 'eval.jsonl'), eval_size: 4 },
    model: { kind: 'hf', path: 'model' },
    retriever: { kind: 'demo' },
    rollout: { batch_size: 4, n: 2 },
    optim: { mini_batch_size: 4, micro_batch_size: 2 },
    verl: { gpus_per_node: 8, nodes: 2 },
    ...extra,
  };
  writeFileSync(file, JSON.stringify(cfg));
  return file;
}

describe('engine verl on the host: veRL’s Python, launch, export verl', function () {
  this.timeout(180_000);

  it("finds veRL's Python: the one named, else in order the config's verl.python, SAS_VERL_PYTHON, .venv-verl; one without veRL says so", async () => {
    const dir = scratchDir('sas-verl-');
    const loaded = checkRunConfig(
      {
        engine: 'verl',
        data: { train: join(DEMO, 'train.jsonl') },
        model: { kind: 'hf', path: DEMO },
        verl: { python: 'env/bin/python' },
      },
      join(dir, 'c.run.json'),
      dir,
    );
    // a Python the user named is the only one tried (none other is taken silently in its place)
    assert.deepEqual(verlPythonCandidates(loaded, ['/opt/py', undefined], '/root'), ['/opt/py']);
    assert.deepEqual(verlPythonCandidates(loaded, [undefined, ''], '/root'), [
      join(dir, 'env/bin/python'),
      ...(process.env.SAS_VERL_PYTHON ? [process.env.SAS_VERL_PYTHON] : []),
      '/root/.venv-verl/bin/python',
    ]);
    const search = await findVerlPython(['/nonexistent/python3', join(ROOT, '.venv', 'bin', 'python')]);
    assert.equal(search.found, undefined);
    assert.match(search.tried[0]!.error!, /not found|ENOENT/);
    assert.match(search.tried[1]!.error!, /veRL is not installed|veRL .* \(the engine needs/); // the trainer's venv has torch, not veRL
  });

  it('writes the launch script, overrides, our modules, the parquet and the env server command, checked by veRL', async function () {
    if (!existsSync(VERL_PYTHON)) this.skip(); // .venv-verl: bash scripts/setup-verl.sh (setup.sh --test makes it)
    const dir = scratchDir('sas-verl-');
    const file = config(dir);
    copyFileSync(
      join(ROOT, 'examples', 'one-gpu', 'models', 'qwen2.5-0.5b', 'config.json'),
      join(dir, 'model', 'config.json'),
    ); // the shape the plan reads
    const r = await cli('export', 'verl', file, '--out', join(dir, 'out'), '--python', VERL_PYTHON);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`exported a veRL ${VERL_VERSION.replace(/\./g, '\\.')} run`));
    assert.match(r.stdout, /checked: every override composed with veRL’s own config/);
    assert.match(
      r.stdout,
      /^memory: fits each of 16 GPUs of 80\.0 GiB .*FSDP over 16 GPUs \(2 machines × 8\).*engine verl\) \(search-agent-studio plan .* plans other GPUs\)$/m,
    ); // the memory plan, as train would check it
    for (const f of [
      'launch.sh',
      'env-server.sh',
      'overrides.txt',
      'run/verl/train.parquet',
      'run/verl/val.parquet',
      'run/verl/agent_loops.yaml',
      'trainer/search_agent_trainer/engines/verl/agent_loop.py',
    ])
      assert.ok(existsSync(join(dir, 'out', f)), f);
    const overrides = readFileSync(join(dir, 'out', 'overrides.txt'), 'utf8');
    assert.match(overrides, /^trainer\.nnodes=2$/m);
    assert.match(overrides, /^trainer\.n_gpus_per_node=8$/m);
    assert.match(overrides, /^data\.train_files=@EXPORT_DIR@\/run\/verl\/train\.parquet$/m);
    assert.match(
      readFileSync(join(dir, 'out', 'env-server.sh'), 'utf8'),
      new RegExp(
        `serve --port "\\$\\{SAS_ENV_PORT:-8790\\}" --topk 3 --corpus ${join(DEMO, 'corpus.jsonl')} --reward builtin:em$`,
        'm',
      ),
    );
  });

  it('a config veRL cannot train: exit 2 naming the file and the key, nothing written', async function () {
    if (!existsSync(VERL_PYTHON)) this.skip();
    const dir = scratchDir('sas-verl-');
    const r = await cli(
      'export',
      'verl',
      config(dir, { optim: { mini_batch_size: 3, micro_batch_size: 1 } }),
      '--out',
      join(dir, 'out'),
      '--python',
      VERL_PYTHON,
    );
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /c\.run\.json: optim\.mini_batch_size \(3\) must be a multiple of rollout\.n \(2\)/);
    assert.ok(!existsSync(join(dir, 'out')));
  });

  it('usage errors exit 2', async () => {
    const r = await cli('export', 'trl', 'x.run.json', '--out', 'y');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /Argument: engine, Given: "trl", Choices: "verl"/);
    assert.match(r.stderr, /search-agent-studio export <engine> <config>/);
  });

  it('launch: the run prepared in its directory and the command that trains it; resume prepares again with the new env URL', async function () {
    if (!existsSync(VERL_PYTHON)) this.skip();
    const dir = scratchDir('sas-verl-');
    const loaded = await loadRunConfig(config(dir));
    const runDir = join(dir, 'runs', 'r1');
    const base = { loaded, runDir, resume: false, trainerDir: join(ROOT, 'trainer'), root: ROOT };
    const first = await verlLaunch({ ...base, envUrl: 'http://127.0.0.1:4101' });
    assert.equal(first.file, VERL_PYTHON);
    assert.deepEqual(first.args.slice(0, 2), ['-m', 'search_agent_trainer.engines.verl.main']);
    assert.ok(
      first.args.includes(`data.train_files=${join(runDir, 'verl', 'train.parquet')}`) &&
        existsSync(join(runDir, 'verl', 'train.parquet')),
    );
    assert.ok(first.args.includes('+ray_kwargs.ray_init.runtime_env.env_vars.SAS_ENV_URL=http://127.0.0.1:4101'));
    assert.ok(
      first.args.includes(`trainer.default_local_dir=${join(runDir, 'checkpoints', 'verl')}`) &&
        first.args.includes('trainer.resume_mode=auto'),
    );
    assert.equal(first.env.PYTHONPATH?.split(':')[0], join(ROOT, 'trainer'));
    // resuming: the config the run was prepared with (the original file may be gone), the new env server's URL
    rmSync(loaded.file);
    const again = await verlLaunch({ ...base, resume: true, envUrl: 'http://127.0.0.1:4202' });
    assert.ok(again.args.includes('+ray_kwargs.ray_init.runtime_env.env_vars.SAS_ENV_URL=http://127.0.0.1:4202'));
    assert.deepEqual(
      again.args.filter((a) => !a.includes('127.0.0.1')),
      first.args.filter((a) => !a.includes('127.0.0.1')),
    );
  });

  it('launch without a veRL Python: nothing prepared, each candidate named with what it lacks', async () => {
    const dir = scratchDir('sas-verl-');
    const loaded = await loadRunConfig(config(dir));
    const saved = process.env.SAS_VERL_PYTHON;
    delete process.env.SAS_VERL_PYTHON;
    try {
      await assert.rejects(
        verlLaunch({
          loaded,
          runDir: join(dir, 'run'),
          envUrl: 'http://127.0.0.1:1',
          resume: false,
          trainerDir: join(ROOT, 'trainer'),
          root: dir,
          verlPython: join(ROOT, '.venv', 'bin', 'python'),
        }),
        (e: Error) =>
          e instanceof VerlUnavailableError &&
          /\.venv\/bin\/python: veRL is not installed/.test(e.message) &&
          /setup-verl\.sh/.test(e.message),
      );
    } finally {
      if (saved !== undefined) process.env.SAS_VERL_PYTHON = saved;
    }
    assert.ok(!existsSync(join(dir, 'run')));
  });
});
