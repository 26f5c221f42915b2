/**
 * Learning curves of one or more run directories, as SVG and PNG (the PNG rendered by Chromium through
 * playwright-core, the same browser the e2e tests drive), for the docs.
 *
 *   node -r ./test/register.cjs scripts/plot-runs.ts --out docs/images/demo-learning-curve \
 *     [--title T] [--subtitle S] [--panels val/em,critic/score/mean,val/searches_mean] "label=runs/a" "label=runs/b"
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { lineChartsSvg, type Panel } from '../src/core/charts/svg';

const TITLES: Record<string, string> = {
  'val/em': 'held-out exact match',
  'val/searches_mean': 'held-out searches per question',
  'critic/score/mean': 'training reward (exact match)',
  'env/number_of_valid_search': 'training searches per trajectory',
  'reward/frac_zero_std_groups': 'groups with zero reward variance',
  'response_length/mean': 'response length (tokens)',
  'actor/entropy': 'entropy of generated tokens',
  'val/em_by_hops/1': 'held-out exact match, one-hop questions',
  'val/em_by_hops/2': 'held-out exact match, two-hop questions',
  'val/searches_by_hops/1': 'searches per one-hop question (held-out)',
  'val/searches_by_hops/2': 'searches per two-hop question (held-out)',
  'val/answer_retrieved_by_hops/1': 'held-out one-hop questions whose searches returned the answer',
  'val/answer_retrieved_by_hops/2': 'held-out two-hop questions whose searches returned the answer',
  'val/bridge_searched_by_hops/2': 'held-out two-hop questions whose later search named the bridge entity',
  'reward/format/mean': 'training responses in Search-R1 format',
};

function metrics(runDir: string): Record<string, number>[] {
  return readFileSync(`${runDir}/metrics.jsonl`, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

/** Training-batch metrics are noisy (one batch per step): a trailing mean over `k` steps. */
function smooth(points: [number, number][], k: number): [number, number][] {
  return points.map(([x], i) => {
    const w = points.slice(Math.max(0, i - k + 1), i + 1);
    return [x, w.reduce((a, p) => a + p[1], 0) / w.length];
  });
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      out: { type: 'string' },
      title: { type: 'string' },
      subtitle: { type: 'string' },
      panels: { type: 'string', default: 'val/em,critic/score/mean,val/searches_mean' },
      smooth: { type: 'string', default: '5' },
    },
    allowPositionals: true,
  });
  if (!values.out || !positionals.length) throw new Error('usage: plot-runs.ts --out PREFIX label=runDir …');
  const runs = positionals.map((p) => {
    const i = p.indexOf('=');
    return i > 0 ? { label: p.slice(0, i), dir: p.slice(i + 1) } : { label: p, dir: p };
  });
  const data = runs.map((r) => ({ ...r, rows: metrics(r.dir) }));
  const k = Number(values.smooth);
  const panels: Panel[] = values.panels.split(',').map((key) => ({
    title: TITLES[key] ?? key,
    xLabel: 'step',
    yMin: key.includes('em') || key.includes('score') || key.includes('frac') ? 0 : undefined,
    yMax:
      key === 'val/em' ||
      key.startsWith('val/em_by_hops/') ||
      key.startsWith('val/answer_retrieved_by_hops/') ||
      key.startsWith('val/bridge_searched_by_hops/') ||
      key === 'critic/score/mean'
        ? 1
        : undefined,
    series: data.map((d) => {
      const pts = d.rows
        .filter((m) => typeof m[key] === 'number')
        .map((m) => [m.step as number, m[key] as number] as [number, number]);
      return { name: d.label, points: key.startsWith('val/') ? pts : smooth(pts, k) };
    }),
  }));
  const svg = lineChartsSvg(panels, {
    title: values.title,
    subtitle: values.subtitle,
    columns: panels.length === 4 ? 2 : Math.min(3, panels.length),
  });
  writeFileSync(`${values.out}.svg`, svg);
  const browser = await chromium.launch({
    executablePath: process.env.SAS_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  });
  try {
    const page = await browser.newPage({ deviceScaleFactor: 2 });
    await page.setContent(`<!doctype html><html><body style="margin:0">${svg}</body></html>`);
    await page.locator('svg').screenshot({ path: `${values.out}.png` });
  } finally {
    await browser.close();
  }
  console.log(`wrote ${values.out}.svg and ${values.out}.png`);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
