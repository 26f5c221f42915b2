/**
 * `audit` (DESIGN §7): every check on every rollout — leaks (loss mask vs role, engine mask vs ours), re-tokenisation
 * drift, the rollout-vs-trainer log-prob gap over trained tokens, the reward-hacking alarms, search behaviour
 * (search.ts), values that are not finite — the GRPO group diagnostics over each step's groups (groupChecks.ts), and
 * the run-level advisories (run health from the metrics and rollouts: health.ts; zero-std-high, search-collapse,
 * think-drift), with a run-level summary and per-step series for the dashboard. The CLI, the inspector and the
 * dashboard all read it from here.
 */
import type { MetricsRow } from '../protocol';
import { em } from '../rewards/normalize';
import { rolloutContext, type ReadOptions, type Rollout } from '../run/format';
import type { TokenizerCodec } from '../inspect/tokenizer';
import type { ParsedTrajectory } from '../tags/parser';
import { responseAnswer, turnsOf } from '../tags/searchr1';
import { searchCount, parseResponse } from '../tags/trajectory';
import { searchCollapseSteps, trajectoryAlarms, type Alarm, type AlarmOptions } from './alarms';
import { checkGroups, groupMember, zeroStdHigh, type GroupCheckOptions, type GroupMember, type GroupStepFacts, type RunFacts } from './groupChecks';
import { addHealthStep, emptyHealthStep, healthAdvisories, healthFacts, isTraining, nonFiniteValues, type Advisory, type HealthOptions, type HealthStepFacts } from './health';
import { addSearchStep, countSearch, emptySearchStep, searchAlarms, searchFacts, thinkDriftSteps, thinkEntropy, type SearchOptions, type SearchStepFacts } from './search';
import { RUN_ALARMS, type StepAudit } from './series';
import type { Drift, DriftOptions } from './drift';
import { recordDrift } from './template';
import { IMPORTANCE_DEFAULTS, importancePreview, type ImportanceLevel, type ImportanceOptions, type ImportancePreview } from './importance';
import { checkLogprobs, type LogprobCheck, type LogprobOptions } from './logprob';
import { engineMaskOf, maskLeaks } from './masks';

export * from './alarms';
export * from './drift';
export * from './groupChecks';
export * from './groups';
export * from './health';
export * from './importance';
export * from './logprob';
export * from './microscope';
export * from './masks';
export * from './search';
export * from './series';
export * from './template';

export interface AuditOptions extends LogprobOptions, AlarmOptions, DriftOptions, ImportanceOptions, HealthOptions, GroupCheckOptions, SearchOptions {
  /** What the run's config says (rollout.n, a KL loss): the group checks' expectations. */
  run?: RunFacts;
  /** The model's tokenizer; without one drift is not checked (`drift` stays null, `summary.drift.checked` false). */
  tokenizer?: Pick<TokenizerCodec, 'encode' | 'decode' | 'chatTemplate'>;
  read?: ReadOptions;
}

/** One rollout's findings: the `--json` shape of issue 18. Token indices index `tokens.ids`. */
export interface RolloutAudit {
  id: string;
  step: number | null;
  leaks: number[];
  /** Of the leaks, where the engine's mask disagrees with loss_mask (records carrying `meta.engine_loss_mask`). */
  mask_mismatch: number[];
  drift: Drift | null;
  logprob: LogprobCheck | null;
  /**
   * The importance-sampling preview at the options' level and cap (src/core/audit/importance.ts: which trained tokens
   * TIS would clip, MIS would drop); null when the record lacks either log-prob array. A preview, not a flag.
   */
  is: ImportancePreview | null;
  alarms: Alarm[];
  /** Searches made (for search-collapse). */
  searches: number;
  /** Where a recorded number is NaN or ±∞ (`{array: [token indices]}`, `reward: []`); absent when none is. */
  non_finite?: Record<string, number[]>;
}

/** What a rollout adds to its step's series (the run-level rules read them). */
interface RolloutStepShare {
  training: boolean;
  health: HealthStepFacts;
  search: SearchStepFacts;
  member?: GroupMember;
}

export function flagged(a: RolloutAudit): boolean {
  return a.leaks.length > 0 || a.drift !== null || (a.logprob?.flagged.length ?? 0) > 0 || a.alarms.length > 0;
}

/** Exact match of a record: `reward_parts.em` when recorded, else its final answer against `golden` (as trajectoryFacts). */
function exactMatch(r: Rollout, parsed: ParsedTrajectory): number | null {
  const recorded = r.reward_parts?.em;
  if (typeof recorded === 'number') return recorded;
  if (!r.golden?.length) return null;
  const strict = { strictActions: r.strict_actions === true };
  const answer = responseAnswer(parsed, strict, turnsOf(parsed, strict));
  return answer === undefined || answer === null ? 0 : em(answer, r.golden);
}

