/**
 * The audit of a run as it grows, for the dashboard: each rollouts file (one per step) is audited once, and again
 * only when it changed; search-collapse, a rule over the run's series, is applied to the whole series each time.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isStorePart, readPart, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { STORE_FILES } from '../store/tokenStore';
import { runTokenizer } from '../inspect/tokenizer';
import { searchCollapseSteps } from './alarms';
import { AuditStream, type AuditOptions, type StepAudit } from './index';

export class RunAudit {
  private readonly files = new Map<string, { size: number | string; steps: StepAudit[] }>();
  private options: AuditOptions | undefined;

  constructor(
    readonly dir: string,
    private readonly given: AuditOptions = {},
  ) {}

  /** The run's per-step series when a rollouts file is new or changed since the last call; undefined otherwise. */
  async update(): Promise<StepAudit[] | undefined> {
    if (!this.options) {
      const runDialect = await runConfigDialect(this.dir);
      const tokenizer = this.given.tokenizer ?? (await runTokenizer(this.dir)).codec;
      this.options = { ...this.given, ...(tokenizer ? { tokenizer } : {}), read: { ...this.given.read, ...(runDialect ? { runDialect } : {}) } };
    }
    let files: string[];
    try {
      files = await rolloutFiles(this.dir);
    } catch {
      return undefined;
    }
    let changed = false;
    for (const file of files) {
      const store = await isStorePart(file);
      // a store step never changes after its commit (a resume replaces it whole: another inode)
      const st = await stat(store ? join(file, STORE_FILES.rollouts) : file).catch(() => undefined);
      const size = st && (store ? `${st.ino}:${st.size}` : st.size);
      if (size === undefined || this.files.get(file)?.size === size) continue;
      const auditor = new AuditStream(this.options);
      for await (const row of readPart(file, this.options.read, undefined, this.options.tokenizer ? 'audit+ids' : 'audit')) {
        if (row.record) auditor.add(row.record);
      }
      this.files.set(file, { size, steps: auditor.finish().steps });
      changed = true;
    }
    if (!changed) return undefined;
    const byStep = new Map<number, StepAudit>();
    for (const { steps } of this.files.values()) for (const s of steps) byStep.set(s.step, { ...s, alarms: { ...s.alarms } });
    const series = [...byStep.values()].sort((a, b) => a.step - b.step);
    for (const step of searchCollapseSteps(new Map(series.map((s) => [s.step, s.mean_searches])), this.options)) {
      const s = byStep.get(step)!;
      if (s.no_search) s.alarms['search-collapse'] = s.no_search;
    }
    return series;
  }
}
