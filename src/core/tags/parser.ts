/**
 * The trajectory parser (DESIGN §4.1). Total: it never throws, whatever the input. One pass over the text
 * produces
 *  - segments that tile the text exactly (each character belongs to one segment), with character offsets and a
 *    kind: think, search, information, answer, text, feedback (the environment's invalid-action message or error
 *    reply) or template (chat-template markers);
 *  - diagnostics with offsets for what is malformed.
 *
 * Three dialects map onto the same segments, so rewards, the inspector and the replay do not care which one a run
 * used:
 *  - `searchr1`: Search-R1's tags, `<search>q</search>` answered by `<information>…</information>`;
 *  - `toolcall`: the chat template's tool calls (Qwen2.5/Qwen3/Hermes), `<tool_call>{"name": "search",
 *    "arguments": {"query": …}}</tool_call>` (a `search` segment; several per turn are parallel calls) answered by
 *    `<tool_response>…</tool_response>` in the next user or `tool` turn (an `information` segment, or `feedback`
 *    when it answers an invalid call or is an error reply); a `tool` turn without those tags is one response;
 *  - `llama-json`: Llama 3.1/3.2 JSON tool calls, an assistant message that is a JSON object `{"name": …,
 *    "parameters": {…}}` (a `search` segment) answered by an `ipython` turn (an `information` segment).
 * In all three, `<think>` and `<answer>` are as Search-R1 writes them and the final answer is the last `<answer>`.
 * The dialect is detected ({@link detectDialect}) unless given.
 *
 * Segments hold offsets only (no substrings), so memory is proportional to the number of segments; a tool call's
 * decoded name and query (JSON, not a substring) are kept on its segment.
 *
 * Rules:
 *  - Tags are exactly `<think>`, `</think>`, `<search>`, …, as Search-R1's regexes match them.
 *  - Inside an observation (`<information>`, `<tool_response>`, a `tool`/`ipython` turn) everything up to its end is
 *    document text: retrieved pages do contain `<answer>`, `<tool_call>` and the like, and they are not actions.
 *  - A block opened inside another (e.g. `<search>` inside `<think>`) is reported as nested; the outer block is
 *    interrupted and resumes after the inner one closes, so segments stay flat.
 *  - An observation (or the invalid-action message) ends the turn: blocks still open there are reported unclosed
 *    (a model that stops at `</search>` inside an unclosed `<think>`).
 *  - `searchr1`: a chat-template marker splits the current segment without changing which block is open.
 *    Tool-call dialects: a marker ends the message, so blocks still open are unclosed; only assistant messages act
 *    (the tools preamble's example call in the system message is not an action); text in a user or tool message
 *    is the environment's (`feedback`); role words left on their own line by a decoder that dropped the special
 *    tokens (veRL's and TRL's dumps: `</tool_call>user\n<tool_response>`) are `template`.
 *  - Text outside blocks that is not whitespace is reported where the Search-R1 format forbids it.
 */
import { chatMarker, jsonValueEnd, templateMarkerLength } from './markers';
import type { BlockKind, DiagnosticCode, Dialect, Segment, SegmentKind, Severity, TagDiagnostic } from './segments';
import type { ResponseSpan } from './spans';
import { annotateToolCalls } from './toolcall';

export { templateMarkerLength };
export { DIALECTS } from './segments';
export type { BlockKind, DiagnosticCode, Dialect, Segment, SegmentKind, Severity, TagDiagnostic, ToolCall } from './segments';

export interface ParseOptions {
  /** Report a response without `<answer>` (default true; false for a trajectory still being generated). */
  expectAnswer?: boolean;
  /**
   * Report non-whitespace text outside blocks (default: true for `searchr1`, whose format allows only whitespace;
   * false for the tool-call dialects, where text before a call is ordinary).
   */
  strictText?: boolean;
  /** Offset added to every position (when parsing a slice of a larger document). Default 0. */
  offset?: number;
  /** The dialect; `auto` (default) detects it from the text ({@link detectDialect}). */
  dialect?: Dialect | 'auto';
  /** Tool-call dialects: the search tool's name (default `search`); its query is `arguments.query`. */
  searchTool?: string;
  /** Tool-call dialects: other tools the prompt declares (a call to one is a valid action, not a search). */
  tools?: readonly string[];
  /** The prompt left a `<think>` open (Qwen3 thinking and R1-style templates end the prompt with `<think>\n`). */
  openThink?: boolean;
  /**
   * Who wrote each part of the text (spans.ts): sorted, non-overlapping ranges of `text` (before `offset`). When
   * given, the environment's spans are observations by their role whatever tags they hold — `retrieved` an
   * information segment, `feedback` a feedback segment, `prompt` a template segment — and only the policy's
   * (`generated`) text is parsed for actions: a document holding `</information><answer>x</answer>` cannot close its
   * block or answer, and the policy cannot open an observation.
   */
  spans?: readonly ResponseSpan[];
}

