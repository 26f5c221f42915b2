/**
 * The training dashboard: live charts of metrics.jsonl (uPlot, canvas) for one run or several overlaid. New lines
 * are appended to the charts' data (setData: a canvas redraw, no DOM rebuilt); the cursor is synchronised across
 * charts and the legend shows the values under it (for a sparse series such as held-out EM, the nearest recorded
 * value and its step); clicking a point opens that step's rollouts. Every series has its own colour from the theme's
 * chart variables (following a theme change); overlaid runs differ by dash; sparse series are drawn with markers.
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import uPlot from 'uplot';
import { ALARMS, AUDIT_METRICS, HOPS_METRICS, KIND_METRICS, type DashboardContract, type DashboardRun, type MetricsRow } from '../../src/core/protocol';
import { connect } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';
import { emptyText, fmt, nearest, questionKinds, runStatus, sparseSeries, stageMarks } from './model';
import { alarmSteps, drawMarks } from './alarmMarks';

interface ChartSpec {
  key: string;
  title: string;
  metrics: { key: string; label: string }[];
  /** y range from 0 to at least this. */
  min0?: number;
}

/** The charts, in order (metric names as the trainer writes them, veRL's where it has one). */
export const CHARTS: ChartSpec[] = [
  { key: 'reward', title: 'Reward and exact match', min0: 1, metrics: [{ key: 'critic/score/mean', label: 'reward' }, { key: 'reward/em/mean', label: 'EM (train)' }, { key: 'val/em', label: 'EM (held-out)' }] },
  { key: 'searches', title: 'Searches per trajectory', metrics: [{ key: 'env/number_of_valid_search', label: 'train' }, { key: 'val/searches_mean', label: 'held-out' }] },
  { key: 'hops', title: 'Held-out by hops: exact match, searches per question, bridge entity searched, answer retrieved', min0: 1, metrics: [1, 2].flatMap((n) => [{ key: HOPS_METRICS.em(n), label: `EM ${n}-hop` }, { key: HOPS_METRICS.searches(n), label: `searches ${n}-hop` }, ...(n > 1 ? [{ key: HOPS_METRICS.bridge(n), label: `bridge entity searched ${n}-hop` }] : []), { key: HOPS_METRICS.retrieved(n), label: `answer retrieved ${n}-hop` }]) },
  { key: 'length', title: 'Response length (tokens)', metrics: [{ key: 'response_length/mean', label: 'mean' }] },
  // Valid actions high with format low: the parser accepts what the format check refuses (an <answer> inside an unclosed <search>: the audit's answer-in-search).
  { key: 'valid', title: 'Valid-action ratio and format (is_valid_sequence)', min0: 1, metrics: [{ key: 'env/ratio_of_valid_action', label: 'valid actions' }, { key: 'reward/format/mean', label: 'format (train)' }, { key: 'val/reward/format/mean', label: 'format (held-out)' }] },
  { key: 'zero', title: 'Groups with zero reward variance', min0: 1, metrics: [{ key: 'reward/frac_zero_std_groups', label: 'fraction' }] },
  { key: 'kl', title: 'KL', metrics: [{ key: 'actor/ppo_kl', label: 'policy vs rollout' }, { key: 'actor/kl_loss', label: 'vs reference' }] },
  { key: 'entropy', title: 'Entropy', metrics: [{ key: 'actor/entropy', label: 'entropy' }] },
  { key: 'clip', title: 'Clip fraction', metrics: [{ key: 'actor/pg_clipfrac', label: 'clipped' }] },
  { key: 'grad', title: 'Gradient norm', metrics: [{ key: 'actor/grad_norm', label: 'grad norm' }] },
  { key: 'drift', title: 'Re-tokenisation drift (rollouts audited)', min0: 1, metrics: [{ key: AUDIT_METRICS.drift, label: 'drift rate' }] },
  { key: 'logprob', title: 'Rollout vs trainer log-probs (trained tokens)', metrics: [{ key: AUDIT_METRICS.meanAbsDiff, label: 'mean |Δ|' }, { key: AUDIT_METRICS.ratioOutside, label: 'ratio outside [0.5, 2]' }, { key: AUDIT_METRICS.seqRatio, label: 'sequence ratio' }] },
  { key: 'alarms', title: 'Audit: alarms and leaks per step', metrics: [...ALARMS.map((a) => ({ key: AUDIT_METRICS.alarm(a), label: a })), { key: AUDIT_METRICS.leaks, label: 'leaked tokens' }] },
  { key: 'tps', title: 'Tokens per second', metrics: [{ key: 'perf/throughput', label: 'tokens/s' }] },
];

