/**
 * The replay panel: one rollout as a timeline of turns (prompt → think → search → information with its documents
 * → … → answer) and as token chips coloured by role, with the loss mask shown (masked tokens hatched) and leaks
 * (mask disagreeing with role) outlined; overlays colour the chips by a recorded number (log-prob, reference
 * log-prob, KL, advantage, value, entropy) with a legend. Stepping: ←/→ token, ↑/↓ (or [ ]) turn entry, Space
 * play/pause, n / Shift+N next/previous leak, d next drift, Home/End; a scrubber over the tokens. The log-prob
 * microscope, the importance-sampling preview and the drift marker live in microscope.ts. The position shows in the
 * timeline, the chips, and a text view of the whole trajectory. Two rollouts (compare) show side by side — their
 * headers, timelines and tokens — stepped by entry together. Positions that were not scored show as "not recorded".
 * The page opens at its top (the question, golden answer and reward); following the position scrolls only the
 * panes that hold it. All rollout text is inserted as text nodes.
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import type {
  Overlay,
  ReplayContract,
  ReplayEntry,
  ReplayModel,
  ReplayPosition,
  ReplayState,
} from '../../src/core/protocol/replay';
import { connect } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';
import { forkPane } from './fork';
import { colourValues, legendValue, MICROSCOPE_LABELS, Microscope } from './microscope';
import { BUCKETS, bucketOf, Strips, stripScale } from './strips';

const endpoint = connect<ReplayContract>('replay');
const root = document.getElementById('root')!;
/** The instruments: Δ / ratio colourings, the IS preview, next drift, the engine's mask (microscope.ts). */
const microscope = new Microscope(
  endpoint,
  () => {
    renderTokens();
    renderPosition();
  },
  (t) => go(t, true),
);

const OVERLAY_LABELS: Record<Overlay | 'none', string> = {
  none: 'role and mask',
  rollout_logprob: 'log-prob at sampling',
  logprob: 'log-prob (trainer)',
  ref_logprob: 'reference log-prob',
  kl: 'KL (log π − log π_ref)',
  advantage: 'advantage',
  value: 'value',
  entropy: 'entropy',
  ...MICROSCOPE_LABELS,
};
const DIVERGING = new Set<Overlay>(['kl', 'advantage', 'delta', 'ratio']);
/** Chips rendered at most (a longer rollout shows a window around the position). */
const MAX_CHIPS = 4000;

let state: ReplayState | null = null;
let pos: ReplayPosition = { token: 0, entry: 0, overlay: 'none', speed: 8 };
let playing: ReturnType<typeof setInterval> | undefined;
let chipWindow = { from: 0, to: 0 };
/** The timeline entry the compared column marks (its chips are redrawn when the entry changes). */
let markedEntry = -1;

const visible = (s: string) => s.replace(/ /g, '·').replace(/\t/g, '→').replace(/\n/g, '↵\n');
const fmt = (v: number | null | undefined, d = 3) =>
  v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(d);

function model(): ReplayModel | undefined {
  return state?.models[0];
}

function entryOf(m: ReplayModel, token: number): number {
  const k = m.entries.findIndex((e) => token >= e.tokenStart && token < e.tokenEnd);
  return k < 0 ? Math.max(0, m.entries.length - 1) : k;
}

// --- the page --------------------------------------------------------------------------------------------------
const header = h('div', { class: 'header', 'data-testid': 'header' });
const controls = h('div', { class: 'controls' });
const columns = h('div', { class: 'columns' });
const tokenPane = h('div', { class: 'tokens', 'data-testid': 'tokens', tabindex: '0', 'aria-label': 'Tokens' });
const legend = h('div', { class: 'legend', 'data-testid': 'legend' });
const hover = h('div', { class: 'hovercard', role: 'tooltip', hidden: true, 'data-testid': 'hovercard' });
const textView = h('pre', { class: 'textview', 'data-testid': 'textview' });
const fork = forkPane(endpoint);
const forkHere = h(
  'vscode-button',
  {
    secondary: true,
    'data-testid': 'fork-here',
    title: 'Fork the rollout at the turn of the current entry (docs/fork.md)',
    onclick: () => fork.at((model()?.entries[pos.entry]?.turn ?? 0) + 1),
  },
  'Fork here',
);
/** Every recorded per-token array as a heat strip under the chips (strips.ts). */
const strips = new Strips((t) => go(t));
replaceChildren(
  root,
  header,
  controls,
  columns,
  legend,
  microscope.driftPane,
  tokenPane,
  strips.element,
  fork.element,
  h('h3', {}, 'Trajectory text'),
  textView,
  hover,
);

