/**
 * Search-R1's format check (`is_valid_sequence`, verl/utils/reward_score/qa_em_format.py): the response must be
 * think → (search → information → think)* → answer, tags balanced, only whitespace between blocks.
 * Generalised to the chat templates our parser knows: theirs looks for `<|im_start|>assistant` and fails
 * without it; we take the response (split from a transcript by {@link splitTranscript} when a prompt is
 * included) and ignore chat-template markers (e.g. a trailing `<|im_end|>`) as content.
 *
 * The tool-call dialects get the same sequence on the parsed segments ({@link formatValidParsed}): think →
 * (tool call+ → tool response+ → think)* → answer, every call valid, every block closed, only whitespace and
 * template markers between blocks, no error reply.
 */
import { type Dialect, detectDialect, type ParsedTrajectory, templateMarkerLength } from '../tags/parser';
import { pythonBlank, pythonStrip } from '../tags/searchr1';
import type { ResponseSpan } from '../tags/spans';
import { parseResponse } from '../tags/trajectory';
import { splitTranscript } from '../tags/transcript';

export interface FormatResult {
  valid: boolean;
  reason: string;
}

const TAGS = ['think', 'search', 'information', 'answer'] as const;
const SPLIT_RE = /(<\/?(?:think|search|information|answer)>)/;
const TAG_RE = /^<\/?(?:think|search|information|answer)>$/;

function stripTemplateMarkers(text: string): string {
  let out = '';
  let i = 0;
  for (;;) {
    const at = text.indexOf('<|', i);
    if (at < 0) break;
    const len = templateMarkerLength(text, at);
    out += text.slice(i, at);
    if (len === 0) out += '<|';
    i = at + (len || 2);
  }
  return out + text.slice(i);
}

export interface FormatOptions {
  /**
   * Exactly Search-R1's `is_valid_sequence`: chat-template markers count as content (a trailing `<|im_end|>`
   * makes a response invalid) and, for transcripts, the ChatML assistant marker is required. Default false:
   * markers are ignored and any template our splitter knows is accepted.
   */
  strict?: boolean;
  /** The response's dialect (default: detected from the response and `prompt`). */
  dialect?: Dialect | 'auto';
  /** The prompt, for detecting the dialect (a tools preamble) and a `<think>` the prompt opened. */
  prompt?: string;
  searchTool?: string;
  /**
   * Who wrote each part of the response (tags/spans.ts). With spans the check runs on the parsed segments
   * ({@link formatValidParsed}) in every dialect: Search-R1's string-level check counts tags inside documents.
   */
  spans?: readonly ResponseSpan[];
}

/**
 * The format check of a parsed tool-call trajectory: think → (call+ → response+ → think)* → answer on its
 * segments. A `<think>` the prompt opened counts as opened.
 */
export function formatValidParsed(parsed: ParsedTrajectory): FormatResult {
  let state: 'start' | 'after_think' | 'after_call' | 'information' | 'end' = 'start';
  const tool = parsed.dialect !== 'searchr1';
  const calls = tool ? 'tool call' : 'search';
  for (const [k, s] of parsed.segments.entries()) {
    if (s.kind === 'template') continue;
    if (s.kind === 'text') {
      if (pythonStrip(parsed.text.slice(s.start - parsed.offset, s.end - parsed.offset)))
        return {
          valid: false,
          reason: `Unexpected content '${pythonStrip(parsed.text.slice(s.start - parsed.offset, s.end - parsed.offset)).slice(0, 80)}' between blocks (state: ${state})`,
        };
      continue;
    }
    if (s.kind === 'feedback') return { valid: false, reason: 'The environment answered an invalid action (feedback)' };
    const openedByPrompt = k === 0 && s.kind === 'think' && !s.opened;
    if ((!s.opened && !openedByPrompt) || !s.closed) return { valid: false, reason: `Unbalanced ${s.kind} block` };
    if (s.kind === 'think' && (state === 'start' || state === 'information')) state = 'after_think';
    else if (s.kind === 'search' && (state === 'after_think' || (tool && state === 'after_call'))) {
      if (s.call && s.call.query === undefined && s.call.error !== undefined)
        return { valid: false, reason: `Invalid tool call: ${s.call.error}` };
      state = 'after_call';
    } else if (s.kind === 'information' && (state === 'after_call' || (tool && state === 'information')))
      state = 'information';
    else if (s.kind === 'answer' && state === 'after_think') state = 'end';
    else return { valid: false, reason: `Unexpected ${s.kind === 'search' ? calls : s.kind} in state ${state}` };
  }
  if (state !== 'end') return { valid: false, reason: `Incomplete sequence, ended in state ${state}` };
  return { valid: true, reason: 'Valid sequence format' };
}

