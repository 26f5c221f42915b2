/**
 * Running reward modules safely. Each compiled module runs in QuickJS compiled to WebAssembly (rewardWorker.ts),
 * on worker threads for parallelism and as a hard stop: the boundary is the WebAssembly engine — a JavaScript engine
 * with no host object in it (no `process`, `require`, file system, network, timers, workers, WebAssembly), whose whole
 * memory is one capped WebAssembly.Memory — not a `vm` context (Node's own documentation says `vm` is not a security
 * boundary). What crosses: each rollout goes in as strings (prompt, response, the rest as JSON parsed inside); the trajectory, the example and
 * `console` are made inside (harness.ts); the result comes out as a JSON string of plain data, bounded before it
 * leaves the engine (rewardWorker.ts), that `decodeOutcome` (outcome.ts) checks, bounds and escapes field by field.
 *
 * Limits, on every path (the `reward` CLI and the Reward Lab through it, the env server's /reward):
 *  - per item (`itemTimeoutMs`, 2 s): QuickJS's interrupt handler stops the module, awaits included; a promise that
 *    can never settle (nothing in the sandbox can settle one later) fails at once; a watchdog terminates a thread
 *    that stops answering;
 *  - per batch (`batchTimeoutMs`, 2 min: one `score` call — a /reward request, a slice of the CLI's stream): every
 *    item still waiting then fails;
 *  - a runaway streak (`timeoutStreak`, 8): after that many items in a row time out or run out of memory, the rest of
 *    the batch is not run (kind `skipped`), and the later batches of the same stream (`continueStreak`: one `reward`
 *    run) stop at their first such item until one scores — a module that loops on every rollout is reported in
 *    seconds, not hours; each /reward request starts afresh;
 *  - memory (`memoryMb`, 256 MB per thread): the engine's whole address space; an item past it fails with `memory`;
 *  - console output: bounded per item and per batch (harness.ts LOG_LIMITS).
 * A failing item gets an error naming the user's file and line — source-mapped to their TypeScript — and the rollout;
 * the other items still score. Threads are reused across batches; a batch is spread over them in chunks.
 */
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import type { ResponseSpan } from '../tags/spans';
import { spawnWorker } from '../workers';
import { BUNDLE_NAME, type CompiledReward, REWARD_GLOBAL } from './compile';
import { LOG_LIMITS } from './harness';
import { boundedText, decodeOutcome, type OutcomeBody } from './outcome';
import type { RewardError, RewardErrorKind } from './report';
import type { RewardWorkerData, ScoreRequest, WorkerOutcome } from './rewardWorker';

export interface RewardItem {
  /** The rollout's id (named in errors). */
  id: string;
  prompt: string;
  response: string;
  golden: string[];
  question?: string;
  data_source?: string;
  meta?: Record<string, unknown>;
  /** The response's dialect (`searchr1`, `toolcall`, `llama-json`); absent: detected. */
  dialect?: string;
  /** The search tool's name (tool-call dialects); absent: `search`. */
  searchTool?: string;
  /** The run's `rollout.strict_actions`: the answer is read as the environment read it (`strictAction`). */
  strictActions?: boolean;
  /** Who wrote each part of the response (tags/spans.ts, UTF-16 offsets): the answer is read from the policy's text only. */
  spans?: ResponseSpan[];
  /** Where the rollout came from, for messages (e.g. `rollouts.jsonl:17`). */
  where?: string;
}

export { locate, printable } from './outcome';
export type { RewardError, RewardErrorKind };
export const REWARD_ERROR_KINDS: readonly RewardErrorKind[] = [
  'throw',
  'nan',
  'type',
  'timeout',
  'memory',
  'crash',
  'batch-timeout',
  'skipped',
  'cancelled',
  'input',
];

export type RewardOutcome =
  | { id: string; reward: number; parts: Record<string, number> }
  | { id: string; error: RewardError };

/** Where a `score` call stands: items done, and the failures so far by kind. */
export interface ScoreProgress {
  done: number;
  total: number;
  errors: Partial<Record<RewardErrorKind, number>>;
}

export interface SandboxOptions {
  workers?: number;
  itemTimeoutMs?: number;
  batchTimeoutMs?: number;
  /** The memory one sandbox thread's engine may use (MB); the whole sandbox uses at most `workers` times this. */
  memoryMb?: number;
  /** @deprecated the old name of `memoryMb`. */
  heapMb?: number;
  /** After this many items in a row time out or run out of memory, the rest of the batch is skipped (0: never). */
  timeoutStreak?: number;
  /** Items per message to a worker. */
  chunk?: number;
  /** The module's console output (bounded: harness.ts LOG_LIMITS). */
  onLog?: (line: string) => void;
}

