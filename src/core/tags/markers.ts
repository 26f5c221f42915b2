/** Chat-template markers and JSON extents: the character-level helpers both the parser and the tool-call reader use. */

/** Roles that follow `<|im_start|>` (ChatML) and belong to the marker. */
const CHATML_ROLES = ['assistant', 'user', 'system', 'tool', 'function', 'ipython'] as const;
const isWordChar = (c: number) => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95;

/**
 * Length of the chat-template marker at `i` (text[i] === '<', text[i+1] === '|'), or 0. Markers:
 * `<|name|>` in general; `<|im_start|>role` takes its role word; `<|start_header_id|>role<|end_header_id|>`
 * is one marker.
 */
export function templateMarkerLength(text: string, i: number): number {
  const close = text.indexOf('|>', i + 2);
  if (close < 0 || close - i > 40) return 0;
  for (let k = i + 2; k < close; k++) if (!isWordChar(text.charCodeAt(k))) return 0;
  if (close === i + 2) return 0;
  let end = close + 2;
  if (close - i === 10 && text.startsWith('im_start', i + 2)) {
    for (const role of CHATML_ROLES) {
      if (text.startsWith(role, end) && !isWordChar(text.charCodeAt(end + role.length))) {
        end += role.length;
        break;
      }
    }
  } else if (close - i === 17 && text.startsWith('start_header_id', i + 2)) {
    const endHeader = text.indexOf('<|end_header_id|>', end);
    if (endHeader >= 0 && endHeader - end <= 40) end = endHeader + '<|end_header_id|>'.length;
  }
  return end - i;
}

/** End of the JSON object or array starting at `i` (string-aware bracket matching); unclosed at a chat marker or the end. */
export function jsonValueEnd(text: string, i: number): { end: number; closed: boolean } {
  let depth = 0;
  let inString = false;
  for (let k = i; k < text.length; k++) {
    const c = text.charCodeAt(k);
    if (inString) {
      if (c === 92) k++;
      else if (c === 34) inString = false;
      continue;
    }
    if (c === 34) inString = true;
    else if (c === 123 || c === 91) depth++;
    else if (c === 125 || c === 93) {
      if (--depth === 0) return { end: k + 1, closed: true };
    } else if (c === 60 && text.charCodeAt(k + 1) === 124 && templateMarkerLength(text, k) > 0)
      return { end: k, closed: false };
  }
  return { end: text.length, closed: false };
}

/** What a chat marker does to the message structure: its length, and whether it starts a message (of a role), ends one, or is Llama's `<|python_tag|>`. */
export interface ChatMarker {
  length: number;
  starts?: string;
  ends?: true;
  python?: true;
}

const ROLE_STARTS = CHATML_ROLES.map((role) => ({
  role,
  marker: { length: 12 + role.length, starts: role } as ChatMarker,
}));
const IM_END: ChatMarker = { length: 10, ends: true };
const END_MARKERS = ['<|eot_id|>', '<|eom_id|>', '<|endoftext|>', '<|end_of_text|>'];

/**
 * The chat marker at `i` (text[i] === '<', text[i+1] === '|'), or undefined: the markers of every message read
 * without making a string (`<|im_start|>role`, `<|im_end|>` first: the tool-call dialects meet four a turn).
 */
export function chatMarker(text: string, i: number): ChatMarker | undefined {
  if (text.startsWith('<|im_end|>', i)) return IM_END;
  if (text.startsWith('<|im_start|>', i)) {
    for (const r of ROLE_STARTS)
      if (text.startsWith(r.role, i + 12) && !isWordChar(text.charCodeAt(i + 12 + r.role.length))) return r.marker;
    return { length: 12, starts: '' };
  }
  const length = templateMarkerLength(text, i);
  if (length === 0) return undefined;
  if (text.startsWith('<|start_header_id|>', i)) return { length, starts: text.slice(i + 19, i + length - 17) };
  for (const end of END_MARKERS) if (length === end.length && text.startsWith(end, i)) return { length, ends: true };
  return length === 14 && text.startsWith('<|python_tag|>', i) ? { length, python: true } : { length };
}
