/**
 * BM25 vs MiniSearch and wink-bm25-text-search on the same ≥ 100k-passage corpus with the same analyzer
 * (both peers accept a custom tokenizer): build time, query latency p50/p99, queries/s, memory per token.
 * Each engine runs in its own process. Goal: ≥ 20× MiniSearch's queries/s and ≤ 1/4 of its memory per token.
 */
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BENCH_DIR } from './data';
import { fmt, report, rng } from './util';

/** Wikipedia-like passages: ~100 words from a 60k-word vocabulary with a Zipf distribution, plus a title. */
async function corpus(n: number): Promise<{ corpus: string; queries: string }> {
  mkdirSync(BENCH_DIR, { recursive: true });
  const corpusPath = join(BENCH_DIR, `zipf-corpus-${n}.jsonl`);
  const queriesPath = join(BENCH_DIR, `zipf-queries-${n}.txt`);
  if (existsSync(corpusPath) && existsSync(queriesPath)) return { corpus: corpusPath, queries: queriesPath };
  const r = rng(42);
  const V = 60_000;
  const letters = 'abcdefghijklmnoprstuvwy';
  const vocab = Array.from({ length: V }, (_, i) => {
    let w = '';
    let x = i + 7;
    do {
      w += letters[x % letters.length];
      x = Math.floor(x / letters.length);
    } while (x > 0);
    return w + 'aeiou'[i % 5];
  });
  // Zipf(s = 1.07) by inverse CDF over precomputed weights.
  const cdf = new Float64Array(V);
  let acc = 0;
  for (let i = 0; i < V; i++) cdf[i] = acc += 1 / (i + 1) ** 1.07;
  const word = () => {
    const u = r() * acc;
    let lo = 0;
    let hi = V - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return vocab[lo]!;
  };
  const out = createWriteStream(corpusPath);
  for (let i = 0; i < n; i++) {
    const len = 60 + Math.floor(r() * 80);
    const text = Array.from({ length: len }, word).join(' ');
    const line = `${JSON.stringify({ id: String(i), contents: `"${word()} ${word()}"\n${text}` })}\n`;
    if (!out.write(line)) await new Promise<void>((res) => out.once('drain', () => res()));
  }
  await new Promise<void>((res) => out.end(() => res()));
  writeFileSync(queriesPath, `${Array.from({ length: 2000 }, () => Array.from({ length: 3 + Math.floor(r() * 6) }, word).join(' ')).join('\n')}\n`);
  return { corpus: corpusPath, queries: queriesPath };
}

interface Result {
  engine: string;
  buildSeconds: number;
  p50: number;
  p99: number;
  qps: number;
  heapBytes: number;
  rssBytes: number;
  tokens: number;
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_PASSAGES ?? 100_000);
  const { corpus: c, queries } = await corpus(n);
  const work = join(BENCH_DIR, 'bm25-work');
  mkdirSync(work, { recursive: true });
  const results: Result[] = [];
  for (const engine of (process.env.SAS_BENCH_ENGINES ?? 'ours,minisearch,wink').split(',')) {
    try {
      const out = execFileSync(process.execPath, ['--expose-gc', '--max-old-space-size=16000', '-r', join(__dirname, '..', 'test', 'register.cjs'), join(__dirname, 'bm25-engine.ts'), engine, c, queries, work], { encoding: 'utf8', maxBuffer: 1 << 20 });
      results.push(JSON.parse(out.trim().split('\n').pop()!));
    } catch (e) {
      report(lines, `${engine}: failed (${(e as Error).message.split('\n')[0]})`);
    }
  }
  const ours = results.find((r) => r.engine === 'ours');
  if (!ours) return lines;
  report(lines, `corpus: ${n.toLocaleString()} passages, ${ours.tokens.toLocaleString()} tokens after analysis; 2,000 queries; same analyzer for all`);
  for (const r of results) {
    report(
      lines,
      `${r.engine.padEnd(10)} build ${r.buildSeconds.toFixed(1)} s · p50 ${fmt.ms(r.p50)} · p99 ${fmt.ms(r.p99)} · ${r.qps.toFixed(0)} queries/s · ${(r.heapBytes / r.tokens).toFixed(1)} bytes/token (heap+buffers), RSS ${(r.rssBytes / 2 ** 20).toFixed(0)} MiB`,
    );
  }
  for (const peer of results.filter((r) => r !== ours)) {
    report(lines, `vs ${peer.engine}: ${fmt.ratio(ours.qps / peer.qps)} its queries/s, ${fmt.ratio(ours.heapBytes / ours.tokens / (peer.heapBytes / peer.tokens))} its memory per token, ${fmt.ratio(peer.buildSeconds / ours.buildSeconds)} faster build`);
  }
  return lines;
}
