/**
 * The inspector's engine: owns the rollout store and the table for one source, answers page requests, runs
 * queries (filter, text search, sort) — the latest one wins, older ones are cancelled between batches — and
 * follows a live run. It runs in a worker thread (worker.ts), so the extension host's thread never parses a row;
 * tests drive it directly.
 *
 * Opening a big file: the first rows are read from the start of the file and shown before the index is built;
 * then the store's index (one streaming pass); then the facts of every row, in batches, with page requests and
 * queries served between batches. A query made before the facts are complete is answered over the rows analysed so
 * far and answered again when they are. The facts of token-store steps are built on worker threads too (factsPool.ts:
 * one fewer than the cores), appended in row order as they come.
 */
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ImportanceOptions } from '../audit/importance';
import { mismatchNote, tokenizerMismatch } from '../audit/tokenizerMatch';
import { detectSource } from '../importers';
import { isForeignKind, PYTHON_KINDS } from '../importers/foreign';
import { ForeignMirror } from '../importers/foreign/mirror';
import type { InspectorQuery, InspectorStatus, RowFacts } from '../protocol/rollouts';
import type { ReadOptions } from '../run/format';
import { formatIssue } from '../run/format';
import { type RolloutRow, RolloutStore, rawPreview, readPart, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { runTokenizer, runVocabSize } from '../tokens/tokenizer';
import { defaultFactsWorkers, type FactsJob, FactsPool } from './factsPool';
import { FilterError, tokenize } from './filter';
import { RolloutTable, rowFacts } from './table';

/** How another engine's dump is opened (src/core/importers/foreign): converted into `cacheDir`, followed. */
export interface ForeignOpenOptions {
  /** Where the converted records go (default: a directory per source under the OS's temp dir). */
  cacheDir?: string;
  /** The Python that reads pickles and .pt files. */
  python?: string;
  trustPickle?: boolean;
  /** False in an untrusted workspace: dumps that need the trainer's Python are not opened. */
  allowPython?: boolean;
  /** How often a followed dump is looked at for new files (ms). */
  pollMs?: number;
}

export type EngineRequest =
  | {
      t: 'open';
      path: string;
      follow: boolean;
      read?: ReadOptions;
      tokenizer?: string;
      importance?: ImportanceOptions;
      foreign?: ForeignOpenOptions;
    }
  | { t: 'query'; seq: number; query: InspectorQuery }
  | { t: 'page'; req: number; from: number; count: number }
  | { t: 'row'; req: number; index: number }
  | { t: 'close' };

export type EngineMessage =
  | { t: 'status'; status: InspectorStatus }
  | { t: 'preview'; rows: RowFacts[] }
  | { t: 'page'; req: number; seq: number; from: number; rows: RowFacts[] }
  | { t: 'row'; req: number; row: RolloutRow | null; raw?: string };

const PREVIEW_ROWS = 100;
const yieldNow = () => new Promise<void>((r) => setImmediate(r));

export class InspectorEngine {
  private store: RolloutStore | undefined;
  private readonly table = new RolloutTable();
  /** Row indices of the current view; null = every row in order. */
  private view: Int32Array | null = null;
  private query: InspectorQuery = { filter: '', search: '' };
  private seq = 0;
  private appliedSeq = 0;
  private filterError: InspectorStatus['filterError'];
  private busy = false;
  private analysing = false;
  private indexing: InspectorStatus['indexing'];
  private error: string | undefined;
  private closed = false;
  private path = '';
  private follow = false;
  /** How rows are read (dialect, search tool), with the run config's dialect once known. */
  private read: ReadOptions = {};
  /** With which tokenizer drift is checked, or why it is not. */
  private driftNote: string | undefined;
  /** Another engine's dump, converted into our records as it grows. */
  private mirror: ForeignMirror | undefined;
  private mirrorPoll: ReturnType<typeof setInterval> | undefined;
  /** The dump's files present at opening are converted and the store is open. */
  private mirrorReady = false;
  /** The threads that build facts beside this one (none on a single core). */
  private readonly pool: FactsPool | undefined;
  /** How those threads load the drift check's tokenizer. */
  private tokenizerSpec: FactsJob['tokenizer'];

  /**
   * `workers`: facts threads beside the engine's (default: one fewer than the cores, at most 7; 0: none);
   * `threadsFrom`: the fewest store rows left to analyse for which they are used (table.ts THREADS_FROM).
   */
  constructor(
    private readonly post: (m: EngineMessage) => void,
    options: { workers?: number; threadsFrom?: number } = {},
  ) {
    const workers = options.workers ?? defaultFactsWorkers();
    this.pool = workers > 0 ? new FactsPool(workers) : undefined;
    this.threadsFrom = options.threadsFrom;
  }
  private readonly threadsFrom: number | undefined;

  async handle(m: EngineRequest): Promise<void> {
    switch (m.t) {
      case 'open':
        return this.open(m.path, m.follow, m.read, m.tokenizer, m.importance, m.foreign);
      case 'query':
        return this.setQuery(m.seq, m.query);
      case 'page':
        return this.post({
          t: 'page',
          req: m.req,
          seq: this.appliedSeq,
          from: m.from,
          rows: await this.page(m.from, m.count),
        });
      case 'row': {
        const row = this.store && m.index < this.store.count ? await this.store.row(m.index) : undefined;
        const raw = row && !row.record ? (await this.store!.rawRows(m.index, m.index + 1))[0]?.text : undefined;
        return this.post({
          t: 'row',
          req: m.req,
          row: row ?? null,
          raw: raw === undefined ? undefined : rawPreview(raw),
        });
      }
      case 'close':
        return this.close();
    }
  }

  /** Rows whose facts the facts threads built (the rest were built on this thread). */
  get threadRows(): number {
    return this.pool?.rowsBuilt ?? 0;
  }

  status(): InspectorStatus {
    const total = this.store?.count ?? 0;
    return {
      source: this.path,
      files: this.store?.fileNames.length ?? 0,
      total,
      analysed: this.table.rows.length,
      view: this.view ? this.view.length : total,
      seq: this.appliedSeq,
      indexing: this.indexing,
      busy: this.busy || this.analysing,
      following: this.follow,
      malformed: this.table.malformed,
      filterError: this.filterError,
      error: this.error,
      ...(this.driftNote ? { drift: this.driftNote } : {}),
      ...(this.pool?.rowsBuilt ? { threads: { workers: this.pool.workers, rows: this.pool.rowsBuilt } } : {}),
      ...(this.mirror ? { imported: this.importedStatus() } : {}),
      ...(!this.table.checks.tokenizer && usesDrift(this.query)
        ? { notChecked: this.driftNote ?? 'drift not checked: no tokenizer' }
        : {}),
    };
  }

  private importedStatus(): NonNullable<InspectorStatus['imported']> {
    const m = this.mirror!;
    const s = m.summary();
    return {
      ready: this.mirrorReady,
      engine: s.engine,
      rollouts: s.rollouts,
      steps: s.steps.length,
      skipped: s.skipped,
      pending: s.pending,
      arrays: Object.keys(s.arrays),
      engineArrays: s.engineArrays,
      roles: Object.keys(s.roles),
      perStep: s.perStep.slice(0, 200),
      notes: m.notes.slice(0, 10),
      issues: m.issues.slice(0, 20).map(formatIssue),
    };
  }

  private sendStatus(): void {
    if (!this.closed) this.post({ t: 'status', status: this.status() });
  }

  /**
   * Opens a source. The drift check's tokenizer is the run's own (tokenizer.ts runTokenizer), else `tokenizer` (a model
   * directory or tokenizer.json: the `searchAgent.audit.tokenizer` setting of the files' folder); one that cannot be the
   * run's is not used, and the status says so. `importance`: the level and
   * cap of the importance-sampling preview (`is.clipped`, `is.dropped`).
   */
  async open(
    path: string,
    follow: boolean,
    read: ReadOptions = {},
    tokenizer?: string,
    importance: ImportanceOptions = {},
    foreign: ForeignOpenOptions = {},
  ): Promise<void> {
    this.path = path;
    this.follow = follow;
    let storePath = path;
    // The first rows of the first file, straight from its start, before the index.
    try {
      const runDialect = read.runDialect ?? (await runConfigDialect(path));
      this.read = { ...read, ...(runDialect ? { runDialect } : {}) };
      // The run's own tokenizer first; the setting's (`tokenizer`) for rollouts of no run, or whose run names none.
      const t = await runTokenizer(path, tokenizer);
      const kind = await detectSource(path).catch(() => undefined);
      if (kind && isForeignKind(kind)) {
        if (PYTHON_KINDS.includes(kind) && foreign.allowPython === false)
          throw new Error(
            `a ${kind} dump is read by the trainer's Python (pickles and .pt files), which an untrusted workspace does not run: trust the workspace to open it`,
          );
        const dir =
          foreign.cacheDir ??
          join(tmpdir(), 'sas-imports', createHash('sha256').update(path).digest('hex').slice(0, 16));
        this.mirror = await ForeignMirror.open(path, kind, dir, {
          ...(t.codec ? { tokenizer: t.codec } : {}),
          ...(foreign.python ? { python: foreign.python } : {}),
          ...(foreign.trustPickle ? { trustPickle: true } : {}),
          read: this.read,
        });
        this.sendStatus();
        await this.mirror.update(!follow);
        storePath = dir;
        if (follow) {
          const mirror = this.mirror;
          this.mirrorPoll = setInterval(
            () =>
              void mirror.update().then(
                (changed) => changed && this.sendStatus(),
                () => undefined,
              ),
            foreign.pollMs ?? 2000,
          );
          this.mirrorPoll.unref?.();
        }
      }
      const first = (await rolloutFiles(storePath))[0];
      const parsed: Omit<RolloutRow, 'index'>[] = [];
      // A few rows, all their columns when a tokenizer is to be checked against them (ids and texts), else the audit's.
      if (first)
        for await (const row of readPart(first, this.read, undefined, t.codec ? 'all' : 'audit')) {
          parsed.push(row);
          if (parsed.length >= PREVIEW_ROWS) break;
        }
      // A tokenizer that cannot be the run's (checked on the first record with token ids) is not used: not drift.
      const sample = t.codec ? parsed.find((p) => p.record?.tokens?.ids?.length)?.record : undefined;
      const why = t.codec ? tokenizerMismatch(t.codec, sample ?? {}, await runVocabSize(path)) : undefined;
      const codec = why ? undefined : t.codec;
      this.table.checks = { ...importance, ...(codec ? { tokenizer: codec } : {}) };
      this.driftNote = codec ? `drift checked with ${codec.name}` : why ? mismatchNote(t.codec!, why) : t.note;
      this.tokenizerSpec = codec ? { path, ...(tokenizer ? { named: tokenizer } : {}), name: codec.name } : undefined;
      if (first) {
        const rows = parsed.map((p, index) => rowFacts({ index, ...p }, this.read, this.table.checks));
        this.post({ t: 'preview', rows });
      }
    } catch (e) {
      this.error = `${path}: ${(e as Error).message}`;
      this.sendStatus();
      return;
    }
    this.indexing = { bytes: 0, totalBytes: 0 };
    this.sendStatus();
    let lastSent = 0;
    try {
      this.store = await RolloutStore.open(storePath, {
        follow,
        read: this.read,
        onProgress: (p) => {
          this.indexing = { bytes: p.bytes, totalBytes: p.totalBytes };
          if (Date.now() - lastSent > 100) {
            lastSent = Date.now();
            this.sendStatus();
          }
        },
      });
    } catch (e) {
      this.indexing = undefined;
      this.error = `${path}: ${(e as Error).message}`;
      this.sendStatus();
      return;
    }
    this.indexing = undefined;
    this.mirrorReady = true;
    this.sendStatus();
    if (follow)
      this.store.watch((e) => {
        if (e.reset) {
          this.table.reset();
          this.view = null;
        }
        void this.analyse();
      });
    await this.analyse();
  }

  /** Builds the facts of rows not analysed yet, then answers the current query again. */
  private async analyse(): Promise<void> {
    if (this.analysing || !this.store) {
      if (this.analysing) this.again = true;
      return;
    }
    this.analysing = true;
    try {
      do {
        this.again = false;
        let last = Date.now();
        await this.table.extend(this.store, {
          batch: 256,
          cancelled: () => this.closed,
          onBatch: () => {
            if (Date.now() - last > 250) {
              last = Date.now();
              this.sendStatus();
            }
          },
          yieldEvery: yieldNow,
          pool: this.pool,
          tokenizer: this.tokenizerSpec,
          ...(this.threadsFrom !== undefined ? { threadsFrom: this.threadsFrom } : {}),
        });
        if (this.closed) return;
        if (this.hasQuery()) await this.run(this.seq);
      } while (this.again && !this.closed);
    } finally {
      this.analysing = false;
      this.sendStatus();
    }
  }
  private again = false;

  private hasQuery(): boolean {
    return !!(
      this.query.filter.trim() ||
      this.query.search ||
      (this.query.sort && !(this.query.sort.column === 'index' && !this.query.sort.desc))
    );
  }

  async setQuery(seq: number, query: InspectorQuery): Promise<void> {
    this.seq = seq;
    this.query = query;
    await this.run(seq);
  }

  /** Applies the current query unless a newer one arrives meanwhile. */
  private async run(seq: number): Promise<void> {
    const cancelled = () => this.seq !== seq || this.closed;
    if (!this.hasQuery()) {
      this.view = null;
      this.filterError = undefined;
      this.appliedSeq = seq;
      this.sendStatus();
      return;
    }
    this.busy = true;
    this.sendStatus();
    try {
      let among: Set<number> | undefined;
      if (this.query.search && this.store) {
        among = await this.table.search(this.store, this.query.search, cancelled);
        if (!among) return;
      }
      await yieldNow();
      if (cancelled()) return;
      let view: Int32Array | undefined;
      try {
        view = this.table.query(
          this.query,
          cancelled,
          among ? [...among].filter((i) => i < this.table.rows.length).sort((a, b) => a - b) : undefined,
        );
        this.filterError = undefined;
      } catch (e) {
        if (!(e instanceof FilterError)) throw e;
        this.filterError = { message: e.message, start: e.start, end: e.end };
        view = undefined;
      }
      if (cancelled()) return;
      // A bad filter keeps the previous rows on screen (with the error shown).
      if (view) this.view = view;
      this.appliedSeq = seq;
    } finally {
      if (this.seq === seq) this.busy = false;
      this.sendStatus();
    }
  }

  /** Facts of view rows [from, from + count). Rows not analysed yet are read and analysed on the spot. */
  async page(from: number, count: number): Promise<RowFacts[]> {
    if (!this.store) return [];
    const n = this.view ? this.view.length : this.store.count;
    const to = Math.min(n, from + Math.min(count, 1000));
    if (from >= to) return [];
    if (this.view) {
      const out: RowFacts[] = [];
      for (let k = from; k < to; k++) out.push(this.table.rows[this.view[k]!]!);
      return out;
    }
    const analysed = this.table.rows.length;
    const out: RowFacts[] = this.table.rows.slice(from, Math.min(to, analysed));
    if (to > analysed)
      for (const r of await this.store.rows(Math.max(from, analysed), to, this.table.tokenColumns))
        out.push(rowFacts(r, this.read, this.table.checks));
    return out;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.mirrorPoll) clearInterval(this.mirrorPoll);
    await this.pool?.close();
    await this.store?.close();
  }
}

/** Whether a query asks about drift: a `drift` or `drift.…` field in its filter, or the drift column's sort. */
export function usesDrift(q: InspectorQuery): boolean {
  if (q.sort?.column === 'drift') return true;
  try {
    return tokenize(q.filter).some((t) => t.k === 'id' && (t.v === 'drift' || t.v.startsWith('drift.')));
  } catch {
    return /\bdrift\b/.test(q.filter);
  }
}