const scrubber = h('input', {
  type: 'range',
  min: '0',
  max: '0',
  value: '0',
  class: 'scrubber',
  'aria-label': 'Token position',
  'data-testid': 'scrubber',
});
scrubber.addEventListener('input', () => go(Number(scrubber.value)));
const overlaySelect = h('select', { class: 'overlay', 'aria-label': 'Overlay', 'data-testid': 'overlay' });
overlaySelect.addEventListener('change', () => {
  pos.overlay = overlaySelect.value as Overlay | 'none';
  renderTokens();
  renderPosition();
  save();
});
const speedSelect = h(
  'select',
  { class: 'speed', 'aria-label': 'Speed (tokens per second)' },
  ...[2, 4, 8, 16, 32, 64].map((s) => h('option', { value: s }, `${s} tok/s`)),
);
speedSelect.addEventListener('change', () => {
  pos.speed = Number(speedSelect.value);
  if (playing) {
    pause();
    play();
  }
  save();
});
const playButton = h(
  'vscode-button',
  { 'data-testid': 'play', title: 'Play / pause (Space)', onclick: () => (playing ? pause() : play()) },
  'Play',
);
const leakButton = h(
  'vscode-button',
  { secondary: true, 'data-testid': 'next-leak', title: 'Next mask leak (n)', onclick: () => leak(1) },
  'Next leak',
);
const tokenizerButton = h(
  'vscode-button',
  {
    secondary: true,
    'data-testid': 'tokenizer',
    title: "Split a token-less rollout with a model's tokenizer.json",
    onclick: () => void endpoint.request('chooseTokenizer', undefined),
  },
  'Tokenize with…',
);
const positionLabel = h('span', { class: 'position', 'data-testid': 'position' });

replaceChildren(
  controls,
  h(
    'vscode-button',
    { secondary: true, title: 'Previous entry (↑ or [)', 'data-testid': 'prev-entry', onclick: () => stepEntry(-1) },
    '◀◀',
  ),
  h(
    'vscode-button',
    { secondary: true, title: 'Previous token (←)', 'data-testid': 'prev-token', onclick: () => go(pos.token - 1) },
    '◀',
  ),
  playButton,
  h(
    'vscode-button',
    { secondary: true, title: 'Next token (→)', 'data-testid': 'next-token', onclick: () => go(pos.token + 1) },
    '▶',
  ),
  h(
    'vscode-button',
    { secondary: true, title: 'Next entry (↓ or ])', 'data-testid': 'next-entry', onclick: () => stepEntry(1) },
    '▶▶',
  ),
  speedSelect,
  scrubber,
  positionLabel,
  h('label', {}, 'Overlay ', overlaySelect),
  leakButton,
  microscope.driftButton,
  microscope.controls,
  tokenizerButton,
  forkHere,
);

