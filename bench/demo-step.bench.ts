/**
 * The demo's training step on CPU (`npm run bench demo-step`): trainer/search_agent_trainer/tiny_benchmark.py
 * against the real env server over the two-hop demo corpus. The built-in tiny model's fast paths against the general
 * ones they replace, on the same batches in the same process: the rollout with a KV cache that grows into spare room
 * vs one copied every decode step (same tokens, checked), and the log-prob passes + update with the target tokens'
 * log-probs and the first epoch's old log-probs vs the whole output distribution and a separate old-log-prob pass;
 * and, with half the groups' rewards all equal, the passes + update skipping those groups vs training the whole batch.
 * `SAS_PYTHON` picks the interpreter.
 */
import { join } from 'node:path';
import { envServer, lastJson, trainerModule } from './processes';
import { fmt, report } from './util';

interface Result {
  machine: { torch: string; cpu_threads: number };
  response_tokens_mean: number;
  seconds: Record<string, number>;
  speedup: { rollout: number; passes: number; update: number; step: number; flat_groups: number };
  max_abs_diff: { old_logprob: number; ref_logprob: number };
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const root = join(__dirname, '..');
  const env = await envServer(root, ['--corpus', join(root, 'examples', 'demo-multihop', 'corpus.jsonl')]);
  try {
    const r = lastJson<Result>(await trainerModule(root, 'tiny_benchmark', ['--env-url', env.url]));
    const s = r.seconds;
    const where = `CPU, ${r.machine.cpu_threads} torch threads, ${r.response_tokens_mean.toFixed(0)}-token responses`;
    report(
      lines,
      `two-hop demo step (${where}): rollout ${s.rollout_ours!.toFixed(2)} s, growing cache vs copied every step ${s.rollout_peer!.toFixed(2)} s → ${fmt.ratio(r.speedup.rollout)}`,
    );
    report(
      lines,
      `two-hop demo step: log-prob passes ${s.passes_ours!.toFixed(2)} s + update ${s.update_ours!.toFixed(2)} s, target log-probs and the first epoch's old log-probs, vs whole distribution and a separate pass ${s.passes_peer!.toFixed(2)} s + ${s.update_peer!.toFixed(2)} s → ${fmt.ratio(r.speedup.passes)} / ${fmt.ratio(r.speedup.update)} (old log-probs differ by ≤ ${r.max_abs_diff.old_logprob.toExponential(1)}, reference ≤ ${r.max_abs_diff.ref_logprob.toExponential(1)})`,
    );
    report(
      lines,
      `two-hop demo step: whole step (rollout + passes + update) ${s.step_ours!.toFixed(2)} s vs ${s.step_peer!.toFixed(2)} s → ${fmt.ratio(r.speedup.step)}`,
    );
    report(
      lines,
      `two-hop demo step, half the groups flat (rewards all equal): passes + update skipping them (algorithm.skip_zero_std_groups) ${s.flat_skip!.toFixed(2)} s vs the whole batch ${s.flat_whole!.toFixed(2)} s → ${fmt.ratio(r.speedup.flat_groups)}`,
    );
  } finally {
    env.stop();
  }
  return lines;
}
