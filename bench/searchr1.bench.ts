/**
 * A Search-R1-scale run recorded through the trainer's real recorder (bench/searchr1_sim.py: 20 steps × 2,560
 * trajectories of 500–4,000 tokens, ~75 M tokens, into the token store) and every view over it, with peers measured
 * in the same run: the writer against today's JSONL `dumps` path on the same step (Python), the views against the
 * same step exported to JSONL. Goals (issue 42): ≤ 12 bytes a token for the token arrays; the writer ≥ 10× the
 * dumps path; recording ≤ 2 % of a realistic step; inspector first rows < 1 s; a typed filter over one step < 1 s
 * and over every step < 10 s; replay of one rollout < 300 ms; audit ≥ 5 M tokens/s with memory flat in run size; the
 * dashboard's series for 1,005 steps < 1 s.
 *
 * Size: SAS_BENCH_SIM_STEPS (20), SAS_BENCH_SIM_ROLLOUTS (2560). The run is cached in .bench/.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { execa } from 'execa';
import { exportJsonl } from '../src/cli/exportJsonl';
import { addMicroscope } from '../src/core/audit';
import { RunAudit } from '../src/core/audit/run';
import { auditMetricRows, withoutTrainerSeries } from '../src/core/audit/series';
import { MetricsTail } from '../src/core/host/metricsTail';
import { type EngineMessage, InspectorEngine } from '../src/core/inspect/engine';
import { defaultFactsWorkers } from '../src/core/inspect/factsPool';
import { replayModel } from '../src/core/inspect/replay';
import { findPython, pythonCandidates } from '../src/core/python';
import { StoreStep, storeSteps } from '../src/core/store/tokenStore';
import { BENCH_DIR } from './data';
import { median, rng } from './util';

const ROOT = resolve(__dirname, '..');
const FILTER = 'reward == 0 && searches >= 2 && mask.leaks == 0';

export interface SimOptions {
  steps?: number;
  rollouts?: number;
  metricsSteps?: number;
  /** Where the run is written (default .bench/searchr1-<steps>x<rollouts>). */
  dir?: string;
  /** Skip the parts that only make sense at scale (the 5-step audit subset needs ≥ 6 steps). */
  quick?: boolean;
}

interface SimResult {
  tokens: number;
  rollouts: number;
  bytes_per_token: number;
  token_arrays_bytes_per_token: number;
  submit_s: { median: number; max: number };
  submit_cpu_s?: { median: number; max: number };
  writer_s_per_step: number;
  writer_cpu_s_per_step?: number;
  load_average?: number[];
  writer_tokens_per_s: number;
  step_seconds_assumed: number;
  submit_share_of_step: number;
  record: { dropped: { steps: number; rollouts: number }; flagged: number };
  compare?: {
    tokens: number;
    store_s: number;
    dumps_s: number;
    ratio: number;
    cpu_ratio?: number;
    store_cpu_s?: number;
    dumps_cpu_s?: number;
    dumps_bytes_per_token: number;
    store_tokens_per_s: number;
    dumps_tokens_per_s: number;
  };
}

async function simulate(dir: string, o: Required<Omit<SimOptions, 'dir' | 'quick'>>): Promise<SimResult> {
  const done = join(dir, 'sim.json');
  if (existsSync(done)) return JSON.parse(readFileSync(done, 'utf8')) as SimResult;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const found = await findPython(pythonCandidates([], ROOT));
  if (!found.found) throw new Error('bench searchr1: no Python with torch (scripts/setup.sh)');
  const t0 = performance.now();
  const p = await execa(
    found.found.executable,
    [
      join(ROOT, 'bench', 'searchr1_sim.py'),
      join(dir, 'run'),
      '--steps',
      String(o.steps),
      '--rollouts',
      String(o.rollouts),
      '--metrics-steps',
      String(o.metricsSteps),
      '--compare-dumps',
    ],
    { env: { PYTHONPATH: join(ROOT, 'trainer') }, stderr: 'inherit' },
  );
  console.log(
    `  simulated ${o.steps} steps × ${o.rollouts} rollouts in ${((performance.now() - t0) / 1000).toFixed(0)} s`,
  );
  writeFileSync(done, p.stdout);
  return JSON.parse(p.stdout) as SimResult;
}

/**
 * An inspector engine over `path` until every row is analysed and `filter` answered; the moments that matter.
 * `workers`: its facts threads (default: one fewer than the cores; 0: the engine's thread alone). CPU is the
 * process's, every thread's.
 */
async function inspect(
  path: string,
  filter: string,
  workers?: number,
): Promise<{
  firstRows: number;
  indexed: number;
  answered: number;
  cpu: number;
  total: number;
  view: number;
  threadRows: number;
}> {
  const msgs: EngineMessage[] = [];
  const c0 = process.cpuUsage();
  let firstRows = 0;
  let indexed = 0;
  const start = performance.now();
  const engine = new InspectorEngine(
    (m) => {
      msgs.push(m);
      const at = (performance.now() - start) / 1000;
      if (m.t === 'preview' && !firstRows) firstRows = at;
      if (m.t === 'status' && m.status.total > 0 && !m.status.indexing && !indexed) indexed = at;
    },
    workers === undefined ? {} : { workers },
  );
  await engine.open(path, false); // returns when every row is analysed
  await engine.setQuery(1, { filter, search: '' });
  const answered = (performance.now() - start) / 1000;
  const c = process.cpuUsage(c0);
  const s = engine.status();
  const threadRows = engine.threadRows;
  await engine.close();
  return { firstRows, indexed, answered, cpu: (c.user + c.system) / 1e6, total: s.total, view: s.view, threadRows };
}

