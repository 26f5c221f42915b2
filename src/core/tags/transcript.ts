/**
 * Whole transcripts: splitting prompt from response for ChatML (Qwen), Llama-3 and plain prompts, finding the
 * question, and splitting a file of several conversations (Search-R1's infer.py output, `.traj` files). A
 * conversation with tool turns is one trajectory: a user message that holds tool responses (the Qwen templates
 * put `<tool_response>` blocks in a user turn) is the environment's reply, not a new question.
 */
import type { Dialect, ParsedTrajectory, ParseOptions } from './parser';
import { parseResponse } from './trajectory';

export type Template = 'chatml' | 'llama3' | 'plain';

export interface TranscriptSplit {
  template: Template;
  /** Offsets of the prompt and of the response in the transcript. */
  promptStart: number;
  promptEnd: number;
  responseStart: number;
  responseEnd: number;
  /** How the split was found (for diagnostics): marker, question line, given prompt, or none. */
  by: 'assistant-marker' | 'question-line' | 'prompt' | 'none';
}

const CHATML_USER = '<|im_start|>user';
const CHATML_ASSISTANT = /<\|im_start\|>assistant[ \t]*\n?/g;
const LLAMA3_USER = '<|start_header_id|>user<|end_header_id|>';
const LLAMA3_ASSISTANT = /<\|start_header_id\|>assistant<\|end_header_id\|>(\n\n|\n)?/g;

export function detectTemplate(text: string): Template {
  if (text.includes('<|im_start|>')) return 'chatml';
  if (text.includes('<|start_header_id|>')) return 'llama3';
  return 'plain';
}

/** Whether the user message whose marker (of length `markerLength`) is at `at` holds tool responses. */
function isToolReply(text: string, at: number, markerLength: number): boolean {
  let k = at + markerLength;
  while (k < text.length && (text.charCodeAt(k) === 10 || text.charCodeAt(k) === 32 || text.charCodeAt(k) === 13)) k++;
  return text.startsWith('<tool_response>', k);
}

/** The last user marker that starts a question (not a tool reply), or -1. */
function lastQuestion(text: string, user: string): number {
  let at = text.lastIndexOf(user);
  while (at > 0 && isToolReply(text, at, user.length)) at = text.lastIndexOf(user, at - 1);
  return at >= 0 && isToolReply(text, at, user.length) ? -1 : at;
}

/** The first assistant marker after the last user question: the response starts after it. */
function afterAssistant(text: string, user: string, assistant: RegExp): number {
  const lastUser = lastQuestion(text, user);
  assistant.lastIndex = Math.max(0, lastUser);
  const m = assistant.exec(text);
  return m ? m.index + m[0].length : -1;
}

/**
 * Splits a transcript into prompt and response.
 *  - ChatML: the response starts after `<|im_start|>assistant\n` (the first after the last user message that is
 *    not a tool reply).
 *  - Llama-3: after `<|start_header_id|>assistant<|end_header_id|>\n\n`.
 *  - plain: after the given `prompt` when the transcript starts with it; else after the line holding
 *    `Question: …` (Search-R1's templates end with it); else there is no prompt.
 */
export function splitTranscript(
  text: string,
  options: { template?: Template | 'auto'; prompt?: string } = {},
): TranscriptSplit {
  const template = !options.template || options.template === 'auto' ? detectTemplate(text) : options.template;
  const result = (at: number, by: TranscriptSplit['by']): TranscriptSplit => ({
    template,
    promptStart: 0,
    promptEnd: at,
    responseStart: at,
    responseEnd: text.length,
    by,
  });
  if (options.prompt && text.startsWith(options.prompt)) return result(options.prompt.length, 'prompt');
  if (template === 'chatml') {
    const at = afterAssistant(text, CHATML_USER, CHATML_ASSISTANT);
    if (at >= 0) return result(at, 'assistant-marker');
  } else if (template === 'llama3') {
    const at = afterAssistant(text, LLAMA3_USER, LLAMA3_ASSISTANT);
    if (at >= 0) return result(at, 'assistant-marker');
  }
  const q = questionLine(text);
  if (q) return result(q.lineEnd, 'question-line');
  return result(0, 'none');
}

/**
 * The first `Question: …` line (Search-R1's templates put the question last in the prompt, after instructions
 * that contain no `Question:`); the response starts after it.
 */
function questionLine(text: string): { question: string; lineEnd: number } | undefined {
  const start = text.indexOf('Question:');
  if (start < 0) return undefined;
  const nl = text.indexOf('\n', start);
  const lineEnd = nl < 0 ? text.length : nl + 1;
  return { question: text.slice(start + 'Question:'.length, nl < 0 ? text.length : nl).trim(), lineEnd };
}

/** A chat-template marker (`<|eot_id|>`, `<|im_end|>`, `<|start_header_id|>`, `</s>`, `[/INST]`…): a question ends there. */
const TEMPLATE_MARKER = /<\|[^|<>\s]{1,40}\|>|<\/s>|\[\/INST\]|<end_of_turn>/;

/**
 * The question in a prompt (Search-R1's templates: `… Question: {question}\n`), if any: up to the end of its line
 * or a chat-template marker, whichever comes first (a Llama-3 prompt has `<|eot_id|><|start_header_id|>assistant…`
 * right after the question, on the same line).
 */
