/**
 * The Reward Lab's contract (webview/reward-lab/; the host is src/extension/rewards/rewardWorkbench.ts): what its two
 * sides ask and tell, and its view model. Imports types only (it is bundled into the webview).
 */
import type { RewardReport } from '../rewards/report';
import type { Contract } from './messaging';

/** The report of one reward module scored against one rollout source: the reward runner's own (`reward --report`). */
export type { RewardReport };

export interface RewardLabState {
  /** The reward module's path and its file name. */
  module: string;
  moduleName: string;
  /** The rollout file or run directory scored against (null until chosen). */
  rollouts: string | null;
  status: 'idle' | 'running' | 'done' | 'failed' | 'cancelled' | 'untrusted';
  /** While scoring: rollouts done, of how many, and the failures so far by kind (timeouts as they happen). */
  progress?: { done: number; total: number | null; errors?: Partial<Record<string, number>> };
  /** The last finished run's numbers: shown dimmed while a new run scores (or after one was cancelled). */
  report?: RewardReport;
  /**
   * The rollouts re-scoring compares on: the set the first run after choosing them read (a live run keeps growing;
   * "before the edit" and "now" score the same rollouts). Choosing the rollouts again takes a new set.
   */
  pinned?: { count: number; at: string };
  /** The previous run's numbers (before the last edit), to compare with. */
  previous?: { mean: number | null; frac_zero_std_groups: number | null; agreement: number | null };
  compileError?: { file: string; line: number; column: number; message: string };
  /** A failure of the run itself (not of items). */
  message?: string;
  /** Run number, increasing (lets the view and tests tell runs apart). */
  run: number;
  finishedAt?: string;
}

const REWARD_FAILURE_WORDS: Record<string, [string, string]> = {
  timeout: ['timeout', 'timeouts'],
  throw: ['error', 'errors'],
  memory: ['out of memory', 'out of memory'],
  skipped: ['not run', 'not run'],
};

/** `3 timeouts · 1 error` from a reward run's failures by kind (the kinds not named above count as errors): the Reward Lab and its lens. */
export function failedSoFar(errors: Partial<Record<string, number>> | undefined): string {
  if (!errors) return '';
  const counts = new Map<string, number>();
  for (const [k, n] of Object.entries(errors)) {
    if (!n) continue;
    const key = k in REWARD_FAILURE_WORDS ? k : 'throw';
    counts.set(key, (counts.get(key) ?? 0) + n);
  }
  return ['timeout', 'throw', 'memory', 'skipped']
    .filter((k) => counts.get(k))
    .map((k) => `${counts.get(k)!.toLocaleString()} ${REWARD_FAILURE_WORDS[k]![counts.get(k) === 1 ? 0 : 1]}`)
    .join(' · ');
}

export interface RewardLabContract extends Contract {
  host: {
    getState(params: void): RewardLabState;
    rescore(params: void): void;
    /** Stops the run in flight (its scoring process is killed). */
    cancel(params: void): void;
    chooseRollouts(params: void): void;
    /** Opens `file:line` (a rollout's line, or a stack frame) in an editor. */
    openLocation(params: { where: string }): void;
  };
  view: Record<string, never>;
  toView: { state: RewardLabState };
  toHost: Record<string, never>;
}
