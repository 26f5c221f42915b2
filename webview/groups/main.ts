/**
 * The GRPO group view: one step's groups, each as a table of its samples side by side — reward, advantage, answer,
 * exact match, searches, finish, and where each sample's stream first leaves the first sample's — with the reason a
 * zero-variance group gives no signal (all truncated, all invalid format, all correct, all wrong, equal rewards).
 * Zero-variance groups come first; a checkbox shows only them. Clicking a sample replays it. All rollout text is
 * inserted as text nodes.
 */
import type { GroupsContract, GroupsState, GroupView, ZeroVarianceReason } from '../../src/core/protocol/groups';
import { connect } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';

const endpoint = connect<GroupsContract>('groups');
const root = document.getElementById('root')!;

const REASONS: Record<ZeroVarianceReason, string> = {
  'all-truncated': 'all truncated (every sample hit the length limit)',
  'all-invalid-format': 'all invalid format (no sample follows the format)',
  'all-correct': 'all correct (nothing to learn: the question is too easy)',
  'all-wrong': 'all wrong (no sample found the answer: too hard, or the retriever misses it)',
  'equal-rewards': 'equal rewards (mixed outcomes, the same reward)',
};

let state: GroupsState | null = null;
const onlyZero = h('input', {
  type: 'checkbox',
  'data-testid': 'only-zero',
  'aria-label': 'Only zero-variance groups',
}) as HTMLInputElement;
onlyZero.addEventListener('change', render);
const header = h('div', { class: 'header', 'data-testid': 'header' });
const list = h('div', { class: 'groups', 'data-testid': 'groups' });
replaceChildren(root, header, list);

const fmt = (v: number | null | undefined) =>
  v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(3);

function groupCard(g: GroupView): HTMLElement {
  const cols = [
    'sample',
    'reward',
    'advantage',
    'answer',
    'EM',
    'format',
    'searches',
    'finish',
    `diverges at (${g.unit})`,
  ];
  return h(
    'section',
    {
      class: `group${g.zeroVariance ? ' zero' : ''}`,
      'data-group': g.group,
      'data-zero': String(g.zeroVariance),
      'data-reason': g.reason ?? '',
    },
    h(
      'div',
      { class: 'group-head' },
      h('strong', {}, `group ${g.group}`),
      ` · ${g.samples.length} samples · reward mean ${fmt(g.rewardMean)} · std ${fmt(g.rewardStd)}`,
      g.divergeAt !== null ? ` · streams part at ${g.unit === 'tokens' ? 'token' : 'character'} ${g.divergeAt}` : '',
      g.zeroVariance
        ? h(
            'span',
            { class: 'badge zero', 'data-testid': 'reason' },
            `zero variance: ${REASONS[g.reason ?? 'equal-rewards']}`,
          )
        : null,
      ...(g.alarms ?? []).map((a) =>
        h(
          'span',
          {
            class: 'badge alarm',
            'data-testid': 'group-alarm',
            title: 'a group diagnostic of audit (docs/instruments.md)',
          },
          a,
        ),
      ),
    ),
    g.question
      ? h(
          'div',
          { class: 'question' },
          g.question,
          g.golden?.length ? h('span', { class: 'golden' }, ` — golden: ${g.golden.join(' | ')}`) : null,
        )
      : null,
    h(
      'table',
      { class: 'samples' },
      h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', {}, c)))),
      h(
        'tbody',
        {},
        ...g.samples.map((s) =>
          h(
            'tr',
            {
              class: 'sample',
              title: `${s.file}:${s.line} — click to replay`,
              'data-line': s.line,
              onclick: () => void endpoint.request('openSample', { file: s.file, line: s.line }),
            },
            h('td', {}, fmt(s.sample)),
            h('td', { class: 'num' }, fmt(s.reward)),
            h('td', { class: 'num' }, fmt(s.advantage)),
            h('td', { class: 'answer' }, s.answer ?? '∅'),
            h('td', {}, fmt(s.em)),
            h('td', {}, s.formatValid ? 'valid' : 'invalid'),
            h('td', { class: 'num' }, String(s.searches)),
            h('td', {}, s.finish ?? '–'),
            h('td', { class: 'num' }, s.divergesAt === null ? '–' : String(s.divergesAt)),
          ),
        ),
      ),
    ),
  );
}

function render(): void {
  if (!state) {
    replaceChildren(header, h('p', {}, 'Open a step from the dashboard’s zero-variance chart.'));
    replaceChildren(list);
    return;
  }
  const zero = state.groups.filter((g) => g.zeroVariance);
  const shown = [...zero, ...(onlyZero.checked ? [] : state.groups.filter((g) => !g.zeroVariance))];
  replaceChildren(
    header,
    h('h2', {}, `GRPO groups${state.step !== undefined ? ` of step ${state.step}` : ''}`),
    h('div', { class: 'source' }, state.source),
    h(
      'div',
      { class: 'summary', 'data-testid': 'summary' },
      `${state.groups.length} groups, ${zero.length} with zero reward variance (no signal: every advantage is 0)`,
    ),
    state.sampled
      ? h(
          'div',
          { class: 'sampled', 'data-testid': 'sampled' },
          `A sample: ${state.sampled.recorded} of the step's ${state.sampled.of} rollouts were recorded (train.record). Flagged groups are always kept, so these groups lean toward them; the trainer's reward/frac_zero_std_groups in the dashboard is over every rollout.`,
        )
      : null,
    h('label', {}, onlyZero, ' only zero-variance groups'),
    state.errors.length ? h('ul', { class: 'errors' }, ...state.errors.map((e) => h('li', {}, e))) : null,
  );
  replaceChildren(list, ...shown.map(groupCard));
  document.body.dataset.groups = String(state.groups.length);
  document.body.dataset.shown = String(shown.length);
}

endpoint.on('state', (s) => {
  state = s;
  render();
});
endpoint.handle('describe', () => ({
  groups: state?.groups.length ?? 0,
  zeroVariance: state?.groups.filter((g) => g.zeroVariance).length ?? 0,
  shown: list.children.length,
  reasons: (state?.groups ?? []).filter((g) => g.zeroVariance).map((g) => g.reason ?? ''),
  step: state?.step ?? null,
}));
void endpoint.request('getState', undefined).then((s) => {
  state = s;
  render();
});
