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
  const r = await execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'train', 'tiny.run.json'], { reject: false, cwd: dir });
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
}