function renderHeader(): void {
  if (!state) return;
  if (state.error && !state.models.length) {
    replaceChildren(
      header,
      h('h2', { class: 'error' }, `Cannot replay ${state.error.file}${state.error.line ? `:${state.error.line}` : ''}`),
      h('ul', { class: 'errors', 'data-testid': 'row-errors' }, ...state.error.messages.map((m) => h('li', {}, m))),
      state.error.raw ? h('pre', { class: 'raw' }, state.error.raw) : null,
    );
    return;
  }
  const badge = (cls: string, text: string, title?: string) => h('span', { class: `badge ${cls}`, title }, text);
  const block = (m: ReplayModel, col: number) =>
    h(
      'div',
      { class: 'model-header', 'data-testid': `header-${col}` },
      h(
        'div',
        { class: 'title' },
        h('h2', {}, m.id),
        badge(
          `level ${m.level}`,
          m.level === 'token'
            ? 'tokens recorded'
            : m.level === 'tokenizer'
              ? `tokenised with ${m.tokenizer}`
              : 'segment level (no tokens recorded)',
        ),
        m.audit
          ? badge(
              m.audit.leaks.length ? 'leaks bad' : 'leaks good',
              m.audit.leaks.length
                ? `${m.audit.leaks.length} mask leak${m.audit.leaks.length === 1 ? '' : 's'}`
                : 'mask audit: no leaks',
              leakTitle(m),
            )
          : null,
        m.microscope
          ? badge(
              m.microscope.drift ? 'drift bad' : 'drift',
              m.microscope.drift ? `drift at token ${m.microscope.drift.token}` : m.microscope.driftNote,
              m.microscope.driftNote,
            )
          : null,
      ),
      h(
        'dl',
        { class: 'facts' },
        ...fact('where', `${m.file}:${m.line} (row ${m.index})`),
        ...fact('step / group / sample', `${m.step ?? '–'} / ${m.group ?? '–'} / ${m.sample ?? '–'}`),
        ...fact('question', m.question ?? '–'),
        ...fact('golden', m.golden?.join(' | ') ?? '–'),
        ...fact('answer', m.answer ?? '∅ (no answer)'),
        ...fact(
          'reward',
          `${fmt(m.reward)}${
            m.rewardParts && Object.keys(m.rewardParts).length
              ? ` (${Object.entries(m.rewardParts)
                  .map(([k, v]) => `${k} ${fmt(v)}`)
                  .join(', ')})`
              : ''
          }`,
        ),
        ...fact(
          'finish',
          `${m.finish ?? '–'} · ${m.searches ?? m.entries.filter((e) => e.kind === 'search').length} searches`,
        ),
      ),
      m.warnings.length || m.alignment
        ? h(
            'ul',
            { class: 'warnings', 'data-testid': 'warnings' },
            ...m.warnings.map((w) => h('li', {}, w)),
            m.alignment
              ? h(
                  'li',
                  {},
                  `the tokens' text differs from the recorded text from character ${m.alignment.mismatchAt}: token spans are matched by position`,
                )
              : null,
          )
        : null,
    );
  replaceChildren(
    header,
    h('div', { class: `model-headers${state.models.length > 1 ? ' compare' : ''}` }, ...state.models.map(block)),
  );
  const m = model()!;
  leakButton.hidden = !m.audit?.leaks.length;
  tokenizerButton.hidden = m.level === 'token';
}

function leakTitle(m: ReplayModel): string {
  const k = m.audit!.byKind;
  return `retrieved trained on: ${k['trained-on-retrieved']}, prompt trained on: ${k['trained-on-prompt']}, feedback trained on: ${k['trained-on-feedback']}, generated but masked: ${k['generated-masked']}`;
}

function fact(name: string, value: string): HTMLElement[] {
  return [h('dt', {}, name), h('dd', {}, value)];
}

function renderTimeline(): void {
  if (!state) return;
  replaceChildren(
    columns,
    ...state.models.map((m, col) =>
      h(
        'div',
        { class: 'timeline', 'data-testid': `timeline-${col}` },
        state!.models.length > 1
          ? h(
              'div',
              { class: 'col-head' },
              h('strong', {}, `sample ${m.sample ?? '?'}`),
              ` reward ${fmt(m.reward)} · answer ${m.answer ?? '∅'}`,
            )
          : null,
        ...m.entries.map((e, k) => entryCard(m, e, k, col)),
      ),
    ),
  );
  columns.classList.toggle('compare', state.models.length > 1);
}

