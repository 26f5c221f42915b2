/**
 * The audit of a run as it grows, for the dashboard: each rollouts file or store step (one per step) is audited once,
 * and again only when it changed; search-collapse, a rule over the run's series, is applied to the whole series each
 * time. What was audited is kept in `rollouts/.audit-cache.json` (per part: its stamp and its steps' series, for
 * these options), so a run opened again — a long one took minutes of audit the first time — charts at once; the
 * file is a cache (written to a temporary name and renamed; a read-only run directory just goes without it).
 */
import { existsSync } from 'node:fs';
import { readFile, rename, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { isStorePart, readPart, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { STORE_FILES } from '../store/tokenStore';
import { runTokenizer, runVocabSize } from '../inspect/tokenizer';
import { searchCollapseSteps } from './alarms';
import { AuditStream, type AuditOptions, type StepAudit } from './index';

const CACHE = '.audit-cache.json';
const CACHE_VERSION = 1;

export class RunAudit {
  private readonly files = new Map<string, { size: number | string; steps: StepAudit[] }>();
  private options: AuditOptions | undefined;
  /** The run's tokenizer is still to come (a tiny-policy run before its first checkpoint). */
  private pending = false;
  private cacheDir = '';
  private cacheKey = '';

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
      await this.loadCache();
    }
    let files: string[];
    try {
      files = await rolloutFiles(this.dir);
    } catch {
      return undefined;
    }
    let changed = false;
    for (const gone of [...this.files.keys()].filter((f) => !files.includes(f))) {
      this.files.delete(gone); // a resume removed it
      changed = true;
    }
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
    if (!changed) return this.fromCache ? this.series() : undefined;
    await this.saveCache();
    return this.series();
  }

  /** Whether the series were read from the cache and not yet returned. */
  private fromCache = false;

  private series(): StepAudit[] {
    this.fromCache = false;
    const byStep = new Map<number, StepAudit>();
    for (const { steps } of this.files.values()) for (const s of steps) byStep.set(s.step, { ...s, alarms: { ...s.alarms } });
    const series = [...byStep.values()].sort((a, b) => a.step - b.step);
    for (const step of searchCollapseSteps(new Map(series.map((s) => [s.step, s.mean_searches])), this.options)) {
      const s = byStep.get(step)!;
      if (s.no_search) s.alarms['search-collapse'] = s.no_search;
    }
    return series;
  }

  private async loadCache(): Promise<void> {
    const o = this.options!;
    this.cacheDir = existsSync(join(this.dir, 'rollouts')) ? join(this.dir, 'rollouts') : this.dir;
    const tok = o.tokenizer as { name?: string } | undefined;
    this.cacheKey = JSON.stringify({ tokenizer: tok ? (tok.name ?? 'unnamed') : null, runVocab: o.runVocab, ratioLow: o.ratioLow, ratioHigh: o.ratioHigh, isLevel: o.isLevel, isCap: o.isCap, driftScope: o.driftScope, repeatFraction: o.repeatFraction, minWords: o.minWords, wordFraction: o.wordFraction, read: o.read });
    try {
      const c = JSON.parse(await readFile(join(this.cacheDir, CACHE), 'utf8')) as { v?: number; key?: string; parts?: Record<string, { size: number | string; steps: StepAudit[] }> };
      if (c.v !== CACHE_VERSION || c.key !== this.cacheKey || !c.parts) return;
      for (const [name, e] of Object.entries(c.parts)) this.files.set(join(this.cacheDir, name), e);
      this.fromCache = this.files.size > 0;
    } catch {
      /* none yet, or unreadable: audit afresh */
    }
  }

  private async saveCache(): Promise<void> {
    const parts = Object.fromEntries([...this.files].map(([f, e]) => [basename(f), e]));
    const tmp = join(this.cacheDir, `${CACHE}.${process.pid}.tmp`);
    try {
      await writeFile(tmp, JSON.stringify({ v: CACHE_VERSION, key: this.cacheKey, parts }));
      await rename(tmp, join(this.cacheDir, CACHE));
    } catch {
      /* a read-only run directory: no cache */
    }
  }
}
