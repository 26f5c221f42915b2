/** Rollout store: index build vs `wc -l` on the same 1 GB file; row access after indexing. */
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { JsonlFile } from '../src/core/store/jsonl';
import { RolloutStore } from '../src/core/store/rollouts';
import { rolloutFile } from './data';
import { fmt, median, quantile, report, rng, versus } from './util';

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const path = await rolloutFile(1e9, 'rollouts-1gb.jsonl');
  const size = statSync(path).size;
  let rows = 0;
  const [ours, wc] = await versus(
    [
      'index',
      async () => {
        const f = await JsonlFile.open(path);
        rows = f.count;
        await f.close();
      },
    ],
    [
      'wc -l',
      () => {
        const r = spawnSync('wc', ['-l', path], { encoding: 'utf8' });
        if (r.status !== 0) throw new Error(r.stderr);
      },
    ],
    5,
  );
  report(
    lines,
    `index build, ${(size / 1e9).toFixed(2)} GB, ${rows} rows: ${fmt.mbps(size, ours.seconds)} vs wc -l ${fmt.mbps(size, wc.seconds)} → ${fmt.ratio(wc.seconds / ours.seconds)} of wc -l's speed (goal ≥ 0.5×)`,
  );

  const store = await RolloutStore.open(path);
  report(
    lines,
    `index memory: ${(store.indexBytes / rows).toFixed(1)} bytes/row (${(store.indexBytes / 1e6).toFixed(1)} MB for ${rows} rows, ${((store.indexBytes / size) * 100).toFixed(2)}% of the file)`,
  );
  const r = rng(11);
  const samples: number[] = [];
  for (let k = 0; k < 2000; k++) {
    const i = Math.floor(r() * rows);
    const t0 = performance.now();
    await store.rawRows(i, i + 1);
    samples.push((performance.now() - t0) / 1000);
  }
  const parsed: number[] = [];
  for (let k = 0; k < 500; k++) {
    const i = Math.floor(r() * rows);
    const t0 = performance.now();
    await store.row(i);
    parsed.push((performance.now() - t0) / 1000);
  }
  const pages: number[] = [];
  for (let k = 0; k < 200; k++) {
    const i = Math.floor(r() * (rows - 100));
    const t0 = performance.now();
    await store.rawRows(i, i + 100);
    pages.push((performance.now() - t0) / 1000);
  }
  report(
    lines,
    `random row (raw text): p50 ${fmt.us(median(samples))}, p99 ${fmt.us(quantile(samples, 0.99))}; parsed + validated: p50 ${fmt.us(median(parsed))}; page of 100 rows: p50 ${fmt.ms(median(pages))}`,
  );
  await store.close();
  return lines;
}
