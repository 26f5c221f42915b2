/**
 * BM25 search on worker threads sharing one index in memory. The index is loaded once into
 * SharedArrayBuffers (Bm25Index.load with `shared`); each worker (bm25Worker.ts) opens it over the same
 * buffers, so N workers cost one index plus N small scratch states, not N copies. A batch of queries is cut
 * into chunks handed to whichever worker is free, and put back in order: the results are those of one thread, query
 * for query. Requests take turns: a free worker takes the next chunk of the next request in turn (round-robin), not
 * the oldest chunk, so a small request waits about one chunk a worker behind a big one, not the whole big one.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { Worker } from 'node:worker_threads';
import { spawnWorker } from '../workers';
import { Bm25Index } from './bm25';

export interface PoolHit {
  id: string;
  contents: string;
  score: number;
}

/** Main thread → worker. */
export interface PoolRequest {
  id: number;
  queries: string[];
  k: number;
}

/** Worker → main thread. */
export type PoolResponse = { id: number; results: PoolHit[][] } | { id: number; error: string };

interface Task extends PoolRequest {
  resolve(results: PoolHit[][]): void;
  reject(e: Error): void;
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  /** The worker's index lies in SharedArrayBuffers (its ready message says). */
  shared?: boolean;
  task?: Task;
}

