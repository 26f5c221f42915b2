/**
 * The trainer's throughput (`npm run bench gpu`): trainer/search_agent_trainer/benchmark.py against the real env
 * server (BM25 over the demo corpus, a reward that varies). On CUDA: Qwen2-0.5B- and 1.5B-shaped models with random
 * weights; without a GPU a tiny one, so this runs everywhere and cannot rot. Per size, without and with LoRA: our
 * batched multi-turn rollout's generated tokens/s against a plain Hugging Face `generate` loop over the same prompts in
 * the same process (the ratio is what to compare), a real training step's time by phase, the update's tokens/s and
 * the peak memory. `SAS_BENCH_GPU_SIZES=0.5b` picks sizes; `SAS_PYTHON` the interpreter.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fmt, report } from './util';

interface Rollout {
  generation_tokens_per_s: number;
  generated_tokens: number;
  seconds: number;
}
interface Result {
  size: string;
  lora: boolean;
  parameters: number;
  trainable: number;
  rollout_ours: Rollout;
  rollout_hf_generate?: Rollout;
  rollout_speedup?: number;
  step: Record<string, number>;
}

async function envServer(root: string): Promise<{ url: string; stop: () => void }> {
  const reward = join(root, 'test', 'fixtures', 'rewards', 'modules', 'varied.reward.ts');
  const child = spawn(process.execPath, ['-r', join(root, 'test', 'register.cjs'), join(root, 'src', 'server', 'main.ts'), '--port', '0', '--reward', reward], { stdio: ['ignore', 'pipe', 'ignore'] });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d;
      if (buf.includes('\n')) resolve(JSON.parse(buf.split('\n')[0]!).port);
    });
    child.once('exit', () => reject(new Error('the env server exited before listening')));
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill() };
}

function python(root: string, args: string[]): Promise<string> {
  const exe = process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python');
  const child = spawn(exe, ['-m', 'search_agent_trainer.benchmark', ...args], { cwd: root, env: { ...process.env, PYTHONPATH: join(root, 'trainer') }, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${exe} -m search_agent_trainer.benchmark exited with ${code}`))));
  });
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const root = join(__dirname, '..');
  const env = await envServer(root);
  try {
    const sizes = process.env.SAS_BENCH_GPU_SIZES;
    const out = await python(root, ['--env-url', env.url, ...(sizes ? ['--size', sizes] : [])]);
    const { machine, results } = JSON.parse(out.trim().split('\n').pop()!) as { machine: Record<string, string>; results: Result[] };
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
      report(
        lines,
        `${name}: step ${s['timing_s/step']!.toFixed(2)} s = rollout ${s['timing_s/rollout']!.toFixed(2)} (retrieve ${s['timing_s/retrieve']!.toFixed(2)}) + reward ${s['timing_s/reward']!.toFixed(2)} + old log-prob ${s['timing_s/old_log_prob']!.toFixed(2)} + ref ${s['timing_s/ref']!.toFixed(2)} + update ${s['timing_s/update']!.toFixed(2)}; update ${s['perf/update_tokens_per_s']!.toFixed(0)} tokens/s; peak memory ${(s.peak_memory_bytes! / 2 ** 30).toFixed(2)} GiB`,
      );
    }
  } finally {
    env.stop();
  }
  return lines;
}
