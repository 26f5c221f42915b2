/**
 * The rollout inspector's table: virtualised rows (only those on screen are in the DOM), fetched from the host by
 * page for the current view and cached (a bounded number of pages), so a file of any size costs the webview the
 * same. The filter and search are applied by the host's worker (latest query wins); errors are shown under the
 * filter with the offending span marked. Every value is inserted as text. Columns are sized to their header and
 * the first rows' content (long texts capped), widen when a row drawn later needs more (a filter that shows other
 * rows: issue 44), and are resizable by dragging a header's right edge (double-click: fit).
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import type {
  InspectorColumn,
  InspectorContract,
  InspectorQuery,
  InspectorStatus,
  RowFacts,
} from '../../src/core/protocol/rollouts';
import { connect, vscodeApi } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';

const ROW_H = 24;
const PAGE = 100;
const MAX_PAGES = 40;

const COLUMNS: { key: InspectorColumn; label: string; title: string; cls?: string }[] = [
  { key: 'index', label: '#', title: 'row', cls: 'num' },
  { key: 'split', label: 'split', title: 'train, or val (held-out evaluation)' },
  { key: 'step', label: 'step', title: 'training step', cls: 'num' },
  { key: 'group', label: 'group', title: 'GRPO group' },
  { key: 'sample', label: 'sample', title: 'sample in the group', cls: 'num' },
  { key: 'reward', label: 'reward', title: 'recorded reward', cls: 'num' },
  { key: 'em', label: 'EM', title: 'exact match', cls: 'num' },
  { key: 'searches', label: 'searches', title: 'searches made', cls: 'num' },
  { key: 'turns', label: 'turns', title: 'turns', cls: 'num' },
  { key: 'finish', label: 'finish', title: 'why it ended' },
  {
    key: 'length',
    label: 'length',
    title: 'response length: generated tokens when recorded, else characters',
    cls: 'num',
  },
  { key: 'data_source', label: 'source', title: 'data source' },
  { key: 'answer', label: 'answer', title: 'final answer', cls: 'text' },
  { key: 'golden', label: 'golden', title: 'golden answers', cls: 'text' },
  { key: 'leaks', label: 'leaks', title: 'tokens whose loss mask disagrees with their role (mask audit)', cls: 'num' },
  {
    key: 'drift',
    label: 'drift',
    title:
      're-tokenisation drift: the first token where the recorded ids and the re-encoded text differ (✓: none; empty: not checked, no tokenizer)',
    cls: 'num',
  },
  {
    key: 'logprob',
    label: 'max |Δ|',
    title: 'max |logprob − rollout_logprob| over trained tokens (×n: trained tokens with a ratio outside [0.5, 2])',
    cls: 'num',
  },
  {
    key: 'alarms',
    label: 'alarms',
    title: 'reward-hacking alarms (filter: alarm == "answer-enumeration")',
    cls: 'text',
  },
  {
    key: 'invalid',
    label: 'invalid',
    title: 'invalid actions (tool calls: bad JSON, unknown tool, no query)',
    cls: 'num',
  },
  {
    key: 'dialect',
    label: 'dialect',
    title: 'searchr1: Search-R1 tags · toolcall: chat-template tool calls · llama-json: Llama JSON tool calls',
  },
];

const endpoint = connect<InspectorContract>('rollouts');
const root = document.getElementById('root')!;

let query: InspectorQuery = { filter: '', search: '' };
let seq = 0;
let status: InspectorStatus | undefined;
let preview: RowFacts[] | undefined;
/** Pages of the current view by page number (insertion order = age). */
let pages = new Map<number, RowFacts[]>();
const inflight = new Set<number>();
let pagesSeq = -1;
let selected: number[] = [];
let cursor: number | null = null; // position in the view of the keyboard cursor
let autoFitted = false;