/**
 * The largest limits a sandbox takes (the `reward` CLI and `serve` refuse larger ones): a time limit past Node's
 * largest timer (2^31 - 1 ms, ~24.8 days) would fire at once, and each thread reserves its memory.
 */
export const SANDBOX_LIMITS = {
  /** 10 minutes per rollout. */
  itemTimeoutMs: 600_000,
  /** 24 hours per batch. */
  batchTimeoutMs: 86_400_000,
  /** MB per thread: 32 to 2,048 (the most the QuickJS WebAssembly build declares: 32,768 pages). */
  memoryMb: [32, 2048] as const,
  workers: 256,
};

/** Node's largest timer delay; a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const timerMs = (ms: number) => Math.max(1, Math.min(MAX_TIMER_MS, ms));

/** QuickJS's stack limit inside the sandbox; each thread's native stack is `STACK_MB`, far more than it needs. */
const QJS_STACK_BYTES = 1024 * 1024;
const STACK_MB = 8;

let wasmModule: object | undefined;
/** The QuickJS engine (WebAssembly), compiled once per process and shared by every sandbox thread. */
function quickjsWasm(): object {
  if (wasmModule) return wasmModule;
  // Bundled: dist/quickjs.wasm (esbuild.mjs copies it there); from source: the npm package's file.
  let file = join(__dirname, 'quickjs.wasm');
  // (A name in a variable: esbuild leaves the lookup to run time, when the bundle has its own file.)
  const pkg = '@jitl/quickjs-wasmfile-release-sync/package.json';
  if (!existsSync(file)) file = join(dirname(require.resolve(pkg)), 'dist', 'emscripten-module.wasm');
  const Wasm = (globalThis as unknown as { WebAssembly: { Module: new (bytes: Uint8Array) => object } }).WebAssembly;
  wasmModule = new Wasm.Module(readFileSync(file));
  return wasmModule;
}

/** Items [start…] of a batch by their index in it. */
interface Chunk {
  indices: number[];
  /** Each rollout as strings: prompt, response, and the rest as JSON (long texts are not escaped into JSON). */
  items: [string, string, string][];
}

interface Slot {
  worker: Worker;
  busy: boolean;
  watchdog?: ReturnType<typeof setTimeout>;
}

export class RewardSandbox {
  private readonly slots: Slot[] = [];
  private readonly map: SourceMap;
  private readonly opts: Required<Omit<SandboxOptions, 'onLog' | 'heapMb'>> & Pick<SandboxOptions, 'onLog'>;
  private closed = false;
  /** The last scoring call: calls run one after another (they share the workers; see `score`). */
  private tail: Promise<unknown> = Promise.resolve();
  /** Numbers the requests to the workers. */
  private seq = 0;
  /**
   * Rollouts in a row that ran into a limit (time, memory) or crashed, within a call and across the calls that
   * continue it (`continueStreak`): once it reaches `timeoutStreak`, a batch stops at its next such failure (one probe
   * a batch), until a rollout scores again.
   */
  private streak = 0;

  constructor(
    readonly compiled: CompiledReward,
    options: SandboxOptions = {},
    private readonly apiPath?: string,
  ) {
    this.opts = {
      workers: options.workers ?? Math.max(1, Math.min(SANDBOX_LIMITS.workers, availableParallelism())),
      itemTimeoutMs: options.itemTimeoutMs ?? 2_000,
      batchTimeoutMs: options.batchTimeoutMs ?? 120_000,
      memoryMb: options.memoryMb ?? options.heapMb ?? 256,
      timeoutStreak: options.timeoutStreak ?? 8,
      chunk: options.chunk ?? 256,
      onLog: options.onLog,
    };
    const { itemTimeoutMs, batchTimeoutMs, memoryMb, workers, timeoutStreak, chunk } = this.opts;
    const check = (name: string, v: number, min: number, max: number) => {
      if (!(Number.isFinite(v) && v >= min && v <= max))
        throw new Error(`the reward sandbox's ${name} must be in ${min}..${max} (got ${v})`);
    };
    check('memoryMb', memoryMb, SANDBOX_LIMITS.memoryMb[0], SANDBOX_LIMITS.memoryMb[1]);
    check('itemTimeoutMs', itemTimeoutMs, 1, SANDBOX_LIMITS.itemTimeoutMs);
    check('batchTimeoutMs', batchTimeoutMs, 1, SANDBOX_LIMITS.batchTimeoutMs);
    check('workers', workers, 1, SANDBOX_LIMITS.workers);
    check('timeoutStreak', timeoutStreak, 0, Number.MAX_SAFE_INTEGER);
    check('chunk', chunk, 1, Number.MAX_SAFE_INTEGER);
    this.map = new SourceMap(JSON.parse(compiled.map));
  }

