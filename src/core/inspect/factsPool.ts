/**
 * The inspector's facts threads: a few worker threads (factsWorker.ts, bundled as dist/inspector-facts-worker.js)
 * that build the row facts of token-store steps beside the engine's own thread. A task is a range of one step's rows;
 * its worker opens the step itself (a committed step is immutable: no index, no state to share), reads the columns
 * the facts need, and posts the facts back 256 rows at a time, so the engine appends them in order as they come
 * (src/core/inspect/table.ts RolloutTable.extend). A worker that fails or dies gives its task back (the engine's
 * thread finishes it: the same code, the same facts); idle workers are let go after a while and started again on
 * the next task (a followed run's next step).
 */
import { availableParallelism } from 'node:os';
import type { Worker } from 'node:worker_threads';
import type { RowFacts } from '../protocol/rollouts';
import type { ReadOptions } from '../run/format';
import type { TokenColumns } from '../store/tokenStore';
import { spawnWorker } from '../workers';

/** What every task of one analysis shares: how rows are read and checked (plain data: it crosses threads). */
export interface FactsJob {
  read: ReadOptions;
  tokens: TokenColumns;
  /** The audit's options without the tokenizer (importance level and cap…). */
  checks: Record<string, unknown>;
  /** The drift check's tokenizer, loaded by each worker as the engine loaded it (tokenizer.ts runTokenizer). */
  tokenizer?: { path: string; named?: string; name: string };
}

/** Engine → worker. */
export type FactsRequest =
  | ({ t: 'task'; id: number; file: string; base: number; from: number; to: number; batch: number } & FactsJob)
  | { t: 'cancel'; id: number };

/** Worker → engine: facts of the step's rows [from, from + rows.length) (their `file` left empty: the task's). */
export type FactsReply =
  | { t: 'rows'; id: number; from: number; rows: RowFacts[] }
  | { t: 'done'; id: number }
  | { t: 'error'; id: number; message: string };

export interface FactsTask {
  /** The step's directory. */
  file: string;
  /** The index of the step's first row in the whole sequence. */
  base: number;
  /** The step's rows [from, to). */
  from: number;
  to: number;
}

/** A task under way: cancel it (its worker stops between two batches), or await it. */
export interface FactsRun {
  done: Promise<void>;
  cancel(): void;
}

interface Running {
  id: number;
  onRows(from: number, rows: RowFacts[]): void;
  resolve(): void;
  reject(e: Error): void;
}

interface Slot {
  worker?: Worker;
  running?: Running;
  /** Failed to start or died: not used again. */
  dead?: boolean;
}

/** Workers beside the engine's thread: one fewer than the cores (the engine analyses too), at most 7. */
export function defaultFactsWorkers(): number {
  return Math.max(0, Math.min(7, availableParallelism() - 1));
}

export class FactsPool {
  private readonly slots: Slot[] = [];
  private next = 1;
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  private closed = false;
  /** Rows whose facts the workers have sent (for the benchmark and the tests: the threads did the work). */
  rowsBuilt = 0;

  /** `workers` threads at most, started on first use and let go after `idleMs` without a task. */
  constructor(
    workers: number,
    private readonly idleMs = 10_000,
  ) {
    for (let i = 0; i < workers; i++) this.slots.push({});
  }

  /** Workers at most. */
  get workers(): number {
    return this.slots.length;
  }

  /** Workers that can take a task now. */
  get idle(): number {
    return this.closed ? 0 : this.slots.filter((s) => !s.dead && !s.running).length;
  }

  /** Workers alive or startable. */
  get size(): number {
    return this.closed ? 0 : this.slots.filter((s) => !s.dead).length;
  }

  /**
   * Runs a task on an idle worker (the caller checks {@link idle} first). `onRows` gets the facts batch by batch, in
   * order; `done` rejects when the worker fails or dies (the rows it sent stand; the rest is the caller's to do).
   */
  run(task: FactsTask, job: FactsJob, onRows: (from: number, rows: RowFacts[]) => void, batch = 256): FactsRun {
    const slot = this.slots.find((s) => !s.dead && !s.running);
    if (!slot || this.closed) return { done: Promise.reject(new Error('no idle facts worker')), cancel: () => {} };
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const id = this.next++;
    let worker: Worker;
    try {
      worker = slot.worker ??= this.start(slot);
    } catch (e) {
      slot.dead = true;
      return { done: Promise.reject(e as Error), cancel: () => {} };
    }
    const done = new Promise<void>((resolve, reject) => {
      slot.running = { id, onRows, resolve, reject };
    });
    try {
      worker.postMessage({ t: 'task', id, ...task, batch, ...job } satisfies FactsRequest);
    } catch (e) {
      // not cloneable (a job holding a function): this worker is fine, the task is the caller's
      this.finish(slot, e as Error);
    }
    return {
      done,
      cancel: () => {
        if (slot.running?.id === id) slot.worker?.postMessage({ t: 'cancel', id } satisfies FactsRequest);
      },
    };
  }

  private start(slot: Slot): Worker {
    const w = spawnWorker(__dirname, 'inspector-facts-worker.js', 'factsWorker.ts');
    w.unref();
    w.on('message', (m: FactsReply) => {
      const r = slot.running;
      if (!r || r.id !== m.id) return; // a cancelled task's last words
      if (m.t === 'rows') {
        this.rowsBuilt += m.rows.length;
        r.onRows(m.from, m.rows);
      } else this.finish(slot, m.t === 'error' ? new Error(m.message) : undefined);
    });
    // an error or an exit of the slot's current worker: it failed (one let go or closed is no longer the slot's)
    const gone = (e: Error) => {
      if (slot.worker !== w) return;
      slot.worker = undefined;
      slot.dead = true;
      this.finish(slot, e);
    };
    w.on('error', gone);
    w.on('exit', (code) => gone(new Error(`the facts worker exited (code ${code})`)));
    return w;
  }

  private finish(slot: Slot, error?: Error): void {
    const r = slot.running;
    slot.running = undefined;
    if (r) {
      if (error) r.reject(error);
      else r.resolve();
    }
    if (!this.closed && this.slots.every((s) => !s.running)) {
      if (this.idleTimer) clearTimeout(this.idleTimer);
      this.idleTimer = setTimeout(() => this.release(), this.idleMs);
      this.idleTimer.unref?.();
    }
  }

  /** Lets the idle workers go (they start again on the next task). */
  private release(): void {
    this.idleTimer = undefined;
    for (const s of this.slots) {
      if (s.running || !s.worker) continue;
      const w = s.worker;
      s.worker = undefined;
      void w.terminate();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    const workers: Worker[] = [];
    for (const s of this.slots) {
      const r = s.running;
      s.running = undefined;
      r?.reject(new Error('the facts workers were closed'));
      if (s.worker) workers.push(s.worker);
      s.worker = undefined;
    }
    await Promise.all(workers.map((w) => w.terminate()));
  }
}