const filterInput = h('input', {
  type: 'text',
  class: 'filter',
  placeholder: 'filter, e.g. reward == 0 && answer ~ golden · searches > 3 · group.zero_variance · mask.leaks > 0',
  spellcheck: 'false',
  'aria-label': 'Filter expression',
  'data-testid': 'filter',
});
const searchInput = h('input', {
  type: 'search',
  class: 'search',
  placeholder: 'search responses',
  spellcheck: 'false',
  'aria-label': 'Search text',
  'data-testid': 'search',
});
const filterError = h('div', { class: 'filter-error', 'data-testid': 'filter-error', role: 'alert', hidden: true });
const statusLine = h('div', { class: 'status', 'data-testid': 'status' });
const compareButton = h(
  'vscode-button',
  {
    secondary: true,
    disabled: true,
    'data-testid': 'compare',
    title: 'Select two rows of the same group (Ctrl+click)',
    onclick: () => compare(),
  },
  'Compare',
);
const openButton = h(
  'vscode-button',
  { disabled: true, 'data-testid': 'open', onclick: () => openSelected() },
  'Replay',
);
const head = h('div', { class: 'row head', role: 'row' });
const spacer = h('div', { class: 'spacer' });
const body = h('div', { class: 'rows', role: 'rowgroup' });
const scroller = h(
  'div',
  { class: 'scroller', tabindex: '0', role: 'grid', 'aria-label': 'Rollouts', 'data-testid': 'grid' },
  head,
  h('div', { class: 'canvas' }, spacer, body),
);

replaceChildren(
  root,
  h('div', { class: 'toolbar' }, filterInput, searchInput, openButton, compareButton),
  filterError,
  statusLine,
  scroller,
);

// --- column widths: fitted to the header and the first rows, capped for long texts, resizable ---------------------
const MIN_W = 36;
const MAX_W = { text: 360, other: 220 };
const PAD = 14; // the cell's horizontal padding plus a little air
type Widths = Partial<Record<InspectorColumn, number>>;
const saved = (vscodeApi().getState() as { widths?: Widths } | undefined)?.widths ?? {};
/** Widths the user set by dragging (kept; never re-fitted), and the fitted ones. */
const userWidths: Widths = { ...saved };
let fitted: Widths = {};
let measure: CanvasRenderingContext2D | null = null;

let font: string | undefined;
function textWidth(text: string, bold = false): number {
  measure ??= document.createElement('canvas').getContext('2d');
  if (!measure) return text.length * 7;
  if (!font) {
    const st = getComputedStyle(document.body);
    font = `${st.fontSize} ${st.fontFamily}`;
  }
  const f = `${bold ? '600 ' : ''}${font}`;
  if (measure.font !== f) measure.font = f;
  return measure.measureText(text).width;
}

/** Widens the fitted columns that the given (drawn) rows need wider, up to the caps; never narrows one. */
function growColumns(rows: readonly RowFacts[]): void {
  let grew = false;
  for (const c of COLUMNS) {
    if (userWidths[c.key] !== undefined) continue;
    const cap = c.cls === 'text' ? MAX_W.text : MAX_W.other;
    let w = fitted[c.key] ?? MIN_W;
    if (w >= cap) continue;
    for (const r of rows) {
      if (r.error) continue;
      const need = Math.round(Math.min(cap, textWidth(cellText(r, c.key)) + PAD));
      if (need > w) {
        w = need;
        grew = true;
      }
    }
    fitted[c.key] = w;
  }
  if (grew) applyWidths();
}

/** Fits each column to its header (with room for the sort arrow) and to the given rows' cells. */
function fitColumns(rows: readonly RowFacts[]): void {
  fitted = {};
  for (const c of COLUMNS) {
    let w = textWidth(`${c.label} ▼`, true);
    for (const r of rows.slice(0, 200)) if (!r.error) w = Math.max(w, textWidth(cellText(r, c.key)));
    fitted[c.key] = Math.round(Math.min(c.cls === 'text' ? MAX_W.text : MAX_W.other, Math.max(MIN_W, w + PAD)));
  }
  applyWidths();
}

function widthOf(c: InspectorColumn): number {
  return userWidths[c] ?? fitted[c] ?? 80;
}

