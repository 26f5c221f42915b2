/**
 * Scoring rollouts with a reward module: resolving `builtin:…` names, streaming a rollout file through the
 * sandbox in batches, and the report the CLI, the env server and the Reward Lab show (recorded vs new rewards,
 * per data source, zero-variance GRPO groups before and after, what changed, errors).
 */
import { join } from 'node:path';
import { readSource } from '../importers';
import { packageRoot } from '../paths';
import { groupKeyOf, type Rollout, rolloutSpans } from '../run/format';
import { type CompiledReward, compileRewardModule, rewardApiPath } from './compile';
import type { ErrorCounts, Histogram, RewardErrorKind, RewardReport } from './report';
import {
  describeRewardError,
  type RewardItem,
  type RewardOutcome,
  RewardSandbox,
  type SandboxOptions,
} from './sandbox';

export type { ErrorCounts, Histogram, RewardReport };

/** The built-in rewards are the project's example modules (examples/rewards/). */
export const BUILTIN_REWARDS = {
  em: 'em.reward.ts',
  subem: 'subem.reward.ts',
  f1: 'f1.reward.ts',
  'em-format': 'em-format.reward.ts',
} as const;

export function resolveRewardSpec(spec: string): string {
  if (!spec.startsWith('builtin:')) return spec;
  const name = spec.slice('builtin:'.length) as keyof typeof BUILTIN_REWARDS;
  const file = BUILTIN_REWARDS[name];
  if (!file)
    throw new Error(
      `unknown built-in reward "${spec}"; the built-ins are ${Object.keys(BUILTIN_REWARDS)
        .map((k) => `builtin:${k}`)
        .join(', ')}`,
    );
  return join(packageRoot(), 'examples', 'rewards', file);
}

export interface OpenedReward {
  spec: string;
  compiled: CompiledReward;
  sandbox: RewardSandbox;
}

/** Compiles a reward module (or built-in) and starts its sandbox. */
export async function openReward(spec: string, options: SandboxOptions = {}, contents?: string): Promise<OpenedReward> {
  const compiled = await compileRewardModule(resolveRewardSpec(spec), contents);
  return { spec, compiled, sandbox: new RewardSandbox(compiled, options, rewardApiPath()) };
}

const withSpans = (spans: RewardItem['spans']) => (spans ? { spans } : {});

export function itemFromRollout(r: Rollout, where?: string): RewardItem {
  return {
    id: r.id,
    prompt: r.prompt,
    response: r.response,
    golden: r.golden ?? [],
    ...(r.question !== undefined ? { question: r.question } : {}),
    ...(r.data_source !== undefined ? { data_source: r.data_source } : {}),
    ...(r.meta !== undefined ? { meta: r.meta } : {}),
    ...(r.dialect !== undefined ? { dialect: r.dialect } : {}),
    ...(r.strict_actions === true ? { strictActions: true } : {}),
    ...withSpans(rolloutSpans(r)),
    ...(where ? { where } : {}),
  };
}

export interface ScoredRollout {
  record: Rollout;
  where: string;
  outcome: RewardOutcome;
}

/**
 * Which rollouts a scoring run read: each file and the last line read from it. A later run given it (`only`) scores
 * the same rollouts again even if the files grew since (a live run): "before the edit" and "after" compare the same set.
 */
export type RolloutSet = Record<string, number>;

const fileLine = (where: string): [string, number] | undefined => {
  const m = /^(.*):(\d+)$/.exec(where);
  return m ? [m[1]!, Number(m[2])] : undefined;
};

/**
 * Streams rollouts through a sandbox, `batch` at a time, in order: our rollout JSONL or run directories, and
 * anything the importers read (veRL dumps, TRL completion tables, Search-R1 transcripts). Progress comes per item
 * (throttled), with the failures so far by kind.
 */
