/**
 * Search behaviour (issue 46): what a policy does with its search tool, per trajectory and over a run.
 *
 * Per trajectory (alarms on the rollout; docs/instruments.md):
 * - `query-copies-question`: a query that is the question itself — its normalised words (Search-R1's
 *   normalize_answer: lower case, no punctuation or articles) cover at least `copyCoverage` (0.9) of the question's
 *   and the question has at least `copyMinWords` (4) words. A policy that pastes the question into the retriever
 *   has learned no query formulation; BM25 over a long question mostly matches its stop words.
 * - `search-after-found`: a search made after an observation that already held a golden answer (as whole normalised
 *   words, the env server's `answer_retrieved` rule). The policy had the answer in front of it and searched again.
 *   (Repeated queries within one trajectory are the older `search-repeat` alarm, src/core/audit/alarms.ts.)
 *
 * Per step (facts summed into {@link SearchStepFacts}, read by the dashboard and by the run-level rule):
 * answer-in-retrieval rate (rollouts whose observations held a golden answer), repeated-query, copied-question and
 * search-after-found rates, and the think channel: its share of non-word characters and the mean recorded entropy
 * of its tokens.
 * - `think-drift` (run level): from a baseline (the first `thinkBaselineSteps` (3) steps with thinking), the think
 *   channel's non-word share rises by at least `thinkNonwordRise` (0.15) or its token entropy by a factor of at least
 *   `thinkEntropyRise` (1.5, and by ≥ 0.2 nats), while the step's exact match holds (≥ the baseline's − `emHold`,
 *   0.05): the lagging indicator of a policy whose reasoning degenerates while its reward has not yet dropped.
 */
import { answerIn, normalizeAnswer } from '../rewards/normalize';
import { tokenTextUnread } from '../run/columns';
import { contentOf, type ParsedTrajectory } from '../tags/parser';
import { isSearch, observationText, searchQueries } from '../tags/trajectory';

export interface SearchOptions {
  /** query-copies-question: the share of the question's words a query must hold. Default 0.9. */
  copyCoverage?: number;
  /** query-copies-question: the fewest words a question needs for the rule. Default 4. */
  copyMinWords?: number;
  /** think-drift: steps (with thinking) that make the baseline. Default 3. */
  thinkBaselineSteps?: number;
  /** think-drift: rise of the non-word share over the baseline that fires. Default 0.15. */
  thinkNonwordRise?: number;
  /** think-drift: factor of the think entropy over the baseline that fires. Default 1.5. */
  thinkEntropyRise?: number;
  /** think-drift: EM "holds" when it is at least the baseline's minus this. Default 0.05. */
  emHold?: number;
}

export const SEARCH_DEFAULTS: Required<SearchOptions> = {
  copyCoverage: 0.9,
  copyMinWords: 4,
  thinkBaselineSteps: 3,
  thinkNonwordRise: 0.15,
  thinkEntropyRise: 1.5,
  emHold: 0.05,
};

/** Search behaviour of one trajectory. */
export interface SearchFacts {
  /** Some observation held a golden answer (null: no golden answers recorded). */
  answerRetrieved: boolean | null;
  /** Index (in the query order) of the first search made after the answer was retrieved; null when none. */
  searchAfterFound: number | null;
  /** Index of the first query that copies the question; null when none. */
  copiedQuery: number | null;
  /** The same query twice (case and spacing aside). */
  repeatedQuery: boolean;
  /** The think channel: characters that are not letters, and non-space characters, all `<think>` blocks together. */
  think: { nonword: number; chars: number } | null;
}

const words = (s: string) => normalizeAnswer(s).split(' ').filter(Boolean);

/** Whether a query copies the question (see the module's rule). */
export function copiesQuestion(query: string, question: string, o: SearchOptions = {}): boolean {
  return copiesWords(query, words(question), o);
}

/** copiesQuestion with the question's words already normalised (a trajectory's queries share them). */
function copiesWords(query: string, q: readonly string[], o: SearchOptions): boolean {
  const { copyCoverage, copyMinWords } = { ...SEARCH_DEFAULTS, ...o };
  if (q.length < copyMinWords) return false;
  const have = new Set(words(query));
  return q.filter((w) => have.has(w)).length / q.length >= copyCoverage;
}

