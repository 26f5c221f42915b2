/**
 * One BM25 engine in its own process (so heap and RSS belong to it alone), driven over stdin so that the bench can
 * interleave engines pass by pass (on a shared machine, load drifts over minutes):
 *   node -r ./test/register.cjs bench/bm25-engine.ts <ours|minisearch|wink> <corpus.jsonl> <workdir>
 * Builds, prints one JSON line (build time and peak RSS, memory after loading, tokens), then answers commands, one
 * JSON line each:
 *   search NAME QUERIES RESULTS   every query once, timed (wall clock, and this process's CPU time), top 10 with the
 *                                 ids of the hits (as Lucene's run reads
 *                                 its ids); the first time a set is named, two untimed passes first (Lucene's JIT
 *                                 gets the same); MiniSearch and wink, at hundreds of ms a query, take the first 200
 *                                 and 20 to warm up. Writes qid TAB rank TAB id TAB score to RESULTS.
 *   pool WORKERS NAME QUERIES     ours only: the worker pool (bm25Pool.ts) over the same index, in Search-R1-sized
 *                                 batches of 512 with the hits' contents as /retrieve returns them; queries/s, RSS,
 *                                 and CPU seconds per query on the workers and on the main thread.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
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
  const [engine, corpus, work] = process.argv.slice(2) as [string, string, string];
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
    tokens = (await buildBm25Index(corpus, indexDir)).totalTokens;
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
  const heapBytes = mem.heapUsed - base.heapUsed + (mem.arrayBuffers - base.arrayBuffers);
  const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);
  say({ ready: true, engine, buildSeconds, buildPeakRssBytes, heapBytes, rssBytes: mem.rss, tokens });

  const warm = new Set<string>();
  let pool: Bm25Pool | undefined;
  for await (const line of createInterface({ input: process.stdin })) {
    const [command, ...args] = line.split(' ');
    if (command === 'search') {
      const [name, file, results] = args as [string, string, string];
      const all = readFileSync(file, 'utf8').trim().split('\n');
      const slow = engine !== 'ours';
      const queries = slow ? all.slice(0, 200) : all;
      if (!warm.has(name)) {
        warm.add(name);
        for (const q of slow ? queries.slice(0, 20) : [...queries, ...queries]) search!(q);
      }
      const lat: number[] = [];
      const out: string[] = [];
      const cpu0 = process.cpuUsage();
      const q0 = performance.now();
      queries.forEach((q, i) => {
        const t = performance.now();
        const hits = search(q);
        lat.push((performance.now() - t) / 1000);
        hits.forEach((h, r) => out.push(`${i}\t${r + 1}\t${h.id}\t${h.score}`));
      });
      const total = (performance.now() - q0) / 1000;
      const used = process.cpuUsage(cpu0);
      const cpu = (used.user + used.system) / 1e6;
      writeFileSync(results, `${out.join('\n')}\n`);
      say({
        set: name,
        p50: median(lat),
        p99: quantile(lat, 0.99),
        qps: queries.length / total,
        cpuQps: queries.length / cpu,
      });
    } else if (command === 'pool' && engine === 'ours') {
      const [workers, name, file] = [Number(args[0]), args[1]!, args[2]!];
      if (index) {
        // The pool loads its own shared copy: drop the single-thread one first, so that RSS is the pool's.
        index.close();
        index = undefined;
        search = () => [];
        gc();
      }
      if (pool?.workers !== workers) {
        await pool?.close();
        gc(); // the closed pool's index, before RSS is read with the new one
        pool = await Bm25Pool.open(indexDir, { workers });
      }
      const queries = readFileSync(file, 'utf8').trim().split('\n');
      const run = async () => {
        for (let s = 0; s < queries.length; s += POOL_BATCH) await pool!.search(queries.slice(s, s + POOL_BATCH), 10);
      };
      await run(); // warm-up
      const cpu0 = await pool.cpuSeconds();
      const t = performance.now();
      let done = 0;
      do {
        await run();
        done += queries.length;
      } while (performance.now() - t < 3000); // CPU times tick in 10 ms: long enough for a few hundred ticks
      const seconds = (performance.now() - t) / 1000;
      const cpu1 = await pool.cpuSeconds();
      // CPU time per query, on the workers and on the main thread (cutting batches, reassembling results): unlike
      // queries/s on a machine shared with others, these do not depend on how much of a core each thread got,
      // and they say how the pool scales with cores (each worker's cost) and where it stops (the main thread's).
      const workerCpu =
        cpu1.workers.reduce((sum: number, x, i) => sum + (x ?? NaN) - (cpu0.workers[i] ?? NaN), 0) / done;
      const mainCpu = ((cpu1.main ?? NaN) - (cpu0.main ?? NaN)) / done;
      say({ set: name, workers, qps: done / seconds, rssBytes: process.memoryUsage().rss, workerCpu, mainCpu });
    } else throw new Error(`unknown command: ${line}`);
  }
  await pool?.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
