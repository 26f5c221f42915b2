/**
 * The GRPO group view (DESIGN §7): a group's samples side by side — reward, advantage, answer, exact match,
 * searches, finish, and where each sample's stream first leaves the group's first sample — and why a zero-variance
 * group is one. GRPO's advantage A_i = (r_i − mean(r)) / std(r) is 0 for every sample of a group whose rewards are
 * equal: the group gives no signal. The reason names the common cause, most specific first: every sample hit the
 * length limit (`all-truncated`), none follows the format (`all-invalid-format`), all are right (`all-correct`), all
 * are wrong (`all-wrong`); otherwise the rewards are merely equal (`equal-rewards`).
 */
import type { GroupSample, GroupView, ZeroVarianceReason } from '../protocol/groups';
import { groupKeyOf, type ReadOptions, type Rollout } from '../run/format';
import { firstDifference } from './drift';
import { checkGroups, type GroupMember, groupMember, type RunFacts } from './groupChecks';
import { trajectoryFacts } from './summary';

export type { GroupSample, GroupView, ZeroVarianceReason };

/** Rewards closer than this are equal. */
const EQUAL = 1e-9;

/** A record with where it was read. */
export interface LocatedRollout {
  record: Rollout;
  file: string;
  line: number;
}

/** The sample's advantage: GRPO broadcasts one value per sequence, read from its first scored trained token. */
export function sampleAdvantage(r: Rollout): number | null {
  const tk = r.tokens;
  if (!tk?.advantage) return null;
  for (let i = 0; i < tk.advantage.length; i++) {
    const a = tk.advantage[i];
    if (tk.loss_mask[i] === 1 && typeof a === 'number' && Number.isFinite(a)) return a;
  }
  return null;
}

/** Why an all-equal group gives no signal (the samples' facts as {@link groupViews} reads them). */
export function zeroVarianceReason(
  samples: readonly Pick<GroupSample, 'finish' | 'formatValid' | 'em'>[],
): ZeroVarianceReason {
  if (samples.every((s) => s.finish === 'length')) return 'all-truncated';
  if (samples.every((s) => !s.formatValid)) return 'all-invalid-format';
  if (samples.every((s) => s.em === 1)) return 'all-correct';
  if (samples.every((s) => s.em === 0)) return 'all-wrong';
  return 'equal-rewards';
}

/**
 * The groups of some rollouts (records without a group are left out), in order of first appearance; samples by index;
 * each training group with the group diagnostics that fire on it (groupChecks.ts; `run`: the run config's rollout.n
 * and KL term).
 */
export function groupViews(
  rollouts: readonly LocatedRollout[],
  read: ReadOptions = {},
  run: RunFacts = {},
): GroupView[] {
  const byKey = new Map<string, LocatedRollout[]>();
  for (const x of rollouts) {
    const key = groupKeyOf(x.record);
    if (key === undefined) continue;
    const list = byKey.get(key) ?? [];
    list.push(x);
    byKey.set(key, list);
  }
  const views: GroupView[] = [];
  const members: GroupMember[] = [];
  for (const [key, list] of byKey) {
    list.sort((a, b) => (a.record.sample ?? 0) - (b.record.sample ?? 0));
    const withTokens = list.every((x) => x.record.tokens);
    const streams = list.map((x) =>
      withTokens ? x.record.tokens!.ids : [...x.record.response].map((c) => c.codePointAt(0)!),
    );
    const first = list[0]!.record;
    const samples: GroupSample[] = list.map(({ record: r, file, line }, k) => {
      const f = trajectoryFacts(r, read);
      const d = k === 0 ? -1 : firstDifference(streams[0]!, streams[k]!);
      return {
        id: r.id,
        file,
        line,
        ...(r.sample !== undefined ? { sample: r.sample } : {}),
        ...(r.reward !== undefined ? { reward: r.reward } : {}),
        advantage: sampleAdvantage(r),
        answer: f.answer,
        em: f.em,
        formatValid: f.formatValid,
        searches: f.searches,
        ...(r.finish !== undefined ? { finish: r.finish } : {}),
        divergesAt: d < 0 ? null : d,
        length: streams[k]!.length,
      };
    });
    const rewards = samples.map((s) => s.reward).filter((x): x is number => typeof x === 'number');
    const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
    const std = mean === null ? null : Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length);
    const zero =
      rewards.length === samples.length && samples.length > 1 && Math.max(...rewards) - Math.min(...rewards) < EQUAL;
    const ds = samples.map((s) => s.divergesAt).filter((x): x is number => x !== null);
    list.forEach(({ record }, k) => {
      const m = groupMember(record, members.length, samples[k]!.em);
      if (m) members.push(m);
    });
    views.push({
      key,
      group: String(first.group),
      ...(first.step !== undefined ? { step: first.step } : {}),
      ...(first.split !== undefined ? { split: first.split } : {}),
      ...(first.question !== undefined ? { question: first.question } : {}),
      ...(first.golden !== undefined ? { golden: first.golden } : {}),
      samples,
      rewardMean: mean,
      rewardStd: std,
      zeroVariance: zero,
      ...(zero ? { reason: zeroVarianceReason(samples) } : {}),
      divergeAt: samples.length < 2 ? null : ds.length ? Math.min(...ds) : null,
      unit: withTokens ? 'tokens' : 'chars',
      alarms: [],
    });
  }
  const bySteps = new Map<number, GroupMember[]>();
  for (const m of members) bySteps.set(m.step, [...(bySteps.get(m.step) ?? []), m]);
  for (const list of bySteps.values())
    for (const f of checkGroups(list, run).findings) {
      const view = views.find(
        (v) =>
          (v.step ?? 0) === f.step &&
          v.group === f.group &&
          (v.split === undefined || v.split === 'train' || !['val', 'test', 'eval', 'validation'].includes(v.split)),
      );
      if (view) view.alarms = f.alarms;
    }
  return views;
}
