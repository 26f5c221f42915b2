/**
 * The alarm lane (issue 44, replacing issue 18's marks through every chart): a strip of its own above each chart's
 * plot, one row per run with alarms, a tick at each step where an alarm's share of the step's rollouts reached its
 * threshold (model.ts's alarmLane; `searchAgent.dashboard.alarmThresholds`), titled with the alarms and their counts,
 * a click opening that step's rollouts. The series at the top of a chart are never under it. Also the stage marks of
 * a curriculum run (thin dotted lines through the plot: they are few).
 */
import type uPlot from 'uplot';
import type { DashboardRun } from '../../src/core/protocol/dashboard';
import { h, replaceChildren } from '../shared/dom';
import { type LaneMark, laneText } from './model';

/** What renderLane needs of a chart. */
export interface LaneChart {
  lane: HTMLElement;
  lanes: { run: DashboardRun; marks: (LaneMark & { x: number })[] }[];
}

/** Opens a step's rollouts (set by main.ts: the host's openStep). */
export let openLaneStep: (dir: string, step: number) => void = () => undefined;
export function onLaneClick(f: (dir: string, step: number) => void): void {
  openLaneStep = f;
}

/** Redraws a chart's alarm lane after a draw of its plot (so it follows zoom, resize and new data). */
export function renderLane(c: LaneChart, u: uPlot, on: boolean, thresholds: Readonly<Record<string, number>>): void {
  const rowsWith = c.lanes.filter((l) => l.marks.some((m) => m.alarms.some((a) => a.shown)));
  c.lane.hidden = !on || rowsWith.length === 0;
  if (c.lane.hidden) {
    replaceChildren(c.lane);
    return;
  }
  const left = parseFloat(u.over.style.left) || 0;
  const [lo, hi] = [u.scales.x!.min ?? -Infinity, u.scales.x!.max ?? Infinity];
  const several = c.lanes.length > 1;
  const rows = rowsWith.map((l) => {
    const xs = l.marks.map((m) => m.x).sort((a, b) => a - b);
    // A tick as wide as a step (2–8 px), centred on it.
    let gap = Infinity;
    for (let i = 1; i < xs.length; i++)
      gap = Math.min(gap, Math.abs(u.valToPos(xs[i]!, 'x') - u.valToPos(xs[i - 1]!, 'x')));
    const w = Math.max(2, Math.min(8, Number.isFinite(gap) ? gap - 1 : 6));
    const ticks = l.marks
      .filter((m) => m.x >= lo && m.x <= hi && m.alarms.some((a) => a.shown))
      .map((m) => {
        const title = `${several ? `${l.run.id}: ` : ''}step ${m.step}: ${laneText(m, thresholds)} — click for its rollouts`;
        const tick = h('span', {
          class: 'lane-tick',
          title,
          'data-step': m.step,
          onclick: () => openLaneStep(l.run.dir, m.step),
        });
        tick.style.left = `${left + u.valToPos(m.x, 'x') - w / 2}px`;
        tick.style.width = `${w}px`;
        return tick;
      });
    const label = h(
      'span',
      { class: 'lane-label', title: `${l.run.id}: alarms (the audit of its rollouts)` },
      several ? `⚑ ${l.run.id}` : '⚑ alarms',
    );
    label.style.width = `${Math.max(0, left - 4)}px`;
    return h('div', { class: 'lane-row', 'data-lane-run': l.run.id }, label, ...ticks);
  });
  replaceChildren(c.lane, ...rows);
}

/** Redraws the stage marks of one chart (a uPlot draw hook): thin vertical dotted lines in the plot area, titled with
 * where a curriculum's stage starts (model.ts's stageMarks). */
export function drawMarks(u: uPlot, steps: Map<number, string[]>, kind: 'stage'): void {
  for (const el of u.over.querySelectorAll(`.${kind}-mark`)) el.remove();
  const [lo, hi] = [u.scales.x!.min ?? -Infinity, u.scales.x!.max ?? Infinity];
  for (const [x, texts] of steps) {
    if (x < lo || x > hi) continue;
    const title = texts.join('\n');
    const mark = h(
      'div',
      { class: `${kind}-mark`, title, 'data-step': x },
      h('span', { class: `${kind}-flag`, title }),
    );
    mark.style.left = `${u.valToPos(x, 'x')}px`;
    u.over.append(mark);
  }
}