export interface ParsedTrajectory {
  /** The text parsed (the caller's string; not copied). */
  text: string;
  /** Where `text` starts in the caller's coordinates: positions below are `offset`-based (ParseOptions.offset). */
  offset: number;
  dialect: Dialect;
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
const BRACE = 123; // {


/** How each dialect writes a block's tag (in messages; llama-json's calls and responses have no tags). */
const TAG_NAME: Record<Dialect, Record<BlockKind, string>> = {
  searchr1: { think: 'think', search: 'search', information: 'information', answer: 'answer' },
  toolcall: { think: 'think', search: 'tool_call', information: 'tool_response', answer: 'answer' },
  'llama-json': { think: 'think', search: 'tool call', information: 'ipython', answer: 'answer' },
};

interface Tag {
  kind: BlockKind;
  closing: boolean;
  length: number;
}

/** The block tag at `i` (text[i] === '<'), or undefined. Character comparisons, no allocation. */
function tagAt(text: string, i: number, dialect: Dialect): Tag | undefined {
  let j = i + 1;
  const closing = text.charCodeAt(j) === SLASH;
  if (closing) j++;
  switch (text.charCodeAt(j)) {
    case 116: // t
      if (text.startsWith('think>', j)) return { kind: 'think', closing, length: j - i + 6 };
      if (dialect === 'toolcall' && text.startsWith('tool_', j)) {
        if (text.startsWith('call>', j + 5)) return { kind: 'search', closing, length: j - i + 10 };
        if (text.startsWith('response>', j + 5)) return { kind: 'information', closing, length: j - i + 14 };
      }
      return undefined;
    case 115: // s
      if (dialect === 'searchr1' && text.startsWith('search>', j)) return { kind: 'search', closing, length: j - i + 7 };
      return undefined;
    case 105: // i
      if (dialect === 'searchr1' && text.startsWith('information>', j)) return { kind: 'information', closing, length: j - i + 12 };
      return undefined;
    case 97: // a
      if (text.startsWith('answer>', j)) return { kind: 'answer', closing, length: j - i + 7 };
      return undefined;
    default:
      return undefined;
  }
}


/** Who writes a message: the policy, the environment (tool results, or a user message in the response), or neither. */
type Role = 'assistant' | 'reply' | 'other';


/** A role word on its own line: what a decoder that drops special tokens leaves of `<|im_start|>user\n`. */
const BARE_ROLE = /^(user|assistant|tool|system|ipython)$/;

/** Whether text[start, end) is whitespace only (as Python's str.strip() sees it). */
export function isBlank(text: string, start: number, end: number): boolean {
  for (let k = start; k < end; k++) {
    const c = text.charCodeAt(k);
    // space, \t, \n, \v, \f, \r, NBSP and the Unicode spaces Python's str.strip() removes in practice
    if (!(c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x2028 || c === 0x2029 || c === 0x3000 || (c >= 0x2000 && c <= 0x200a) || c === 0x1680 || c === 0x202f || c === 0x205f || c === 0x85 || c === 0x1c || c === 0x1d || c === 0x1e || c === 0x1f)) {
      return false;
    }
  }
  return true;
}

function skipBlank(text: string, i: number): number {
  while (i < text.length && isBlank(text, i, i + 1)) i++;
  return i;
}


const LLAMA_TOOLS = /<\|start_header_id\|>ipython<\|end_header_id\|>|<\|python_tag\|>|Environment: ipython/;
const FIRST_ACTION = /<(tool_call|tool_response|search|information)>/;
const TOOLS_PREAMBLE = /<tools>|^# Tools$/m;

/**
 * The dialect of a response (and its prompt, when known): `llama-json` when Llama-3 markers come with its tool
 * role (`ipython`) or tool prompt; else whichever of a tool call/response or a Search-R1 search/information tag
 * comes first in the response (a decoy inside a document comes after the real action); else `toolcall` when the
 * prompt declares tools (`<tools>`, `# Tools`: the model may have answered without calling); else `searchr1`.
 */
export function detectDialect(response: string, prompt = ''): Dialect {
  if ((response.includes('<|start_header_id|>') || prompt.includes('<|start_header_id|>')) && (LLAMA_TOOLS.test(response) || LLAMA_TOOLS.test(prompt))) return 'llama-json';
  const first = FIRST_ACTION.exec(response);
  if (first) return first[1]!.startsWith('tool_') ? 'toolcall' : 'searchr1';
  return prompt && TOOLS_PREAMBLE.test(prompt) ? 'toolcall' : 'searchr1';
}

/** Parses a trajectory (a response, or a whole transcript). Never throws. */
export function parseTrajectory(input: string, options: ParseOptions = {}): ParsedTrajectory {
  const text = typeof input === 'string' ? input : String(input ?? '');
  const dialect: Dialect = !options.dialect || options.dialect === 'auto' ? detectDialect(text) : options.dialect;
  const tool = dialect !== 'searchr1';
  const names = TAG_NAME[dialect];
  const strictText = options.strictText ?? !tool;
  const segments: Segment[] = [];
  const diagnostics: TagDiagnostic[] = [];
  const diag = (code: DiagnosticCode, severity: Severity, message: string, start: number, end: number) =>
    diagnostics.push({ code, severity, message, start, end });

  const n = text.length;
  let turn = 0;
  /** Tool-call dialects: an observation came; the next generated segment starts a new turn. */
  let afterObservation = false;
  /** Tool-call dialects: who writes the current message (a response starts in the assistant's). */
  let role: Role = 'assistant';
  /** The block now open: where its current segment starts, and whether that segment began with its tag. */
  type Open = { kind: BlockKind; segStart: number; contentStart: number; opened: boolean; tagStart: number; tagLength: number; tagless?: boolean };
  let open: Open | undefined;
  /** Blocks interrupted by a nested open tag, innermost last. */
  const interrupted: { kind: BlockKind; tagStart: number; tagLength: number }[] = [];
  /** Start of the pending top-level text segment. */
  let textStart = 0;

  const observed = () => {
    if (tool) afterObservation = true;
    else turn++;
  };
  const push = (kind: SegmentKind, start: number, end: number, contentStart: number, contentEnd: number, opened: boolean, closed: boolean) => {
    if (end <= start && kind === 'text') return;
    if (afterObservation && (kind === 'think' || kind === 'search' || kind === 'answer' || (kind === 'text' && role === 'assistant' && !isBlank(text, start, end)))) {
      turn++;
      afterObservation = false;
    }
    segments.push({ kind, start, end, contentStart, contentEnd, opened, closed, turn });
  };
  /** Free text [from, upTo) in the current message. */
  const pushText = (from: number, upTo: number) => {
    if (upTo <= from) return;
    if (tool && role !== 'assistant' && !isBlank(text, from, upTo)) {
      // A message the environment wrote outside tool responses (an error reply, an interaction's feedback).
      push('feedback', from, upTo, from, upTo, false, false);
      observed();
      return;
    }
    push('text', from, upTo, from, upTo, false, false);
    if (strictText && !isBlank(text, from, upTo)) {
      diag('text-between-tags', 'warning', 'text outside <think>, <search>, <information> and <answer>: the Search-R1 format allows only whitespace between blocks', from, upTo);
    }
  };
  const flushText = (upTo: number) => {
    if (upTo <= textStart) return;
    if (dialect === 'toolcall' && !isBlank(text, textStart, upTo)) {
      // Role words on their own line: the remains of markers a decoder dropped. They start a message.
      let from = textStart;
      let line = textStart;
      while (line < upTo) {
        const nl = text.indexOf('\n', line);
        const lineEnd = nl < 0 || nl >= upTo ? upTo : nl;
        if (lineEnd - line <= 9 && BARE_ROLE.test(text.slice(line, lineEnd))) {
          pushText(from, line);
          push('template', line, lineEnd, line, lineEnd, false, false);
          startMessage(text.slice(line, lineEnd), lineEnd, false);
          from = lineEnd;
        }
        line = lineEnd + 1;
      }
      pushText(from, upTo);
    } else {
      pushText(textStart, upTo);
    }
    textStart = upTo;
  };
  /** Ends the open block (and any interrupted ones) without a closing tag, at `at`. */
  const abandon = (at: number, why: string) => {
    if (!open) return;
    push(open.kind, open.segStart, at, open.contentStart, at, open.opened, false);
    if (open.tagless) observed();
    else diag('unclosed-tag', 'error', `<${names[open.kind]}> is ${why}`, open.tagStart, Math.min(n, open.tagStart + open.tagLength));
    for (const b of interrupted.splice(0).reverse()) diag('unclosed-tag', 'error', `<${names[b.kind]}> is ${why}`, b.tagStart, Math.min(n, b.tagStart + b.tagLength));
    open = undefined;
    textStart = at;
  };
  const resumeOrText = (at: number) => {
    const resumed = interrupted.pop();
    if (resumed) open = { kind: resumed.kind, segStart: at, contentStart: at, opened: false, tagStart: resumed.tagStart, tagLength: resumed.tagLength };
    else {
      open = undefined;
      textStart = at;
    }
  };
  /** A template marker [at, at + len): it splits the open block (which stays open), or ends the pending text. */
  const pushMarker = (at: number, len: number) => {
    if (open) {
      push(open.kind, open.segStart, at, open.contentStart, at, open.opened, false);
      push('template', at, at + len, at, at + len, false, false);
      open = { ...open, segStart: at + len, contentStart: at + len, opened: false };
    } else {
      flushText(at);
      push('template', at, at + len, at, at + len, false, false);
      textStart = at + len;
    }
  };
  /**
   * Tool-call dialects: a message of `who` starts at `at` (after its marker). Tool results and user messages that
   * hold `<tool_response>` are replies; a `tool`/`ipython` message without the tags is one response (tagless).
   */
  const startMessage = (who: string, at: number, tagless = true) => {
    const body = skipBlank(text, at);
    const tagged = text.startsWith('<tool_response>', body);
    if (who === 'assistant') {
      role = 'assistant';
      if (afterObservation) {
        turn++;
        afterObservation = false;
      }
    } else if (who === 'tool' || who === 'ipython' || who === 'function') {
      role = 'reply';
      if (tagless && !tagged && body < n) open = { kind: 'information', segStart: at, contentStart: at, opened: true, tagStart: at, tagLength: 0, tagless: true };
    } else {
      role = who === 'user' && tagged ? 'reply' : 'other';
    }
  };
  /** llama-json: a JSON object that starts the assistant's message (or follows a block in it) is a call. */
  const llamaCall = (at: number): number => {
    if (dialect !== 'llama-json' || role !== 'assistant' || open) return at;
    const k = skipBlank(text, at);
    if (text.charCodeAt(k) !== BRACE) return at;
    flushText(k);
    const { end, closed } = jsonValueEnd(text, k);
    push('search', k, end, k, end, true, closed);
    if (!closed) diag('invalid-tool-call', 'error', 'the tool call’s JSON object is not closed', k, k + 1);
    textStart = end;
    return end;
  };

  /** The environment's spans (when known): observations by role, never parsed for tags. */
  const envSpans = options.spans ? options.spans.filter((sp) => sp.role !== 'generated' && sp.end > sp.start && sp.start < n) : undefined;
  let env = 0;
  /** The environment's span [start, end) of `role`: segments by its role (the caller said who wrote it). */
  const environment = (sp: ResponseSpan) => {
    const start = sp.start;
    const end = Math.min(n, sp.end);
    if (open) abandon(start, 'not closed before the environment’s text');
    if (sp.role === 'prompt') {
      flushText(start);
      push('template', start, end, start, end, false, false);
    } else {
      // Blank edges (Search-R1's `\n\n<information>…</information>\n\n`, the message's newlines) are text, joined
      // to the text around as when the tags are read.
      const a = Math.min(skipBlank(text, start), end);
      let b = end;
      while (b > a && isBlank(text, b - 1, b)) b--;
      flushText(a);
      if (sp.role === 'feedback') push('feedback', a, b, a, b, false, false);
      else {
        // Search-R1 writes its framing tags inside the observation: they are the block's own (a cut observation
        // has no closing tag: unclosed, as is_valid_sequence would count it).
        const openTag = `<${names.information}>`;
        const closeTag = `</${names.information}>`;
        const tagged = !tool && text.startsWith(openTag, a) && a + openTag.length <= b;
        const closed = tagged && b - closeTag.length >= a + openTag.length && text.startsWith(closeTag, b - closeTag.length);
        const contentStart = tagged ? a + openTag.length : a;
        const contentEnd = closed ? b - closeTag.length : b;
        push('information', a, b, contentStart, contentEnd, true, tagged ? closed : true);
        if (tagged && !closed) diag('unclosed-tag', 'error', `<${names.information}> is not closed (the observation was cut)`, a, a + openTag.length);
      }
      observed();
      // The blank tail is read on as text (nothing in it can be a tag).
      textStart = b;
      role = 'assistant';
      return b;
    }
    textStart = end;
    role = 'assistant';
    return end;
  };

  let i = 0;
  if (options.openThink) open = { kind: 'think', segStart: 0, contentStart: 0, opened: false, tagStart: 0, tagLength: 0 };
  else if (!envSpans?.length || envSpans[0]!.start > 0) i = llamaCall(0);
  // With spans, the environment's messages are its spans: the invalid-action text inside the policy's is not one.
  let feedback = envSpans ? -1 : text.indexOf(INVALID_ACTION_MESSAGE);
  while (i < n) {
    if (envSpans && env < envSpans.length && i >= envSpans[env]!.start) {
      i = environment(envSpans[env++]!);
      if (env >= envSpans.length || envSpans[env]!.start > i) i = llamaCall(i);
      continue;
    }
    /** Where the policy's text ends (the next environment span): no tag or marker reaches across it. */
    const limit = envSpans && env < envSpans.length ? envSpans[env]!.start : n;
    while (feedback >= 0 && feedback < i) feedback = text.indexOf(INVALID_ACTION_MESSAGE, feedback + 1);
    let lt = text.indexOf('<', i);
    if (lt >= limit) lt = -1;
    if (lt < 0 && limit < n) {
      i = limit;
      continue;
    }
    if (feedback >= 0 && open?.kind !== 'information' && (lt < 0 || feedback <= lt)) {
      // The environment's invalid-action message: an observation (its tags are not actions).
      if (open) abandon(feedback, 'not closed before the environment’s invalid-action message');
      flushText(feedback);
      const end = feedback + INVALID_ACTION_MESSAGE.length;
      push('feedback', feedback, end, feedback, end, false, false);
      observed();
      i = textStart = end;
      continue;
    }
    if (lt < 0) break;
    const next = text.charCodeAt(lt + 1);
    if (next === BAR) {
      // A chat-template marker (not inside documents).
      const inDocument = open?.kind === 'information' && !open.tagless;
      if (!tool) {
        let len = inDocument ? 0 : templateMarkerLength(text, lt);
        if (lt + len > limit) len = 0;
        if (len > 0) pushMarker(lt, len);
        i = lt + Math.max(1, len);
        continue;
      }
      const marker = inDocument ? undefined : chatMarker(text, lt);
      if (!marker || lt + marker.length > limit) {
        i = lt + 1;
        continue;
      }
      const len = marker.length;
      const boundary = marker.starts !== undefined || marker.ends === true;
      if (open?.tagless) {
        if (!boundary) {
          i = lt + len;
          continue;
        }
        // A tool message ends at its end marker (or the next message).
        push('information', open.segStart, lt, open.contentStart, lt, true, true);
        observed();
        open = undefined;
        textStart = lt;
      } else if (open && boundary) {
        abandon(lt, `not closed before the end of the ${role === 'assistant' ? 'assistant’s' : 'environment’s'} message`);
      }
      pushMarker(lt, len);
      i = lt + len;
      if (marker.starts !== undefined) startMessage(marker.starts, lt + len);
      if (marker.starts === 'assistant' || marker.python) i = llamaCall(i);
      continue;
    }
    let tag = next === SLASH || next === 116 || next === 115 || next === 105 || next === 97 ? tagAt(text, lt, dialect) : undefined;
    if (tag && (lt + tag.length > limit || (envSpans && tag.kind === 'information'))) tag = undefined;
    // A role word left by a decoder may have started the assistant's message since the last block: read it first.
    if (tag && dialect === 'toolcall' && role !== 'assistant' && !open) flushText(lt);
    if (!tag || (tool && role !== 'assistant' && (tag.kind !== 'information' || role !== 'reply'))) {
      // Not a tag; or, in a tool-call dialect, an action tag in a message the policy did not write.
      i = lt + 1;
      continue;
    }
    const tagEnd = lt + tag.length;
    i = tagEnd;

    if (open?.kind === 'information') {
      // Document text: only the closing tag ends it.
      if (tag.closing && tag.kind === 'information' && !open.tagless) {
        push('information', open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
        open = undefined;
        textStart = tagEnd;
        observed();
      }
      continue;
    }
    if (!tag.closing) {
      if (tag.kind === 'information' && open) {
        // An observation ends the turn: whatever the model left open stays unclosed.
        abandon(lt, `not closed before <${names.information}>`);
      }
      if (open) {
        diag('nested-tag', 'error', `<${names[tag.kind]}> opened inside <${names[open.kind]}>, which is not closed before it`, lt, tagEnd);
        push(open.kind, open.segStart, lt, open.contentStart, lt, open.opened, false);
        interrupted.push({ kind: open.kind, tagStart: open.tagStart, tagLength: open.tagLength });
      } else {
        flushText(lt);
      }
      open = { kind: tag.kind, segStart: lt, contentStart: tagEnd, opened: true, tagStart: lt, tagLength: tag.length };
      continue;
    }
    // A closing tag.
    if (open?.kind === tag.kind) {
      push(open.kind, open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
      if (tag.kind === 'search' && !tool && open.opened && isBlank(text, open.contentStart, lt)) diag('empty-search', 'warning', 'empty search query', open.segStart, tagEnd);
      resumeOrText(tagEnd);
      if (!open) i = llamaCall(tagEnd);
      continue;
    }
    let depth = -1;
    for (let k = interrupted.length - 1; k >= 0; k--) if (interrupted[k]!.kind === tag.kind) { depth = k; break; }
    if (open && depth >= 0) {
      // Closes an interrupted outer block: the ones opened since are unclosed.
      diag('unclosed-tag', 'error', `<${names[open.kind]}> is not closed before </${names[tag.kind]}>`, open.tagStart, Math.min(n, open.tagStart + open.tagLength));
      for (const b of interrupted.splice(depth + 1).reverse()) diag('unclosed-tag', 'error', `<${names[b.kind]}> is not closed before </${names[tag.kind]}>`, b.tagStart, Math.min(n, b.tagStart + b.tagLength));
      interrupted.pop();
      push(tag.kind, open.segStart, tagEnd, open.segStart, lt, false, true);
      resumeOrText(tagEnd);
      continue;
    }
    const what = names[tag.kind];
    diag('unopened-close', 'error', open ? `</${what}> inside <${names[open.kind]}>, but no <${what}> is open` : `</${what}> without an opening <${what}>`, lt, tagEnd);
    // The stray tag stays part of the current segment (top-level text or the open block's content).
  }
  if (open) abandon(n, 'never closed');
  else flushText(n);

  if (tool) annotateToolCalls(text, segments, diagnostics, { searchTool: options.searchTool ?? 'search', tools: options.tools ?? [], dialect, kindsKnown: envSpans !== undefined });
  let answers = 0;
  for (const s of segments) {
    if (s.kind !== 'answer' || !s.opened) continue;
    if (++answers === 2) diag('multiple-answers', 'warning', tool ? 'more than one <answer>: the final answer is the last' : 'more than one <answer>: Search-R1 acts on the first; the final answer is the last', s.start, s.start + 8);
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
  return { text, offset: base, dialect, segments, diagnostics };
}

/** The content of a segment (a substring made on demand). */
export function contentOf(parsed: ParsedTrajectory, segment: Segment): string {
  return parsed.text.slice(segment.contentStart - parsed.offset, segment.contentEnd - parsed.offset);
}

export { BLOCKS };