  /** The limits in force (for messages and /health). */
  get limits(): {
    itemTimeoutMs: number;
    batchTimeoutMs: number;
    memoryMb: number;
    workers: number;
    timeoutStreak: number;
  } {
    const { itemTimeoutMs, batchTimeoutMs, memoryMb, workers, timeoutStreak } = this.opts;
    return { itemTimeoutMs, batchTimeoutMs, memoryMb, workers, timeoutStreak };
  }

  private spawnWorker(): Worker {
    const workerData: RewardWorkerData = {
      code: this.compiled.code,
      filename: BUNDLE_NAME,
      globalName: REWARD_GLOBAL,
      wasm: quickjsWasm(),
      memoryMb: this.opts.memoryMb,
      itemTimeoutMs: this.opts.itemTimeoutMs,
      stackBytes: QJS_STACK_BYTES,
    };
    const worker = spawnWorker(__dirname, 'reward-worker.js', 'rewardWorker.ts', {
      workerData,
      // The thread's own JavaScript handles bounded strings only; the module's memory is the engine's (memoryMb).
      resourceLimits: { maxOldGenerationSizeMb: 256, stackSizeMb: STACK_MB },
      stdout: true,
      stderr: true,
    });
    worker.unref();
    return worker;
  }

  /** Scores items; never rejects for a module's failure (each failing item carries its error). Concurrent calls (the
   * env server's concurrent /reward requests) are queued: a call drives every worker with its own listeners, so two
   * at once would read each other's results. A call starts with no runaway streak, unless `continueStreak` says it
   * continues the previous call (the next batch of one `reward` run's stream). */
  score(
    items: RewardItem[],
    onProgress?: (p: ScoreProgress) => void,
    signal?: AbortSignal,
    options: { continueStreak?: boolean } = {},
  ): Promise<RewardOutcome[]> {
    const run = this.tail.then(() => this.scoreNow(items, onProgress, signal, options.continueStreak === true));
    this.tail = run.catch(() => undefined);
    return run;
  }