export async function* scoreRollouts(
  path: string,
  sandbox: RewardSandbox,
  options: {
    batch?: number;
    signal?: AbortSignal;
    onMalformed?: (message: string) => void;
    onProgress?: (done: number, errors: ErrorCounts) => void;
    /** Score only these rollouts (a set an earlier run read); rollouts read since are left out. */
    only?: RolloutSet;
    /** Filled with the set this run read. */
    read?: RolloutSet;
  } = {},
): AsyncGenerator<ScoredRollout> {
  const batchSize = options.batch ?? 4096;
  let batch: { record: Rollout; where: string }[] = [];
  let done = 0;
  const errors: ErrorCounts = {};
  // The batches of one stream are one run: a runaway streak carries from one to the next.
  let continueStreak = false;
  const flush = async function* () {
    const outcomes = await sandbox.score(
      batch.map((b) => itemFromRollout(b.record, b.where)),
      options.onProgress
        ? (p) => {
            const sum: ErrorCounts = { ...errors };
            for (const [k, n] of Object.entries(p.errors) as [RewardErrorKind, number][]) sum[k] = (sum[k] ?? 0) + n;
            options.onProgress!(done + p.done, sum);
          }
        : undefined,
      options.signal,
      { continueStreak },
    );
    continueStreak = true;
    for (let i = 0; i < batch.length; i++) {
      const o = outcomes[i]!;
      if ('error' in o) errors[o.error.kind] = (errors[o.error.kind] ?? 0) + 1;
      yield { ...batch[i]!, outcome: o };
    }
    done += batch.length;
    options.onProgress?.(done, { ...errors });
    batch = [];
  };
  const only = options.only;
  for await (const item of readSource(path, undefined, {}, 'none')) {
    // a reward reads text: no token arrays
    options.signal?.throwIfAborted();
    const at = item.where ? fileLine(item.where) : undefined;
    if (at && only) {
      const last = only[at[0]];
      if (last === undefined || at[1] > last) continue;
    }
    if (at && options.read) options.read[at[0]] = Math.max(options.read[at[0]] ?? 0, at[1]);
    if (!item.record) {
      for (const e of item.issues)
        options.onMalformed?.(`${e.file}:${e.line}: ${e.field ? `${e.field}: ` : ''}${e.message}`);
      continue;
    }
    batch.push({ record: item.record, where: item.where ?? path });
    if (batch.length >= batchSize) yield* flush();
  }
  if (batch.length) yield* flush();
}

const stats = () => ({ n: 0, sum: 0, sumSq: 0 });

/** Builds a RewardReport incrementally (bounded memory: lists are capped). */
export class RewardReportBuilder {
  private count = 0;
  private errors = 0;
  private readonly byKind: ErrorCounts = {};
  private readonly scored = stats();
  private readonly recorded = stats();
  private agreeN = 0;
  private agreeOf = 0;
  private readonly groups = new Map<
    string,
    { n: number; min: number; max: number; rmin: number; rmax: number; rn: number }
  >();
  private readonly sources = new Map<
    string,
    { count: number; rec: ReturnType<typeof stats>; sc: ReturnType<typeof stats> }
  >();
  private readonly values: { rec: number | null; sc: number | null }[] = [];
  private changed: RewardReport['changed'] = [];
  private changedCount = 0;
  private readonly failures: RewardReport['failures'] = [];

  constructor(private readonly limit = 200) {}

