/**
 * The dashboard's audit of a run (re-tokenising aside: no tokenizer here, so leaks, log-prob gap, importance preview
 * and alarms) on the thread that asks for it — as it ran on the extension host before — against the audit thread
 * (src/core/audit/thread.ts) in the same run: the audit's time, and how long the asking thread's event loop was
 * held up meanwhile (what every other extension's request waits for on the extension host).
 */
import { createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { RunAudit } from '../src/core/audit/run';
import { AuditThread } from '../src/core/audit/thread';
import { BENCH_DIR } from './data';
import { makeRollouts } from './generate';
import { fmt, report } from './util';

const STEPS = 20;
const PER_STEP = 1500;

/** A run directory of STEPS rollouts files, generated once. */
async function runDir(): Promise<string> {
  const dir = join(BENCH_DIR, 'audit-run');
  const last = join(dir, 'rollouts', `step-${String(STEPS).padStart(6, '0')}.jsonl`);
  if (existsSync(last)) return dir;
  mkdirSync(join(dir, 'rollouts'), { recursive: true });
  const pool = makeRollouts(2000, { seed: 5, tokens: true });
  for (let step = 1; step <= STEPS; step++) {
    const out = createWriteStream(join(dir, 'rollouts', `step-${String(step).padStart(6, '0')}.jsonl`));
    for (let i = 0; i < PER_STEP; i++) {
      const r = JSON.parse(pool[(step * PER_STEP + i) % pool.length]!.record(i)) as Record<string, unknown>;
      if (!out.write(`${JSON.stringify({ ...r, step })}\n`))
        await new Promise<void>((res) => out.once('drain', () => res()));
    }
    await new Promise<void>((res, rej) => out.end((e?: Error | null) => (e ? rej(e) : res())));
  }
  return dir;
}

/** The audit's wall time and the asking thread's event-loop delay (max, p99) while it ran. */
async function measure(audit: () => Promise<unknown>): Promise<{ s: number; maxMs: number; p99Ms: number }> {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  const t0 = performance.now();
  await audit();
  const s = (performance.now() - t0) / 1000;
  h.disable();
  return { s, maxMs: h.max / 1e6, p99Ms: h.percentile(99) / 1e6 };
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const dir = await runDir();
  await new RunAudit(dir).update(); // the page cache warm for both
  const here = await measure(() => new RunAudit(dir).update());
  const thread = new AuditThread();
  const off = await measure(async () => {
    thread.forget(dir);
    await thread.update(dir);
  });
  await thread.dispose();
  const n = STEPS * PER_STEP;
  report(
    lines,
    `audit of ${n.toLocaleString('en-US')} rollouts in ${STEPS} step files: on the asking thread ${here.s.toFixed(2)} s, on the audit thread ${off.s.toFixed(2)} s (${fmt.ratio(off.s / here.s)} the time)`,
  );
  report(
    lines,
    `the asking thread's event loop held up at most ${here.maxMs.toFixed(0)} ms (p99 ${here.p99Ms.toFixed(0)} ms) auditing on it, ${off.maxMs.toFixed(0)} ms (p99 ${off.p99Ms.toFixed(0)} ms) with the audit thread (${fmt.ratio(here.maxMs / Math.max(off.maxMs, 0.001))} less)`,
  );
  return lines;
}
