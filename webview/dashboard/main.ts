/**
 * The training dashboard: live charts of metrics.jsonl (uPlot, canvas) for one run or several overlaid. New lines
 * are appended to the charts' data (setData: a canvas redraw, no DOM rebuilt); the cursor is synchronised across
 * charts and the legend shows the values under it (for a sparse series such as held-out EM, the nearest recorded
 * value and its step); clicking a point opens that step's rollouts. Every series has its own colour, distinct within
 * a chart and per overlaid run (model.ts's paletteColor: the theme's chart colours first, following a theme change);
 * overlaid runs also differ by dash; sparse series and single points are drawn with markers.
 *
 * What TensorBoard and W&B users expect: a smoothing slider (TensorBoard's debiased EMA; the raw values stay drawn
 * faintly), a log scale per chart, a search over chart names, pinning charts to the top, and the x-axis as step or
 * wall time (the trainer's `time` on each metrics line). The audit's alarms get a lane of their own above each
 * chart's plot, one row per run (alarmLane.ts), with a legend entry and a toggle, marking a step only where an alarm's
 * share of the step's rollouts reaches its threshold (`searchAgent.dashboard.alarmThresholds`).
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import uPlot from 'uplot';
import {
  ALARMS,
  AUDIT_METRICS,
  type DashboardContract,
  type DashboardRun,
  type DashboardSettings,
  type DashboardView,
  HOPS_METRICS,
  KIND_METRICS,
  type MetricsRow,
} from '../../src/core/protocol/dashboard';
import { connect, vscodeApi } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';
import { drawMarks, onLaneClick, renderLane } from './alarmLane';
import {
  alarmLane,
  alarmNames,
  chartMatches,
  emptyText,
  fmt,
  fmtDuration,
  type LaneMark,
  nearest,
  paletteColor,
  questionKinds,
  runStatus,
  smoothEma,
  sparseSeries,
  stageMarks,
  stepTimes,
} from './model';

interface ChartSpec {
  key: string;
  title: string;
  metrics: { key: string; label: string }[];
  /** y range from 0 to at least this. */
  min0?: number;
}

/** The charts, in order (metric names as the trainer writes them, veRL's where it has one). */
export const CHARTS: ChartSpec[] = [
  {
    key: 'reward',
    title: 'Reward and exact match',
    min0: 1,
    metrics: [
      { key: 'critic/score/mean', label: 'reward' },
      { key: 'reward/em/mean', label: 'EM (train)' },
      { key: 'val/em', label: 'EM (held-out)' },
    ],
  },
  {
    key: 'searches',
    title: 'Searches per trajectory',
    metrics: [
      { key: 'env/number_of_valid_search', label: 'train' },
      { key: 'val/searches_mean', label: 'held-out' },
    ],
  },
  {
    key: 'hops',
    title: 'Held-out by hops: exact match, searches per question, bridge entity searched, answer retrieved',
    min0: 1,
    metrics: [1, 2].flatMap((n) => [
      { key: HOPS_METRICS.em(n), label: `EM ${n}-hop` },
      { key: HOPS_METRICS.searches(n), label: `searches ${n}-hop` },
      ...(n > 1 ? [{ key: HOPS_METRICS.bridge(n), label: `bridge entity searched ${n}-hop` }] : []),
      { key: HOPS_METRICS.retrieved(n), label: `answer retrieved ${n}-hop` },
    ]),
  },
  { key: 'length', title: 'Response length (tokens)', metrics: [{ key: 'response_length/mean', label: 'mean' }] },
  // Valid actions high with format low: the parser accepts what the format check refuses (an <answer> inside an unclosed <search>: the audit's answer-in-search).
  {
    key: 'valid',
    title: 'Valid-action ratio and format (is_valid_sequence)',
    min0: 1,
    metrics: [
      { key: 'env/ratio_of_valid_action', label: 'valid actions' },
      { key: 'reward/format/mean', label: 'format (train)' },
      { key: 'val/reward/format/mean', label: 'format (held-out)' },
    ],
  },
  {
    key: 'zero',
    title: 'Groups with zero reward variance',
    min0: 1,
    metrics: [{ key: 'reward/frac_zero_std_groups', label: 'fraction' }],
  },
  {
    key: 'kl',
    title: 'KL',
    metrics: [
      { key: 'actor/ppo_kl', label: 'policy vs rollout' },
      { key: 'actor/kl_loss', label: 'vs reference' },
    ],
  },
  { key: 'entropy', title: 'Entropy', metrics: [{ key: 'actor/entropy', label: 'entropy' }] },
  { key: 'clip', title: 'Clip fraction', metrics: [{ key: 'actor/pg_clipfrac', label: 'clipped' }] },
  { key: 'grad', title: 'Gradient norm', metrics: [{ key: 'actor/grad_norm', label: 'grad norm' }] },
  {
    key: 'drift',
    title: 'Re-tokenisation drift (rollouts audited)',
    min0: 1,
    metrics: [{ key: AUDIT_METRICS.drift, label: 'drift rate' }],
  },
  {
    key: 'logprob',
    title: 'Rollout vs trainer log-probs (trained tokens)',
    metrics: [
      { key: AUDIT_METRICS.meanAbsDiff, label: 'mean |Δ|' },
      { key: AUDIT_METRICS.ratioOutside, label: 'ratio outside [0.5, 2]' },
      { key: AUDIT_METRICS.seqRatio, label: 'sequence ratio' },
    ],
  },
  { key: 'alarms', title: 'Audit: alarms (rollouts) and leaks (tokens) per step', metrics: [] },
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
    {
      key: 'kinds-em',
      title: 'Held-out exact match by question kind',
      min0: 1,
      metrics: kinds.map((k) => ({ key: KIND_METRICS.em(k), label: k })),
    },
    {
      key: 'kinds-retrieved',
      title: 'Held-out answer retrieved by question kind (high with low EM: misread)',
      min0: 1,
      metrics: kinds.map((k) => ({ key: KIND_METRICS.retrieved(k), label: k })),
    },
  ];
}

