/**
 * The rollout inspector's table: one small object of facts per row (the columns, what filters test), built in a
 * streaming pass over the rollout store, plus per-group reward statistics; queries (filter + sort) return row
 * indices, pages return the facts of a slice of a query. Full records are read from the store only for the rows
 * on screen, the replay panel, and the text search (which scans the raw lines, cancellably).
 *
 * Memory: the facts of a row are its short fields (ids, reward, answer, golden, first 200 characters of the
 * question) — a few hundred bytes however long its response and token arrays are.
 */

import { type AuditOptions, auditRollout } from '../audit';
import { columnsMaskLeaks } from '../audit/columns';
import { auditMask } from '../audit/masks';
import { trajectoryFacts } from '../audit/summary';
import type { InspectorColumn, RowFacts } from '../protocol/rollouts';
import { tokenColumnsOf } from '../run/columns';
import { formatIssue, groupKeyOf, type ReadOptions, type Rollout } from '../run/format';
import type { RolloutRow, RolloutStore } from '../store/rollouts';
import type { TokenColumns } from '../store/tokenStore';
import type { FactsJob, FactsPool, FactsRun } from './factsPool';
import { compileFilter, type FilterRow } from './filter';

export interface GroupStats {
  size: number;
  mean: number;
  std: number;
  zeroVariance: boolean;
}

export type { RowFacts };
export type Column = InspectorColumn;

const clip = (s: string | undefined, n: number) =>
  s === undefined ? undefined : s.length > n ? `${s.slice(0, n)}…` : s;

/** The facts of one row (malformed rows keep what can be read, plus the error), its response read in its dialect. */
export function rowFacts(row: RolloutRow, read: ReadOptions = {}, checks: Omit<AuditOptions, 'read'> = {}): RowFacts {
  const f: RowFacts = { index: row.index, file: row.file, line: row.line, tokens: false };
  if (!row.record) {
    f.error = row.errors[0] ? formatIssue(row.errors[0]) : 'malformed';
    f.errorCount = row.errors.length;
    const v = row.value as Partial<Record<string, unknown>> | undefined;
    if (v && typeof v === 'object') {
      if (typeof v.id === 'string') f.id = v.id;
      if (typeof v.step === 'number') f.step = v.step;
      if (typeof v.group === 'number' || typeof v.group === 'string') f.group = String(v.group);
      if (typeof v.split === 'string') f.split = v.split;
      if (typeof v.sample === 'number') f.sample = v.sample;
      if (typeof v.reward === 'number') f.reward = v.reward;
    }
    return f;
  }
  const r: Rollout = row.record;
  const facts = trajectoryFacts(r, read);
  Object.assign(f, {
    id: r.id,
    step: r.step,
    group: r.group === undefined ? undefined : String(r.group),
    sample: r.sample,
    reward: r.reward,
    em: facts.em ?? undefined,
    finish: r.finish,
    data_source: r.data_source,
    split: r.split,
    answer: clip(facts.answer ?? undefined, 200) ?? null,
    golden: r.golden?.map((g) => clip(g, 200)!),
    question: clip(r.question, 200),
    // what is read from the text: not when the text is the record's token ids (an ids-only dump without a tokenizer)
    ...(facts.text
      ? {
          dialect: facts.dialect,
          invalid: facts.invalidActions,
          searches: facts.searches,
          turns: facts.turns,
          valid: facts.formatValid,
        }
      : {}),
  });
  const audit = auditRollout(r, { ...checks, read }, facts.parsed);
  if (audit.alarms.length) f.alarms = audit.alarms;
  if (r.tokens) {
    f.tokens = true;
    const cols = tokenColumnsOf(r.tokens);
    const a = cols ? columnsMaskLeaks(cols) : auditMask(r.tokens.role, r.tokens.loss_mask);
    f.leaks = audit.leaks.length;
    f.trained = a.trained;
    if (checks.tokenizer) f.drift = audit.drift?.token ?? null;
    if (audit.logprob) {
      f.logprob = audit.logprob.max_abs_diff;
      f.ratioFlags = audit.logprob.flagged.length;
      // what a TIS / MIS correction with the configured level and cap would clip / drop (src/core/audit/importance.ts)
      if (audit.is) {
        f.isClipped = audit.is.clipped.length;
        f.isDropped = audit.is.dropped.length;
      }
    }
    f.length = a.generated;
    f.lengthUnit = 'tokens';
  } else {
    f.length = r.response.length;
    f.lengthUnit = 'chars';
  }
  return f;
}