export function extractQuestion(prompt: string): string | undefined {
  const at = prompt.lastIndexOf('Question:');
  if (at < 0) return undefined;
  const nl = prompt.indexOf('\n', at);
  let q = prompt.slice(at + 'Question:'.length, nl < 0 ? prompt.length : nl);
  const marker = TEMPLATE_MARKER.exec(q);
  if (marker) q = q.slice(0, marker.index);
  q = q.trim();
  return q || undefined;
}

export interface ParsedTranscript extends TranscriptSplit {
  question?: string;
  /** The response, parsed with positions in the transcript's coordinates. */
  parsed: ParsedTrajectory;
}

/**
 * Splits and parses a transcript; the parser sees only the response (the prompt's example tags and the tools
 * preamble's example call are not actions). The dialect is detected from the prompt and the response unless given.
 */
export function parseTranscript(
  text: string,
  options: {
    template?: Template | 'auto';
    prompt?: string;
    dialect?: Dialect | 'auto';
    searchTool?: string;
    parse?: Omit<ParseOptions, 'offset'>;
  } = {},
): ParsedTranscript {
  const split = splitTranscript(text, options);
  const prompt = text.slice(split.promptStart, split.promptEnd);
  const parsed = parseResponse(
    text.slice(split.responseStart, split.responseEnd),
    { prompt, dialect: options.dialect, searchTool: options.searchTool },
    { ...options.parse, offset: split.responseStart },
  );
  const question = split.promptEnd > 0 ? (extractQuestion(prompt) ?? chatQuestion(prompt)) : undefined;
  return { ...split, question, parsed };
}

/**
 * The question of a chat prompt without Search-R1's `Question:` line: the last user message (a tool-call
 * prompt puts the question there, the instructions in the system message), when it is one line.
 */
function chatQuestion(prompt: string): string | undefined {
  for (const [user, end] of [
    [CHATML_USER, '<|im_end|>'],
    [LLAMA3_USER, '<|eot_id|>'],
  ] as const) {
    const at = lastQuestion(prompt, user);
    if (at < 0) continue;
    const stop = prompt.indexOf(end, at);
    const body = prompt.slice(at + user.length, stop < 0 ? prompt.length : stop).trim();
    if (body && !body.includes('\n') && body.length <= 500) return body;
  }
  return undefined;
}

/** infer.py prints this line before each conversation. */
export const INFER_HEADER = /^#{5,} \[Start Reasoning \+ Searching\] #{5,}[ \t]*$/;
/** Our `.traj` separator: a line starting with `### trajectory` (the rest of the line is a free label). */
export const TRAJ_SEPARATOR = /^### trajectory\b.*$/;

export interface ConversationSpan {
  start: number;
  end: number;
  /** The label of a `### trajectory …` separator, if the conversation had one. */
  label?: string;
}

/**
 * Splits a text holding several conversations. A new conversation starts at a `### trajectory` line, at
 * infer.py's header line, or at a chat-template conversation start (`<|im_start|>system`, `<|im_start|>user`,
 * `<|begin_of_text|>`) once the current conversation has had an assistant turn (a search agent's conversation
 * has one user question: a user message after the assistant's starts the next conversation, unless it holds tool
 * responses). Separator and header lines are not part of any conversation; leading/trailing blank text is
 * trimmed from each span.
 */
export function splitConversations(text: string): ConversationSpan[] {
  // Candidate boundaries found with indexOf (memchr-fast), kept when they start a line; no per-line work.
  const candidates: number[] = [];
  for (const needle of ['### trajectory', '#####', '<|im_start|>system', '<|im_start|>user', '<|begin_of_text|>']) {
    for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) {
      // A user message holding tool responses continues the conversation.
      if (
        (at === 0 || text.charCodeAt(at - 1) === 10) &&
        !(needle === '<|im_start|>user' && isToolReply(text, at, needle.length))
      )
        candidates.push(at);
    }
  }
  candidates.sort((a, b) => a - b);
  const assistant = /<\|im_start\|>assistant|<\|start_header_id\|>assistant/g;
  const spans: ConversationSpan[] = [];
  let start = 0;
  let label: string | undefined;
  const close = (end: number) => {
    let s = start;
    let e = end;
    while (s < e && isSpace(text.charCodeAt(s))) s++;
    while (e > s && isSpace(text.charCodeAt(e - 1))) e--;
    if (e > s) spans.push(label === undefined ? { start: s, end: e } : { start: s, end: e, label });
  };
  /** Whether an assistant marker occurs in [from, to). */
  const hasAssistant = (from: number, to: number) => {
    assistant.lastIndex = from;
    const m = assistant.exec(text);
    return m !== null && m.index < to;
  };
  for (const at of candidates) {
    if (at < start) continue;
    const nl = text.indexOf('\n', at);
    const lineEnd = nl < 0 ? text.length : nl;
    const line = text.slice(at, Math.min(lineEnd, at + 200));
    if (TRAJ_SEPARATOR.test(line) || (line.startsWith('#####') && INFER_HEADER.test(text.slice(at, lineEnd)))) {
      close(at);
      label = line.startsWith('### trajectory') ? text.slice(at + '### trajectory'.length, lineEnd).trim() : undefined;
      start = nl < 0 ? text.length : nl + 1;
    } else if (!line.startsWith('#') && hasAssistant(start, at)) {
      // A new conversation's first message after the current one's assistant turn.
      close(at);
      label = undefined;
      start = at;
    }
  }
  close(text.length);
  return spans;
}

function isSpace(c: number): boolean {
  return (
    c === 32 ||
    (c >= 9 && c <= 13) ||
    c === 0xa0 ||
    c === 0xfeff ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x3000 ||
    (c >= 0x2000 && c <= 0x200a)
  );
}
