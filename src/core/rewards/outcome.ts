/**
 * Reading one rollout's outcome on the host (sandbox.ts): what the sandbox thread (rewardWorker.ts) passes on from
 * the harness (harness.ts) — data the module shaped as it liked, since it shares the harness's realm. Nothing in it is
 * trusted: every field is checked for its type, every text is bounded, its control characters escaped and copied out
 * (a cut of a string must not keep the whole string alive), names and numbers are checked, and anything unreadable
 * is that rollout's error — never the batch's.
 */

import type { SourceMap } from 'node:module';
import { dirname, resolve } from 'node:path';
import { BUNDLE_NAME, type CompiledReward, inside } from './compile';
import { RESULT_LIMITS } from './harness';
import type { RewardError, RewardErrorKind } from './report';

export type OutcomeBody = { reward: number; parts: Record<string, number> } | { error: RewardError };

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it escapes
const CONTROL_CHARACTERS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text from the module, safe to print: control characters (a terminal's escape sequences among them) shown as
 * `\x1b`-style escapes; newlines and tabs kept.
 */
export function printable(s: string): string {
  return s.replace(CONTROL_CHARACTERS, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * A copy of a string that shares no memory with it. V8 makes a cut of a long string (`slice`, `substring`, and what
 * `replace` or a template returns unchanged) a view that keeps the whole original alive: 2,000 characters kept of a
 * 20 MB message would keep the 20 MB (the issue's host, out of memory after ~100 such rollouts). A round trip through
 * a buffer makes a new string of just those characters (lone surrogates included: UTF-16 code units as they are).
 */
export function detach(s: string): string {
  return s.length ? Buffer.from(s, 'utf16le').toString('utf16le') : '';
}

/** Room for the harness's own cut mark (`… (N more characters)`) past a limit. */
const MARK = 64;

/**
 * Text the sandbox sent, as the host keeps it: a string or nothing; at most `max` characters (plus the harness's cut
 * mark) once its control characters are escaped — longer text is cut here, said so — and a detached copy.
 */
export function boundedText(v: unknown, max: number): string | undefined {
  if (typeof v !== 'string') return undefined;
  const limit = max + MARK;
  let out = printable(v.length > limit ? v.slice(0, limit) : v);
  if (out.length > limit || v.length > limit)
    out = `${out.slice(0, max)}… (cut at ${max.toLocaleString('en-US')} characters)`;
  return detach(out);
}

/** What the module's value was, for messages: only the harness's own words (anything else is unreadable). */
const TYPE_WORDS: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  boolean: 'a boolean',
  undefined: 'undefined',
  object: 'an object',
  symbol: 'a symbol',
  bigint: 'a bigint',
  function: 'a function',
};
const DESCRIBED: Record<string, string> = {
  ...Object.fromEntries(Object.keys(TYPE_WORDS).map((t) => [t, t])),
  null: 'null',
  array: 'an array',
};
const own = (o: object, k: unknown): k is string => typeof k === 'string' && Object.hasOwn(o, k);

function described(r: unknown): string {
  const t = r && typeof r === 'object' ? (r as { t?: unknown }).t : undefined;
  return own(DESCRIBED, t) ? DESCRIBED[t]! : 'an unreadable value';
}

/** A number the harness sent (`{ t: 'number', n: String(x) }`), or undefined if it was not one. */
function numberOf(r: unknown): number | undefined {
  const o = r as { t?: unknown; n?: unknown };
  if (!o || typeof o !== 'object' || o.t !== 'number' || typeof o.n !== 'string' || o.n.length > 64) return undefined;
  return Number(o.n);
}

/** A column of the instrumented bundle as a column of the bundle the source map describes (compile.ts `shifts`). */
function unshift(compiled: CompiledReward, line: number, col: number): number {
  const shifts = compiled.shifts?.[line];
  if (!shifts) return col;
  let out = col;
  for (const [at, len] of shifts) if (at + len <= col) out -= len;
  return out;
}

/** Maps a stack trace of the bundle to the user's file and line (the first frame in their code). */
export function locate(
  stack: string | undefined,
  compiled: CompiledReward,
  map: SourceMap,
  apiPath?: string,
): { file?: string; line?: number; column?: number; stack?: string } {
  if (!stack) return {};
  const frames: string[] = [];
  let first: { file: string; line: number; column: number } | undefined;
  const re = new RegExp(`${BUNDLE_NAME.replace('.', '\\.')}:(\\d+)(?::(\\d+))?`);
  for (const line of stack.split('\n')) {
    if (/sas-harness\.js/.test(line)) continue;
    const m = re.exec(line);
    if (!m) {
      if (line.trim() && !/^\s+at /.test(line)) frames.push(line);
      continue;
    }
    const genLine = Number(m[1]) - 1;
    const genCol = m[2] ? unshift(compiled, genLine, Number(m[2]) - 1) : 0;
    const entry = map.findEntry(genLine, genCol) as {
      originalSource?: string;
      originalLine?: number;
      originalColumn?: number;
    };
    if (!entry.originalSource) continue;
    const file = resolve(dirname(compiled.file), entry.originalSource);
    const where = `${file}:${(entry.originalLine ?? 0) + 1}:${(entry.originalColumn ?? 0) + 1}`;
    frames.push(
      line.replace(new RegExp(`\\(?[^ (]*${BUNDLE_NAME.replace('.', '\\.')}:\\d+(?::\\d+)?\\)?`), `(${where})`),
    );
    // The location is the first frame in the module's own folder (never the reward API's code).
    if (!first && inside(dirname(compiled.file), file) && !(apiPath && file === apiPath))
      first = { file, line: (entry.originalLine ?? 0) + 1, column: (entry.originalColumn ?? 0) + 1 };
  }
  return { ...first, stack: frames.join('\n') };
}

export interface DecodeContext {
  compiled: CompiledReward;
  map: SourceMap;
  apiPath?: string;
  itemTimeoutMs: number;
  batchTimeoutMs: number;
  memoryMb: number;
  /** Epoch ms: the batch's deadline (a timeout near it is the batch's, not the rollout's). */
  batchDeadline: number;
}

const RESERVED_PARTS = new Set(['__proto__', 'constructor', 'prototype']);

/** A site the compiled module recorded (compile.ts `throwSites`, `loopSites`), by the index the sandbox sent. */
const siteOf = (sites: CompiledReward['throwSites'], i: unknown) =>
  typeof i === 'number' && Number.isInteger(i) && i >= 0 && sites ? sites[i] : undefined;

/**
 * The outcome of one rollout, from what the sandbox thread sent (untrusted: the module shaped it). Never throws:
 * whatever it is, the result is a reward with bounded parts or an error of bounded, printable text.
 */
export function decodeOutcome(raw: unknown, c: DecodeContext): OutcomeBody {
  try {
    return decode(raw && typeof raw === 'object' ? (raw as Record<string, unknown>) : {}, c);
  } catch {
    return { error: { kind: 'crash', message: 'the sandbox returned an unreadable result' } };
  }
}

function decode(o: Record<string, unknown>, c: DecodeContext): OutcomeBody {
  const { compiled } = c;
  const err = (kind: RewardErrorKind, message: string, stack?: unknown): { error: RewardError } => {
    const located = locate(boundedText(stack, RESULT_LIMITS.stackChars), compiled, c.map, c.apiPath);
    return { error: { kind, message, ...located } };
  };
  switch (o.k) {
    case 'v': {
      const r = numberOf(o.r);
      if (r === undefined)
        return err(
          'type',
          `returned ${o.obj === true ? `{ reward: ${described(o.r)} }` : described(o.r)} (expected a number or { reward, parts })`,
        );
      if (!Number.isFinite(r)) return err('nan', `returned ${r}`);
      const parts: Record<string, number> = {};
      if (o.tooMany !== undefined) {
        const n = typeof o.tooMany === 'number' && Number.isFinite(o.tooMany) ? o.tooMany : undefined;
        return err('type', `parts has ${n === undefined ? 'too many' : n} entries (at most ${RESULT_LIMITS.parts})`);
      }
      if (o.parts !== undefined) {
        if (!Array.isArray(o.parts)) return err('type', 'parts must be an object of numbers');
        if (o.parts.length > RESULT_LIMITS.parts)
          return err('type', `parts has ${o.parts.length} entries (at most ${RESULT_LIMITS.parts})`);
        for (const p of o.parts as unknown[]) {
          const [key, val] = Array.isArray(p) ? (p as unknown[]) : [];
          if (typeof key !== 'string') return err('type', 'parts must be an object of numbers');
          if (key.length > RESULT_LIMITS.partNameChars)
            return err(
              'type',
              `parts: a part's name is longer than ${RESULT_LIMITS.partNameChars} characters ("${boundedText(key.slice(0, 40), 40)}…")`,
            );
          if (RESERVED_PARTS.has(key)) return err('type', `parts.${key}: a part cannot be named ${key}`);
          // Control characters escaped (a name is printed, and becomes a metric's name).
          const name = detach(printable(key));
          const x = numberOf(val);
          if (x === undefined || !Number.isFinite(x))
            return err('type', `parts.${name} is ${x === undefined ? described(val) : x} (expected a finite number)`);
          parts[name] = x;
        }
      }
      return { reward: r, parts };
    }
    case 'e': {
      const name = boundedText(o.name, RESULT_LIMITS.nameChars);
      const message = boundedText(o.message, RESULT_LIMITS.messageChars) ?? '';
      const site = siteOf(compiled.throwSites, o.site);
      const at = site ? { file: site.file, line: site.line, column: site.column } : {};
      if (typeof o.nonError === 'string') {
        const what = own(TYPE_WORDS, o.nonError) ? TYPE_WORDS[o.nonError]! : 'a value';
        return {
          error: { kind: 'throw', message: `threw ${what}${o.nonError === 'undefined' ? '' : `: ${message}`}`, ...at },
        };
      }
      const e = err('throw', `${name ? `${name}: ` : ''}${message}`, o.stack);
      return e.error.file ? e : { error: { ...e.error, ...at } };
    }
    case 'p':
      return err(
        'timeout',
        'returned a promise that never settled (nothing in the sandbox — no timers, no I/O — could ever settle it)',
      );
    case 'x': {
      const message = boundedText(o.message, RESULT_LIMITS.messageChars) ?? '';
      const load = o.load === true;
      // After the rollout returned: a promise callback it left queued ran into the limit.
      const after = o.background === true ? ' (in a promise callback it left running after it returned)' : '';
      // A limit that stopped a loop of the module's own code names that loop (QuickJS's frames name only the function).
      const loop = siteOf(compiled.loopSites, o.loop);
      const errAt = (kind: RewardErrorKind, text: string): { error: RewardError } => {
        const e = err(kind, text, o.stack);
        return loop ? { error: { ...e.error, file: loop.file, line: loop.line, column: loop.column } } : e;
      };
      if (o.kind === 'timeout') {
        if (Date.now() >= c.batchDeadline - 50 || message === 'batch')
          return errAt('batch-timeout', `the batch did not finish within ${c.batchTimeoutMs} ms`);
        return errAt(
          'timeout',
          load
            ? `the module's top-level code did not finish within ${c.itemTimeoutMs} ms`
            : `did not finish within ${c.itemTimeoutMs} ms${after}`,
        );
      }
      if (o.kind === 'memory')
        return errAt(
          'memory',
          `${load ? "the module's top-level code " : ''}ran out of memory (the limit is ${c.memoryMb} MB)${after}`,
        );
      return errAt('crash', message || 'the sandbox failed');
    }
    default:
      return err('crash', 'the sandbox returned an unreadable result');
  }
}