function entryCard(m: ReplayModel, e: ReplayEntry, k: number, col: number): HTMLElement {
  const label = e.kind === 'prompt' ? 'prompt' : `${e.kind} · turn ${e.turn + 1}`;
  let content: (HTMLElement | string)[];
  if (e.kind === 'search') {
    // A tool call: the tool's name, then its query or why the call is invalid.
    content = [
      e.error !== undefined ? h('div', { class: 'call-error' }, e.error) : h('div', { class: 'query' }, e.query ?? ''),
    ];
    if (e.tool !== undefined) content.unshift(h('div', { class: 'tool' }, `tool call · ${e.tool}`));
  } else if (e.kind === 'information' && e.docs?.length)
    content = e.docs.map((d) =>
      h(
        'div',
        { class: 'doc' },
        h(
          'div',
          { class: 'doc-title' },
          `Doc ${d.index}${d.title ? ` · ${d.title}` : ''}`,
          d.score !== undefined
            ? h('span', { class: 'score', title: 'retrieval score' }, ` score ${fmt(d.score)}`)
            : null,
        ),
        h('div', { class: 'doc-text' }, d.text),
      ),
    );
  else content = [h('div', { class: 'entry-text' }, e.text.length > 4000 ? `${e.text.slice(0, 4000)}…` : e.text)];
  return h(
    'div',
    {
      class: `entry kind-${e.kind}`,
      'data-entry': k,
      'data-col': col,
      onclick: () => (col === 0 ? go(e.tokenStart) : setEntry(k)),
    },
    h(
      'div',
      { class: 'entry-label' },
      label,
      h(
        'span',
        { class: 'entry-tokens' },
        ` ${e.tokenEnd - e.tokenStart} ${m.level === 'segment' ? 'segment' : 'tokens'}`,
      ),
    ),
    ...content,
  );
}

function values(m: ReplayModel, o: Overlay | 'none'): (number | null)[] | undefined {
  return colourValues(m, o);
}

/** The chips of one model: a window around `around` when it is long; the entry `entry` marked in a compared column. */
function chipsOf(
  m: ReplayModel,
  col: number,
  o: Overlay | 'none',
  around: number,
  entry: number | undefined,
): { chips: HTMLElement[]; window: { from: number; to: number } } {
  const n = m.tokens.text.length;
  const vals = values(m, o);
  const diverging = o !== 'none' && DIVERGING.has(o);
  const sc = vals ? stripScale(vals, diverging) : undefined;
  const leaks = new Set(m.audit?.leaks ?? []);
  const from = n <= MAX_CHIPS ? 0 : Math.max(0, Math.min(n - MAX_CHIPS, around - MAX_CHIPS / 2));
  const to = Math.min(n, from + MAX_CHIPS);
  const e = entry === undefined ? undefined : m.entries[entry];
  const chips: HTMLElement[] = [];
  for (let i = from; i < to; i++) {
    const role = m.tokens.role[i]!;
    const mask = m.tokens.mask?.[i];
    const v = vals?.[i];
    let cls = `chip role-${role}`;
    if (mask === 0) cls += ' masked';
    if (leaks.has(i)) cls += ' leak';
    if (vals && sc)
      cls += v === null || v === undefined ? ' ov-none' : ` ov ov-${diverging ? 'd' : 's'}${bucketOf(v, sc)}`;
    if (col === 0 && i === pos.token) cls += ' current';
    if (e && i >= e.tokenStart && i < e.tokenEnd) cls += ' in-entry';
    cls += microscope.chipClasses(col, i, o);
    const text = m.tokens.text[i]!;
    chips.push(
      h(
        'span',
        { class: cls, 'data-i': i, 'data-col': col },
        text === '\n' ? '↵' : text.includes('\n') ? text.replace(/\n/g, '↵') : text,
      ),
    );
  }
  return { chips, window: { from, to } };
}

