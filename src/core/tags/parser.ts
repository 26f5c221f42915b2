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

export type {
  BlockKind,
  DiagnosticCode,
  Dialect,
  Segment,
  SegmentKind,
  Severity,
  TagDiagnostic,
  ToolCall,
} from './segments';
export { DIALECTS } from './segments';
export { templateMarkerLength };

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
      if (dialect === 'searchr1' && text.startsWith('search>', j))
        return { kind: 'search', closing, length: j - i + 7 };
      return undefined;
    case 105: // i
      if (dialect === 'searchr1' && text.startsWith('information>', j))
        return { kind: 'information', closing, length: j - i + 12 };
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
    if (
      !(
        c === 32 ||
        (c >= 9 && c <= 13) ||
        c === 0xa0 ||
        c === 0x2028 ||
        c === 0x2029 ||
        c === 0x3000 ||
        (c >= 0x2000 && c <= 0x200a) ||
        c === 0x1680 ||
        c === 0x202f ||
        c === 0x205f ||
        c === 0x85 ||
        c === 0x1c ||
        c === 0x1d ||
        c === 0x1e ||
        c === 0x1f
      )
    ) {
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
  if (
    (response.includes('<|start_header_id|>') || prompt.includes('<|start_header_id|>')) &&
    (LLAMA_TOOLS.test(response) || LLAMA_TOOLS.test(prompt))
  )
    return 'llama-json';
  const first = FIRST_ACTION.exec(response);
  if (first) return first[1]!.startsWith('tool_') ? 'toolcall' : 'searchr1';
  return prompt && TOOLS_PREAMBLE.test(prompt) ? 'toolcall' : 'searchr1';
}

/** Parses a trajectory (a response, or a whole transcript). Never throws. */
export function parseTrajectory(input: string, options: ParseOptions = {}): ParsedTrajectory {
  const text = typeof input === 'string' ? input : String(input ?? '');
  const dialect: Dialect = !options.dialect || options.dialect === 'auto' ? detectDialect(text) : options.dialect;
  const tool = dialect !== 'searchr1';
  const scan = new TrajectoryScan(text, dialect, options);
  scan.read();
  const { segments, diagnostics } = scan;
  if (tool)
    annotateToolCalls(text, segments, diagnostics, {
      searchTool: options.searchTool ?? 'search',
      tools: options.tools ?? [],
      dialect,
      kindsKnown: scan.spansKnown,
    });
  checkAnswers(segments, diagnostics, tool, text.length, options.expectAnswer ?? true);
  diagnostics.sort((a, b) => a.start - b.start || a.end - b.end);
  const base = options.offset ?? 0;
  shiftPositions(segments, diagnostics, base);
  return { text, offset: base, dialect, segments, diagnostics };
}

/** The block now open: where its current segment starts, and whether that segment began with its tag. */
interface OpenBlock {
  kind: BlockKind;
  segStart: number;
  contentStart: number;
  opened: boolean;
  tagStart: number;
  tagLength: number;
  /** A `tool`/`ipython` message without `<tool_response>` tags: one response, ended by the message's end. */
  tagless?: boolean;
}

/** A block interrupted by a nested open tag (it resumes when the inner one closes). */
interface InterruptedBlock {
  kind: BlockKind;
  tagStart: number;
  tagLength: number;
}

/**
 * parseTrajectory's one pass over the text: its state (the open block, the message and its writer, the turn) and a
 * method per thing the text can hold next — a block tag, a chat-template marker, the invalid-action message, an
 * environment's span, a llama-json call — each appending segments (which tile the text) and diagnostics, in text
 * coordinates.
 */
