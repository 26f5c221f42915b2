/**
 * One reward sandbox thread (sandbox.ts starts several): the user's compiled module runs in QuickJS compiled to
 * WebAssembly (quickjs-emscripten), a JavaScript engine with no host objects at all — no `process`, `require`,
 * file system, network, timers, workers or WebAssembly inside it; the only way out is the string each call returns.
 *
 * - Memory: the engine's whole address space is one WebAssembly.Memory whose maximum is the limit (every allocation
 *   of the module — objects, strings, ArrayBuffers — and the engine's own live in it); past it an allocation fails
 *   inside the sandbox ("out of memory") and the host's memory is untouched.
 * - Time: QuickJS calls an interrupt handler while it runs; past the item's deadline (or the batch's) it stops the
 *   module with an uncatchable error. The pool's watchdog terminates this thread if that ever fails to happen.
 * - Stack: QuickJS's own limit (a catchable "stack overflow") well inside this thread's native stack.
 * - After a timeout, an out-of-memory or any failure of the engine itself, the whole engine (memory included) is
 *   thrown away and rebuilt before the next rollout: nothing a runaway item left behind reaches the next one.
 *
 * Messages: in { seq, start, items: [prompt, response, JSON of the rest], batchDeadline } → out { type: 'result', seq, index, outcome } per
 * rollout, then { type: 'done', seq }.
 */
import { parentPort, workerData } from 'node:worker_threads';
import releaseSync from '@jitl/quickjs-wasmfile-release-sync';
import {
  newQuickJSWASMModuleFromVariant,
  newVariant,
  type QuickJSContext,
  type QuickJSHandle,
  type QuickJSRuntime,
} from 'quickjs-emscripten-core';
import { harnessSource, type RawOutcome, RESULT_LIMITS } from './harness';

export interface RewardWorkerData {
  /** The compiled module (compile.ts). */
  code: string;
  /** The file name stack frames of the module carry. */
  filename: string;
  globalName: string;
  /** The QuickJS WebAssembly.Module, compiled once by the host. */
  wasm: object;
  memoryMb: number;
  itemTimeoutMs: number;
  /** QuickJS's stack limit, bytes. */
  stackBytes: number;
}

export interface ScoreRequest {
  seq: number;
  start: number;
  /** Each rollout as strings: its prompt, its response, and the rest as JSON (sandbox.ts). */
  items: [string, string, string][];
  /** Epoch ms: no rollout runs past it. */
  batchDeadline: number;
}

/** What the worker says about one rollout: the harness's outcome, or a failure the engine itself reported. */
export type WorkerOutcome = (
  | RawOutcome
  | {
      k: 'x';
      kind: 'timeout' | 'memory' | 'crash';
      message: string;
      stack?: string;
      logs?: string[];
      dropped?: number;
      loop?: number;
    }
) & {
  /** The module's top-level code failed (every rollout gets this outcome). */
  load?: boolean;
  /** The rollout had returned; a promise callback it left queued is what ran into the limit. */
  background?: boolean;
};

const data = workerData as RewardWorkerData;
const PAGE = 64 * 1024;
/** WebAssembly, typed as far as used here (the project's TypeScript lib has no WebAssembly declarations). */
const Wasm = (
  globalThis as unknown as {
    WebAssembly: { Memory: new (d: { initial: number; maximum: number }) => { buffer: ArrayBuffer } };
  }
).WebAssembly;

interface Engine {
  runtime: QuickJSRuntime;
  context: QuickJSContext;
  run: QuickJSHandle;
  take: QuickJSHandle;
  drain: QuickJSHandle;
  /** The harness's `cutText`: the first characters of a string, cut inside the engine. */
  cut: QuickJSHandle;
  /** The module's top-level code failed: every rollout gets this. */
  loadError?: WorkerOutcome;
  memory: object;
}

let deadline = 0;
let engine: Engine | undefined;

