/**
 * The env server under load, as a separate process on loopback, BM25 over the demo corpus, at 1 and 2 search
 * workers (`--workers`): queries/s for one client and for 32 concurrent clients sending 3 queries a request
 * (per-request overhead-heavy), with the latency of the concurrent run; and for Search-R1-sized requests of 512
 * queries (one turn of a training step is batch × n = 512 × 5 of them), 4 clients.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { envServer } from './processes';
import { fmt, median, quantile, report } from './util';

async function measure(
  workers: number,
): Promise<{ serial: number; concurrent: number; p50: number; p99: number; batched: number }> {
  const root = join(__dirname, '..');
  const env = await envServer(root, ['--workers', String(workers)]);
  try {
    const words =
      'who founded the observatory museum river town born province author wrote library academy guild'.split(' ');
    const question = (i: number, j: number) =>
      `${words[(i + j) % words.length]} ${words[(i * 7 + j) % words.length]} ${words[(i * 3) % words.length]}`;
    const call = async (queries: string[]) => {
      const res = await fetch(`${env.url}/retrieve`, {
        method: 'POST',
        body: JSON.stringify({ queries, topk: 3, return_scores: true }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      await res.json();
    };
    const small = (i: number) => call([0, 1, 2].map((j) => question(i, j)));
    for (let i = 0; i < 200; i++) await small(i); // warm-up
    let t = performance.now();
    const serialN = 1000;
    for (let i = 0; i < serialN; i++) await small(i);
    const serial = (serialN * 3) / ((performance.now() - t) / 1000);
    const clients = 32;
    const per = 100;
    const lat: number[] = [];
    t = performance.now();
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let k = 0; k < per; k++) {
          const t0 = performance.now();
          await small(c * per + k);
          lat.push((performance.now() - t0) / 1000);
        }
      }),
    );
    const concurrent = (clients * per * 3) / ((performance.now() - t) / 1000);
    const big = (i: number) => call(Array.from({ length: 512 }, (_, j) => question(i, j)));
    await big(0);
    t = performance.now();
    await Promise.all(
      Array.from({ length: 4 }, async (_, c) => {
        for (let k = 0; k < 5; k++) await big(c * 5 + k);
      }),
    );
    const batched = (4 * 5 * 512) / ((performance.now() - t) / 1000);
    return { serial, concurrent, p50: median(lat), p99: quantile(lat, 0.99), batched };
  } finally {
    env.stop();
  }
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const byWorkers = new Map<number, Awaited<ReturnType<typeof measure>>>();
  for (const workers of [1, 2]) {
    const m = await measure(workers);
    byWorkers.set(workers, m);
    report(
      lines,
      `--workers ${workers}: one client ${m.serial.toFixed(0)} queries/s; 32 concurrent clients ${m.concurrent.toFixed(0)} queries/s (${fmt.ratio(m.concurrent / m.serial)}), request latency p50 ${fmt.ms(m.p50)}, p99 ${fmt.ms(m.p99)}; requests of 512 queries ${m.batched.toFixed(0)} queries/s; no errors`,
    );
  }
  const [one, two] = [byWorkers.get(1)!, byWorkers.get(2)!];
  report(
    lines,
    `2 workers vs 1: ${fmt.ratio(two.concurrent / one.concurrent)} the queries/s of 32 small-request clients, ${fmt.ratio(two.batched / one.batched)} with 512-query requests`,
  );
  return lines;
}
