/**
 * THE SANDBOX THAT WAS REPLACED, kept for `npm run bench reward` only: the peer the QuickJS sandbox's cost is measured
 * against in the same run. It is NOT a security boundary (a `vm` context; `(console.log).constructor('return
 * process')()` escaped it: issue 40) and nothing but the benchmark may use it. The module's instrumentation hooks
 * (`__sasThrow`, `__sasLoop`: src/core/rewards/compile.ts) are defined in its context so the same script runs.
 *
 * Originally: each compiled module runs in worker threads (separate V8 isolates: no access to
 * the extension's state), inside a `vm` context with no `require`, `process`, file system or timers. Limits:
 *  - per item: the `vm` timeout interrupts a synchronous loop (async continuations included, by running
 *    microtasks after each evaluation); a watchdog terminates the worker if an item still overruns;
 *  - per batch: a deadline after which every item still waiting fails;
 *  - heap: `resourceLimits.maxOldGenerationSizeMb`; a worker that runs out of memory is replaced.
 * A failing item (throws, NaN, not a number, timeout, out of memory) gets an error naming the file and line —
 * source-mapped to the user's TypeScript — and the rollout; the other items still score. Workers are reused
 * across batches, and a batch is spread over them in chunks.
 */

import { SourceMap } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import { type CompiledReward, REWARD_GLOBAL } from '../src/core/rewards/compile';

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
  /** Where the rollout came from, for messages (e.g. `rollouts.jsonl:17`). */
  where?: string;
}

export type RewardErrorKind = 'throw' | 'nan' | 'type' | 'timeout' | 'memory' | 'crash' | 'batch-timeout';

export interface RewardError {
  kind: RewardErrorKind;
  message: string;
  /** The user's file and line the failure maps to (when there is a stack frame in their code). */
  file?: string;
  line?: number;
  column?: number;
  stack?: string;
}

export type RewardOutcome =
  | { id: string; reward: number; parts: Record<string, number> }
  | { id: string; error: RewardError };

export interface SandboxOptions {
  workers?: number;
  itemTimeoutMs?: number;
  batchTimeoutMs?: number;
  heapMb?: number;
  /** Items per message to a worker. */
  chunk?: number;
  /** The module's console output. */
  onLog?: (line: string) => void;
}

const BUNDLE_NAME = 'reward-bundle.js';

