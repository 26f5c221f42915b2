/**
 * BM25 engines on the same corpus, the same queries, in the same run, each in its own process:
 *   - ours (block-max MaxScore over block postings), single-threaded, and its worker pool at 1 and 2 workers;
 *   - Apache Lucene 9.12 — the oracle's Java program in its timing mode (test/oracle/lucene, `bench`): the same
 *     analyzer chain, BM25Similarity(0.9, 0.4), an index on disk merged to one segment, a single-threaded
 *     IndexSearcher, top 10 with the stored ids of the hits; the peer a user would pick (Pyserini is Lucene);
 *   - MiniSearch and wink-bm25-text-search with our analyzer (both accept a custom tokenizer).
 * Two query sets (bm25-corpus.ts): `zipf` (3–8 Zipfian words) and `nq` (natural-question-like). The engines
 * stay resident and are driven pass by pass (bm25-engine.ts, the oracle's `bench` mode): each round runs every
 * set once on each engine, in alternating order, so that load drifting on a shared machine hits all alike; a
 * ratio is the median of the per-round ratios. Prints build time and peak RSS, latency, queries/s, memory per
 * token, `vs <peer>: N× its queries/s`, whether our top-10 scores equal Lucene's query for query, and the pool.
 *   SAS_BENCH_PASSAGES (default 100,000), SAS_BENCH_ENGINES (default ours,lucene,minisearch,wink),
 *   SAS_BENCH_ROUNDS (default 3; MiniSearch and wink run one), SAS_BENCH_WORKERS (pool sizes, default 1,2; empty:
 *   skip).
 * Goals: ≥ 20× MiniSearch's queries/s and ≤ 1/4 of its memory per token; ≥ 1× Lucene's queries/s at 1M passages.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { bm25Inputs, corpusTsv } from './bm25-corpus';
import { BENCH_DIR } from './data';
import { fmt, median, report } from './util';

interface SetResult {
  p50: number;
  p99: number;
  qps: number;
  /** Queries per CPU-second of the whole engine process (search, GC, JIT): what load from other jobs disturbs least. */
  cpuQps: number;
}

interface Ready {
  buildSeconds: number;
  buildPeakRssBytes: number;
  /** Heap + array buffers after loading (not for Lucene). */
  heapBytes?: number;
  rssBytes?: number;
  tokens?: number;
  indexBytes?: number;
}

interface PoolResult {
  qps: number;
  rssBytes: number;
  /** CPU seconds per query, all workers together, and on the main thread. */
  workerCpu: number;
  mainCpu: number;
}

const ORACLE = join(__dirname, '..', 'test', 'oracle', 'lucene');

/** An engine process answering one JSON line per command line. */
class Engine {
  private readonly lines: AsyncIterator<string>;
  ready!: Ready;
  /** Per set, every timed round. */
  readonly rounds = new Map<string, SetResult[]>();
  readonly pool = new Map<string, Map<number, PoolResult>>();

  constructor(
    readonly name: string,
    private readonly child: ChildProcess,
  ) {
    this.lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  }

  async next(): Promise<any> {
    const r = await this.lines.next();
    if (r.done) throw new Error(`${this.name} exited`);
    return JSON.parse(r.value);
  }

  async send(command: string): Promise<any> {
    this.child.stdin!.write(`${command}\n`);
    return this.next();
  }

  close(): void {
    this.child.stdin!.end();
  }

