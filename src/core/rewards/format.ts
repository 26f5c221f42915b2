/**
 * Search-R1's format check (`is_valid_sequence`, verl/utils/reward_score/qa_em_format.py): the response must be
 * think → (search → information → think)* → answer, tags balanced, only whitespace between blocks.
 * Generalised to the chat templates our parser knows: theirs looks for `<|im_start|>assistant` and fails
 * without it; we take the response (split from a transcript by {@link splitTranscript} when a prompt is
 * included) and ignore chat-template markers (e.g. a trailing `<|im_end|>`) as content.
 */
import { templateMarkerLength } from '../tags/parser';
import { pythonStrip } from '../tags/searchr1';
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
}

/** The state machine on a response (no prompt). */
export function formatValidResponse(response: string, options: FormatOptions = {}): FormatResult {
  const content = options.strict ? response : stripTemplateMarkers(response);
  for (const tag of TAGS) {
    const opening = content.split(`<${tag}>`).length - 1;
    const closing = content.split(`</${tag}>`).length - 1;
    if (opening !== closing) return { valid: false, reason: `Mismatch in ${tag} tags: ${opening} opening vs ${closing} closing tags` };
  }
  let state = 'start';
  for (const part of content.split(SPLIT_RE)) {
    if (!pythonStrip(part)) continue;
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
  return formatValidResponse(transcript.slice(split.responseStart), options);
}
