/**
 * The inspector's engine: owns the rollout store and the table for one source, answers page requests, runs
 * queries (filter, text search, sort) — the latest one wins, older ones are cancelled between batches — and
 * follows a live run. It runs in a worker thread (worker.ts), so the extension host's thread never parses a row;
 * tests drive it directly.
 *
 * Opening a big file: the first rows are read from the start of the file and shown before the index is built;
 * then the store's index (one streaming pass); then the facts of every row, in batches, with page requests and
 * queries served between batches. A query made before the facts are complete is answered over the rows analysed so
 * far and answered again when they are.
 */
import type { ImportanceOptions } from '../audit/importance';
import type { ReadOptions } from '../run/format';
import { rawPreview, readPart, rolloutFiles, runConfigDialect, RolloutStore, type RolloutRow } from '../store/rollouts';
import type { InspectorQuery, InspectorStatus, RowFacts } from '../protocol';
import { FilterError } from './filter';
import { RolloutTable, rowFacts } from './table';
import { loadTokenizerCodec, runTokenizer } from './tokenizer';

export type EngineRequest =
  | { t: 'open'; path: string; follow: boolean; read?: ReadOptions; tokenizer?: string; importance?: ImportanceOptions }
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

  constructor(private readonly post: (m: EngineMessage) => void) {}

  async handle(m: EngineRequest): Promise<void> {
    switch (m.t) {
      case 'open':
        return this.open(m.path, m.follow, m.read, m.tokenizer, m.importance);
      case 'query':
        return this.setQuery(m.seq, m.query);
      case 'page':
        return this.post({ t: 'page', req: m.req, seq: this.appliedSeq, from: m.from, rows: await this.page(m.from, m.count) });
      case 'row': {
        const row = this.store && m.index < this.store.count ? await this.store.row(m.index) : undefined;
        const raw = row && !row.record ? (await this.store!.rawRows(m.index, m.index + 1))[0]?.text : undefined;
        return this.post({ t: 'row', req: m.req, row: row ?? null, raw: raw === undefined ? undefined : rawPreview(raw) });
      }
      case 'close':
        return this.close();
    }
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
    };
  }

  private sendStatus(): void {
    if (!this.closed) this.post({ t: 'status', status: this.status() });
  }

  /**
   * Opens a source. `tokenizer` (a model directory or tokenizer.json, the `searchAgent.tokenizer` setting) is the
   * drift check's tokenizer; without one, the run's model directory's, when it has one. `importance`: the level and
   * cap of the importance-sampling preview (`is.clipped`, `is.dropped`).
   */
  async open(path: string, follow: boolean, read: ReadOptions = {}, tokenizer?: string, importance: ImportanceOptions = {}): Promise<void> {
    this.path = path;
    this.follow = follow;
    // The first rows of the first file, straight from its start, before the index.
    try {
      const runDialect = read.runDialect ?? (await runConfigDialect(path));
      this.read = { ...read, ...(runDialect ? { runDialect } : {}) };
      const t = tokenizer ? await loadTokenizerCodec(tokenizer).then((codec) => ({ codec, note: undefined }), (e: Error) => ({ codec: undefined, note: `drift not checked: ${e.message}` })) : await runTokenizer(path);
      this.table.checks = { ...importance, ...(t.codec ? { tokenizer: t.codec } : {}) };
      this.driftNote = t.codec ? `drift checked with ${t.codec.name}` : t.note;
      const first = (await rolloutFiles(path))[0];
      if (first) {
        const rows: RowFacts[] = [];
        for await (const row of readPart(first, this.read, undefined, this.table.tokenColumns)) {
          rows.push(rowFacts({ index: rows.length, ...row }, this.read, this.table.checks));
          if (rows.length >= PREVIEW_ROWS) break;
        }
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
      this.store = await RolloutStore.open(path, {
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
    return !!(this.query.filter.trim() || this.query.search || (this.query.sort && !(this.query.sort.column === 'index' && !this.query.sort.desc)));
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
        view = this.table.query(this.query, cancelled, among ? [...among].filter((i) => i < this.table.rows.length).sort((a, b) => a - b) : undefined);
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
    if (to > analysed) for (const r of await this.store.rows(Math.max(from, analysed), to, this.table.tokenColumns)) out.push(rowFacts(r, this.read, this.table.checks));
    return out;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.store?.close();
  }
}
