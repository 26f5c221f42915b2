/** Benchmark helpers: repeated timed rounds, medians, and ratio lines against a peer measured in the same run. */
import { performance } from 'node:perf_hooks';

export interface Timing {
  name: string;
  /** Median seconds per round. */
  seconds: number;
  rounds: number[];
}

/** Runs `fn` `rounds` times after one warm-up, alternating with nothing else; returns the median. */
export async function time(name: string, fn: () => unknown | Promise<unknown>, rounds = 5): Promise<Timing> {
  await fn();
  const samples: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    await fn();
    samples.push((performance.now() - t0) / 1000);
  }
  return { name, seconds: median(samples), rounds: samples };
}

/** Times two contenders in interleaved rounds (A B A B …) so drift affects both alike. */
export async function versus(
  a: [string, () => unknown],
  b: [string, () => unknown],
  rounds = 7,
): Promise<[Timing, Timing]> {
  await a[1]();
  await b[1]();
  const sa: number[] = [];
  const sb: number[] = [];
  for (let r = 0; r < rounds; r++) {
    let t0 = performance.now();
    await a[1]();
    sa.push((performance.now() - t0) / 1000);
    t0 = performance.now();
    await b[1]();
    sb.push((performance.now() - t0) / 1000);
  }
  return [
    { name: a[0], seconds: median(sa), rounds: sa },
    { name: b[0], seconds: median(sb), rounds: sb },
  ];
}

export function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

export const fmt = {
  mbps: (bytes: number, seconds: number) => `${(bytes / 1e6 / seconds).toFixed(1)} MB/s`,
  ms: (s: number) => `${(s * 1000).toFixed(2)} ms`,
  us: (s: number) => `${(s * 1e6).toFixed(1)} µs`,
  ratio: (x: number) => `${x.toFixed(2)}×`,
};

/** Prints one result line: `name: value (ratio vs peer)`; and returns it for the summary. */
export function report(lines: string[], line: string): void {
  lines.push(line);
  console.log(`  ${line}`);
}

/** A small seeded PRNG (mulberry32), so generated inputs are the same in every run. */
export { rng } from '../src/core/retrieval/random';
