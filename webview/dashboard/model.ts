/** The dashboard's pure parts (no DOM): number format, a run's header, sparse series, the nearest recorded value. */
import type { DashboardRun } from '../../src/core/protocol';

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

/** A run's header: its state and step, or the warm start's progress and loss while it runs. */
export function runStatus(r: DashboardRun): string {
  if (r.state === 'running' && r.phase === 'warmup') return `running · warm-up${r.warmup ? ` ${r.warmup.step}/${r.warmup.steps} · loss ${fmt(r.warmup.loss)}` : ''}`;
  return `${r.state} · step ${r.step}${r.total ? `/${r.total}` : ''}`;
}

/** What the empty dashboard says: the warm start's progress while one runs, else why there is nothing yet. */
export function emptyText(runs: readonly DashboardRun[]): string {
  const w = runs.find((r) => r.state === 'running' && r.phase === 'warmup');
  if (!w) return 'No metrics yet: the first line comes after the first evaluation or step.';
  return `Warm start (supervised, on the format only) before step 1: ${w.warmup ? `step ${w.warmup.step} of ${w.warmup.steps}, loss ${fmt(w.warmup.loss)}` : 'starting'}. The charts begin after it.`;
}
