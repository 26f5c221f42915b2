/**
 * The replay's instruments (issue 18), kept apart from the panel's stepping and rendering (main.ts): the log-prob
 * microscope's overlays (Δ = logprob − rollout_logprob and the ratio exp(Δ), trained tokens only; masked tokens
 * drawn as excluded), the importance-sampling preview (which tokens truncated IS would clip and masked IS would
 * drop, at a level and cap the user picks; the host computes it), the "next drift" marker with the recorded and the
 * re-encoded pieces side by side, and the engine's mask against ours. Model text is inserted as text nodes only.
 */
import type { ViewEndpoint } from '../../src/core/protocol/messaging';
import type {
  ImportanceLevel,
  ImportancePreview,
  Overlay,
  ReplayContract,
  ReplayModel,
} from '../../src/core/protocol/replay';
import { h, replaceChildren } from '../shared/dom';

export const MICROSCOPE_LABELS: Record<'delta' | 'ratio', string> = {
  delta: 'Δ = logprob − rollout_logprob',
  ratio: 'ratio exp(Δ) = π_trainer / π_rollout',
};

/** The numbers a colouring buckets: the ratio is coloured by its log (Δ, diverging around ratio 1). */
export function colourValues(m: ReplayModel, o: Overlay | 'none'): (number | null)[] | undefined {
  return o === 'none' ? undefined : m.tokens.overlays[o === 'ratio' ? 'delta' : o];
}

/** A legend value of a colouring (the ratio's scale is in Δ: shown as exp(Δ)). */
export function legendValue(o: Overlay | 'none', v: number): number {
  return o === 'ratio' ? Math.exp(v) : v;
}

const isMicroscope = (o: Overlay | 'none') => o === 'delta' || o === 'ratio';

/** Where the instruments stand: the preview shown or not, its level and cap, the per-model previews. */
export class Microscope {
  previewOn = false;
  level: ImportanceLevel = 'token';
  cap = 2;
  private previews: (ImportancePreview | null)[] = [];
  private clipped: Set<number>[] = [];
  private dropped: Set<number>[] = [];
  private flagged: Set<number>[] = [];
  private mismatch: Set<number>[] = [];
  /** The drift panel is open (after "next drift"). */
  driftShown = false;

  readonly driftButton: HTMLElement;
  readonly controls: HTMLElement;
  readonly driftPane = h('div', { class: 'drift-pane', hidden: true, 'data-testid': 'drift-pane' });
  private readonly previewToggle: HTMLInputElement;
  private readonly levelSelect: HTMLSelectElement;
  private readonly capInput: HTMLInputElement;
  private readonly summary = h('span', { class: 'is-summary', 'data-testid': 'is-summary' });
  private models: ReplayModel[] = [];

  constructor(
    private readonly endpoint: ViewEndpoint<ReplayContract>,
    /** Redraws the chips (the marks changed), and moves to a token. */
    private readonly redraw: () => void,
    private readonly go: (token: number) => void,
  ) {
    this.driftButton = h(
      'vscode-button',
      {
        secondary: true,
        'data-testid': 'next-drift',
        title: 'Jump to the first re-tokenisation drift and show both sides (d)',
        onclick: () => this.nextDrift(),
      },
      'Next drift',
    );
    this.previewToggle = h('input', {
      type: 'checkbox',
      'data-testid': 'is-toggle',
      'aria-label': 'Importance-sampling preview',
    }) as HTMLInputElement;
    this.levelSelect = h(
      'select',
      { 'data-testid': 'is-level', 'aria-label': 'Importance-sampling level' },
      h('option', { value: 'token' }, 'token'),
      h('option', { value: 'sequence' }, 'sequence'),
    ) as HTMLSelectElement;
    this.capInput = h('input', {
      type: 'number',
      min: '1.01',
      step: '0.1',
      value: '2',
      class: 'is-cap',
      'data-testid': 'is-cap',
      'aria-label': 'Cap C',
    }) as HTMLInputElement;
    this.previewToggle.addEventListener('change', () => {
      this.previewOn = this.previewToggle.checked;
      this.redraw();
    });
    this.levelSelect.addEventListener('change', () => void this.recompute());
    this.capInput.addEventListener('change', () => void this.recompute());
    this.controls = h(
      'span',
      {
        class: 'is-controls',
        title:
          'Truncated IS (Yao et al. 2025): w = min(ρ, C) — tokens with ρ > C are clipped. Masked IS: tokens (sequences) with ρ outside [1/C, C] are dropped.',
      },
      h('label', {}, this.previewToggle, ' IS preview'),
      this.levelSelect,
      h('label', {}, ' C ', this.capInput),
      this.summary,
    );
  }