/** The worker's program (plain JavaScript, evaluated as a worker with `eval: true`). */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const vm = require('node:vm');
const { code, itemTimeoutMs, globalName } = workerData;
const fmt = (args) => args.map((a) => (typeof a === 'string' ? a : (() => { try { return JSON.stringify(a); } catch { return String(a); } })())).join(' ');
// Every message back names the request it answers (seq): a listener never takes another request's messages.
let seq = 0;
const consoleShim = { log: (...a) => parentPort.postMessage({ type: 'log', seq, line: fmt(a) }) };
consoleShim.info = consoleShim.warn = consoleShim.error = consoleShim.debug = consoleShim.log;
const context = vm.createContext({ console: consoleShim, __sasLoop: -1, __sasThrow: (site, v) => v }, { microtaskMode: 'afterEvaluate', codeGeneration: { strings: false, wasm: false } });
let loadError = null;
try {
  new vm.Script(code, { filename: ${JSON.stringify(BUNDLE_NAME)} }).runInContext(context, { timeout: itemTimeoutMs });
  vm.runInContext(\`
    (() => {
      const mod = \${globalName};
      const def = mod && mod.default;
      const call = (item) => {
        if (!def || typeof def.score !== 'function') throw new TypeError('the module has no default export made with defineReward({ name, score })');
        const traj = mod.makeTrajectory(item.prompt, item.response, { dialect: item.dialect, searchTool: item.searchTool, strictActions: item.strictActions });
        const example = { golden: item.golden, question: item.question, data_source: item.data_source, meta: item.meta };
        return def.score(traj, example);
      };
      // One item: { value } | { error } now, or a promise settling into __sasSettled[i].
      const runOne = (item, i, settled) => {
        try {
          const out = call(item);
          if (out && typeof out.then === 'function') {
            settled[i] = undefined;
            out.then((v) => { settled[i] = { value: v }; }, (e) => { settled[i] = { error: e }; });
            return null;
          }
          return { value: out };
        } catch (e) {
          return { error: e };
        }
      };
      // The fast path: items from __sasFrom, starting new ones only while under the budget (each item started
      // gets at least the per-item limit before the call's timeout of twice that).
      globalThis.__sasBatch = (items, from, budgetMs) => {
        const t0 = Date.now();
        const results = [];
        const settled = [];
        globalThis.__sasPhase = 'sync';
        let i = from;
        for (; i < items.length; i++) {
          if (i > from && Date.now() - t0 > budgetMs) break;
          globalThis.__sasCurrent = i;
          results[i - from] = runOne(items[i], i - from, settled);
        }
        globalThis.__sasPhase = 'microtasks';
        globalThis.__sasLast = { results, settled, next: i };
        return i;
      };
      globalThis.__sasSingle = (item) => {
        const settled = [];
        const r = runOne(item, 0, settled);
        globalThis.__sasLast = { results: [r], settled, next: 1 };
        return 1;
      };
    })();
  \`, context);
} catch (e) {
  loadError = e;
}
const describe = (e) => ({ name: e && e.name, message: e && e.message !== undefined ? String(e.message) : String(e), stack: e && e.stack ? String(e.stack) : '' });
function check(v) {
  if (typeof v === 'number') return Number.isNaN(v) ? { kind: 'nan', message: 'returned NaN' } : Number.isFinite(v) ? null : { kind: 'nan', message: 'returned ' + v };
  if (v && typeof v === 'object' && 'reward' in v) {
    const r = check(v.reward);
    if (r) return r;
    if (v.parts !== undefined) {
      if (!v.parts || typeof v.parts !== 'object') return { kind: 'type', message: 'parts must be an object of numbers' };
      for (const [k, x] of Object.entries(v.parts)) if (typeof x !== 'number' || !Number.isFinite(x)) return { kind: 'type', message: 'parts.' + k + ' is ' + (typeof x === 'number' ? x : typeof x) + ' (expected a finite number)' };
    }
    return null;
  }
  return { kind: 'type', message: 'returned ' + (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v) + ' (expected a number or { reward, parts })' };
}
/** The outcome of item k of the last call (sync result, or its settled promise). */
function outcomeOf(last, k) {
  let r = last.results[k];
  if (r === null) {
    r = last.settled[k];
    if (r === undefined) return { error: { kind: 'timeout', message: 'the score function returned a promise that did not settle (it waits on something a sandboxed module cannot have)' } };
  }
  if (r.error !== undefined) return { error: { kind: 'throw', ...describe(r.error) } };
  const bad = check(r.value);
  if (bad) return { error: bad };
  const v = r.value;
  return typeof v === 'number' ? { reward: v, parts: {} } : { reward: v.reward, parts: v.parts ? { ...v.parts } : {} };
}
const isTimeout = (e) => e && e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT';
const timeoutOutcome = { error: { kind: 'timeout', message: 'did not finish within ' + itemTimeoutMs + ' ms' } };
/** The slow path: one item per call, so a runaway item is pinned down exactly. */
function single(item) {
  try {
    context.__item = item;
    vm.runInContext('__sasSingle(__item)', context, { timeout: itemTimeoutMs });
    return outcomeOf(context.__sasLast, 0);
  } catch (e) {
    return isTimeout(e) ? timeoutOutcome : { error: { kind: 'throw', ...describe(e) } };
  }
}
parentPort.on('message', (msg) => {
  seq = msg.seq;
  const post = (k, outcome) => parentPort.postMessage({ type: 'result', seq, index: msg.start + k, outcome });
  if (loadError) {
    msg.items.forEach((_, k) => post(k, { error: { kind: 'throw', ...describe(loadError) } }));
    parentPort.postMessage({ type: 'done', seq });
    return;
  }
  if (msg.single) {
    // After a crash: one item per call, so a culprit that kills the worker is pinned down exactly.
    msg.items.forEach((item, k) => {
      parentPort.postMessage({ type: 'start', seq, index: msg.start + k });
      post(k, single(item));
    });
    parentPort.postMessage({ type: 'done', seq });
    return;
  }
  context.__items = msg.items;
  let pos = 0;
  while (pos < msg.items.length) {
    parentPort.postMessage({ type: 'start', seq, index: msg.start + pos });
    context.__from = pos;
    try {
      const next = vm.runInContext('__sasBatch(__items, __from, ' + itemTimeoutMs + ')', context, { timeout: 2 * itemTimeoutMs });
      const last = context.__sasLast;
      for (let k = pos; k < next; k++) post(k, outcomeOf(last, k - pos));
      pos = next;
    } catch (e) {
      if (!isTimeout(e)) throw e;
      // Which item ran away? In the synchronous loop it is __sasCurrent; in the promise continuations we cannot
      // tell, so every item started in this call is re-run alone.
      const upTo = context.__sasPhase === 'sync' ? context.__sasCurrent : (context.__sasLast ? context.__sasLast.next : msg.items.length) - 1;
      for (let k = pos; k <= upTo; k++) {
        parentPort.postMessage({ type: 'start', seq, index: msg.start + k });
        post(k, k === upTo && context.__sasPhase === 'sync' ? timeoutOutcome : single(msg.items[k]));
      }
      pos = upTo + 1;
    }
  }
  parentPort.postMessage({ type: 'done', seq });
});
`;

/** Items [start, start + items.length) of a batch; `single`: one item per sandbox call (after a crash). */
interface Chunk {
  start: number;
  items: RewardItem[];
  single?: boolean;
}

interface Slot {
  worker: Worker;
  busy: boolean;
  /** The index of the item (or of the first item of the call) it started last. */
  current?: number;
  watchdog?: ReturnType<typeof setTimeout>;
}

/** Maps a stack trace of the bundle to the user's file and line. */
export function locate(
  stack: string | undefined,
  compiled: CompiledReward,
  map: SourceMap,
  apiPath?: string,
): { file?: string; line?: number; column?: number; stack?: string } {
  if (!stack) return {};
  const frames: string[] = [];
  let first: { file: string; line: number; column: number } | undefined;
  for (const line of stack.split('\n')) {
    const m = new RegExp(`${BUNDLE_NAME.replace('.', '\\.')}:(\\d+):(\\d+)`).exec(line);
    if (!m) {
      if (!/^\s+at /.test(line)) frames.push(line);
      continue;
    }
    const entry = map.findEntry(Number(m[1]) - 1, Number(m[2]) - 1) as {
      originalSource?: string;
      originalLine?: number;
      originalColumn?: number;
    };
    if (!entry.originalSource) continue;
    const file = resolve(dirname(compiled.file), entry.originalSource);
    const where = `${file}:${(entry.originalLine ?? 0) + 1}:${(entry.originalColumn ?? 0) + 1}`;
    frames.push(line.replace(/\(?[^ (]*reward-bundle\.js:\d+:\d+\)?/, `(${where})`));
    if (!first && (!apiPath || !file.startsWith(dirname(apiPath))))
      first = { file, line: (entry.originalLine ?? 0) + 1, column: (entry.originalColumn ?? 0) + 1 };
  }
  return { ...first, stack: frames.join('\n') };
}

export class VmRewardSandbox {
  private readonly slots: Slot[] = [];
  private readonly map: SourceMap;
  private readonly opts: Required<Omit<SandboxOptions, 'onLog'>> & Pick<SandboxOptions, 'onLog'>;
  private closed = false;
  /** The last scoring call: calls run one after another (they share the workers; see `score`). */
  private tail: Promise<unknown> = Promise.resolve();
  /** Numbers the requests to the workers. */
  private seq = 0;

  constructor(
    readonly compiled: CompiledReward,
    options: SandboxOptions = {},
    private readonly apiPath?: string,
  ) {
    this.opts = {
      workers: options.workers ?? Math.max(1, availableParallelism()),
      itemTimeoutMs: options.itemTimeoutMs ?? 2_000,
      batchTimeoutMs: options.batchTimeoutMs ?? 10 * 60_000,
      heapMb: options.heapMb ?? 256,
      chunk: options.chunk ?? 256,
      onLog: options.onLog,
    };
    this.map = new SourceMap(JSON.parse(compiled.map));
  }

  private spawnWorker(): Worker {
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { code: this.compiled.code, itemTimeoutMs: this.opts.itemTimeoutMs, globalName: REWARD_GLOBAL },
      resourceLimits: {
        maxOldGenerationSizeMb: this.opts.heapMb,
        maxYoungGenerationSizeMb: Math.min(64, Math.max(8, this.opts.heapMb / 8)),
      },
      stdout: true,
      stderr: true,
    });
    worker.unref();
    return worker;
  }

  /** Scores items; never rejects for a module's failure (each failing item carries its error). Concurrent calls (the
   * env server's concurrent /reward requests) are queued: a call drives every worker with its own listeners, so two
   * at once would read each other's results. */
  score(
    items: RewardItem[],
    onProgress?: (done: number, total: number) => void,
    signal?: AbortSignal,
  ): Promise<RewardOutcome[]> {
    const run = this.tail.then(() => this.scoreNow(items, onProgress, signal));
    this.tail = run.catch(() => undefined);
    return run;
  }

  private async scoreNow(
    items: RewardItem[],
    onProgress?: (done: number, total: number) => void,
    signal?: AbortSignal,
  ): Promise<RewardOutcome[]> {
    if (this.closed) throw new Error('the reward sandbox is closed');
    const results: (RewardOutcome | undefined)[] = new Array(items.length);
    let done = 0;
    const finish = (index: number, outcome: RewardOutcome) => {
      if (results[index]) return;
      results[index] = outcome;
      done++;
      if (onProgress && (done % 500 === 0 || done === items.length)) onProgress(done, items.length);
    };
    const fail = (index: number, error: RewardError) => finish(index, { id: items[index]!.id, error });
    const queue: Chunk[] = [];
    for (let s = 0; s < items.length; s += this.opts.chunk)
      queue.push({ start: s, items: items.slice(s, s + this.opts.chunk) });
    const wanted = Math.min(this.opts.workers, queue.length);
    while (this.slots.length < wanted) this.slots.push({ worker: this.spawnWorker(), busy: false });

    const deadline = Date.now() + this.opts.batchTimeoutMs;
    await new Promise<void>((resolveAll) => {
      let stopped = false;
      const stopAll = (kind: RewardErrorKind, message: string) => {
        if (stopped) return;
        stopped = true;
        for (let i = 0; i < items.length; i++) if (!results[i]) fail(i, { kind, message });
        for (const s of this.slots) this.replace(s);
        resolveAll();
      };
      const batchTimer = setTimeout(
        () => stopAll('batch-timeout', `the batch did not finish within ${this.opts.batchTimeoutMs} ms`),
        Math.max(0, deadline - Date.now()),
      );
      signal?.addEventListener('abort', () => stopAll('batch-timeout', 'cancelled'), { once: true });
      // Done when every item has its outcome and every slot has finished its request: a slot's last result comes
      // before its 'done', and the next call must not send to a slot still listening for it (stop 42's CI hang).
      const maybeDone = () => {
        if (!stopped && done === items.length && !this.slots.some((s) => s.busy)) {
          stopped = true;
          clearTimeout(batchTimer);
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
        this.run(slot, next, results, finish, fail, (requeue) => {
          if (requeue?.items.length) queue.unshift(requeue);
          pump(slot);
        });
      };
      for (const slot of this.slots.slice(0, wanted)) pump(slot);
      maybeDone();
    });
    return results as RewardOutcome[];
  }

  /** Runs one chunk on a slot; calls `next` with what is left to requeue if the worker had to be replaced. */
  private run(
    slot: Slot,
    chunk: Chunk,
    results: (RewardOutcome | undefined)[],
    finish: (i: number, o: RewardOutcome) => void,
    fail: (i: number, e: RewardError) => void,
    next: (requeue?: Chunk) => void,
  ): void {
    const w = slot.worker;
    const seq = ++this.seq;
    const end = chunk.start + chunk.items.length;
    let settled = false;
    const cleanup = () => {
      settled = true;
      clearTimeout(slot.watchdog);
      w.off('message', onMessage);
      w.off('error', onError);
      w.off('exit', onExit);
    };
    // The watchdog: the vm timeout should stop a runaway item; if the worker stops answering anyway, replace it.
    const arm = () => {
      clearTimeout(slot.watchdog);
      slot.watchdog = setTimeout(
        () => abandon('timeout', `did not finish within ${this.opts.itemTimeoutMs} ms (the worker was stopped)`),
        this.opts.itemTimeoutMs * 2 + 1_000,
      );
    };
    const abandon = (kind: RewardErrorKind, message: string) => {
      if (settled) return;
      cleanup();
      const at = slot.current ?? chunk.start;
      this.replace(slot);
      if (!chunk.single) {
        // The worker died inside a call that ran several items: none of their results came back and the culprit
        // is unknown. Run them again one per call; the culprit will fail alone.
        next({ start: at, items: chunk.items.slice(at - chunk.start), single: true });
        return;
      }
      if (!results[at]) fail(at, { kind, message });
      const from = at + 1;
      next(from < end ? { start: from, items: chunk.items.slice(from - chunk.start) } : undefined);
    };
    const onMessage = (m: {
      type: string;
      seq: number;
      index?: number;
      outcome?: { reward?: number; parts?: Record<string, number>; error?: RewardError & { name?: string } };
      line?: string;
    }) => {
      // Another request's message (a defence: a slot runs one request at a time); the module's console output
      // while it loads (seq 0) goes to whichever request is listening.
      if (m.seq !== seq && !(m.type === 'log' && m.seq === 0)) return;
      if (m.type === 'start') {
        slot.current = m.index!;
        arm();
      } else if (m.type === 'result') {
        const item = chunk.items[m.index! - chunk.start]!;
        const o = m.outcome!;
        if (o.error) {
          const located = locate(o.error.stack, this.compiled, this.map, this.apiPath);
          const name = o.error.name && o.error.kind === 'throw' ? `${o.error.name}: ` : '';
          finish(m.index!, {
            id: item.id,
            error: { kind: o.error.kind, message: `${name}${o.error.message}`, ...located },
          });
        } else finish(m.index!, { id: item.id, reward: o.reward!, parts: o.parts ?? {} });
      } else if (m.type === 'log') {
        this.opts.onLog?.(m.line ?? '');
      } else if (m.type === 'done') {
        cleanup();
        next();
      }
    };
    const onError = (e: Error & { code?: string }) => {
      abandon(
        e.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crash',
        e.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `ran out of memory (the limit is ${this.opts.heapMb} MB)`
          : `the worker crashed: ${e.message}`,
      );
    };
    const onExit = (code: number) => abandon('crash', `the worker exited (${code})`);
    w.on('message', onMessage);
    w.on('error', onError);
    w.on('exit', onExit);
    slot.current = undefined;
    arm();
    w.postMessage({ seq, start: chunk.start, items: chunk.items, single: chunk.single === true });
  }

  /** Replaces a slot's worker with a fresh one (the old one is terminated). */
  private replace(slot: Slot): void {
    clearTimeout(slot.watchdog);
    slot.worker.removeAllListeners();
    void slot.worker.terminate();
    slot.worker = this.spawnWorker();
    slot.busy = false;
    slot.current = undefined;
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
