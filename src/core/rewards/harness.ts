/**
 * The code that runs inside the reward sandbox's QuickJS realm before the user's module (sandbox.ts, rewardWorker.ts):
 * a `console` that buffers bounded lines, and the functions the host calls per rollout. Everything the module
 * touches is made here, in the sandbox's own realm: the rollout arrives as strings (its prompt, its response, the rest
 * as JSON parsed inside); the
 * trajectory is built inside by the bundled reward API; what the module returns is read inside (its getters and
 * proxies run under the sandbox's time limit) and leaves as one JSON string of plain data, which the host parses and
 * validates (`decodeOutcome`). No host function exists in the realm.
 *
 * The module runs in the same realm as this harness and can change anything in it (prototypes, globals). The harness
 * takes what it uses before the module's code runs — the built-in functions it calls, and objects without prototypes
 * for what it builds — and writes its JSON itself (no `JSON.stringify` of an object, whose `toJSON` the module could
 * supply), so a module that patches `String.prototype.substring` or `Object.prototype.toJSON` cannot lift the bounds
 * on what it reports. That is hygiene, not the boundary: the module could still falsify its own results, and the
 * host bounds, escapes and checks every field it reads (rewardWorker.ts, outcome.ts) as if the harness said anything.
 */

/** Bounds on a module's console output (also documented in docs/rewards.md). */
export const LOG_LIMITS = {
  /** Characters of one console line (longer lines are cut, with a mark). */
  lineChars: 2_000,
  /** Characters of console output one rollout may print (a line counts at least one); the rest is counted, not kept. */
  itemChars: 8_000,
  /** Characters of console output one batch (a `score` call) passes on; the rest is counted and said once. */
  batchChars: 256 * 1024,
};

/** Bounds on what a module's result may hold. */
export const RESULT_LIMITS = {
  parts: 64,
  partNameChars: 100,
  messageChars: 2_000,
  stackChars: 8_000,
  /** Characters of an error's name. */
  nameChars: 200,
  /**
   * Characters of the whole outcome string one rollout sends out of the sandbox (its result, error and console lines,
   * as JSON). What the bounds above allow stays far below it; a longer one is never read (the rollout fails).
   */
  outcomeChars: 512 * 1024,
};

