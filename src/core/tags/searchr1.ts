/**
 * Search-R1's semantics, by name, next to ours. Each `searchR1*` function is a faithful port of the Python in
 * Search-R1 (search_r1/llm_agent/generation.py, verl/utils/reward_score/qa_em*.py) and is tested against the
 * quirks it has; the trajectory-level helpers are built on the parser.
 */
import {
  contentOf,
  INVALID_ACTION_MESSAGE,
  isBlank,
  type ParsedTrajectory,
  parseTrajectory,
  type Segment,
  type TagDiagnostic,
} from './parser';

/** Python's `str.strip()` with no argument: strips Unicode whitespace (str.isspace). */
export function pythonStrip(s: string): string {
  return s.replace(PY_SPACE_START, '').replace(PY_SPACE_END, '');
}
// str.isspace(): Unicode White_Space plus the ASCII separators \x1c-\x1f.
const PY_SPACE = '\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const PY_SPACE_START = new RegExp(`^[${PY_SPACE}]+`);
const PY_SPACE_END = new RegExp(`[${PY_SPACE}]+$`);
const PY_BLANK = new RegExp(`^[${PY_SPACE}]*$`);

/** `not s.strip()`: whether `s` is empty or Python whitespace only (without stripping a long string to find out). */
export function pythonBlank(s: string): boolean {
  return PY_BLANK.test(s);
}

/** A turn's action; `tool` is a valid call of a tool other than the search tool (tool-call dialects). */
export type Action = 'search' | 'answer' | 'tool';

/**
 * The action of one generation turn, as `postprocess_predictions`: the first `<(search|answer)>(.*?)</\1>`
 * (DOTALL) in the turn's text, its content stripped; `{ action: null, content: '' }` when there is none
 * (an invalid action: the environment answers with {@link INVALID_ACTION_MESSAGE}).
 */
export function searchR1Action(turnText: string): { action: 'search' | 'answer' | null; content: string } {
  const m = /<(search|answer)>([\s\S]*?)<\/\1>/.exec(turnText);
  return m ? { action: m[1] as 'search' | 'answer', content: pythonStrip(m[2]!) } : { action: null, content: '' };
}

/**
 * A turn's action under strict actions (`rollout.strict_actions`): the first `<search>` or `<answer>` opened in the
 * turn is its action, and it must close before another of those two opens; otherwise the turn is invalid
 * (`{ action: null }`). Where {@link searchR1Action} reads `<search> X <answer> Y </answer>` as the answer Y (the
 * regex skips the unclosed search), this reads it as a search that never closed. The trainer's rollout protocol
 * (rollout.py, `strict_turn_action`) applies the same rule; test/fixtures/tags/strict-actions.json holds both to it.
 */
export function strictAction(turnText: string): { action: 'search' | 'answer' | null; content: string } {
  const open = /<(search|answer)>/.exec(turnText);
  if (!open) return { action: null, content: '' };
  const from = open.index + open[0].length;
  const close = turnText.indexOf(`</${open[1]}>`, from);
  if (close < 0) return { action: null, content: '' };
  const body = turnText.slice(from, close);
  if (/<(?:search|answer)>/.test(body)) return { action: null, content: '' };
  return { action: open[1] as 'search' | 'answer', content: pythonStrip(body) };
}

/**
 * `extract_solution` of qa_em.py: over prompt + response, the last `<answer>(.*?)</answer>` stripped, but only
 * when there are two or more matches (the prompt's instructions contain an example answer, `<answer> Beijing
 * </answer>`, which the first match is assumed to be); null otherwise.
 */
export function searchR1ExtractSolution(solutionStr: string): string | null {
  const matches = [...solutionStr.matchAll(/<answer>([\s\S]*?)<\/answer>/g)];
  if (matches.length <= 1) return null;
  return pythonStrip(matches[matches.length - 1]![1]!);
}

/** The final answer of a parsed response: the content of its last complete `<answer>` block, stripped. */
export function finalAnswer(parsed: ParsedTrajectory): string | undefined {
  for (let k = parsed.segments.length - 1; k >= 0; k--) {
    const s = parsed.segments[k]!;
    if (s.kind === 'answer' && s.closed && s.opened) return pythonStrip(contentOf(parsed, s));
  }
  return undefined;
}