function applyWidths(): void {
  const ws = COLUMNS.map((c) => widthOf(c.key));
  scroller.style.setProperty('--cols', ws.map((w) => `${w}px`).join(' '));
  scroller.style.setProperty('--row-width', `${ws.reduce((a, b) => a + b, 0)}px`);
  document.body.dataset.columnWidths = JSON.stringify(Object.fromEntries(COLUMNS.map((c) => [c.key, widthOf(c.key)])));
}

/** Drag a header's right edge to resize its column; double-click it to fit the column again. */
function resizer(c: InspectorColumn): HTMLElement {
  const handle = h('div', { class: 'resizer', title: 'drag to resize, double-click to fit', 'data-resize': c });
  handle.addEventListener('click', (e) => e.stopPropagation());
  handle.addEventListener('dblclick', (e) => {
    e.stopPropagation();
    delete userWidths[c];
    vscodeApi().setState({ widths: userWidths });
    applyWidths();
  });
  handle.addEventListener('pointerdown', (e) => {
    e.preventDefault();
    e.stopPropagation();
    const start = e.clientX;
    const from = widthOf(c);
    handle.setPointerCapture(e.pointerId);
    const move = (m: PointerEvent) => {
      userWidths[c] = Math.max(MIN_W, Math.round(from + m.clientX - start));
      applyWidths();
    };
    const up = () => {
      handle.removeEventListener('pointermove', move);
      handle.removeEventListener('pointerup', up);
      vscodeApi().setState({ widths: userWidths });
    };
    handle.addEventListener('pointermove', move);
    handle.addEventListener('pointerup', up);
  });
  return handle;
}

function renderHead(): void {
  replaceChildren(
    head,
    ...COLUMNS.map((c) => {
      const sorted = query.sort?.column === c.key;
      return h(
        'div',
        {
          class: `cell ${c.cls ?? ''} ${c.key}`,
          role: 'columnheader',
          title: `${c.title} — click to sort`,
          'aria-sort': sorted ? (query.sort!.desc ? 'descending' : 'ascending') : 'none',
          'data-column': c.key,
          onclick: () => sortBy(c.key),
        },
        h('span', { class: 'label' }, c.label, sorted ? (query.sort!.desc ? ' ▼' : ' ▲') : ''),
        resizer(c.key),
      );
    }),
  );
}

function sortBy(column: InspectorColumn): void {
  const cur = query.sort;
  query = { ...query, sort: cur?.column === column ? (cur.desc ? undefined : { column, desc: true }) : { column } };
  renderHead();
  send();
}

let timer: ReturnType<typeof setTimeout> | undefined;
function send(delay = 0): void {
  clearTimeout(timer);
  timer = setTimeout(() => {
    seq++;
    document.body.dataset.seq = String(seq);
    void endpoint.request('query', { ...query, seq });
  }, delay);
}
filterInput.addEventListener('input', () => {
  query = { ...query, filter: filterInput.value };
  send(200);
});
filterInput.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') send();
});
searchInput.addEventListener('input', () => {
  query = { ...query, search: searchInput.value };
  send(300);
});

const fmt = (v: number | undefined, digits = 3) =>
  v === undefined ? '' : Number.isInteger(v) ? String(v) : v.toFixed(digits);

function cellText(r: RowFacts, c: InspectorColumn): string {
  switch (c) {
    case 'answer':
      return r.answer === null ? '∅' : (r.answer ?? '');
    case 'golden':
      return r.golden?.join(' | ') ?? '';
    case 'length':
      return r.length === undefined ? '' : `${r.length}${r.lengthUnit === 'chars' ? ' ch' : ''}`;
    case 'leaks':
      return r.leaks === undefined ? '' : String(r.leaks);
    case 'drift':
      return r.drift === undefined ? '' : r.drift === null ? '✓' : `@${r.drift}`;
    case 'logprob':
      return r.logprob === undefined ? '' : `${r.logprob.toFixed(3)}${r.ratioFlags ? ` ×${r.ratioFlags}` : ''}`;
    case 'alarms':
      return r.alarms?.join(', ') ?? '';
    default:
      return typeof r[c] === 'number' ? fmt(r[c] as number) : String(r[c] ?? '');
  }
}

