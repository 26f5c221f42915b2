/**
 * Search-R1's `qa_em_format` reward (verl/utils/reward_score/qa_em_format.py, `compute_score_em`): exact match
 * combined with the format check, with three weights. The table of cases is theirs:
 *
 *   answer found? | EM | valid format | retrieval correct | reward
 *   no            | –  | yes          | yes               | structure_format_score + retrieval_score
 *   no            | –  | yes          | no                | structure_format_score
 *   no            | –  | no           | –                 | 0
 *   yes           | ✓  | yes          | –                 | score (1)
 *   yes           | ✓  | no           | –                 | score − structure_format_score
 *   yes           | ✗  | yes          | yes               | structure_format_score + retrieval_score
 *   yes           | ✗  | yes          | no                | structure_format_score
 *   yes           | ✗  | no           | –                 | final_format_score
 *
 * "Retrieval correct": a normalised golden answer occurs in a normalised `<information>` block (only checked
 * when the format is valid). Defaults: structure_format_score 0.2, final_format_score 0.1, retrieval_score 0.
 * In the tool-call dialects the observations are the tool responses (their JSON wrapper decoded) and the format
 * check is the tool-call sequence (format.ts), so a reward module scores both dialects alike.
 */
import { type Dialect, detectDialect } from '../tags/parser';
import { pythonStrip, searchR1ExtractSolution } from '../tags/searchr1';
import type { ResponseSpan } from '../tags/spans';
import { observationText, parseResponse } from '../tags/trajectory';
import { type FormatOptions, formatValid, formatValidResponse } from './format';
import { em, normalizeAnswer } from './normalize';

export interface QaEmFormatWeights {
  structureFormatScore: number;
  finalFormatScore: number;
  retrievalScore: number;
  /** The reward for a correct answer (Search-R1's `score`, 1). */
  score: number;
}

export const SEARCH_R1_WEIGHTS: QaEmFormatWeights = {
  structureFormatScore: 0.2,
  finalFormatScore: 0.1,
  retrievalScore: 0,
  score: 1,
};

export interface QaEmFormatResult {
  reward: number;
  parts: { em: number; format: number; retrieval: number };
  answer: string | null;
}

/**
 * `extract_information_blocks`: the stripped contents of every `<information>…</information>`. Tool-call dialects
 * (given, or detected from the text): the text of every tool response.
 */
export function informationBlocks(
  text: string,
  dialect: Dialect | 'auto' = 'auto',
  spans?: readonly ResponseSpan[],
): string[] {
  const d = dialect === 'auto' ? detectDialect(text) : dialect;
  if (d === 'searchr1' && !spans)
    return [...text.matchAll(/<information>([\s\S]*?)<\/information>/g)].map((m) => pythonStrip(m[1]!));
  const parsed = parseResponse(text, { dialect: d, ...(spans ? { spans } : {}) }, { expectAnswer: false });
  return parsed.segments.filter((s) => s.kind === 'information').map((s) => pythonStrip(observationText(parsed, s)));
}

/** `is_retrieval_correct`: a normalised golden answer is a substring of a normalised information block. */
export function retrievalCorrect(
  text: string,
  golden: readonly string[],
  dialect: Dialect | 'auto' = 'auto',
  spans?: readonly ResponseSpan[],
): boolean {
  const blocks = informationBlocks(text, dialect, spans).map(normalizeAnswer);
  return blocks.some((b) => golden.some((g) => b.includes(normalizeAnswer(g))));
}

/** The case table above, given its three inputs. */
export function qaEmFormatCase(
  answer: string | null,
  golden: readonly string[],
  validFormat: boolean,
  retrieval: boolean,
  w: QaEmFormatWeights = SEARCH_R1_WEIGHTS,
): number {
  if (answer === null)
    return validFormat ? (retrieval ? w.structureFormatScore + w.retrievalScore : w.structureFormatScore) : 0;
  if (em(answer, golden)) return validFormat ? w.score : w.score - w.structureFormatScore;
  if (validFormat) return retrieval ? w.structureFormatScore + w.retrievalScore : w.structureFormatScore;
  return w.finalFormatScore;
}

/**
 * Search-R1's function exactly: over the whole solution string (prompt + response, chat template included),
 * with `extract_solution`'s two-answer quirk and their strict format check (ChatML assistant marker required,
 * template markers count as content).
 */
export function searchR1QaEmFormat(
  solution: string,
  golden: readonly string[],
  w: QaEmFormatWeights = SEARCH_R1_WEIGHTS,
): QaEmFormatResult {
  const valid = formatValid(solution, { strict: true }).valid;
  const retrieval = valid && retrievalCorrect(solution, golden);
  const answer = searchR1ExtractSolution(solution);
  return {
    reward: qaEmFormatCase(answer, golden, valid, retrieval, w),
    parts: { em: answer !== null && em(answer, golden) ? 1 : 0, format: valid ? 1 : 0, retrieval: retrieval ? 1 : 0 },
    answer,
  };
}

/**
 * Ours: the same table on the response alone, with its last `<answer>` (no prompt example needed), in the
 * response's dialect (`format.dialect`/`prompt`, else detected).
 */
export function qaEmFormat(
  response: string,
  answer: string | null,
  golden: readonly string[],
  w: QaEmFormatWeights = SEARCH_R1_WEIGHTS,
  format: Pick<FormatOptions, 'dialect' | 'prompt' | 'searchTool' | 'spans'> = {},
): QaEmFormatResult {
  const dialect = format.dialect && format.dialect !== 'auto' ? format.dialect : detectDialect(response, format.prompt);
  const valid = formatValidResponse(response, { ...format, dialect }).valid;
  const retrieval = valid && retrievalCorrect(response, golden, dialect, format.spans);
  return {
    reward: qaEmFormatCase(answer, golden, valid, retrieval, w),
    parts: { em: answer !== null && em(answer, golden) ? 1 : 0, format: valid ? 1 : 0, retrieval: retrieval ? 1 : 0 },
    answer,
  };
}