/** The checks of one rollout that need nothing but the rollout (search-collapse and the group checks are added by {@link Auditor.finish}). */
export function auditRollout(r: Rollout, o: AuditOptions = {}, parsed: ParsedTrajectory = parseResponse(r.response, rolloutContext(r, o.read))): RolloutAudit {
  return auditWithShare(r, o, parsed).audit;
}

function auditWithShare(r: Rollout, o: AuditOptions, parsed: ParsedTrajectory, index = 0): { audit: RolloutAudit; share: RolloutStepShare } {
  const tk = r.tokens;
  const masks = tk ? maskLeaks(tk, engineMaskOf(r.meta)) : { leaks: [], mask_mismatch: [] };
  const sf = searchFacts(parsed, r, o);
  const nonFinite = nonFiniteValues(r);
  const bad = Object.keys(nonFinite).length > 0;
  const alarms: Alarm[] = [...trajectoryAlarms(r, parsed, o), ...searchAlarms(sf)];
  if (bad) alarms.push('non-finite');
  const emValue = exactMatch(r, parsed);
  const search = emptySearchStep();
  countSearch(search, sf, emValue, thinkEntropy(parsed, r.prompt.length, tk));
  const audit: RolloutAudit = {
    id: r.id,
    step: r.step ?? null,
    leaks: masks.leaks,
    mask_mismatch: masks.mask_mismatch,
    drift: tk && o.tokenizer ? recordDrift(r, o.tokenizer, o).drift : null,
    logprob: tk ? checkLogprobs(tk as Parameters<typeof checkLogprobs>[0], o, r.meta) : null,
    is: tk ? importancePreview(tk as Parameters<typeof importancePreview>[0], o) : null,
    alarms,
    searches: r.searches ?? searchCount(parsed),
    ...(bad ? { non_finite: nonFinite } : {}),
  };
  const member = groupMember(r, index, emValue, o);
  return { audit, share: { training: isTraining(r), health: healthFacts(r, bad), search, ...(member ? { member } : {}) } };
}

export interface AuditSummary {
  rollouts: number;
  flagged: number;
  leaks: { rollouts: number; tokens: number; mask_mismatch: number };
  drift: { checked: boolean; rollouts: number; text: number; split: number; template: number };
  logprob: { rollouts: number; compared: number; flagged: number; max_abs_diff: number; mean_abs_diff: number };
  /**
   * The importance-sampling preview summed: `rollouts` with a preview, their `scored` trained tokens, the tokens TIS
   * would clip / MIS would drop (at sequence level every trained token of a clipped / dropped sequence), and the
   * rollouts with any clipped / dropped token (at sequence level: the sequences clipped / dropped).
   */
  is: { level: ImportanceLevel; cap: number; rollouts: number; scored: number; clipped: number; dropped: number; clipped_rollouts: number; dropped_rollouts: number };
  /**
   * Each alarm that fired: on rollouts, the rollouts it marks; run-level ones (RUN_ALARMS), the steps it fired on
   * (`non-finite` counts both).
   */
  alarms: Partial<Record<Alarm, number>>;
  /** Each alarm that fired, and the steps where it did (ascending). */
  alarm_steps: Partial<Record<Alarm, number[]>>;
  /** The run-level findings, one per alarm and step (name, step, value, threshold, message). */
  advisories: Advisory[];
  search_collapse_steps: number[];
  steps: StepAudit[];
}

/** A step's sums, by split kind: training rollouts, and held-out ones (read where a step has no training rollout). */
interface StepSums {
  train: { health: HealthStepFacts; search: SearchStepFacts };
  heldOut: { health: HealthStepFacts; search: SearchStepFacts };
  members: GroupMember[];
}

/** Accumulates rollout audits; {@link finish} applies the group checks and the run-level rules and summarises. */
export class Auditor {
  readonly rollouts: RolloutAudit[] = [];
  private readonly sums = new Map<number, StepSums>();
  constructor(readonly options: AuditOptions = {}) {}

  add(r: Rollout): RolloutAudit {
    const { audit, share } = auditWithShare(r, this.options, parseResponse(r.response, rolloutContext(r, this.options.read)), this.rollouts.length);
    this.rollouts.push(audit);
    const step = r.step ?? 0;
    let sums = this.sums.get(step);
    if (!sums) this.sums.set(step, (sums = { train: { health: emptyHealthStep(), search: emptySearchStep() }, heldOut: { health: emptyHealthStep(), search: emptySearchStep() }, members: [] }));
    const part = share.training ? sums.train : sums.heldOut;
    part.health = addHealthStep(part.health, share.health);
    part.search = addSearchStep(part.search, share.search);
    if (share.member) sums.members.push(share.member);
    return audit;
  }