/** The question kinds and the alarm names the charts now have series for (a new one rebuilds the charts). */
let kinds: string[] = [];
let alarms: string[] = [];

/** The charts, in order: CHARTS with the by-kind charts after the by-hops chart, the alarms chart with a series per alarm the audit counted. */
function chartSpecs(): ChartSpec[] {
  const at = CHARTS.findIndex((c) => c.key === 'hops') + 1;
  const alarmChart = (c: ChartSpec): ChartSpec =>
    c.key === 'alarms'
      ? {
          ...c,
          metrics: [
            ...alarms.map((a) => ({ key: AUDIT_METRICS.alarm(a), label: a })),
            { key: AUDIT_METRICS.leaks, label: 'leaked tokens' },
          ],
        }
      : c;
  return [...CHARTS.slice(0, at), ...kindCharts(kinds), ...CHARTS.slice(at)].map(alarmChart);
}

const PALETTE_VARS = [
  '--vscode-charts-blue',
  '--vscode-charts-orange',
  '--vscode-charts-green',
  '--vscode-charts-purple',
  '--vscode-charts-red',
  '--vscode-charts-yellow',
];
const FALLBACK = ['#3794ff', '#d18616', '#89d185', '#b180d7', '#f14c4c', '#cca700'];
/** Overlaid runs: the first solid, the others dashed (and their series further along the palette). */
const RUN_DASH: (number[] | undefined)[] = [undefined, [8, 4], [2, 3], [12, 3, 2, 3]];
const CHART_H = 200;

const endpoint = connect<DashboardContract>('dashboard');
onLaneClick((dir, step) => void endpoint.request('openStep', { dir, step }));
const root = document.getElementById('root')!;
const runsBar = h('div', { class: 'runs', 'data-testid': 'runs' });
const pinnedGrid = h('div', { class: 'grid pinned', 'data-testid': 'pinned' });
const pinnedHead = h('h2', { class: 'section', hidden: true }, 'Pinned');
const grid = h('div', { class: 'grid', 'data-testid': 'charts' });
const empty = h(
  'p',
  { class: 'muted', 'data-testid': 'empty' },
  'No metrics yet: the first line comes after the first evaluation or step.',
);
const noMatch = h('p', { class: 'muted', 'data-testid': 'no-match', hidden: true }, 'No chart matches the search.');

let runs: DashboardRun[] = [];
const rows = new Map<string, MetricsRow[]>();
/** The audit's per-step rows of each run (replaced whole on each message). */
const auditRows = new Map<string, MetricsRow[]>();
const rowsOf = (dir: string): MetricsRow[] => [...(rows.get(dir) ?? []), ...(auditRows.get(dir) ?? [])];
let settings: DashboardSettings = { alarmThresholds: {} };

