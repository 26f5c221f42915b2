/**
 * Summary statistics over rollouts (DESIGN §4.3): count, reward mean/std, exact-match rate, valid-format rate,
 * searches and turns histograms, invalid actions, dialects, finish reasons, and the fraction of GRPO groups whose
 * rewards are all equal (no learning signal: every advantage in the group is 0). Each response is read in its
 * dialect (Search-R1 tags or tool calls), so the numbers mean the same for both.
 */
import { TOKEN_IDS_TEXT } from '../importers/foreign/sample';
import { formatValidParsed, formatValidResponse } from '../rewards/format';
import { em } from '../rewards/normalize';
import { groupKeyOf, type LocatedIssue, type ReadOptions, type Rollout, rolloutContext } from '../run/format';
import type { Dialect, ParsedTrajectory } from '../tags/parser';
import { responseAnswer, turnsOf } from '../tags/searchr1';
import { invalidActionCount, parseResponse, searchCount } from '../tags/trajectory';

export interface Histogram {
  [value: string]: number;
}

export interface RunSummary {
  trajectories: number;
  malformed: number;
  /** The first problems found (file:line: field: message). */
  issues: string[];
  reward: { count: number; mean: number; std: number; min: number; max: number } | null;
  /** Exact match: from `reward_parts.em` when recorded, else computed from the final answer and `golden`. */
  em: { count: number; rate: number } | null;
  /**
   * Trajectories whose text is their token ids (`⟨id⟩`: an ids-only dump read without a tokenizer, `meta.text`
   * `token ids`): nothing is read from their text, so the format, searches, turns, invalid actions and dialects below
   * are over the others — null when no trajectory has text.
   */
  without_text: number;
  format: { valid: number; rate: number } | null;
  searches: { mean: number; histogram: Histogram } | null;
  turns: { mean: number; histogram: Histogram } | null;
  /** Invalid actions over all trajectories, and how many trajectories have one or more. */
  invalid_actions: { total: number; trajectories: number } | null;
  /** Trajectories per dialect. */
  dialects: Histogram;
  finish: Histogram;
  data_sources: Histogram;
  /** GRPO groups (same split, step and group id) with two or more rewarded samples. */
  groups: { count: number; zero_variance: number; frac_zero_std: number } | null;
}

/**
 * Whether a record's prompt and response are text: not when they are its token ids written as `⟨id⟩` (an ids-only
 * dump read without a tokenizer: `meta.text` is `token ids`), from which nothing can be read.
 */
export function hasText(r: Rollout): boolean {
  return r.meta?.text !== TOKEN_IDS_TEXT;
}

/** Facts about one trajectory that the summary and the inspector need. */
export interface TrajectoryFacts {
  /**
   * False when the record's text is its token ids ({@link hasText}): the facts read from the text (dialect, answer,
   * searches, turns, format, invalid actions, exact match unless recorded) are then not known — left at their
   * empty values, and callers show them as not available.
   */
  text: boolean;
  dialect: Dialect;
  answer: string | null;
  searches: number;
  turns: number;
  em: number | null;
  formatValid: boolean;
  invalidActions: number;
  /** The parse the facts come from (for callers that need more, e.g. diagnostics). */
  parsed: ParsedTrajectory;
}

export function trajectoryFacts(r: Rollout, read: ReadOptions = {}): TrajectoryFacts {
  const text = hasText(r);
  const parsed = text
    ? parseResponse(r.response, rolloutContext(r, read))
    : parseResponse('', rolloutContext({ v: r.v, id: r.id, prompt: '', response: '' }, read));
  const strict = { strictActions: r.strict_actions === true };
  const turns = turnsOf(parsed, strict);
  const answer = responseAnswer(parsed, strict, turns) ?? null;
  const searches = r.searches ?? searchCount(parsed);
  const recordedEm = r.reward_parts?.em;
  const emValue =
    typeof recordedEm === 'number'
      ? recordedEm
      : text && r.golden && r.golden.length > 0
        ? answer === null
          ? 0
          : em(answer, r.golden)
        : null;
  return {
    text,
    dialect: parsed.dialect,
    answer,
    searches,
    turns: r.turns ?? turns.length,
    em: emValue,
    formatValid: (parsed.dialect === 'searchr1'
      ? formatValidResponse(r.response, { dialect: 'searchr1' })
      : formatValidParsed(parsed)
    ).valid,
    invalidActions: invalidActionCount(parsed, turns),
    parsed,
  };
}