export interface ExtendOptions {
  batch?: number;
  cancelled?: () => boolean;
  onBatch?: (done: number, total: number) => void;
  yieldEvery?: () => Promise<void>;
  /** Worker threads that analyse token-store steps beside this thread. */
  pool?: FactsPool;
  /** How the workers load the drift check's tokenizer (without it, a table that checks drift analyses here alone). */
  tokenizer?: FactsJob['tokenizer'];
  /**
   * The fewest store rows left to analyse for which the workers are used (default {@link THREADS_FROM}): below it
   * this thread does them alone — starting a worker costs about what a few hundred rows do, and one step (a
   * followed run's next, or a step opened alone) is answered in well under a second here.
   */
  threadsFrom?: number;
}

/** Store rows to analyse from which the facts threads are used: more than a Search-R1 step (2,560 rollouts). */
export const THREADS_FROM = 4096;

/** A range of one part's rows, analysed by one thread; its facts wait in `buf` until the rows before are appended. */
interface Task {
  file: string;
  base: number;
  /** The part's rows [next, hi) are still to analyse ([lo, next) are in `buf` or appended). */
  next: number;
  hi: number;
  /** A store step: a worker can take it. */
  remote: boolean;
  state: 'pending' | 'local' | 'remote' | 'done';
  buf: RowFacts[];
  failures: number;
}

/**
 * The tasks for rows of `parts` with `analysers` threads: a JSONL file's rows are one task (this thread's, in order);
 * a store step's are one task, or equal ranges of whole 256-row groups when there are fewer steps than threads × 3
 * to go round (one step opened alone still uses every thread). A range cut inside a tokens row group decodes that
 * group twice: ranges are kept few.
 */
export function planTasks(
  parts: { path: string; base: number; lo: number; hi: number; storeStep: boolean }[],
  analysers: number,
): Task[] {
  const storeRows = parts.reduce((n, p) => n + (p.storeStep ? p.hi - p.lo : 0), 0);
  const target = Math.max(256, Math.ceil(storeRows / (analysers * 3) / 256) * 256);
  const tasks: Task[] = [];
  for (const p of parts) {
    const n = p.hi - p.lo;
    const pieces = p.storeStep ? Math.max(1, Math.round(n / target)) : 1;
    const size = Math.ceil(n / pieces / 256) * 256;
    for (let lo = p.lo; lo < p.hi; lo += size)
      tasks.push({
        file: p.path,
        base: p.base,
        next: lo,
        hi: Math.min(p.hi, lo + size),
        remote: p.storeStep,
        state: 'pending',
        buf: [],
        failures: 0,
      });
  }
  return tasks;
}

/** The audit options a worker can be sent: without the tokenizer (workers load their own) and anything not data. */
function plainChecks(checks: Omit<AuditOptions, 'read'>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(checks)) if (k !== 'tokenizer' && typeof v !== 'function') out[k] = v;
  return out;
}

export interface TableQuery {
  filter?: string;
  /** Text search over the raw lines (case-insensitive); applied by {@link RolloutTable.search}. */
  search?: string;
  sort?: { column: Column; desc?: boolean };
}