/** CPU seconds the calling thread has used (Linux: /proc/thread-self/stat, in USER_HZ = 100 ticks); null elsewhere. */
export function threadCpuSeconds(): number | null {
  try {
    const stat = readFileSync('/proc/thread-self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // from field 3 (the state) on
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime: fields 14 and 15
  } catch {
    return null;
  }
}

/** The worker program: the bundle beside this file, or (running from source) the TypeScript through the test register. */
function spawn(workerData: unknown): Worker {
  return spawnWorker(__dirname, 'bm25-worker.js', 'bm25Worker.ts', { workerData });
}

/** Most queries in one chunk a worker searches (at topk 100 over 10⁵–10⁶ passages, some tens of ms a query). */
export const MAX_CHUNK = 32;

export class Bm25Pool {
  private readonly slots: Slot[] = [];
  /** Each waiting request's chunks, in order; requests take turns (`turn`: the next to give a worker a chunk). */
  private readonly requests: Task[][] = [];
  private turn = 0;
  private nextId = 0;
  private readonly cpuReplies = new Map<number, (seconds: number | null) => void>();
  private restarts = 0;
  private closed = false;

  private constructor(
    readonly index: Bm25Index,
    readonly workers: number,
  ) {
    for (let i = 0; i < workers; i++) this.slots.push(this.start());
  }

  /** Loads the index once, shared, and starts `workers` threads over it (default: the machine's cores). */
  static async open(dir: string, options: { workers?: number } = {}): Promise<Bm25Pool> {
    const workers = options.workers ?? availableParallelism();
    if (!Number.isInteger(workers) || workers < 1)
      throw new Error(`workers must be a positive integer, got ${workers}`);
    const pool = new Bm25Pool(await Bm25Index.load(dir, { shared: true }), workers);
    try {
      await Promise.all(pool.slots.map((s) => s.ready));
    } catch (e) {
      await pool.close();
      throw new Error(`${dir}: the BM25 worker threads did not start: ${(e as Error).message}`);
    }
    return pool;
  }

  private start(): Slot {
    const worker = spawn({ index: this.index.shared });
    worker.unref();
    const slot: Slot = { worker, ready: Promise.resolve() };
    slot.ready = new Promise<void>((resolve, reject) => {
      worker.once('message', (m: { shared: boolean }) => {
        slot.shared = m.shared;
        resolve();
      });
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`exited with code ${code} while starting`)));
    });
    slot.ready.catch(() => undefined); // open() reports it; a replacement's failure is handled below
    worker.on('message', (m: PoolResponse | { ready: true } | { cpu: number; seconds: number | null }) => {
      if ('id' in m) this.onMessage(slot, m);
      else if ('cpu' in m) this.cpuReplies.get(m.cpu)?.(m.seconds);
    });
    worker.on('error', (e) => this.onFailure(slot, e));
    worker.on('exit', (code) => this.onFailure(slot, new Error(`exited with code ${code}`)));
    return slot;
  }

  private onMessage(slot: Slot, m: PoolResponse): void {
    const task = slot.task;
    if (!task || task.id !== m.id) return;
    slot.task = undefined;
    if ('error' in m) task.reject(new Error(`BM25 worker: ${m.error}`));
    else task.resolve(m.results);
    this.pump();
  }

  /** A worker that died fails its task and is replaced (the others keep serving); ten replacements at most. */
  private onFailure(slot: Slot, e: Error): void {
    const i = this.slots.indexOf(slot);
    if (i < 0) return; // already handled ('error' is followed by 'exit')
    slot.task?.reject(new Error(`a BM25 worker failed: ${e.message}`));
    slot.task = undefined;
    void slot.worker.terminate();
    if (!this.closed && this.restarts++ < 10) {
      this.slots[i] = this.start();
      this.pump();
      return;
    }
    this.slots.splice(i, 1);
    if (this.slots.length === 0)
      for (const t of this.requests.splice(0).flat())
        t.reject(new Error(`no BM25 worker left (last failure: ${e.message})`));
  }

  /** The next request's next chunk (round-robin over the waiting requests). */
  private next(): Task | undefined {
    if (this.requests.length === 0) return undefined;
    if (this.turn >= this.requests.length) this.turn = 0;
    const chunks = this.requests[this.turn]!;
    const task = chunks.shift()!;
    if (chunks.length === 0) this.requests.splice(this.turn, 1);
    else this.turn++;
    return task;
  }

  private pump(): void {
    for (const slot of this.slots) {
      if (this.requests.length === 0) return;
      if (slot.task) continue;
      const task = this.next()!;
      slot.task = task;
      slot.worker.postMessage({ id: task.id, queries: task.queries, k: task.k } satisfies PoolRequest);
    }
  }

  /** Top k for each query, in order; chunks of the batch run on the free workers. */
  async search(queries: string[], k: number): Promise<PoolHit[][]> {
    if (this.closed) throw new Error('the BM25 pool is closed');
    if (this.slots.length === 0) throw new Error('no BM25 worker left');
    if (queries.length === 0) return [];
    // Several chunks a worker, so that one slow chunk does not hold the batch (queries differ a lot in cost), and at
    // most MAX_CHUNK queries, so that another request waits at most about one such chunk a worker.
    const size = Math.max(1, Math.min(MAX_CHUNK, Math.ceil(queries.length / (this.workers * 4))));
    const parts: Promise<PoolHit[][]>[] = [];
    const chunks: Task[] = [];
    for (let s = 0; s < queries.length; s += size) {
      parts.push(
        new Promise<PoolHit[][]>((resolve, reject) =>
          chunks.push({ id: this.nextId++, queries: queries.slice(s, s + size), k, resolve, reject }),
        ),
      );
    }
    this.requests.push(chunks);
    this.pump();
    return (await Promise.all(parts)).flat();
  }

  /**
   * CPU seconds used so far by each worker thread and by this (the main) thread; null where the platform does
   * not say (not Linux). A worker answers between two chunks: ask between batches for exact figures.
   */
  async cpuSeconds(): Promise<{ main: number | null; workers: (number | null)[] }> {
    const workers = await Promise.all(
      this.slots.map(
        (slot) =>
          new Promise<number | null>((resolve) => {
            const token = this.nextId++;
            this.cpuReplies.set(token, (seconds) => {
              this.cpuReplies.delete(token);
              resolve(seconds);
            });
            slot.worker.postMessage({ cpu: token });
          }),
      ),
    );
    return { main: threadCpuSeconds(), workers };
  }

  /** Whether every worker reads the index from the SharedArrayBuffers loaded once here. */
  get sharesIndex(): boolean {
    return this.slots.length > 0 && this.slots.every((s) => s.shared === true);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.requests.splice(0).flat()) t.reject(new Error('the BM25 pool was closed'));
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
    this.index.close();
  }
}