  add(s: ScoredRollout): void {
    this.count++;
    const rec = typeof s.record.reward === 'number' ? s.record.reward : null;
    const sc = 'reward' in s.outcome ? s.outcome.reward : null;
    if ('error' in s.outcome) {
      this.errors++;
      this.byKind[s.outcome.error.kind] = (this.byKind[s.outcome.error.kind] ?? 0) + 1;
      if (this.failures.length < this.limit)
        this.failures.push({
          id: s.record.id,
          where: s.where,
          message: describeRewardError({ id: s.record.id, where: s.where }, s.outcome.error),
          error: s.outcome.error,
        });
    }
    if (sc !== null) {
      this.scored.n++;
      this.scored.sum += sc;
      this.scored.sumSq += sc * sc;
    }
    if (rec !== null) {
      this.recorded.n++;
      this.recorded.sum += rec;
      this.recorded.sumSq += rec * rec;
      if (sc !== null) {
        this.agreeOf++;
        if (Math.abs(sc - rec) <= 1e-9) this.agreeN++;
      }
    }
    if (this.values.length < 1_000_000) this.values.push({ rec, sc });
    if ((rec ?? NaN) !== (sc ?? NaN) && !(rec !== null && sc !== null && Math.abs(rec - sc) <= 1e-9)) {
      this.changedCount++;
      this.changed.push({ id: s.record.id, where: s.where, recorded: rec, reward: sc });
      if (this.changed.length > this.limit * 4) this.trimChanged();
    }
    const src = s.record.data_source ?? '(none)';
    const e = this.sources.get(src) ?? { count: 0, rec: stats(), sc: stats() };
    e.count++;
    if (rec !== null) {
      e.rec.n++;
      e.rec.sum += rec;
    }
    if (sc !== null) {
      e.sc.n++;
      e.sc.sum += sc;
    }
    this.sources.set(src, e);
    const key = groupKeyOf(s.record);
    if (key !== undefined) {
      const g = this.groups.get(key) ?? { n: 0, min: Infinity, max: -Infinity, rmin: Infinity, rmax: -Infinity, rn: 0 };
      if (sc !== null) {
        g.n++;
        g.min = Math.min(g.min, sc);
        g.max = Math.max(g.max, sc);
      }
      if (rec !== null) {
        g.rn++;
        g.rmin = Math.min(g.rmin, rec);
        g.rmax = Math.max(g.rmax, rec);
      }
      this.groups.set(key, g);
    }
  }

  private trimChanged(): void {
    const delta = (c: RewardReport['changed'][number]) =>
      Math.abs((c.reward ?? 0) - (c.recorded ?? 0)) + (c.reward === null || c.recorded === null ? 10 : 0);
    this.changed.sort((a, b) => delta(b) - delta(a));
    this.changed = this.changed.slice(0, this.limit);
  }

  result(): RewardReport {
    this.trimChanged();
    const mean = (s: ReturnType<typeof stats>) => (s.n ? s.sum / s.n : null);
    const m = mean(this.scored);
    const std = m === null ? null : Math.sqrt(Math.max(0, this.scored.sumSq / this.scored.n - m * m));
    const zero = (pick: 'new' | 'rec') => {
      const gs = [...this.groups.values()].filter((g) => (pick === 'new' ? g.n : g.rn) >= 2);
      if (!gs.length) return { frac: null, n: 0 };
      const z = gs.filter((g) => (pick === 'new' ? g.max - g.min : g.rmax - g.rmin) <= 1e-12).length;
      return { frac: z / gs.length, n: gs.length };
    };
    const zNew = zero('new');
    const zRec = zero('rec');
    // Histogram over the range of both, 20 bins (a single value gets one bin).
    let lo = 0;
    let hi = 1;
    for (const v of this.values) {
      for (const x of [v.rec, v.sc]) {
        if (x === null) continue;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
    }
    const bins = 20;
    const edges = Array.from({ length: bins + 1 }, (_, i) => lo + ((hi - lo) * i) / bins);
    const recorded = new Array(bins).fill(0);
    const scored = new Array(bins).fill(0);
    const bin = (x: number) => Math.min(bins - 1, Math.max(0, Math.floor(((x - lo) / (hi - lo || 1)) * bins)));
    for (const v of this.values) {
      if (v.rec !== null) recorded[bin(v.rec)]++;
      if (v.sc !== null) scored[bin(v.sc)]++;
    }
    return {
      count: this.count,
      scored: this.scored.n,
      errors: this.errors,
      errorsByKind: { ...this.byKind },
      mean: m,
      std,
      recordedMean: mean(this.recorded),
      agreement: this.agreeOf ? this.agreeN / this.agreeOf : null,
      frac_zero_std_groups: zNew.frac,
      frac_zero_std_groups_recorded: zRec.frac,
      groups: Math.max(zNew.n, zRec.n),
      histogram: { edges, recorded, scored },
      bySource: [...this.sources.entries()]
        .sort((a, b) => a[0].localeCompare(b[0]))
        .map(([data_source, e]) => ({ data_source, count: e.count, recordedMean: mean(e.rec), mean: mean(e.sc) })),
      changed: this.changed,
      changedCount: this.changedCount,
      failures: this.failures,
    };
  }
}