export class RolloutTable {
  readonly rows: RowFacts[] = [];
  /** Rows that are malformed (kept as rows are added, not counted on every status). */
  malformed = 0;
  /** The audit's checks for each row's facts (the drift check's tokenizer, the ratio band). */
  checks: Omit<AuditOptions, 'read'> = {};
  private groups = new Map<string, { n: number; sum: number; sumSq: number; min: number; max: number }>();
  /** Counts resets: an analysis under way when the table is reset stops appending. */
  private generation = 0;

  /** The token arrays the facts read from a token store: the audit's (and the ids when drift is checked). */
  get tokenColumns(): TokenColumns {
    return this.checks.tokenizer ? 'audit+ids' : 'audit';
  }

  /**
   * Adds the facts of store rows [rows.length, store.count), in batches; stops early when `cancelled()` (or when the
   * table is reset meanwhile). With `pool`, token-store steps are analysed on its worker threads too, each taking a
   * range of a step while this thread takes the next (JSONL files are read here, in order); facts are appended in
   * row order as they come, so `rows` is always the analysed prefix, whichever thread built it.
   */
  async extend(store: RolloutStore, options: ExtendOptions = {}): Promise<number> {
    const before = this.rows.length;
    const generation = this.generation;
    const usable = (p: FactsPool | undefined): p is FactsPool =>
      !!p &&
      p.size > 0 &&
      (!this.checks.tokenizer || !!options.tokenizer) &&
      store.parts(this.rows.length, store.count).reduce((n, x) => n + (x.storeStep ? x.hi - x.lo : 0), 0) >=
        (options.threadsFrom ?? THREADS_FROM);
    while (this.rows.length < store.count && !options.cancelled?.() && this.generation === generation) {
      if (usable(options.pool)) await this.extendParallel(store, options.pool, options);
      else await this.extendHere(store, options);
    }
    return this.generation === generation ? this.rows.length - before : this.rows.length;
  }

  /** Rows [rows.length, store.count) on this thread. */
  private async extendHere(store: RolloutStore, options: ExtendOptions): Promise<void> {
    const batch = options.batch ?? 500;
    const generation = this.generation;
    while (this.rows.length < store.count) {
      if (options.cancelled?.()) break;
      const from = this.rows.length;
      const got = await store.rows(from, Math.min(store.count, from + batch), this.tokenColumns);
      if (this.generation !== generation || this.rows.length !== from) return; // reset meanwhile: start over
      for (const row of got) this.add(rowFacts(row, store.read, this.checks));
      options.onBatch?.(this.rows.length, store.count);
      await options.yieldEvery?.();
    }
  }