class TrajectoryScan {
  readonly segments: Segment[] = [];
  readonly diagnostics: TagDiagnostic[] = [];
  /** Whether the caller said who wrote each part (ParseOptions.spans): then segments' kinds are known. */
  readonly spansKnown: boolean;
  private readonly text: string;
  private readonly n: number;
  private readonly dialect: Dialect;
  private readonly tool: boolean;
  private readonly names: Record<BlockKind, string>;
  private readonly strictText: boolean;
  private readonly openThink: boolean;
  /** The environment's spans (when known): observations by role, never parsed for tags. */
  private readonly envSpans: readonly ResponseSpan[] | undefined;
  /** The next of envSpans. */
  private env = 0;
  private turn = 0;
  /** Tool-call dialects: an observation came; the next generated segment starts a new turn. */
  private afterObservation = false;
  /** Tool-call dialects: who writes the current message (a response starts in the assistant's). */
  private role: Role = 'assistant';
  /** The block now open. */
  private open: OpenBlock | undefined;
  /** Blocks interrupted by a nested open tag, innermost last. */
  private readonly interrupted: InterruptedBlock[] = [];
  /** Start of the pending top-level text segment. */
  private textStart = 0;
  /**
   * The next invalid-action message at or after where the scan is (-1: none). With spans, the environment's
   * messages are its spans: the invalid-action text inside the policy's is not one.
   */
  private feedback: number;

  constructor(text: string, dialect: Dialect, options: ParseOptions) {
    this.text = text;
    this.n = text.length;
    this.dialect = dialect;
    this.tool = dialect !== 'searchr1';
    this.names = TAG_NAME[dialect];
    this.strictText = options.strictText ?? !this.tool;
    this.openThink = !!options.openThink;
    this.envSpans = options.spans
      ? options.spans.filter((sp) => sp.role !== 'generated' && sp.end > sp.start && sp.start < this.n)
      : undefined;
    this.spansKnown = this.envSpans !== undefined;
    this.feedback = this.envSpans ? -1 : text.indexOf(INVALID_ACTION_MESSAGE);
  }

  /** Reads the text from start to end. */
  read(): void {
    const { text, n, envSpans } = this;
    let i = this.begin();
    while (i < n) {
      if (envSpans && this.env < envSpans.length && i >= envSpans[this.env]!.start) {
        i = this.environmentSpan();
        continue;
      }
      /** Where the policy's text ends (the next environment span): no tag or marker reaches across it. */
      const limit = envSpans && this.env < envSpans.length ? envSpans[this.env]!.start : n;
      const feedback = this.nextFeedback(i);
      let lt = text.indexOf('<', i);
      if (lt >= limit) lt = -1;
      if (lt < 0 && limit < n) {
        i = limit;
        continue;
      }
      if (feedback >= 0 && this.open?.kind !== 'information' && (lt < 0 || feedback <= lt)) {
        i = this.invalidAction(feedback);
        continue;
      }
      if (lt < 0) break;
      i = text.charCodeAt(lt + 1) === BAR ? this.marker(lt, limit) : this.tag(lt, limit);
    }
    this.end();
  }

  /** Where reading starts: inside the `<think>` the prompt opened, or after a llama-json call that opens the text. */
  private begin(): number {
    if (this.openThink) {
      this.open = { kind: 'think', segStart: 0, contentStart: 0, opened: false, tagStart: 0, tagLength: 0 };
      return 0;
    }
    return !this.envSpans?.length || this.envSpans[0]!.start > 0 ? this.llamaCall(0) : 0;
  }

  /** The end of the text: what is still open was never closed; the rest is text. */
  private end(): void {
    if (this.open) this.abandon(this.n, 'never closed');
    else this.flushText(this.n);
  }

  private diag(code: DiagnosticCode, severity: Severity, message: string, start: number, end: number): void {
    this.diagnostics.push({ code, severity, message, start, end });
  }

  /** An observation came: the turn ends (tool-call dialects: at the next generated segment). */
  private observed(): void {
    if (this.tool) this.afterObservation = true;
    else this.turn++;
  }

  /** Appends a segment (an empty text segment is none), starting a new turn at the first generated one after an observation. */
  private push(
    kind: SegmentKind,
    start: number,
    end: number,
    contentStart: number,
    contentEnd: number,
    opened: boolean,
    closed: boolean,
  ): void {
    if (end <= start && kind === 'text') return;
    if (
      this.afterObservation &&
      (kind === 'think' ||
        kind === 'search' ||
        kind === 'answer' ||
        (kind === 'text' && this.role === 'assistant' && !isBlank(this.text, start, end)))
    ) {
      this.turn++;
      this.afterObservation = false;
    }
    this.segments.push({ kind, start, end, contentStart, contentEnd, opened, closed, turn: this.turn });
  }

