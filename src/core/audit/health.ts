/**
 * Run health (issue 46): advisories over a run's steps — from its metrics (what the trainer and the env server
 * measured: step time, reward time, retriever latency and timeouts) and from its rollouts (truncation, response
 * length, values that are not finite). Each rule, its threshold and where its numbers come from is in
 * docs/instruments.md; every threshold is an option of {@link HealthOptions}.
 *
 * - `step-stall`: a step's `timing_s/step` is over `stallFactor` (3) × the median of the earlier steps' (at least
 *   `minHistory` (3) of them) and over `stallFloorS` (1 s).
 * - `reward-slow`: `timing_s/reward` likewise (the /reward call: the user's reward module in its sandbox).
 * - `retriever-slow`: the step's retriever latency p99 (`env/retrieve_ms/p99`, the env server's own measure of each
 *   /retrieve, reported in its Server-Timing header; else the trainer's round trip `env/retrieve_wait_ms/p99`) over
 *   `stallFactor` × the median of the earlier steps' p99 and over `latencyFloorMs` (50 ms): latency climbing.
 * - `retriever-timeouts`: `env/retrieve_timeouts` > 0 (requests the trainer's client gave up waiting for and retried).
 * - `truncation-high`: at least `truncatedFraction` (0.25) of the step's training rollouts ended at the length limit
 *   (`finish: "length"`; without rollouts, the trainer's `response_length/clip_ratio`).
 * - `length-collapse`: the step's mean response length (tokens after the prompt; characters for records without
 *   tokens; without rollouts, `response_length/mean`) is below `collapseFraction` (0.5) × the median of the previous
 *   `collapseWindow` (10) steps' (at least `minHistory`).
 * - `non-finite`: a recorded number that is NaN or ±∞ — in a rollout's token arrays or reward (as read, or listed by
 *   the writer in `meta.nonfinite`: our trainer writes JSON, which has neither, so it records null there and names
 *   the positions), or a metrics value that is not a finite number (null: the trainer's writer turns NaN/∞ into
 *   null). On the rollout and on its step.
 */
import type { MetricsRow } from '../protocol/dashboard';
import { tokenColumnsOf } from '../run/columns';
import { type Rollout, TOKEN_ROLES } from '../run/format';

/** The store's role code of `prompt` (src/core/run/columns.ts: indices of TOKEN_ROLES). */
const PROMPT_CODE = TOKEN_ROLES.indexOf('prompt');

export interface HealthOptions {
  /** step-stall, reward-slow, retriever-slow: a value over this × the running median. Default 3. */
  stallFactor?: number;
  /** step-stall, reward-slow: and over this many seconds. Default 1. */
  stallFloorS?: number;
  /** retriever-slow: and a p99 over this many milliseconds. Default 50. */
  latencyFloorMs?: number;
  /** Earlier steps a running median needs. Default 3. */
  minHistory?: number;
  /** truncation-high: the fraction of truncated rollouts that fires. Default 0.25. */
  truncatedFraction?: number;
  /** length-collapse: a mean below this × the recent median fires. Default 0.5. */
  collapseFraction?: number;
  /** length-collapse: the steps of the recent median. Default 10. */
  collapseWindow?: number;
}

export const HEALTH_DEFAULTS: Required<HealthOptions> = {
  stallFactor: 3,
  stallFloorS: 1,
  latencyFloorMs: 50,
  minHistory: 3,
  truncatedFraction: 0.25,
  collapseFraction: 0.5,
  collapseWindow: 10,
};

/** A run-level finding at one step: its alarm name, what was measured, the threshold it crossed, and why. */
export interface Advisory {
  name: string;
  step: number;
  value: number | null;
  threshold: number | null;
  message: string;
  /** What the value is over, where that matters: the trainer's metric over every rollout of the step, or a recorded sample. */
  over?: 'trainer' | 'sample';
}

/** What the run-health rules read of a step's rollouts (sums, so steps read from several files add up). */
export interface HealthStepFacts {
  /** Training rollouts counted (held-out ones only where the step has no training rollout). */
  rollouts: number;
  truncated: number;
  /** Response length: rollouts with tokens and their tokens after the prompt; all rollouts' response characters. */
  tokenRollouts: number;
  responseTokens: number;
  responseChars: number;
  /** Rollouts with a value that is not finite. */
  nonFinite: number;
}

export function emptyHealthStep(): HealthStepFacts {
  return { rollouts: 0, truncated: 0, tokenRollouts: 0, responseTokens: 0, responseChars: 0, nonFinite: 0 };
}

export function addHealthStep(a: HealthStepFacts, b: HealthStepFacts): HealthStepFacts {
  const out = { ...a };
  for (const k of Object.keys(b) as (keyof HealthStepFacts)[]) out[k] += b[k];
  return out;
}

const TOKEN_NUMBERS = ['rollout_logprob', 'logprob', 'ref_logprob', 'advantage', 'value', 'entropy'] as const;