function renderTokens(): void {
  const m = model();
  if (!m || !state) {
    replaceChildren(tokenPane);
    replaceChildren(legend);
    return;
  }
  const o = pos.overlay;
  const compare = state.models.length > 1;
  const cols = state.models.map((mm, col) => {
    // The compared rollout: around and marking the same timeline entry as the first.
    const entry = col === 0 ? undefined : Math.min(pos.entry, mm.entries.length - 1);
    const at = col === 0 ? pos.token : (mm.entries[entry ?? 0]?.tokenStart ?? 0);
    const r = chipsOf(mm, col, o, at, compare ? entry : undefined);
    if (col === 0) chipWindow = r.window;
    const n = mm.tokens.text.length;
    return h(
      'div',
      { class: 'token-col', 'data-testid': `tokens-${col}` },
      compare
        ? h('div', { class: 'col-head' }, h('strong', {}, `sample ${mm.sample ?? '?'}`), ` reward ${fmt(mm.reward)}`)
        : null,
      n > MAX_CHIPS
        ? h('div', { class: 'window-note' }, `tokens ${r.window.from}–${r.window.to - 1} of ${n} around the position`)
        : null,
      ...r.chips,
    );
  });
  replaceChildren(tokenPane, ...cols);
  tokenPane.classList.toggle('compare', compare);
  strips.render(m, chipWindow, pos.token);
  // Legend: roles and mask, or the overlay's scale.
  const vals = values(m, o);
  const diverging = o !== 'none' && DIVERGING.has(o);
  const sc = vals ? stripScale(vals, diverging) : undefined;
  if (vals && sc) {
    replaceChildren(
      legend,
      h('span', { class: 'legend-title' }, `${OVERLAY_LABELS[o]}:`),
      h('span', { class: 'legend-value' }, fmt(legendValue(o, sc.lo))),
      ...Array.from({ length: BUCKETS }, (_, b) =>
        h('span', {
          class: `swatch ov ov-${diverging ? 'd' : 's'}${b}`,
          title: fmt(legendValue(o, sc.lo + ((b + 0.5) * (sc.hi - sc.lo)) / BUCKETS)),
        }),
      ),
      h('span', { class: 'legend-value' }, fmt(legendValue(o, sc.hi))),
      h('span', { class: 'swatch ov-none' }),
      h('span', {}, 'not recorded (not scored: prompt, retrieved or masked tokens)'),
      ...microscope.legendItems(o),
    );
  } else {
    replaceChildren(
      legend,
      ...(['generated', 'prompt', 'retrieved', 'feedback'] as const).map((r) =>
        h('span', { class: 'legend-item' }, h('span', { class: `chip role-${r}` }, r)),
      ),
      m.tokens.mask
        ? h(
            'span',
            { class: 'legend-item' },
            h('span', { class: 'chip role-retrieved masked' }, 'masked'),
            ' not in the loss',
          )
        : h('span', { class: 'legend-item' }, 'loss mask not recorded'),
      m.audit
        ? h(
            'span',
            { class: 'legend-item' },
            h('span', { class: 'chip role-retrieved leak' }, 'leak'),
            ' mask disagrees with role',
          )
        : null,
      ...microscope.legendItems(o),
    );
  }
}

/** Scrolls `container` (and only it, never the page) so that `el` is in view. */
function scrollWithin(container: HTMLElement, el: HTMLElement | null | undefined): void {
  if (!el) return;
  const c = container.getBoundingClientRect();
  const r = el.getBoundingClientRect();
  if (r.top < c.top) container.scrollTop -= c.top - r.top;
  else if (r.bottom > c.bottom) container.scrollTop += Math.min(r.bottom - c.bottom, r.top - c.top);
}

/** Renders the position; `reveal` (a jump: Next leak, Next drift) also scrolls the page so its chip is in view. */
function renderPosition(reveal = false): void {
  const m = model();
  if (!m) return;
  const n = m.tokens.text.length;
  pos.token = Math.max(0, Math.min(n - 1, pos.token));
  pos.entry = entryOf(m, pos.token);
  const compare = (state?.models.length ?? 0) > 1;
  if (pos.token < chipWindow.from || pos.token >= chipWindow.to || (compare && pos.entry !== markedEntry))
    renderTokens();
  markedEntry = pos.entry;
  for (const el of tokenPane.querySelectorAll('.chip.current')) el.classList.remove('current');
  const chip = tokenPane.querySelector<HTMLElement>(`.chip[data-col="0"][data-i="${pos.token}"]`);
  chip?.classList.add('current');
  strips.mark(pos.token);
  scrollWithin(tokenPane.querySelector<HTMLElement>('[data-testid="tokens-0"]') ?? tokenPane, chip);
  // A jump lands where the user can see it: the token pane may be below the fold of the panel (issue 44). Only then
  // does the page scroll (a chip already on screen leaves the page where it is).
  if (reveal && chip) {
    const r = chip.getBoundingClientRect();
    if (r.top < 0 || r.bottom > window.innerHeight) chip.scrollIntoView({ block: 'center', inline: 'nearest' });
  }
  if (compare)
    scrollWithin(
      tokenPane.querySelector<HTMLElement>('[data-testid="tokens-1"]') ?? tokenPane,
      tokenPane.querySelector<HTMLElement>('[data-col="1"].in-entry'),
    );
  for (const el of columns.querySelectorAll('.entry.current')) el.classList.remove('current');
  for (const el of columns.querySelectorAll<HTMLElement>(`.entry[data-entry="${pos.entry}"]`)) {
    el.classList.add('current');
    scrollWithin(columns, el);
  }
  scrubber.max = String(Math.max(0, n - 1));
  scrubber.value = String(pos.token);
  const e = m.entries[pos.entry];
  const role = m.tokens.role[pos.token];
  positionLabel.textContent = `token ${pos.token + 1}/${n} · ${e ? (e.kind === 'prompt' ? 'prompt' : `${e.kind}, turn ${e.turn + 1}`) : ''} · ${role ?? ''}`;
  // The text view: the whole trajectory, the current token marked.
  const full = m.prompt + m.response;
  const span = tokenSpan(m, pos.token);
  replaceChildren(
    textView,
    full.slice(0, span[0]),
    h('mark', { class: 'current-text' }, full.slice(span[0], span[1]) || ' '),
    full.slice(span[1]),
  );
  scrollWithin(textView, textView.querySelector('mark'));
  const d = document.body.dataset;
  d.token = String(pos.token);
  d.entry = String(pos.entry);
  d.entryKind = e?.kind ?? '';
  d.tokenText = m.tokens.text[pos.token] ?? '';
  d.tokenRole = role ?? '';
  d.level = m.level;
  d.leaks = String(m.audit?.leaks.length ?? 0);
  d.overlay = pos.overlay;
}

