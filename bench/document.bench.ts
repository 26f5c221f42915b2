/** The editor's analysis of a 10 MB .traj file: a full parse vs the incremental re-parse after an edit. */
import { performance } from 'node:perf_hooks';
import { TrajectoryDocument } from '../src/core/tags/document';
import { makeRollouts } from './generate';
import { fmt, median, report } from './util';

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const parts: string[] = [];
  let size = 0;
  let i = 0;
  const pool = makeRollouts(500, { seed: 5 });
  while (size < 10e6) {
    const r = pool[i % pool.length]!;
    const t = `### trajectory ${i}\n${r.prompt}${r.response}\n`;
    parts.push(t);
    size += t.length;
    i++;
  }
  const text = parts.join('');
  const mid = Math.floor(parts.length / 2);
  const edited = (k: number) => {
    const p = [...parts];
    p[mid] = p[mid]!.replace('<answer>', `<answer> edit ${k}`);
    return p.join('');
  };
  const full: number[] = [];
  const incremental: number[] = [];
  const doc = new TrajectoryDocument();
  for (let k = 0; k < 7; k++) {
    let t0 = performance.now();
    const fresh = new TrajectoryDocument(text);
    fresh.diagnostics();
    full.push((performance.now() - t0) / 1000);
    doc.update(text);
    const e = edited(k);
    t0 = performance.now();
    doc.update(e);
    doc.diagnostics();
    incremental.push((performance.now() - t0) / 1000);
  }
  report(
    lines,
    `10 MB .traj (${parts.length} trajectories): full analysis ${fmt.ms(median(full))}, after a one-trajectory edit ${fmt.ms(median(incremental))} (${doc.parsedLastUpdate} re-parsed) → ${fmt.ratio(median(full) / median(incremental))} faster`,
  );
  return lines;
}
