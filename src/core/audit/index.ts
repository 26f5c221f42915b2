/**
 * `audit` (DESIGN §7): every check on every rollout — leaks (loss mask vs role, engine mask vs ours), re-tokenisation
 * drift, the rollout-vs-trainer log-prob gap over trained tokens, and the reward-hacking alarms — with a run-level
 * summary and per-step series for the dashboard. The CLI, the inspector and the dashboard all read it from here.
 */
import { rolloutContext, type ReadOptions, type Rollout } from '../run/format';
import type { TokenizerCodec } from '../inspect/tokenizer';
import type { ParsedTrajectory } from '../tags/parser';
import { searchCount, parseResponse } from '../tags/trajectory';
import { ALARM_DEFAULTS, searchCollapseSteps, trajectoryAlarms, type Alarm, type AlarmOptions } from './alarms';
import type { StepAudit } from './series';
import type { Drift, DriftOptions } from './drift';
import { recordDrift } from './template';
import { IMPORTANCE_DEFAULTS, importancePreview, type ImportanceLevel, type ImportanceOptions, type ImportancePreview } from './importance';
import { checkLogprobs, type LogprobCheck, type LogprobOptions } from './logprob';
import { engineMaskOf, maskLeaks } from './masks';
import { tokenizerMismatch } from './tokenizerMatch';
import { columnsImportance, columnsLogprobs, columnsMaskLeaks } from './columns';
import { tokenColumnsOf } from '../run/columns';

export * from './alarms';
export * from './columns';
export * from './drift';
export * from './groups';
export * from './importance';
export * from './logprob';
export * from './microscope';
export * from './masks';
export * from './series';
export * from './template';
export * from './tokenizerMatch';

export interface AuditOptions extends LogprobOptions, AlarmOptions, DriftOptions, ImportanceOptions {
  /** The model's tokenizer; without one drift is not checked (`drift` stays null, `summary.drift.checked` false). The
   * {@link Auditor} checks that it can be the run's first (tokenizerMatch.ts): one that cannot is not used. */
  tokenizer?: Pick<TokenizerCodec, 'name' | 'encode' | 'decode' | 'chatTemplate' | 'vocabSize' | 'specials' | 'tokenText'>;
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
  logprob: LogprobCheck | null;
  /**
   * The importance-sampling preview at the options' level and cap (src/core/audit/importance.ts: which trained tokens
   * TIS would clip, MIS would drop); null when the record lacks either log-prob array. A preview, not a flag.
   */
  is: ImportancePreview | null;
  alarms: Alarm[];
  /** Searches made (for search-collapse). */
  searches: number;
}

export function flagged(a: RolloutAudit): boolean {
  return a.leaks.length > 0 || a.drift !== null || (a.logprob?.flagged.length ?? 0) > 0 || a.alarms.length > 0;
}

/** The checks of one rollout that need nothing but the rollout (search-collapse is added by {@link Auditor.finish}). */
export function auditRollout(r: Rollout, o: AuditOptions = {}, parsed: ParsedTrajectory = parseResponse(r.response, rolloutContext(r, o.read))): RolloutAudit {
  const tk = r.tokens;
  // a record of the token store: its typed columns, without building the arrays (columns.ts: the same results)
  const cols = tokenColumnsOf(tk);
  const masks = tk ? (cols ? columnsMaskLeaks(cols, engineMaskOf(r.meta)) : maskLeaks(tk, engineMaskOf(r.meta))) : { leaks: [], mask_mismatch: [] };
  return {
    id: r.id,
    step: r.step ?? null,
    leaks: masks.leaks,
    mask_mismatch: masks.mask_mismatch,
    drift: tk && o.tokenizer ? recordDrift(r, o.tokenizer, o).drift : null,
    logprob: tk ? (cols ? columnsLogprobs(cols, o, r.meta) : checkLogprobs(tk as Parameters<typeof checkLogprobs>[0], o, r.meta)) : null,
    is: tk ? (cols ? columnsImportance(cols, o) : importancePreview(tk as Parameters<typeof importancePreview>[0], o)) : null,
    alarms: trajectoryAlarms(r, parsed, o),
    searches: r.searches ?? searchCount(parsed),
  };
}

