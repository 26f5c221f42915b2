/**
 * `audit` (DESIGN §7): every check on every rollout — leaks (loss mask vs role, engine mask vs ours), re-tokenisation
 * drift, the rollout-vs-trainer log-prob gap over trained tokens, the reward-hacking alarms, search behaviour
 * (search.ts), values that are not finite — the GRPO group diagnostics over each step's groups (groupChecks.ts), and
 * the run-level advisories (run health from the metrics and rollouts: health.ts; zero-std-high, search-collapse,
 * think-drift), with a run-level summary and per-step series for the dashboard. The CLI, the inspector and the
 * dashboard all read it from here.
 */
import type { MetricsRow } from '../protocol/dashboard';
import { em } from '../rewards/normalize';
import { tokenColumnsOf } from '../run/columns';
import { type ReadOptions, type Rollout, rolloutContext } from '../run/format';
import type { ParsedTrajectory } from '../tags/parser';
import { responseAnswer, turnsOf } from '../tags/searchr1';
import { parseResponse, searchCount } from '../tags/trajectory';
import type { TokenizerCodec } from '../tokens/tokenizer';
import { ALARM_DEFAULTS, type Alarm, type AlarmOptions, searchCollapseSteps, trajectoryAlarms } from './alarms';
import { columnsImportance, columnsLogprobs, columnsMaskLeaks } from './columns';
import type { Drift, DriftOptions } from './drift';
import {
  checkGroups,
  type GroupCheckOptions,
  type GroupMember,
  type GroupStepFacts,
  groupMember,
  type RunFacts,
  zeroStdHigh,
} from './groupChecks';
import {
  type Advisory,
  addHealthStep,
  emptyHealthStep,
  type HealthOptions,
  type HealthStepFacts,
  healthAdvisories,
  healthFacts,
  isTraining,
  nonFiniteValues,
} from './health';
import {
  IMPORTANCE_DEFAULTS,
  type ImportanceLevel,
  type ImportanceOptions,
  type ImportancePreview,
  importancePreview,
} from './importance';
import { checkLogprobs, type LogprobCheck, type LogprobOptions } from './logprob';
import { engineMaskOf, maskLeaks, sampleExcluded } from './masks';
import {
  addSearchStep,
  countSearch,
  emptySearchStep,
  type SearchOptions,
  type SearchStepFacts,
  searchAlarms,
  searchFacts,
  thinkDriftSteps,
  thinkEntropy,
} from './search';
import { RUN_ALARMS, type StepAudit } from './series';
import { recordDrift } from './template';
import { tokenizerMismatch } from './tokenizerMatch';

export * from './alarms';
export * from './columns';
export * from './drift';
export * from './groupChecks';
export * from './groups';
export * from './health';
export * from './importance';
export * from './logprob';
export * from './masks';
export * from './microscope';
export * from './search';
export * from './series';
export * from './template';
export * from './tokenizerMatch';