  private async scoreNow(
    items: RewardItem[],
    onProgress: ((p: ScoreProgress) => void) | undefined,
    signal: AbortSignal | undefined,
    continueStreak: boolean,
  ): Promise<RewardOutcome[]> {
    if (this.closed) throw new Error('the reward sandbox is closed');
    // One /reward request's runaway rollouts say nothing about the next, unrelated one's.
    if (!continueStreak) this.streak = 0;
    const { batchTimeoutMs, memoryMb, timeoutStreak } = this.opts;
    const results: (RewardOutcome | undefined)[] = new Array(items.length);
    const errors: Partial<Record<RewardErrorKind, number>> = {};
    let done = 0;
    let lastProgress = 0;
    let stopAll: (kind: RewardErrorKind, message: string) => void = () => {};
    const progress = (force = false) => {
      if (!onProgress) return;
      const now = Date.now();
      if (!force && now - lastProgress < 100) return;
      lastProgress = now;
      onProgress({ done, total: items.length, errors: { ...errors } });
    };
    /** `costly`: the item ran into a limit (time, memory) or crashed its thread; `load`: the module's top-level code did. */
    const finish = (index: number, body: OutcomeBody, flags: { load?: boolean; costly?: boolean } = {}) => {
      if (results[index]) return;
      const outcome = { id: items[index]!.id, ...body } as RewardOutcome;
      results[index] = outcome;
      done++;
      if ('error' in outcome) {
        errors[outcome.error.kind] = (errors[outcome.error.kind] ?? 0) + 1;
        // A module whose top-level code fails fails every item at once: that is no streak of runaway items.
        if (flags.costly && !flags.load) this.streak++;
        else if (
          outcome.error.kind !== 'skipped' &&
          outcome.error.kind !== 'batch-timeout' &&
          outcome.error.kind !== 'cancelled'
        )
          this.streak = 0;
      } else this.streak = 0;
      progress(done === items.length);
      if (timeoutStreak > 0 && this.streak >= timeoutStreak && 'error' in outcome && outcome.error.kind !== 'skipped') {
        const last = outcome as { error: RewardError };
        stopAll(
          'skipped',
          `not run: ${this.streak} rollouts in a row failed with ${last.error.kind === 'crash' ? `a crash of the sandbox (${last.error.message})` : 'a time or memory limit (a loop, or memory that only grows?)'}; fix it and score again`,
        );
      }
    };
    const fail = (index: number, error: RewardError, costly = false) => finish(index, { error }, { costly });

    // Logs: bounded per batch (each rollout's own bound is the harness's).
    let logChars = 0;
    let logsDropped = 0;
    const onLog = (lines: unknown, dropped: unknown) => {
      if (typeof dropped === 'number' && dropped > 0) logsDropped += Math.min(dropped, 1e9);
      if (!Array.isArray(lines)) return;
      for (const l of lines.slice(0, 1000)) {
        const line = boundedText(l, LOG_LIMITS.lineChars) ?? '';
        if (logChars + line.length > LOG_LIMITS.batchChars) {
          logsDropped++;
          continue;
        }
        logChars += line.length;
        this.opts.onLog?.(line);
      }
    };

    // Each rollout as strings: the only form a rollout crosses into the sandbox in. Chunks small enough that
    // a small batch still spreads over every thread.
    const maxItemChars = Math.floor((memoryMb * 1024 * 1024) / 8);
    const chunkSize = Math.max(1, Math.min(this.opts.chunk, Math.ceil(items.length / this.opts.workers)));
    const queue: Chunk[] = [];
    let chunk: Chunk = { indices: [], items: [] };
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      let json: string;
      try {
        json = JSON.stringify({
          golden: it.golden,
          question: it.question,
          data_source: it.data_source,
          meta: it.meta,
          dialect: it.dialect,
          searchTool: it.searchTool,
          strictActions: it.strictActions,
          spans: it.spans,
        });
      } catch (e) {
        fail(i, {
          kind: 'input',
          message: `the rollout cannot be passed to the reward module: ${(e as Error).message}`,
        });
        continue;
      }
      const prompt = typeof it.prompt === 'string' ? it.prompt : '';
      const response = typeof it.response === 'string' ? it.response : '';
      const chars = json.length + prompt.length + response.length;
      if (chars > maxItemChars) {
        fail(i, {
          kind: 'input',
          message: `the rollout is ${(chars / 1e6).toFixed(1)} M characters, more than the sandbox takes (${(maxItemChars / 1e6).toFixed(1)} M: an eighth of its ${memoryMb} MB)`,
        });
        continue;
      }
      chunk.indices.push(i);
      chunk.items.push([prompt, response, json]);
      if (chunk.items.length >= chunkSize) {
        queue.push(chunk);
        chunk = { indices: [], items: [] };
      }
    }
    if (chunk.items.length) queue.push(chunk);
    const wanted = Math.min(this.opts.workers, queue.length);
    while (this.slots.length < wanted) this.slots.push({ worker: this.spawnWorker(), busy: false });

