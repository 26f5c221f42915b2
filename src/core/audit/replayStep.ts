/**
 * Replaying a recorded step through the trainer (issue 46; docs/instruments.md, "replay-step"): which records and
 * checkpoint a replay of step N takes, the report the trainer's `search_agent_trainer.replay_step` returns, and its
 * comparison with what the run recorded for that step (metrics.jsonl: actor/pg_loss, actor/kl_loss,
 * actor/grad_norm). The trainer side recomputes; this side chooses, compares and words it — for the CLI
 * (`search-agent-studio replay-step`) and any other view.
 */
import { basename } from 'node:path';
import type { MetricsRow } from '../protocol/dashboard';
import { formatIssue, type LocatedIssue, type Rollout } from '../run/format';
import { streamRollouts } from '../store/rollouts';
import { isTraining } from './health';

/** One rollout of the replay: per-token recomputed − recorded log-prob (null where not compared), and its flags. */
export interface ReplayRollout {
  id: string;
  compared: number;
  max_abs_diff: number;
  mean_abs_diff: number;
  /** Token indices (of tokens.ids) with |Δ| over the tolerance. */
  flagged: number[];
  delta: (number | null)[];
}

/** What `python -m search_agent_trainer.replay_step` prints (trainer/search_agent_trainer/replay_step.py). */
export interface ReplayStepReport {
  checkpoint: string;
  checkpoint_step: number | null;
  step: number | null;
  rollouts: number;
  /**
   * The step's rollouts, recorded or not (its metrics cover all of them): more than `rollouts` on a step recorded in
   * part (train.record.groups, every, flagged groups), whose loss and gradient norm are then not comparable.
   */
  step_rollouts?: number;
  device: string;
  dtype: string;
  tolerance: number;
  ids_identical: boolean;
  text_identical: boolean;
  loss_mask_identical: boolean;
  mismatches: { id: string; what: 'ids' | 'text' | 'loss_mask'; at: number }[];
  logprob: { compared: number; max_abs_diff: number; mean_abs_diff: number; flagged: number };
  rollout_logprob: { compared: number; max_abs_diff: number; mean_abs_diff: number } | null;
  loss: Record<string, number>;
  grad_norm: Record<string, number>;
  comparable: { loss: boolean; why: string | null };
  rollouts_detail: ReplayRollout[];
  match: boolean;
}

/** The recorded and recomputed value of a metric, and whether they agree. */
export interface MetricComparison {
  key: string;
  recorded: number;
  recomputed: number;
  agrees: boolean;
}

/** A replay's report with the step's recorded metrics beside it. */
export interface ReplayStepResult extends ReplayStepReport {
  /** The step's metrics compared with the recomputed loss and gradient norm (empty when not comparable or not recorded). */
  metrics: MetricComparison[];
  /** Records that could not be read and may be the step's (a cut line, a damaged token file): not replayed. */
  malformed?: (LocatedIssue & { text: string })[];
}

/**
 * Whether a record that could not be read may be one of step `step`'s training rollouts: unless its file or store
 * step is named for another step (step-NNNNNN.jsonl, step-NNNNNN/) or is a held-out one (val-step-…).
 */
export function mayBeOfStep(issue: LocatedIssue, step: number): boolean {
  const m = /^(val-)?step-(\d+)(\.jsonl)?$/.exec(basename(issue.file));
  return !m || (!m[1] && Number(m[2]) === step);
}

/**
 * A step's training records with tokens, by the run store's reader (whatever backend the run's records are in), and
 * the records that could not be read and may be the step's (`malformed`: a cut JSON line, a tokens.parquet cut
 * short — each issue names its file and line or step), never passed over in silence.
 */
export async function stepRecords(
  runDir: string,
  step: number,
): Promise<{ records: Rollout[]; withoutTokens: number; steps: number[]; malformed: LocatedIssue[] }> {
  const records: Rollout[] = [];
  const malformed: LocatedIssue[] = [];
  let withoutTokens = 0;
  const steps = new Set<number>();
  for await (const row of streamRollouts(runDir)) {
    const r = row.record;
    if (!r) malformed.push(...row.errors.filter((i) => mayBeOfStep(i, step)));
    if (!r || !isTraining(r)) continue;
    if (r.step !== undefined) steps.add(r.step);
    if (r.step !== step) continue;
    if (r.tokens?.ids) records.push(r);
    else withoutTokens++;
  }
  return { records, withoutTokens, steps: [...steps].sort((a, b) => a - b), malformed };
}

/** The malformed records of a step in a sentence (at most `max` named). */
export function malformedNote(malformed: readonly LocatedIssue[], max = 3): string {
  return `${malformed.length} record${malformed.length === 1 ? '' : 's'} that may be the step's could not be read (${malformed
    .slice(0, max)
    .map(formatIssue)
    .join('; ')}${malformed.length > max ? '; …' : ''})`;
}

/**
 * Agreement of a recomputed loss or gradient norm with the recorded one: within `rel` (1e-3) of the larger, or within
 * `abs` of 0 (a gradient of float noise where the run recorded 0: the replay's old log-probs are the recorded ones,
 * rounded to 6 decimals).
 */
