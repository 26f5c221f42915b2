/**
 * Rollout inspector over a generated 1 GB rollout file, against reading the same file with a plain line-by-line
 * stream (node:readline over fs.createReadStream + JSON.parse) in the same run: time to the first rows on screen,
 * a page at a random offset, a filter over every row, and memory.
 */
import { createReadStream } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { type EngineMessage, InspectorEngine } from '../src/core/inspect/engine';
import { rowFacts } from '../src/core/inspect/table';
import { RolloutStore } from '../src/core/store/rollouts';
import { rolloutFile } from './data';
import { fmt, median, quantile, report, rng } from './util';

const FILTER = 'reward == 0 && searches >= 2';

async function streamFirst(path: string, n: number): Promise<number> {
  const rl = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
  let k = 0;
  for await (const line of rl) {
    JSON.parse(line);
    if (++k >= n) break;
  }
  rl.close();
  return k;
}

/** The line-stream peer of a filter: read every line, parse it, test the condition. */
async function streamFilter(path: string): Promise<number> {
  const rl = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
  let hits = 0;
  for await (const line of rl) {
    const r = JSON.parse(line) as { reward?: number; searches?: number };
    if (r.reward === 0 && (r.searches ?? 0) >= 2) hits++;
  }
  return hits;
}

const mb = (b: number) => `${(b / 1e6).toFixed(0)} MB`;

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const path = await rolloutFile(1e9, 'rollouts-1gb.jsonl');
  // Warm the page cache the same for both.
  await streamFilter(path);

  let t0 = performance.now();
  await streamFirst(path, 100);
  const streamFirstS = (performance.now() - t0) / 1000;

  global.gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const msgs: EngineMessage[] = [];
  let firstRows = 0;
  let indexed = 0;
  let analysed = 0;
  const start = performance.now();
  const engine = new InspectorEngine((m) => {
    const at = (performance.now() - start) / 1000;
    if (m.t === 'preview' && !firstRows) firstRows = at;
    if (m.t === 'status' && m.status.total > 0 && !indexed) indexed = at;
    if (m.t === 'status' && m.status.total > 0 && m.status.analysed === m.status.total && !m.status.busy && !analysed)
      analysed = at;
    msgs.push(m);
    if (msgs.length > 50) msgs.splice(0, 25);
  });
  await engine.open(path, false);
  const status = engine.status();
  global.gc?.();
  const heap1 = process.memoryUsage().heapUsed;
  report(
    lines,
    `first rows on screen: ${fmt.ms(firstRows)} (a line stream's first 100 rows: ${fmt.ms(streamFirstS)}); index of ${status.total} rows ready at ${fmt.ms(indexed)}; every row analysed at ${(analysed || (performance.now() - start) / 1000).toFixed(1)} s`,
  );

  const r = rng(5);
  const pages: number[] = [];
  for (let k = 0; k < 100; k++) {
    const from = Math.floor(r() * (status.total - 100));
    t0 = performance.now();
    await engine.page(from, 100);
    pages.push((performance.now() - t0) / 1000);
  }
  const streamPage: number[] = [];
  for (let k = 0; k < 3; k++) {
    // The line-stream way to a page at a random offset: read up to it.
    const from = Math.floor(r() * (status.total - 100));
    t0 = performance.now();
    await streamFirst(path, from + 100);
    streamPage.push((performance.now() - t0) / 1000);
  }
  // Before the analysis reaches a row, its page is read from the file and parsed on the spot.
  const store = await RolloutStore.open(path);
  const cold: number[] = [];
  for (let k = 0; k < 50; k++) {
    const from = Math.floor(r() * (status.total - 100));
    t0 = performance.now();
    (await store.rows(from, from + 100)).map((row) => rowFacts(row));
    cold.push((performance.now() - t0) / 1000);
  }
  await store.close();
  report(
    lines,
    `page of 100 rows at a random offset: analysed p50 ${fmt.us(median(pages))} (p99 ${fmt.ms(quantile(pages, 0.99))}); not yet analysed (read + parse + facts, 3 MB) p50 ${fmt.ms(median(cold))}; a line stream reading up to the offset p50 ${fmt.ms(median(streamPage))} → ${fmt.ratio(median(streamPage) / median(cold))} slower than the unanalysed page`,
  );

  const filters: number[] = [];
  let hits = 0;
  for (let k = 0; k < 5; k++) {
    t0 = performance.now();
    await engine.setQuery(k + 1, { filter: FILTER, search: '' });
    filters.push((performance.now() - t0) / 1000);
    hits = engine.status().view;
    await engine.setQuery(100 + k, { filter: '', search: '' });
  }
  const streams: number[] = [];
  let streamHits = 0;
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    streamHits = await streamFilter(path);
    streams.push((performance.now() - t0) / 1000);
  }
  if (streamHits !== hits) throw new Error(`the filter found ${hits} rows, the line stream ${streamHits}`);
  report(
    lines,
    `filter \`${FILTER}\` over all ${status.total} rows (${hits} match): ${fmt.ms(median(filters))} vs a line stream + JSON.parse ${fmt.ms(median(streams))} → ${fmt.ratio(median(streams) / median(filters))} faster`,
  );
  t0 = performance.now();
  await engine.setQuery(1000, { filter: '', search: 'zebra quantum' });
  const searchS = (performance.now() - t0) / 1000;
  report(lines, `text search over the raw lines: ${searchS.toFixed(2)} s (${engine.status().view} rows)`);
  report(
    lines,
    `memory: the engine holds ${mb(heap1 - heap0)} of heap for the ${(status.total / 1e3).toFixed(1)}k-row table and index (${((heap1 - heap0) / status.total).toFixed(0)} bytes/row) of a 1 GB file; a page sent to the webview is 100 rows`,
  );
  await engine.close();
  return lines;
}
