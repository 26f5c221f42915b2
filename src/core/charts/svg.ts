/**
 * Static line charts as SVG: the learning curves in the docs (scripts/plot-runs.ts renders them to PNG through
 * Chromium) and any export that must not depend on a webview. Pure string building; every text is escaped.
 */

export interface Series {
  name: string;
  points: [number, number][];
  color?: string;
  /** Dashed line (e.g. a training-batch metric beside the held-out one). */
  dashed?: boolean;
}

export interface Panel {
  title: string;
  series: Series[];
  xLabel?: string;
  yLabel?: string;
  /** Fixed y range; default: from the data, including 0. */
  yMin?: number;
  yMax?: number;
}

export interface ChartOptions {
  title?: string;
  subtitle?: string;
  panelWidth?: number;
  panelHeight?: number;
  columns?: number;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];

export function escapeXml(s: string): string {
  return s.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );
}

/** "Nice" tick values covering [lo, hi] (1, 2, 2.5, 5 × 10^k steps). */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi === lo) hi = lo + 1;
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 2.5, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    out.push(Number(v.toPrecision(12)));
  return out;
}

const label = (v: number) => (Math.abs(v) >= 1000 ? v.toLocaleString('en-US') : String(Number(v.toPrecision(4))));

function panelSvg(p: Panel, x0: number, y0: number, w: number, h: number, colors: Map<string, string>): string {
  const m = { l: 52, r: 12, t: 26, b: 38 };
  const pw = w - m.l - m.r;
  const ph = h - m.t - m.b;
  const xs = p.series.flatMap((s) => s.points.map((q) => q[0]));
  const ys = p.series.flatMap((s) => s.points.map((q) => q[1])).filter(Number.isFinite);
  const xLo = xs.length ? Math.min(...xs) : 0;
  const xHi = xs.length ? Math.max(...xs) : 1;
  const yLo = p.yMin ?? Math.min(0, ...ys);
  const yHi = p.yMax ?? (ys.length ? Math.max(...ys) : 1);
  const xt = niceTicks(xLo, xHi, 6);
  const yt = niceTicks(yLo, yHi, 5);
  const xA = xt.length ? Math.min(xLo, xt[0]!) : xLo;
  const xB = xt.length ? Math.max(xHi, xt[xt.length - 1]!) : xHi;
  const yA = yt.length ? Math.min(yLo, yt[0]!) : yLo;
  const yB = yt.length ? Math.max(yHi, yt[yt.length - 1]!) : yHi;
  const sx = (v: number) => x0 + m.l + ((v - xA) / (xB - xA || 1)) * pw;
  const sy = (v: number) => y0 + m.t + ph - ((v - yA) / (yB - yA || 1)) * ph;
  const parts: string[] = [];
  parts.push(`<text x="${x0 + m.l}" y="${y0 + 16}" class="pt">${escapeXml(p.title)}</text>`);
  for (const v of yt)
    parts.push(
      `<line x1="${x0 + m.l}" x2="${x0 + m.l + pw}" y1="${sy(v).toFixed(1)}" y2="${sy(v).toFixed(1)}" class="grid"/><text x="${x0 + m.l - 6}" y="${(sy(v) + 4).toFixed(1)}" class="tick" text-anchor="end">${label(v)}</text>`,
    );
  for (const v of xt)
    parts.push(
      `<line x1="${sx(v).toFixed(1)}" x2="${sx(v).toFixed(1)}" y1="${y0 + m.t + ph}" y2="${y0 + m.t + ph + 4}" class="axis"/><text x="${sx(v).toFixed(1)}" y="${y0 + m.t + ph + 16}" class="tick" text-anchor="middle">${label(v)}</text>`,
    );
  parts.push(`<rect x="${x0 + m.l}" y="${y0 + m.t}" width="${pw}" height="${ph}" class="frame"/>`);
  if (p.xLabel)
    parts.push(
      `<text x="${x0 + m.l + pw / 2}" y="${y0 + h - 4}" class="lbl" text-anchor="middle">${escapeXml(p.xLabel)}</text>`,
    );
  if (p.yLabel)
    parts.push(
      `<text transform="translate(${x0 + 12},${y0 + m.t + ph / 2}) rotate(-90)" class="lbl" text-anchor="middle">${escapeXml(p.yLabel)}</text>`,
    );
  for (const s of p.series) {
    const pts = s.points.filter((q) => Number.isFinite(q[1]));
    if (!pts.length) continue;
    const color = s.color ?? colors.get(s.name) ?? '#333';
    const d = pts.map((q, i) => `${i ? 'L' : 'M'}${sx(q[0]).toFixed(1)},${sy(q[1]).toFixed(1)}`).join('');
    parts.push(
      `<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 4"' : ''}/>`,
    );
    if (pts.length <= 40)
      for (const q of pts)
        parts.push(`<circle cx="${sx(q[0]).toFixed(1)}" cy="${sy(q[1]).toFixed(1)}" r="2.5" fill="${color}"/>`);
  }
  return parts.join('\n');
}

/** A grid of panels sharing one legend (series with the same name get the same colour across panels). */
export function lineChartsSvg(panels: Panel[], options: ChartOptions = {}): string {
  const pwid = options.panelWidth ?? 420;
  const phei = options.panelHeight ?? 260;
  const cols = Math.max(1, Math.min(options.columns ?? panels.length, panels.length));
  const rows = Math.ceil(panels.length / cols);
  const names = [...new Set(panels.flatMap((p) => p.series.map((s) => s.name)))];
  const colors = new Map<string, string>();
  for (const p of panels) for (const s of p.series) if (s.color) colors.set(s.name, s.color);
  let k = 0;
  for (const n of names) if (!colors.has(n)) colors.set(n, PALETTE[k++ % PALETTE.length]!);
  const head = (options.title ? 28 : 0) + (options.subtitle ? 18 : 0);
  const legendH = 24;
  const width = cols * pwid;
  const height = head + rows * phei + legendH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
  );
  out.push(
    '<style>text{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;fill:#222}.t{font-size:16px;font-weight:bold}.st{font-size:12px;fill:#555}.pt{font-size:13px;font-weight:bold}.tick{font-size:10px;fill:#444}.lbl{font-size:11px;fill:#333}.grid{stroke:#e6e6e6}.axis{stroke:#888}.frame{fill:none;stroke:#888}.leg{font-size:12px}</style>',
  );
  out.push(`<rect width="${width}" height="${height}" fill="#fff"/>`);
  if (options.title) out.push(`<text x="12" y="22" class="t">${escapeXml(options.title)}</text>`);
  if (options.subtitle)
    out.push(`<text x="12" y="${options.title ? 40 : 16}" class="st">${escapeXml(options.subtitle)}</text>`);
  panels.forEach((p, i) =>
    out.push(panelSvg(p, (i % cols) * pwid, head + Math.floor(i / cols) * phei, pwid, phei, colors)),
  );
  let x = 12;
  const ly = head + rows * phei + 14;
  const dashed = new Set(panels.flatMap((p) => p.series.filter((s) => s.dashed).map((s) => s.name)));
  for (const n of names) {
    out.push(
      `<line x1="${x}" x2="${x + 22}" y1="${ly - 4}" y2="${ly - 4}" stroke="${colors.get(n)}" stroke-width="2"${dashed.has(n) ? ' stroke-dasharray="5 4"' : ''}/><text x="${x + 28}" y="${ly}" class="leg">${escapeXml(n)}</text>`,
    );
    x += 40 + n.length * 7;
  }
  out.push('</svg>');
  return out.join('\n');
}