async function newEngine(): Promise<Engine> {
  // The memory limit: the engine's only memory. 16 MB is what the build needs to start.
  const pages = Math.max(256, Math.floor((data.memoryMb * 1024 * 1024) / PAGE));
  const memory = new Wasm.Memory({ initial: 256, maximum: pages });
  const qjs = await newQuickJSWASMModuleFromVariant(
    newVariant(releaseSync, { wasmModule: data.wasm as never, wasmMemory: memory as never }),
  );
  const runtime = qjs.newRuntime();
  // QuickJS counts its allocations too: one request larger than the whole limit fails at once, without growing the memory.
  runtime.setMemoryLimit(data.memoryMb * 1024 * 1024);
  runtime.setMaxStackSize(data.stackBytes);
  runtime.setInterruptHandler(() => Date.now() > deadline);
  const context = runtime.newContext();
  deadline = Date.now() + 5_000;
  const harness = context.evalCode(harnessSource(data.globalName), 'sas-harness.js');
  if (harness.error) throw new Error(`the reward harness did not load: ${JSON.stringify(context.dump(harness.error))}`);
  const run = context.getProp(harness.value, 0);
  const take = context.getProp(harness.value, 1);
  const drain = context.getProp(harness.value, 2);
  const cut = context.getProp(harness.value, 3);
  harness.value.dispose();
  const e: Engine = { runtime, context, run, take, drain, cut, memory };
  // The module's top-level code, under the per-item limit.
  deadline = Date.now() + data.itemTimeoutMs;
  try {
    const loaded = context.evalCode(data.code, data.filename);
    if (loaded.error) {
      e.loadError = { ...failure(e, loaded.error, 'load'), load: true };
      loaded.error.dispose();
    } else loaded.value.dispose();
  } catch (err) {
    e.loadError = { ...engineFailure(err), load: true };
  }
  if (e.loadError) {
    // Keep the error, not the engine (its memory may be full). A thrown non-Error takes the site of the last throw.
    const { site, ...before } = logsBefore(e);
    e.loadError = {
      ...e.loadError,
      ...before,
      ...(e.loadError.k === 'e' && e.loadError.nonError && site !== undefined ? { site } : {}),
    };
    dispose(e);
  }
  return e;
}

/** The length of a string handle (a primitive string's own length: nothing of the module's runs). */
function lengthOf(context: QuickJSContext, h: QuickJSHandle): number {
  const l = context.getProp(h, 'length');
  try {
    return context.typeof(l) === 'number' ? context.getNumber(l) : Number.POSITIVE_INFINITY;
  } finally {
    l.dispose();
  }
}

/**
 * A string out of the sandbox, checked to be one (never a getter or a proxy of the module's), of at most `max`
 * characters: a longer one is cut inside the engine first (the harness's `cutText`, with the built-ins it took
 * before the module ran), so that only `max` characters are ever copied out.
 */
function stringOf(e: Engine, h: QuickJSHandle, max: number): string | undefined {
  const { context } = e;
  if (context.typeof(h) !== 'string') return undefined;
  if (lengthOf(context, h) <= max) return context.getString(h);
  const n = context.newNumber(max);
  try {
    const r = context.callFunction(e.cut, context.undefined, h, n);
    if (r.error) {
      r.error.dispose();
      return undefined;
    }
    try {
      return context.typeof(r.value) === 'string' && lengthOf(context, r.value) <= max + 64
        ? context.getString(r.value)
        : undefined;
    } finally {
      r.value.dispose();
    }
  } finally {
    n.dispose();
  }
}

/** An exception that reached the host: an uncatchable one (interrupted, out of memory) or a broken harness. */
function failure(e: Engine, err: QuickJSHandle, when: 'load' | 'run'): WorkerOutcome {
  const { context } = e;
  // Reading the error runs no module code: only engine-made errors get here, and their fields are plain data. Any
  // getter would run under an expired deadline and stop at once.
  deadline = Date.now() + 200;
  let message = '';
  let stack: string | undefined;
  let name = '';
  try {
    if (context.typeof(err) === 'object') {
      const read = (key: string, max: number) => {
        const h = context.getProp(err, key);
        try {
          return stringOf(e, h, max);
        } finally {
          h.dispose();
        }
      };
      name = read('name', RESULT_LIMITS.nameChars) ?? '';
      message = read('message', RESULT_LIMITS.messageChars) ?? '';
      stack = read('stack', RESULT_LIMITS.stackChars);
    } else {
      // A thrown non-Error (only the module's top-level code gets here with one: the harness catches the rest).
      const type = context.typeof(err);
      const text = type === 'string' ? stringOf(e, err, RESULT_LIMITS.messageChars) : undefined;
      return { k: 'e', nonError: type, message: text ?? type };
    }
  } catch {
    /* unreadable */
  }
  if (name === 'InternalError' && /^interrupted$/.test(message))
    return { k: 'x', kind: 'timeout', message: 'interrupted', ...(stack ? { stack } : {}) };
  if (name === 'InternalError' && /out of memory/.test(message))
    return { k: 'x', kind: 'memory', message, ...(stack ? { stack } : {}) };
  // Out of memory while making the error itself: QuickJS throws what it could (null).
  if (!name && !message && memoryFull(e)) return { k: 'x', kind: 'memory', message: 'out of memory' };
  // The top-level code threw: the module's own error, reported as a throw.
  if (when === 'load') return { k: 'e', name, message, ...(stack ? { stack } : {}) };
  return { k: 'x', kind: 'crash', message: `${name ? `${name}: ` : ''}${message}`, ...(stack ? { stack } : {}) };
}