const DEFAULT_VIEW: DashboardView = { smoothing: 0, xAxis: 'step', alarms: true, log: [], pinned: [], search: '' };
const savedView = (vscodeApi().getState() as { view?: Partial<DashboardView> } | undefined)?.view ?? {};
const view: DashboardView = { ...DEFAULT_VIEW, ...savedView };
function saveView(): void {
  vscodeApi().setState({ view });
}

/** A chart: its spec, plot, box, and what its x positions are (the step and run of each, for clicks and the lane). */
interface Chart {
  spec: ChartSpec;
  plot: uPlot;
  box: HTMLElement;
  lane: HTMLElement;
  note: HTMLElement;
  /** Per run (index in `runs`): its lane marks, each with its x on this chart's axis. */
  lanes: { run: DashboardRun; marks: (LaneMark & { x: number })[] }[];
  /** Per x index: the step of the first run with a row there. */
  xsteps: { run: number; step: number }[];
}
const charts = new Map<string, Chart>();
/** Where a curriculum run's later stages start (train.stages), marked on every chart. */
let stagesByStep = new Map<number, string[]>();
let theme = '';

function css(name: string, fallback: string): string {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

let themeColors: string[] = FALLBACK;

/** A series' colour: metric j of run i, distinct within a chart (one run: its metrics get the palette in order). */
function seriesColor(run: number, metric: number, metrics: number): string {
  return paletteColor(run * metrics + metric, themeColors);
}

/** The x of a run's step on the current axis: the step, or its wall time (seconds since the run's first line). */
function xOf(times: Map<number, number>, step: number): number | undefined {
  return view.xAxis === 'step' ? step : times.get(step);
}

interface Columns {
  data: uPlot.AlignedData;
  xsteps: Chart['xsteps'];
  /** Values ≤ 0 left out of a log-scale chart. */
  nonPositive: number;
  /** Raw (unsmoothed) value counts of the main series, for markers. */
  counts: number[];
  steps: number;
}

/**
 * Aligned columns for one chart: the union of x positions, then per (run, metric) the series drawn (smoothed when
 * smoothing is on), then the same raw (drawn faintly under it when smoothing is on), then per run the alarm lane's
 * legend series (no values: its legend shows the alarms at the cursor).
 */
function columns(spec: ChartSpec, log: boolean): Columns {
  const times = runs.map((r) => stepTimes(rows.get(r.dir) ?? []));
  const all = runs.map((r) => rowsOf(r.dir));
  const at = new Map<number, { run: number; step: number }>();
  runs.forEach((_r, i) => {
    for (const row of all[i]!) {
      if (!spec.metrics.some((m) => typeof row[m.key] === 'number')) continue;
      const x = xOf(times[i]!, row.step);
      if (x !== undefined && !at.has(x)) at.set(x, { run: i, step: row.step });
    }
  });
  const xs = [...at.keys()].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const main: (number | null)[][] = [];
  const raw: (number | null)[][] = [];
  let nonPositive = 0;
  runs.forEach((_r, i) => {
    for (const m of spec.metrics) {
      const col: (number | null)[] = new Array(xs.length).fill(null);
      for (const row of all[i]!) {
        const v = row[m.key];
        const x = xOf(times[i]!, row.step);
        if (typeof v !== 'number' || !Number.isFinite(v) || x === undefined) continue;
        if (log && v <= 0) {
          nonPositive++;
          continue;
        }
        col[index.get(x)!] = v;
      }
      raw.push(col);
      main.push(smoothEma(col, view.smoothing));
    }
  });
  const lanes = runs.map(() => new Array<number | null>(xs.length).fill(null));
  return {
    data: [xs, ...main, ...raw, ...lanes] as uPlot.AlignedData,
    xsteps: xs.map((x) => at.get(x)!),
    nonPositive,
    counts: raw.map((c) => c.filter((v) => v !== null).length),
    steps: xs.length,
  };
}

/** Which series of each chart get markers (sparse, or a single point), by series index; set by update(). */
const sparse = new Map<string, Set<number>>();

/** The x-axis: steps (integer ticks) or wall time since each run's start. */
function xAxisOptions(axis: uPlot.Axis): uPlot.Axis {
  if (view.xAxis === 'time')
    return {
      ...axis,
      label: 'wall time (since the run started)',
      values: (_u, splits) => splits.map(fmtDuration),
      incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400],
    };
  return { ...axis, label: 'step', incrs: [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000] };
}

