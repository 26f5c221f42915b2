/**
 * The trajectory tag parser (DESIGN §4.1). Total: it never throws, whatever the input. One pass over the text
 * produces
 *  - segments that tile the text exactly (each character belongs to one segment), with character offsets and a
 *    kind: think, search, information, answer, text, feedback (the environment's invalid-action message) or
 *    template (chat-template markers);
 *  - diagnostics with offsets for what is malformed.
 *
 * Segments hold offsets only (no substrings), so memory is proportional to the number of segments.
 *
 * Rules:
 *  - Tags are exactly `<think>`, `</think>`, `<search>`, …, as Search-R1's regexes match them.
 *  - Inside `<information>` everything up to the first `</information>` is document text: retrieved pages do
 *    contain `<answer>` and the like, and they are not actions.
 *  - A block opened inside another (e.g. `<search>` inside `<think>`) is reported as nested; the outer block is
 *    interrupted and resumes after the inner one closes, so segments stay flat.
 *  - An observation (`<information>`, or the invalid-action message) ends the turn: blocks still open there are
 *    reported unclosed (a model that stops at `</search>` inside an unclosed `<think>`).
 *  - A chat-template marker splits the current segment without changing which block is open.
 *  - Text outside blocks that is not whitespace is reported where the Search-R1 format forbids it.
 */

export type BlockKind = 'think' | 'search' | 'information' | 'answer';
export type SegmentKind = BlockKind | 'text' | 'feedback' | 'template';

export interface Segment {
  kind: SegmentKind;
  /** Span in the text, tags included. */
  start: number;
  end: number;
  /** Span of the content (without the tags); equals start/end for text, feedback and template. */
  contentStart: number;
  contentEnd: number;
  /** Whether this segment begins with its own opening tag (false for a block resumed after a nested one). */
  opened: boolean;
  /** Whether this segment ends with its own closing tag. */
  closed: boolean;
  /** Generation turn: 0 until the first observation (information or feedback), then +1 after each. */
  turn: number;
}

export type DiagnosticCode =
  | 'unclosed-tag'
  | 'unopened-close'
  | 'nested-tag'
  | 'text-between-tags'
  | 'missing-answer'
  | 'multiple-answers'
  | 'empty-search'
  | 'searchr1-answer-quirk';

export type Severity = 'error' | 'warning' | 'info';

export interface TagDiagnostic {
  code: DiagnosticCode;
  severity: Severity;
  message: string;
  start: number;
  end: number;
}

export interface ParseOptions {
  /** Report a response without `<answer>` (default true; false for a trajectory still being generated). */
  expectAnswer?: boolean;
  /** Report non-whitespace text outside blocks (default true: Search-R1's format allows only whitespace). */
  strictText?: boolean;
  /** Offset added to every position (when parsing a slice of a larger document). Default 0. */
  offset?: number;
}

export interface ParsedTrajectory {
  /** The text parsed (the caller's string; not copied). */
  text: string;
  /** Where `text` starts in the caller's coordinates: positions below are `offset`-based (ParseOptions.offset). */
  offset: number;
  segments: Segment[];
  diagnostics: TagDiagnostic[];
}

/** Search-R1's invalid-action observation (search_r1/llm_agent/generation.py), without its surrounding newlines. */
export const INVALID_ACTION_MESSAGE =
  'My previous action is invalid. If I want to search, I should put the query between <search> and </search>. ' +
  'If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.';

const BLOCKS: readonly BlockKind[] = ['think', 'search', 'information', 'answer'];
const SLASH = 47; // /
const BAR = 124; // |

/** Roles that follow `<|im_start|>` (ChatML) and belong to the marker. */
const CHATML_ROLE = /^(system|user|assistant|tool|function)\b/;

interface Tag {
  kind: BlockKind;
  closing: boolean;
  length: number;
}

/** The block tag at `i` (text[i] === '<'), or undefined. Character comparisons, no allocation. */
function tagAt(text: string, i: number): Tag | undefined {
  let j = i + 1;
  const closing = text.charCodeAt(j) === SLASH;
  if (closing) j++;
  switch (text.charCodeAt(j)) {
    case 116: // t
      if (text.startsWith('think>', j)) return { kind: 'think', closing, length: j - i + 6 };
      return undefined;
    case 115: // s
      if (text.startsWith('search>', j)) return { kind: 'search', closing, length: j - i + 7 };
      return undefined;
    case 105: // i
      if (text.startsWith('information>', j)) return { kind: 'information', closing, length: j - i + 12 };
      return undefined;
    case 97: // a
      if (text.startsWith('answer>', j)) return { kind: 'answer', closing, length: j - i + 7 };
      return undefined;
    default:
      return undefined;
  }
}