export interface AuditOptions
  extends LogprobOptions,
    AlarmOptions,
    DriftOptions,
    ImportanceOptions,
    HealthOptions,
    GroupCheckOptions,
    SearchOptions {
  /** What the run's config says (rollout.n, a KL loss): the group checks' expectations. */
  run?: RunFacts;
  /** The model's tokenizer; without one drift is not checked (`drift` stays null, `summary.drift.checked` false). The
   * auditors check that it can be the run's first (tokenizerMatch.ts): one that cannot is not used. */
  tokenizer?: Pick<
    TokenizerCodec,
    'name' | 'encode' | 'decode' | 'chatTemplate' | 'vocabSize' | 'specials' | 'tokenText'
  >;
  /** The run's model's vocabulary size, when known (a tokenizer with more ids is not the run's). */
  runVocab?: number;
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
  /**
   * Set when the record's messages do not render its recorded prompt (a tools block or a system turn not kept:
   * template.ts): the prompt was not compared, the rest of the conversation was.
   */
  drift_prompt?: 'not comparable';
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
export function auditRollout(
  r: Rollout,
  o: AuditOptions = {},
  parsed: ParsedTrajectory = parseResponse(r.response, rolloutContext(r, o.read)),
): RolloutAudit {
  return auditWithShare(r, o, parsed, 0, false).audit;
}

/**
 * The rollout's audit and what it adds to its step's series (the Auditor's); without `withShare` (a single rollout's
 * audit: the inspector's facts) the series' share is not computed.
 */
function auditWithShare(
  r: Rollout,
  o: AuditOptions,
  parsed: ParsedTrajectory,
  index = 0,
  withShare = true,
): { audit: RolloutAudit; share?: RolloutStepShare } {
  const tk = r.tokens;
  // a record of the token store: its typed columns, without building the arrays (columns.ts: the same results)
  const cols = tokenColumnsOf(tk);
  const excluded = sampleExcluded(r.meta) !== undefined;
  const masks = tk
    ? cols
      ? columnsMaskLeaks(cols, engineMaskOf(r.meta), excluded)
      : maskLeaks(tk, engineMaskOf(r.meta), excluded)
    : { leaks: [], mask_mismatch: [] };
  const sf = searchFacts(parsed, r, o);
  const nonFinite = nonFiniteValues(r);
  const bad = Object.keys(nonFinite).length > 0;
  const alarms: Alarm[] = [...trajectoryAlarms(r, parsed, o), ...searchAlarms(sf)];
  if (bad) alarms.push('non-finite');
  const drift = tk && o.tokenizer ? recordDrift(r, o.tokenizer, o) : undefined;
  const audit: RolloutAudit = {
    id: r.id,
    step: r.step ?? null,
    leaks: masks.leaks,
    mask_mismatch: masks.mask_mismatch,
    drift: drift?.drift ?? null,
    ...(drift?.promptNotComparable ? { drift_prompt: 'not comparable' as const } : {}),
    logprob: tk
      ? cols
        ? columnsLogprobs(cols, o, r.meta)
        : checkLogprobs(tk as Parameters<typeof checkLogprobs>[0], o, r.meta)
      : null,
    is: tk
      ? cols
        ? columnsImportance(cols, o)
        : importancePreview(tk as Parameters<typeof importancePreview>[0], o)
      : null,
    alarms,
    searches: r.searches ?? searchCount(parsed),
    ...(bad ? { non_finite: nonFinite } : {}),
  };
  if (!withShare) return { audit };
  const emValue = exactMatch(r, parsed);
  const search = emptySearchStep();
  countSearch(search, sf, emValue, thinkEntropy(parsed, r.prompt.length, tk));
  const member = groupMember(r, index, emValue, o);
  return {
    audit,
    share: { training: isTraining(r), health: healthFacts(r, bad), search, ...(member ? { member } : {}) },
  };
}

export interface AuditSummary {
  rollouts: number;
  flagged: number;
  leaks: { rollouts: number; tokens: number; mask_mismatch: number };
  /**
   * `mismatch`: why the tokenizer given is not the run's (then drift is not checked). `prompt_not_comparable`: the
   * rollouts whose messages do not render their recorded prompt (compared from their first generated token).
   */
  drift: {
    checked: boolean;
    rollouts: number;
    text: number;
    split: number;
    template: number;
    prompt_not_comparable: number;
    mismatch?: string;
  };
  logprob: { rollouts: number; compared: number; flagged: number; max_abs_diff: number; mean_abs_diff: number };
  /**
   * The importance-sampling preview summed: `rollouts` with a preview, their `scored` trained tokens, the tokens TIS
   * would clip / MIS would drop (at sequence level every trained token of a clipped / dropped sequence), and the
   * rollouts with any clipped / dropped token (at sequence level: the sequences clipped / dropped).
   */
  is: {
    level: ImportanceLevel;
    cap: number;
    rollouts: number;
    scored: number;
    clipped: number;
    dropped: number;
    clipped_rollouts: number;
    dropped_rollouts: number;
  };
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

/**
 * Whether the tokenizer given can be the run's (tokenizerMatch.ts), decided once: from the run's vocabulary size
 * when known, else on the first record with token ids. Until then and while it may be, the checks use it; after a
 * mismatch they run without it (drift not checked: the summary says why, never "drift").
 */
class TokenizerGate {
  /** Why the tokenizer is not the run's; null: it may be; undefined: not decided yet. */
  mismatch: string | null | undefined;
  checks: AuditOptions;
  constructor(readonly options: AuditOptions) {
    this.checks = options;
    const t = options.tokenizer;
    const why = t && options.runVocab !== undefined ? tokenizerMismatch(t, {}, options.runVocab) : undefined;
    if (why) this.decide(why);
  }

  private decide(why: string | undefined): void {
    this.mismatch = why ?? null;
    if (why) this.checks = { ...this.options, tokenizer: undefined };
  }

  /** The checks for `r` (which may decide). */
  see(r: Rollout): AuditOptions {
    const t = this.options.tokenizer;
    if (t && this.mismatch === undefined && r.tokens?.ids?.length)
      this.decide(tokenizerMismatch(t, r, this.options.runVocab));
    return this.checks;
  }

  /** Drift was checked: a tokenizer that may be the run's. */
  get checked(): boolean {
    return this.options.tokenizer !== undefined && !this.mismatch;
  }
}

/**
 * A step's sums: the dashboard's series, and by split kind what the run-level rules read — training rollouts, and
 * held-out ones (read where a step has no training rollout) — and its groups.
 */
interface StepSums {
  rollouts: number;
  compared: number;
  abs: number;
  outside: number;
  seq: number;
  seqN: number;
  drift: number;
  leaks: number;
  searches: number;
  noSearch: number;
  alarms: Partial<Record<Alarm, number>>;
  train: { health: HealthStepFacts; search: SearchStepFacts };
  heldOut: { health: HealthStepFacts; search: SearchStepFacts };
  groups: GroupStepFacts;
}

const newSums = (): StepSums => ({
  rollouts: 0,
  compared: 0,
  abs: 0,
  outside: 0,
  seq: 0,
  seqN: 0,
  drift: 0,
  leaks: 0,
  searches: 0,
  noSearch: 0,
  alarms: {},
  train: { health: emptyHealthStep(), search: emptySearchStep() },
  heldOut: { health: emptyHealthStep(), search: emptySearchStep() },
  groups: { groups: 0, zeroStd: 0 },
});

function addToStep(acc: StepSums, a: RolloutAudit, share: RolloutStepShare): void {
  acc.rollouts++;
  if (a.logprob?.compared) {
    acc.compared += a.logprob.compared;
    acc.abs += a.logprob.mean_abs_diff * a.logprob.compared;
    acc.outside += a.logprob.flagged.length;
    acc.seq += Math.exp(a.logprob.seq_log_ratio);
    acc.seqN++;
  }
  if (a.drift) acc.drift++;
  acc.leaks += a.leaks.length;
  acc.searches += a.searches;
  if (a.searches === 0) acc.noSearch++;
  for (const k of a.alarms) acc.alarms[k] = (acc.alarms[k] ?? 0) + 1;
  const part = share.training ? acc.train : acc.heldOut;
  part.health = addHealthStep(part.health, share.health);
  part.search = addSearchStep(part.search, share.search);
}

function stepOfSums(step: number, acc: StepSums, checked: boolean): StepAudit {
  const training = acc.train.health.rollouts > 0;
  const part = training ? acc.train : acc.heldOut;
  return {
    step,
    rollouts: acc.rollouts,
    drift_rate: checked ? acc.drift / acc.rollouts : null,
    mean_abs_diff: acc.compared ? acc.abs / acc.compared : null,
    ratio_outside: acc.compared ? acc.outside / acc.compared : null,
    seq_ratio: acc.seqN ? acc.seq / acc.seqN : null,
    leaks: acc.leaks,
    mean_searches: acc.searches / acc.rollouts,
    no_search: acc.noSearch,
    alarms: { ...acc.alarms },
    training,
    health: part.health,
    search: part.search,
    groups: { ...acc.groups },
  };
}

function addToSummary(sum: AuditSummary, a: RolloutAudit, addAbs: (x: number) => void): void {
  sum.rollouts++;
  if (flagged(a)) sum.flagged++;
  if (a.leaks.length) sum.leaks.rollouts++;
  sum.leaks.tokens += a.leaks.length;
  sum.leaks.mask_mismatch += a.mask_mismatch.length;
  if (a.drift) {
    sum.drift.rollouts++;
    sum.drift[a.drift.kind]++;
  }
  if (a.drift_prompt) sum.drift.prompt_not_comparable++;
  if (a.logprob) {
    sum.logprob.rollouts++;
    sum.logprob.compared += a.logprob.compared;
    sum.logprob.flagged += a.logprob.flagged.length;
    sum.logprob.max_abs_diff = Math.max(sum.logprob.max_abs_diff, a.logprob.max_abs_diff);
    addAbs(a.logprob.mean_abs_diff * a.logprob.compared);
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

/**
 * The audit of a stream of rollouts in bounded memory (the CLI's `audit`, the dashboard's per-step audit): each
 * rollout's findings go to `onRollout` when its step is complete (the next step begins, or the stream ends) — a
 * step is held so that the rules over a whole step can mark its rollouts (search-collapse: a step's mean searches
 * against the highest earlier step's; the GRPO group checks over the step's groups) — and only per-step sums are
 * kept. Rollouts are expected step by step in step order (as run directories and stores list them);
 * `summary.search_collapse_steps` is exact whatever the order. {@link finish} applies the run-level rules (run
 * health with the run's metrics, zero-std-high, think-drift) and summarises.
 */
export class AuditStream {
  private step: number | undefined;
  private held: { audit: RolloutAudit; share: RolloutStepShare }[] = [];
  private peak = 0;
  private readonly steps = new Map<number, StepSums>();
  private readonly sum: AuditSummary;
  private absSum = 0;
  private readonly gate: TokenizerGate;
  private done: AuditSummary | undefined;

  constructor(
    readonly options: AuditOptions = {},
    private readonly onRollout?: (a: RolloutAudit) => void,
  ) {
    this.gate = new TokenizerGate(options);
    this.sum = {
      rollouts: 0,
      flagged: 0,
      leaks: { rollouts: 0, tokens: 0, mask_mismatch: 0 },
      drift: {
        checked: options.tokenizer !== undefined,
        rollouts: 0,
        text: 0,
        split: 0,
        template: 0,
        prompt_not_comparable: 0,
      },
      logprob: { rollouts: 0, compared: 0, flagged: 0, max_abs_diff: 0, mean_abs_diff: 0 },
      is: {
        level: options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel,
        cap: options.isCap ?? IMPORTANCE_DEFAULTS.isCap,
        rollouts: 0,
        scored: 0,
        clipped: 0,
        dropped: 0,
        clipped_rollouts: 0,
        dropped_rollouts: 0,
      },
      alarms: {},
      alarm_steps: {},
      advisories: [],
      search_collapse_steps: [],
      steps: [],
    };
  }

  /** Why the tokenizer is not the run's (decided on the first record with token ids); null: it may be. */
  get mismatch(): string | null | undefined {
    return this.gate.mismatch;
  }

  add(r: Rollout): RolloutAudit {
    const o = this.gate.see(r);
    const step = r.step ?? 0;
    if (this.step !== undefined && step !== this.step) this.flush();
    this.step = step;
    const x = auditWithShare(r, o, parseResponse(r.response, rolloutContext(r, o.read)), this.held.length);
    this.held.push({ audit: x.audit, share: x.share! });
    return x.audit;
  }

  private flush(): void {
    const list = this.held;
    if (!list.length) return;
    this.held = [];
    const step = this.step ?? 0;
    const mean = list.reduce((t, x) => t + x.audit.searches, 0) / list.length;
    const { collapseFraction, collapsePeak } = { ...ALARM_DEFAULTS, ...this.options };
    if (this.peak >= collapsePeak && mean < collapseFraction * this.peak)
      for (const { audit } of list) if (audit.searches === 0) audit.alarms.push('search-collapse');
    this.peak = Math.max(this.peak, mean);
    // the GRPO group checks over the step's groups (a member's index is its place in `list`)
    const { findings, facts } = checkGroups(
      list.flatMap((x) => (x.share.member ? [x.share.member] : [])),
      this.options.run,
      this.options,
    );
    for (const f of findings)
      for (const i of f.members)
        for (const k of f.alarms) if (!list[i]!.audit.alarms.includes(k)) list[i]!.audit.alarms.push(k);
    const acc = this.steps.get(step) ?? newSums();
    this.steps.set(step, acc);
    acc.groups = { groups: acc.groups.groups + facts.groups, zeroStd: acc.groups.zeroStd + facts.zeroStd };
    for (const { audit, share } of list) {
      addToSummary(this.sum, audit, (x) => (this.absSum += x));
      addToStep(acc, audit, share);
      this.onRollout?.(audit);
    }
  }

  /** Ends the stream: the last step's findings, then the run-level rules — with `metrics` (the run's metrics.jsonl rows) the run-health advisories. */
  finish(
    metrics: readonly MetricsRow[] = [],
    sampled: Readonly<Record<number, { recorded: number; of: number }>> = {},
  ): AuditSummary {
    if (this.done) return this.done;
    this.flush();
    const sum = this.sum;
    const checked = this.gate.checked;
    sum.drift.checked = checked;
    if (this.gate.mismatch) sum.drift.mismatch = this.gate.mismatch;
    const ordered = [...this.steps].sort((x, y) => x[0] - y[0]);
    sum.search_collapse_steps = searchCollapseSteps(
      collapseSeries(new Map(ordered.map(([s, acc]) => [s, acc.searches / acc.rollouts])), metrics, sampled),
      this.options,
    );
    sum.logprob.mean_abs_diff = sum.logprob.compared ? this.absSum / sum.logprob.compared : 0;
    sum.steps = ordered.map(([s, acc]) => stepOfSums(s, acc, checked));
    sum.advisories = runAdvisories(sum.steps, metrics, this.options, sampled);
    applyAdvisories(sum.steps, sum.advisories);
    const nonFiniteRollouts = sum.alarms['non-finite'] ?? 0;
    for (const adv of sum.advisories) {
      const name = adv.name as Alarm;
      if (name !== 'non-finite' || !nonFiniteRollouts) sum.alarms[name] = (sum.alarms[name] ?? 0) + 1;
    }
    for (const s of sum.steps)
      for (const [k, v] of Object.entries(s.alarms) as [Alarm, number][])
        if (v) (sum.alarm_steps[k] ??= []).push(s.step);
    return (this.done = sum);
  }
}

/** An {@link AuditStream} that keeps every rollout's findings (`rollouts`, complete after {@link finish}): for tests and small inputs. */
export class Auditor {
  readonly rollouts: RolloutAudit[] = [];
  private readonly stream: AuditStream;
  constructor(readonly options: AuditOptions = {}) {
    this.stream = new AuditStream(options, (a) => this.rollouts.push(a));
  }

  /** Why the tokenizer is not the run's (decided on the first record with token ids); null: it may be. */
  get mismatch(): string | null | undefined {
    return this.stream.mismatch;
  }

  add(r: Rollout): RolloutAudit {
    return this.stream.add(r);
  }

  finish(
    metrics: readonly MetricsRow[] = [],
    sampled: Readonly<Record<number, { recorded: number; of: number }>> = {},
  ): AuditSummary {
    return this.stream.finish(metrics, sampled);
  }
}

/**
 * Mean searches per rollout by step, for search-collapse: the records' own, except on a step recorded in part
 * (`sampled`), where the trainer's `env/number_of_valid_search` over every rollout of the step is taken when it
 * logged one — a sample is a few groups and always the flagged ones (leaks, non-finite numbers, log-prob gaps), or on
 * a step between every `every`-th only those: its mean is noisy and leans toward them, and a drop in it is no collapse
 * of the policy's searching. A sampled step without the metric keeps the sample's mean.
 */
export function collapseSeries(
  bySample: ReadonlyMap<number, number>,
  metrics: readonly MetricsRow[],
  sampled: Readonly<Record<number, { recorded: number; of: number }>> = {},
): Map<number, number> {
  const out = new Map(bySample);
  if (!Object.keys(sampled).length) return out;
  for (const row of metrics) {
    const v = row['env/number_of_valid_search'];
    if (sampled[row.step] && out.has(row.step) && typeof v === 'number' && Number.isFinite(v)) out.set(row.step, v);
  }
  return out;
}

/**
 * The run-level advisories over a run's per-step series and metrics: run health (health.ts), zero-std-high and
 * think-drift (search-collapse marks rollouts, so it is counted with them). Sorted by step, then name. The CLI and
 * the dashboard's run audit both apply these.
 */
export function runAdvisories(
  steps: readonly StepAudit[],
  metrics: readonly MetricsRow[],
  o: AuditOptions = {},
  sampled: Readonly<Record<number, { recorded: number; of: number }>> = {},
): Advisory[] {
  const out = healthAdvisories(
    metrics,
    steps.map((s) => ({ step: s.step, health: s.health })),
    o,
  );
  // zero-std-high: a step's recorded groups where they are all of its groups; the trainer's count over every rollout
  // of the step where none was recorded or only a sample was (`sampled`: a token store's recorded < of) — a sample
  // always keeps the flagged groups, so it leans toward them; a sampled step without the metric: the sample's, said so
  const trainer = new Map<number, number>();
  for (const row of metrics) {
    const f = row['reward/frac_zero_std_groups'];
    if (typeof f === 'number' && Number.isFinite(f)) trainer.set(row.step, f);
  }
  const withRollouts = new Set(steps.filter((s) => s.groups.groups > 0).map((s) => s.step));
  for (const s of steps) {
    if ((sampled[s.step] && trainer.has(s.step)) || !zeroStdHigh(s.groups, o)) continue;
    const smp = sampled[s.step];
    out.push({
      name: 'zero-std-high',
      step: s.step,
      value: s.groups.zeroStd / s.groups.groups,
      threshold: o.zeroStdFraction ?? 0.5,
      message: `${s.groups.zeroStd} of ${s.groups.groups} groups at step ${s.step} have equal rewards: they add no policy gradient${smp ? ` (over the recorded sample: ${smp.recorded} of ${smp.of} rollouts, which always keeps flagged groups; the trainer logged no reward/frac_zero_std_groups)` : ''}`,
      ...(smp ? { over: 'sample' as const } : {}),
    });
  }
  for (const [step, f] of trainer)
    if ((!withRollouts.has(step) || sampled[step]) && f >= (o.zeroStdFraction ?? 0.5))
      out.push({
        name: 'zero-std-high',
        step,
        value: f,
        threshold: o.zeroStdFraction ?? 0.5,
        message: `${(f * 100).toFixed(0)}% of the groups at step ${step} have equal rewards (the trainer's reward/frac_zero_std_groups, over every rollout of the step)`,
        over: 'trainer',
      });
  for (const d of thinkDriftSteps(steps, o))
    out.push({
      name: 'think-drift',
      step: d.step,
      value: d.value,
      threshold: d.baseline,
      message: `the <think> channel's ${d.measure} rose to ${d.value.toFixed(3)} at step ${d.step} from ${d.baseline.toFixed(3)} in the first steps, while exact match held (${d.em === null ? 'unknown' : d.em.toFixed(3)})`,
    });
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
  return {
    step,
    rollouts: 0,
    drift_rate: null,
    mean_abs_diff: null,
    ratio_outside: null,
    seq_ratio: null,
    leaks: 0,
    mean_searches: 0,
    no_search: 0,
    alarms: {},
    training: false,
    health: emptyHealthStep(),
    search: emptySearchStep(),
    groups: { groups: 0, zeroStd: 0 },
  };
}