  /**
   * Rows [rows.length, store.count at the start) by this thread and the pool's workers: the rows are cut into tasks
   * (a store step's range, a JSONL file's rows); an idle worker takes the first pending store task, this thread the
   * first pending task of any kind. Each task's facts wait in its buffer until every task before it is appended.
   */
  private async extendParallel(store: RolloutStore, pool: FactsPool, options: ExtendOptions): Promise<void> {
    const batch = options.batch ?? 500;
    const generation = this.generation;
    const start = this.rows.length;
    const tasks = planTasks(store.parts(start, store.count), pool.size + 1);
    const job: FactsJob = {
      read: store.read,
      tokens: this.tokenColumns,
      checks: plainChecks(this.checks),
      ...(this.checks.tokenizer && options.tokenizer ? { tokenizer: options.tokenizer } : {}),
    };
    const runs = new Set<FactsRun>();
    let head = 0;
    let over = false;
    let wake: (() => void) | undefined;
    const signal = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const stop = () => this.generation !== generation || !!options.cancelled?.();
    const flush = () => {
      if (over || this.generation !== generation) return;
      const at = this.rows.length;
      while (head < tasks.length) {
        const t = tasks[head]!;
        for (const f of t.buf) this.add(f);
        t.buf = [];
        if (t.state !== 'done') break;
        head++;
      }
      if (this.rows.length !== at) options.onBatch?.(this.rows.length, store.count);
    };
    const pump = () => {
      while (!over && pool.idle > 0) {
        const t = tasks.find((x) => x.state === 'pending' && x.remote);
        if (!t) return;
        t.state = 'remote';
        const run = pool.run({ file: t.file, base: t.base, from: t.next, to: t.hi }, job, (from, rows) => {
          if (over || from !== t.next) return;
          for (const f of rows) f.file = t.file;
          t.buf.push(...rows);
          t.next += rows.length;
          flush();
          signal();
        });
        runs.add(run);
        run.done.then(
          () => {
            runs.delete(run);
            if (over) return;
            // (a worker that ended short of its range leaves the rest to whoever is free)
            t.state = t.next < t.hi ? 'pending' : 'done';
            flush();
            pump();
            signal();
          },
          () => {
            runs.delete(run);
            if (over) return;
            t.state = 'pending'; // the worker failed: the rest of its task is done here (or by another worker)
            t.remote = pool.size > 0 && t.failures++ < 1;
            pump();
            signal();
          },
        );
      }
    };
    try {
      pump();
      while (head < tasks.length) {
        if (stop()) return;
        const t = tasks.find((x) => x.state === 'pending');
        if (!t) {
          // nothing left to take: wait for the workers (their rows, their end), polling for a cancellation
          await new Promise<void>((r) => {
            wake = r;
            setTimeout(signal, 100).unref?.();
          });
          continue;
        }
        t.state = 'local';
        while (t.next < t.hi) {
          const lo = t.next;
          const hi = Math.min(t.hi, lo + batch);
          const got = await store.rows(t.base + lo, t.base + hi, this.tokenColumns);
          if (stop()) return;
          for (const row of got) t.buf.push(rowFacts(row, store.read, this.checks));
          t.next = hi;
          flush();
          await options.yieldEvery?.();
          if (stop()) return;
        }
        t.state = 'done';
        flush();
        pump();
      }
    } finally {
      over = true;
      for (const r of runs) r.cancel();
    }
  }

  /** Forget everything (the file was truncated or replaced). */
  reset(): void {
    this.generation++;
    this.rows.length = 0;
    this.malformed = 0;
    this.groups.clear();
  }

  add(f: RowFacts): void {
    this.rows.push(f);
    if (f.error !== undefined) this.malformed++;
    const key = groupKeyOf(f);
    if (key === undefined || f.reward === undefined) return;
    const g = this.groups.get(key) ?? { n: 0, sum: 0, sumSq: 0, min: Infinity, max: -Infinity };
    g.n++;
    g.sum += f.reward;
    g.sumSq += f.reward * f.reward;
    g.min = Math.min(g.min, f.reward);
    g.max = Math.max(g.max, f.reward);
    this.groups.set(key, g);
  }

  group(f: RowFacts): GroupStats | undefined {
    const key = groupKeyOf(f);
    const g = key === undefined ? undefined : this.groups.get(key);
    if (!g) return undefined;
    const mean = g.sum / g.n;
    return {
      size: g.n,
      mean,
      std: Math.sqrt(Math.max(0, g.sumSq / g.n - mean * mean)),
      zeroVariance: g.n >= 2 && g.max - g.min < 1e-9,
    };
  }

  /** Rows of the same group (same split, step and group id), by sample. */
  groupRows(f: RowFacts): RowFacts[] {
    const key = groupKeyOf(f);
    if (key === undefined) return [];
    return this.rows.filter((r) => groupKeyOf(r) === key).sort((a, b) => (a.sample ?? 0) - (b.sample ?? 0));
  }

