/**
 * Per-token strips (issue 46): every recorded per-token array of the replayed rollout — the ratio exp(Δ), Δ, the
 * advantage, the entropy, the reference log-prob, the value, the trainer's and the sampling-time log-probs, the KL —
 * as one heat strip each, stacked and aligned token for token over the chips' window, so a spike in one reads against
 * the others at the same token. Masked tokens (loss mask 0) are dimmed; tokens with no value are drawn as "not
 * recorded". One colour scale everywhere: the chips' overlay palettes (diverging around 0 for Δ, ratio, advantage
 * and KL, the ratio coloured by its log; sequential from the lowest to the highest value for the others), the same
 * CSS classes, and one legend above the strips naming both palettes and each strip's range. A click on a cell moves
 * to that token. Built with the DOM (webview/shared/dom.ts): token text only ever becomes a title attribute.
 */
import type { Overlay, ReplayModel } from '../../src/core/protocol/replay';
import { h, replaceChildren } from '../shared/dom';

/** The strips, in order, with their names and palettes. */
export const STRIPS: readonly { overlay: Overlay; label: string; diverging: boolean }[] = [
  { overlay: 'ratio', label: 'ratio exp(Δ)', diverging: true },
  { overlay: 'delta', label: 'Δ logprob − rollout', diverging: true },
  { overlay: 'advantage', label: 'advantage', diverging: true },
  { overlay: 'entropy', label: 'entropy', diverging: false },
  { overlay: 'ref_logprob', label: 'reference log-prob', diverging: false },
  { overlay: 'value', label: 'value', diverging: false },
  { overlay: 'logprob', label: 'log-prob (trainer)', diverging: false },
  { overlay: 'rollout_logprob', label: 'log-prob (sampling)', diverging: false },
  { overlay: 'kl', label: 'KL log π − log π_ref', diverging: true },
];

export const BUCKETS = 9;

/** A colouring's range: symmetric around 0 when diverging; [min, max] otherwise (the chips' and the strips' one rule). */
export function stripScale(vals: readonly (number | null)[], diverging: boolean): { lo: number; hi: number } {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of vals) {
    if (v === null || !Number.isFinite(v)) continue;
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  if (!Number.isFinite(lo)) return { lo: 0, hi: 0 };
  if (diverging) {
    const a = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    return { lo: -a, hi: a };
  }
  return { lo, hi: hi > lo ? hi : lo + 1 };
}

export function bucketOf(v: number, s: { lo: number; hi: number }): number {
  return Math.max(0, Math.min(BUCKETS - 1, Math.floor(((v - s.lo) / (s.hi - s.lo)) * BUCKETS)));
}

/** The numbers a strip colours: the ratio by its log (Δ), every other array as recorded. */
const coloured = (m: ReplayModel, o: Overlay) => m.tokens.overlays[o === 'ratio' ? 'delta' : o];
const shown = (o: Overlay, v: number) => (o === 'ratio' ? Math.exp(v) : v);
const fmt = (v: number) =>
  Number.isInteger(v) ? String(v) : Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : v.toFixed(3);

export class Strips {
  readonly element = h('div', { class: 'strips', 'data-testid': 'strips', hidden: true });
  private current = -1;
  private from = 0;

  /** @param go moves the replay to a token. */
  constructor(private readonly go: (token: number) => void) {
    this.element.addEventListener('click', (ev) => {
      const cell = (ev.target as HTMLElement).closest<HTMLElement>('.strip-cell[data-i]');
      if (cell) this.go(Number(cell.dataset.i));
    });
  }