/** Character span of a token in prompt + response (token level: from the model's offsets; otherwise its entry's span). */
function tokenSpan(m: ReplayModel, t: number): [number, number] {
  const c = m.tokens.start?.[t];
  if (c === undefined) {
    const e = m.entries[entryOf(m, t)];
    return e ? [e.start, e.end] : [0, 0];
  }
  return [c, c + (m.tokens.text[t]?.length ?? 0)];
}

function go(token: number, reveal = false): void {
  const m = model();
  if (!m) return;
  pos.token = Math.max(0, Math.min(m.tokens.text.length - 1, token));
  renderPosition(reveal);
  save();
}

function setEntry(k: number): void {
  const m = model();
  if (!m) return;
  const e = m.entries[Math.max(0, Math.min(m.entries.length - 1, k))];
  if (e) go(e.tokenStart);
}

function stepEntry(d: 1 | -1): void {
  const m = model();
  if (!m) return;
  const e = m.entries[pos.entry];
  // Back from inside an entry goes to its start first.
  if (d === -1 && e && pos.token > e.tokenStart) go(e.tokenStart);
  else setEntry(pos.entry + d);
}

function leak(d: 1 | -1): void {
  const leaks = model()?.audit?.leaks ?? [];
  if (!leaks.length) return;
  const next =
    d === 1
      ? (leaks.find((i) => i > pos.token) ?? leaks[0])
      : ([...leaks].reverse().find((i) => i < pos.token) ?? leaks[leaks.length - 1]);
  go(next!, true);
}

function play(): void {
  playButton.textContent = 'Pause';
  document.body.dataset.playing = 'true';
  playing = setInterval(() => {
    const m = model();
    if (!m || pos.token >= m.tokens.text.length - 1) return pause();
    go(pos.token + 1);
  }, 1000 / pos.speed);
}

function pause(): void {
  clearInterval(playing);
  playing = undefined;
  playButton.textContent = 'Play';
  document.body.dataset.playing = 'false';
}

let saveTimer: ReturnType<typeof setTimeout> | undefined;
function save(): void {
  clearTimeout(saveTimer);
  saveTimer = setTimeout(() => void endpoint.request('position', { ...pos }), 150);
}

document.addEventListener('keydown', (e) => {
  if ((e.target as HTMLElement).closest('input[type=text], select')) return;
  const keys: Record<string, () => void> = {
    ArrowRight: () => go(pos.token + 1),
    ArrowLeft: () => go(pos.token - 1),
    ArrowDown: () => stepEntry(1),
    ']': () => stepEntry(1),
    ArrowUp: () => stepEntry(-1),
    '[': () => stepEntry(-1),
    ' ': () => (playing ? pause() : play()),
    n: () => leak(1),
    d: () => microscope.nextDrift(),
    N: () => leak(-1),
    Home: () => go(0),
    End: () => go(Number.MAX_SAFE_INTEGER),
  };
  const f = keys[e.key];
  if (!f) return;
  e.preventDefault();
  f();
});