    const batchDeadline = Date.now() + batchTimeoutMs;
    await new Promise<void>((resolveAll) => {
      let stopped = false;
      stopAll = (kind: RewardErrorKind, message: string) => {
        if (stopped) return;
        stopped = true;
        clearTimeout(batchTimer);
        for (let i = 0; i < items.length; i++) if (!results[i]) fail(i, { kind, message });
        for (const s of this.slots) if (s.busy) this.replace(s);
        resolveAll();
      };
      const batchTimer = setTimeout(
        () => stopAll('batch-timeout', `the batch did not finish within ${batchTimeoutMs} ms`),
        timerMs(batchTimeoutMs),
      );
      const onAbort = () => stopAll('cancelled', 'cancelled');
      if (signal?.aborted) onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      // Done when every item has its outcome and every slot has finished its request: a slot's last result comes
      // before its 'done', and the next call must not send to a slot still listening for it (stop 42's CI hang).
      const maybeDone = () => {
        if (!stopped && done === items.length && !this.slots.some((s) => s.busy)) {
          stopped = true;
          clearTimeout(batchTimer);
          signal?.removeEventListener('abort', onAbort);
          resolveAll();
        }
      };
      const pump = (slot: Slot) => {
        if (stopped) return;
        const next = queue.shift();
        if (!next) {
          slot.busy = false;
          maybeDone();
          return;
        }
        slot.busy = true;
        this.run(slot, next, batchDeadline, finish, fail, onLog, (requeue) => {
          if (requeue?.items.length) queue.unshift(requeue);
          pump(slot);
        });
      };
      for (const slot of this.slots.slice(0, wanted)) pump(slot);
      maybeDone();
    });
    if (logsDropped)
      this.opts.onLog?.(
        `… ${logsDropped.toLocaleString('en-US')} console line${logsDropped === 1 ? '' : 's'} of the module not shown (at most ${LOG_LIMITS.itemChars.toLocaleString('en-US')} characters per rollout and ${LOG_LIMITS.batchChars / 1024} KB per batch)`,
      );
    progress(true);
    return results as RewardOutcome[];
  }

  /** Runs one chunk on a slot; calls `next` with what is left to requeue if the worker had to be replaced. */
  private run(
    slot: Slot,
    chunk: Chunk,
    batchDeadline: number,
    finish: (i: number, o: OutcomeBody, flags?: { load?: boolean; costly?: boolean }) => void,
    fail: (i: number, e: RewardError, costly?: boolean) => void,
    onLog: (lines: unknown, dropped: unknown) => void,
    next: (requeue?: Chunk) => void,
  ): void {
    const w = slot.worker;
    const seq = ++this.seq;
    let received = 0;
    let settled = false;
    const cleanup = () => {
      settled = true;
      clearTimeout(slot.watchdog);
      w.off('message', onMessage);
      w.off('error', onError);
      w.off('exit', onExit);
    };
    // The watchdog: QuickJS's interrupt handler stops a runaway item at its limit; if the thread stops answering
    // anyway (a long native call), it is terminated. A fresh engine first loads the module (up to one item limit).
    let armedAt = Date.now();
    const arm = () => {
      clearTimeout(slot.watchdog);
      armedAt = Date.now();
      slot.watchdog = setTimeout(
        () =>
          abandon(
            'timeout',
            `did not finish within ${this.opts.itemTimeoutMs} ms: its sandbox thread gave no answer for ${((Date.now() - armedAt) / 1000).toFixed(1)} s and was stopped — stuck in one long built-in call the engine cannot interrupt (a search, sort or replace over a huge string or array?), so where in ${this.compiled.file} is not known`,
          ),
        timerMs(2 * this.opts.itemTimeoutMs + 5_000),
      );
    };
    const abandon = (kind: RewardErrorKind, message: string) => {
      if (settled) return;
      cleanup();
      this.replace(slot);
      const at = received;
      if (at < chunk.indices.length) fail(chunk.indices[at]!, { kind, message }, true);
      const rest = { indices: chunk.indices.slice(at + 1), items: chunk.items.slice(at + 1) };
      next(rest.items.length ? rest : undefined);
    };
    const onMessage = (m: { type: string; seq: number; index?: number; outcome?: WorkerOutcome }) => {
      if (m.seq !== seq) return;
      if (m.type === 'result') {
        const k = m.index!;
        const index = chunk.indices[k];
        if (index === undefined) return;
        received = k + 1;
        arm();
        const o = (
          m.outcome && typeof m.outcome === 'object' ? m.outcome : { k: 'x', kind: 'crash', message: 'no result' }
        ) as Record<string, unknown>;
        onLog(o.logs, o.dropped);
        const body = decodeOutcome(o, {
          compiled: this.compiled,
          map: this.map,
          apiPath: this.apiPath,
          itemTimeoutMs: this.opts.itemTimeoutMs,
          batchTimeoutMs: this.opts.batchTimeoutMs,
          memoryMb: this.opts.memoryMb,
          batchDeadline,
        });
        // The batch's own deadline is no runaway of the module's.
        finish(index, body, {
          load: o.load === true,
          costly: o.k === 'x' && !('error' in body && body.error.kind === 'batch-timeout'),
        });
      } else if (m.type === 'done') {
        cleanup();
        next();
      }
    };
    const onError = (e: Error & { code?: string }) => {
      abandon(
        e.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crash',
        e.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `ran out of memory (the limit is ${this.opts.memoryMb} MB)`
          : `the sandbox thread crashed: ${e.message}`,
      );
    };
    const onExit = (code: number) => abandon('crash', `the sandbox thread exited (${code})`);
    w.on('message', onMessage);
    w.on('error', onError);
    w.on('exit', onExit);
    arm();
    const req: ScoreRequest = { seq, start: 0, items: chunk.items, batchDeadline };
    w.postMessage(req);
  }

  /** Replaces a slot's worker with a fresh one (the old one is terminated). */
  private replace(slot: Slot): void {
    clearTimeout(slot.watchdog);
    slot.worker.removeAllListeners();
    void slot.worker.terminate();
    slot.worker = this.spawnWorker();
    slot.busy = false;
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.splice(0).map((s) => s.worker.terminate()));
  }
}

/** A human message for a failed item: `file:line: message (rollout id at where)`. */
export function describeRewardError(item: { id: string; where?: string }, e: RewardError): string {
  const at = e.file ? `${e.file}:${e.line}: ` : '';
  return `${at}${e.message} — on rollout ${item.id}${item.where ? ` (${item.where})` : ''}`;
}