/**
 * The by-kind charts, after the by-hops one: one series per question kind (`meta.kind`) the runs' metrics name; none
 * before the first evaluation or when the eval set names fewer than two kinds. EM beside answer retrieved tells a
 * kind the policy cannot find from one it finds and misreads.
 */
function kindCharts(kinds: readonly string[]): ChartSpec[] {
  if (!kinds.length) return [];
  return [
    { key: 'kinds-em', title: 'Held-out exact match by question kind', min0: 1, metrics: kinds.map((k) => ({ key: KIND_METRICS.em(k), label: k })) },
    { key: 'kinds-retrieved', title: 'Held-out answer retrieved by question kind (high with low EM: misread)', min0: 1, metrics: kinds.map((k) => ({ key: KIND_METRICS.retrieved(k), label: k })) },
  ];
}

/** The question kinds the charts now have series for. */
let kinds: string[] = [];

/** The charts, in order: CHARTS with the by-kind charts after the by-hops chart. */
function chartSpecs(): ChartSpec[] {
  const at = CHARTS.findIndex((c) => c.key === 'hops') + 1;
  return [...CHARTS.slice(0, at), ...kindCharts(kinds), ...CHARTS.slice(at)];
}

const PALETTE_VARS = ['--vscode-charts-blue', '--vscode-charts-orange', '--vscode-charts-green', '--vscode-charts-purple', '--vscode-charts-red', '--vscode-charts-yellow'];
const FALLBACK = ['#3794ff', '#d18616', '#89d185', '#b180d7', '#f14c4c', '#cca700'];
/** Overlaid runs: the first solid, the others dashed (their series keep the metrics' colours). */
const RUN_DASH: (number[] | undefined)[] = [undefined, [8, 4], [2, 3], [12, 3, 2, 3]];

const endpoint = connect<DashboardContract>('dashboard');
const root = document.getElementById('root')!;
const runsBar = h('div', { class: 'runs', 'data-testid': 'runs' });
const grid = h('div', { class: 'grid', 'data-testid': 'charts' });
const empty = h('p', { class: 'muted', 'data-testid': 'empty' }, 'No metrics yet: the first line comes after the first evaluation or step.');

let runs: DashboardRun[] = [];
const rows = new Map<string, MetricsRow[]>();
/** The audit's per-step rows of each run (replaced whole on each message). */
const auditRows = new Map<string, MetricsRow[]>();
const rowsOf = (dir: string): MetricsRow[] => [...(rows.get(dir) ?? []), ...(auditRows.get(dir) ?? [])];
const charts = new Map<string, { spec: ChartSpec; plot: uPlot; box: HTMLElement }>();
/** The audit's alarms by step (all runs shown), marked on every chart but the alarms' own (alarmMarks.ts). */
let alarmsByStep = new Map<number, string[]>();
/** Where a curriculum run's later stages start (train.stages), marked on every chart. */
let stagesByStep = new Map<number, string[]>();
let theme = '';