/**
 * The state machine on a response (no prompt). Search-R1's dialect: their string-level check, exactly; the
 * tool-call dialects: {@link formatValidParsed}.
 */
export function formatValidResponse(response: string, options: FormatOptions = {}): FormatResult {
  const dialect =
    options.dialect && options.dialect !== 'auto' ? options.dialect : detectDialect(response, options.prompt);
  if (dialect !== 'searchr1' || options.spans)
    return formatValidParsed(
      parseResponse(
        response,
        {
          prompt: options.prompt,
          dialect,
          searchTool: options.searchTool,
          ...(options.spans ? { spans: options.spans } : {}),
        },
        { expectAnswer: false },
      ),
    );
  const content = options.strict ? response : stripTemplateMarkers(response);
  for (const tag of TAGS) {
    const opening = content.split(`<${tag}>`).length - 1;
    const closing = content.split(`</${tag}>`).length - 1;
    if (opening !== closing)
      return { valid: false, reason: `Mismatch in ${tag} tags: ${opening} opening vs ${closing} closing tags` };
  }
  let state = 'start';
  for (const part of content.split(SPLIT_RE)) {
    if (pythonBlank(part)) continue;
    if (TAG_RE.test(part)) {
      if (part === '<think>' && (state === 'start' || state === 'information')) state = 'in_think';
      else if (part === '</think>' && state === 'in_think') state = 'after_think';
      else if (part === '<search>' && state === 'after_think') state = 'in_search';
      else if (part === '</search>' && state === 'in_search') state = 'after_search';
      else if (part === '<information>' && state === 'after_search') state = 'in_information';
      else if (part === '</information>' && state === 'in_information') state = 'information';
      else if (part === '<answer>' && state === 'after_think') state = 'in_answer';
      else if (part === '</answer>' && state === 'in_answer') state = 'end';
      else return { valid: false, reason: `Unexpected tag ${part} in state ${state}` };
    } else if (state === 'in_think' || state === 'in_search' || state === 'in_information' || state === 'in_answer') {
      // content inside a block
    } else if (state === 'start' || state === 'after_think' || state === 'after_search' || state === 'information') {
      return { valid: false, reason: `Unexpected content '${pythonStrip(part)}' between tags (state: ${state})` };
    } else {
      return { valid: false, reason: `Unexpected content in state ${state}` };
    }
  }
  if (state !== 'end') return { valid: false, reason: `Incomplete sequence, ended in state ${state}` };
  return { valid: true, reason: 'Valid sequence format' };
}

/** `is_valid_sequence` on a whole transcript (prompt + response), for any template our splitter knows. */
export function formatValid(transcript: string, options: FormatOptions = {}): FormatResult {
  if (options.strict) {
    const m = /<\|im_start\|>assistant\s*/.exec(transcript);
    if (!m) return { valid: false, reason: 'Missing assistant marker' };
    return formatValidResponse(transcript.slice(m.index + m[0].length), options);
  }
  const split = splitTranscript(transcript);
  if (split.by === 'none' && split.template !== 'plain') return { valid: false, reason: 'Missing assistant marker' };
  return formatValidResponse(transcript.slice(split.responseStart), {
    ...options,
    prompt: transcript.slice(0, split.responseStart),
  });
}