  /**
   * Applies the group checks (per step) and the run-level rules — search-collapse over the rollouts' searches, and
   * with `metrics` (the run's metrics.jsonl rows) the run-health advisories — and summarises.
   */
  finish(metrics: readonly MetricsRow[] = []): AuditSummary {
    const bySteps = new Map<number, RolloutAudit[]>();
    for (const a of this.rollouts) {
      const list = bySteps.get(a.step ?? 0) ?? [];
      list.push(a);
      bySteps.set(a.step ?? 0, list);
    }
    const meanSearches = new Map([...bySteps].map(([s, list]) => [s, list.reduce((t, a) => t + a.searches, 0) / list.length]));
    const collapsed = searchCollapseSteps(meanSearches, this.options);
    for (const s of collapsed) for (const a of bySteps.get(s)!) if (a.searches === 0) a.alarms.push('search-collapse');
    const groupFacts = new Map<number, GroupStepFacts>();
    for (const [step, sums] of this.sums) {
      const { findings, facts } = checkGroups(sums.members, this.options.run, this.options);
      groupFacts.set(step, facts);
      for (const f of findings) for (const i of f.members) for (const k of f.alarms) if (!this.rollouts[i]!.alarms.includes(k)) this.rollouts[i]!.alarms.push(k);
    }

    const checked = this.options.tokenizer !== undefined;
    const sum: AuditSummary = {
      rollouts: this.rollouts.length,
      flagged: 0,
      leaks: { rollouts: 0, tokens: 0, mask_mismatch: 0 },
      drift: { checked, rollouts: 0, text: 0, split: 0, template: 0 },
      logprob: { rollouts: 0, compared: 0, flagged: 0, max_abs_diff: 0, mean_abs_diff: 0 },
      is: { level: this.options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel, cap: this.options.isCap ?? IMPORTANCE_DEFAULTS.isCap, rollouts: 0, scored: 0, clipped: 0, dropped: 0, clipped_rollouts: 0, dropped_rollouts: 0 },
      alarms: {},
      alarm_steps: {},
      advisories: [],
      search_collapse_steps: collapsed,
      steps: [],
    };
    let absSum = 0;
    for (const a of this.rollouts) {
      if (flagged(a)) sum.flagged++;
      if (a.leaks.length) sum.leaks.rollouts++;
      sum.leaks.tokens += a.leaks.length;
      sum.leaks.mask_mismatch += a.mask_mismatch.length;
      if (a.drift) {
        sum.drift.rollouts++;
        sum.drift[a.drift.kind]++;
      }
      if (a.logprob) {
        sum.logprob.rollouts++;
        sum.logprob.compared += a.logprob.compared;
        sum.logprob.flagged += a.logprob.flagged.length;
        sum.logprob.max_abs_diff = Math.max(sum.logprob.max_abs_diff, a.logprob.max_abs_diff);
        absSum += a.logprob.mean_abs_diff * a.logprob.compared;
      }
      if (a.is) {
        sum.is.rollouts++;
        sum.is.scored += a.is.scored;
        sum.is.clipped += a.is.clipped.length;
        sum.is.dropped += a.is.dropped.length;
        if (a.is.clipped.length) sum.is.clipped_rollouts++;
        if (a.is.dropped.length) sum.is.dropped_rollouts++;
      }
      for (const k of a.alarms) sum.alarms[k] = (sum.alarms[k] ?? 0) + 1;
    }
    sum.logprob.mean_abs_diff = sum.logprob.compared ? absSum / sum.logprob.compared : 0;
    for (const [step, list] of [...bySteps].sort((x, y) => x[0] - y[0])) sum.steps.push(stepAudit(step, list, checked, this.sums.get(step), groupFacts.get(step)));
    sum.advisories = runAdvisories(sum.steps, metrics, this.options);
    applyAdvisories(sum.steps, sum.advisories);
    const nonFiniteRollouts = sum.alarms['non-finite'] ?? 0;
    for (const adv of sum.advisories) {
      const name = adv.name as Alarm;
      if (name !== 'non-finite' || !nonFiniteRollouts) sum.alarms[name] = (sum.alarms[name] ?? 0) + 1;
    }
    for (const s of sum.steps)
      for (const [k, v] of Object.entries(s.alarms) as [Alarm, number][]) if (v) (sum.alarm_steps[k] ??= []).push(s.step);
    return sum;
  }
}

/**
 * The run-level advisories over a run's per-step series and metrics: run health (health.ts), zero-std-high and
 * think-drift (search-collapse marks rollouts, so it is counted with them). Sorted by step, then name. The CLI and
 * the dashboard's run audit both apply these.
 */
