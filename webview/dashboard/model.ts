/** The dashboard's pure parts (no DOM): number format, a run's header, sparse series, the nearest recorded value,
 * the question kinds a run's metrics name. */
import { AUDIT_METRICS, type DashboardRun, KIND_METRICS, type MetricsRow } from '../../src/core/protocol/dashboard';

export const fmt = (v: number | null | undefined) =>
  v === null || v === undefined || !Number.isFinite(v)
    ? '–'
    : Math.abs(v) >= 1000
      ? v.toFixed(0)
      : Math.abs(v) >= 10
        ? v.toFixed(1)
        : v.toFixed(3);

/** A series with recorded values at fewer than this fraction of the chart's steps is drawn with markers. */
export const SPARSE = 0.5;

/** The series (1-based, as uPlot numbers them after x) that are sparse, from their counts of recorded values. A series
 * with a single value (every chart at step 1) is one too: a line through one point draws nothing. */
export function sparseSeries(counts: readonly number[], steps: number): Set<number> {
  return new Set(counts.flatMap((k, i) => (k > 0 && (k === 1 || k < SPARSE * steps) ? [i + 1] : [])));
}

/** The recorded value nearest to `idx` in a column (for the legend of a sparse series), with its x index. */
export function nearest(
  col: readonly (number | null | undefined)[],
  idx: number,
): { value: number; at: number } | undefined {
  for (let d = 0; d < col.length; d++) {
    for (const k of d === 0 ? [idx] : [idx - d, idx + d]) {
      const v = col[k];
      if (k >= 0 && k < col.length && v !== null && v !== undefined) return { value: v, at: k };
    }
  }
  return undefined;
}

/** A run's header: its state and step (and a curriculum's stage), or the warm start's progress and loss while it runs. */
export function runStatus(r: DashboardRun): string {
  if (r.state === 'running' && r.phase === 'warmup')
    return `running · warm-up${r.warmup ? ` ${r.warmup.step}/${r.warmup.steps} · loss ${fmt(r.warmup.loss)}` : ''}`;
  const stages = r.stages ?? [];
  const at = stages.findIndex((s) => r.step <= s.start + s.steps);
  const stage = stages.length > 1 ? ` · stage ${(at < 0 ? stages.length - 1 : at) + 1}/${stages.length}` : '';
  return `${r.state} · step ${r.step}${r.total ? `/${r.total}` : ''}${stage}`;
}

const mixText = (mix: Record<string, number> | null) =>
  mix
    ? `hops_mix ${Object.entries(mix)
        .map(([h, w]) => `${h}: ${w}`)
        .join(', ')}`
    : "the data's own mix";

/** Where a curriculum run's stages after the first start (the step of the policy they start from), each with what
 * the mark says: the stage, its mix, and what restarts there — so the dip after a stage starts reads as what it is. */
export function stageMarks(runs: readonly DashboardRun[]): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const r of runs) {
    const stages = r.stages ?? [];
    stages.forEach((s, i) => {
      if (i === 0) return;
      const text = `${runs.length > 1 ? `${r.id}: ` : ''}stage ${i + 1} of ${stages.length} starts after step ${s.start} (${mixText(s.hopsMix)}; the KL reference, optimizer and LR schedule restart)`;
      out.set(s.start, [...(out.get(s.start) ?? []), text]);
    });
  }
  return new Map([...out].sort((a, b) => a[0] - b[0]));
}

/** What the empty dashboard says: the warm start's progress while one runs, else why there is nothing yet. */
export function emptyText(runs: readonly DashboardRun[]): string {
  const w = runs.find((r) => r.state === 'running' && r.phase === 'warmup');
  if (!w) return 'No metrics yet: the first line comes after the first evaluation or step.';
  return `Warm start (supervised, on the format only) before step 1: ${w.warmup ? `step ${w.warmup.step} of ${w.warmup.steps}, loss ${fmt(w.warmup.loss)}` : 'starting'}. The charts begin after it.`;
}

/** The question kinds (`meta.kind`) the rows have held-out EM for, sorted: the by-kind charts' series, one per kind. */
export function questionKinds(rows: Iterable<MetricsRow>): string[] {
  const kinds = new Set<string>();
  for (const row of rows)
    for (const key of Object.keys(row)) {
      const k = KIND_METRICS.kindOf(key);
      if (k !== undefined) kinds.add(k);
    }
  return [...kinds].sort();
}

/**
 * TensorBoard's smoothing (its scalar dashboard's "Smoothing" slider): an exponential moving average over a series'
 * recorded values in x order, debiased as Adam's moments are (÷ (1 − wⁿ) after n values), so the first points are not
 * pulled towards 0. `weight` in [0, 1): 0 returns the values as they are. Missing values stay missing (the average
 * runs over the recorded ones).
 */
export function smoothEma(values: readonly (number | null)[], weight: number): (number | null)[] {
  if (!(weight > 0)) return [...values];
  const w = Math.min(weight, 0.999);
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return null;
    last = last * w + (1 - w) * v;
    n++;
    return last / (1 - w ** n);
  });
}

/**
 * Colours for the series of a chart, distinct within it: the theme's six chart colours (given, in order), then six
 * fixed hues away from them (teal, pink, brown, lime, lavender, grey), then hues spread by the golden angle at
 * alternating lightness. A chart of seven series no longer repeats a green (issue 44).
 */
