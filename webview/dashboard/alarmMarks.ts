/**
 * Alarm annotations on the dashboard's charts (issue 18): a mark at each step where the audit counted an alarm
 * (`audit/alarm/<name>` series), drawn over every chart but the alarms' own, its title naming the alarms and their
 * counts — so a reward that climbs while `answer-enumeration` fires reads as what it is.
 */
import type uPlot from 'uplot';
import { ALARMS, AUDIT_METRICS, type MetricsRow } from '../../src/core/protocol';
import { h } from '../shared/dom';

/** Steps with alarms, each with its "name ×count" list (over the runs' audit rows). */
export function alarmSteps(rows: readonly MetricsRow[]): Map<number, string[]> {
  const out = new Map<number, Map<string, number>>();
  for (const row of rows)
    for (const a of ALARMS) {
      const v = row[AUDIT_METRICS.alarm(a)];
      if (typeof v !== 'number' || !(v > 0)) continue;
      const m = out.get(row.step) ?? new Map<string, number>();
      m.set(a, (m.get(a) ?? 0) + v);
      out.set(row.step, m);
    }
  return new Map([...out].sort((x, y) => x[0] - y[0]).map(([step, m]) => [step, [...m].map(([a, n]) => `${a} ×${n}`)]));
}

/** Redraws the marks of one chart (a uPlot draw hook): thin vertical marks in the plot area, titled — the audit's
 * alarms (`alarm`), and where a curriculum's stage starts (`stage`, model.ts's stageMarks). */
export function drawMarks(u: uPlot, steps: Map<number, string[]>, kind: 'alarm' | 'stage'): void {
  for (const el of u.over.querySelectorAll(`.${kind}-mark`)) el.remove();
  const [lo, hi] = [u.scales.x!.min ?? -Infinity, u.scales.x!.max ?? Infinity];
  for (const [step, texts] of steps) {
    if (step < lo || step > hi) continue;
    const title = kind === 'alarm' ? `step ${step}: ${texts.join(', ')}` : texts.join('\n');
    const mark = h('div', { class: `${kind}-mark`, title, 'data-step': step }, h('span', { class: `${kind}-flag`, title }));
    mark.style.left = `${u.valToPos(step, 'x')}px`;
    u.over.append(mark);
  }
}
