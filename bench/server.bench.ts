/**
 * The env server under load, as a separate process on loopback: BM25 over the demo corpus, 3 queries a
 * request (Search-R1's batches are larger; this is per-request overhead-heavy), top 3. Queries/s for one
 * client and for 32 concurrent clients, and the latency of the concurrent run.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fmt, median, quantile, report } from './util';

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const root = join(__dirname, '..');
  const child = spawn(process.execPath, ['-r', join(root, 'test', 'register.cjs'), join(root, 'src', 'server', 'main.ts'), '--port', '0'], { stdio: ['ignore', 'pipe', 'ignore'] });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d;
      if (buf.includes('\n')) resolve(JSON.parse(buf.split('\n')[0]!).port);
    });
    child.once('exit', () => reject(new Error('server exited')));
  });
  try {
    const words = 'who founded the observatory museum river town born province author wrote library academy guild'.split(' ');
    const query = (i: number) => [0, 1, 2].map((j) => `${words[(i + j) % words.length]} ${words[(i * 7 + j) % words.length]} ${words[(i * 3) % words.length]}`);
    const call = async (i: number) => {
      const res = await fetch(`http://127.0.0.1:${port}/retrieve`, { method: 'POST', body: JSON.stringify({ queries: query(i), topk: 3, return_scores: true }) });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      await res.json();
    };
    for (let i = 0; i < 200; i++) await call(i); // warm-up
    let t = performance.now();
    const serialN = 1000;
    for (let i = 0; i < serialN; i++) await call(i);
    const serial = (serialN * 3) / ((performance.now() - t) / 1000);
    const clients = 32;
    const per = 100;
    const lat: number[] = [];
    t = performance.now();
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let k = 0; k < per; k++) {
          const t0 = performance.now();
          await call(c * per + k);
          lat.push((performance.now() - t0) / 1000);
        }
      }),
    );
    const concurrent = (clients * per * 3) / ((performance.now() - t) / 1000);
    report(lines, `one client: ${serial.toFixed(0)} queries/s; ${clients} concurrent clients: ${concurrent.toFixed(0)} queries/s (${fmt.ratio(concurrent / serial)}), request latency p50 ${fmt.ms(median(lat))}, p99 ${fmt.ms(quantile(lat, 0.99))}; no errors`);
  } finally {
    child.kill('SIGTERM');
  }
  return lines;
}
