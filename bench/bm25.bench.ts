/**
 * BM25 engines on the same corpus, the same queries, in the same run, each in its own process:
 *   - ours (block-max MaxScore over block postings), single-threaded, and its worker pool at 1 and 2 workers;
 *   - Apache Lucene 9.12 — the oracle's Java program in its timing mode (test/oracle/lucene, `bench`): the same
 *     analyzer chain, BM25Similarity(0.9, 0.4), an index on disk merged to one segment, a single-threaded
 *     IndexSearcher, top 10 with the stored ids of the hits; the peer a user would pick (Pyserini is Lucene);
 *   - MiniSearch and wink-bm25-text-search with our analyzer (both accept a custom tokenizer).
 * Two query sets (bm25-corpus.ts): `zipf` (3–8 Zipfian words) and `nq` (natural-question-like). Prints build
 * time, build peak RSS, latency, queries/s, memory per token, `vs <peer>: N× its queries/s`, and whether our
 * top-10 scores equal Lucene's query for query.
 *   SAS_BENCH_PASSAGES (default 100,000), SAS_BENCH_ENGINES (default ours,lucene,minisearch,wink),
 *   SAS_BENCH_WORKERS (worker counts for the pool, default 1,2; empty: skip).
 * Goals: ≥ 20× MiniSearch's queries/s and ≤ 1/4 of its memory per token; ≥ 1× Lucene's queries/s at 1M passages.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { bm25Inputs, corpusTsv } from './bm25-corpus';
import { BENCH_DIR } from './data';
import { fmt, report } from './util';

interface SetResult {
  p50: number;
  p99: number;
  qps: number;
}

interface Result {
  engine: string;
  buildSeconds: number;
  buildPeakRssBytes: number;
  /** Heap + array buffers after loading (not for Lucene). */
  heapBytes?: number;
  rssBytes?: number;
  tokens?: number;
  indexBytes?: number;
  sets: Record<string, SetResult>;
  pool?: Record<string, Record<string, { qps: number; rssBytes: number }>>;
}

const ORACLE = join(__dirname, '..', 'test', 'oracle', 'lucene');

/** Lucene: build its index (fresh every run), then one JVM per query set. */
function lucene(tsv: string, sets: Record<string, string>, work: string): Result {
  if (!existsSync(join(ORACLE, 'target', 'classes', 'oracle', 'Oracle.class'))) throw new Error('the Lucene program is not built: run `bash scripts/setup.sh --test`');
  const dir = join(work, 'lucene-index');
  rmSync(dir, { recursive: true, force: true });
  const result: Result = { engine: 'lucene', buildSeconds: 0, buildPeakRssBytes: 0, sets: {} };
  for (const [name, file] of Object.entries(sets)) {
    const out = execFileSync('java', ['-cp', `${join(ORACLE, 'target', 'classes')}:${join(ORACLE, 'target', 'lib', '*')}`, 'oracle.Oracle', 'bench', tsv, file, dir, '10', join(work, `lucene-${name}.tsv`)], {
      encoding: 'utf8',
      maxBuffer: 1 << 20,
    });
    const r = JSON.parse(out.trim().split('\n').pop()!) as SetResult & { buildSeconds: number; buildPeakRssBytes: number; indexBytes: number; docs: number };
    if (r.buildSeconds >= 0) {
      result.buildSeconds = r.buildSeconds;
      result.buildPeakRssBytes = r.buildPeakRssBytes;
    }
    result.indexBytes = r.indexBytes;
    result.sets[name] = { p50: r.p50, p99: r.p99, qps: r.qps };
  }
  return result;
}

/**
 * Per query: whether our top-10 scores equal Lucene's (1e-5 relative), whether the id lists are identical, and
 * whether they hold the same documents up to the order of tied scores (and which of the docs tied at the
 * 10th score made the cut: Lucene breaks ties by internal doc number, ours — Anserini's order — by id).
 */