  /** A new state: the models shown and the preview's level and cap. */
  show(models: ReplayModel[], importance: { level: ImportanceLevel; cap: number }): void {
    this.models = models;
    this.level = importance.level;
    this.cap = importance.cap;
    this.levelSelect.value = this.level;
    this.capInput.value = String(this.cap);
    this.driftShown = false;
    this.setPreviews(models.map((m) => m.microscope?.importance ?? null));
    this.flagged = models.map((m) => new Set(m.microscope?.flagged ?? []));
    this.mismatch = models.map((m) => new Set(m.microscope?.maskMismatch ?? []));
    const m = models[0];
    const hasDrift = !!m?.microscope?.drift;
    this.driftButton.hidden = !hasDrift;
    this.driftButton.title = m?.microscope?.driftNote ?? 'drift not checked';
    this.controls.hidden = !models.some((x) => x.microscope?.importance);
    this.driftPane.hidden = true;
    replaceChildren(this.driftPane);
  }

  private setPreviews(previews: (ImportancePreview | null)[]): void {
    this.previews = previews;
    this.clipped = previews.map((p) => new Set(p?.clipped ?? []));
    this.dropped = previews.map((p) => new Set(p?.dropped ?? []));
    const p = previews[0];
    this.summary.textContent = p
      ? ` ${p.clipped.length} clipped (TIS) · ${p.dropped.length} dropped (MIS) of ${p.scored} · ρ_seq ${p.seq_ratio.toPrecision(3)}`
      : '';
  }

  private async recompute(): Promise<void> {
    const cap = Number(this.capInput.value);
    if (!(cap > 1)) {
      this.capInput.setCustomValidity('C must be > 1');
      this.capInput.reportValidity();
      return;
    }
    this.capInput.setCustomValidity('');
    this.level = this.levelSelect.value as ImportanceLevel;
    this.cap = cap;
    this.setPreviews(await this.endpoint.request('importance', { level: this.level, cap }));
    this.previewOn = this.previewToggle.checked = true;
    this.redraw();
  }

  /** The instruments' classes of chip i of model col under colouring o. */
  chipClasses(col: number, i: number, o: Overlay | 'none'): string {
    const m = this.models[col];
    let cls = '';
    if (isMicroscope(o) && m?.tokens.mask?.[i] === 0) cls += ' excluded';
    if (isMicroscope(o) && this.flagged[col]?.has(i)) cls += ' ratio-flag';
    if (this.previewOn) {
      if (this.dropped[col]?.has(i)) cls += ' is-dropped';
      else if (this.clipped[col]?.has(i)) cls += ' is-clipped';
    }
    if (this.mismatch[col]?.has(i)) cls += ' mask-mismatch';
    const d = m?.microscope?.drift;
    if (d && i === d.token) cls += ' drift-at';
    return cls;
  }