export function searchFacts(
  parsed: ParsedTrajectory,
  r: { question?: string; golden?: string[] },
  o: SearchOptions = {},
): SearchFacts {
  const golden = r.golden?.filter((g) => normalizeAnswer(g)) ?? [];
  let found = false;
  let after: number | null = null;
  let k = 0;
  let nonword = 0;
  let chars = 0;
  let thinks = 0;
  for (const s of parsed.segments) {
    if (isSearch(s)) {
      if (found && after === null) after = k;
      k++;
    } else if (s.kind === 'information' && golden.length && !found) {
      found = answerIn(observationText(parsed, s), golden) === 1;
    } else if (s.kind === 'think') {
      thinks++;
      const compact = contentOf(parsed, s).replace(/\s+/g, '');
      chars += compact.length;
      nonword += compact.length - (compact.match(/\p{L}/gu)?.length ?? 0);
    }
  }
  const queries = searchQueries(parsed);
  const keys = queries.map((q) => q.toLowerCase().replace(/\s+/g, ' ').trim());
  const question = r.question && queries.length ? words(r.question) : undefined;
  const copied = question ? queries.findIndex((q) => copiesWords(q, question, o)) : -1;
  return {
    answerRetrieved: golden.length ? found : null,
    searchAfterFound: after,
    copiedQuery: copied < 0 ? null : copied,
    repeatedQuery: new Set(keys).size < keys.length,
    think: thinks ? { nonword, chars } : null,
  };
}

/** The search-behaviour alarms of one trajectory. */
export function searchAlarms(f: SearchFacts): ('query-copies-question' | 'search-after-found')[] {
  const out: ('query-copies-question' | 'search-after-found')[] = [];
  if (f.copiedQuery !== null) out.push('query-copies-question');
  if (f.searchAfterFound !== null) out.push('search-after-found');
  return out;
}

/**
 * The mean recorded entropy over the tokens that lie inside `<think>` blocks (token spans from `tokens.text`, laid
 * end to end over prompt + response); null without entropies or thinking.
 */
export function thinkEntropy(
  parsed: ParsedTrajectory,
  promptLength: number,
  tokens: { text: string[]; entropy?: (number | null)[] } | undefined,
): { sum: number; n: number } | null {
  // (`in`, not a read: a token-store record builds an array on its first read)
  if (!tokens || !('entropy' in tokens)) return null;
  const spans = parsed.segments.filter((s) => s.kind === 'think').map((s) => [s.contentStart, s.contentEnd] as const);
  if (!spans.length) return null;
  if (tokenTextUnread(tokens)) return null;
  let texts: string[];
  try {
    texts = tokens.text;
  } catch {
    return null; // a token-store record read for the audit without its token texts: no alignment, no think entropy
  }
  const entropy = tokens.entropy;
  if (!entropy) return null;
  let sum = 0;
  let n = 0;
  let at = -promptLength;
  let k = 0;
  for (let i = 0; i < texts.length; i++) {
    const start = at;
    at += texts[i]!.length;
    if (start < 0) continue;
    while (k < spans.length && spans[k]![1] <= start) k++;
    if (k >= spans.length) break;
    const e = entropy[i];
    if (start >= spans[k]![0] && typeof e === 'number' && Number.isFinite(e)) {
      sum += e;
      n++;
    }
  }
  return n ? { sum, n } : null;
}

/** A step's search behaviour, summed (so steps merge by adding). */
export interface SearchStepFacts {
  /** Rollouts counted (training rollouts where the step has any). */
  rollouts: number;
  /** Of them, with golden answers recorded, and whose observations held one. */
  withGolden: number;
  answerRetrieved: number;
  repeated: number;
  copied: number;
  afterFound: number;
  /** Exact match: rollouts with an EM known, its sum. */
  emN: number;
  emSum: number;
  /** The think channel: rollouts with thinking, their non-word and non-space characters, token entropies. */
  thinkRollouts: number;
  thinkNonword: number;
  thinkChars: number;
  thinkEntropySum: number;
  thinkEntropyN: number;
}