/**
 * Where a rollout holds a number that is not finite: `{array: [token indices]}` (and `reward: []` for its reward),
 * from the values as read and from `meta.nonfinite` (the writer's list of positions it had to write as null).
 * Empty when all are finite.
 */
export function nonFiniteValues(r: Rollout): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  const tk = r.tokens as Record<string, unknown[] | undefined> | undefined;
  const cols = tokenColumnsOf(tk);
  if (cols) {
    // a token-store record: its float columns, where NaN is the record's null (a NaN computed by the trainer is in
    // meta.nonfinite, below) and ±∞ is itself
    for (const k of TOKEN_NUMBERS) {
      const a = cols[k];
      // (the common case, all finite or NaN, decided by the typed array's own search)
      if (!a || (a.indexOf(Infinity) < 0 && a.indexOf(-Infinity) < 0)) continue;
      const bad: number[] = [];
      for (let i = 0; i < a.length; i++) if (a[i] === Infinity || a[i] === -Infinity) bad.push(i);
      if (bad.length) out[k] = bad;
    }
  } else if (tk)
    for (const k of TOKEN_NUMBERS) {
      let a: unknown[] | undefined;
      try {
        a = tk[k];
      } catch {
        continue; // a token-store record read for a view without this array (its NaN is null: meta.nonfinite lists them)
      }
      if (!Array.isArray(a)) continue;
      const bad: number[] = [];
      a.forEach((v, i) => {
        if ((typeof v === 'number' && !Number.isFinite(v)) || v === 'NaN' || v === 'Infinity' || v === '-Infinity')
          bad.push(i);
      });
      if (bad.length) out[k] = bad;
    }
  if (typeof r.reward === 'number' && !Number.isFinite(r.reward)) out.reward = [];
  const listed = (r.meta as { nonfinite?: unknown } | undefined)?.nonfinite;
  if (listed && typeof listed === 'object' && !Array.isArray(listed))
    for (const [k, v] of Object.entries(listed as Record<string, unknown>)) {
      const idx = Array.isArray(v) ? v.filter((x): x is number => typeof x === 'number') : [];
      out[k] = [...new Set([...(out[k] ?? []), ...idx])].sort((a, b) => a - b);
    }
  return out;
}

/** Held-out splits: not training rollouts (their steps' health and groups are the training ones'). */
export const HELD_OUT_SPLITS = new Set(['val', 'test', 'eval', 'validation']);
export const isTraining = (r: { split?: string }) => r.split === undefined || !HELD_OUT_SPLITS.has(r.split);