function viewCount(): number {
  return status ? status.view : (preview?.length ?? 0);
}

function rowAt(k: number): RowFacts | undefined {
  if (!status || status.total === 0) return preview?.[k];
  const p = pages.get(Math.floor(k / PAGE));
  return p?.[k % PAGE];
}

async function fetchPage(p: number): Promise<void> {
  if (inflight.has(p) || !status) return;
  inflight.add(p);
  const want = status.seq;
  try {
    const res = await endpoint.request('page', { from: p * PAGE, count: PAGE, seq: want });
    if (res.seq !== pagesSeq) {
      // The view changed under us: start a fresh cache for the new one.
      pages = new Map();
      pagesSeq = res.seq;
    }
    pages.set(p, res.rows);
    while (pages.size > MAX_PAGES) pages.delete(pages.keys().next().value!);
  } finally {
    inflight.delete(p);
  }
  render();
}

function render(): void {
  const n = viewCount();
  spacer.style.height = `${n * ROW_H}px`;
  const top = scroller.scrollTop;
  const first = Math.max(0, Math.floor(top / ROW_H) - 5);
  const last = Math.min(n, Math.ceil((top + scroller.clientHeight) / ROW_H) + 5);
  body.style.transform = `translateY(${first * ROW_H}px)`;
  const els: HTMLElement[] = [];
  const missing = new Set<number>();
  for (let k = first; k < last; k++) {
    const r = rowAt(k);
    if (!r) {
      missing.add(Math.floor(k / PAGE));
      els.push(h('div', { class: 'row loading', role: 'row' }, h('div', { class: 'cell' }, '…')));
      continue;
    }
    const isSel = selected.includes(r.index);
    const attrs = {
      class: `row${r.error ? ' malformed' : ''}${isSel ? ' selected' : ''}${cursor === k ? ' cursor' : ''}${r.leaks ? ' leaky' : ''}${typeof r.drift === 'number' ? ' drifted' : ''}${r.ratioFlags ? ' ratio-flagged' : ''}${r.alarms?.length ? ' alarmed' : ''}`,
      role: 'row',
      'aria-selected': isSel ? 'true' : 'false',
      'data-index': r.index,
      'data-pos': k,
      onclick: (e: Event) =>
        select(k, r, (e as MouseEvent).ctrlKey || (e as MouseEvent).metaKey || (e as MouseEvent).shiftKey),
      ondblclick: () => void endpoint.request('openRow', { index: r.index }),
    };
    if (r.error) {
      // The error names file:line; the file's base name is enough here (the full path is in the tooltip).
      const prefix = `${r.file}:${r.line}: `;
      const message = r.error.startsWith(prefix) ? r.error.slice(prefix.length) : r.error;
      const where = `${r.file.split(/[\\/]/).pop()}:${r.line}`;
      els.push(
        h(
          'div',
          attrs,
          h('div', { class: 'cell num index' }, String(r.index)),
          h(
            'div',
            { class: 'cell error-text', title: r.error },
            `${where}: ${message}${r.errorCount && r.errorCount > 1 ? ` (+${r.errorCount - 1} more)` : ''}`,
          ),
        ),
      );
      continue;
    }
    els.push(
      h(
        'div',
        attrs,
        ...COLUMNS.map((c) =>
          h(
            'div',
            { class: `cell ${c.cls ?? ''} ${c.key}`, title: c.cls === 'text' ? cellText(r, c.key) : undefined },
            cellText(r, c.key),
          ),
        ),
      ),
    );
  }
  replaceChildren(body, ...els);
  if (!autoFitted) {
    const known = [...(preview ?? []), ...[...pages.values()].flat()];
    if (known.length) {
      autoFitted = true;
      fitColumns(known);
    }
  } else {
    const drawn: RowFacts[] = [];
    for (let k = first; k < last; k++) {
      const r = rowAt(k);
      if (r) drawn.push(r);
    }
    growColumns(drawn);
  }
  for (const p of missing) void fetchPage(p);
  document.body.dataset.rows = String(n);
  document.body.dataset.firstIndex = String(rowAt(first)?.index ?? '');
  updateButtons();
}