export class SummaryBuilder {
  private n = 0;
  private withoutText = 0;
  private malformed = 0;
  private issues: string[] = [];
  private rewards = { count: 0, sum: 0, sumSq: 0, min: Infinity, max: -Infinity };
  private emCount = 0;
  private emSum = 0;
  private formatOk = 0;
  private searchSum = 0;
  private turnSum = 0;
  private searchHist = new Map<number, number>();
  private turnHist = new Map<number, number>();
  private invalidTotal = 0;
  private invalidTrajectories = 0;
  private dialects = new Map<string, number>();
  private finish = new Map<string, number>();
  private sources = new Map<string, number>();
  private groups = new Map<string, { n: number; min: number; max: number }>();

  addIssue(issues: LocatedIssue[]): void {
    this.malformed++;
    for (const i of issues)
      if (this.issues.length < 20)
        this.issues.push(`${i.file}:${i.line}: ${i.field ? `${i.field}: ` : ''}${i.message}`);
  }

  add(r: Rollout, facts: TrajectoryFacts = trajectoryFacts(r)): void {
    this.n++;
    if (typeof r.reward === 'number') {
      const w = this.rewards;
      w.count++;
      w.sum += r.reward;
      w.sumSq += r.reward * r.reward;
      w.min = Math.min(w.min, r.reward);
      w.max = Math.max(w.max, r.reward);
      const key = groupKeyOf(r);
      if (key !== undefined) {
        const g = this.groups.get(key) ?? { n: 0, min: Infinity, max: -Infinity };
        g.n++;
        g.min = Math.min(g.min, r.reward);
        g.max = Math.max(g.max, r.reward);
        this.groups.set(key, g);
      }
    }
    if (facts.em !== null) {
      this.emCount++;
      this.emSum += facts.em;
    }
    if (r.finish) bump(this.finish, r.finish);
    bump(this.sources, r.data_source ?? '(none)');
    if (!facts.text) {
      this.withoutText++;
      return;
    }
    if (facts.formatValid) this.formatOk++;
    this.searchSum += facts.searches;
    this.turnSum += facts.turns;
    bump(this.searchHist, facts.searches);
    bump(this.turnHist, facts.turns);
    this.invalidTotal += facts.invalidActions;
    if (facts.invalidActions > 0) this.invalidTrajectories++;
    bump(this.dialects, facts.dialect);
  }

  result(): RunSummary {
    const w = this.rewards;
    const mean = w.count ? w.sum / w.count : 0;
    const grouped = [...this.groups.values()].filter((g) => g.n >= 2);
    const text = this.n - this.withoutText;
    const zero = grouped.filter((g) => g.max - g.min <= 1e-12).length;
    return {
      trajectories: this.n,
      malformed: this.malformed,
      issues: this.issues,
      reward: w.count
        ? { count: w.count, mean, std: Math.sqrt(Math.max(0, w.sumSq / w.count - mean * mean)), min: w.min, max: w.max }
        : null,
      em: this.emCount ? { count: this.emCount, rate: this.emSum / this.emCount } : null,
      without_text: this.withoutText,
      ...(this.n > 0 && this.withoutText === this.n
        ? { format: null, searches: null, turns: null, invalid_actions: null }
        : {
            format: { valid: this.formatOk, rate: text ? this.formatOk / text : 0 },
            searches: { mean: text ? this.searchSum / text : 0, histogram: toObject(this.searchHist) },
            turns: { mean: text ? this.turnSum / text : 0, histogram: toObject(this.turnHist) },
            invalid_actions: { total: this.invalidTotal, trajectories: this.invalidTrajectories },
          }),
      dialects: toObject(this.dialects),
      finish: toObject(this.finish),
      data_sources: toObject(this.sources),
      groups: grouped.length
        ? { count: grouped.length, zero_variance: zero, frac_zero_std: zero / grouped.length }
        : null,
    };
  }
}

function bump<K>(m: Map<K, number>, k: K): void {
  m.set(k, (m.get(k) ?? 0) + 1);
}

function toObject<K extends string | number>(m: Map<K, number>): Histogram {
  return Object.fromEntries(
    [...m.entries()]
      .sort((a, b) =>
        typeof a[0] === 'number' ? (a[0] as number) - (b[0] as number) : String(a[0]).localeCompare(String(b[0])),
      )
      .map(([k, v]) => [String(k), v]),
  );
}