/**
 * The answer a run read from a response: {@link finalAnswer}, or under strict actions (`rollout.strict_actions`, Search-R1
 * tags) the answer of the last turn whose action {@link strictAction} reads as one — none from inside an unclosed
 * `<search>`. `turns`: the response's turns read strictly, when the caller has them.
 */
export function responseAnswer(
  parsed: ParsedTrajectory,
  options: { strictActions?: boolean } = {},
  turns?: readonly Turn[],
): string | undefined {
  if (!options.strictActions || parsed.dialect !== 'searchr1') return finalAnswer(parsed);
  const last = (turns ?? turnsOf(parsed, { strictActions: true })).filter((t) => t.action === 'answer').pop();
  return last?.content;
}

export type AnswerMode = 'last-answer' | 'searchr1-quirk';

export interface ExtractedAnswer {
  answer: string | null;
  diagnostics: TagDiagnostic[];
}

/**
 * The answer to score. `last-answer` (ours, the default): the last `<answer>` of the response.
 * `searchr1-quirk`: Search-R1's `extract_solution` over prompt + response (needs `prompt`), with a diagnostic
 * that explains the quirk, because it silently scores 0 for a response whose prompt has no example answer
 * (e.g. a custom template) and counts an answer inside retrieved documents.
 */
export function extractAnswer(response: string, options: { mode?: AnswerMode; prompt?: string } = {}): ExtractedAnswer {
  if ((options.mode ?? 'last-answer') === 'last-answer') {
    return {
      answer: finalAnswer(parseTrajectory(response, { expectAnswer: false, strictText: false })) ?? null,
      diagnostics: [],
    };
  }
  const prompt = options.prompt ?? '';
  const answer = searchR1ExtractSolution(prompt + response);
  const promptAnswers = [...prompt.matchAll(/<answer>([\s\S]*?)<\/answer>/g)].length;
  const message =
    "Search-R1 quirk: the answer is extracted from prompt + response and needs two or more <answer> matches, because Search-R1's prompt contains an example answer. " +
    (promptAnswers === 1
      ? 'This prompt has one, so the last <answer> of the response is used.'
      : `This prompt has ${promptAnswers}, so ${promptAnswers === 0 ? 'a response with a single answer scores as having none' : 'an answer from the prompt can be scored'}.`) +
    ' Matches inside <information> count too.';
  return {
    answer,
    diagnostics: [
      {
        code: 'searchr1-answer-quirk',
        severity: promptAnswers === 1 ? 'info' : 'warning',
        message,
        start: 0,
        end: Math.min(1, response.length),
      },
    ],
  };
}

/** One retrieved document as Search-R1 formats it: `Doc {i}(Title: {title}) {text}`. */
export interface RetrievedDoc {
  index: number;
  title: string;
  text: string;
  /** Span of this document in the text it was parsed from. */
  start: number;
  end: number;
}

/** `_passages2string`: `Doc {i}(Title: {title}) {text}\n` per document, title = first line of `contents`. */
export function searchR1Passages(contents: string[]): string {
  return contents
    .map((content, idx) => {
      const lines = content.split('\n');
      return `Doc ${idx + 1}(Title: ${lines[0]}) ${lines.slice(1).join('\n')}\n`;
    })
    .join('');
}

/** The observation inserted after a search: `\n\n<information>{passages.strip()}</information>\n\n`. */
export function searchR1Observation(contents: string[]): string {
  return `\n\n<information>${pythonStrip(searchR1Passages(contents))}</information>\n\n`;
}

/** The observation inserted after an invalid action. */
export const SEARCH_R1_INVALID_OBSERVATION = `\n${INVALID_ACTION_MESSAGE}\n`;

/**
 * Splits an information block's content into documents: Search-R1's `Doc 1(Title: …) …`, or veRL's search tool's
 * `Doc 1 (Title: …)\n…`; one untitled doc otherwise.
 */
