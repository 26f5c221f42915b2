/**
 * `train` when its trainer is killed (issue 40, item 8), with the real CLI, env server and trainer: after `kill -9`
 * the CLI says the trainer was killed (the signal and the exit status), and the `resume:` line it prints is safe to
 * paste — the run directory is called `$(touch pwned)`, and the line run through `bash -c` runs nothing but
 * `search-agent-studio` with the directory as one argument.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
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
});
