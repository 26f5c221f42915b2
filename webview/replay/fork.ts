/**
 * "Fork here" in the replay panel (docs/fork.md): the shown rollout forked at a generation turn, the observation
 * before that turn as it was or edited (a new query, or documents the user writes), from a checkpoint of the run
 * (default: the one that produced the rollout), greedy or n samples. The continuations show beside the recorded
 * rollout: reward, answer, finish, the first token where they diverge, and their tokens from there on, coloured by
 * role with the loss mask (masked tokens hatched, as the replay's chips). All text is inserted as text nodes.
 */
import type { ViewEndpoint } from '../../src/core/protocol/messaging';
import {
  type Continuation,
  type ForkChoices,
  type ForkResult,
  NO_TRAINER_PYTHON,
  type ReplayContract,
  type ReplayModel,
} from '../../src/core/protocol/replay';
import { h, replaceChildren } from '../shared/dom';

const fmt = (v: number | null | undefined) =>
  v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(3);
/** Tokens shown per column after the divergence point. */
const SHOWN = 400;

export interface ForkPane {
  element: HTMLElement;
  /** A new rollout is shown (the form is reset). */
  show(m: ReplayModel | undefined): void;
  /** Opens the form at generation turn `turn` (from 1). */
  at(turn: number): void;
}

