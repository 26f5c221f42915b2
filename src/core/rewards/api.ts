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
import { parseTrajectory, type Segment, type TagDiagnostic } from '../tags/parser';
import { finalAnswer, turnsOf, type Turn } from '../tags/searchr1';
import { formatValidResponse } from './format';
import { em, f1, normalizeAnswer, subem } from './normalize';
import { informationBlocks, qaEmFormat, retrievalCorrect, SEARCH_R1_WEIGHTS, searchR1QaEmFormat, type QaEmFormatWeights } from './qaEmFormat';

export { em, f1, normalizeAnswer, subem, informationBlocks, retrievalCorrect, SEARCH_R1_WEIGHTS };
export { searchR1ExtractSolution } from '../tags/searchr1';
export { formatValid, formatValidResponse } from './format';

/** A parsed trajectory, as a reward function sees it. */
export interface Trajectory {
  prompt: string;
  response: string;
  /** The final answer: the content of the response's last complete `<answer>` (null if none). */
  answer: string | null;
  /** Search queries, in order (stripped). */
  searches: string[];
  /** Turns as Search-R1 reads them (action per turn: search, answer, or null for an invalid one). */
  turns: Turn[];
  /** Segments of the response (offsets into `response`). */
  segments: Segment[];
  /** Whether the response follows Search-R1's format (is_valid_sequence). */
  valid: boolean;
  /** Parser diagnostics (unclosed tags, text between blocks, …). */
  diagnostics: TagDiagnostic[];
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
  if (!def || typeof def.name !== 'string' || typeof def.score !== 'function') throw new TypeError('defineReward({ name, score(traj, example) }) needs a name and a score function');
  return def;
}

/**
 * Builds the Trajectory a reward function receives from a prompt and a response. The response is parsed once;
 * searches, turns and the format check are computed when first read (an EM reward reads only the answer).
 */
export function makeTrajectory(prompt: string, response: string): Trajectory {
  const parsed = parseTrajectory(response, { expectAnswer: false });
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
  const searches = lazy(() => parsed.segments.filter((s) => s.kind === 'search' && s.opened && s.closed).map((s) => response.slice(s.contentStart, s.contentEnd).trim()));
  const turns = lazy(() => turnsOf(parsed));
  const valid = lazy(() => formatValidResponse(response).valid);
  return {
    prompt,
    response,
    answer: finalAnswer(parsed) ?? null,
    get searches() {
      return searches();
    },
    get turns() {
      return turns();
    },
    segments: parsed.segments,
    get valid() {
      return valid();
    },
    diagnostics: parsed.diagnostics,
  };
}

/** Search-R1's qa_em_format on a trajectory (ours: last answer of the response; see qaEmFormat.ts). */
export function emFormat(traj: Trajectory, example: Example, weights: Partial<QaEmFormatWeights> = {}): { reward: number; parts: Record<string, number> } {
  const r = qaEmFormat(traj.response, traj.answer, example.golden, { ...SEARCH_R1_WEIGHTS, ...weights });
  return { reward: r.reward, parts: r.parts };
}

/** Search-R1's qa_em_format exactly as theirs, over prompt + response (with the two-answer quirk). */
export function searchR1EmFormat(traj: Trajectory, example: Example, weights: Partial<QaEmFormatWeights> = {}): { reward: number; parts: Record<string, number> } {
  const r = searchR1QaEmFormat(traj.prompt + traj.response, example.golden, { ...SEARCH_R1_WEIGHTS, ...weights });
  return { reward: r.reward, parts: r.parts };
}