/** The harness: evaluated as a global script; its value is `[run, take, drain, cut]`. */
export function harnessSource(moduleGlobal: string): string {
  return `(() => {
  'use strict';
  const G = globalThis;
  // Taken before the module runs: it shares this realm and may replace any of them (or their prototypes) later.
  const apply = Reflect.apply;
  const create = Object.create;
  const keysOf = Object.keys;
  const isArray = Array.isArray;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const parse = JSON.parse;
  // Only ever given a primitive string: no toJSON, no replacer, nothing of the module's runs.
  const quote = JSON.stringify;
  const Str = String;
  const ErrorClass = Error;
  const TypeErrorClass = TypeError;
  const hasInstance = Function.prototype[Symbol.hasInstance];
  const substring = String.prototype.substring;
  const isError = (e) => apply(hasInstance, ErrorClass, [e]);
  // Nothing shares memory with this realm (no threads, no Atomics): a SharedArrayBuffer would only be an
  // ArrayBuffer by another name, and the documented realm has none.
  delete G.SharedArrayBuffer;
  const LINE = ${LOG_LIMITS.lineChars}, ITEM = ${LOG_LIMITS.itemChars}, PARTS = ${RESULT_LIMITS.parts};
  const MSG = ${RESULT_LIMITS.messageChars}, STACK = ${RESULT_LIMITS.stackChars}, NAME = ${RESULT_LIMITS.nameChars};
  const PART_NAME = ${RESULT_LIMITS.partNameChars};
  // s: a primitive string (its length and + cannot be changed).
  const cut = (s, n) => (s.length > n ? apply(substring, s, [0, n]) + '… (' + (s.length - n) + ' more characters)' : s);
  // What the harness builds: records without a prototype (no setter of the module's runs when a field is written)
  // and lists (records with a count), written out as JSON by \`json\`.
  const LIST = Symbol('list');
  const rec = () => create(null);
  const list = () => { const l = create(null); l[LIST] = 0; return l; };
  const add = (l, v) => { l[l[LIST]] = v; l[LIST] = l[LIST] + 1; };
  const json = (v) => {
    if (typeof v === 'string') return quote(v);
    if (typeof v === 'number') return v === v && v !== Infinity && v !== -Infinity ? Str(v) : 'null';
    if (typeof v === 'boolean') return v ? 'true' : 'false';
    if (v === null || typeof v !== 'object') return 'null';
    let s = '';
    if (v[LIST] !== undefined) {
      for (let i = 0; i < v[LIST]; i++) s += (i ? ',' : '') + json(v[i]);
      return '[' + s + ']';
    }
    const keys = keysOf(v);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (v[k] !== undefined) s += (s ? ',' : '') + quote(k) + ':' + json(v[k]);
    }
    return '{' + s + '}';
  };
  let logs = list();
  let logChars = 0;
  let dropped = 0;
  const show = (a) => {
    if (typeof a === 'string') return a;
    try {
      const j = quote(a);
      return typeof j === 'string' ? j : Str(a);
    } catch (e) {
      try { return Str(a); } catch (e2) { return '[unprintable ' + typeof a + ']'; }
    }
  };
  const log = (...args) => {
    if (logChars >= ITEM) { dropped++; return; }
    let line = '';
    for (let i = 0; i < args.length; i++) {
      const part = show(args[i]);
      line += (i ? ' ' : '') + (typeof part === 'string' ? part : '');
      if (line.length > LINE) break;
    }
    line = cut(line, LINE);
    add(logs, line);
    // An empty line counts as one character: a million of them are bounded too.
    logChars += line.length || 1;
  };
  const con = freeze({ __proto__: null, log, info: log, warn: log, error: log, debug: log, trace: log });
  defineProperty(G, 'console', { __proto__: null, value: con, writable: false, enumerable: false, configurable: false });
  // The location of the last non-Error value thrown by the module's own \`throw\` statements (compile.ts rewrites
  // \`throw x\` as \`throw __sasThrow(site, x)\`), so that \`throw 'x'\` can be reported with its file and line.
  let lastThrown;
  let lastSite = -1;
  // The loop of the module's own code that runs now (compile.ts sets it as a loop's body starts): a time limit names it.
  defineProperty(G, '__sasLoop', { __proto__: null, value: -1, writable: true, enumerable: false, configurable: false });
  defineProperty(G, '__sasThrow', {
    __proto__: null,
    value: (site, v) => { lastThrown = v; lastSite = site; return v; },
    writable: false, enumerable: false, configurable: false,
  });
  const text = (v, n) => { try { return cut(Str(v), n); } catch (e) { return '[unprintable]'; } };
  const describe = (e) => {
    // Where it was thrown, before reading it runs any code of the module's (a getter that throws moves lastThrown).
    const site = e === lastThrown ? lastSite : -1;
    const out = rec();
    out.k = 'e';
    try {
      if (isError(e)) {
        out.name = text(e.name, NAME);
        out.message = text(e.message, MSG);
        const stack = e.stack;
        out.stack = typeof stack === 'string' ? cut(stack, STACK) : '';
      } else {
        out.nonError = typeof e;
        out.message = cut(e === null ? 'null' : typeof e === 'object' ? show(e) : text(e, MSG), MSG);
      }
    } catch (e2) {
      out.message = 'an unreadable value was thrown';
    }
    if (site >= 0 && !out.stack) out.site = site;
    return out;
  };
  const number = (v) => {
    const o = rec();
    o.t = typeof v === 'number' ? 'number' : v === null ? 'null' : isArray(v) ? 'array' : typeof v;
    if (typeof v === 'number') o.n = Str(v);
    return o;
  };
  const result = (v) => {
    try {
      const out = rec();
      out.k = 'v';
      if (typeof v === 'number' || v === null || typeof v !== 'object' || !('reward' in v)) {
        out.r = number(v);
        return out;
      }
      out.r = number(v.reward);
      out.obj = true;
      const parts = v.parts;
      if (parts !== undefined) {
        if (parts === null || typeof parts !== 'object' || isArray(parts)) out.parts = number(parts);
        else {
          const keys = keysOf(parts);
          if (keys.length > PARTS) out.tooMany = keys.length;
          else {
            const l = list();
            for (let i = 0; i < keys.length; i++) {
              const pair = list();
              add(pair, cut(Str(keys[i]), PART_NAME));
              add(pair, number(parts[keys[i]]));
              add(l, pair);
            }
            out.parts = l;
          }
        }
      }
      return out;
    } catch (e) {
      return describe(e);
    }
  };
  // The promise of the rollout now running: its seq and what it settled to (the first settlement only).
  let pendingSeq = -1;
  let pendingOutcome;
  const finish = (o) => {
    o.logs = logs;
    if (dropped) o.dropped = dropped;
    logs = list();
    logChars = 0;
    dropped = 0;
    return json(o);
  };
  let mod;
  const run = (seq, prompt, response, itemJson) => {
    lastThrown = undefined;
    lastSite = -1;
    G.__sasLoop = -1;
    pendingSeq = -1;
    pendingOutcome = undefined;
    let out;
    try {
      mod = mod || G[${JSON.stringify(moduleGlobal)}];
      const def = mod && mod.default;
      if (!def || typeof def.score !== 'function') throw new TypeErrorClass('the module has no default export made with defineReward({ name, score })');
      const item = parse(itemJson);
      const traj = mod.makeTrajectory(prompt, response, { dialect: item.dialect, searchTool: item.searchTool, strictActions: item.strictActions, spans: item.spans });
      const example = { golden: item.golden, question: item.question, data_source: item.data_source, meta: item.meta };
      out = def.score(traj, example);
      if (out !== null && (typeof out === 'object' || typeof out === 'function') && typeof out.then === 'function') {
        pendingSeq = seq;
        const settle = (o) => {
          if (pendingSeq === seq && pendingOutcome === undefined) pendingOutcome = o;
        };
        out.then((v) => settle(result(v)), (e) => settle(describe(e)));
        return 'P';
      }
    } catch (e) {
      return finish(describe(e));
    }
    return finish(result(out));
  };
  // After the host ran the pending jobs: the settled outcome of a promise, or { k: 'p' } if it never settled.
  const take = (seq) => {
    let o = seq === pendingSeq ? pendingOutcome : undefined;
    pendingSeq = -1;
    pendingOutcome = undefined;
    if (!o) {
      o = rec();
      o.k = 'p';
    }
    return finish(o);
  };
  // What the module printed before the host stopped it (a timeout), and the loop it was in.
  const drain = () => {
    const o = rec();
    o.k = 'l';
    o.loop = typeof G.__sasLoop === 'number' ? G.__sasLoop : -1;
    o.site = lastSite;
    return finish(o);
  };
  // The first n characters of a string the host reads (an error's message, say), so that only they cross.
  const cutText = (s, n) => (typeof s === 'string' ? cut(s, n) : '');
  return [run, take, drain, cutText];
})()`;
}

/** One rollout's outcome as the harness sends it (untrusted: decodeOutcome checks every field). */
export type RawOutcome =
  | {
      k: 'v';
      r: RawNumber;
      obj?: boolean;
      parts?: [string, RawNumber][] | RawNumber;
      tooMany?: number;
      logs?: string[];
      dropped?: number;
    }
  | {
      k: 'e';
      name?: string;
      message?: string;
      stack?: string;
      nonError?: string;
      site?: number;
      logs?: string[];
      dropped?: number;
    }
  | { k: 'p'; logs?: string[]; dropped?: number };
type RawNumber = { t: string; n?: string };
