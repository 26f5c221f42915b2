/**
 * One BM25 engine measured in its own process (so heap and RSS belong to it alone):
 *   node -r ./test/register.cjs bench/bm25-engine.ts <ours|minisearch|wink> <corpus.jsonl> <queries.txt> <workdir>
 * Prints one JSON line: build seconds, query latencies, queries/s, memory after a GC, tokens indexed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import MiniSearch from 'minisearch';
import { DefaultEnglishAnalyzer } from '../src/core/retrieval/analyzer';
import { Bm25Index } from '../src/core/retrieval/bm25';
import { buildBm25Index, readCorpus } from '../src/core/retrieval/corpus';
import { quantile, median } from './util';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const winkBm25 = require('wink-bm25-text-search');

async function main() {
  const [engine, corpus, queriesFile, work] = process.argv.slice(2) as [string, string, string, string];
  const queries = readFileSync(queriesFile, 'utf8').trim().split('\n');
  const analyzer = new DefaultEnglishAnalyzer();
  const gc = () => (globalThis as { gc?: () => void }).gc?.();
  gc();
  const base = process.memoryUsage();
  let search: (q: string) => unknown;
  let tokens = 0;
  const t0 = performance.now();
  if (engine === 'ours') {
    const meta = await buildBm25Index(corpus, join(work, 'ours-index'));
    tokens = meta.totalTokens;
    gc();
    const index = await Bm25Index.load(join(work, 'ours-index'));
    search = (q) => index.search(q, { k: 10 });
  } else if (engine === 'minisearch') {
    const ms = new MiniSearch<{ id: string; contents: string }>({
      fields: ['contents'],
      idField: 'id',
      tokenize: (text) => analyzer.terms(text),
      processTerm: (t) => t,
    });
    for await (const d of readCorpus(corpus)) {
      ms.add(d);
      tokens += analyzer.terms(d.contents).length;
    }
    search = (q) => ms.search(q).slice(0, 10);
  } else if (engine === 'wink') {
    const w = winkBm25();
    w.defineConfig({ fldWeights: { contents: 1 }, bm25Params: { k1: 0.9, b: 0.4 } });
    w.definePrepTasks([(text: string) => analyzer.terms(text)]);
    for await (const d of readCorpus(corpus)) {
      w.addDoc({ contents: d.contents }, d.id);
      tokens += analyzer.terms(d.contents).length;
    }
    w.consolidate();
    search = (q) => w.search(q, 10);
  } else throw new Error(`unknown engine ${engine}`);
  const buildSeconds = (performance.now() - t0) / 1000;
  gc();
  const mem = process.memoryUsage();
  for (const q of queries.slice(0, 50)) search(q); // warm-up
  const lat: number[] = [];
  const q0 = performance.now();
  for (const q of queries) {
    const t = performance.now();
    search(q);
    lat.push((performance.now() - t) / 1000);
  }
  const total = (performance.now() - q0) / 1000;
  const heap = mem.heapUsed - base.heapUsed + (mem.arrayBuffers - base.arrayBuffers);
  console.log(JSON.stringify({ engine, buildSeconds, p50: median(lat), p99: quantile(lat, 0.99), qps: queries.length / total, heapBytes: heap, rssBytes: mem.rss, tokens }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
