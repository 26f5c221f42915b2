/** The dashboard's pure parts (no DOM): number format, a run's header, sparse series, the nearest recorded value,
 * the question kinds a run's metrics name. */
import { KIND_METRICS, type DashboardRun, type MetricsRow } from '../../src/core/protocol';

export const fmt = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : Math.abs(v) >= 1000 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(3));

/** A series with recorded values at fewer than this fraction of the chart's steps is drawn with markers. */
export const SPARSE = 0.5;

/** The series (1-based, as uPlot numbers them after x) that are sparse, from their counts of recorded values. */
export function sparseSeries(counts: readonly number[], steps: number): Set<number> {
  return new Set(counts.flatMap((k, i) => (k > 0 && k < SPARSE * steps ? [i + 1] : [])));
}

/** The recorded value nearest to `idx` in a column (for the legend of a sparse series), with its x index. */
export function nearest(col: readonly (number | null | undefined)[], idx: number): { value: number; at: number } | undefined {
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
  if (r.state === 'running' && r.phase === 'warmup') return `running · warm-up${r.warmup ? ` ${r.warmup.step}/${r.warmup.steps} · loss ${fmt(r.warmup.loss)}` : ''}`;
  const stages = r.stages ?? [];
  const at = stages.findIndex((s) => r.step <= s.start + s.steps);
  const stage = stages.length > 1 ? ` · stage ${(at < 0 ? stages.length - 1 : at) + 1}/${stages.length}` : '';
  return `${r.state} · step ${r.step}${r.total ? `/${r.total}` : ''}${stage}`;
}

const mixText = (mix: Record<string, number> | null) =>
  mix ? `hops_mix ${Object.entries(mix).map(([h, w]) => `${h}: ${w}`).join(', ')}` : "the data's own mix";

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
  for (const row of rows) for (const key of Object.keys(row)) {
    const k = KIND_METRICS.kindOf(key);
    if (k !== undefined) kinds.add(k);
  }
  return [...kinds].sort();
}