function makeChart(spec: ChartSpec, pinned: boolean): Chart {
  const fg = css('--vscode-foreground', '#ccc');
  const gridColor = css('--vscode-editorWidget-border', 'rgba(128,128,128,0.25)');
  const alarmColor = css('--vscode-charts-red', '#f14c4c');
  const log = view.log.includes(spec.key);
  const M = spec.metrics.length;
  const main: uPlot.Series[] = [];
  const raw: uPlot.Series[] = [];
  runs.forEach((r, i) => {
    spec.metrics.forEach((m, j) => {
      const color = seriesColor(i, j, M);
      main.push({
        label: runs.length > 1 ? `${r.id} · ${m.label}` : m.label,
        stroke: color,
        width: 1.5,
        dash: RUN_DASH[i % RUN_DASH.length],
        spanGaps: true,
        points: { show: (_u, si) => sparse.get(spec.key)?.has(si) ?? false, size: 6, fill: color, stroke: color },
        // Under the cursor: the value at that step, or — for a sparse series — the nearest recorded one, with its step;
        // smoothed, the raw value beside it.
        value: (u, v, si, idx) => {
          if (idx === null) return '–';
          const rawCol = u.data[si + runs.length * M] as (number | null)[];
          if (v !== null && v !== undefined)
            return view.smoothing > 0 && rawCol[idx] !== null ? `${fmt(v)} (raw ${fmt(rawCol[idx])})` : fmt(v);
          const n = nearest(u.data[si] as (number | null)[], idx);
          return n ? `${fmt(n.value)} (${xLabel(u, n.at)})` : '–';
        },
      });
      // The raw values under a smoothed line (TensorBoard draws them faint); hidden while smoothing is off.
      raw.push({
        label: `${m.label} (raw)`,
        class: 'raw-series',
        stroke: color,
        alpha: 0.25,
        width: 1,
        dash: RUN_DASH[i % RUN_DASH.length],
        spanGaps: true,
        show: view.smoothing > 0,
        points: { show: false },
        value: () => '',
      });
    });
  });
  // The alarm lane's legend entry, one per run: nothing drawn in the plot (the lane is above it); the legend shows the
  // alarms at the cursor's step; clicking it toggles the lane (of every chart).
  const laneSeries: uPlot.Series[] = runs.map((r) => ({
    label: runs.length > 1 ? `${r.id} · alarms` : 'alarms',
    class: 'alarm-series',
    stroke: alarmColor,
    scale: 'lane',
    show: view.alarms,
    paths: () => null,
    points: { show: false },
    value: (_u, _v, si, idx) => laneValue(spec.key, si, idx),
  }));
  const series: uPlot.Series[] = [
    {
      label: view.xAxis === 'step' ? 'step' : 'time',
      value: (_u, v) => (v === null ? '–' : view.xAxis === 'step' ? String(v) : fmtDuration(v)),
    },
    ...main,
    ...raw,
    ...laneSeries,
  ];
  const pin = h(
    'button',
    {
      class: `pin${pinned ? ' on' : ''}`,
      title: pinned ? 'Unpin' : 'Pin to the top',
      'aria-pressed': String(pinned),
      'data-testid': 'pin',
      onclick: () => togglePin(spec.key),
    },
    pinned ? 'Unpin' : 'Pin',
  );
  const logBox = h('input', {
    type: 'checkbox',
    'data-testid': 'log-scale',
    'aria-label': `${spec.title}: log scale`,
    checked: log,
    onchange: () => toggleLog(spec.key),
  });
  const lane = h('div', { class: 'alarm-lane', 'data-testid': 'alarm-lane' });
  const note = h('div', { class: 'chart-note muted', 'data-testid': 'chart-note' });
  const box = h(
    'div',
    { class: `chart${pinned ? ' is-pinned' : ''}`, 'data-chart': spec.key },
    h(
      'div',
      { class: 'chart-head' },
      h('h3', {}, spec.title),
      h(
        'span',
        { class: 'chart-tools' },
        h('label', { title: 'Logarithmic y axis (values ≤ 0 are not drawn)' }, logBox, ' log'),
        pin,
      ),
    ),
    lane,
    note,
  );
  const axis = { stroke: fg, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor, width: 1 } };
  const y: uPlot.Scale = log
    ? { distr: 3, log: 10 }
    : {
        range: (_u, lo, hi) =>
          spec.min0 !== undefined
            ? [Math.min(0, lo), Math.max(hi, 0.1 * spec.min0)]
            : [lo === hi ? lo - 1 : lo, lo === hi ? hi + 1 : hi],
      };
  const cols = columns(spec, log);
  let chart!: Chart;
  const plot = new uPlot(
    {
      width: chartWidth(),
      height: CHART_H,
      series,
      cursor: { sync: { key: 'dashboard' }, drag: { x: true, y: false } },
      legend: { live: true },
      // x padded by half a step (at least) so the first and last points — a step-0 evaluation — are not on the edge.
      scales: {
        x: {
          time: false,
          range: (_u, lo, hi) => {
            const pad = Math.max(view.xAxis === 'step' ? 0.5 : 1, (hi - lo) * 0.02);
            return [lo - pad, hi + pad];
          },
        },
        y,
        lane: { auto: false, range: [0, 1] },
      },
      hooks: {
        draw: [
          (u) => drawMarks(u, stageMarksOnAxis(), 'stage'),
          (u) => chart && renderLane(chart, u, view.alarms, settings.alarmThresholds),
          (u) => describeScales(box, u),
        ],
        setSeries: [(_u, si, opts) => onSeriesToggle(spec.key, si, opts)],
      },
      axes: [xAxisOptions(axis), { ...axis, size: 56 }],
    },
    cols.data,
    box,
  );
  box.append(note);
  plot.over.addEventListener('click', () => {
    const idx = plot.cursor.idx;
    if (idx === null || idx === undefined) return;
    const at = chart.xsteps[idx];
    if (!at) return;
    const run =
      view.xAxis === 'step'
        ? (runs.find((r) => (rows.get(r.dir) ?? []).some((row) => row.step === at.step)) ?? runs[0])
        : runs[at.run];
    // The zero-variance chart opens that step's GRPO groups; the others its rollouts in the inspector.
    if (run) void endpoint.request(spec.key === 'zero' ? 'openGroups' : 'openStep', { dir: run.dir, step: at.step });
  });
  chart = { spec, plot, box, lane, note, lanes: [], xsteps: cols.xsteps };
  return chart;
}

