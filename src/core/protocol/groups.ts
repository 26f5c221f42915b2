/**
 * The GRPO group view's contract (webview/groups/; the host is src/extension/training/groupsPanel.ts, the models are
 * built in src/core/audit/groups.ts): what its two sides ask and tell, and its view models. Imports types only (it is
 * bundled into the webview).
 */
import type { Contract } from './messaging';

/** Why a group's rewards are all equal (GRPO's advantage is 0 for every sample: no signal). */
export type ZeroVarianceReason = 'all-truncated' | 'all-invalid-format' | 'all-correct' | 'all-wrong' | 'equal-rewards';

export interface GroupSample {
  id: string;
  file: string;
  line: number;
  sample?: number;
  reward?: number;
  /** The sample's advantage (GRPO broadcasts one per sequence: read from its first scored trained token). */
  advantage: number | null;
  answer: string | null;
  /** Exact match of the answer against the golden answers (recorded `reward_parts.em`, else computed); null without golden answers. */
  em: number | null;
  formatValid: boolean;
  searches: number;
  finish?: string;
  /** Where this sample's stream first differs from the group's first sample (tokens.ids, or characters of the response without tokens); null for the first sample or an identical one. */
  divergesAt: number | null;
  length: number;
}

export interface GroupView {
  key: string;
  group: string;
  step?: number;
  split?: string;
  question?: string;
  golden?: string[];
  samples: GroupSample[];
  rewardMean: number | null;
  rewardStd: number | null;
  /** Every reward recorded and equal. */
  zeroVariance: boolean;
  reason?: ZeroVarianceReason;
  /** Where the samples' streams first stop agreeing (the shared prompt's end, or later); null with one sample. */
  divergeAt: number | null;
  unit: 'tokens' | 'chars';
  /** The group diagnostics that fire on it (group-split, group-size, phantom-advantage, kl-only-gradient, stale-group; src/core/audit/groupChecks.ts). */
  alarms: string[];
}

export interface GroupsState {
  source: string;
  step?: number;
  groups: GroupView[];
  /** Lines that could not be read (file:line: message), shown above the groups. */
  errors: string[];
  /**
   * The step was recorded in part (train.record.groups / every, or a writer that fell behind): `recorded` of its `of`
   * rollouts. Flagged groups are always kept, so the groups shown lean toward them (zero-variance ones among them).
   */
  sampled?: { recorded: number; of: number };
}

export interface GroupsContract extends Contract {
  host: {
    getState(params: void): GroupsState | null;
    /** Replays one sample (the replay panel). */
    openSample(params: { file: string; line: number }): void;
  };
  view: {
    describe(params: void): {
      groups: number;
      zeroVariance: number;
      shown: number;
      reasons: string[];
      step: number | null;
    };
  };
  toView: { state: GroupsState };
  toHost: Record<string, never>;
}