export function emptySearchStep(): SearchStepFacts {
  return {
    rollouts: 0,
    withGolden: 0,
    answerRetrieved: 0,
    repeated: 0,
    copied: 0,
    afterFound: 0,
    emN: 0,
    emSum: 0,
    thinkRollouts: 0,
    thinkNonword: 0,
    thinkChars: 0,
    thinkEntropySum: 0,
    thinkEntropyN: 0,
  };
}

export function addSearchStep(a: SearchStepFacts, b: SearchStepFacts): SearchStepFacts {
  const out = { ...a };
  for (const k of Object.keys(b) as (keyof SearchStepFacts)[]) out[k] += b[k];
  return out;
}

/** Adds one trajectory's facts to a step's. */
export function countSearch(
  step: SearchStepFacts,
  f: SearchFacts,
  em: number | null,
  entropy: { sum: number; n: number } | null,
): void {
  step.rollouts++;
  if (f.answerRetrieved !== null) {
    step.withGolden++;
    if (f.answerRetrieved) step.answerRetrieved++;
  }
  if (f.repeatedQuery) step.repeated++;
  if (f.copiedQuery !== null) step.copied++;
  if (f.searchAfterFound !== null) step.afterFound++;
  if (em !== null) {
    step.emN++;
    step.emSum += em;
  }
  if (f.think) {
    step.thinkRollouts++;
    step.thinkNonword += f.think.nonword;
    step.thinkChars += f.think.chars;
  }
  if (entropy) {
    step.thinkEntropySum += entropy.sum;
    step.thinkEntropyN += entropy.n;
  }
}

/** A step's rates (null where nothing was counted). */
export function searchRates(s: SearchStepFacts): {
  answer_retrieved: number | null;
  repeated_query: number | null;
  copied_query: number | null;
  search_after_found: number | null;
  em: number | null;
  think_nonword: number | null;
  think_entropy: number | null;
} {
  const r = (x: number, n: number) => (n ? x / n : null);
  return {
    answer_retrieved: r(s.answerRetrieved, s.withGolden),
    repeated_query: r(s.repeated, s.rollouts),
    copied_query: r(s.copied, s.rollouts),
    search_after_found: r(s.afterFound, s.rollouts),
    em: r(s.emSum, s.emN),
    think_nonword: r(s.thinkNonword, s.thinkChars),
    think_entropy: r(s.thinkEntropySum, s.thinkEntropyN),
  };
}

/** think-drift over a run's steps (ascending): the steps where it fires, with what it saw. */
export function thinkDriftSteps(
  steps: readonly { step: number; search: SearchStepFacts }[],
  o: SearchOptions = {},
): { step: number; value: number; baseline: number; measure: 'non-word share' | 'think entropy'; em: number | null }[] {
  const { thinkBaselineSteps, thinkNonwordRise, thinkEntropyRise, emHold } = { ...SEARCH_DEFAULTS, ...o };
  const withThink = steps.filter((s) => s.search.thinkChars > 0).sort((a, b) => a.step - b.step);
  if (withThink.length <= thinkBaselineSteps) return [];
  const base = withThink.slice(0, thinkBaselineSteps).reduce(addSearchStep_, emptySearchStep());
  const b = searchRates(base);
  const out: {
    step: number;
    value: number;
    baseline: number;
    measure: 'non-word share' | 'think entropy';
    em: number | null;
  }[] = [];
  for (const s of withThink.slice(thinkBaselineSteps)) {
    const r = searchRates(s.search);
    const holds = r.em === null || b.em === null || r.em >= b.em - emHold;
    if (!holds) continue;
    if (r.think_nonword !== null && b.think_nonword !== null && r.think_nonword >= b.think_nonword + thinkNonwordRise)
      out.push({
        step: s.step,
        value: r.think_nonword,
        baseline: b.think_nonword,
        measure: 'non-word share',
        em: r.em,
      });
    else if (
      r.think_entropy !== null &&
      b.think_entropy !== null &&
      r.think_entropy >= b.think_entropy * thinkEntropyRise &&
      r.think_entropy - b.think_entropy >= 0.2
    )
      out.push({ step: s.step, value: r.think_entropy, baseline: b.think_entropy, measure: 'think entropy', em: r.em });
  }
  return out;
}

const addSearchStep_ = (a: SearchStepFacts, s: { search: SearchStepFacts }) => addSearchStep(a, s.search);
