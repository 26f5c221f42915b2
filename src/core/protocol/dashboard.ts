/**
 * The training dashboard's contract (webview/dashboard/; the host is src/extension/training/dashboard.ts): what its
 * two sides ask and tell, its view models, and the metric and alarm names it charts (the audit and the CLI name them
 * from here too). Imports types only (it is bundled into the webview).
 */
import type { Contract } from './messaging';

/**
 * The alarms (named here, the dashboard charts them; docs/instruments.md has each rule and threshold): the
 * reward-hacking alarms (src/core/audit/alarms.ts), run health (health.ts), group diagnostics (groupChecks.ts) and
 * search behaviour (search.ts). Run-level ones (RUN_ALARMS) fire on steps, the others on rollouts.
 */
export const ALARMS = [
  'answer-enumeration',
  'think-degenerate',
  'length-capped',
  'search-repeat',
  'answer-in-search',
  'search-collapse',
  'tags-in-document',
  // run health (issue 46)
  'step-stall',
  'retriever-slow',
  'retriever-timeouts',
  'reward-slow',
  'truncation-high',
  'length-collapse',
  'non-finite',
  // group diagnostics
  'zero-std-high',
  'group-split',
  'group-size',
  'phantom-advantage',
  'kl-only-gradient',
  'stale-group',
  // search behaviour
  'query-copies-question',
  'search-after-found',
  'think-drift',
] as const;
export type Alarm = (typeof ALARMS)[number];
/** The alarms that fire on a step of the run (advisories), not on a rollout; `non-finite` does both. */
export const RUN_ALARMS: readonly Alarm[] = [
  'step-stall',
  'retriever-slow',
  'retriever-timeouts',
  'reward-slow',
  'truncation-high',
  'length-collapse',
  'non-finite',
  'zero-std-high',
  'think-drift',
];

/** The metric names the dashboard charts the audit's per-step series is sent as (`audit/…`, beside the trainer's; src/core/audit/series.ts). */
export const AUDIT_METRICS = {
  drift: 'audit/drift_rate',
  meanAbsDiff: 'audit/logprob/mean_abs_diff',
  ratioOutside: 'audit/logprob/ratio_outside',
  seqRatio: 'audit/logprob/seq_ratio',
  leaks: 'audit/leaks',
  /** Rollouts audited at the step (what an alarm's count is a share of). */
  rollouts: 'audit/rollouts',
  alarm: (name: string) => `audit/alarm/${name}`,
  /** The alarm an `alarm` key counts (`audit/alarm/search-repeat` → search-repeat); undefined for any other key. Generic
   * over names: the dashboard charts and lanes every alarm the audit counts, whatever its name. */
  alarmOf: (key: string): string | undefined => /^audit\/alarm\/(.+)$/.exec(key)?.[1],
  /** Search behaviour per step (src/core/audit/search.ts): answer_retrieved, repeated_query, copied_query, search_after_found, em, think_nonword, think_entropy. */
  search: (name: string) => `audit/search/${name}`,
} as const;

/** The trainer's held-out metrics by the searches a question needs (its dataset line's `meta.hops`; train.py
 * `_eval_report`): exact match, searches per question, and the share whose searches returned a golden answer (the
 * env server's `answer_retrieved`: low EM with a high share is a reading failure). The dashboard charts hops 1 and 2,
 * the demo prints them. */
export const HOPS_METRICS = {
  em: (hops: number) => `val/em_by_hops/${hops}`,
  searches: (hops: number) => `val/searches_by_hops/${hops}`,
  retrieved: (hops: number) => `val/answer_retrieved_by_hops/${hops}`,
  /** A search after the first named the question's bridge entity (its dataset line's `meta.bridge`; data.py
   * `bridge_searched`): what the second search of a multi-hop question is for. */
  bridge: (hops: number) => `val/bridge_searched_by_hops/${hops}`,
  /** The hops an `em` key is about (`val/em_by_hops/2` → 2); undefined for any other key. */
  hopsOf: (key: string): number | undefined => {
    const m = /^val\/em_by_hops\/(\d+)$/.exec(key);
    return m ? Number(m[1]) : undefined;
  },
} as const;