  /** Hover rows of token i of model col. */
  hoverRows(col: number, i: number): [string, string][] {
    const m = this.models[col];
    const ms = m?.microscope;
    if (!ms) return [];
    const rows: [string, string][] = [];
    if (ms.engineMask)
      rows.push([
        'engine mask',
        `${ms.engineMask[i] ?? '–'}${this.mismatch[col]?.has(i) ? ' — LEAK: the engine trained otherwise than loss_mask says' : ''}`,
      ]);
    if (m.tokens.mask?.[i] === 0 && m.tokens.overlays.delta) rows.push(['Δ', 'excluded (loss mask 0: never compared)']);
    if (this.flagged[col]?.has(i)) rows.push(['ratio', 'outside the audit band']);
    const p = this.previews[col];
    if (p && (this.clipped[col]?.has(i) || this.dropped[col]?.has(i)))
      rows.push([
        `IS (${p.level}, C ${p.cap})`,
        `${this.clipped[col]?.has(i) ? `TIS clips to ${p.cap}` : 'TIS keeps'} · ${this.dropped[col]?.has(i) ? 'MIS drops' : 'MIS keeps'}`,
      ]);
    if (ms.drift && i === ms.drift.token) rows.push(['drift', `first ${ms.drift.kind} drift here`]);
    return rows;
  }

  legendItems(o: Overlay | 'none'): HTMLElement[] {
    const items: HTMLElement[] = [];
    if (isMicroscope(o))
      items.push(
        h('span', { class: 'legend-item' }, h('span', { class: 'chip excluded' }, 'masked'), ' excluded (loss mask 0)'),
        h('span', { class: 'legend-item' }, h('span', { class: 'chip ratio-flag' }, 'flag'), ' ratio outside the band'),
      );
    if (this.previewOn)
      items.push(
        h(
          'span',
          { class: 'legend-item' },
          h('span', { class: 'chip is-clipped' }, 'clipped'),
          ` TIS: ρ > ${this.cap}`,
        ),
        h(
          'span',
          { class: 'legend-item' },
          h('span', { class: 'chip is-dropped' }, 'dropped'),
          ` MIS: ρ outside [${(1 / this.cap).toPrecision(3)}, ${this.cap}]`,
        ),
      );
    if (this.mismatch[0]?.size)
      items.push(
        h(
          'span',
          { class: 'legend-item' },
          h('span', { class: 'chip mask-mismatch' }, 'engine'),
          " engine's mask ≠ loss_mask",
        ),
      );
    return items;
  }

  /** Jumps to the first drift and shows the recorded and the re-encoded pieces side by side (as text). */
  nextDrift(): void {
    const d = this.models[0]?.microscope?.drift;
    if (!d) return;
    const side = (title: string, pieces: { id: number; text: string }[], testid: string) =>
      h(
        'div',
        { class: 'drift-side', 'data-testid': testid },
        h('h4', {}, title),
        h(
          'ol',
          { start: String(d.from), class: 'drift-pieces' },
          ...pieces.map((p, k) =>
            h(
              'li',
              { class: d.from + k === d.token ? 'drift-first' : '' },
              h('code', {}, JSON.stringify(p.text)),
              h('span', { class: 'drift-id' }, ` id ${p.id}`),
            ),
          ),
        ),
      );
    replaceChildren(
      this.driftPane,
      h(
        'div',
        { class: 'drift-title' },
        `Re-tokenisation drift (${d.kind === 'split' ? 'same text, other split' : d.kind === 'template' ? 'the chat template renders the messages otherwise' : 'the ids do not spell the text'}) at token ${d.token}`,
      ),
      h(
        'div',
        { class: 'drift-sides' },
        side('recorded (sampled) ids', d.recorded, 'drift-recorded'),
        side('re-encoded by the tokenizer', d.reencoded, 'drift-reencoded'),
      ),
    );
    this.driftPane.hidden = false;
    this.driftShown = true;
    this.go(d.token);
  }

  describe(): { drift: number | null; driftShown: boolean; clipped: number; dropped: number; excluded: number } {
    const p = this.previews[0];
    return {
      drift: this.models[0]?.microscope?.drift?.token ?? null,
      driftShown: this.driftShown,
      clipped: this.previewOn ? (p?.clipped.length ?? 0) : 0,
      dropped: this.previewOn ? (p?.dropped.length ?? 0) : 0,
      excluded: document.querySelectorAll('[data-col="0"].chip.excluded').length,
    };
  }
}