  /** Reads a filter field from a row's facts in place (no object per row). */
  private resolver(name: string): (f: RowFacts) => FilterRow[string] {
    switch (name) {
      case 'error':
        return (f) => f.error !== undefined;
      case 'mask.leaks':
      case 'leaks':
        return (f) => f.leaks;
      case 'drift':
        return (f) => f.drift !== undefined && f.drift !== null;
      case 'drift.token':
        return (f) => f.drift;
      case 'logprob.max_abs_diff':
        return (f) => f.logprob;
      case 'logprob.flagged':
        return (f) => f.ratioFlags;
      case 'alarm':
        return (f) => f.alarms ?? [];
      case 'is.clipped':
        return (f) => f.isClipped;
      case 'is.dropped':
        return (f) => f.isDropped;
      case 'mask.trained':
        return (f) => f.trained;
      case 'group.size':
        return (f) => this.group(f)?.size;
      case 'group.zero_variance':
        return (f) => this.group(f)?.zeroVariance ?? false;
      case 'group.reward_mean':
        return (f) => this.group(f)?.mean;
      case 'group.reward_std':
        return (f) => this.group(f)?.std;
      default:
        return (f) => (f as unknown as FilterRow)[name];
    }
  }

  /**
   * Filters and sorts. Throws FilterError for a bad filter. `cancelled` is polled every few thousand rows (a
   * newer query supersedes this one); it then returns undefined.
   */
  query(q: TableQuery, cancelled?: () => boolean, among?: Iterable<number>): Int32Array | undefined {
    const test = compileFilter<RowFacts>(q.filter ?? '', (name) => this.resolver(name));
    const out: number[] = [];
    let k = 0;
    const rows = this.rows;
    const consider = (i: number) => {
      if (!q.filter || test(rows[i]!)) out.push(i);
    };
    if (among) {
      for (const i of among) {
        if ((++k & 4095) === 0 && cancelled?.()) return undefined;
        consider(i);
      }
    } else {
      for (let i = 0; i < rows.length; i++) {
        if ((++k & 4095) === 0 && cancelled?.()) return undefined;
        consider(i);
      }
    }
    if (q.sort && q.sort.column !== 'index') sortRows(out, rows, q.sort.column, q.sort.desc ?? false);
    else if (q.sort?.desc) out.reverse();
    return Int32Array.from(out);
  }

  /**
   * Rows whose raw line contains `text` (case-insensitive), in index order, scanning the store in batches;
   * undefined when cancelled. The raw line is JSON, so the needle is matched as JSON would escape it.
   */
  async search(
    store: RolloutStore,
    text: string,
    cancelled?: () => boolean,
    batch = 2000,
  ): Promise<Set<number> | undefined> {
    const escaped = JSON.stringify(text).slice(1, -1);
    const needle = new RegExp(escapeRegExp(escaped), 'i');
    const hits = new Set<number>();
    for (let from = 0; from < store.count; from += batch) {
      if (cancelled?.()) return undefined;
      for (const r of await store.rawRows(from, Math.min(store.count, from + batch)))
        if (needle.test(r.text)) hits.add(r.index);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return hits;
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function sortValue(f: RowFacts, column: Column): number | string | undefined {
  switch (column) {
    case 'golden':
      return f.golden?.join(' | ');
    case 'answer':
      return f.answer ?? undefined;
    case 'alarms':
      return f.alarms?.join(', ');
    case 'drift':
      return f.drift ?? undefined;
    case 'group': {
      const n = Number(f.group);
      return f.group === undefined ? undefined : Number.isFinite(n) ? n : f.group;
    }
    default:
      return f[column] as number | string | undefined;
  }
}

/** Stable sort by one column; missing values last in both directions. */
export function sortRows(indices: number[], rows: readonly RowFacts[], column: Column, desc: boolean): void {
  const dir = desc ? -1 : 1;
  const keys = new Map<number, number | string | undefined>();
  for (const i of indices) keys.set(i, sortValue(rows[i]!, column));
  indices.sort((a, b) => {
    const x = keys.get(a);
    const y = keys.get(b);
    if (x === undefined || y === undefined) return x === y ? a - b : x === undefined ? 1 : -1;
    const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
    return c !== 0 ? c * dir : a - b;
  });
}