/** The trainer's held-out metrics by the question's type (its dataset line's `meta.kind`, when the eval set names 2–16
 * kinds; train.py `_eval_report`, kind names made metric-safe): exact match, searches, answer retrieved. The dashboard
 * charts EM and answer retrieved by kind: a mean over mixed types hides the one the policy fails. */
export const KIND_METRICS = {
  em: (kind: string) => `val/em_by_kind/${kind}`,
  searches: (kind: string) => `val/searches_by_kind/${kind}`,
  retrieved: (kind: string) => `val/answer_retrieved_by_kind/${kind}`,
  /** The kind an `em` key is about (`val/em_by_kind/river` → river); undefined for any other key. */
  kindOf: (key: string): string | undefined => /^val\/em_by_kind\/(.+)$/.exec(key)?.[1],
} as const;

/** A stage of a curriculum run (`train.stages`; src/core/run/config.ts's runStages): the run's step before its
 * first step (the policy it starts from), its steps, and its batches' hops mix (null: the data's own). */
export interface RunStage {
  start: number;
  steps: number;
  hopsMix: Record<string, number> | null;
}

/** A run shown in the dashboard (several are overlaid). */
export interface DashboardRun {
  id: string;
  dir: string;
  state: 'running' | 'finished' | 'failed' | 'stopped' | 'interrupted';
  step: number;
  total?: number;
  /** A running run's phase (`warmup`, `rollout`, `update`, `eval`, …), and the warm start's progress and loss. */
  phase?: string;
  warmup?: { step: number; steps: number; loss?: number };
  /** A curriculum run's stages (train.stages), marked on the charts where each after the first starts. */
  stages?: RunStage[];
}

/** One metrics.jsonl line: `step` and named numbers (DESIGN §4.3); the trainer adds `time` (Unix seconds). */
export type MetricsRow = { step: number } & Record<string, number>;

/**
 * The dashboard's settings (`searchAgent.dashboard.*`), sent by the host at start and when they change.
 * `alarmThresholds`: per alarm name, the share of a step's audited rollouts (0–1) at or above which the alarm lane marks
 * the step (0: any rollout); `*` is the share for alarms it does not name.
 */
export interface DashboardSettings {
  alarmThresholds: Record<string, number>;
}

/** What the user set in the dashboard (kept in the webview's state): smoothing (TensorBoard's debiased EMA weight,
 * 0 = none), the x-axis, the alarm lane shown or not, the charts on a log scale and pinned (keys), the chart search. */
export interface DashboardView {
  smoothing: number;
  xAxis: 'step' | 'time';
  alarms: boolean;
  log: string[];
  pinned: string[];
  search: string;
}

export interface DashboardContract extends Contract {
  host: {
    /** The runs shown and every metrics line so far (after a re-created view too). */
    getState(params: void): {
      runs: DashboardRun[];
      metrics: { dir: string; rows: MetricsRow[] }[];
      audit: { dir: string; rows: MetricsRow[] }[];
      settings: DashboardSettings;
    };
    /** Adds a run to the overlay (a quick pick of the workspace's runs). */
    addRun(params: void): void;
    removeRun(params: { dir: string }): void;
    /** Opens the rollouts of a step (the nearest step with rollouts at or before it). */
    openStep(params: { dir: string; step: number }): void;
    /** Opens the GRPO groups of a step (the nearest step with rollouts at or before it): the zero-variance chart's click. */
    openGroups(params: { dir: string; step: number }): void;
  };
  view: {
    /** What the charts hold, for tests and diagnostics. */
    describe(params: void): {
      charts: {
        key: string;
        title: string;
        series: number;
        points: number;
        colors: string[];
        markers: string[];
        log: boolean;
        pinned: boolean;
        hidden: boolean;
        lane: { run: string; steps: number[] }[];
      }[];
      runs: string[];
      theme: string;
      view: DashboardView;
    };
  };
  toView: {
    runs: { runs: DashboardRun[] };
    settings: DashboardSettings;
    /** Lines appended to a run's metrics.jsonl since the last message (or all of them with `reset`). */
    metrics: { dir: string; rows: MetricsRow[]; reset?: boolean };
    /** The audit of the run's rollouts per step (`audit/…` metrics, src/core/audit/series.ts), all of it each time. */
    audit: { dir: string; rows: MetricsRow[] };
  };
  toHost: Record<string, never>;
}