// Hover card: the token's text with whitespace visible, id, role, mask, numbers.
tokenPane.addEventListener('mouseover', (ev) => {
  const chip = (ev.target as HTMLElement).closest<HTMLElement>('.chip[data-i]');
  const m = state?.models[Number(chip?.dataset.col ?? 0)];
  if (!chip || !m) return;
  const i = Number(chip.dataset.i);
  const rows: [string, string][] = [
    ['token', `${i + 1} of ${m.tokens.text.length}`],
    ['id', m.tokens.ids?.[i] === undefined ? '–' : String(m.tokens.ids[i])],
    ['role', m.tokens.role[i]!],
    ['loss mask', m.tokens.mask ? String(m.tokens.mask[i]) : 'not recorded'],
  ];
  if (m.audit?.leaks.includes(i))
    rows.push([
      'audit',
      m.tokens.role[i] === 'generated'
        ? 'LEAK: generated but masked out of the loss'
        : `LEAK: ${m.tokens.role[i]} token trained on`,
    ]);
  for (const [k, a] of Object.entries(m.tokens.overlays))
    rows.push([OVERLAY_LABELS[k as Overlay], a?.[i] === null || a?.[i] === undefined ? 'not recorded' : fmt(a[i], 4)]);
  rows.push(...microscope.hoverRows(Number(chip.dataset.col ?? 0), i));
  replaceChildren(
    hover,
    h('pre', { class: 'hover-text' }, visible(m.tokens.text[i]!)),
    h('dl', {}, ...rows.flatMap(([k, v]) => fact(k, v))),
  );
  hover.hidden = false;
  const r = chip.getBoundingClientRect();
  hover.style.left = `${Math.min(window.innerWidth - 320, Math.max(4, r.left))}px`;
  hover.style.top = `${r.bottom + 4 + window.scrollY}px`;
});
tokenPane.addEventListener('mouseleave', () => (hover.hidden = true));
tokenPane.addEventListener('click', (ev) => {
  const chip = (ev.target as HTMLElement).closest<HTMLElement>('.chip[data-i]');
  if (!chip) return;
  const col = Number(chip.dataset.col ?? 0);
  if (col === 0) go(Number(chip.dataset.i));
  else {
    // A compared rollout's token: step both to its timeline entry.
    const mm = state?.models[col];
    if (mm) setEntry(entryOf(mm, Number(chip.dataset.i)));
  }
});

function show(s: ReplayState | null): void {
  pause();
  state = s;
  if (!s) {
    replaceChildren(header, h('p', {}, 'Open a rollout from the inspector (double-click a row) or the Runs view.'));
    return;
  }
  pos = { ...s.position };
  const m = model();
  microscope.show(s.models, s.importance);
  const available = (
    [
      'none',
      'delta',
      'ratio',
      'rollout_logprob',
      'logprob',
      'ref_logprob',
      'kl',
      'advantage',
      'value',
      'entropy',
    ] as const
  ).filter((o) => o === 'none' || m?.tokens.overlays[o]);
  if (!available.includes(pos.overlay as never)) pos.overlay = 'none';
  replaceChildren(
    overlaySelect,
    ...available.map((o) => h('option', { value: o, selected: o === pos.overlay }, OVERLAY_LABELS[o])),
  );
  speedSelect.value = String(pos.speed);
  controls.hidden = !m;
  tokenPane.hidden = !m;
  textView.hidden = !m;
  document.body.dataset.columns = String(s.models.length);
  markedEntry = -1;
  renderHeader();
  renderTimeline();
  renderTokens();
  renderPosition();
  fork.show(s.models.length === 1 ? m : undefined);
  // Open at the top: the question, golden answer and reward first (following the position scrolls only its panes).
  window.scrollTo(0, 0);
}

endpoint.on('state', show);
endpoint.handle('describe', () => ({
  entry: pos.entry,
  token: pos.token,
  tokenText: model()?.tokens.text[pos.token] ?? null,
  entryKind: model()?.entries[pos.entry]?.kind ?? null,
  leaks: model()?.audit?.leaks.length ?? 0,
  overlay: pos.overlay,
  level: model()?.level ?? '',
  columns: state?.models.length ?? 0,
  ...microscope.describe(),
  strips: strips.describe(),
}));
void endpoint.request('getState', undefined).then(show);