export function forkPane(endpoint: ViewEndpoint<ReplayContract>): ForkPane {
  const turnSelect = h('select', { 'data-testid': 'fork-turn', 'aria-label': 'Fork at generation turn' });
  const checkpointSelect = h('select', { 'data-testid': 'fork-checkpoint', 'aria-label': 'Checkpoint' });
  const edit = h(
    'select',
    { 'data-testid': 'fork-edit', 'aria-label': 'Edit' },
    h('option', { value: 'none' }, 'nothing edited'),
    h('option', { value: 'query' }, 'a new query'),
    h('option', { value: 'documents' }, 'my documents'),
  );
  const query = h('input', {
    type: 'text',
    'data-testid': 'fork-query',
    placeholder: 'the query to search instead',
    hidden: true,
  });
  const documents = h('textarea', {
    'data-testid': 'fork-documents',
    rows: '5',
    placeholder: 'one document per paragraph (blank line between): its first line is the title',
    hidden: true,
  });
  const mode = h(
    'select',
    { 'data-testid': 'fork-mode', 'aria-label': 'Sampling' },
    h('option', { value: 'greedy' }, 'greedy'),
    h('option', { value: 'samples' }, 'samples'),
  );
  const samples = h('input', {
    type: 'number',
    min: '1',
    max: '16',
    value: '4',
    'data-testid': 'fork-samples',
    hidden: true,
    'aria-label': 'Samples',
  });
  const status = h('span', { class: 'fork-status', 'data-testid': 'fork-status', role: 'status' });
  const results = h('div', { class: 'fork-results', 'data-testid': 'fork-results' });
  const button = h('vscode-button', { 'data-testid': 'fork-run', onclick: () => void run() }, 'Fork');
  // Offered where the fork failed for want of a Python that runs the trainer.
  const setUp = h(
    'vscode-button',
    {
      secondary: true,
      hidden: true,
      'data-testid': 'fork-setup',
      onclick: () => void endpoint.request('setUpTrainerEnvironment', undefined),
    },
    'Set Up Trainer Environment',
  );
  const form = h(
    'div',
    { class: 'fork-form' },
    h('label', {}, 'Fork at turn ', turnSelect),
    h('label', {}, ' from ', checkpointSelect),
    h('label', {}, ' with ', edit),
    h('label', {}, ' ', mode, samples),
    button,
    status,
    setUp,
    query,
    documents,
  );
  const element = h(
    'section',
    { class: 'fork', 'data-testid': 'fork', hidden: true },
    h('h3', {}, 'Fork: what would the policy have done?'),
    form,
    results,
  );
  edit.onchange = () => {
    query.hidden = edit.value !== 'query';
    documents.hidden = edit.value !== 'documents';
  };
  mode.onchange = () => (samples.hidden = mode.value !== 'samples');

  let model: ReplayModel | undefined;
  let choices: ForkChoices | undefined;

  async function show(m: ReplayModel | undefined): Promise<void> {
    model = m;
    replaceChildren(results);
    status.textContent = '';
    setUp.hidden = true;
    element.hidden = !m;
    if (!m) return;
    choices = await endpoint
      .request('forkChoices', { model: 0 })
      .catch((e: Error) => ({ unavailable: e.message, checkpoints: [], turns: 0 }));
    button.disabled = !!choices.unavailable;
    status.textContent = choices.unavailable ?? '';
    replaceChildren(
      turnSelect,
      ...Array.from({ length: choices.turns }, (_, k) => h('option', { value: String(k + 1) }, String(k + 1))),
    );
    // No checkpoint at or before the rollout's step: nothing preselected (the first option would be a later policy
    // than the one that wrote the rollout), and the reason shown; a later one can still be chosen, labelled so.
    const c = choices;
    if (c.noDefault && !c.unavailable) status.textContent = c.noDefault;
    replaceChildren(
      checkpointSelect,
      ...(c.noDefault ? [h('option', { value: '', selected: true }, 'choose a checkpoint')] : []),
      ...c.checkpoints.map((name) =>
        h(
          'option',
          { value: name, selected: name === c.defaultCheckpoint },
          name === c.defaultCheckpoint
            ? `${name} (the rollout's)`
            : c.later?.includes(name)
              ? `${name} (after the rollout)`
              : name,
        ),
      ),
    );
  }

  function at(turn: number): void {
    if (!choices?.turns) return;
    turnSelect.value = String(Math.min(Math.max(1, turn), choices.turns));
    element.scrollIntoView({ block: 'nearest' });
    turnSelect.focus();
  }

  async function run(): Promise<void> {
    if (!model || !choices || choices.unavailable) return;
    if (!checkpointSelect.value && choices.noDefault) {
      status.textContent = choices.noDefault;
      checkpointSelect.focus();
      return;
    }
    const docs = documents.value
      .split(/\n\s*\n/)
      .map((d) => d.trim())
      .filter(Boolean);
    const params = {
      model: 0,
      turn: Number(turnSelect.value),
      checkpoint: checkpointSelect.value || undefined,
      ...(edit.value === 'query' ? { query: query.value } : {}),
      ...(edit.value === 'documents' ? { documents: docs } : {}),
      ...(mode.value === 'samples'
        ? { samples: Math.max(1, Number(samples.value) || 1), greedy: false }
        : { greedy: true }),
    };
    button.disabled = true;
    setUp.hidden = true;
    // The policy server of a checkpoint starts on its first fork (seconds to load the model); later ones reuse it.
    const checkpoint = params.checkpoint ?? choices.defaultCheckpoint;
    const starting = !checkpoint || !(choices.started ?? []).includes(checkpoint);
    status.textContent = starting
      ? `forking… (starting the policy server${checkpoint ? ` for ${checkpoint}` : ''}: the first fork from a checkpoint takes longer)`
      : 'forking…';
    try {
      const r = await endpoint.request('fork', params, { timeoutMs: 900_000 });
      choices.started = [...(choices.started ?? []), r.checkpoint];
      status.textContent = `${r.continuations.length} continuation${r.continuations.length === 1 ? '' : 's'} from ${r.checkpoint}`;
      render(r);
    } catch (e) {
      const message = (e as Error).message;
      status.textContent = `fork failed: ${message}`;
      setUp.hidden = !message.startsWith(NO_TRAINER_PYTHON);
    } finally {
      button.disabled = false;
    }
  }

  function render(r: ForkResult): void {
    const m = model!;
    const from = Math.min(...r.continuations.map((c) => c.diverges_at ?? m.tokens.role.length));
    const recorded = column(
      'recorded',
      m.reward,
      m.answer,
      m.finish ?? null,
      null,
      m.tokens.text,
      m.tokens.role,
      m.tokens.mask,
      from,
    );
    replaceChildren(
      results,
      h(
        'div',
        { class: 'fork-columns', 'data-testid': 'fork-columns' },
        recorded,
        ...r.continuations.map((c, k) => continuation(c, k, from)),
      ),
    );
  }

  function continuation(c: Continuation, k: number, from: number): HTMLElement {
    return column(
      `continuation ${k + 1}`,
      c.reward,
      c.answer,
      c.finish,
      c.diverges_at,
      c.tokens.text,
      c.tokens.role,
      c.tokens.loss_mask,
      from,
      c.reward_error,
    );
  }

  function column(
    title: string,
    reward: number | null | undefined,
    answer: string | null,
    finish: string | null,
    diverges: number | null,
    text: string[],
    role: string[],
    mask: (0 | 1)[] | undefined,
    from: number,
    error?: string,
  ): HTMLElement {
    const chips = [];
    for (let i = from; i < Math.min(text.length, from + SHOWN); i++) {
      chips.push(
        h(
          'span',
          {
            class: `chip role-${role[i]}${mask && mask[i] === 0 ? ' masked' : ''}${i === diverges ? ' diverges' : ''}`,
            title: `#${i} ${role[i]} · mask ${mask?.[i] ?? '?'}`,
            'data-role': role[i] ?? '',
            'data-mask': String(mask?.[i] ?? ''),
          },
          text[i] ?? '',
        ),
      );
    }
    const where =
      title === 'recorded'
        ? `tokens from #${from}`
        : diverges === null
          ? 'identical to the recorded rollout'
          : `diverges at token #${diverges}`;
    return h(
      'div',
      { class: 'fork-column', 'data-testid': title === 'recorded' ? 'fork-recorded' : 'fork-continuation' },
      h(
        'div',
        { class: 'col-head' },
        h('strong', {}, title),
        ` reward ${fmt(reward)} · answer ${answer ?? '∅'} · ${finish ?? ''}`,
      ),
      h('div', { class: 'fork-where', 'data-testid': 'fork-where' }, where),
      error ? h('div', { class: 'error' }, `reward module: ${error}`) : null,
      h('div', { class: 'fork-tokens', 'data-testid': 'fork-tokens' }, ...chips),
    );
  }

  return { element, show: (m) => void show(m), at };
}
