/**
 * What the trajectory parser (parser.ts) produces, as data: the dialects, segments, tool calls and diagnostics.
 * Its own module so that the dialects' semantics (toolcall.ts), which annotate segments, and the parser, which calls
 * them, both depend on it rather than on each other.
 */
export type BlockKind = 'think' | 'search' | 'information' | 'answer';
export type SegmentKind = BlockKind | 'text' | 'feedback' | 'template';

export const DIALECTS = ['searchr1', 'toolcall', 'llama-json'] as const;
export type Dialect = (typeof DIALECTS)[number];

/** What a tool call says (tool-call dialects; on `search` segments with both tags or a complete JSON object). */
export interface ToolCall {
  /** The called tool, when the body is a JSON object with a string `name`. */
  name?: string;
  /** The query: set exactly when the call is a valid call of the search tool. */
  query?: string;
  /** Why the call is an invalid action (its diagnostic's message). */
  error?: string;
}

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
  /** Tool-call dialects: the call of a `search` segment. */
  call?: ToolCall;
}

export type DiagnosticCode =
  | 'unclosed-tag'
  | 'unopened-close'
  | 'nested-tag'
  | 'text-between-tags'
  | 'missing-answer'
  | 'multiple-answers'
  | 'empty-search'
  | 'searchr1-answer-quirk'
  | 'invalid-tool-call'
  | 'unknown-tool'
  | 'missing-query';

export type Severity = 'error' | 'warning' | 'info';

export interface TagDiagnostic {
  code: DiagnosticCode;
  severity: Severity;
  message: string;
  start: number;
  end: number;
}