/** Whether the engine's memory has grown to its limit. */
function memoryFull(e: Engine): boolean {
  const bytes = (e.memory as { buffer: ArrayBuffer }).buffer.byteLength;
  return bytes >= data.memoryMb * 1024 * 1024 - 2 * 1024 * 1024;
}

/** The engine itself failed (a WebAssembly trap, the native stack): it cannot be trusted any more. */
function engineFailure(err: unknown): WorkerOutcome {
  const e = err as Error;
  if (e instanceof RangeError && /call stack/i.test(e.message))
    return {
      k: 'x',
      kind: 'crash',
      message: 'the module recursed too deeply for the sandbox (native stack exhausted)',
    };
  return {
    k: 'x',
    kind: 'crash',
    message: `the sandbox's engine failed: ${e?.name ?? 'Error'}: ${e?.message ?? String(err)}`,
  };
}

function dispose(e: Engine | undefined): void {
  if (!e) return;
  try {
    for (const h of [e.run, e.take, e.drain, e.cut]) h.dispose();
    e.context.dispose();
    e.runtime.dispose();
  } catch {
    /* a broken engine is dropped whole with its memory */
  }
}

/** Calls a harness function; the result is its string, or the failure that stopped it. */
function call(e: Engine, fn: QuickJSHandle, args: (string | number)[]): { s?: string; fail?: WorkerOutcome } {
  const { context } = e;
  const handles = args.map((a) => (typeof a === 'string' ? context.newString(a) : context.newNumber(a)));
  try {
    const r = context.callFunction(fn, context.undefined, ...handles);
    if (r.error) {
      const fail = failure(e, r.error, 'run');
      r.error.dispose();
      return { fail };
    }
    try {
      if (context.typeof(r.value) !== 'string')
        return {
          fail: { k: 'x', kind: 'crash', message: 'the sandbox returned no result (its harness was replaced)' },
        };
      // The whole outcome is bounded before a character of it is copied out of the engine.
      const length = lengthOf(context, r.value);
      if (length > RESULT_LIMITS.outcomeChars)
        return {
          fail: {
            k: 'x',
            kind: 'crash',
            message: `the sandbox's result for this rollout was ${length.toLocaleString('en-US')} characters, more than ${RESULT_LIMITS.outcomeChars.toLocaleString('en-US')} (did the module replace built-ins the harness uses?)`,
          },
        };
      return { s: context.getString(r.value) };
    } finally {
      r.value.dispose();
    }
  } finally {
    for (const h of handles) h.dispose();
  }
}

function parseOutcome(s: string): WorkerOutcome {
  try {
    return JSON.parse(s) as WorkerOutcome;
  } catch {
    return { k: 'x', kind: 'crash', message: 'the sandbox returned an unreadable result' };
  }
}

/** What the module printed before it was stopped (a fresh deadline; the engine is about to be thrown away). */
function logsBefore(e: Engine): { logs?: string[]; dropped?: number; loop?: number; site?: number } {
  deadline = Date.now() + 200;
  try {
    const r = call(e, e.drain, []);
    if (r.s === undefined) return {};
    const o = parseOutcome(r.s) as { logs?: string[]; dropped?: number; loop?: number; site?: number };
    return {
      ...(o.logs ? { logs: o.logs } : {}),
      ...(o.dropped ? { dropped: o.dropped } : {}),
      ...(typeof o.loop === 'number' && o.loop >= 0 ? { loop: o.loop } : {}),
      ...(typeof o.site === 'number' && o.site >= 0 ? { site: o.site } : {}),
    };
  } catch {
    return {};
  }
}

