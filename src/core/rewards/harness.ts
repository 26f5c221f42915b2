/**
 * The code that runs inside the reward sandbox's QuickJS realm before the user's module (sandbox.ts, rewardWorker.ts):
 * a `console` that buffers bounded lines, and the two functions the host calls per rollout. Everything the module
 * touches is made here, in the sandbox's own realm: the rollout arrives as strings (its prompt, its response, the rest
 * as JSON parsed inside); the
 * trajectory is built inside by the bundled reward API; what the module returns is read inside (its getters and
 * proxies run under the sandbox's time limit) and leaves as one JSON string of plain data, which the host parses and
 * validates (`decodeOutcome`). No host function exists in the realm.
 *
 * The module runs in the same realm as this harness and can change anything in it (prototypes, globals): that can
 * only falsify its own results, which is what a reward module decides anyway. The host trusts nothing it reads back.
 */

/** Bounds on a module's console output (also documented in docs/rewards.md). */
export const LOG_LIMITS = {
  /** Characters of one console line (longer lines are cut, with a mark). */
  lineChars: 2_000,
  /** Characters of console output one rollout may print; the rest is counted, not kept. */
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
};

/** The harness: evaluated as a global script; its value is `[run, take]`. */
export function harnessSource(moduleGlobal: string): string {
  return `(() => {
  'use strict';
  const G = globalThis;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const Str = String;
  const keysOf = Object.keys;
  const isArray = Array.isArray;
  const LINE = ${LOG_LIMITS.lineChars}, ITEM = ${LOG_LIMITS.itemChars}, PARTS = ${RESULT_LIMITS.parts};
  const MSG = ${RESULT_LIMITS.messageChars}, STACK = ${RESULT_LIMITS.stackChars};
  const cut = (s, n) => (s.length > n ? s.substring(0, n) + '… (' + (s.length - n) + ' more characters)' : s);
  let logs = [];
  let logChars = 0;
  let dropped = 0;
  const show = (a) => {
    if (typeof a === 'string') return a;
    try {
      const j = stringify(a);
      return typeof j === 'string' ? j : Str(a);
    } catch (e) {
      try { return Str(a); } catch (e2) { return '[unprintable ' + typeof a + ']'; }
    }
  };
  const log = (...args) => {
    if (logChars >= ITEM) { dropped++; return; }
    let line = '';
    for (let i = 0; i < args.length; i++) {
      line += (i ? ' ' : '') + show(args[i]);
      if (line.length > LINE) break;
    }
    line = cut(line, LINE);
    logs.push(line);
    logChars += line.length;
  };
  const con = Object.freeze({ log, info: log, warn: log, error: log, debug: log, trace: log });
  Object.defineProperty(G, 'console', { value: con, writable: false, enumerable: false, configurable: false });
  // The location of the last non-Error value thrown by the module's own \`throw\` statements (compile.ts rewrites
  // \`throw x\` as \`throw __sasThrow(site, x)\`), so that \`throw 'x'\` can be reported with its file and line.
  let lastThrown;
  let lastSite = -1;
  // The loop of the module's own code that runs now (compile.ts sets it as a loop's body starts): a time limit names it.
  Object.defineProperty(G, '__sasLoop', { value: -1, writable: true, enumerable: false, configurable: false });
  Object.defineProperty(G, '__sasThrow', {
    value: (site, v) => { lastThrown = v; lastSite = site; return v; },
    writable: false, enumerable: false, configurable: false,
  });
  const text = (v, n) => { try { return cut(Str(v), n); } catch (e) { return '[unprintable]'; } };
  const describe = (e) => {
    const out = { k: 'e' };
    try {
      if (e instanceof Error) {
        out.name = text(e.name, 200);
        out.message = text(e.message, MSG);
        out.stack = typeof e.stack === 'string' ? cut(e.stack, STACK) : '';
      } else {
        out.nonError = typeof e;
        out.message = e === null ? 'null' : typeof e === 'object' ? show(e) : text(e, MSG);
        out.message = cut(out.message, MSG);
        if (e === lastThrown && lastSite >= 0) out.site = lastSite;
      }
    } catch (e2) {
      out.message = 'an unreadable value was thrown';
    }
    return out;
  };
  const number = (v) => (typeof v === 'number' ? { t: 'number', n: Str(v) } : { t: v === null ? 'null' : isArray(v) ? 'array' : typeof v });
  const result = (v) => {
    try {
      if (typeof v === 'number') return { k: 'v', r: number(v) };
      if (v === null || typeof v !== 'object' || !('reward' in v)) return { k: 'v', r: number(v) };
      const out = { k: 'v', r: number(v.reward), obj: true };
      const parts = v.parts;
      if (parts !== undefined) {
        if (parts === null || typeof parts !== 'object' || isArray(parts)) out.parts = number(parts);
        else {
          const keys = keysOf(parts);
          if (keys.length > PARTS) out.tooMany = keys.length;
          else {
            out.parts = [];
            for (const key of keys) out.parts.push([cut(Str(key), ${RESULT_LIMITS.partNameChars}), number(parts[key])]);
          }
        }
      }
      return out;
    } catch (e) {
      return describe(e);
    }
  };
  const settled = new Map();
  const finish = (o) => {
    o.logs = logs;
    if (dropped) o.dropped = dropped;
    logs = [];
    logChars = 0;
    dropped = 0;
    return stringify(o);
  };
  let mod;
  const run = (seq, prompt, response, json) => {
    lastThrown = undefined;
    lastSite = -1;
    G.__sasLoop = -1;
    let out;
    try {
      mod = mod || G[${JSON.stringify(moduleGlobal)}];
      const def = mod && mod.default;
      if (!def || typeof def.score !== 'function') throw new TypeError('the module has no default export made with defineReward({ name, score })');
      const item = parse(json);
      const traj = mod.makeTrajectory(prompt, response, { dialect: item.dialect, searchTool: item.searchTool, strictActions: item.strictActions, spans: item.spans });
      const example = { golden: item.golden, question: item.question, data_source: item.data_source, meta: item.meta };
      out = def.score(traj, example);
      if (out !== null && (typeof out === 'object' || typeof out === 'function') && typeof out.then === 'function') {
        settled.set(seq, null);
        out.then((v) => settled.set(seq, result(v)), (e) => settled.set(seq, describe(e)));
        return 'P';
      }
    } catch (e) {
      return finish(describe(e));
    }
    return finish(result(out));
  };
  // After the host ran the pending jobs: the settled outcome of a promise, or { k: 'p' } if it never settled.
  const take = (seq) => {
    const o = settled.get(seq);
    settled.delete(seq);
    return finish(o || { k: 'p' });
  };
  // What the module printed before the host stopped it (a timeout), and the loop it was in.
  const drain = () => finish({ k: 'l', loop: typeof G.__sasLoop === 'number' ? G.__sasLoop : -1, site: lastSite });
  return [run, take, drain];
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