/**
 * Length of the chat-template marker at `i` (text[i] === '<', text[i+1] === '|'), or 0. Markers:
 * `<|name|>` in general; `<|im_start|>role` takes its role word; `<|start_header_id|>role<|end_header_id|>`
 * is one marker.
 */
export function templateMarkerLength(text: string, i: number): number {
  const close = text.indexOf('|>', i + 2);
  if (close < 0 || close - i > 40) return 0;
  for (let k = i + 2; k < close; k++) {
    const c = text.charCodeAt(k);
    const ok = (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95;
    if (!ok) return 0;
  }
  if (close === i + 2) return 0;
  let end = close + 2;
  const name = text.slice(i + 2, close);
  if (name === 'im_start') {
    const m = CHATML_ROLE.exec(text.slice(end, end + 12));
    if (m) end += m[0].length;
  } else if (name === 'start_header_id') {
    const endHeader = text.indexOf('<|end_header_id|>', end);
    if (endHeader >= 0 && endHeader - end <= 40) end = endHeader + '<|end_header_id|>'.length;
  }
  return end - i;
}

function isBlank(text: string, start: number, end: number): boolean {
  for (let k = start; k < end; k++) {
    const c = text.charCodeAt(k);
    // space, \t, \n, \v, \f, \r, NBSP and the Unicode spaces Python's str.strip() removes in practice
    if (!(c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x2028 || c === 0x2029 || c === 0x3000 || (c >= 0x2000 && c <= 0x200a) || c === 0x1680 || c === 0x202f || c === 0x205f || c === 0x85 || c === 0x1c || c === 0x1d || c === 0x1e || c === 0x1f)) {
      return false;
    }
  }
  return true;
}

/** Parses a trajectory (a response, or a whole transcript). Never throws. */
export function parseTrajectory(input: string, options: ParseOptions = {}): ParsedTrajectory {
  const text = typeof input === 'string' ? input : String(input ?? '');
  const strictText = options.strictText ?? true;
  const segments: Segment[] = [];
  const diagnostics: TagDiagnostic[] = [];
  const diag = (code: DiagnosticCode, severity: Severity, message: string, start: number, end: number) =>
    diagnostics.push({ code, severity, message, start, end });
  const tagSpan = (kind: BlockKind, at: number) => [at, Math.min(n, at + kind.length + 2)] as const;

  const n = text.length;
  let turn = 0;
  /** The block now open: where its current segment starts, and whether that segment began with its tag. */
  let open: { kind: BlockKind; segStart: number; contentStart: number; opened: boolean; tagStart: number } | undefined;
  /** Blocks interrupted by a nested open tag, innermost last. */
  const interrupted: { kind: BlockKind; tagStart: number }[] = [];
  /** Start of the pending top-level text segment. */
  let textStart = 0;

  const push = (kind: SegmentKind, start: number, end: number, contentStart: number, contentEnd: number, opened: boolean, closed: boolean) => {
    if (end > start || kind !== 'text') segments.push({ kind, start, end, contentStart, contentEnd, opened, closed, turn });
  };
  const flushText = (upTo: number) => {
    if (upTo <= textStart) return;
    push('text', textStart, upTo, textStart, upTo, false, false);
    if (strictText && !isBlank(text, textStart, upTo)) {
      diag('text-between-tags', 'warning', 'text outside <think>, <search>, <information> and <answer>: the Search-R1 format allows only whitespace between blocks', textStart, upTo);
    }
  };
  /** Ends the open block (and any interrupted ones) without a closing tag, at `at`. */
  const abandon = (at: number, why: string) => {
    if (!open) return;
    push(open.kind, open.segStart, at, open.contentStart, at, open.opened, false);
    diag('unclosed-tag', 'error', `<${open.kind}> is ${why}`, ...tagSpan(open.kind, open.tagStart));
    for (const b of interrupted.splice(0).reverse()) diag('unclosed-tag', 'error', `<${b.kind}> is ${why}`, ...tagSpan(b.kind, b.tagStart));
    open = undefined;
    textStart = at;
  };
  const resumeOrText = (at: number) => {
    const resumed = interrupted.pop();
    if (resumed) open = { kind: resumed.kind, segStart: at, contentStart: at, opened: false, tagStart: resumed.tagStart };
    else {
      open = undefined;
      textStart = at;
    }
  };

  let i = 0;
  let feedback = text.indexOf(INVALID_ACTION_MESSAGE);
  while (i < n) {
    while (feedback >= 0 && feedback < i) feedback = text.indexOf(INVALID_ACTION_MESSAGE, feedback + 1);
    const lt = text.indexOf('<', i);
    if (feedback >= 0 && open?.kind !== 'information' && (lt < 0 || feedback <= lt)) {
      // The environment's invalid-action message: an observation (its tags are not actions).
      if (open) abandon(feedback, 'not closed before the environment’s invalid-action message');
      flushText(feedback);
      const end = feedback + INVALID_ACTION_MESSAGE.length;
      push('feedback', feedback, end, feedback, end, false, false);
      turn++;
      i = textStart = end;
      continue;
    }
    if (lt < 0) break;
    const next = text.charCodeAt(lt + 1);
    if (next === BAR) {
      // A chat-template marker (not inside documents).
      const len = open?.kind === 'information' ? 0 : templateMarkerLength(text, lt);
      if (len > 0) {
        if (open) {
          // Split the open block around the marker; it stays open.
          push(open.kind, open.segStart, lt, open.contentStart, lt, open.opened, false);
          push('template', lt, lt + len, lt, lt + len, false, false);
          open = { ...open, segStart: lt + len, contentStart: lt + len, opened: false };
        } else {
          flushText(lt);
          push('template', lt, lt + len, lt, lt + len, false, false);
          textStart = lt + len;
        }
      }
      i = lt + Math.max(1, len);
      continue;
    }
    const tag = next === SLASH || next === 116 || next === 115 || next === 105 || next === 97 ? tagAt(text, lt) : undefined;
    if (!tag) {
      i = lt + 1;
      continue;
    }
    const tagEnd = lt + tag.length;
    i = tagEnd;

    if (open?.kind === 'information') {
      // Document text: only </information> ends it.
      if (tag.closing && tag.kind === 'information') {
        push('information', open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
        open = undefined;
        textStart = tagEnd;
        turn++;
      }
      continue;
    }
    if (!tag.closing) {
      if (tag.kind === 'information' && open) {
        // An observation ends the turn: whatever the model left open stays unclosed.
        abandon(lt, 'not closed before <information>');
      }
      if (open) {
        diag('nested-tag', 'error', `<${tag.kind}> opened inside <${open.kind}>, which is not closed before it`, lt, tagEnd);
        push(open.kind, open.segStart, lt, open.contentStart, lt, open.opened, false);
        interrupted.push({ kind: open.kind, tagStart: open.tagStart });
      } else {
        flushText(lt);
      }
      open = { kind: tag.kind, segStart: lt, contentStart: tagEnd, opened: true, tagStart: lt };
      continue;
    }
    // A closing tag.
    if (open?.kind === tag.kind) {
      push(open.kind, open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
      if (tag.kind === 'search' && open.opened && isBlank(text, open.contentStart, lt)) diag('empty-search', 'warning', 'empty search query', open.segStart, tagEnd);
      resumeOrText(tagEnd);
      continue;
    }
    let depth = -1;
    for (let k = interrupted.length - 1; k >= 0; k--) if (interrupted[k]!.kind === tag.kind) { depth = k; break; }
    if (open && depth >= 0) {
      // Closes an interrupted outer block: the ones opened since are unclosed.
      diag('unclosed-tag', 'error', `<${open.kind}> is not closed before </${tag.kind}>`, ...tagSpan(open.kind, open.tagStart));
      for (const b of interrupted.splice(depth + 1).reverse()) diag('unclosed-tag', 'error', `<${b.kind}> is not closed before </${tag.kind}>`, ...tagSpan(b.kind, b.tagStart));
      interrupted.pop();
      push(tag.kind, open.segStart, tagEnd, open.segStart, lt, false, true);
      resumeOrText(tagEnd);
      continue;
    }
    diag('unopened-close', 'error', open ? `</${tag.kind}> inside <${open.kind}>, but no <${tag.kind}> is open` : `</${tag.kind}> without an opening <${tag.kind}>`, lt, tagEnd);
    // The stray tag stays part of the current segment (top-level text or the open block's content).
  }
  if (open) abandon(n, 'never closed');
  else flushText(n);

  let answers = 0;
  for (const s of segments) {
    if (s.kind !== 'answer' || !s.opened) continue;
    if (++answers === 2) diag('multiple-answers', 'warning', 'more than one <answer>: Search-R1 acts on the first; the final answer is the last', s.start, s.start + 8);
  }
  if (answers === 0 && (options.expectAnswer ?? true)) diag('missing-answer', 'warning', 'no <answer>: the trajectory ends without a final answer', Math.max(0, n - 1), n);
  diagnostics.sort((a, b) => a.start - b.start || a.end - b.end);

  const base = options.offset ?? 0;
  if (base !== 0) {
    for (const s of segments) {
      s.start += base;
      s.end += base;
      s.contentStart += base;
      s.contentEnd += base;
    }
    for (const d of diagnostics) {
      d.start += base;
      d.end += base;
    }
  }
  return { text, offset: base, segments, diagnostics };
}

/** The content of a segment (a substring made on demand). */
export function contentOf(parsed: ParsedTrajectory, segment: Segment): string {
  return parsed.text.slice(segment.contentStart - parsed.offset, segment.contentEnd - parsed.offset);
}

export { BLOCKS };