export interface AuditSummary {
  rollouts: number;
  flagged: number;
  leaks: { rollouts: number; tokens: number; mask_mismatch: number };
  /** `mismatch`: why the tokenizer given is not the run's (then drift is not checked). */
  drift: { checked: boolean; rollouts: number; text: number; split: number; template: number; mismatch?: string };
  logprob: { rollouts: number; compared: number; flagged: number; max_abs_diff: number; mean_abs_diff: number };
  /**
   * The importance-sampling preview summed: `rollouts` with a preview, their `scored` trained tokens, the tokens TIS
   * would clip / MIS would drop (at sequence level every trained token of a clipped / dropped sequence), and the
   * rollouts with any clipped / dropped token (at sequence level: the sequences clipped / dropped).
   */
  is: { level: ImportanceLevel; cap: number; rollouts: number; scored: number; clipped: number; dropped: number; clipped_rollouts: number; dropped_rollouts: number };
  alarms: Partial<Record<Alarm, number>>;
  search_collapse_steps: number[];
  steps: StepAudit[];
}

/** Accumulates rollout audits; {@link finish} applies the run-level rules and summarises. */
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
    if (t && this.mismatch === undefined && r.tokens?.ids?.length) this.decide(tokenizerMismatch(t, r, this.options.runVocab));
    return this.checks;
  }

  /** Drift was checked: a tokenizer that may be the run's. */
  get checked(): boolean {
    return this.options.tokenizer !== undefined && !this.mismatch;
  }
}

export class Auditor {
  readonly rollouts: RolloutAudit[] = [];
  private readonly gate: TokenizerGate;
  constructor(readonly options: AuditOptions = {}) {
    this.gate = new TokenizerGate(options);
  }

  /** Why the tokenizer is not the run's (decided on the first record with token ids); null: it may be. */
  get mismatch(): string | null | undefined {
    return this.gate.mismatch;
  }

  add(r: Rollout): RolloutAudit {
    const a = auditRollout(r, this.gate.see(r));
    this.rollouts.push(a);
    return a;
  }

  finish(): AuditSummary {
    const bySteps = new Map<number, RolloutAudit[]>();
    for (const a of this.rollouts) {
      const list = bySteps.get(a.step ?? 0) ?? [];
      list.push(a);
      bySteps.set(a.step ?? 0, list);
    }
    const meanSearches = new Map([...bySteps].map(([s, list]) => [s, list.reduce((t, a) => t + a.searches, 0) / list.length]));
    const collapsed = searchCollapseSteps(meanSearches, this.options);
    for (const s of collapsed) for (const a of bySteps.get(s)!) if (a.searches === 0) a.alarms.push('search-collapse');

    const checked = this.gate.checked;
    const sum: AuditSummary = {
      rollouts: this.rollouts.length,
      flagged: 0,
      leaks: { rollouts: 0, tokens: 0, mask_mismatch: 0 },
      drift: { checked, rollouts: 0, text: 0, split: 0, template: 0, ...(this.mismatch ? { mismatch: this.mismatch } : {}) },
      logprob: { rollouts: 0, compared: 0, flagged: 0, max_abs_diff: 0, mean_abs_diff: 0 },
      is: { level: this.options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel, cap: this.options.isCap ?? IMPORTANCE_DEFAULTS.isCap, rollouts: 0, scored: 0, clipped: 0, dropped: 0, clipped_rollouts: 0, dropped_rollouts: 0 },
      alarms: {},
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
    for (const [step, list] of [...bySteps].sort((x, y) => x[0] - y[0])) sum.steps.push(stepAudit(step, list, checked));
    return sum;
  }
}

/**
 * The audit of a stream of rollouts in bounded memory (the CLI's `audit`, the dashboard's per-step audit): each
 * rollout's findings go to `onRollout` when its step is complete (the next step begins, or the stream ends) — a
 * step is held so that search-collapse, a rule over a step's mean searches against the highest earlier step's, can
 * mark its rollouts — and only per-step sums are kept. Rollouts are expected step by step in step order (as run
 * directories and stores list them); `summary.search_collapse_steps` is exact whatever the order.
 */
export class AuditStream {
  private step: number | undefined;
  private held: RolloutAudit[] = [];
  private peak = 0;
  private readonly steps = new Map<number, StepSums>();
  private readonly sum: AuditSummary;
  private absSum = 0;
  private readonly gate: TokenizerGate;