  /** Free text [from, upTo) in the current message. */
  private pushText(from: number, upTo: number): void {
    if (upTo <= from) return;
    const { text } = this;
    if (this.tool && this.role !== 'assistant' && !isBlank(text, from, upTo)) {
      // A message the environment wrote outside tool responses (an error reply, an interaction's feedback).
      this.push('feedback', from, upTo, from, upTo, false, false);
      this.observed();
      return;
    }
    this.push('text', from, upTo, from, upTo, false, false);
    if (this.strictText && !isBlank(text, from, upTo)) {
      this.diag(
        'text-between-tags',
        'warning',
        'text outside <think>, <search>, <information> and <answer>: the Search-R1 format allows only whitespace between blocks',
        from,
        upTo,
      );
    }
  }

  /** The pending text up to `upTo`; toolcall: role words on their own line in it start messages. */
  private flushText(upTo: number): void {
    const { text } = this;
    if (upTo <= this.textStart) return;
    if (this.dialect === 'toolcall' && !isBlank(text, this.textStart, upTo)) {
      // Role words on their own line: the remains of markers a decoder dropped. They start a message.
      let from = this.textStart;
      let line = this.textStart;
      while (line < upTo) {
        const nl = text.indexOf('\n', line);
        const lineEnd = nl < 0 || nl >= upTo ? upTo : nl;
        if (lineEnd - line <= 9 && BARE_ROLE.test(text.slice(line, lineEnd))) {
          this.pushText(from, line);
          this.push('template', line, lineEnd, line, lineEnd, false, false);
          this.startMessage(text.slice(line, lineEnd), lineEnd, false);
          from = lineEnd;
        }
        line = lineEnd + 1;
      }
      this.pushText(from, upTo);
    } else {
      this.pushText(this.textStart, upTo);
    }
    this.textStart = upTo;
  }

  /** Ends the open block (and any interrupted ones) without a closing tag, at `at`. */
  private abandon(at: number, why: string): void {
    const open = this.open;
    if (!open) return;
    const { n, names } = this;
    this.push(open.kind, open.segStart, at, open.contentStart, at, open.opened, false);
    if (open.tagless) this.observed();
    else
      this.diag(
        'unclosed-tag',
        'error',
        `<${names[open.kind]}> is ${why}`,
        open.tagStart,
        Math.min(n, open.tagStart + open.tagLength),
      );
    for (const b of this.interrupted.splice(0).reverse())
      this.diag(
        'unclosed-tag',
        'error',
        `<${names[b.kind]}> is ${why}`,
        b.tagStart,
        Math.min(n, b.tagStart + b.tagLength),
      );
    this.open = undefined;
    this.textStart = at;
  }

  /** After a block closed at `at`: the block it interrupted resumes, or top-level text starts. */
  private resumeOrText(at: number): void {
    const resumed = this.interrupted.pop();
    if (resumed)
      this.open = {
        kind: resumed.kind,
        segStart: at,
        contentStart: at,
        opened: false,
        tagStart: resumed.tagStart,
        tagLength: resumed.tagLength,
      };
    else {
      this.open = undefined;
      this.textStart = at;
    }
  }

  /** A template marker [at, at + len): it splits the open block (which stays open), or ends the pending text. */
  private pushMarker(at: number, len: number): void {
    const open = this.open;
    if (open) {
      this.push(open.kind, open.segStart, at, open.contentStart, at, open.opened, false);
      this.push('template', at, at + len, at, at + len, false, false);
      this.open = { ...open, segStart: at + len, contentStart: at + len, opened: false };
    } else {
      this.flushText(at);
      this.push('template', at, at + len, at, at + len, false, false);
      this.textStart = at + len;
    }
  }

