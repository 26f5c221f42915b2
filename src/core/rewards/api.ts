/**
 * The reward-module API (DESIGN §4.6), imported by reward modules as `search-agent-studio/reward`:
 *
 *   import { defineReward, em } from 'search-agent-studio/reward';
 *   export default defineReward({
 *     name: 'exact match',
 *     score(traj, example) {
 *       return traj.answer === null ? 0 : em(traj.answer, example.golden);
 *     },
 *   });
 *
 * `score` returns a number or `{ reward, parts }` (named components, e.g. `{ em: 1, format: 0.2 }`), and may be
 * async. Modules are bundled with this file and run in a sandboxed worker: no `require`, no `process`, no
 * file system; a time and a memory limit per item. Types: reward-api.d.ts (kept in step by a test).
 */
import type { Dialect, Segment, TagDiagnostic } from '../tags/parser';
import { responseAnswer, type Turn, turnsOf } from '../tags/searchr1';
import type { ResponseSpan } from '../tags/spans';
import { invalidActionCount, parseResponse, searchQueries } from '../tags/trajectory';
import { formatValidParsed, formatValidResponse } from './format';
import { em, f1, normalizeAnswer, subem } from './normalize';
import {
  informationBlocks,
  type QaEmFormatWeights,
  qaEmFormat,
  retrievalCorrect,
  SEARCH_R1_WEIGHTS,
  searchR1QaEmFormat,
} from './qaEmFormat';

export { searchR1ExtractSolution } from '../tags/searchr1';
export type { ResponseSpan, SpanRole } from '../tags/spans';
export { formatValid, formatValidResponse } from './format';
export { em, f1, informationBlocks, normalizeAnswer, retrievalCorrect, SEARCH_R1_WEIGHTS, subem };

/**
 * A parsed trajectory, as a reward function sees it. The same in every dialect (Search-R1 tags, chat-template
 * tool calls, Llama JSON tool calls), so a reward module works unchanged on any of them.
 */
export interface Trajectory {
  prompt: string;
  response: string;
  /** How the response acts: `searchr1`, `toolcall` or `llama-json` (docs/trajectory-format.md). */
  dialect: Dialect;
  /**
   * The final answer: the content of the response's last complete `<answer>` (null if none). With strict actions
   * (`rollout.strict_actions`, Search-R1 tags): the content of the last turn whose action is an answer, so an
   * `<answer>` opened inside an unclosed `<search>` is none.
   */
  answer: string | null;
  /** Search queries, in order (stripped): `<search>` contents, or the `query` of each valid search tool call. */
  searches: string[];
  /** Turns (action per turn: search, answer, another tool, or null for an invalid one). */
  turns: Turn[];
  /** Invalid actions: turns without an action the environment answered; in tool-call dialects, invalid calls too. */
  invalidActions: number;
  /** Segments of the response (offsets into `response`). */
  segments: Segment[];
  /** Whether the response follows the format: Search-R1's is_valid_sequence, or its tool-call counterpart. */
  valid: boolean;
  /** Parser diagnostics (unclosed tags, text between blocks, invalid tool calls, …). */
  diagnostics: TagDiagnostic[];
  /**
   * Who wrote each part of `response` ([start, end) offsets into it, role `generated`, `retrieved`, `feedback` or
   * `prompt`), when the record or the trainer said so; null when the response is plain text read by its tags. With
   * spans, `answer`, `searches`, `turns`, `segments` and `valid` come from the policy's text only: tags inside a
   * retrieved document are document text. A module that reads `response` itself should skip the other spans.
   */
  spans: ResponseSpan[] | null;
}

/** What the question was. */
export interface Example {
  golden: string[];
  question?: string;
  data_source?: string;
  meta?: Record<string, unknown>;
}

export type RewardResult = number | { reward: number; parts?: Record<string, number> };

export interface RewardDefinition {
  /** Shown in the editor and logs. */
  name: string;
  score(traj: Trajectory, example: Example): RewardResult | Promise<RewardResult>;
}

/** Declares a reward module (the module's default export). */
export function defineReward(def: RewardDefinition): RewardDefinition {
  if (!def || typeof def.name !== 'string' || typeof def.score !== 'function')
    throw new TypeError('defineReward({ name, score(traj, example) }) needs a name and a score function');
  return def;
}

/**
 * Builds the Trajectory a reward function receives from a prompt and a response (in `options.dialect`, else the
 * one detected). The response is parsed once; searches, turns and the format check are computed when first read
 * (an EM reward reads only the answer).
 */
export function makeTrajectory(
  prompt: string,
  response: string,
  options: {
    dialect?: Dialect | 'auto';
    searchTool?: string;
    strictActions?: boolean;
    spans?: readonly ResponseSpan[];
  } = {},
): Trajectory {
  const spans = options.spans ? options.spans.map((s) => ({ start: s.start, end: s.end, role: s.role })) : null;
  const parsed = parseResponse(
    response,
    { prompt, dialect: options.dialect, searchTool: options.searchTool, ...(spans ? { spans } : {}) },
    { expectAnswer: false },
  );
  const lazy = <T>(fn: () => T) => {
    let value: T | undefined;
    let done = false;
    return () => {
      if (!done) {
        value = fn();
        done = true;
      }
      return value as T;
    };
  };
  const searches = lazy(() => searchQueries(parsed));
  const strict = options.strictActions === true && parsed.dialect === 'searchr1';
  const turns = lazy(() => turnsOf(parsed, { strictActions: strict }));
  // Search-R1's string-level check reads tags in documents too; with spans, the same sequence over the parsed segments.
  const valid = lazy(
    () =>
      (parsed.dialect === 'searchr1' && !spans
        ? formatValidResponse(response, { dialect: 'searchr1' })
        : formatValidParsed(parsed)
      ).valid,
  );
  return {
    prompt,
    response,
    dialect: parsed.dialect,
    answer: responseAnswer(parsed, { strictActions: strict }, strict ? turns() : undefined) ?? null,
    get searches() {
      return searches();
    },
    get turns() {
      return turns();
    },
    get invalidActions() {
      return invalidActionCount(parsed, turns());
    },
    segments: parsed.segments,
    get valid() {
      return valid();
    },
    diagnostics: parsed.diagnostics,
    spans,
  };
}

/** Search-R1's qa_em_format on a trajectory (ours: last answer of the response; see qaEmFormat.ts). */
export function emFormat(
  traj: Trajectory,
  example: Example,
  weights: Partial<QaEmFormatWeights> = {},
): { reward: number; parts: Record<string, number> } {
  const r = qaEmFormat(
    traj.response,
    traj.answer,
    example.golden,
    { ...SEARCH_R1_WEIGHTS, ...weights },
    { dialect: traj.dialect, prompt: traj.prompt, ...(traj.spans ? { spans: traj.spans } : {}) },
  );
  return { reward: r.reward, parts: r.parts };
}

/** Search-R1's qa_em_format exactly as theirs, over prompt + response (with the two-answer quirk). */
export function searchR1EmFormat(
  traj: Trajectory,
  example: Example,
  weights: Partial<QaEmFormatWeights> = {},
): { reward: number; parts: Record<string, number> } {
  const r = searchR1QaEmFormat(traj.prompt + traj.response, example.golden, { ...SEARCH_R1_WEIGHTS, ...weights });
  return { reward: r.reward, parts: r.parts };
}