export function runAdvisories(steps: readonly StepAudit[], metrics: readonly MetricsRow[], o: AuditOptions = {}): Advisory[] {
  const out = healthAdvisories(metrics, steps.map((s) => ({ step: s.step, health: s.health })), o);
  const withRollouts = new Set(steps.filter((s) => s.groups.groups > 0).map((s) => s.step));
  for (const s of steps)
    if (zeroStdHigh(s.groups, o)) out.push({ name: 'zero-std-high', step: s.step, value: s.groups.zeroStd / s.groups.groups, threshold: o.zeroStdFraction ?? 0.5, message: `${s.groups.zeroStd} of ${s.groups.groups} groups at step ${s.step} have equal rewards: they add no policy gradient` });
  // without rollouts, the trainer's own count of zero-variance groups
  for (const row of metrics) {
    const f = row['reward/frac_zero_std_groups'];
    if (typeof f === 'number' && !withRollouts.has(row.step) && f >= (o.zeroStdFraction ?? 0.5)) out.push({ name: 'zero-std-high', step: row.step, value: f, threshold: o.zeroStdFraction ?? 0.5, message: `${(f * 100).toFixed(0)}% of the groups at step ${row.step} have equal rewards (the trainer's reward/frac_zero_std_groups)` });
  }
  for (const d of thinkDriftSteps(steps, o))
    out.push({ name: 'think-drift', step: d.step, value: d.value, threshold: d.baseline, message: `the <think> channel's ${d.measure} rose to ${d.value.toFixed(3)} at step ${d.step} from ${d.baseline.toFixed(3)} in the first steps, while exact match held (${d.em === null ? 'unknown' : d.em.toFixed(3)})` });
  const seen = new Set<string>();
  return out
    .filter((a) => {
      const k = `${a.name}\u0000${a.step}`;
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    })
    .sort((a, b) => a.step - b.step || a.name.localeCompare(b.name));
}

/** Adds the advisories to their steps' alarm counts (a step the rollouts did not cover gets a row of its own). */
export function applyAdvisories(steps: StepAudit[], advisories: readonly Advisory[]): void {
  const at = new Map(steps.map((s) => [s.step, s]));
  for (const a of advisories) {
    let s = at.get(a.step);
    if (!s) {
      s = emptyStepAudit(a.step);
      at.set(a.step, s);
      steps.push(s);
    }
    const name = a.name as Alarm;
    if (!(RUN_ALARMS as readonly string[]).includes(name)) continue;
    if (name === 'non-finite' && s.alarms[name]) continue;
    s.alarms[name] = Math.max(s.alarms[name] ?? 0, 1);
  }
  steps.sort((a, b) => a.step - b.step);
}

export function emptyStepAudit(step: number): StepAudit {
  return { step, rollouts: 0, drift_rate: null, mean_abs_diff: null, ratio_outside: null, seq_ratio: null, leaks: 0, mean_searches: 0, no_search: 0, alarms: {}, training: false, health: emptyHealthStep(), search: emptySearchStep(), groups: { groups: 0, zeroStd: 0 } };
}

function stepAudit(step: number, list: readonly RolloutAudit[], checked: boolean, sums: StepSums | undefined, groups: GroupStepFacts | undefined): StepAudit {
  const part = sums && (sums.train.health.rollouts ? sums.train : sums.heldOut);
  let compared = 0;
  let abs = 0;
  let outside = 0;
  let seq = 0;
  let seqN = 0;
  const alarms: Partial<Record<Alarm, number>> = {};
  for (const a of list) {
    if (a.logprob && a.logprob.compared) {
      compared += a.logprob.compared;
      abs += a.logprob.mean_abs_diff * a.logprob.compared;
      outside += a.logprob.flagged.length;
      seq += Math.exp(a.logprob.seq_log_ratio);
      seqN++;
    }
    for (const k of a.alarms) alarms[k] = (alarms[k] ?? 0) + 1;
  }
  return {
    step,
    rollouts: list.length,
    drift_rate: checked ? list.filter((a) => a.drift).length / list.length : null,
    mean_abs_diff: compared ? abs / compared : null,
    ratio_outside: compared ? outside / compared : null,
    seq_ratio: seqN ? seq / seqN : null,
    leaks: list.reduce((t, a) => t + a.leaks.length, 0),
    mean_searches: list.reduce((t, a) => t + a.searches, 0) / list.length,
    no_search: list.filter((a) => a.searches === 0).length,
    alarms,
    training: !!sums?.train.health.rollouts,
    health: part?.health ?? emptyHealthStep(),
    search: part?.search ?? emptySearchStep(),
    groups: groups ?? { groups: 0, zeroStd: 0 },
  };
}