  /**
   * Tool-call dialects: a message of `who` starts at `at` (after its marker). Tool results and user messages that
   * hold `<tool_response>` are replies; a `tool`/`ipython` message without the tags is one response (tagless).
   */
  private startMessage(who: string, at: number, tagless = true): void {
    const body = skipBlank(this.text, at);
    const tagged = this.text.startsWith('<tool_response>', body);
    if (who === 'assistant') {
      this.role = 'assistant';
      if (this.afterObservation) {
        this.turn++;
        this.afterObservation = false;
      }
    } else if (who === 'tool' || who === 'ipython' || who === 'function') {
      this.role = 'reply';
      if (tagless && !tagged && body < this.n)
        this.open = {
          kind: 'information',
          segStart: at,
          contentStart: at,
          opened: true,
          tagStart: at,
          tagLength: 0,
          tagless: true,
        };
    } else {
      this.role = who === 'user' && tagged ? 'reply' : 'other';
    }
  }

  /** llama-json: a JSON object that starts the assistant's message (or follows a block in it) is a call. */
  private llamaCall(at: number): number {
    if (this.dialect !== 'llama-json' || this.role !== 'assistant' || this.open) return at;
    const k = skipBlank(this.text, at);
    if (this.text.charCodeAt(k) !== BRACE) return at;
    this.flushText(k);
    const { end, closed } = jsonValueEnd(this.text, k);
    this.push('search', k, end, k, end, true, closed);
    if (!closed) this.diag('invalid-tool-call', 'error', 'the tool call’s JSON object is not closed', k, k + 1);
    this.textStart = end;
    return end;
  }

  /** The next environment span, read by its role; a llama-json call may follow it in the policy's text. */
  private environmentSpan(): number {
    const envSpans = this.envSpans!;
    const i = this.environment(envSpans[this.env++]!);
    return this.env >= envSpans.length || envSpans[this.env]!.start > i ? this.llamaCall(i) : i;
  }

  /** The environment's span [start, end) of `role`: segments by its role (the caller said who wrote it). */
  private environment(sp: ResponseSpan): number {
    const { text, n, names } = this;
    const start = sp.start;
    const end = Math.min(n, sp.end);
    if (this.open) this.abandon(start, 'not closed before the environment’s text');
    if (sp.role === 'prompt') {
      this.flushText(start);
      this.push('template', start, end, start, end, false, false);
    } else {
      // Blank edges (Search-R1's `\n\n<information>…</information>\n\n`, the message's newlines) are text, joined
      // to the text around as when the tags are read.
      const a = Math.min(skipBlank(text, start), end);
      let b = end;
      while (b > a && isBlank(text, b - 1, b)) b--;
      this.flushText(a);
      if (sp.role === 'feedback') this.push('feedback', a, b, a, b, false, false);
      else {
        // Search-R1 writes its framing tags inside the observation: they are the block's own (a cut observation
        // has no closing tag: unclosed, as is_valid_sequence would count it).
        const openTag = `<${names.information}>`;
        const closeTag = `</${names.information}>`;
        const tagged = !this.tool && text.startsWith(openTag, a) && a + openTag.length <= b;
        const closed =
          tagged && b - closeTag.length >= a + openTag.length && text.startsWith(closeTag, b - closeTag.length);
        const contentStart = tagged ? a + openTag.length : a;
        const contentEnd = closed ? b - closeTag.length : b;
        this.push('information', a, b, contentStart, contentEnd, true, tagged ? closed : true);
        if (tagged && !closed)
          this.diag(
            'unclosed-tag',
            'error',
            `<${names.information}> is not closed (the observation was cut)`,
            a,
            a + openTag.length,
          );
      }
      this.observed();
      // The blank tail is read on as text (nothing in it can be a tag).
      this.textStart = b;
      this.role = 'assistant';
      return b;
    }
    this.textStart = end;
    this.role = 'assistant';
    return end;
  }

  /** The first invalid-action message at or after `i` (-1: none). */
  private nextFeedback(i: number): number {
    while (this.feedback >= 0 && this.feedback < i)
      this.feedback = this.text.indexOf(INVALID_ACTION_MESSAGE, this.feedback + 1);
    return this.feedback;
  }

  /** The environment's invalid-action message at `at`: an observation (its tags are not actions). */
  private invalidAction(at: number): number {
    if (this.open) this.abandon(at, 'not closed before the environment’s invalid-action message');
    this.flushText(at);
    const end = at + INVALID_ACTION_MESSAGE.length;
    this.push('feedback', at, end, at, end, false, false);
    this.observed();
    this.textStart = end;
    return end;
  }

