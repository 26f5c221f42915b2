/**
 * The audit of a run as it grows, for the dashboard: each rollouts file (one per step) is audited once, and again
 * only when it changed; the run-level rules — search-collapse, and the advisories of run health, zero-std-high and
 * think-drift (src/core/audit/index.ts runAdvisories) over the run's series and its metrics.jsonl — are applied to
 * the whole series each time.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { MetricsRow } from '../protocol';
import { readLines } from '../store/jsonl';
import { parseRolloutLine, rolloutFiles, runConfigDialect, runConfigNear } from '../store/rollouts';
import { runTokenizer } from '../inspect/tokenizer';
import { searchCollapseSteps } from './alarms';
import { runFactsOf } from './groupChecks';
import { applyAdvisories, Auditor, runAdvisories, type AuditOptions, type StepAudit } from './index';
import { mergeStepAudits, RUN_ALARMS } from './series';

/**
 * The rows of a run's metrics.jsonl (for a run directory, or a path inside one); a line that is not a JSON object
 * with a numeric `step` is skipped (the dashboard's metrics tail reports those). Empty when there is none.
 */
export async function readRunMetrics(path: string): Promise<MetricsRow[]> {
  const run = await runConfigNear(path);
  const file = join(run?.dir ?? path, 'metrics.jsonl');
  const rows: MetricsRow[] = [];
  try {
    for await (const { text } of readLines(file)) {
      if (!text.trim()) continue;
      try {
        const row = JSON.parse(text) as MetricsRow;
        if (row && typeof row === 'object' && typeof row.step === 'number') rows.push(row);
      } catch {
        /* a partial last line of a live run, or a malformed one */
      }
    }
  } catch {
    /* no metrics.jsonl */
  }
  return rows;
}

/** The options `audit` and the dashboard use for a run: its dialect, tokenizer and config facts (rollout.n, KL). */
export async function runAuditOptions(path: string, given: AuditOptions = {}): Promise<AuditOptions> {
  const runDialect = await runConfigDialect(path);
  const tokenizer = given.tokenizer ?? (await runTokenizer(path)).codec;
  const config = (await runConfigNear(path))?.config;
  return { ...given, ...(tokenizer ? { tokenizer } : {}), run: { ...runFactsOf(config), ...given.run }, read: { ...given.read, ...(runDialect ? { runDialect } : {}) } };
}

export class RunAudit {
  private readonly files = new Map<string, { size: number; steps: StepAudit[] }>();
  private metricsSize = -1;
  private metrics: MetricsRow[] = [];
  private options: AuditOptions | undefined;

  constructor(
    readonly dir: string,
    private readonly given: AuditOptions = {},
  ) {}

  /** The run's per-step series when a rollouts file or the metrics are new or changed since the last call; undefined otherwise. */
  async update(): Promise<StepAudit[] | undefined> {
    this.options ??= await runAuditOptions(this.dir, this.given);
    let changed = false;
    const metricsSize = (await stat(join(this.dir, 'metrics.jsonl')).catch(() => undefined))?.size ?? -1;
    if (metricsSize !== this.metricsSize) {
      this.metricsSize = metricsSize;
      this.metrics = await readRunMetrics(this.dir);
      changed = true;
    }
    let files: string[] = [];
    try {
      files = await rolloutFiles(this.dir);
    } catch {
      if (!changed) return undefined;
    }
    for (const file of files) {
      const size = (await stat(file).catch(() => undefined))?.size;
      if (size === undefined || this.files.get(file)?.size === size) continue;
      const auditor = new Auditor(this.options);
      for await (const { line, text } of readLines(file)) {
        const row = parseRolloutLine(text, file, line, this.options.read);
        if (row.record) auditor.add(row.record);
      }
      this.files.set(file, { size, steps: auditor.finish().steps });
      changed = true;
    }
    if (!changed) return undefined;
    const byStep = new Map<number, StepAudit>();
    for (const { steps } of this.files.values())
      for (const s of steps) {
        // the run-level alarms are applied below, over the whole run
        const own = { ...s, alarms: Object.fromEntries(Object.entries(s.alarms).filter(([k]) => k === 'non-finite' || !(RUN_ALARMS as readonly string[]).includes(k))) };
        const before = byStep.get(s.step);
        byStep.set(s.step, before ? mergeStepAudits(before, own) : own);
      }
    const series = [...byStep.values()].sort((a, b) => a.step - b.step);
    for (const step of searchCollapseSteps(new Map(series.filter((s) => s.rollouts).map((s) => [s.step, s.mean_searches])), this.options)) {
      const s = byStep.get(step)!;
      if (s.no_search) s.alarms['search-collapse'] = s.no_search;
    }
    applyAdvisories(series, runAdvisories(series, this.metrics, this.options));
    return series;
  }
}