export const EXTRA_COLORS = ['#2ab7a9', '#e36fb4', '#a0703c', '#9fcf3a', '#8c8cf0', '#a0a0a0'];
export function paletteColor(i: number, theme: readonly string[]): string {
  if (i < theme.length) return theme[i]!;
  const j = i - theme.length;
  if (j < EXTRA_COLORS.length) return EXTRA_COLORS[j]!;
  const k = j - EXTRA_COLORS.length;
  return `hsl(${Math.round((k * 137.508 + 15) % 360)} ${k % 2 ? 55 : 75}% ${k % 2 ? 42 : 62}%)`;
}

/** The alarm names the rows count (`audit/alarm/<name>`), the protocol's ALARMS first in their order, then others sorted. */
export function alarmNames(rows: Iterable<MetricsRow>, known: readonly string[]): string[] {
  const seen = new Set<string>();
  for (const row of rows)
    for (const key of Object.keys(row)) {
      const a = AUDIT_METRICS.alarmOf(key);
      if (a !== undefined) seen.add(a);
    }
  return [...known.filter((a) => seen.has(a)), ...[...seen].filter((a) => !known.includes(a)).sort()];
}

/** One alarm at a step: rollouts that carry it, of how many audited, and whether that clears its lane threshold. */
export interface LaneAlarm {
  name: string;
  count: number;
  rollouts: number | undefined;
  share: number | undefined;
  shown: boolean;
}

/** A step of a run's alarm lane: the alarms counted there (the lane marks it when any is shown). */
export interface LaneMark {
  step: number;
  alarms: LaneAlarm[];
}

/** The share of a step's rollouts at or above which an alarm is marked on the lane (`*`: the others; default 0). */
export function thresholdOf(thresholds: Readonly<Record<string, number>>, name: string): number {
  const t = thresholds[name] ?? thresholds['*'] ?? 0;
  return Number.isFinite(t) ? Math.max(0, t) : 0;
}

/**
 * A run's alarm lane from its audit rows: each step with an alarm, each alarm with its count and share of the step's
 * rollouts, `shown` when the share reaches the alarm's threshold (a threshold of 0 shows any; without a rollout count
 * the count alone decides). Generic over names: every `audit/alarm/<name>` key is an alarm.
 */
export function alarmLane(rows: readonly MetricsRow[], thresholds: Readonly<Record<string, number>> = {}): LaneMark[] {
  const byStep = new Map<number, LaneMark>();
  for (const row of rows) {
    const rollouts = typeof row[AUDIT_METRICS.rollouts] === 'number' ? row[AUDIT_METRICS.rollouts] : undefined;
    for (const [key, v] of Object.entries(row)) {
      const name = AUDIT_METRICS.alarmOf(key);
      if (name === undefined || typeof v !== 'number' || !(v > 0)) continue;
      const share = rollouts ? v / rollouts : undefined;
      const t = thresholdOf(thresholds, name);
      const mark = byStep.get(row.step) ?? { step: row.step, alarms: [] };
      mark.alarms.push({ name, count: v, rollouts, share, shown: t <= 0 || share === undefined || share >= t });
      byStep.set(row.step, mark);
    }
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/** What a lane mark says: "search-repeat 9 of 64 rollouts (14%)", the alarms under their threshold last, marked so. */
export function laneText(mark: LaneMark, thresholds: Readonly<Record<string, number>> = {}): string {
  const one = (a: LaneAlarm) =>
    `${a.name} ${a.count}${a.rollouts ? ` of ${a.rollouts} rollouts (${Math.round(100 * (a.share ?? 0))}%)` : ''}${a.shown ? '' : ` — under its lane threshold ${Math.round(100 * thresholdOf(thresholds, a.name))}%`}`;
  return [...mark.alarms.filter((a) => a.shown), ...mark.alarms.filter((a) => !a.shown)].map(one).join('; ');
}

/**
 * Wall time of a run's steps, in seconds since its first metrics line (the trainer writes `time`, Unix seconds, on
 * every line): a step with several lines (training, then its evaluation) takes its first. Rows without `time`
 * (older runs, imported metrics) have none: the wall-time axis leaves them out.
 */
export function stepTimes(rows: readonly MetricsRow[]): Map<number, number> {
  const times = rows.filter((r) => typeof r.time === 'number' && Number.isFinite(r.time));
  if (!times.length) return new Map();
  const t0 = Math.min(...times.map((r) => r.time!));
  const out = new Map<number, number>();
  for (const r of times) if (!out.has(r.step)) out.set(r.step, r.time! - t0);
  return out;
}

/** A duration on the wall-time axis: "45s", "12m", "1h05". */
export function fmtDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '–';
  const s = Math.round(seconds);
  if (Math.abs(s) < 60) return `${s}s`;
  if (Math.abs(s) < 3600) return `${Math.floor(s / 60)}m${s % 60 ? String(s % 60).padStart(2, '0') : ''}`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}`;
}

/** Whether a chart answers the dashboard's search: every word in its title, its series' labels or metric names. */
export function chartMatches(
  spec: { title: string; metrics: readonly { key: string; label: string }[] },
  search: string,
): boolean {
  const words = search.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return true;
  const hay = [spec.title, ...spec.metrics.flatMap((m) => [m.key, m.label])].join('\n').toLowerCase();
  return words.every((w) => hay.includes(w));
}