  /** Draws the strips of `m` over tokens [from, to) (the chips' window); hidden when the rollout records none. */
  render(m: ReplayModel | undefined, window: { from: number; to: number }, token: number): void {
    const strips =
      m && m.level === 'token'
        ? STRIPS.filter((s) => coloured(m, s.overlay)?.some((v) => v !== null && v !== undefined))
        : [];
    this.element.hidden = !strips.length;
    if (!m || !strips.length) {
      replaceChildren(this.element);
      return;
    }
    this.from = window.from;
    const mask = m.tokens.mask;
    const rows = strips.map((s) => {
      const vals = coloured(m, s.overlay)!;
      const sc = stripScale(vals.slice(window.from, window.to), s.diverging);
      const cells: HTMLElement[] = [];
      for (let i = window.from; i < window.to; i++) {
        const v = vals[i];
        let cls = 'strip-cell';
        cls += v === null || v === undefined ? ' ov-none' : ` ov ov-${s.diverging ? 'd' : 's'}${bucketOf(v, sc)}`;
        if (mask?.[i] === 0) cls += ' masked';
        if (i === token) cls += ' current';
        const title = `token ${i}: ${JSON.stringify(m.tokens.text[i] ?? '')} · ${s.label} ${v === null || v === undefined ? 'not recorded' : fmt(shown(s.overlay, v))}${mask?.[i] === 0 ? ' · masked (loss mask 0)' : ''}`;
        cells.push(h('span', { class: cls, 'data-i': i, title }));
      }
      return h(
        'div',
        { class: 'strip', 'data-testid': `strip-${s.overlay}`, 'data-strip': s.overlay },
        h(
          'span',
          {
            class: 'strip-label',
            title: `${s.label}: ${s.diverging ? 'diverging around 0' : 'lowest to highest'} over the tokens shown`,
          },
          s.label,
        ),
        h('span', { class: 'strip-range' }, `${fmt(shown(s.overlay, sc.lo))} … ${fmt(shown(s.overlay, sc.hi))}`),
        h('span', { class: 'strip-cells' }, ...cells),
      );
    });
    replaceChildren(this.element, this.legend(), h('div', { class: 'strip-rows' }, ...rows));
    this.current = token;
  }

  /** One legend for every strip (and the chips' overlays): both palettes, not recorded, masked. */
  private legend(): HTMLElement {
    const swatches = (kind: 'd' | 's') =>
      Array.from({ length: BUCKETS }, (_, b) => h('span', { class: `swatch ov ov-${kind}${b}` }));
    return h(
      'div',
      { class: 'strip-legend', 'data-testid': 'strip-legend' },
      h('span', { class: 'legend-title' }, 'Per-token strips:'),
      h(
        'span',
        { class: 'legend-item' },
        'diverging (Δ, ratio, advantage, KL) −',
        ...swatches('d'),
        '+ (0 in the middle; ratio 1)',
      ),
      h('span', { class: 'legend-item' }, 'sequential (log-probs, entropy, value) low', ...swatches('s'), 'high'),
      h('span', { class: 'legend-item' }, h('span', { class: 'swatch ov-none' }), ' not recorded'),
      h('span', { class: 'legend-item' }, h('span', { class: 'strip-cell ov ov-s6 masked' }), ' masked (loss mask 0)'),
    );
  }

  /** Moves the current-token mark (no redraw). */
  mark(token: number): void {
    if (token === this.current) return;
    for (const el of this.element.querySelectorAll('.strip-cell.current')) el.classList.remove('current');
    for (const el of this.element.querySelectorAll<HTMLElement>(`.strip-cell[data-i="${token}"]`))
      el.classList.add('current');
    this.current = token;
    const first = this.element.querySelector<HTMLElement>(`.strip-cell[data-i="${token}"]`);
    const rows = this.element.querySelector<HTMLElement>('.strip-rows');
    if (first && rows) {
      // keep the current token's column in view (horizontal scroll of the strips only)
      const c = rows.getBoundingClientRect();
      const r = first.getBoundingClientRect();
      if (r.left < c.left + 160 || r.right > c.right) rows.scrollLeft += r.left - c.left - c.width / 2;
    }
  }

  describe(): { strips: string[]; cells: number; masked: number; from: number } {
    return {
      strips: [...this.element.querySelectorAll<HTMLElement>('.strip')].map((s) => s.dataset.strip!),
      cells: this.element.querySelectorAll('.strip-cell[data-i]').length,
      masked: this.element.querySelectorAll('.strip-cell[data-i].masked').length,
      from: this.from,
    };
  }
}