/** The scales as drawn, on the chart's box (uPlot draws its axes on the canvas: tests and diagnostics read these). */
function describeScales(box: HTMLElement, u: uPlot): void {
  const x = u.scales.x!;
  const y = u.scales.y!;
  box.dataset.x = `${view.xAxis} ${fmt(x.min)}…${fmt(x.max)}`;
  box.dataset.y = `${y.distr === 3 ? 'log' : 'linear'} ${y.min ?? '–'}…${y.max ?? '–'}`;
}

/** A point's x for the legend of a sparse series: "step 20", or its wall time. */
function xLabel(u: uPlot, at: number): string {
  const x = (u.data[0] as number[])[at]!;
  return view.xAxis === 'step' ? `step ${x}` : fmtDuration(x);
}

/** The alarm lane's legend value for series `si` at the cursor: the alarms of that run at that x. */
function laneValue(key: string, si: number, idx: number | null): string {
  const c = charts.get(key);
  if (!c || idx === null) return '–';
  const first = c.plot.series.length - runs.length;
  const lane = c.lanes[si - first];
  const x = (c.plot.data[0] as number[])[idx];
  const mark = lane?.marks.find((m) => m.x === x);
  if (!mark) return '–';
  return mark.alarms
    .map((a) => `${a.name} ${a.count}${a.rollouts ? `/${a.rollouts}` : ''}${a.shown ? '' : ' (under threshold)'}`)
    .join(', ');
}

function onSeriesToggle(key: string, si: number | null, opts: uPlot.Series): void {
  const c = charts.get(key);
  if (!c || si === null || syncing) return;
  const first = c.plot.series.length - runs.length;
  if (si < first || opts.show === undefined) return;
  setAlarms(!!opts.show);
}