function css(name: string, fallback: string): string {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

/** The theme's six chart colours, then hues spread by the golden angle (a chart of seven question kinds stays distinct). */
function paletteColor(i: number): string {
  if (i < PALETTE_VARS.length) return css(PALETTE_VARS[i]!, FALLBACK[i]!);
  return `hsl(${Math.round((i * 137.508) % 360)} 65% 58%)`;
}

/** A series' colour: metric j of run i, distinct within a chart (one run: its metrics get the palette in order). */
function seriesColor(run: number, metric: number, metrics: number): string {
  return paletteColor(run * metrics + metric);
}

/** Aligned columns for one chart: the union of steps, one column per (run, metric), null where absent. */
function columns(spec: ChartSpec): uPlot.AlignedData {
  const steps = new Set<number>();
  for (const r of runs) for (const row of rowsOf(r.dir)) if (spec.metrics.some((m) => typeof row[m.key] === 'number')) steps.add(row.step);
  const xs = [...steps].sort((a, b) => a - b);
  const at = new Map(xs.map((s, i) => [s, i]));
  const cols: (number | null)[][] = [];
  for (const r of runs) {
    for (const m of spec.metrics) {
      const col: (number | null)[] = new Array(xs.length).fill(null);
      for (const row of rowsOf(r.dir)) {
        const v = row[m.key];
        if (typeof v === 'number' && Number.isFinite(v)) col[at.get(row.step)!] = v;
      }
      cols.push(col);
    }
  }
  return [xs, ...cols] as uPlot.AlignedData;
}

/** Which series of each chart are sparse (drawn with markers), by series index; set by update(). */
const sparse = new Map<string, Set<number>>();

function makeChart(spec: ChartSpec): { spec: ChartSpec; plot: uPlot; box: HTMLElement } {
  const fg = css('--vscode-foreground', '#ccc');
  const gridColor = css('--vscode-editorWidget-border', 'rgba(128,128,128,0.25)');
  const series: uPlot.Series[] = [{ label: 'step', value: (_u, v) => (v === null ? '–' : String(v)) }];
  runs.forEach((r, i) => {
    spec.metrics.forEach((m, j) => {
      const color = seriesColor(i, j, spec.metrics.length);
      series.push({
        label: runs.length > 1 ? `${r.id} · ${m.label}` : m.label,
        stroke: color,
        width: 1.5,
        dash: RUN_DASH[i % RUN_DASH.length],
        spanGaps: true,
        points: { show: (u, si) => sparse.get(spec.key)?.has(si) ?? false, size: 6, fill: color, stroke: color },
        // Under the cursor: the value at that step, or — for a sparse series — the nearest recorded one, with its step.
        value: (u, v, si, idx) => {
          if (v !== null && v !== undefined) return fmt(v);
          if (idx === null) return '–';
          const n = nearest(u.data[si] as (number | null)[], idx);
          return n ? `${fmt(n.value)} (step ${(u.data[0] as number[])[n.at]})` : '–';
        },
      });
    });
  });
  const box = h('div', { class: 'chart', 'data-chart': spec.key }, h('h3', {}, spec.title));
  const axis = { stroke: fg, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor, width: 1 } };
  const plot = new uPlot(
    {
      width: Math.max(280, Math.floor((grid.clientWidth || 900) / 2) - 24),
      height: 200,
      series,
      cursor: { sync: { key: 'dashboard' }, drag: { x: true, y: false } },
      legend: { live: true },
      // x padded by half a step (at least) so the first and last points — a step-0 evaluation — are not on the edge.
      scales: { x: { time: false, range: (_u, lo, hi) => { const pad = Math.max(0.5, (hi - lo) * 0.02); return [lo - pad, hi + pad]; } }, y: { range: (_u, lo, hi) => (spec.min0 !== undefined ? [Math.min(0, lo), Math.max(hi, 0.1 * spec.min0)] : [lo === hi ? lo - 1 : lo, lo === hi ? hi + 1 : hi]) } },
      // Steps are integers: only integer tick increments on x.
      hooks: { draw: [(u) => (spec.key === 'alarms' ? undefined : drawMarks(u, alarmsByStep, 'alarm')), (u) => drawMarks(u, stagesByStep, 'stage')] },
      axes: [{ ...axis, label: 'step', incrs: [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000] }, { ...axis, size: 56 }],
    },
    columns(spec),
    box,
  );
  plot.over.addEventListener('click', () => {
    const idx = plot.cursor.idx;
    if (idx === null || idx === undefined) return;
    const step = (plot.data[0] as number[])[idx];
    if (step === undefined) return;
    const run = runs.find((r) => (rows.get(r.dir) ?? []).some((row) => row.step === step)) ?? runs[0];
    // The zero-variance chart opens that step's GRPO groups; the others its rollouts in the inspector.
    if (run) void endpoint.request(spec.key === 'zero' ? 'openGroups' : 'openStep', { dir: run.dir, step });
  });
  return { spec, plot, box };
}

/** (Re)builds the charts: when the set of runs or the theme changes. Data updates go through update(). */
function rebuild(): void {
  for (const c of charts.values()) c.plot.destroy();
  charts.clear();
  const boxes: HTMLElement[] = [];
  for (const spec of chartSpecs()) {
    const c = makeChart(spec);
    charts.set(spec.key, c);
    boxes.push(c.box);
  }
  replaceChildren(grid, ...boxes);
  update();
}