function select(k: number, r: RowFacts, add: boolean): void {
  cursor = k;
  if (add)
    selected = selected.includes(r.index) ? selected.filter((i) => i !== r.index) : [...selected, r.index].slice(-2);
  else selected = [r.index];
  void endpoint.request('remember', { scrollTop: scroller.scrollTop, selected });
  render();
}

function selectedRows(): RowFacts[] {
  const out: RowFacts[] = [];
  for (const p of pages.values()) for (const r of p) if (selected.includes(r.index)) out.push(r);
  return out;
}

function updateButtons(): void {
  const rows = selectedRows();
  openButton.toggleAttribute('disabled', selected.length !== 1);
  const sameGroup =
    rows.length === 2 &&
    rows[0]!.group !== undefined &&
    rows[0]!.group === rows[1]!.group &&
    rows[0]!.step === rows[1]!.step &&
    rows[0]!.split === rows[1]!.split;
  compareButton.toggleAttribute('disabled', !sameGroup);
  compareButton.setAttribute(
    'title',
    sameGroup ? 'Replay the two rows side by side' : 'Select two rows of the same group (Ctrl+click)',
  );
}

function openSelected(): void {
  if (selected.length === 1) void endpoint.request('openRow', { index: selected[0]! });
}

function compare(): void {
  if (selected.length === 2) void endpoint.request('compare', { a: selected[0]!, b: selected[1]! });
}

scroller.addEventListener('scroll', () => {
  render();
  clearTimeout(rememberTimer);
  rememberTimer = setTimeout(() => void endpoint.request('remember', { scrollTop: scroller.scrollTop, selected }), 300);
});
let rememberTimer: ReturnType<typeof setTimeout> | undefined;

scroller.addEventListener('keydown', (e) => {
  const n = viewCount();
  if (!n) return;
  const page = Math.max(1, Math.floor(scroller.clientHeight / ROW_H) - 1);
  let k = cursor ?? -1;
  if (e.key === 'ArrowDown') k = Math.min(n - 1, k + 1);
  else if (e.key === 'ArrowUp') k = Math.max(0, k - 1);
  else if (e.key === 'PageDown') k = Math.min(n - 1, k + page);
  else if (e.key === 'PageUp') k = Math.max(0, k - page);
  else if (e.key === 'Home') k = 0;
  else if (e.key === 'End') k = n - 1;
  else if (e.key === 'Enter') {
    const r = cursor === null ? undefined : rowAt(cursor);
    if (r) void endpoint.request('openRow', { index: r.index });
    e.preventDefault();
    return;
  } else return;
  e.preventDefault();
  cursor = k;
  if (k * ROW_H < scroller.scrollTop + ROW_H) scroller.scrollTop = Math.max(0, k * ROW_H - ROW_H);
  else if ((k + 2) * ROW_H > scroller.scrollTop + scroller.clientHeight)
    scroller.scrollTop = (k + 2) * ROW_H - scroller.clientHeight;
  const r = rowAt(k);
  if (r) selected = [r.index];
  render();
});

