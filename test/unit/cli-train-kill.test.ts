/**
 * `train` when its trainer is killed (issue 40, item 8), with the real CLI, env server and trainer: after `kill -9`
 * the CLI says the trainer was killed (the signal and the exit status), and the `resume:` line it prints is safe to
 * paste — the run directory is called `$(touch pwned)`, and the line run through `bash -c` runs nothing but
 * `search-agent-studio` with the directory as one argument.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { resumeCommand, shellQuote } from '../../src/cli/train';
import { killedMessage } from '../../src/core/host/runHost';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');

/** `line` run by bash in `cwd` with `search-agent-studio` a function printing its arguments one per line (NUL-separated). */
function pasted(line: string, cwd: string): string[] {
  const out = execFileSync('bash', ['-c', `search-agent-studio() { printf '%s\\0' "$@"; }\n${line}`], {
    cwd,
    encoding: 'utf8',
  });
  return out.split('\0').slice(0, -1);
}

describe('train: a killed trainer, and the resume line', function () {
  this.timeout(300_000);

  it('quotes any run directory so that pasting the line runs nothing else', () => {
    const dir = scratchDir('sas-quote-');
    for (const name of [
      '$(touch pwned)',
      '`touch pwned`',
      "it's; touch pwned",
      'a b\nc',
      '~/x',
      '*',
      '-x',
      '',
      'plain/runs/demo-1',
    ]) {
      assert.deepEqual(
        pasted(resumeCommand(name), dir),
        ['train', '--resume', '--run-dir', name],
        JSON.stringify(name),
      );
    }
    assert.equal(existsSync(join(dir, 'pwned')), false);
    assert.equal(
      shellQuote('runs/demo-20260101-120000'),
      'runs/demo-20260101-120000',
      'an ordinary path stays as it is',
    );
    assert.equal(killedMessage('SIGKILL').startsWith('the trainer was killed by SIGKILL (exit status 137)'), true);
  });

  it('after kill -9 of the trainer the CLI says it was killed, by which signal, and prints a resume line safe to paste', async () => {
    const dir = scratchDir('sas-kill-');
    const c = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/runs/tiny.run.json'), 'utf8'));
    delete c.$schema;
    c.data.train = join(ROOT, 'examples/demo/train.jsonl');
    c.data.eval = join(ROOT, 'examples/demo/eval.jsonl');
    c.train = { steps: 50, eval_every: 0, checkpoint_every: 1 };
    c.test = { step_delay_s: 1 };
    writeFileSync(join(dir, 'tiny.run.json'), JSON.stringify(c));
    mkdirSync(join(dir, 'runs'));
    const runDir = 'runs/$(touch pwned)';
    const cli = execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/cli/main.ts'),
        'train',
        'tiny.run.json',
        '--run-dir',
        runDir,
      ],
      { reject: false, cwd: dir },
    );
    let out = '';
    const pid = await new Promise<number>((resolve, reject) => {
      cli.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /trainer pid (\d+)/.exec(out);
        // Killed once a step has been checkpointed, mid-run.
        if (m && /^step 1: /m.test(out)) resolve(Number(m[1]));
      });
      void cli.then(() => reject(new Error(`the CLI ended first: ${out}`)));
    });
    process.kill(pid, 'SIGKILL');
    const r = await cli;
    assert.equal(r.exitCode, 1, r.stderr);
    assert.match(r.stderr, /the run failed at step \d+: the trainer was killed by SIGKILL \(exit status 137\)/);
    const line = /^resume: (.*)$/m.exec(r.stderr)?.[1];
    assert.ok(line, r.stderr);
    assert.deepEqual(pasted(line, dir), ['train', '--resume', '--run-dir', runDir]);
    assert.equal(existsSync(join(dir, 'pwned')), false, 'pasting the line ran nothing');
    assert.ok(existsSync(join(dir, runDir, 'run.json')), 'the run directory is the one named');
  });

  /** The tiny fixture with absolute data paths and `patch`, written to <dir>/tiny.run.json. */
  function tinyConfig(dir: string, patch: Record<string, unknown> = {}): string {
    const c = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/runs/tiny.run.json'), 'utf8'));
    delete c.$schema;
    c.data.train = join(ROOT, 'examples/demo/train.jsonl');
    c.data.eval = join(ROOT, 'examples/demo/eval.jsonl');
    Object.assign(c, patch);
    writeFileSync(join(dir, 'tiny.run.json'), JSON.stringify(c));
    return join(dir, 'tiny.run.json');
  }
  const train = (dir: string, ...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'train', ...args], {
      reject: false,
      cwd: dir,
    });

  it('a finished run is not resumed: it says so and exits 0 without starting anything; run.json stays as it was', async () => {
    const dir = scratchDir('sas-finished-');
    mkdirSync(join(dir, 'run'));
    const run = { status: 'finished', step: 8, total_steps: 8, pid: 1, record: { recorded: { steps: 8 } } };
    writeFileSync(join(dir, 'run', 'run.json'), JSON.stringify(run));
    const r = await train(dir, '--resume', '--run-dir', 'run', '--python', '/nonexistent/python3');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /the run is already finished \(8\/8 steps\)/);
    assert.deepEqual(JSON.parse(readFileSync(join(dir, 'run', 'run.json'), 'utf8')), run);
  });

  it('a --run-dir that holds another run is refused (exit 2, naming it), nothing is written into it', async () => {
    const dir = scratchDir('sas-taken-');
    tinyConfig(dir);
    mkdirSync(join(dir, 'old', 'checkpoints', 'step-000040'), { recursive: true });
    writeFileSync(join(dir, 'old', 'metrics.jsonl'), '{"step":40}\n');
    const r = await train(dir, 'tiny.run.json', '--run-dir', 'old');
    assert.equal(r.exitCode, 2, r.stderr);
    assert.match(r.stderr, /old: the run directory exists and is not empty .*--resume, or name another --run-dir/);
    assert.deepEqual(readdirSync(join(dir, 'old')).sort(), ['checkpoints', 'metrics.jsonl']);
  });

  it('a trainer that finds data.train a directory: exit 2, its error, no resume hint, no run directory left', async () => {
    const dir = scratchDir('sas-invalid-');
    mkdirSync(join(dir, 'data'));
    const file = tinyConfig(dir);
    const c = JSON.parse(readFileSync(file, 'utf8'));
    c.data.train = join(dir, 'data');
    writeFileSync(file, JSON.stringify(c));
    const r = await train(dir, 'tiny.run.json', '--run-dir', 'run');
    assert.equal(r.exitCode, 2, r.stderr);
    assert.match(r.stderr, /search-agent-studio: data\.train: .*a directory/);
    assert.doesNotMatch(r.stderr, /resume:|the run failed/);
    assert.equal(existsSync(join(dir, 'run')), false);
  });

  it('a warning prints once; the corpus lines the env server skips are shown and logs/server.log keeps them', async () => {
    const dir = scratchDir('sas-warn-');
    const corpus = join(dir, 'corpus.jsonl');
    writeFileSync(corpus, `${readFileSync(join(ROOT, 'examples/demo/corpus.jsonl'), 'utf8')}not json\n`);
    const trainFile = join(dir, 'train.jsonl');
    writeFileSync(trainFile, `${readFileSync(join(ROOT, 'examples/demo/train.jsonl'), 'utf8')}{"question": 3}\n`);
    const file = tinyConfig(dir, {
      retriever: { kind: 'bm25', corpus, topk: 2 },
      train: { steps: 1, eval_every: 0, checkpoint_every: 1 },
    });
    const c = JSON.parse(readFileSync(file, 'utf8'));
    c.data.train = trainFile;
    writeFileSync(file, JSON.stringify(c));
    const r = await train(dir, 'tiny.run.json', '--run-dir', 'run');
    assert.equal(r.exitCode, 0, r.stderr);
    const all = r.stdout + r.stderr;
    const lineNo = readFileSync(trainFile, 'utf8').trimEnd().split('\n').length;
    assert.equal(all.split(`train.jsonl:${lineNo}:`).length - 1, 1, all);
    assert.match(r.stderr, /corpus\.jsonl:\d+: invalid JSON/);
    assert.match(r.stderr, /1 corpus lines skipped/);
    assert.match(readFileSync(join(dir, 'run', 'logs', 'server.log'), 'utf8'), /1 corpus lines skipped/);
  });

  it('a second Ctrl-C kills the trainer: the CLI says so, names the last checkpoint on disk, and exits 1', async () => {
    const dir = scratchDir('sas-kill2-');
    tinyConfig(dir, { train: { steps: 50, eval_every: 0, checkpoint_every: 1 }, test: { step_delay_s: 1 } });
    const cli = train(dir, 'tiny.run.json', '--run-dir', 'run');
    let out = '';
    await new Promise<void>((resolve, reject) => {
      cli.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (/^step 2: /m.test(out)) resolve();
      });
      void cli.then(() => reject(new Error(`the CLI ended first: ${out}`)));
    });
    cli.kill('SIGINT');
    await new Promise((r) => setTimeout(r, 200));
    cli.kill('SIGINT');
    const r = await cli;
    assert.equal(r.exitCode, 1, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout, /\(checkpointed\)/);
    assert.match(r.stderr, /killed before it had stopped and checkpointed/);
    const last = /the last checkpoint on disk: \S*(step-\d{6})/.exec(r.stderr)?.[1];
    assert.ok(last && existsSync(join(dir, 'run', 'checkpoints', last, 'trainer_state.json')), r.stderr);
  });
});