/** One rollout's share of its step's health facts. */
export function healthFacts(r: Rollout, nonFinite: boolean): HealthStepFacts {
  const tk = r.tokens;
  const f = emptyHealthStep();
  f.rollouts = 1;
  if (r.finish === 'length') f.truncated = 1;
  if (tk) {
    f.tokenRollouts = 1;
    const cols = tokenColumnsOf(tk);
    if (cols) {
      let n = 0;
      for (let i = 0; i < cols.n; i++) if (cols.role[i] !== PROMPT_CODE) n++;
      f.responseTokens = n;
    } else f.responseTokens = tk.role.filter((x) => x !== 'prompt').length;
  }
  f.responseChars = r.response.length;
  if (nonFinite) f.nonFinite = 1;
  return f;
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** The value of a metric in a row: a number, `null` when the row holds a non-number there (NaN/∞ written as null), undefined when absent. */
const metric = (row: MetricsRow | undefined, key: string): number | null | undefined => {
  if (!row || !(key in row)) return undefined;
  const v = (row as Record<string, unknown>)[key];
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
};

/** `x` over factor × the median of the earlier values (at least minHistory of them) and over the floor. */
function spikes(
  series: readonly { step: number; v: number }[],
  factor: number,
  floor: number,
  minHistory: number,
): { step: number; v: number; median: number }[] {
  const out: { step: number; v: number; median: number }[] = [];
  for (let i = minHistory; i < series.length; i++) {
    const m = median(series.slice(0, i).map((x) => x.v));
    const x = series[i]!;
    if (x.v > factor * m && x.v > floor) out.push({ ...x, median: m });
  }
  return out;
}

/**
 * The run-health advisories of a run: its metrics rows (any order; the last row of a step wins) and the health facts
 * of its steps' rollouts. Sorted by step, then name.
 */
export function healthAdvisories(
  metrics: readonly MetricsRow[],
  steps: readonly { step: number; health: HealthStepFacts }[],
  o: HealthOptions = {},
): Advisory[] {
  const c = { ...HEALTH_DEFAULTS, ...o };
  const out: Advisory[] = [];
  const byStep = new Map<number, MetricsRow>();
  for (const r of metrics) byStep.set(r.step, { ...byStep.get(r.step), ...r });
  const rows = [...byStep.values()].sort((a, b) => a.step - b.step);
  const series = (key: string) =>
    rows.flatMap((r) => {
      const v = metric(r, key);
      return typeof v === 'number' ? [{ step: r.step, v }] : [];
    });
  // Step 0 is the warm start and the first evaluation, not a training step: its time is not a step's.
  const training = (xs: { step: number; v: number }[]) => xs.filter((x) => x.step > 0);
  for (const s of spikes(training(series('timing_s/step')), c.stallFactor, c.stallFloorS, c.minHistory))
    out.push({
      name: 'step-stall',
      step: s.step,
      value: s.v,
      threshold: c.stallFactor * s.median,
      message: `step ${s.step} took ${s.v.toFixed(1)} s, ${(s.v / s.median).toFixed(1)}× the median of the steps before it (${s.median.toFixed(1)} s)`,
    });
  for (const s of spikes(training(series('timing_s/reward')), c.stallFactor, c.stallFloorS, c.minHistory))
    out.push({
      name: 'reward-slow',
      step: s.step,
      value: s.v,
      threshold: c.stallFactor * s.median,
      message: `the reward call of step ${s.step} took ${s.v.toFixed(1)} s, ${(s.v / s.median).toFixed(1)}× the median before it (${s.median.toFixed(1)} s)`,
    });
  const server = series('env/retrieve_ms/p99');
  const latency = server.length ? server : series('env/retrieve_wait_ms/p99');
  const which = server.length ? "the env server's" : "the trainer's round-trip";
  for (const s of spikes(latency, c.stallFactor, c.latencyFloorMs, c.minHistory))
    out.push({
      name: 'retriever-slow',
      step: s.step,
      value: s.v,
      threshold: c.stallFactor * s.median,
      message: `retriever latency p99 ${s.v.toFixed(0)} ms at step ${s.step} (${which} measure), ${(s.v / s.median).toFixed(1)}× the median p99 before it (${s.median.toFixed(0)} ms)`,
    });
  for (const s of series('env/retrieve_timeouts'))
    if (s.v > 0)
      out.push({
        name: 'retriever-timeouts',
        step: s.step,
        value: s.v,
        threshold: 0,
        message: `${s.v} /retrieve request${s.v === 1 ? '' : 's'} timed out at step ${s.step} (retried by the trainer's client)`,
      });
  for (const r of rows) {
    const bad = Object.keys(r).filter((k) => k !== 'step' && k !== 'time' && metric(r, k) === null);
    if (bad.length)
      out.push({
        name: 'non-finite',
        step: r.step,
        value: bad.length,
        threshold: 0,
        message: `step ${r.step}: metrics not finite (NaN or ∞, written as null): ${bad.slice(0, 6).join(', ')}${bad.length > 6 ? ', …' : ''}`,
      });
  }

  // From the rollouts where a step has them, else from the trainer's metrics.
  const facts = new Map(steps.map((s) => [s.step, s.health]));
  const allSteps = [...new Set([...facts.keys(), ...rows.map((r) => r.step)])].sort((a, b) => a - b);
  const lengths: { step: number; v: number; unit: string }[] = [];
  const tokenUnit = [...facts.values()].every((f) => !f.rollouts || f.tokenRollouts === f.rollouts);
  for (const step of allSteps) {
    const f = facts.get(step);
    const row = byStep.get(step);
    let truncated: number | undefined;
    let length: number | undefined;
    let unit = 'tokens';
    if (f?.rollouts) {
      truncated = f.truncated / f.rollouts;
      if (tokenUnit) length = f.responseTokens / f.tokenRollouts;
      else {
        length = f.responseChars / f.rollouts;
        unit = 'characters';
      }
      if (f.nonFinite && !out.some((a) => a.name === 'non-finite' && a.step === step))
        out.push({
          name: 'non-finite',
          step,
          value: f.nonFinite,
          threshold: 0,
          message: `step ${step}: ${f.nonFinite} rollout${f.nonFinite === 1 ? '' : 's'} with NaN or ∞ in a recorded array or reward`,
        });
    } else if (row) {
      const clip = metric(row, 'response_length/clip_ratio');
      if (typeof clip === 'number') truncated = clip;
      const mean = metric(row, 'response_length/mean');
      if (typeof mean === 'number') length = mean;
    }
    if (truncated !== undefined && truncated >= c.truncatedFraction)
      out.push({
        name: 'truncation-high',
        step,
        value: truncated,
        threshold: c.truncatedFraction,
        message: `${(truncated * 100).toFixed(0)}% of step ${step}'s rollouts ended at the length limit (rollout.max_response_length or max_turn_tokens is binding)`,
      });
    if (length !== undefined && step > 0) lengths.push({ step, v: length, unit });
  }
  for (let i = c.minHistory; i < lengths.length; i++) {
    const m = median(lengths.slice(Math.max(0, i - c.collapseWindow), i).map((x) => x.v));
    const x = lengths[i]!;
    if (x.v < c.collapseFraction * m)
      out.push({
        name: 'length-collapse',
        step: x.step,
        value: x.v,
        threshold: c.collapseFraction * m,
        message: `mean response length ${x.v.toFixed(0)} ${x.unit} at step ${x.step}, below ${c.collapseFraction} × the median of the steps before it (${m.toFixed(0)})`,
      });
  }
  return out.sort((a, b) => a.step - b.step || a.name.localeCompare(b.name));
}
