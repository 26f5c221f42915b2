/**
 * The tiny run config (test/fixtures/runs/tiny.run.json: tiny policy, GRPO, 2 steps) trained by the real CLI in a
 * directory of its own, as a user would: `search-agent-studio train tiny.run.json` run from `dir` (the run lands
 * in `dir/runs/`).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';

const ROOT = resolve(__dirname, '../..');

/** Writes dir/tiny.run.json (the fixture with absolute dataset paths) and trains it with the CLI from source. */
export async function trainTinyWithCli(dir: string): Promise<{ exitCode?: number; stdout: string; stderr: string }> {
  const c = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/runs/tiny.run.json'), 'utf8'));
  delete c.$schema;
  c.data.train = join(ROOT, 'examples/demo/train.jsonl');
  c.data.eval = join(ROOT, 'examples/demo/eval.jsonl');
  writeFileSync(join(dir, 'tiny.run.json'), JSON.stringify(c));
  const r = await execa(
    process.execPath,
    ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'train', 'tiny.run.json'],
    { reject: false, cwd: dir },
  );
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
}

let shared: Promise<string> | undefined;

/**
 * A 4-step tiny run with a reward that varies with the response (test/fixtures/rewards/modules/varied.reward.ts: GRPO
 * groups with a signal, so the weights move every step), every step checkpointed, trained once per test process by
 * the real CLI and shared by the tests that read it (issue 46: run health, group checks, search behaviour,
 * replay-step). Its run directory; callers copy it before changing anything.
 */
export function sharedVariedRun(dir: string): Promise<string> {
  shared ??= (async () => {
    const c = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/runs/tiny.run.json'), 'utf8'));
    delete c.$schema;
    c.data.train = join(ROOT, 'examples/demo/train.jsonl');
    c.data.eval = join(ROOT, 'examples/demo/eval.jsonl');
    c.reward = { module: join(ROOT, 'test/fixtures/rewards/modules/varied.reward.ts') };
    c.train.steps = 4;
    c.train.checkpoint_every = 1;
    writeFileSync(join(dir, 'varied.run.json'), JSON.stringify(c));
    const r = await execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/cli/main.ts'),
        'train',
        'varied.run.json',
        '--run-dir',
        join(dir, 'varied-run'),
        '--quiet',
      ],
      { reject: false, cwd: dir },
    );
    if (r.exitCode !== 0) throw new Error(`the shared tiny run failed (exit ${r.exitCode}): ${r.stderr.slice(-3000)}`);
    return join(dir, 'varied-run');
  })();
  return shared;
}
