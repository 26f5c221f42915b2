/**
 * The audit of a run as it grows, for the dashboard: each rollouts file (one per step) is audited once, and again
 * only when it changed; search-collapse, a rule over the run's series, is applied to the whole series each time.
 */
import { stat } from 'node:fs/promises';
import { readLines } from '../store/jsonl';
import { parseRolloutLine, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { runTokenizer, runVocabSize } from '../inspect/tokenizer';
import { searchCollapseSteps } from './alarms';
import { Auditor, type AuditOptions, type StepAudit } from './index';

export class RunAudit {
  private readonly files = new Map<string, { size: number; steps: StepAudit[] }>();
  private options: AuditOptions | undefined;
  /** The run's tokenizer is still to come (a tiny-policy run before its first checkpoint). */
  private pending = false;

  constructor(
    readonly dir: string,
    private readonly given: AuditOptions = {},
  ) {}

  /** The run's per-step series when a rollouts file is new or changed since the last call; undefined otherwise. */
  async update(): Promise<StepAudit[] | undefined> {
    // A live tiny-policy run saves its tokenizer with its first checkpoint: until then drift is not checked; once it
    // is there, every file is audited again with it.
    if (this.options && this.pending && (await runTokenizer(this.dir)).codec) {
      this.options = undefined;
      this.files.clear();
    }
    if (!this.options) {
      const runDialect = await runConfigDialect(this.dir);
      // The run's own tokenizer (its model's, or the tiny policy's from a checkpoint): each file's Auditor checks it
      // can be the run's before it checks drift with it.
      const own = this.given.tokenizer ? undefined : await runTokenizer(this.dir);
      this.pending = !!own?.pending;
      const tokenizer = this.given.tokenizer ?? own?.codec;
      const runVocab = tokenizer ? await runVocabSize(this.dir) : undefined;
      this.options = { ...this.given, ...(tokenizer ? { tokenizer } : {}), ...(runVocab !== undefined ? { runVocab } : {}), read: { ...this.given.read, ...(runDialect ? { runDialect } : {}) } };
    }
    let files: string[];
    try {
      files = await rolloutFiles(this.dir);
    } catch {
      return undefined;
    }
    let changed = false;
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
    for (const { steps } of this.files.values()) for (const s of steps) byStep.set(s.step, { ...s, alarms: { ...s.alarms } });
    const series = [...byStep.values()].sort((a, b) => a.step - b.step);
    for (const step of searchCollapseSteps(new Map(series.map((s) => [s.step, s.mean_searches])), this.options)) {
      const s = byStep.get(step)!;
      if (s.no_search) s.alarms['search-collapse'] = s.no_search;
    }
    return series;
  }
}
