/**
 * One BM25 engine measured in its own process (so heap and RSS belong to it alone):
 *   node -r ./test/register.cjs bench/bm25-engine.ts <ours|minisearch|wink> <corpus.jsonl> <set=queries.txt,…> <workdir> [workers,…]
 * Builds, then runs each query set once to warm up and once timed (top 10 with the ids of the hits, as
 * Lucene's run fetches its stored ids; MiniSearch and wink, at hundreds of ms a query, time the first 200), and writes each set's results (qid TAB rank TAB id TAB score) to
 * <workdir>/<engine>-<set>.tsv. For ours it then measures the worker pool (bm25Pool.ts) at each worker count
 * over the same queries in Search-R1-sized batches, hits with their stored contents as /retrieve returns them.
 * Prints one JSON line.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import MiniSearch from 'minisearch';
import { DefaultEnglishAnalyzer } from '../src/core/retrieval/analyzer';
import { Bm25Index } from '../src/core/retrieval/bm25';
import { Bm25Pool } from '../src/core/retrieval/bm25Pool';
import { buildBm25Index, readCorpus } from '../src/core/retrieval/corpus';
import { median, quantile } from './util';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const winkBm25 = require('wink-bm25-text-search');

/** Queries per pool call: one Search-R1 turn is batch × n = 512 × 5 queries; 512 is a slice of it. */
const POOL_BATCH = 512;

async function main() {
  const [engine, corpus, sets, work, workerCounts] = process.argv.slice(2) as [string, string, string, string, string | undefined];
  const querySets = sets.split(',').map((s) => {
    const [name, file] = s.split('=') as [string, string];
    return { name, queries: readFileSync(file, 'utf8').trim().split('\n') };
  });
  const analyzer = new DefaultEnglishAnalyzer();
  const gc = () => (globalThis as { gc?: () => void }).gc?.();
  gc();
  const base = process.memoryUsage();
  let search: (q: string) => { id: string; score: number }[];
  let tokens = 0;
  let index: Bm25Index | undefined;
  const indexDir = join(work, 'ours-index');
  const t0 = performance.now();
  if (engine === 'ours') {
    const meta = await buildBm25Index(corpus, indexDir);
    tokens = meta.totalTokens;
  } else if (engine === 'minisearch') {
    const ms = new MiniSearch<{ id: string; contents: string }>({ fields: ['contents'], idField: 'id', tokenize: (text) => analyzer.terms(text), processTerm: (t) => t });
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
    search = (q) => (w.search(q, 10) as [string, number][]).map(([id, score]) => ({ id, score }));
  } else throw new Error(`unknown engine ${engine}`);
  const buildSeconds = (performance.now() - t0) / 1000;
  const buildPeakRssBytes = process.resourceUsage().maxRSS * 1024;
  if (engine === 'ours') {
    gc();
    index = await Bm25Index.load(indexDir);
    const loaded = index;
    search = (q) => loaded.search(q, { k: 10 });
  }
  gc();
  const mem = process.memoryUsage();
  const results: Record<string, { p50: number; p99: number; qps: number }> = {};
  for (const set of querySets) {
    const { name } = set;
    // The slow peers (hundreds of ms a query) get 200 queries and a short warm-up; ours a full warm-up pass, as Lucene's JIT gets.
    const queries = engine === 'ours' ? set.queries : set.queries.slice(0, 200);
    for (const q of engine === 'ours' ? queries : queries.slice(0, 20)) search!(q);
    const lat: number[] = [];
    const out: string[] = [];
    const q0 = performance.now();
    queries.forEach((q, i) => {
      const t = performance.now();
      const hits = search(q);
      lat.push((performance.now() - t) / 1000);
      hits.forEach((h, r) => out.push(`${i}\t${r + 1}\t${h.id}\t${h.score}`));
    });
    const total = (performance.now() - q0) / 1000;
    writeFileSync(join(work, `${engine}-${name}.tsv`), `${out.join('\n')}\n`);
    results[name] = { p50: median(lat), p99: quantile(lat, 0.99), qps: queries.length / total };
  }
  const heap = mem.heapUsed - base.heapUsed + (mem.arrayBuffers - base.arrayBuffers);
  const pool: Record<string, Record<string, { qps: number; rssBytes: number }>> = {};
  if (engine === 'ours' && workerCounts) {
    index!.close();
    for (const workers of workerCounts.split(',').map(Number)) {
      const p = await Bm25Pool.open(indexDir, { workers });
      for (const { name, queries } of querySets) {
        const run = async () => {
          for (let s = 0; s < queries.length; s += POOL_BATCH) await p.search(queries.slice(s, s + POOL_BATCH), 10);
        };
        await run(); // warm-up
        const t = performance.now();
        await run();
        (pool[name] ??= {})[workers] = { qps: queries.length / ((performance.now() - t) / 1000), rssBytes: process.memoryUsage().rss };
      }
      await p.close();
    }
  }
  console.log(JSON.stringify({ engine, buildSeconds, buildPeakRssBytes, heapBytes: heap, rssBytes: mem.rss, tokens, sets: results, pool }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