let syncing = false;
/** Shows or hides the alarm lane of every chart (the toolbar's checkbox, or a click on an "alarms" legend entry). */
function setAlarms(on: boolean): void {
  view.alarms = on;
  alarmToggle.checked = on;
  saveView();
  syncing = true;
  try {
    for (const c of charts.values()) {
      const first = c.plot.series.length - runs.length;
      for (let si = first; si < c.plot.series.length; si++)
        if (c.plot.series[si]!.show !== on) c.plot.setSeries(si, { show: on });
      renderLane(c, c.plot, on, settings.alarmThresholds);
    }
  } finally {
    syncing = false;
  }
  document.body.dataset.alarmLane = String(on);
}

/** Where the curriculum's stages start, on the current x-axis (the first run's wall time of that step). */
function stageMarksOnAxis(): Map<number, string[]> {
  if (view.xAxis === 'step') return stagesByStep;
  const times = runs.map((r) => stepTimes(rows.get(r.dir) ?? []));
  const out = new Map<number, string[]>();
  for (const [step, texts] of stagesByStep) {
    const x = times.map((t) => t.get(step)).find((v) => v !== undefined);
    if (x !== undefined) out.set(x, texts);
  }
  return out;
}

function chartWidth(): number {
  return Math.max(280, Math.floor((grid.clientWidth || pinnedGrid.clientWidth || 900) / 2) - 24);
}

/** (Re)builds the charts: when the set of runs, the theme, the x-axis or a series set changes. Data goes through update(). */
function rebuild(): void {
  for (const c of charts.values()) c.plot.destroy();
  charts.clear();
  themeColors = PALETTE_VARS.map((v, i) => css(v, FALLBACK[i]!));
  for (const spec of chartSpecs()) charts.set(spec.key, makeChart(spec, view.pinned.includes(spec.key)));
  layout();
  update();
}

/** Rebuilds one chart in place (its log scale changed). */
function rebuildChart(key: string): void {
  const old = charts.get(key);
  const spec = chartSpecs().find((s) => s.key === key);
  if (!old || !spec) return;
  old.plot.destroy();
  const c = makeChart(spec, view.pinned.includes(key));
  old.box.replaceWith(c.box);
  charts.set(key, c);
  update();
}

/** Places the charts: the pinned ones first (in the order pinned), then the others in order; the search hides the rest. */
function layout(): void {
  const specs = chartSpecs();
  const pinned = view.pinned.map((k) => charts.get(k)).filter((c): c is Chart => !!c);
  const others = specs.map((s) => charts.get(s.key)!).filter((c) => !view.pinned.includes(c.spec.key));
  replaceChildren(pinnedGrid, ...pinned.map((c) => c.box));
  replaceChildren(grid, ...others.map((c) => c.box));
  pinnedHead.hidden = pinned.length === 0;
  pinnedGrid.hidden = pinned.length === 0;
  for (const c of charts.values()) {
    const on = view.pinned.includes(c.spec.key);
    c.box.classList.toggle('is-pinned', on);
    const pin = c.box.querySelector<HTMLElement>('[data-testid="pin"]')!;
    pin.textContent = on ? 'Unpin' : 'Pin';
    pin.title = on ? 'Unpin' : 'Pin to the top';
    pin.setAttribute('aria-pressed', String(on));
  }
  applyVisibility();
}

function togglePin(key: string): void {
  view.pinned = view.pinned.includes(key) ? view.pinned.filter((k) => k !== key) : [...view.pinned, key];
  saveView();
  layout();
}

function toggleLog(key: string): void {
  view.log = view.log.includes(key) ? view.log.filter((k) => k !== key) : [...view.log, key];
  saveView();
  rebuildChart(key);
}

/** Hides the charts without points and those the search does not match. */
function applyVisibility(): void {
  let shown = 0;
  for (const c of charts.values()) {
    const hasPoints = c.box.dataset.points !== '0';
    const matches = chartMatches(c.spec, view.search);
    c.box.hidden = !hasPoints || !matches;
    if (!c.box.hidden) shown++;
  }
  const anyPoints = [...charts.values()].some((c) => c.box.dataset.points !== '0');
  noMatch.hidden = !(anyPoints && shown === 0 && view.search.trim() !== '');
}