  constructor(
    readonly options: AuditOptions = {},
    private readonly onRollout?: (a: RolloutAudit) => void,
  ) {
    this.gate = new TokenizerGate(options);
    this.sum = {
      rollouts: 0,
      flagged: 0,
      leaks: { rollouts: 0, tokens: 0, mask_mismatch: 0 },
      drift: { checked: options.tokenizer !== undefined, rollouts: 0, text: 0, split: 0, template: 0 },
      logprob: { rollouts: 0, compared: 0, flagged: 0, max_abs_diff: 0, mean_abs_diff: 0 },
      is: { level: options.isLevel ?? IMPORTANCE_DEFAULTS.isLevel, cap: options.isCap ?? IMPORTANCE_DEFAULTS.isCap, rollouts: 0, scored: 0, clipped: 0, dropped: 0, clipped_rollouts: 0, dropped_rollouts: 0 },
      alarms: {},
      search_collapse_steps: [],
      steps: [],
    };
  }

  add(r: Rollout): RolloutAudit {
    const a = auditRollout(r, this.gate.see(r));
    const step = a.step ?? 0;
    if (this.step !== undefined && step !== this.step) this.flush();
    this.step = step;
    this.held.push(a);
    return a;
  }

  private flush(): void {
    const list = this.held;
    if (!list.length) return;
    this.held = [];
    const step = this.step ?? 0;
    const mean = list.reduce((t, a) => t + a.searches, 0) / list.length;
    const { collapseFraction, collapsePeak } = { ...ALARM_DEFAULTS, ...this.options };
    if (this.peak >= collapsePeak && mean < collapseFraction * this.peak) for (const a of list) if (a.searches === 0) a.alarms.push('search-collapse');
    this.peak = Math.max(this.peak, mean);
    const acc = this.steps.get(step) ?? newSums();
    this.steps.set(step, acc);
    for (const a of list) {
      addToSummary(this.sum, a, (x) => (this.absSum += x));
      addToStep(acc, a);
      this.onRollout?.(a);
    }
  }

  finish(): AuditSummary {
    this.flush();
    const checked = this.gate.checked;
    this.sum.drift.checked = checked;
    if (this.gate.mismatch) this.sum.drift.mismatch = this.gate.mismatch;
    const ordered = [...this.steps].sort((x, y) => x[0] - y[0]);
    this.sum.search_collapse_steps = searchCollapseSteps(new Map(ordered.map(([s, acc]) => [s, acc.searches / acc.rollouts])), this.options);
    this.sum.logprob.mean_abs_diff = this.sum.logprob.compared ? this.absSum / this.sum.logprob.compared : 0;
    this.sum.steps = ordered.map(([s, acc]) => stepOfSums(s, acc, checked));
    return this.sum;
  }
}

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
}

const newSums = (): StepSums => ({ rollouts: 0, compared: 0, abs: 0, outside: 0, seq: 0, seqN: 0, drift: 0, leaks: 0, searches: 0, noSearch: 0, alarms: {} });

function addToStep(acc: StepSums, a: RolloutAudit): void {
  acc.rollouts++;
  if (a.logprob && a.logprob.compared) {
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
}

function stepOfSums(step: number, acc: StepSums, checked: boolean): StepAudit {
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
    alarms: acc.alarms,
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

function stepAudit(step: number, list: readonly RolloutAudit[], checked: boolean): StepAudit {
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
  };
}
