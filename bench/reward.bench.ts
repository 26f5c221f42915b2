/**
 * Built-in exact match over 100k rollouts: our pipeline (stream the JSONL, parse each trajectory, score in the
 * sandbox's workers) vs the Python reference (trainer/tests/reference_rewards.py: a plain Python reward loop)
 * over the same file, in the same run; both report the same mean.
 */
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openReward, scoreRollouts } from '../src/core/rewards/scoring';
import { BENCH_DIR } from './data';
import { makeRollouts } from './generate';
import { fmt, report } from './util';

async function rollouts(n: number): Promise<string> {
  mkdirSync(BENCH_DIR, { recursive: true });
  const path = join(BENCH_DIR, `reward-rollouts-${n}.jsonl`);
  if (existsSync(path)) return path;
  const pool = makeRollouts(1000, { seed: 17 });
  const out = createWriteStream(path);
  for (let i = 0; i < n; i++) {
    if (!out.write(`${pool[i % pool.length]!.record(i)}\n`)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((r) => out.end(() => r()));
  return path;
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_ROLLOUTS ?? 100_000);
  const path = await rollouts(n);
  const root = join(__dirname, '..');
  const python = process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python');
  // Interleave two rounds of each; report the better round of each (warm file cache for both).
  const ours: number[] = [];
  const py: number[] = [];
  let oursMean = 0;
  let pyMean = 0;
  for (let round = 0; round < 2; round++) {
    let t = performance.now();
    const r = await openReward('builtin:em');
    let sum = 0;
    let count = 0;
    for await (const s of scoreRollouts(path, r.sandbox)) {
      if ('reward' in s.outcome) sum += s.outcome.reward;
      count++;
    }
    await r.sandbox.close();
    ours.push((performance.now() - t) / 1000);
    oursMean = sum / count;
    t = performance.now();
    const out = JSON.parse(execFileSync(python, [join(root, 'trainer', 'tests', 'reference_rewards.py'), '--em-rollouts', path], { encoding: 'utf8' }));
    py.push((performance.now() - t) / 1000);
    pyMean = out.mean;
  }
  const a = Math.min(...ours);
  const b = Math.min(...py);
  report(lines, `EM over ${n.toLocaleString()} rollouts: ours ${(n / a).toFixed(0)} rollouts/s (${fmt.ms(a)}; parse + sandbox workers) vs Python reference ${(n / b).toFixed(0)} rollouts/s (${fmt.ms(b)}) → ${fmt.ratio(b / a)} its speed; means ${oursMean.toFixed(4)} vs ${pyMean.toFixed(4)}`);
  return lines;
}