function update(): void {
  // A kind or an alarm seen for the first time (the first evaluation, an overlaid run) adds a series: rebuild.
  const nowKinds = questionKinds(runs.flatMap((r) => rows.get(r.dir) ?? []));
  const nowAlarms = alarmNames(
    runs.flatMap((r) => auditRows.get(r.dir) ?? []),
    ALARMS,
  );
  if (nowKinds.join('\n') !== kinds.join('\n') || nowAlarms.join('\n') !== alarms.join('\n')) {
    kinds = nowKinds;
    alarms = nowAlarms;
    rebuild(); // calls update() again, with the kinds and alarms now charted
    return;
  }
  let points = 0;
  stagesByStep = stageMarks(runs);
  const times = runs.map((r) => stepTimes(rows.get(r.dir) ?? []));
  const lanes = runs.map((r) => alarmLane(auditRows.get(r.dir) ?? [], settings.alarmThresholds));
  for (const c of charts.values()) {
    const log = view.log.includes(c.spec.key);
    const cols = columns(c.spec, log);
    sparse.set(c.spec.key, sparseSeries(cols.counts, cols.steps));
    c.xsteps = cols.xsteps;
    c.lanes = runs.map((run, i) => ({
      run,
      marks: lanes[i]!.flatMap((m) => {
        const x = xOf(times[i]!, m.step);
        return x === undefined ? [] : [{ ...m, x }];
      }),
    }));
    for (let si = 1 + runs.length * c.spec.metrics.length; si <= 2 * runs.length * c.spec.metrics.length; si++)
      if (c.plot.series[si]!.show !== view.smoothing > 0) c.plot.setSeries(si, { show: view.smoothing > 0 });
    c.plot.setData(cols.data);
    const n = cols.counts.reduce((a, b) => a + b, 0);
    points += n;
    c.box.dataset.points = String(n);
    c.box.classList.toggle('no-alarms', !lanes.some((l) => l.length));
    c.note.textContent =
      log && cols.nonPositive
        ? `log scale: ${cols.nonPositive} value${cols.nonPositive === 1 ? '' : 's'} ≤ 0 not drawn`
        : view.xAxis === 'time' &&
            n === 0 &&
            c.spec.metrics.some((m) => runs.some((r) => rowsOf(r.dir).some((row) => typeof row[m.key] === 'number')))
          ? 'no wall time recorded for these steps'
          : '';
  }
  applyVisibility();
  empty.hidden = points > 0;
  empty.textContent = emptyText(runs);
  // For tests and diagnostics (the e2e suite reads these).
  const d = document.body.dataset;
  d.points = String(points);
  d.runs = String(runs.length);
  d.steps = String(Math.max(0, ...[...rows.values()].flatMap((list) => list.map((r) => r.step))));
  d.theme = theme;
  d.alarmSteps = [...new Set(lanes.flatMap((l) => l.filter((m) => m.alarms.some((a) => a.shown)).map((m) => m.step)))]
    .sort((a, b) => a - b)
    .join(',');
  d.stageSteps = [...stagesByStep.keys()].join(',');
  d.markers = [...charts.values()]
    .flatMap((c) => [...(sparse.get(c.spec.key) ?? [])].map((i) => `${c.spec.key}: ${c.plot.series[i]?.label ?? i}`))
    .join(' | ');
  d.smoothing = String(view.smoothing);
  d.xAxis = view.xAxis;
  d.alarmLane = String(view.alarms);
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
        runs.length > 1
          ? h(
              'a',
              {
                href: '#',
                class: 'remove',
                title: 'Remove from the overlay',
                onclick: (e: Event) => {
                  e.preventDefault();
                  void endpoint.request('removeRun', { dir: r.dir });
                },
              },
              '×',
            )
          : null,
      );
    }),
    h(
      'vscode-button',
      { secondary: true, 'data-testid': 'add-run', onclick: () => void endpoint.request('addRun', undefined) },
      'Overlay Run…',
    ),
  );
}

function setRuns(next: DashboardRun[]): void {
  const changed = next.map((r) => r.dir).join('\n') !== runs.map((r) => r.dir).join('\n');
  runs = next;
  for (const dir of [...rows.keys()]) if (!runs.some((r) => r.dir === dir)) rows.delete(dir);
  renderRuns();
  if (changed) rebuild();
}

