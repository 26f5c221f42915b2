/**
 * The audit's per-step series as dashboard metrics (`summary.steps` → one metrics row per step): the drift rate,
 * mean |Δ| over trained tokens, the fraction of trained tokens whose ratio lies outside the band, the mean
 * sequence-level ratio, leaked tokens, the rollouts audited, and each alarm's count (of rollouts). The names (ALARMS, AUDIT_METRICS) are the protocol's: the dashboard's webview charts them.
 */
import { ALARMS, AUDIT_METRICS, type Alarm, type MetricsRow } from '../protocol';

export { ALARMS, AUDIT_METRICS, type Alarm };

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
  alarms: Partial<Record<Alarm, number>>;
}

export function auditMetricRows(steps: readonly StepAudit[]): MetricsRow[] {
  return steps.map((s) => {
    const row: MetricsRow = { step: s.step, [AUDIT_METRICS.rollouts]: s.rollouts, [AUDIT_METRICS.leaks]: s.leaks };
    if (s.drift_rate !== null) row[AUDIT_METRICS.drift] = s.drift_rate;
    if (s.mean_abs_diff !== null) row[AUDIT_METRICS.meanAbsDiff] = s.mean_abs_diff;
    if (s.ratio_outside !== null) row[AUDIT_METRICS.ratioOutside] = s.ratio_outside;
    if (s.seq_ratio !== null) row[AUDIT_METRICS.seqRatio] = s.seq_ratio;
    for (const [k, v] of Object.entries(s.alarms)) if (v) row[AUDIT_METRICS.alarm(k)] = v;
    return row;
  });
}

/**
 * The audit's rows without the series the trainer already wrote for the same step (its in-run checks write
 * `audit/leaks` and the `audit/logprob/…` series over every training rollout of a step into metrics.jsonl; the audit
 * of the recorded rollouts adds drift and the alarms, and the token series only for steps the metrics lack).
 */
export function withoutTrainerSeries(auditRows: readonly MetricsRow[], metricsRows: readonly MetricsRow[]): MetricsRow[] {
  const had = new Map<number, Set<string>>();
  for (const m of metricsRows) {
    const keys = Object.keys(m).filter((k) => k.startsWith('audit/'));
    if (keys.length) had.set(m.step, new Set([...(had.get(m.step) ?? []), ...keys]));
  }
  if (!had.size) return [...auditRows];
  return auditRows.map((r) => {
    const drop = had.get(r.step);
    return drop ? (Object.fromEntries(Object.entries(r).filter(([k]) => k === 'step' || !drop.has(k))) as MetricsRow) : r;
  });
}