  /** `<|` at `lt`: a chat-template marker (not inside documents), or a plain character. Returns where to read on. */
  private marker(lt: number, limit: number): number {
    return this.tool ? this.messageMarker(lt, limit) : this.templateMarker(lt, limit);
  }

  /** searchr1: a chat-template marker splits the current segment without changing which block is open. */
  private templateMarker(lt: number, limit: number): number {
    const inDocument = this.open?.kind === 'information' && !this.open.tagless;
    let len = inDocument ? 0 : templateMarkerLength(this.text, lt);
    if (lt + len > limit) len = 0;
    if (len > 0) this.pushMarker(lt, len);
    return lt + Math.max(1, len);
  }

  /** Tool-call dialects: a marker that starts or ends a message ends the blocks open in it and sets who writes next. */
  private messageMarker(lt: number, limit: number): number {
    const open = this.open;
    const inDocument = open?.kind === 'information' && !open.tagless;
    const marker = inDocument ? undefined : chatMarker(this.text, lt);
    if (!marker || lt + marker.length > limit) return lt + 1;
    const len = marker.length;
    const boundary = marker.starts !== undefined || marker.ends === true;
    if (open?.tagless) {
      if (!boundary) return lt + len;
      // A tool message ends at its end marker (or the next message).
      this.push('information', open.segStart, lt, open.contentStart, lt, true, true);
      this.observed();
      this.open = undefined;
      this.textStart = lt;
    } else if (open && boundary) {
      this.abandon(
        lt,
        `not closed before the end of the ${this.role === 'assistant' ? 'assistant’s' : 'environment’s'} message`,
      );
    }
    this.pushMarker(lt, len);
    let i = lt + len;
    if (marker.starts !== undefined) this.startMessage(marker.starts, lt + len);
    if (marker.starts === 'assistant' || marker.python) i = this.llamaCall(i);
    return i;
  }

  /** `<` at `lt`, not a marker: a block tag the policy wrote, or a plain character. Returns where to read on. */
  private tag(lt: number, limit: number): number {
    const { text, dialect } = this;
    const next = text.charCodeAt(lt + 1);
    let tag =
      next === SLASH || next === 116 || next === 115 || next === 105 || next === 97
        ? tagAt(text, lt, dialect)
        : undefined;
    if (tag && (lt + tag.length > limit || (this.envSpans && tag.kind === 'information'))) tag = undefined;
    // A role word left by a decoder may have started the assistant's message since the last block: read it first.
    if (tag && dialect === 'toolcall' && this.role !== 'assistant' && !this.open) this.flushText(lt);
    if (!tag || (this.tool && this.role !== 'assistant' && (tag.kind !== 'information' || this.role !== 'reply'))) {
      // Not a tag; or, in a tool-call dialect, an action tag in a message the policy did not write.
      return lt + 1;
    }
    const tagEnd = lt + tag.length;
    if (this.open?.kind === 'information') {
      this.documentTag(tag, lt, tagEnd);
      return tagEnd;
    }
    if (!tag.closing) {
      this.openTag(tag, lt, tagEnd);
      return tagEnd;
    }
    return this.closeTag(tag, lt, tagEnd);
  }