async function scoreOne(seq: number, item: [string, string, string], batchDeadline: number): Promise<WorkerOutcome> {
  engine ??= await newEngine();
  const e = engine;
  if (e.loadError) return e.loadError;
  let outcome: WorkerOutcome;
  let broken = false;
  try {
    deadline = Math.min(Date.now() + data.itemTimeoutMs, batchDeadline);
    const first = call(e, e.run, [seq, ...item]);
    if (first.fail) outcome = first.fail;
    else if (first.s !== 'P') {
      outcome = parseOutcome(first.s!);
      // Promise callbacks the rollout left queued (`promise.then(...)` of a score that returned at once) run now,
      // under its own deadline: a loop in one is this rollout's, not the next async rollout's, and none is left behind.
      if (e.runtime.hasPendingJob()) {
        const jobs = e.runtime.executePendingJobs(-1);
        let fail: WorkerOutcome | undefined;
        if (jobs.error) {
          fail = failure(e, jobs.error, 'run');
          jobs.error.dispose();
        }
        // A callback stopped at the deadline ends as a rejection of a promise nobody holds: the jobs "succeed".
        else if (Date.now() > deadline) fail = { k: 'x', kind: 'timeout', message: 'interrupted' };
        if (fail?.k === 'x') outcome = { ...fail, background: true, ...(outcome.logs ? { logs: outcome.logs } : {}) };
      }
    } else {
      // A promise: run the realm's jobs (its awaits) under the same deadline, then take what it settled to.
      const jobs = e.runtime.executePendingJobs(-1);
      if (jobs.error) {
        const fail = failure(e, jobs.error, 'run');
        jobs.error.dispose();
        outcome = fail;
      } else {
        const r = call(e, e.take, [seq]);
        outcome = r.fail ?? parseOutcome(r.s!);
        // Still pending once the deadline passed: the jobs were stopped (a promise chain that never ends), not idle.
        if (outcome.k === 'p' && Date.now() >= deadline)
          outcome = {
            k: 'x',
            kind: 'timeout',
            message: 'interrupted',
            ...(outcome.logs ? { logs: outcome.logs } : {}),
          };
        // Still pending, the jobs gone, the memory full: the chain died of memory (QuickJS drops a job it cannot
        // allocate), not of waiting on nothing.
        else if (outcome.k === 'p' && memoryFull(e))
          outcome = {
            k: 'x',
            kind: 'memory',
            message: 'out of memory',
            ...(outcome.logs ? { logs: outcome.logs } : {}),
          };
      }
    }
    // The engine's own stops, when they reached the module as a rejected promise (an async score function).
    if (outcome.k === 'e' && outcome.name === 'InternalError' && !outcome.nonError) {
      if (outcome.message === 'interrupted')
        outcome = {
          k: 'x',
          kind: 'timeout',
          message: 'interrupted',
          ...(outcome.stack ? { stack: outcome.stack } : {}),
        };
      else if (/^out of memory/.test(outcome.message ?? ''))
        outcome = {
          k: 'x',
          kind: 'memory',
          message: outcome.message!,
          ...(outcome.stack ? { stack: outcome.stack } : {}),
        };
    }
    // Out of memory while making the error itself (QuickJS throws null then: `failure` reads it so when it reaches the
    // host), caught by a promise chain and so arriving as a rejection with null: the memory limit, not the module's throw.
    if (outcome.k === 'e' && outcome.nonError === 'object' && outcome.message === 'null' && memoryFull(e))
      outcome = { k: 'x', kind: 'memory', message: 'out of memory' };
    if (outcome.k === 'x') {
      broken = true;
      const { site: _site, logs, ...before } = logsBefore(e);
      // What it printed before it returned, then what it printed since.
      const all = [...(Array.isArray(outcome.logs) ? outcome.logs : []), ...(logs ?? [])];
      outcome = { ...outcome, ...before, ...(all.length ? { logs: all } : {}) };
    }
  } catch (err) {
    broken = true;
    outcome = engineFailure(err);
  }
  if (broken) {
    dispose(e);
    engine = undefined;
  }
  return outcome;
}

parentPort!.on('message', (msg: ScoreRequest) => {
  void (async () => {
    for (let k = 0; k < msg.items.length; k++) {
      const outcome =
        Date.now() >= msg.batchDeadline
          ? ({ k: 'x', kind: 'timeout', message: 'batch' } as WorkerOutcome)
          : await scoreOne(msg.seq, msg.items[k]!, msg.batchDeadline);
      parentPort!.postMessage({ type: 'result', seq: msg.seq, index: msg.start + k, outcome });
    }
    parentPort!.postMessage({ type: 'done', seq: msg.seq });
  })();
});