// --- the toolbar: search, smoothing, x-axis, alarm lane ------------------------------------------------------------
const searchBox = h('input', {
  type: 'search',
  class: 'chart-search',
  placeholder: 'Search charts (title or metric)',
  'aria-label': 'Search charts',
  'data-testid': 'chart-search',
  value: view.search,
});
searchBox.addEventListener('input', () => {
  view.search = searchBox.value;
  saveView();
  applyVisibility();
});
const smoothing = h('input', {
  type: 'range',
  min: '0',
  max: '0.99',
  step: '0.01',
  value: String(view.smoothing),
  'aria-label': 'Smoothing',
  'data-testid': 'smoothing',
});
const smoothingValue = h('span', { class: 'value', 'data-testid': 'smoothing-value' }, view.smoothing.toFixed(2));
smoothing.addEventListener('input', () => {
  view.smoothing = Number(smoothing.value);
  smoothingValue.textContent = view.smoothing.toFixed(2);
  saveView();
  update();
});
const xAxis = h(
  'select',
  { 'aria-label': 'x-axis', 'data-testid': 'x-axis' },
  h('option', { value: 'step', selected: view.xAxis === 'step' }, 'step'),
  h('option', { value: 'time', selected: view.xAxis === 'time' }, 'wall time'),
);
xAxis.addEventListener('change', () => {
  view.xAxis = xAxis.value === 'time' ? 'time' : 'step';
  saveView();
  rebuild();
});
const alarmToggle = h('input', {
  type: 'checkbox',
  checked: view.alarms,
  'data-testid': 'alarm-toggle',
  'aria-label': 'Alarm lane',
});
alarmToggle.addEventListener('change', () => setAlarms(alarmToggle.checked));
const toolbar = h(
  'div',
  { class: 'toolbar', 'data-testid': 'toolbar' },
  searchBox,
  h(
    'label',
    { title: "TensorBoard's smoothing: an exponential moving average, debiased (the raw values stay drawn faintly)" },
    'Smoothing ',
    smoothing,
    smoothingValue,
  ),
  h('label', {}, 'x-axis ', xAxis),
  h(
    'label',
    {
      title:
        'A lane above each chart marks the steps where an alarm reached its threshold (searchAgent.dashboard.alarmThresholds: a share of the step’s rollouts)',
    },
    alarmToggle,
    ' alarm lane',
  ),
);

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
endpoint.on('settings', (next) => {
  settings = next;
  update();
});
endpoint.handle('describe', () => ({
  charts: [...charts.values()].map((c) => {
    const M = c.spec.metrics.length * runs.length;
    return {
      key: c.spec.key,
      title: c.spec.title,
      series: M,
      points: c.plot.data
        .slice(1, 1 + M)
        .reduce((n, col) => n + (col as (number | null)[]).filter((v) => v !== null).length, 0),
      colors: c.plot.series.slice(1, 1 + M).map((x) => String(x.stroke)),
      markers: [...(sparse.get(c.spec.key) ?? [])].map((i) => String(c.plot.series[i]?.label ?? i)),
      log: view.log.includes(c.spec.key),
      pinned: view.pinned.includes(c.spec.key),
      hidden: c.box.hidden,
      lane: c.lanes.map((l) => ({
        run: l.run.id,
        steps: l.marks.filter((m) => m.alarms.some((a) => a.shown)).map((m) => m.step),
      })),
    };
  }),
  runs: runs.map((r) => r.id),
  theme,
  view,
}));

function themeNow(): string {
  return (
    ['vscode-high-contrast-light', 'vscode-high-contrast', 'vscode-dark', 'vscode-light'].find((c) =>
      document.body.classList.contains(c),
    ) ?? 'unknown'
  );
}

new MutationObserver(() => {
  const t = themeNow();
  if (t === theme) return;
  theme = t;
  renderRuns();
  rebuild();
}).observe(document.body, { attributes: true, attributeFilter: ['class'] });

new ResizeObserver(() => {
  const w = chartWidth();
  for (const c of charts.values()) c.plot.setSize({ width: w, height: CHART_H });
}).observe(grid);

replaceChildren(
  root,
  h('header', {}, h('h1', {}, 'Training dashboard'), runsBar),
  toolbar,
  empty,
  noMatch,
  pinnedHead,
  pinnedGrid,
  grid,
);
theme = themeNow();
void endpoint.request('getState', undefined).then((state) => {
  for (const m of state.metrics) rows.set(m.dir, [...m.rows]);
  for (const m of state.audit) auditRows.set(m.dir, [...m.rows]);
  settings = state.settings;
  runs = [];
  setRuns(state.runs);
  update();
});
