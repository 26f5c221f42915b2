/**
 * The audit's per-step series as dashboard metrics (`summary.steps` → one metrics row per step): the drift rate,
 * mean |Δ| over trained tokens, the fraction of trained tokens whose ratio lies outside the band, the mean
 * sequence-level ratio, leaked tokens, the rollouts audited, and each alarm's count (of rollouts). The names (ALARMS, AUDIT_METRICS) are the protocol's: the dashboard's webview charts them.
 */
import { ALARMS, type Alarm, AUDIT_METRICS, type MetricsRow, RUN_ALARMS } from '../protocol/dashboard';
import type { GroupStepFacts } from './groupChecks';
import { addHealthStep, type HealthStepFacts } from './health';
import { addSearchStep, type SearchStepFacts, searchRates } from './search';

export { ALARMS, type Alarm, AUDIT_METRICS, RUN_ALARMS };

/** Per training step: what the dashboard charts (drift rate, mean |Δ|, ratios outside the band, alarms). */
export interface StepAudit {
  step: number;
  rollouts: number;
  /** Rollouts with drift / rollouts re-encoded (null when no tokenizer). */
  drift_rate: number | null;
  /** Mean |Δ| over the step's compared trained tokens (null when none). */
  mean_abs_diff: number | null;
  /** Fraction of the step's compared trained tokens whose ratio lies outside the band (null when none). */
  ratio_outside: number | null;
  /** Mean of the rollouts' sequence-level ratios exp(Σ Δ) (null when none compared). */
  seq_ratio: number | null;
  leaks: number;
  mean_searches: number;
  /** Rollouts that made no search (the ones search-collapse marks when the step has collapsed). */
  no_search: number;
  /** Rollouts per alarm (run-level alarms: 1 on the steps where they fired). */
  alarms: Partial<Record<Alarm, number>>;
  /** Whether `health` and `search` are of training rollouts (else of held-out ones: the step had no training rollout). */
  training: boolean;
  /** What the run-health rules read of the step's training rollouts (held-out ones where it has none): sums. */
  health: HealthStepFacts;
  /** The step's search behaviour (same rollouts): sums. */
  search: SearchStepFacts;
  /** The step's groups (training): counted for zero variance, and zero-variance ones. */
  groups: GroupStepFacts;
}

/** Two audits of one step (its rollouts read from two files) as one: counts and sums added, rates weighted. */
export function mergeStepAudits(a: StepAudit, b: StepAudit): StepAudit {
  const n = a.rollouts + b.rollouts;
  const w = (x: number | null, y: number | null, wx: number, wy: number) =>
    x === null ? y : y === null ? x : (x * wx + y * wy) / (wx + wy || 1);
  const alarms: Partial<Record<Alarm, number>> = { ...a.alarms };
  for (const [k, v] of Object.entries(b.alarms) as [Alarm, number][])
    alarms[k] = (RUN_ALARMS as readonly string[]).includes(k) ? Math.max(alarms[k] ?? 0, v) : (alarms[k] ?? 0) + v;
  return {
    step: a.step,
    rollouts: n,
    drift_rate: w(a.drift_rate, b.drift_rate, a.rollouts, b.rollouts),
    mean_abs_diff: w(a.mean_abs_diff, b.mean_abs_diff, a.rollouts, b.rollouts),
    ratio_outside: w(a.ratio_outside, b.ratio_outside, a.rollouts, b.rollouts),
    seq_ratio: w(a.seq_ratio, b.seq_ratio, a.rollouts, b.rollouts),
    leaks: a.leaks + b.leaks,
    mean_searches: n ? (a.mean_searches * a.rollouts + b.mean_searches * b.rollouts) / n : 0,
    no_search: a.no_search + b.no_search,
    alarms,
    // training rollouts win over held-out ones (a step's health is its training batch's)
    ...(a.training === b.training
      ? { training: a.training, health: addHealthStep(a.health, b.health), search: addSearchStep(a.search, b.search) }
      : a.training
        ? { training: true, health: a.health, search: a.search }
        : { training: true, health: b.health, search: b.search }),
    groups: { groups: a.groups.groups + b.groups.groups, zeroStd: a.groups.zeroStd + b.groups.zeroStd },
  };
}

export function auditMetricRows(steps: readonly StepAudit[]): MetricsRow[] {
  return steps.map((s) => {
    const row: MetricsRow = { step: s.step, [AUDIT_METRICS.rollouts]: s.rollouts, [AUDIT_METRICS.leaks]: s.leaks };
    if (s.drift_rate !== null) row[AUDIT_METRICS.drift] = s.drift_rate;
    if (s.mean_abs_diff !== null) row[AUDIT_METRICS.meanAbsDiff] = s.mean_abs_diff;
    if (s.ratio_outside !== null) row[AUDIT_METRICS.ratioOutside] = s.ratio_outside;
    if (s.seq_ratio !== null) row[AUDIT_METRICS.seqRatio] = s.seq_ratio;
    for (const [k, v] of Object.entries(s.alarms)) if (v) row[AUDIT_METRICS.alarm(k)] = v;
    for (const [k, v] of Object.entries(searchRates(s.search))) if (v !== null) row[AUDIT_METRICS.search(k)] = v;
    return row;
  });
}

/**
 * The audit's rows without the series the trainer already wrote for the same step (its in-run checks write
 * `audit/leaks` and the `audit/logprob/…` series over every training rollout of a step into metrics.jsonl; the audit
 * of the recorded rollouts adds drift and the alarms, and the token series only for steps the metrics lack).
 */
export function withoutTrainerSeries(
  auditRows: readonly MetricsRow[],
  metricsRows: readonly MetricsRow[],
): MetricsRow[] {
  const had = new Map<number, Set<string>>();
  for (const m of metricsRows) {
    const keys = Object.keys(m).filter((k) => k.startsWith('audit/'));
    if (keys.length) had.set(m.step, new Set([...(had.get(m.step) ?? []), ...keys]));
  }
  if (!had.size) return [...auditRows];
  return auditRows.map((r) => {
    const drop = had.get(r.step);
    return drop
      ? (Object.fromEntries(Object.entries(r).filter(([k]) => k === 'step' || !drop.has(k))) as MetricsRow)
      : r;
  });
}
