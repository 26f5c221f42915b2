/**
 * A response read in its dialect, whichever it is (DESIGN §4.1): what every instrument asks of a trajectory —
 * its searches, its invalid actions, the documents of an observation — so that summaries, the inspector, the
 * replay, the editor and rewards read both dialects through the same few functions.
 */
import { describeValue } from '../schema/bounds';
import {
  contentOf,
  DIALECTS,
  type Dialect,
  detectDialect,
  type ParsedTrajectory,
  type ParseOptions,
  parseTrajectory,
  type Segment,
} from './parser';
import { parseDocuments, pythonStrip, type RetrievedDoc, type Turn } from './searchr1';
import type { ResponseSpan } from './spans';
import { declaredTools, promptOpensThink, toolResponseText } from './toolcall';

/** What is known around a response: its prompt, a dialect given by the user, the record or the run config. */
export interface ResponseContext {
  prompt?: string;
  /** A known dialect wins; `auto`/absent: detected from the response and the prompt. */
  dialect?: Dialect | 'auto';
  /** The search tool's name (tool-call dialects; default `search`). */
  searchTool?: string;
  /** Who wrote each part of the response (spans.ts): observations are then read by role, not by their tags. */
  spans?: readonly ResponseSpan[];
}

/** Parses a response in its dialect, with what its prompt says (declared tools, a `<think>` it opened). */
export function parseResponse(
  response: string,
  context: ResponseContext = {},
  options: Omit<ParseOptions, 'dialect' | 'tools' | 'openThink' | 'searchTool' | 'spans'> = {},
): ParsedTrajectory {
  const prompt = context.prompt ?? '';
  const dialect =
    context.dialect && context.dialect !== 'auto'
      ? context.dialect
      : detectDialect(generatedText(response, context.spans), prompt);
  return parseTrajectory(response, {
    ...options,
    dialect,
    ...(context.searchTool ? { searchTool: context.searchTool } : {}),
    ...(context.spans ? { spans: context.spans } : {}),
    ...(dialect !== 'searchr1' && prompt ? { tools: declaredTools(prompt) } : {}),
    ...(prompt && promptOpensThink(prompt) ? { openThink: true } : {}),
  });
}

/**
 * The response with the environment's text blanked (each of its characters a space, so offsets hold): what the
 * policy wrote, for reading its actions. The response itself without spans.
 */
export function generatedText(response: string, spans: readonly ResponseSpan[] | undefined): string {
  if (!spans) return response;
  let out = '';
  let at = 0;
  for (const s of spans) {
    if (s.role === 'generated') continue;
    out += response.slice(at, s.start) + ' '.repeat(s.end - s.start);
    at = s.end;
  }
  return out + response.slice(at);
}

/** Whether a segment is a search: a complete `<search>` block, or a valid call of the search tool. */
export function isSearch(s: Segment): boolean {
  return s.kind === 'search' && s.opened && s.closed && (s.call === undefined || s.call.query !== undefined);
}

/** The search queries, in order (stripped; a tool call's decoded `arguments.query`). */
export function searchQueries(parsed: ParsedTrajectory): string[] {
  const out: string[] = [];
  for (const s of parsed.segments) if (isSearch(s)) out.push(s.call?.query ?? pythonStrip(contentOf(parsed, s)));
  return out;
}

export function searchCount(parsed: ParsedTrajectory): number {
  let n = 0;
  for (const s of parsed.segments) if (isSearch(s)) n++;
  return n;
}

/**
 * Invalid actions. `searchr1`: turns without a search or answer that the environment answered (with its
 * invalid-action message). Tool-call dialects: each invalid call (bad JSON, unknown tool, no query), plus turns
 * without any call or answer that the environment answered.
 */
export function invalidActionCount(parsed: ParsedTrajectory, turns: readonly Turn[]): number {
  let n = 0;
  for (const t of turns)
    if (
      t.action === null &&
      t.observation !== undefined &&
      (parsed.dialect === 'searchr1' || !t.segments.some((k) => parsed.segments[k]!.call))
    )
      n++;
  if (parsed.dialect !== 'searchr1') for (const s of parsed.segments) if (s.call?.error !== undefined) n++;
  return n;
}

/**
 * The documents of an observation segment (information, or a tool response). A tool response's JSON wrapper is
 * decoded first; documents then carry the whole content's span (their text is not a substring of it).
 */
export function documentsOf(parsed: ParsedTrajectory, s: Segment): RetrievedDoc[] {
  const content = contentOf(parsed, s);
  if (parsed.dialect === 'searchr1') return parseDocuments(content, s.contentStart);
  const decoded = toolResponseText(content);
  if (decoded === content) return parseDocuments(content, s.contentStart);
  return parseDocuments(decoded).map((d) => ({ ...d, start: s.contentStart, end: s.contentEnd }));
}

/** The text of an observation as a reader sees it (a tool response's JSON wrapper decoded). */
export function observationText(parsed: ParsedTrajectory, s: Segment): string {
  const content = contentOf(parsed, s);
  return parsed.dialect === 'searchr1' ? content : toolResponseText(content);
}

/** A dialect named by a user (`--dialect`, a setting, `rollout.dialect`): the dialect, `auto`, or an error message. */
export function parseDialectName(value: unknown): Dialect | 'auto' | { error: string } {
  if (value === undefined || value === null || value === '' || value === 'auto') return 'auto';
  if (typeof value === 'string' && (DIALECTS as readonly string[]).includes(value)) return value as Dialect;
  return { error: `unknown dialect ${describeValue(value)}: expected auto, ${DIALECTS.join(', ')}` };
}

export { DIALECTS, type Dialect, detectDialect };