  /** A tag inside an observation: document text; only the observation's closing tag ends it. */
  private documentTag(tag: Tag, lt: number, tagEnd: number): void {
    const open = this.open!;
    if (tag.closing && tag.kind === 'information' && !open.tagless) {
      this.push('information', open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
      this.open = undefined;
      this.textStart = tagEnd;
      this.observed();
    }
  }

  /** An opening tag: the block opens, nested in (and interrupting) the open one, if any. */
  private openTag(tag: Tag, lt: number, tagEnd: number): void {
    const { names } = this;
    if (tag.kind === 'information' && this.open) {
      // An observation ends the turn: whatever the model left open stays unclosed.
      this.abandon(lt, `not closed before <${names.information}>`);
    }
    const open = this.open;
    if (open) {
      this.diag(
        'nested-tag',
        'error',
        `<${names[tag.kind]}> opened inside <${names[open.kind]}>, which is not closed before it`,
        lt,
        tagEnd,
      );
      this.push(open.kind, open.segStart, lt, open.contentStart, lt, open.opened, false);
      this.interrupted.push({ kind: open.kind, tagStart: open.tagStart, tagLength: open.tagLength });
    } else {
      this.flushText(lt);
    }
    this.open = {
      kind: tag.kind,
      segStart: lt,
      contentStart: tagEnd,
      opened: true,
      tagStart: lt,
      tagLength: tag.length,
    };
  }

  /** A closing tag: of the open block, of an interrupted outer one (the inner ones are unclosed), or of none. */
  private closeTag(tag: Tag, lt: number, tagEnd: number): number {
    const { text, n, names } = this;
    const open = this.open;
    if (open?.kind === tag.kind) {
      this.push(open.kind, open.segStart, tagEnd, open.contentStart, lt, open.opened, true);
      if (tag.kind === 'search' && !this.tool && open.opened && isBlank(text, open.contentStart, lt))
        this.diag('empty-search', 'warning', 'empty search query', open.segStart, tagEnd);
      this.resumeOrText(tagEnd);
      return this.open ? tagEnd : this.llamaCall(tagEnd);
    }
    const interrupted = this.interrupted;
    let depth = -1;
    for (let k = interrupted.length - 1; k >= 0; k--)
      if (interrupted[k]!.kind === tag.kind) {
        depth = k;
        break;
      }
    if (open && depth >= 0) {
      // Closes an interrupted outer block: the ones opened since are unclosed.
      this.diag(
        'unclosed-tag',
        'error',
        `<${names[open.kind]}> is not closed before </${names[tag.kind]}>`,
        open.tagStart,
        Math.min(n, open.tagStart + open.tagLength),
      );
      for (const b of interrupted.splice(depth + 1).reverse())
        this.diag(
          'unclosed-tag',
          'error',
          `<${names[b.kind]}> is not closed before </${names[tag.kind]}>`,
          b.tagStart,
          Math.min(n, b.tagStart + b.tagLength),
        );
      interrupted.pop();
      this.push(tag.kind, open.segStart, tagEnd, open.segStart, lt, false, true);
      this.resumeOrText(tagEnd);
      return tagEnd;
    }
    const what = names[tag.kind];
    this.diag(
      'unopened-close',
      'error',
      open
        ? `</${what}> inside <${names[open.kind]}>, but no <${what}> is open`
        : `</${what}> without an opening <${what}>`,
      lt,
      tagEnd,
    );
    // The stray tag stays part of the current segment (top-level text or the open block's content).
    return tagEnd;
  }
}

/** A second `<answer>` (the final answer is the last) and a missing one (when one is expected). */
function checkAnswers(
  segments: readonly Segment[],
  diagnostics: TagDiagnostic[],
  tool: boolean,
  n: number,
  expectAnswer: boolean,
): void {
  let answers = 0;
  for (const s of segments) {
    if (s.kind !== 'answer' || !s.opened) continue;
    if (++answers === 2)
      diagnostics.push({
        code: 'multiple-answers',
        severity: 'warning',
        message: tool
          ? 'more than one <answer>: the final answer is the last'
          : 'more than one <answer>: Search-R1 acts on the first; the final answer is the last',
        start: s.start,
        end: s.start + 8,
      });
  }
  if (answers === 0 && expectAnswer)
    diagnostics.push({
      code: 'missing-answer',
      severity: 'warning',
      message: 'no <answer>: the trajectory ends without a final answer',
      start: Math.max(0, n - 1),
      end: n,
    });
}

/** Moves every position by `base` (ParseOptions.offset: the text is a slice of a larger document). */
function shiftPositions(segments: Segment[], diagnostics: TagDiagnostic[], base: number): void {
  if (base === 0) return;
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

/** The content of a segment (a substring made on demand). */
export function contentOf(parsed: ParsedTrajectory, segment: Segment): string {
  return parsed.text.slice(segment.contentStart - parsed.offset, segment.contentEnd - parsed.offset);
}

export { BLOCKS };
