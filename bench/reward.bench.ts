/**
 * Built-in exact match over 100k rollouts: our pipeline (stream the JSONL, parse each trajectory, score in the
 * sandbox's workers) vs the Python reference (trainer/tests/reference_rewards.py: a plain Python reward loop)
 * over the same file, in the same run; both report the same mean. Then what the security boundary costs: the QuickJS
 * sandbox (src/core/rewards/sandbox.ts) vs the `vm` sandbox it replaced (bench/vm-sandbox.ts, kept for this only), the
 * same rollouts already in memory, per 10,000 rollouts.
 */
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { compileRewardModule, rewardApiPath } from '../src/core/rewards/compile';
import { RewardSandbox } from '../src/core/rewards/sandbox';
import { itemFromRollout, openReward, resolveRewardSpec, scoreRollouts } from '../src/core/rewards/scoring';
import type { Rollout } from '../src/core/run/format';
import { BENCH_DIR } from './data';
import { makeRollouts } from './generate';
import { fmt, report } from './util';
import { VmRewardSandbox } from './vm-sandbox';

async function rollouts(n: number): Promise<string> {
  mkdirSync(BENCH_DIR, { recursive: true });
  const path = join(BENCH_DIR, `reward-rollouts-${n}.jsonl`);
  if (existsSync(path)) return path;
  const pool = makeRollouts(1000, { seed: 17 });
  const out = createWriteStream(path);
  for (let i = 0; i < n; i++) {
    if (!out.write(`${pool[i % pool.length]!.record(i)}\n`))
      await new Promise<void>((r) => out.once('drain', () => r()));
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
    const out = JSON.parse(
      execFileSync(python, [join(root, 'trainer', 'tests', 'reference_rewards.py'), '--em-rollouts', path], {
        encoding: 'utf8',
      }),
    );
    py.push((performance.now() - t) / 1000);
    pyMean = out.mean;
  }
  const a = Math.min(...ours);
  const b = Math.min(...py);
  report(
    lines,
    `EM over ${n.toLocaleString()} rollouts: ours ${(n / a).toFixed(0)} rollouts/s (${fmt.ms(a)}; parse + sandbox workers) vs Python reference ${(n / b).toFixed(0)} rollouts/s (${fmt.ms(b)}) → ${fmt.ratio(b / a)} its speed; means ${oursMean.toFixed(4)} vs ${pyMean.toFixed(4)}`,
  );
  await boundaryCost(lines);
  return lines;
}

/** Seconds to score `items` in batches of 4,096 (the CLI's), and the mean reward. */
async function scoreAll(
  sandbox: { score(items: ReturnType<typeof itemFromRollout>[]): Promise<({ reward: number } | { error: unknown })[]> },
  items: ReturnType<typeof itemFromRollout>[],
): Promise<{ s: number; mean: number }> {
  const t = performance.now();
  let sum = 0;
  for (let i = 0; i < items.length; i += 4096) {
    for (const o of await sandbox.score(items.slice(i, i + 4096))) if ('reward' in o) sum += o.reward;
  }
  return { s: (performance.now() - t) / 1000, mean: sum / items.length };
}

/** The QuickJS sandbox vs the vm sandbox it replaced: the same compiled module, the same rollouts, interleaved rounds. */
async function boundaryCost(lines: string[]): Promise<void> {
  const n = Number(process.env.SAS_BENCH_REWARD_ITEMS ?? 20_000);
  const pool = makeRollouts(1000, { seed: 17 });
  const items = Array.from({ length: n }, (_, i) =>
    itemFromRollout(JSON.parse(pool[i % pool.length]!.record(i)) as Rollout, `bench:${i}`),
  );
  for (const spec of ['builtin:em', 'builtin:em-format']) {
    const compiled = await compileRewardModule(resolveRewardSpec(spec));
    const quick = new RewardSandbox(compiled, {}, rewardApiPath());
    const vm = new VmRewardSandbox(compiled);
    try {
      // Warm both (threads started, the module loaded), then two interleaved rounds each; the better round of each.
      await quick.score(items.slice(0, 2000));
      await vm.score(items.slice(0, 2000));
      const q: number[] = [];
      const v: number[] = [];
      let means: [number, number] = [0, 0];
      for (let round = 0; round < 2; round++) {
        const a = await scoreAll(quick, items);
        const b = await scoreAll(vm, items);
        q.push(a.s);
        v.push(b.s);
        means = [a.mean, b.mean];
      }
      const a = Math.min(...q);
      const b = Math.min(...v);
      const per10k = (x: number) => `${((x * 10_000) / n).toFixed(2)} s`;
      report(
        lines,
        `${spec}, ${n.toLocaleString()} rollouts in memory, ${quick.limits.workers} threads: QuickJS sandbox ${per10k(a)} per 10k rollouts vs the vm sandbox it replaced ${per10k(b)} → ${fmt.ratio(a / b)} its time (the boundary's cost); means ${means[0].toFixed(4)} vs ${means[1].toFixed(4)}`,
      );
    } finally {
      await quick.close();
      await vm.close();
    }
  }
}
