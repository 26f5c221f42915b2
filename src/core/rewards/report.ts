/**
 * What a reward run reports, as plain data: the failures' kinds and the report the CLI (`reward --report`), the env
 * server and the Reward Lab show (src/core/rewards/scoring.ts builds it). Types only, importing nothing: the Reward
 * Lab's contract (src/core/protocol/rewardLab.ts) shows this type, and its webview's type check reads this file.
 */

export type RewardErrorKind =
  | 'throw'
  | 'nan'
  | 'type'
  | 'timeout'
  | 'memory'
  | 'crash'
  | 'batch-timeout'
  | 'skipped'
  | 'cancelled'
  | 'input';

export interface RewardError {
  kind: RewardErrorKind;
  message: string;
  /** The user's file and line the failure maps to (when there is a stack frame in their code). */
  file?: string;
  line?: number;
  column?: number;
  stack?: string;
}

/** Failures so far, by kind. */
export type ErrorCounts = Partial<Record<RewardErrorKind, number>>;

export interface Histogram {
  /** Bin edges (bins.length + 1 of them). */
  edges: number[];
  recorded: number[];
  scored: number[];
}

export interface RewardReport {
  count: number;
  scored: number;
  errors: number;
  /** The failures by kind (timeout, throw, memory, skipped, …). */
  errorsByKind: ErrorCounts;
  mean: number | null;
  std: number | null;
  recordedMean: number | null;
  /** Fraction of rollouts whose new reward equals the recorded one (of those with a recorded reward). */
  agreement: number | null;
  /** Fraction of GRPO groups (step, group; ≥ 2 samples) whose rewards are all equal: with new rewards, and recorded. */
  frac_zero_std_groups: number | null;
  frac_zero_std_groups_recorded: number | null;
  groups: number;
  histogram: Histogram;
  bySource: { data_source: string; count: number; recordedMean: number | null; mean: number | null }[];
  /** Rollouts whose reward changed (the first `limit`), biggest change first. */
  changed: { id: string; where: string; recorded: number | null; reward: number | null }[];
  changedCount: number;
  /** The first `limit` failures, with messages naming file, line and rollout. */
  failures: { id: string; where: string; message: string; error: RewardError }[];
}
