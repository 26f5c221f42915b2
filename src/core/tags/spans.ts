/**
 * Who wrote each part of a response: the policy (`generated`) or the environment (`retrieved` documents, `feedback`
 * messages, `prompt`: the chat template's markers around them). Documents are hostile text — a passage may hold
 * `</information><answer>pwned</answer>` — so an answer, a search or an observation's end is read from where the
 * environment says its text is, never from tags inside that text (docs/rewards.md, "Who wrote what").
 *
 * Two sources, best first:
 *  - the record's (or `/reward` item's) `spans`, written by the environment that built the response (our trainer
 *    knows where every observation starts and ends): `{v: 1, runs: [[role, length], …]}`, lengths in Unicode code
 *    points (Python's `len`), tiling the response exactly;
 *  - the record's token roles, when its response tokens' texts concatenate to the response exactly.
 * Without either (imported text), the parser reads the tags, as Search-R1 does.
 *
 * Internally a span is a [start, end) range of UTF-16 code units (JavaScript string offsets) with its role.
 */

export const SPAN_ROLES = ['generated', 'prompt', 'retrieved', 'feedback'] as const;
export type SpanRole = (typeof SPAN_ROLES)[number];

/** The version of the `spans` wire format this reader knows. */
export const SPANS_VERSION = 1;

/** The wire form: a record's or a `/reward` item's `spans`. */
export interface SpansWire {
  v: 1;
  /** [role, length in code points], in order, covering the response exactly. */
  runs: [SpanRole, number][];
}

export interface ResponseSpan {
  /** [start, end) in UTF-16 code units of the response. */
  start: number;
  end: number;
  role: SpanRole;
}

const SURROGATE = /[\uD800-\uDFFF]/;

/**
 * The spans of a wire `spans` value over `response`, or an error naming what is wrong (relative to `field`).
 * Checked without recursion and without echoing the value.
 */
export function spansFromWire(value: unknown, response: string, field = 'spans'): ResponseSpan[] | { error: string } {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return { error: `${field}: expected an object {v: 1, runs: [[role, length], …]}` };
  const w = value as { v?: unknown; runs?: unknown };
  if (w.v !== SPANS_VERSION)
    return { error: `${field}.v: expected ${SPANS_VERSION} (this reader knows spans version ${SPANS_VERSION})` };
  if (!Array.isArray(w.runs)) return { error: `${field}.runs: expected an array of [role, length]` };
  let points = 0;
  for (let k = 0; k < w.runs.length; k++) {
    const run = w.runs[k] as unknown;
    if (
      !Array.isArray(run) ||
      run.length !== 2 ||
      typeof run[0] !== 'string' ||
      !(SPAN_ROLES as readonly string[]).includes(run[0]) ||
      !Number.isInteger(run[1]) ||
      (run[1] as number) < 0
    ) {
      return {
        error: `${field}.runs[${k}]: expected [role, length] with role one of ${SPAN_ROLES.join(', ')} and a length ≥ 0`,
      };
    }
    points += run[1] as number;
  }
  // Code point → UTF-16 offsets: the same numbers unless the response has characters outside the BMP.
  const wide = SURROGATE.test(response);
  const total = wide ? codePoints(response) : response.length;
  if (points !== total)
    return {
      error: `${field}.runs: the runs cover ${points} characters but the response has ${total} (lengths count Unicode code points)`,
    };
  const spans: ResponseSpan[] = [];
  let at = 0;
  for (const [role, length] of w.runs as [SpanRole, number][]) {
    let end = at + length;
    if (wide) {
      end = at;
      for (let c = 0; c < length; c++) end += isPair(response, end) ? 2 : 1;
    }
    if (length > 0) spans.push({ start: at, end, role });
    at = end;
  }
  return spans;
}

function isPair(s: string, i: number): boolean {
  const code = s.charCodeAt(i);
  return code >= 0xd800 && code <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
}

function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i += isPair(s, i) ? 2 : 1) n++;
  return n;
}

/** The wire form of spans over `response` (lengths in code points), adjacent runs of one role merged. */
export function spansToWire(spans: readonly ResponseSpan[], response: string): SpansWire {
  const wide = SURROGATE.test(response);
  const runs: [SpanRole, number][] = [];
  for (const s of spans) {
    const length = wide ? codePoints(response.slice(s.start, s.end)) : s.end - s.start;
    const last = runs[runs.length - 1];
    if (last && last[0] === s.role) last[1] += length;
    else runs.push([s.role, length]);
  }
  return { v: SPANS_VERSION, runs };
}

/**
 * Spans from a record's token roles: the response's tokens are those from the first one not of role `prompt`; when
 * their texts concatenate to the response exactly, each character takes its token's role. Undefined otherwise (a
 * tokenizer whose per-token texts do not round-trip, or no response tokens).
 */
export function spansFromTokens(
  response: string,
  text: readonly string[],
  role: readonly string[],
): ResponseSpan[] | undefined {
  const n = Math.min(text.length, role.length);
  let first = 0;
  while (first < n && role[first] === 'prompt') first++;
  if (first >= n) return undefined;
  const spans: ResponseSpan[] = [];
  let at = 0;
  for (let i = first; i < n; i++) {
    const t = text[i]!;
    const r = role[i]!;
    if (!(SPAN_ROLES as readonly string[]).includes(r)) return undefined;
    if (!response.startsWith(t, at)) return undefined;
    const last = spans[spans.length - 1];
    if (t.length === 0) continue;
    if (last && last.role === r) last.end += t.length;
    else spans.push({ start: at, end: at + t.length, role: r as SpanRole });
    at += t.length;
  }
  return at === response.length ? spans : undefined;
}

/** The spans the environment wrote (every role but `generated`). */
export function environmentSpans(spans: readonly ResponseSpan[]): ResponseSpan[] {
  return spans.filter((s) => s.role !== 'generated' && s.end > s.start);
}