function showStatus(s: InspectorStatus): void {
  const prevSeq = status?.seq;
  const prevTotal = status?.total ?? 0;
  const prevView = status?.view ?? 0;
  status = s;
  if (s.seq !== prevSeq || s.view < prevView) {
    pages = new Map();
    pagesSeq = s.seq;
  } else if (s.total !== prevTotal || s.view !== prevView) {
    // Rows appended (a live run) or analysed: the last page may have grown.
    const lastPage = Math.floor(Math.max(0, prevView - 1) / PAGE);
    for (const p of [...pages.keys()]) if (p >= lastPage) pages.delete(p);
  }
  const parts: string[] = [];
  if (s.error) parts.push(s.error);
  else {
    if (s.imported)
      parts.push(`${s.imported.engine} dump: ${s.imported.steps} step${s.imported.steps === 1 ? '' : 's'}`);
    parts.push(`${s.total.toLocaleString()} rows in ${s.files} file${s.files === 1 ? '' : 's'}`);
    if (s.imported?.skipped) parts.push(`${s.imported.skipped} skipped`);
    if (s.imported?.pending)
      parts.push(`${s.imported.pending} file${s.imported.pending === 1 ? '' : 's'} still being written`);
    // A filter on drift when drift is not checked matches nothing for that reason: say so, not "0 match".
    if (s.notChecked) parts.push(s.view ? `${s.view.toLocaleString()} match (${s.notChecked})` : s.notChecked);
    else if (query.filter.trim() || query.search) parts.push(`${s.view.toLocaleString()} match`);
    if (s.indexing)
      parts.push(
        `indexing ${s.indexing.totalBytes ? Math.round((100 * s.indexing.bytes) / s.indexing.totalBytes) : 0}%`,
      );
    else if (s.analysed < s.total)
      parts.push(
        `analysed ${Math.round((100 * s.analysed) / Math.max(1, s.total))}% (filters cover the analysed rows)`,
      );
    if (s.malformed) parts.push(`${s.malformed} malformed`);
    if (s.busy) parts.push('working…');
    if (s.following) parts.push('following');
  }
  statusLine.textContent = parts.join(' · ');
  statusLine.title = [
    s.drift ?? '',
    s.threads
      ? `facts of ${s.threads.rows.toLocaleString()} rows built by ${s.threads.workers} thread${s.threads.workers === 1 ? '' : 's'} beside the inspector's`
      : '',
    ...(s.imported ? [`arrays: ${s.imported.arrays.join(', ')}`, ...s.imported.notes, ...s.imported.issues] : []),
  ]
    .filter(Boolean)
    .join('\n');
  document.body.dataset.imported = s.imported ? `${s.imported.engine}:${s.imported.rollouts}` : '';
  statusLine.classList.toggle('error', !!s.error);
  statusLine.classList.toggle('warning', !!s.notChecked);
  document.body.dataset.notChecked = s.notChecked ?? '';
  document.body.dataset.source = s.source;
  document.body.dataset.total = String(s.total);
  document.body.dataset.view = String(s.view);
  document.body.dataset.appliedSeq = String(s.seq);
  document.body.dataset.busy = String(s.busy);
  document.body.dataset.threadRows = String(s.threads?.rows ?? 0);
  if (s.filterError) {
    const { start, end, message } = s.filterError;
    const src = query.filter;
    replaceChildren(
      filterError,
      h('span', { class: 'message' }, message),
      h(
        'code',
        { class: 'source' },
        src.slice(0, start),
        h('mark', {}, src.slice(start, Math.max(end, start + 1)) || ' '),
        src.slice(Math.max(end, start + 1)),
      ),
    );
    filterError.hidden = false;
    filterInput.classList.add('invalid');
  } else {
    filterError.hidden = true;
    filterInput.classList.remove('invalid');
  }
  document.body.dataset.filterError = s.filterError?.message ?? '';
  render();
}

endpoint.on('status', showStatus);
endpoint.on('preview', ({ rows }) => {
  preview = rows;
  render();
});
endpoint.handle('describe', () => ({
  rows: viewCount(),
  firstIndex: rowAt(Math.floor(scroller.scrollTop / ROW_H))?.index ?? null,
  filterError: status?.filterError?.message ?? null,
  rendered: body.children.length,
}));

new ResizeObserver(() => render()).observe(scroller);
applyWidths();
renderHead();
void endpoint.request('getState', undefined).then((state) => {
  query = state.query;
  seq = state.seq;
  document.body.dataset.seq = String(seq);
  filterInput.value = query.filter;
  searchInput.value = query.search;
  preview = state.preview;
  selected = state.selected ?? [];
  renderHead();
  showStatus(state.status);
  if (state.scrollTop) requestAnimationFrame(() => (scroller.scrollTop = state.scrollTop!));
});