function agreement(work: string, set: string): { queries: number; scores: number; ids: number; upToTies: number } {
  const read = (engine: string) => {
    const m = new Map<number, { id: string; score: number }[]>();
    for (const line of readFileSync(join(work, `${engine}-${set}.tsv`), 'utf8').trim().split('\n')) {
      if (!line) continue;
      const [q, , id, score] = line.split('\t');
      const list = m.get(Number(q)) ?? [];
      list.push({ id: id!, score: Number(score) });
      m.set(Number(q), list);
    }
    return m;
  };
  const ours = read('ours');
  const theirs = read('lucene');
  let scores = 0;
  let ids = 0;
  let upToTies = 0;
  const groups = (hits: { id: string; score: number }[]) => {
    const m = new Map<number, string[]>();
    for (const h of hits) m.set(h.score, [...(m.get(h.score) ?? []), h.id]);
    return m;
  };
  const n = Math.max(ours.size, theirs.size);
  for (let q = 0; q < n; q++) {
    const a = ours.get(q) ?? [];
    const b = theirs.get(q) ?? [];
    if (a.length === b.length && a.every((h, i) => Math.abs(h.score - b[i]!.score) <= 1e-5 * Math.abs(b[i]!.score))) scores++;
    if (a.length === b.length && a.every((h, i) => h.id === b[i]!.id)) ids++;
    const ga = groups(a);
    const gb = groups(b);
    const lowest = Math.min(...a.map((h) => h.score));
    if (a.length === b.length && [...ga].every(([score, list]) => score === lowest || (gb.get(score)?.slice().sort().join() === list.slice().sort().join()))) upToTies++;
  }
  return { queries: n, scores, ids, upToTies };
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_PASSAGES ?? 100_000);
  const { corpus, queries } = await bm25Inputs(n);
  const work = join(BENCH_DIR, `bm25-work-${n}`);
  mkdirSync(work, { recursive: true });
  const sets = Object.entries(queries).map(([name, file]) => `${name}=${file}`).join(',');
  const workers = process.env.SAS_BENCH_WORKERS ?? '1,2';
  const results: Result[] = [];
  for (const engine of (process.env.SAS_BENCH_ENGINES ?? 'ours,lucene,minisearch,wink').split(',')) {
    try {
      if (engine === 'lucene') {
        results.push(lucene(await corpusTsv(corpus), queries, work));
        continue;
      }
      const args = ['--expose-gc', '--max-old-space-size=16000', '-r', join(__dirname, '..', 'test', 'register.cjs'), join(__dirname, 'bm25-engine.ts'), engine, corpus, sets, work, ...(engine === 'ours' && workers ? [workers] : [])];
      const out = execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 20 });
      results.push(JSON.parse(out.trim().split('\n').pop()!));
    } catch (e) {
      report(lines, `${engine}: failed (${(e as Error).message.split('\n')[0]})`);
    }
  }
  const ours = results.find((r) => r.engine === 'ours');
  if (!ours) return lines;
  report(lines, `corpus: ${n.toLocaleString()} passages, ${ours.tokens!.toLocaleString()} tokens after analysis; 2,000 queries a set (zipf, nq); top 10; same analyzer for all`);
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  for (const r of results) {
    const mem = r.heapBytes !== undefined ? ` · ${(r.heapBytes / r.tokens!).toFixed(1)} bytes/token loaded (heap+buffers), RSS ${mib(r.rssBytes!)}` : ` · index ${mib(r.indexBytes ?? 0)} on disk`;
    report(lines, `${r.engine.padEnd(10)} build ${r.buildSeconds.toFixed(1)} s, peak RSS ${mib(r.buildPeakRssBytes)}${mem}`);
    for (const [set, s] of Object.entries(r.sets)) report(lines, `${r.engine.padEnd(10)} ${set.padEnd(4)} p50 ${fmt.ms(s.p50)} · p99 ${fmt.ms(s.p99)} · ${s.qps.toFixed(0)} queries/s`);
  }
  for (const peer of results.filter((r) => r !== ours)) {
    const ratios = Object.keys(ours.sets)
      .filter((set) => peer.sets[set])
      .map((set) => `${set} ${fmt.ratio(ours.sets[set]!.qps / peer.sets[set]!.qps)}`)
      .join(', ');
    const memory = peer.heapBytes !== undefined ? `, ${fmt.ratio(ours.heapBytes! / ours.tokens! / (peer.heapBytes / peer.tokens!))} its memory per token` : '';
    report(lines, `vs ${peer.engine}: ${ratios} its queries/s${memory}, ${fmt.ratio(peer.buildSeconds / ours.buildSeconds)} faster build`);
    if (peer.engine === 'lucene') {
      for (const set of Object.keys(ours.sets)) {
        const a = agreement(work, set);
        report(lines, `vs lucene (${set}): top-10 scores equal Lucene's on ${a.scores}/${a.queries} queries; id lists identical on ${a.ids}, the same up to the order of tied scores on ${a.upToTies} (Lucene orders ties by internal doc, ours by id)`);
      }
    }
  }
  for (const [set, byWorkers] of Object.entries(ours.pool ?? {})) {
    const counts = Object.keys(byWorkers).sort((a, b) => Number(a) - Number(b));
    const one = byWorkers[counts[0]!]!;
    report(
      lines,
      `ours pool (${set}, batches of 512 with contents): ${counts.map((w) => `${w} worker${w === '1' ? '' : 's'} ${byWorkers[w]!.qps.toFixed(0)} queries/s (${fmt.ratio(byWorkers[w]!.qps / one.qps)}, RSS ${mib(byWorkers[w]!.rssBytes)})`).join(' · ')}`,
    );
  }
  return lines;
}