function update(): void {
  // A kind seen for the first time (the first evaluation, an overlaid run) adds a series: the charts are rebuilt.
  const now = questionKinds(runs.flatMap((r) => rows.get(r.dir) ?? []));
  if (now.join('\n') !== kinds.join('\n')) {
    kinds = now;
    rebuild(); // calls update() again, with the kinds now charted
    return;
  }
  let points = 0;
  alarmsByStep = alarmSteps(runs.flatMap((r) => auditRows.get(r.dir) ?? []));
  stagesByStep = stageMarks(runs);
  for (const c of charts.values()) {
    const data = columns(c.spec);
    const steps = (data[0] as number[]).length;
    const counts = data.slice(1).map((col) => (col as (number | null)[]).filter((v) => v !== null).length);
    sparse.set(c.spec.key, sparseSeries(counts, steps));
    c.plot.setData(data);
    const n = counts.reduce((a, b) => a + b, 0);
    points += n;
    c.box.hidden = n === 0;
  }
  empty.hidden = points > 0;
  empty.textContent = emptyText(runs);
  // For tests and diagnostics (the e2e suite reads these).
  document.body.dataset.points = String(points);
  document.body.dataset.runs = String(runs.length);
  document.body.dataset.steps = String(Math.max(0, ...[...rows.values()].flatMap((list) => list.map((r) => r.step))));
  document.body.dataset.theme = theme;
  document.body.dataset.alarmSteps = [...alarmsByStep.keys()].join(',');
  document.body.dataset.stageSteps = [...stagesByStep.keys()].join(',');
  document.body.dataset.markers = [...charts.values()].flatMap((c) => [...(sparse.get(c.spec.key) ?? [])].map((i) => `${c.spec.key}: ${c.plot.series[i]?.label ?? i}`)).join(' | ');
}

function renderRuns(): void {
  replaceChildren(
    runsBar,
    ...runs.map((r, i) => {
      // The run's line style (RUN_DASH): solid, dashed, dotted, dash-dot.
      const swatch = h('span', { class: `swatch dash-${i % RUN_DASH.length}` });
      return h(
        'span',
        { class: `run ${r.state}`, 'data-run': r.id, 'data-state': r.state, title: r.dir },
        runs.length > 1 ? swatch : null,
        h('strong', {}, r.id),
        h('span', { class: 'run-status', 'data-testid': 'run-status' }, ` ${runStatus(r)}`),
        runs.length > 1 ? h('a', { href: '#', class: 'remove', title: 'Remove from the overlay', onclick: (e: Event) => (e.preventDefault(), void endpoint.request('removeRun', { dir: r.dir })) }, '×') : null,
      );
    }),
    h('vscode-button', { secondary: true, 'data-testid': 'add-run', onclick: () => void endpoint.request('addRun', undefined) }, 'Overlay Run…'),
  );
}

function setRuns(next: DashboardRun[]): void {
  const changed = next.map((r) => r.dir).join('\n') !== runs.map((r) => r.dir).join('\n');
  runs = next;
  for (const dir of [...rows.keys()]) if (!runs.some((r) => r.dir === dir)) rows.delete(dir);
  renderRuns();
  if (changed) rebuild();
}

endpoint.on('runs', ({ runs: next }) => {
  setRuns(next);
  update();
});
endpoint.on('audit', ({ dir, rows: list }) => {
  auditRows.set(dir, list);
  update();
});
endpoint.on('metrics', ({ dir, rows: added, reset }) => {
  const list = reset ? [] : (rows.get(dir) ?? []);
  list.push(...added);
  rows.set(dir, list);
  update();
});
endpoint.handle('describe', () => ({
  charts: [...charts.values()].map((c) => ({
    key: c.spec.key,
    title: c.spec.title,
    series: c.plot.series.length - 1,
    points: c.plot.data.slice(1).reduce((n, col) => n + (col as (number | null)[]).filter((v) => v !== null).length, 0),
    colors: c.plot.series.slice(1).map((x) => String(x.stroke)),
    markers: [...(sparse.get(c.spec.key) ?? [])].map((i) => String(c.plot.series[i]?.label ?? i)),
  })),
  runs: runs.map((r) => r.id),
  theme,
}));

function themeNow(): string {
  return ['vscode-high-contrast-light', 'vscode-high-contrast', 'vscode-dark', 'vscode-light'].find((c) => document.body.classList.contains(c)) ?? 'unknown';
}

new MutationObserver(() => {
  const t = themeNow();
  if (t === theme) return;
  theme = t;
  renderRuns();
  rebuild();
}).observe(document.body, { attributes: true, attributeFilter: ['class'] });

new ResizeObserver(() => {
  const w = Math.max(280, Math.floor(grid.clientWidth / 2) - 24);
  for (const c of charts.values()) c.plot.setSize({ width: w, height: 200 });
}).observe(grid);

replaceChildren(root, h('header', {}, h('h1', {}, 'Training dashboard'), runsBar), empty, grid);
theme = themeNow();
void endpoint.request('getState', undefined).then((state) => {
  for (const m of state.metrics) rows.set(m.dir, [...m.rows]);
  for (const m of state.audit) auditRows.set(m.dir, [...m.rows]);
  runs = [];
  setRuns(state.runs);
  update();
});