  static async start(name: string, corpus: string, work: string): Promise<Engine> {
    let child: ChildProcess;
    if (name === 'lucene') {
      if (!existsSync(join(ORACLE, 'target', 'classes', 'oracle', 'Oracle.class')))
        throw new Error('the Lucene program is not built: run `bash scripts/setup.sh --test`');
      const dir = join(work, 'lucene-index');
      rmSync(dir, { recursive: true, force: true }); // built fresh, in this run
      child = spawn(
        'java',
        [
          '-cp',
          `${join(ORACLE, 'target', 'classes')}:${join(ORACLE, 'target', 'lib', '*')}`,
          'oracle.Oracle',
          'bench',
          await corpusTsv(corpus),
          dir,
          '10',
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      );
    } else {
      child = spawn(
        process.execPath,
        [
          '--expose-gc',
          '--max-old-space-size=16000',
          '-r',
          join(__dirname, '..', 'test', 'register.cjs'),
          join(__dirname, 'bm25-engine.ts'),
          name,
          corpus,
          work,
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      );
    }
    const e = new Engine(name, child);
    e.ready = await e.next();
    return e;
  }
}

/**
 * Per query: whether our top-10 scores equal Lucene's (1e-5 relative), whether the id lists are identical, and
 * whether they hold the same documents up to the order of tied scores (and which of the docs tied at the
 * 10th score made the cut: Lucene breaks ties by internal doc number, ours — Anserini's order — by id).
 */
function agreement(work: string, set: string): { queries: number; scores: number; ids: number; upToTies: number } {
  const read = (engine: string) => {
    const m = new Map<number, { id: string; score: number }[]>();
    for (const line of readFileSync(join(work, `${engine}-${set}.tsv`), 'utf8')
      .trim()
      .split('\n')) {
      if (!line) continue;
      const [q, , id, score] = line.split('\t');
      const list = m.get(Number(q)) ?? [];
      list.push({ id: id!, score: Math.fround(Number(score)) }); // Java prints floats shortest, JS doubles
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
    if (a.length === b.length && a.every((h, i) => Math.abs(h.score - b[i]!.score) <= 1e-5 * Math.abs(b[i]!.score)))
      scores++;
    if (a.length === b.length && a.every((h, i) => h.id === b[i]!.id)) ids++;
    const ga = groups(a);
    const gb = groups(b);
    const lowest = Math.min(...a.map((h) => h.score));
    if (
      a.length === b.length &&
      [...ga].every(
        ([score, list]) => score === lowest || gb.get(score)?.slice().sort().join() === list.slice().sort().join(),
      )
    )
      upToTies++;
  }
  return { queries: n, scores, ids, upToTies };
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_PASSAGES ?? 100_000);
  const { corpus, queries } = await bm25Inputs(n);
  const work = join(BENCH_DIR, `bm25-work-${n}`);
  mkdirSync(work, { recursive: true });
  const rounds = Number(process.env.SAS_BENCH_ROUNDS ?? 3);
  const workers = (process.env.SAS_BENCH_WORKERS ?? '1,2').split(',').filter(Boolean).map(Number);
  const engines: Engine[] = [];
  try {
    // Built one after the other (build times are not measured against each other's load).
    for (const name of (process.env.SAS_BENCH_ENGINES ?? 'ours,lucene,minisearch,wink').split(',')) {
      try {
        engines.push(await Engine.start(name, corpus, work));
      } catch (e) {
        report(lines, `${name}: failed (${(e as Error).message.split('\n')[0]})`);
      }
    }
    const ours = engines.find((e) => e.name === 'ours');
    if (!ours) return lines;
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? engines : [...engines].reverse();
      for (const [set, file] of Object.entries(queries)) {
        for (const e of order) {
          if (r > 0 && e.name !== 'ours' && e.name !== 'lucene') continue; // the slow peers run one round
          const res = (await e.send(`search ${set} ${file} ${join(work, `${e.name}-${set}.tsv`)}`)) as SetResult;
          e.rounds.set(set, [...(e.rounds.get(set) ?? []), res]);
        }
      }
    }
    for (const w of workers) {
      for (const [set, file] of Object.entries(queries)) {
        const res = await ours.send(`pool ${w} ${set} ${file}`);
        if (!ours.pool.has(set)) ours.pool.set(set, new Map());
        ours.pool.get(set)!.set(w, res);
      }
    }
    summarize(lines, n, ours, engines, work);
  } finally {
    for (const e of engines) e.close();
  }
  return lines;
}

/** The round whose queries/s is the median (its latencies go with it). */
function medianRound(rs: SetResult[]): SetResult {
  const sorted = [...rs].sort((a, b) => a.qps - b.qps);
  return sorted[(sorted.length - 1) >> 1]!;
}

function summarize(lines: string[], n: number, ours: Engine, engines: Engine[], work: string): void {
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  const o = ours.ready;
  report(
    lines,
    `corpus: ${n.toLocaleString()} passages, ${o.tokens!.toLocaleString()} tokens after analysis; 2,000 queries a set (zipf, nq); top 10; same analyzer for all`,
  );
  for (const e of engines) {
    const r = e.ready;
    const mem =
      r.heapBytes !== undefined
        ? ` · ${(r.heapBytes / r.tokens!).toFixed(1)} bytes/token loaded (heap+buffers), RSS ${mib(r.rssBytes!)}`
        : ` · index ${mib(r.indexBytes ?? 0)} on disk`;
    report(
      lines,
      `${e.name.padEnd(10)} build ${r.buildSeconds.toFixed(1)} s, peak RSS ${mib(r.buildPeakRssBytes)}${mem}`,
    );
    for (const [set, rs] of e.rounds) {
      const m = medianRound(rs);
      const range = rs.length > 1 ? ` (rounds: ${rs.map((x) => x.qps.toFixed(0)).join(', ')})` : '';
      const cpu = Number.isFinite(m.cpuQps) ? `, ${median(rs.map((x) => x.cpuQps)).toFixed(0)} a CPU-second` : '';
      report(
        lines,
        `${e.name.padEnd(10)} ${set.padEnd(4)} p50 ${fmt.ms(m.p50)} · p99 ${fmt.ms(m.p99)} · ${m.qps.toFixed(0)} queries/s${range}${cpu}`,
      );
    }
  }
  for (const peer of engines.filter((e) => e !== ours)) {
    const ratios = (key: 'qps' | 'cpuQps') =>
      [...ours.rounds.keys()]
        .filter((set) => peer.rounds.has(set))
        .map((set) => {
          const a = ours.rounds.get(set)!;
          const b = peer.rounds.get(set)!;
          const paired = b.map((x, i) => (a[i] ?? medianRound(a))[key] / x[key]);
          return `${set} ${fmt.ratio(median(paired))}${paired.length > 1 ? ` (rounds ${paired.map((x) => x.toFixed(2)).join(', ')})` : ''}`;
        })
        .join(', ');
    const p = peer.ready;
    const memory =
      p.heapBytes !== undefined
        ? `, ${fmt.ratio(o.heapBytes! / o.tokens! / (p.heapBytes / p.tokens!))} its memory per token`
        : '';
    report(
      lines,
      `vs ${peer.name}: ${ratios('qps')} its queries/s${memory}, ${fmt.ratio(p.buildSeconds / o.buildSeconds)} faster build`,
    );
    if (peer.name === 'lucene')
      report(
        lines,
        `vs lucene, per CPU-second of the engine process (search, GC, JIT): ${ratios('cpuQps')} its queries`,
      );
    if (peer.name === 'lucene') {
      for (const set of ours.rounds.keys()) {
        const a = agreement(work, set);
        report(
          lines,
          `vs lucene (${set}): top-10 scores equal Lucene's on ${a.scores}/${a.queries} queries; id lists identical on ${a.ids}, the same up to the order of tied scores on ${a.upToTies} (Lucene orders ties by internal doc, ours by id)`,
        );
      }
    }
  }
  for (const [set, byWorkers] of ours.pool) {
    const counts = [...byWorkers.keys()].sort((a, b) => a - b);
    const one = byWorkers.get(counts[0]!)!;
    report(
      lines,
      `ours pool (${set}, batches of 512 with contents): ${counts
        .map((w) => {
          const r = byWorkers.get(w)!;
          return `${w} worker${w === 1 ? '' : 's'} ${r.qps.toFixed(0)} queries/s (${fmt.ratio(r.qps / one.qps)}, RSS ${mib(r.rssBytes)}), CPU a query: workers ${fmt.us(r.workerCpu)}, main thread ${fmt.us(r.mainCpu)}`;
        })
        .join(' · ')}`,
    );
    // What N free cores give: N workers at the measured CPU cost a query each (the widest pool's, contention
    // included), until the main thread saturates.
    const widest = byWorkers.get(counts[counts.length - 1]!)!;
    const cores = 16;
    report(
      lines,
      `ours pool (${set}) on ${cores} free cores, from these CPU costs: min(${cores} / ${fmt.us(widest.workerCpu)}, 1 / ${fmt.us(widest.mainCpu)}) ≈ ${Math.min(cores / widest.workerCpu, 1 / widest.mainCpu).toFixed(0)} queries/s`,
    );
  }
}