export function agrees(recorded: number, recomputed: number, rel = 1e-3, abs = 1e-6): boolean {
  return Math.abs(recorded - recomputed) <= Math.max(abs, rel * Math.max(Math.abs(recorded), Math.abs(recomputed)));
}

/** The report with the step's recorded loss and gradient norms compared (when the step's update was one mini-batch). */
export function compareWithMetrics(
  report: ReplayStepReport,
  row: MetricsRow | undefined,
  malformed: readonly LocatedIssue[] = [],
): ReplayStepResult {
  const metrics: MetricComparison[] = [];
  if (row && report.comparable.loss) {
    for (const [key, value] of [...Object.entries(report.loss), ...Object.entries(report.grad_norm)]) {
      const recorded = row[key];
      if (key === 'total' || typeof recorded !== 'number') continue;
      metrics.push({
        key,
        recorded,
        recomputed: value,
        agrees: agrees(recorded, value, key.endsWith('grad_norm') ? 1e-2 : 1e-3),
      });
    }
  }
  return {
    ...report,
    metrics,
    match: report.match && metrics.every((m) => m.agrees),
    ...(malformed.length ? { malformed: malformed.map((i) => ({ ...i, text: formatIssue(i) })) } : {}),
  };
}

const g = (x: number) => (x === 0 ? '0' : Math.abs(x) < 1e-3 || Math.abs(x) >= 1e4 ? x.toExponential(2) : x.toFixed(4));

/** The replay in words: the checks, the worst tokens of the worst rollouts, the loss and gradient norm. */
export function describeReplay(r: ReplayStepResult, records: readonly Rollout[], worst = 3): string[] {
  const lines = [
    `step ${r.step} replayed at ${r.checkpoint} (${r.step_rollouts !== undefined && r.step_rollouts > r.rollouts ? `${r.rollouts} of the step's ${r.step_rollouts} rollouts, recorded` : `${r.rollouts} rollouts`}, ${r.device}, ${r.dtype}): ${r.match ? 'MATCH' : 'MISMATCH'}`,
  ];
  lines.push(
    `  ids           ${r.ids_identical ? 'identical (the batch fed the recorded ids)' : 'DIFFER'}; token texts ${r.text_identical ? "identical under the checkpoint's tokenizer" : 'DIFFER (another tokenizer?)'}; loss mask ${r.loss_mask_identical ? 'rebuilt identically' : 'DIFFERS from the recorded one'}`,
  );
  for (const m of r.mismatches.slice(0, 5)) lines.push(`    ${m.id}: ${m.what} differ from token ${m.at}`);
  lines.push(
    `  log-probs     ${r.logprob.compared} trained tokens: |recomputed − recorded| mean ${g(r.logprob.mean_abs_diff)}, max ${g(r.logprob.max_abs_diff)}; ${r.logprob.flagged} over ${r.tolerance}`,
  );
  if (r.rollout_logprob)
    lines.push(
      `                vs the sampling-time log-probs: mean ${g(r.rollout_logprob.mean_abs_diff)}, max ${g(r.rollout_logprob.max_abs_diff)}`,
    );
  const byId = new Map(records.map((x) => [x.id, x]));
  for (const d of [...r.rollouts_detail].sort((a, b) => b.max_abs_diff - a.max_abs_diff).slice(0, worst)) {
    if (!d.flagged.length) continue;
    const text = byId.get(d.id)?.tokens?.text ?? [];
    const top = d.delta
      .map((x, i) => [i, x] as const)
      .filter((p): p is readonly [number, number] => p[1] !== null)
      .sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]))
      .slice(0, 5);
    lines.push(
      `    ${d.id}: ${d.flagged.length} tokens over, max |Δ| ${g(d.max_abs_diff)} — ${top.map(([i, x]) => `#${i} ${JSON.stringify(text[i] ?? '')} Δ ${g(x)}`).join(', ')}`,
    );
  }
  const loss = Object.entries(r.loss)
    .map(([k, v]) => `${k} ${g(v)}`)
    .join(', ');
  const norm = Object.entries(r.grad_norm)
    .map(([k, v]) => `${k} ${g(v)}`)
    .join(', ');
  lines.push(`  recomputed    ${loss}; ${norm}`);
  // records that could not be read are the likelier cause of a step recorded in part than sampling or the writer
  const unread = r.malformed?.length ? malformedNote(r.malformed) : undefined;
  if (unread) lines.push(`  malformed     ${unread}: not replayed`);
  if (!r.comparable.loss)
    lines.push(
      `  recorded      not comparable: ${unread ? `the step's malformed records (above) were not replayed; ${r.comparable.why}` : r.comparable.why}`,
    );
  else if (!r.metrics.length) lines.push('  recorded      no loss or gradient norm in metrics.jsonl for this step');
  else
    lines.push(
      `  recorded      ${r.metrics.map((m) => `${m.key} ${g(m.recorded)} (${m.agrees ? 'agrees' : `DIFFERS: recomputed ${g(m.recomputed)}`})`).join(', ')}`,
    );
  return lines;
}