async function auditChild(
  path: string,
): Promise<{ seconds: number; cpu: number; maxRssMiB: number; rollouts: number }> {
  const p = await execa(process.execPath, [
    '--max-old-space-size=4096',
    '-r',
    join(ROOT, 'test/register.cjs'),
    join(ROOT, 'bench', 'audit-child.ts'),
    path,
  ]);
  return JSON.parse(p.stdout.trim().split('\n').pop()!) as {
    seconds: number;
    cpu: number;
    maxRssMiB: number;
    rollouts: number;
  };
}

export async function run(options: SimOptions = {}): Promise<string[]> {
  const o = {
    steps: options.steps ?? Number(process.env.SAS_BENCH_SIM_STEPS ?? 20),
    rollouts: options.rollouts ?? Number(process.env.SAS_BENCH_SIM_ROLLOUTS ?? 2560),
    metricsSteps: options.metricsSteps ?? 1005,
  };
  const dir = options.dir ?? join(BENCH_DIR, `searchr1-${o.steps}x${o.rollouts}`);
  const sim = await simulate(dir, o);
  const runDir = join(dir, 'run');
  const steps = await storeSteps(join(runDir, 'rollouts'));
  const lines: string[] = [];
  const say = (s: string) => {
    console.log(`  ${s}`);
    lines.push(s);
  };
  const load = require('node:os').loadavg() as number[];
  say(
    `machine: ${require('node:os').cpus()[0]?.model ?? '?'} × ${require('node:os').cpus().length}, load average ${load.map((x) => x.toFixed(1)).join(' ')}`,
  );
  say(
    `run: ${o.steps} steps, ${sim.rollouts} rollouts, ${(sim.tokens / 1e6).toFixed(1)} M tokens; store ${sim.bytes_per_token.toFixed(2)} bytes/token (token arrays ${sim.token_arrays_bytes_per_token.toFixed(2)}; goal ≤ 12)`,
  );
  if (sim.compare) {
    const c = sim.compare;
    say(
      `writer vs dumps (one step, ${(c.tokens / 1e6).toFixed(2)} M tokens, same process): store ${c.store_s.toFixed(2)} s, dumps ${c.dumps_s.toFixed(2)} s → ${c.ratio.toFixed(1)}× (goal ≥ 10×)${c.cpu_ratio ? `; CPU time ${c.store_cpu_s!.toFixed(2)} s vs ${c.dumps_cpu_s!.toFixed(2)} s → ${c.cpu_ratio.toFixed(1)}×` : ''}; JSONL ${c.dumps_bytes_per_token.toFixed(1)} bytes/token`,
    );
  }
  const cpu = sim.submit_cpu_s
    ? `, CPU ${(sim.submit_cpu_s.median * 1000).toFixed(0)} ms = ${((sim.submit_cpu_s.median / sim.step_seconds_assumed) * 100).toFixed(2)} %`
    : '';
  say(
    `training thread: submit median ${(sim.submit_s.median * 1000).toFixed(0)} ms wall (max ${(sim.submit_s.max * 1000).toFixed(0)} ms) = ${(sim.submit_share_of_step * 100).toFixed(2)} % of a ${sim.step_seconds_assumed} s step${cpu} (goal ≤ 2 %); writer thread ${sim.writer_s_per_step.toFixed(2)} s a step wall${sim.writer_cpu_s_per_step ? `, ${sim.writer_cpu_s_per_step.toFixed(2)} s CPU` : ''} (${(sim.writer_tokens_per_s / 1e6).toFixed(2)} M tokens/s wall); dropped ${sim.record.dropped.rollouts} rollouts${sim.load_average ? `; load during the simulation ${sim.load_average.map((x) => x.toFixed(1)).join(' ')}` : ''}`,
  );

  // the views
  const oneStep = steps[0]!;
  const whole = await inspect(runDir, FILTER);
  // the peer: the engine's thread alone (a single core; before the facts threads)
  const alone = await inspect(runDir, FILTER, 0);
  say(
    `inspector, whole run: first rows ${(whole.firstRows * 1000).toFixed(0)} ms (goal < 1 s); indexed ${whole.indexed.toFixed(2)} s; filter over ${whole.total} rollouts answered ${whole.answered.toFixed(1)} s after opening (${whole.cpu.toFixed(1)} s of CPU; goal < 10 s), ${whole.view} rows; facts threads: ${defaultFactsWorkers()} beside the engine's, ${whole.threadRows} rows built by them; the engine's thread alone ${alone.answered.toFixed(1)} s (${alone.cpu.toFixed(1)} s CPU) → ${(alone.answered / whole.answered).toFixed(2)}×`,
  );
  const one = await inspect(oneStep, FILTER);
  // the peer: the same step as JSONL
  const jsonl = join(dir, 'step-000001.jsonl');
  if (!existsSync(jsonl)) await exportJsonl(oneStep, jsonl, { out: () => {}, err: () => {} } as never);
  const peer = await inspect(jsonl, FILTER);
  say(
    `inspector, one step (${one.total} rollouts): first rows ${(one.firstRows * 1000).toFixed(0)} ms, filter answered ${one.answered.toFixed(2)} s after opening (${one.cpu.toFixed(2)} s of CPU; goal < 1 s); the same step as JSONL: ${(peer.firstRows * 1000).toFixed(0)} ms, ${peer.answered.toFixed(2)} s (${(peer.answered / one.answered).toFixed(1)}× the store's)`,
  );

  // replay of one rollout, cold: open the step, read the row whole, build the replay model with the microscope
  const r = rng(42);
  const replays: number[] = [];
  for (let k = 0; k < 10; k++) {
    const stepDir = steps[Math.floor(r() * steps.length)]!;
    const t0 = performance.now();
    const s = await StoreStep.open(stepDir);
    const i = Math.floor(r() * s.count);
    const row = (await s.rows(i, i + 1, 'all'))[0]!;
    const model = replayModel(row.record!, { index: i, file: stepDir, line: i + 1 });
    addMicroscope(model, row.record!, {});
    replays.push((performance.now() - t0) / 1000);
  }
  say(
    `replay of one rollout (cold: open its step, read it whole, the replay model and microscope): median ${(median(replays) * 1000).toFixed(0)} ms, max ${(Math.max(...replays) * 1000).toFixed(0)} ms (goal < 300 ms)`,
  );

  // audit: the whole run, and a run of its first steps (memory flat in run size), each in a process of its own
  const all = await auditChild(runDir);
  say(
    `audit of the whole run (${all.rollouts} rollouts): ${all.seconds.toFixed(1)} s = ${(sim.tokens / all.seconds / 1e6).toFixed(2)} M tokens/s (goal ≥ 5; ${(sim.tokens / all.cpu / 1e6).toFixed(2)} M tokens per CPU-second), peak RSS ${all.maxRssMiB.toFixed(0)} MiB`,
  );
  if (!options.quick && steps.length >= 6) {
    const part = join(dir, 'first-steps');
    const k = Math.max(1, Math.floor(steps.length / 4));
    if (!existsSync(part)) {
      mkdirSync(join(part, 'rollouts'), { recursive: true });
      for (const s of steps.slice(0, k)) symlinkSync(s, join(part, 'rollouts', s.split('/').pop()!));
    }
    const few = await auditChild(part);
    say(
      `audit of the first ${k} steps: peak RSS ${few.maxRssMiB.toFixed(0)} MiB → the whole run's ${(all.maxRssMiB / few.maxRssMiB).toFixed(2)}× for ${(steps.length / k).toFixed(1)}× the rollouts (flat: ~1×)`,
    );
  }
  const jsonlAudit = await auditChild(jsonl);
  const stepTokens = sim.tokens / o.steps;
  say(
    `audit of one step: store ${(stepTokens / (all.seconds / o.steps) / 1e6).toFixed(2)} M tokens/s (whole-run rate) vs its JSONL ${(stepTokens / jsonlAudit.seconds / 1e6).toFixed(2)} M tokens/s`,
  );

  // the dashboard: metrics.jsonl of 1,005 steps (with the trainer's audit/* series), then the audit's rows
  const t0 = performance.now();
  const tail = new MetricsTail(join(runDir, 'metrics.jsonl'));
  const rows = [];
  for (;;) {
    const got = await tail.read();
    if (!got.rows.length) break;
    rows.push(...got.rows);
  }
  const seriesS = (performance.now() - t0) / 1000;
  say(
    `dashboard: ${rows.length} steps of metrics.jsonl (${Object.keys(rows[0] ?? {}).length} series, the audit's token series among them) in ${(seriesS * 1000).toFixed(0)} ms (goal < 1 s)`,
  );
  rmSync(join(runDir, 'rollouts', '.audit-cache.json'), { force: true });
  const t1 = performance.now();
  const audited = await new RunAudit(runDir).update();
  const auditS = (performance.now() - t1) / 1000;
  const kept = withoutTrainerSeries(auditMetricRows(audited ?? []), rows);
  const t2 = performance.now();
  await new RunAudit(runDir).update(); // a dashboard opened again: rollouts/.audit-cache.json
  const cachedS = (performance.now() - t2) / 1000;
  say(
    `dashboard: the audit thread's per-step series (drift, alarms) over ${o.steps} recorded steps in ${auditS.toFixed(1)} s the first time (${(auditS / o.steps).toFixed(2)} s a step: 1,005 steps ≈ ${(((auditS / o.steps) * 1005) / 60).toFixed(0)} min in the background, step by step as they come), ${(cachedS * 1000).toFixed(0)} ms opened again (cached); ${kept.length} rows`,
  );
  return lines;
}