export function parseDocuments(content: string, offset = 0): RetrievedDoc[] {
  const docs: RetrievedDoc[] = [];
  const re = /(?:^|\n)Doc (\d+) ?\(Title: ([^\n]*?)\)[ \n]/g;
  const heads: { index: number; title: string; at: number; body: number }[] = [];
  for (let m = re.exec(content); m; m = re.exec(content)) {
    const at = m.index + (m[0].startsWith('\n') ? 1 : 0);
    heads.push({ index: Number(m[1]), title: m[2]!, at, body: m.index + m[0].length });
  }
  if (heads.length === 0) {
    const text = content.trim();
    return text ? [{ index: 1, title: '', text, start: offset, end: offset + content.length }] : [];
  }
  heads.forEach((h, k) => {
    const end = k + 1 < heads.length ? heads[k + 1]!.at : content.length;
    docs.push({
      index: h.index,
      title: h.title,
      text: content.slice(h.body, end).replace(/\n+$/, ''),
      start: offset + h.at,
      end: offset + end,
    });
  });
  return docs;
}

export interface Turn {
  index: number;
  /** Span of what the model generated in this turn (up to the observation). */
  start: number;
  end: number;
  /** Indices into `segments` of this turn's generated segments (and markers before its observation). */
  segments: number[];
  /**
   * The turn's action. `searchr1`: Search-R1's reading, its first search/answer (null: invalid action).
   * Tool-call dialects: `search` when it makes a valid search call, else `answer` when it answers, else `tool`
   * for a valid call of another tool, else null.
   */
  action: Action | null;
  /** The query (the first, for parallel calls), the answer, or the other tool's name. */
  content: string;
  /** Index of the first observation segment that followed (information or feedback), if any. */
  observation?: number;
  /** All of them (tool-call dialects: one response per parallel call). */
  observations: number[];
}

/**
 * The turns of a parsed response: its segments grouped by `turn`, with the action of each (`strictActions`: Search-R1
 * tags read by {@link strictAction}).
 */
export function turnsOf(parsed: ParsedTrajectory, options: { strictActions?: boolean } = {}): Turn[] {
  const offset = parsed.offset;
  const segs = parsed.segments;
  const turns: Turn[] = [];
  for (let k = 0; k < segs.length; ) {
    const number = segs[k]!.turn;
    const t: Turn = {
      index: turns.length,
      start: segs[k]!.start,
      end: segs[k]!.start,
      segments: [],
      action: null,
      content: '',
      observations: [],
    };
    let substantive = false;
    for (; k < segs.length && segs[k]!.turn === number; k++) {
      const s = segs[k]!;
      if (s.kind === 'information' || s.kind === 'feedback') {
        t.observations.push(k);
        substantive = true;
      } else if (t.observations.length === 0) {
        // What follows the observation in the same turn is markers and whitespace (tool-call dialects).
        t.segments.push(k);
        t.end = s.end;
        if (
          !substantive &&
          s.kind !== 'template' &&
          (s.kind !== 'text' || !isBlank(parsed.text, s.start - offset, s.end - offset))
        )
          substantive = true;
      }
    }
    if (!substantive) continue;
    if (t.observations.length) t.observation = t.observations[0];
    t.index = turns.length;
    turns.push(t);
  }
  for (const t of turns) {
    if (parsed.dialect === 'searchr1') {
      const a = (options.strictActions ? strictAction : searchR1Action)(
        parsed.text.slice(t.start - offset, t.end - offset),
      );
      t.action = a.action;
      t.content = a.content;
      continue;
    }
    let search: string | undefined;
    let answer: Segment | undefined;
    let other: string | undefined;
    for (const k of t.segments) {
      const s = segs[k]!;
      if (s.call?.query !== undefined) {
        search = s.call.query;
        break;
      }
      if (s.kind === 'answer' && s.opened && s.closed) answer = s;
      else if (s.call && s.call.error === undefined && other === undefined) other = s.call.name;
    }
    if (search !== undefined) [t.action, t.content] = ['search', search];
    else if (answer) [t.action, t.content] = ['answer', pythonStrip(contentOf(parsed, answer))];
    else if (other !== undefined) [t.action, t.content] = ['tool', other];
  }
  return turns;
}
