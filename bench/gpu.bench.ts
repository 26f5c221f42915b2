/**
 * The trainer's throughput (`npm run bench gpu`): trainer/search_agent_trainer/benchmark.py against the real env
 * server (BM25 over the demo corpus, a reward that varies). On CUDA: Qwen2-0.5B- and 1.5B-shaped models with random
 * weights; without a GPU a tiny one, so this runs everywhere and cannot rot. Per size, without and with LoRA: our
 * batched multi-turn rollout's generated tokens/s against a plain Hugging Face `generate` loop over the same prompts in
 * the same process (the ratio is what to compare), a real training step's time by phase, the update's tokens/s and
 * the peak memory. `SAS_BENCH_GPU_SIZES=0.5b` picks sizes; `SAS_PYTHON` the interpreter.
 */
import { join } from 'node:path';
import { envServer, lastJson, trainerModule } from './processes';
import { fmt, report } from './util';

interface Rollout {
  generation_tokens_per_s: number;
  generated_tokens: number;
  seconds: number;
}
interface Phase {
  max_allocated: number;
  max_reserved: number;
}
interface Memory {
  config: string;
  plan: { phases: { rollout: number; update: number } };
  rollout: Phase & { trajectories: number };
  update: Phase & { tokens: number };
}
interface Result {
  size: string;
  lora: boolean;
  parameters: number;
  trainable: number;
  rollout_ours: Rollout;
  rollout_hf_generate?: Rollout;
  rollout_speedup?: number;
  step?: Record<string, number>;
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const root = join(__dirname, '..');
  const env = await envServer(root, [
    '--reward',
    join(root, 'test', 'fixtures', 'rewards', 'modules', 'varied.reward.ts'),
  ]);
  try {
    const sizes = process.env.SAS_BENCH_GPU_SIZES;
    const out = await trainerModule(root, 'benchmark', [
      '--env-url',
      env.url,
      '--memory',
      ...(sizes ? ['--size', sizes] : []),
    ]);
    const { machine, results, memory } = lastJson<{
      machine: Record<string, string>;
      results: Result[];
      memory?: Memory;
    }>(out);
    const where = machine.gpu ?? `CPU (${machine.cpu_threads} torch thread)`;
    for (const r of results) {
      const s = r.step;
      const name = `${r.size}${r.lora ? ' + LoRA' : ''} on ${where}`;
      const peer = r.rollout_hf_generate;
      report(
        lines,
        `${name}: rollout ${r.rollout_ours.generation_tokens_per_s.toFixed(0)} generated tokens/s` +
          (peer ? ` vs HF generate ${peer.generation_tokens_per_s.toFixed(0)} → ${fmt.ratio(r.rollout_speedup!)}` : ''),
      );
      if (!s) continue;
      report(
        lines,
        `${name}: step ${s['timing_s/step']!.toFixed(2)} s = rollout ${s['timing_s/rollout']!.toFixed(2)} (retrieve ${s['timing_s/retrieve']!.toFixed(2)}) + reward ${s['timing_s/reward']!.toFixed(2)} + old log-prob ${s['timing_s/old_log_prob']!.toFixed(2)} + ref ${s['timing_s/ref']!.toFixed(2)} + update ${s['timing_s/update']!.toFixed(2)}; update ${s['perf/update_tokens_per_s']!.toFixed(0)} tokens/s; peak memory ${(s.peak_memory_bytes! / 2 ** 30).toFixed(2)} GiB`,
      );
    }
    if (memory && machine.gpu) {
      const gib = (n: number) => `${(n / 2 ** 30).toFixed(2)} GiB`;
      const where = `${memory.config} on ${machine.gpu}`;
      report(
        lines,
        `${where}: update phase planned ${gib(memory.plan.phases.update)}, measured max allocated ${gib(memory.update.max_allocated)} / reserved ${gib(memory.update.max_reserved)} (plan ÷ reserved ${fmt.ratio(memory.plan.phases.update / memory.update.max_reserved)})`,
      );
      report(
        lines,
        `${where}: rollout of ${memory.rollout.trajectories} trajectories: max allocated ${gib(memory.rollout.max_allocated)} / reserved ${gib(memory.rollout.max_reserved)} (the plan's rollout phase, the KV cache at its whole budget: ${gib(memory.plan.phases.rollout)})`,
      );
    }
  } finally {
    env.stop();
  }
  return lines;
}
