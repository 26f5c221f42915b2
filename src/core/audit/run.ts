/**
/**
 * The audit of a run as it grows, for the dashboard: each rollouts file or store step (one per step) is audited once,
 * and again only when it changed; the run-level rules — search-collapse, and the advisories of run health,
 * zero-std-high and think-drift (src/core/audit/index.ts runAdvisories) over the run's series and its metrics.jsonl —
 * are applied to the whole series each time. What was audited is kept in `rollouts/.audit-cache.json` (per part: its
 * stamp and its steps' series, for these options), so a run opened again — a long one took minutes of audit the
 * first time — charts at once; the file is a cache (written to a temporary name and renamed; a read-only run
 * directory just goes without it).
 */
import { existsSync } from 'node:fs';
import { readFile, rename, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { MetricsRow } from '../protocol/dashboard';
import { readLines } from '../store/jsonl';
import {
  isStorePart,
  readPart,
  rolloutFiles,
  runConfigDialect,
  runConfigNear,
  type StepRecording,
  samplingOf,
  stepRecording,
} from '../store/rollouts';
import { STORE_FILES } from '../store/tokenStore';
import { runTokenizer, runVocabSize } from '../tokens/tokenizer';
import { searchCollapseSteps } from './alarms';
import { runFactsOf } from './groupChecks';
import {
  type AuditOptions,
  AuditStream,
  applyAdvisories,
  collapseSeries,
  runAdvisories,
  type StepAudit,
} from './index';
import { mergeStepAudits, RUN_ALARMS } from './series';

const CACHE = '.audit-cache.json';
const CACHE_VERSION = 2;

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
  return {
    ...given,
    ...(tokenizer ? { tokenizer } : {}),
    run: { ...runFactsOf(config), ...given.run },
    read: { ...given.read, ...(runDialect ? { runDialect } : {}) },
  };
}

export class RunAudit {
  private readonly files = new Map<string, { size: number | string; steps: StepAudit[] }>();
  /** What each store step recorded (its metadata's recorded / of): the advisories say when a rate is over a sample. */
  private readonly recording = new Map<string, StepRecording | undefined>();
  private metricsSize = -1;
  private metrics: MetricsRow[] = [];
  private options: AuditOptions | undefined;
  /** The run's tokenizer is still to come (a tiny-policy run before its first checkpoint). */
  private pending = false;
  private cacheDir = '';
  private cacheKey = '';

  constructor(
    readonly dir: string,
    private readonly given: AuditOptions = {},
  ) {}

  /** The run's per-step series when a rollouts file or the metrics are new or changed since the last call; undefined otherwise. */
  async update(): Promise<StepAudit[] | undefined> {
    // A live tiny-policy run saves its tokenizer with its first checkpoint: until then drift is not checked; once it
    // is there, every file is audited again with it.
    if (this.options && this.pending && (await runTokenizer(this.dir)).codec) {
      this.options = undefined;
      this.files.clear();
    }
    if (!this.options) {
      // The run's own tokenizer (its model's, or the tiny policy's from a checkpoint): each file's auditor checks it
      // can be the run's before it checks drift with it.
      const own = this.given.tokenizer ? undefined : await runTokenizer(this.dir);
      this.pending = !!own?.pending;
      const tokenizer = this.given.tokenizer ?? own?.codec;
      const runVocab = tokenizer ? await runVocabSize(this.dir) : undefined;
      this.options = await runAuditOptions(this.dir, {
        ...this.given,
        ...(tokenizer ? { tokenizer } : {}),
        ...(runVocab !== undefined ? { runVocab } : {}),
      });
      await this.loadCache();
    }
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
    for (const gone of [...this.files.keys()].filter((f) => !files.includes(f))) {
      this.files.delete(gone); // a resume removed it
      this.recording.delete(gone);
      changed = true;
    }
    for (const file of files) {
      const store = await isStorePart(file);
      // a store step never changes after its commit (a resume replaces it whole: another inode)
      const st = await stat(store ? join(file, STORE_FILES.rollouts) : file).catch(() => undefined);
      const size = st && (store ? `${st.ino}:${st.size}` : st.size);
      if (!this.recording.has(file) || this.files.get(file)?.size !== size)
        this.recording.set(file, await stepRecording(file));
      if (size === undefined || this.files.get(file)?.size === size) continue;
      const auditor = new AuditStream(this.options);
      for await (const row of readPart(
        file,
        this.options.read,
        undefined,
        this.options.tokenizer ? 'audit+ids' : 'audit',
      )) {
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
    for (const { steps } of this.files.values())
      for (const s of steps) {
        // the run-level alarms are applied below, over the whole run
        const own = {
          ...s,
          alarms: Object.fromEntries(
            Object.entries(s.alarms).filter(
              ([k]) => k === 'non-finite' || !(RUN_ALARMS as readonly string[]).includes(k),
            ),
          ),
        };
        const before = byStep.get(s.step);
        byStep.set(s.step, before ? mergeStepAudits(before, own) : own);
      }
    const series = [...byStep.values()].sort((a, b) => a.step - b.step);
    const sampled = samplingOf([...this.recording.values()].filter((r) => r !== undefined))?.by_step;
    for (const step of searchCollapseSteps(
      collapseSeries(
        new Map(series.filter((s) => s.rollouts).map((s) => [s.step, s.mean_searches])),
        this.metrics,
        sampled,
      ),
      this.options,
    )) {
      const s = byStep.get(step)!;
      if (s.no_search) s.alarms['search-collapse'] = s.no_search;
    }
    applyAdvisories(series, runAdvisories(series, this.metrics, this.options, sampled));
    return series;
  }

  private async loadCache(): Promise<void> {
    const o = this.options!;
    this.cacheDir = existsSync(join(this.dir, 'rollouts')) ? join(this.dir, 'rollouts') : this.dir;
    // every option the series depend on (the tokenizer by name; the run's facts, thresholds, dialect)
    const { tokenizer: tok, ...rest } = o;
    this.cacheKey = JSON.stringify({ tokenizer: tok ? (tok.name ?? 'unnamed') : null, ...rest });
    try {
      const c = JSON.parse(await readFile(join(this.cacheDir, CACHE), 'utf8')) as {
        v?: number;
        key?: string;
        parts?: Record<string, { size: number | string; steps: StepAudit[] }>;
      };
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
