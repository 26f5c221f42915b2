/**
 * The Reward Lab: what a reward module gives on a set of rollouts, next to what was recorded. Histogram of
 * rewards (recorded vs new), per data source, the fraction of GRPO groups whose rewards are all equal (no
 * learning signal) recorded / before the edit / now, the rollouts whose reward changed (click: open the line),
 * and errors with their stacks (click a frame: open it). While a run scores: its progress, its timeouts and errors
 * as they happen, a Cancel button, and the last run's numbers dimmed. Everything is rendered as text through the DOM.
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import {
  failedSoFar,
  type RewardLabContract,
  type RewardLabState,
  type RewardReport,
} from '../../src/core/protocol/rewardLab';
import { connect, vscodeApi } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';

const endpoint = connect<RewardLabContract>('reward-lab');
const root = document.getElementById('root')!;
const num = (x: number | null | undefined, d = 3) => (x === null || x === undefined ? '–' : x.toFixed(d));
const pct = (x: number | null | undefined) => (x === null || x === undefined ? '–' : `${(100 * x).toFixed(1)}%`);

function card(label: string, value: string, testid: string, detail?: string): HTMLElement {
  return h(
    'div',
    { class: 'card' },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value', 'data-testid': testid }, value),
    detail ? h('div', { class: 'detail' }, detail) : null,
  );
}

function histogram(r: RewardReport): HTMLElement {
  const { edges, recorded, scored } = r.histogram;
  const max = Math.max(1, ...recorded, ...scored);
  const bins = recorded.map((rec, i) => {
    const bar = (n: number, cls: string) => {
      const el = h('div', { class: `bar ${cls}`, title: `${n} rollouts` });
      el.style.height = `${(100 * n) / max}%`; // CSSOM, allowed by the CSP (no inline style attributes)
      return el;
    };
    return h(
      'div',
      { class: 'bin', title: `[${num(edges[i], 2)}, ${num(edges[i + 1], 2)}): recorded ${rec}, new ${scored[i]}` },
      bar(rec, 'recorded'),
      bar(scored[i] ?? 0, 'scored'),
    );
  });
  return h(
    'section',
    {},
    h('h2', {}, 'Rewards'),
    h(
      'div',
      { class: 'legend' },
      h('span', { class: 'swatch recorded' }),
      ' recorded  ',
      h('span', { class: 'swatch scored' }),
      ' this module',
    ),
    h('div', { class: 'histogram', 'data-testid': 'histogram' }, ...bins),
    h('div', { class: 'axis' }, h('span', {}, num(edges[0], 2)), h('span', {}, num(edges[edges.length - 1], 2))),
  );
}

function sources(r: RewardReport): HTMLElement {
  return h(
    'section',
    {},
    h('h2', {}, 'By data source'),
    h(
      'table',
      { 'data-testid': 'by-source' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'data source'),
          h('th', {}, 'rollouts'),
          h('th', {}, 'recorded mean'),
          h('th', {}, 'new mean'),
        ),
      ),
      h(
        'tbody',
        {},
        ...r.bySource.map((s) =>
          h(
            'tr',
            {},
            h('td', {}, s.data_source),
            h('td', { class: 'num' }, String(s.count)),
            h('td', { class: 'num' }, num(s.recordedMean)),
            h('td', { class: 'num' }, num(s.mean)),
          ),
        ),
      ),
    ),
  );
}

function location(where: string, text = where): HTMLElement {
  return h(
    'a',
    {
      href: '#',
      class: 'location',
      onclick: (e: Event) => {
        e.preventDefault();
        void endpoint.request('openLocation', { where });
      },
    },
    text,
  );
}

function changed(r: RewardReport): HTMLElement {
  return h(
    'section',
    {},
    h('h2', {}, `Changed rewards (${r.changedCount.toLocaleString()})`),
    r.changed.length
      ? h(
          'table',
          { 'data-testid': 'changed' },
          h(
            'thead',
            {},
            h('tr', {}, h('th', {}, 'rollout'), h('th', {}, 'recorded'), h('th', {}, 'new'), h('th', {}, 'where')),
          ),
          h(
            'tbody',
            {},
            ...r.changed
              .slice(0, 100)
              .map((c) =>
                h(
                  'tr',
                  {},
                  h('td', {}, c.id),
                  h('td', { class: 'num' }, num(c.recorded)),
                  h('td', { class: 'num' }, num(c.reward)),
                  h('td', {}, location(c.where)),
                ),
              ),
          ),
        )
      : h('p', { class: 'muted' }, 'No reward changed.'),
  );
}

function failures(r: RewardReport): HTMLElement | null {
  if (!r.failures.length) return null;
  return h(
    'section',
    { class: 'failures' },
    h('h2', {}, `Errors (${r.errors.toLocaleString()})`),
    ...r.failures
      .slice(0, 50)
      .map((f) =>
        h(
          'details',
          { 'data-testid': 'failure' },
          h(
            'summary',
            {},
            f.error.file
              ? location(`${f.error.file}:${f.error.line}:${f.error.column ?? 1}`, `line ${f.error.line}`)
              : '',
            ` ${f.error.message} — rollout ${f.id} `,
            location(f.where),
          ),
          h('pre', {}, f.error.stack || f.message),
        ),
      ),
  );
}

function render(s: RewardLabState): void {
  vscodeApi().setState({ run: s.run });
  document.body.dataset.status = s.status;
  document.body.dataset.run = String(s.run);
  const running = s.status === 'running';
  const pinned = s.pinned
    ? ` · the same ${s.pinned.count.toLocaleString()} rollouts each time (as read at ${new Date(s.pinned.at).toLocaleTimeString()}; Choose rollouts… to take newer ones)`
    : '';
  const head = h(
    'header',
    {},
    h('h1', {}, s.moduleName),
    h(
      'div',
      { class: 'target', 'data-testid': 'target' },
      s.rollouts ? `against ${s.rollouts}${pinned}` : 'no rollouts chosen yet',
    ),
    h(
      'div',
      { class: 'actions' },
      h(
        'vscode-button',
        {
          'data-testid': 'score',
          onclick: () => void endpoint.request('rescore'),
          disabled: s.status === 'untrusted' || running || undefined,
        },
        running ? 'Scoring…' : 'Score',
      ),
      running
        ? h(
            'vscode-button',
            { 'data-testid': 'cancel', secondary: true, onclick: () => void endpoint.request('cancel') },
            'Cancel',
          )
        : null,
      h(
        'vscode-button',
        { secondary: true, onclick: () => void endpoint.request('chooseRollouts') },
        'Choose rollouts…',
      ),
    ),
  );
  const status: (HTMLElement | null)[] = [];
  if (s.status === 'untrusted')
    status.push(
      h(
        'p',
        { class: 'warning', 'data-testid': 'status' },
        'Restricted Mode: reward modules do not run in an untrusted workspace.',
      ),
    );
  if (s.status === 'running') {
    const p = s.progress;
    const fill = h('div', { class: 'fill' });
    fill.style.width = p?.total ? `${Math.min(100, (100 * p.done) / p.total)}%` : '100%';
    if (!p?.total) fill.classList.add('indeterminate');
    const failed = failedSoFar(p?.errors);
    status.push(
      h(
        'p',
        { 'data-testid': 'status' },
        `Scoring… ${p ? p.done.toLocaleString() : 0}${p?.total ? ` / ${p.total.toLocaleString()}` : ''}`,
        h(
          'span',
          {
            class: failed ? 'live-failures error' : 'live-failures',
            'data-testid': 'live-failures',
            'data-timeouts': String(p?.errors?.timeout ?? 0),
          },
          failed ? ` · ${failed}` : '',
        ),
      ),
      h('div', { class: 'progress' }, fill),
    );
  }
  if (s.status === 'cancelled') {
    const p = s.progress;
    const failed = failedSoFar(p?.errors);
    status.push(
      h(
        'p',
        { class: 'warning', 'data-testid': 'status' },
        `Cancelled after ${(p?.done ?? 0).toLocaleString()}${p?.total ? ` of ${p.total.toLocaleString()}` : ''} rollouts${failed ? ` (${failed})` : ''}.${s.report ? ' The numbers below are from the last finished run.' : ''}`,
      ),
    );
  }
  if (s.compileError)
    status.push(
      h(
        'div',
        { class: 'error', 'data-testid': 'compile-error' },
        'The module does not compile: ',
        location(
          `${s.compileError.file}:${s.compileError.line}:${s.compileError.column}`,
          `line ${s.compileError.line}`,
        ),
        ` ${s.compileError.message}`,
      ),
    );
  if (s.message) status.push(h('pre', { class: 'error' }, s.message));
  const r = s.report;
  const body: (HTMLElement | null)[] = [];
  if (r) {
    const prev = s.previous;
    const stale = running || s.status === 'cancelled';
    body.push(
      h(
        'div',
        { class: 'cards' },
        card(
          'mean reward',
          num(r.mean),
          'mean',
          `recorded ${num(r.recordedMean)}${prev ? ` · before the edit ${num(prev.mean)}` : ''}`,
        ),
        card(
          'same as recorded',
          pct(r.agreement),
          'agreement',
          `${r.scored.toLocaleString()} of ${r.count.toLocaleString()} rollouts scored`,
        ),
        card(
          'zero-variance GRPO groups',
          pct(r.frac_zero_std_groups),
          'zero-variance',
          `recorded ${pct(r.frac_zero_std_groups_recorded)}${prev ? ` · before the edit ${pct(prev.frac_zero_std_groups)}` : ''} · ${r.groups} groups (all rewards equal: no learning signal)`,
        ),
        card('errors', r.errors.toLocaleString(), 'errors', failedSoFar(r.errorsByKind) || undefined),
      ),
      histogram(r),
      sources(r),
      changed(r),
      failures(r),
    );
    const report = h(
      'div',
      { class: stale ? 'report stale' : 'report', 'data-testid': 'report', 'data-stale': String(stale) },
      ...body.splice(0),
    );
    if (running)
      body.push(
        h(
          'p',
          { class: 'muted', 'data-testid': 'stale-note' },
          'Dimmed: the last run’s numbers, replaced when this one finishes.',
        ),
      );
    body.push(report);
  } else if (s.status === 'idle') {
    body.push(
      h(
        'p',
        { class: 'muted' },
        'Choose rollouts and score: the numbers appear here, and update each time you save the module.',
      ),
    );
  }
  replaceChildren(root, head, ...status, ...body);
}

endpoint.on('state', render);
endpoint
  .request('getState')
  .then(render, (e: Error) => replaceChildren(root, h('p', { class: 'error' }, `Could not load: ${e.message}`)));
