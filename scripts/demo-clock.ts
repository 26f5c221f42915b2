/**
 * The README's first command, timed as its goal is stated (issue 48: ≤ 15 minutes, every goal held, measured alone
 * from a fresh clone, three runs, min / median / max, with the CPU's name): N runs in a row, each in a fresh clone of
 * this repository's HEAD (`bash scripts/demo.sh`, set-up included), the first with the numerics cache deleted as on a
 * new user's machine (`--keep-cache`: not), each clone deleted after its run (a `.venv` with torch is ~2 GB) and its
 * run directory, log and times kept under `--out`. Then the report: one row a run (the command's own clock and the
 * wall time with the set-up, the warm start's pace, what the numerics probe chose, the goals), whether the runs were one
 * trajectory (every metric of every step but times, to the bit), the CPU and what MKL says of its reproducibility mode
 * (written down before the first run, `machine.txt`, so that `--report` elsewhere still names the machine that ran).
 *
 *   node -r ./test/register.cjs scripts/demo-clock.ts [--runs 3] [--seed N] [--out DIR] [--keep-cache]
 *   node -r ./test/register.cjs scripts/demo-clock.ts --report DIR     # the report again, from DIR
 *
 * The machine must be otherwise quiet: on 2 cores, anything else running moves the clock (docs/demo.md, "CPU threads").
 * Uncommitted changes are not in a clone: the script says so and runs HEAD.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { duration, type HeldOut, heldOutEm, fmt as num } from '../src/cli/train';

/** Issue 20's goals for the two-hop demo (README): one-hop EM, two-hop EM, searches per two-hop question, and the
 * held-out EM with /retrieve returning nothing (the answers are invented: a policy that reads scores ~0). */
export const DEMO_GOALS = { oneHop: 0.65, twoHop: 0.25, twoHopSearches: 1.8, retrievalOff: 0.03 } as const;

/** The clock the goal is about (the command's own, which the summary line prints). */
export const CLOCK_GOAL_S = 15 * 60;

/** Metrics that measure the machine rather than the run: left out of the trajectory's fingerprint. */
export function volatileMetric(key: string): boolean {
  return (
    key === 'time' ||
    key.startsWith('timing_s/') ||
    key.startsWith('perf/') ||
    /_ms\//.test(key) ||
    /(^|\/)record\/queue$/.test(key)
  );
}

/** A run's trajectory, fingerprinted: every metrics line's every key but the volatile ones, in order. A line that
 * does not parse is reported (file:line) and left out. */
export function trajectoryFingerprint(text: string, file: string): { hash: string; lines: number; problems: string[] } {
  const h = createHash('sha256');
  const problems: string[] = [];
  let lines = 0;
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let m: Record<string, unknown>;
    try {
      m = JSON.parse(line);
    } catch (e) {
      problems.push(`${file}:${i + 1}: not JSON (${(e as Error).message}); left out of the trajectory`);
      return;
    }
    const kept = Object.keys(m)
      .filter((k) => !volatileMetric(k))
      .sort()
      .map((k) => [k, m[k]]);
    h.update(`${JSON.stringify(kept)}\n`);
    lines++;
  });
  return { hash: h.digest('hex').slice(0, 12), lines, problems };
}

/** "14m58s" / "58s" (the CLI's durations) → seconds. */
export function parseDuration(s: string): number | undefined {
  const m = /^(?:(\d+)m)?(\d+)s$/.exec(s);
  return m ? Number(m[1] ?? 0) * 60 + Number(m[2]) : undefined;
}

export interface DemoRun {
  name: string;
  /** the command's own clock: the summary line's "after N steps (…)" */
  clockS?: number;
  /** the wall time of `bash scripts/demo.sh`, set-up included (written by this script) */
  wallS?: number;
  /** the set-up's own time (scripts/setup.sh's "setup done (…) in N s"), part of wallS */
  setupS?: number;
  paceSPerStep?: number;
  paceSpeed?: number;
  numerics?: { source?: string; dtype?: string; reason?: string };
  after?: HeldOut;
  off?: HeldOut;
  trajectory?: { hash: string; lines: number };
  goals: { goal: string; value?: number; ok: boolean }[];
  problems: string[];
}

const byHops = (h: HeldOut | undefined, hops: number) => h?.byHops.find((b) => b.hops === hops);

/** What `DEMO_GOALS` says of a run's last evaluation and its evaluation without retrieval. */
export function goalsOf(after: HeldOut | undefined, off: HeldOut | undefined): DemoRun['goals'] {
  const one = byHops(after, 1);
  const two = byHops(after, 2);
  const check = (goal: string, value: number | undefined, ok: (v: number) => boolean) => ({
    goal,
    value,
    ok: value !== undefined && ok(value),
  });
  return [
    check(`one-hop EM ≥ ${DEMO_GOALS.oneHop}`, one?.em, (v) => v >= DEMO_GOALS.oneHop),
    check(`two-hop EM ≥ ${DEMO_GOALS.twoHop}`, two?.em, (v) => v >= DEMO_GOALS.twoHop),
    check(
      `searches per two-hop question ≥ ${DEMO_GOALS.twoHopSearches}`,
      two?.searches,
      (v) => v >= DEMO_GOALS.twoHopSearches,
    ),
    check(`EM with retrieval off ≤ ${DEMO_GOALS.retrievalOff}`, off?.em, (v) => v <= DEMO_GOALS.retrievalOff),
  ];
}

function readJson(file: string, problems: string[]): any {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    problems.push(`${file}: ${(e as Error).message}`);
    return undefined;
  }
}

/** One run of the command, read back from its folder under --out: `demo.log` (the command's output), `times.json`
 * (this script's wall clock) and `run/` (the run directory, with `eval-no-retrieval/`). */
export async function readDemoRun(dir: string, name: string): Promise<DemoRun> {
  const problems: string[] = [];
  const run: DemoRun = { name, goals: [], problems };
  const log = join(dir, 'demo.log');
  if (existsSync(log)) {
    const text = readFileSync(log, 'utf8');
    const clock = /after \d+ steps \(([0-9ms]+)\)/.exec(text);
    run.clockS = clock?.[1] ? parseDuration(clock[1]) : undefined;
    if (run.clockS === undefined)
      problems.push(`${log}: no summary line ("held-out exact match: … after N steps (…)")`);
    const setup = /setup done \([^)]*\) in (\d+) s/.exec(text);
    if (setup) run.setupS = Number(setup[1]);
  } else problems.push(`${log}: missing`);
  const times = join(dir, 'times.json');
  if (existsSync(times)) run.wallS = readJson(times, problems)?.wall_s;
  const runDir = join(dir, 'run');
  const info = existsSync(join(runDir, 'run.json')) ? readJson(join(runDir, 'run.json'), problems) : undefined;
  if (info?.numerics)
    run.numerics = { source: info.numerics.source, dtype: info.numerics.dtype, reason: info.numerics.reason };
  const events = join(runDir, 'events.jsonl');
  if (existsSync(events))
    for (const line of readFileSync(events, 'utf8').split('\n')) {
      if (!line.includes('"pace"')) continue;
      try {
        const pace = JSON.parse(line).pace;
        if (typeof pace?.s_per_step === 'number') {
          run.paceSPerStep = pace.s_per_step;
          run.paceSpeed = typeof pace.speed === 'number' ? pace.speed : undefined;
          break;
        }
      } catch {
        /* a partial line: the trajectory's check reports malformed metrics; events are only read for the pace */
      }
    }
  const metrics = join(runDir, 'metrics.jsonl');
  if (existsSync(metrics)) {
    const fp = trajectoryFingerprint(readFileSync(metrics, 'utf8'), metrics);
    run.trajectory = { hash: fp.hash, lines: fp.lines };
    problems.push(...fp.problems);
    run.after = (await heldOutEm(runDir)).after;
    run.off = (await heldOutEm(join(runDir, 'eval-no-retrieval'))).before;
  } else problems.push(`${metrics}: missing`);
  run.goals = goalsOf(run.after, run.off);
  return run;
}

const clock = (s: number | undefined) => (s === undefined ? '–' : duration(s));

/** min / median / max of what is defined. */
export function spread(values: (number | undefined)[]): [number, number, number] | undefined {
  const v = values.filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  const at = (i: number) => v[i] as number;
  if (!v.length) return undefined;
  const mid = v.length % 2 ? at((v.length - 1) / 2) : (at(v.length / 2 - 1) + at(v.length / 2)) / 2;
  return [at(0), mid, at(v.length - 1)];
}

/** The report, in Markdown (docs/demo.md's tables). */
export function renderReport(runs: DemoRun[], machine: string[]): string {
  const out: string[] = [...machine.map((l) => `${l}  `), ''];
  out.push(
    '| run | the command (its own clock) | with the setup | warm start pace | numerics | one-hop EM | two-hop EM | searches per two-hop question | bridge entity searched | retrieval off | every goal | trajectory |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  );
  for (const r of runs) {
    const two = byHops(r.after, 2);
    const numerics = r.numerics
      ? `${r.numerics.dtype ?? '?'} (${r.numerics.source ?? '?'}${r.numerics.source === 'measured' && r.numerics.reason ? `: ${r.numerics.reason}` : ''})`
      : '–';
    const missed = r.goals.filter((g) => !g.ok).map((g) => g.goal);
    out.push(
      `| ${r.name} | ${clock(r.clockS)} | ${clock(r.wallS)}${r.setupS === undefined ? '' : ` (setup ${clock(r.setupS)})`} | ${r.paceSPerStep === undefined ? '–' : `${r.paceSPerStep.toFixed(2)} s a step${r.paceSpeed === undefined ? '' : ` (${r.paceSpeed.toFixed(2)}× the reference)`}`} | ${numerics} | ${num(byHops(r.after, 1)?.em)} | ${num(two?.em)} | ${num(two?.searches, 2)} | ${num(two?.bridge)} | ${num(r.off?.em)} | ${missed.length ? `**missed**: ${missed.join('; ')}` : 'yes'} | ${r.trajectory ? `${r.trajectory.hash} (${r.trajectory.lines} lines)` : '–'} |`,
    );
  }
  out.push('');
  const s = spread(runs.map((r) => r.clockS));
  const w = spread(runs.map((r) => r.wallS));
  if (s) {
    const over = runs.filter((r) => r.clockS !== undefined && r.clockS > CLOCK_GOAL_S).length;
    out.push(
      `The command's clock, min / median / max: **${s.map(clock).join(' / ')}** (with the setup: ${w ? w.map(clock).join(' / ') : '–'}); ` +
        `${over ? `${over} of ${runs.length} over` : `${runs.length === 1 ? 'within' : `all ${runs.length} within`}`} ${CLOCK_GOAL_S / 60} minutes.`,
    );
  }
  const hashes = new Set(runs.map((r) => r.trajectory?.hash).filter(Boolean));
  const held = runs.filter((r) => r.goals.every((g) => g.ok)).length;
  out.push(
    `Every goal held in ${held} of ${runs.length} runs; ${hashes.size === 1 ? 'one trajectory (every metric of every step but times, to the bit)' : `${hashes.size} trajectories`}.`,
  );
  const problems = runs.flatMap((r) => r.problems.map((p) => `${r.name}: ${p}`));
  if (problems.length) out.push('', 'Problems:', ...problems.map((p) => `- ${p}`));
  return `${out.join('\n')}\n`;
}

/** The CPU (lscpu's model name, vendor, family/model, the flags the numerics depend on) and what MKL says of its
 * reproducibility mode under the trainer's environment (cpu_env.py; `MKL_VERBOSE`'s version line names it). */
function machineLines(root: string, python: string | undefined): string[] {
  const lines: string[] = [];
  let info = '';
  try {
    info = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    /* not Linux */
  }
  const field = (name: string) => new RegExp(`^${name}\\s*:\\s*(.*)$`, 'm').exec(info)?.[1];
  const flags = new Set((field('flags') ?? '').split(/\s+/));
  const wanted = ['avx2', 'avx512f', 'avx512_bf16', 'avx512_fp16', 'amx_bf16', 'amx_tile'].filter((f) => flags.has(f));
  const cpus = (info.match(/^processor\s*:/gm) ?? []).length;
  lines.push(
    `CPU: \`${field('model name') ?? '?'}\` (${field('vendor_id') ?? '?'}, family ${field('cpu family') ?? '?'} model ${field('model') ?? '?'}; ${cpus} logical CPUs; ${wanted.join(', ') || 'none of avx2/avx512/amx'})`,
  );
  if (python) {
    const probe = spawnSync(
      python,
      [
        '-c',
        'import sys; sys.path.insert(0, "trainer"); from search_agent_trainer import cpu_env; cpu_env.apply(); import torch; print(torch.__version__); (torch.ones(64, 64) @ torch.ones(64, 64)).sum()',
      ],
      { cwd: root, encoding: 'utf8', env: { ...process.env, MKL_VERBOSE: '1' } },
    );
    const text = `${probe.stdout}\n${probe.stderr}`;
    const cnr = /CNR:\s*([^\s,]+(?:,\s*STRICT)?)/i.exec(text)?.[1];
    const torch = /^\d+\.\d+\.\S+/m.exec(probe.stdout)?.[0];
    const branch = /MKL_VERBOSE oneMKL .*? architecture (.*?), Lnx/.exec(text)?.[1];
    lines.push(
      `torch ${torch ?? '?'}; MKL under the trainer's environment: ${cnr ? `CNR:${cnr}` : "no CNR mode in MKL_VERBOSE's output"}${branch ? ` (${branch})` : ''}`,
    );
  }
  return lines;
}

function run(cmd: string, args: string[], cwd: string, log: string): Promise<number> {
  return new Promise((done) => {
    const out = createWriteStream(log);
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.pipe(out, { end: false });
    child.stderr.pipe(out, { end: false });
    child.on('close', (code) => out.end(() => done(code ?? 1)));
  });
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      seed: { type: 'string' },
      out: { type: 'string' },
      report: { type: 'string' },
      'keep-cache': { type: 'boolean', default: false },
    },
  });
  const root = resolve(__dirname, '..');
  const python = existsSync(join(root, '.venv', 'bin', 'python')) ? join(root, '.venv', 'bin', 'python') : undefined;
  if (values.report) {
    const dir = resolve(values.report);
    const names = readdirSync(dir)
      .filter((n) => /^run-\d+$/.test(n))
      .sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
    const runs = await Promise.all(names.map((n) => readDemoRun(join(dir, n), n.slice(4))));
    // the machine the runs ran on, as the run wrote it down (this machine's only for a folder made by hand)
    const saved = join(dir, 'machine.txt');
    const machine = existsSync(saved)
      ? readFileSync(saved, 'utf8').trimEnd().split('\n')
      : ['(no machine.txt: the CPU below is the one making this report)', ...machineLines(root, python)];
    process.stdout.write(renderReport(runs, machine));
    return 0;
  }
  const n = Number(values.runs);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
  if (values.seed !== undefined && !/^\d+$/.test(values.seed))
    throw new Error(`--seed must be a non-negative integer, got ${values.seed}`);
  const dirty = spawnSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root, encoding: 'utf8' });
  if (dirty.stdout.trim()) process.stderr.write('uncommitted changes are not in the clones: timing HEAD\n');
  const head = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout.trim();
  const out = resolve(values.out ?? join('/tmp', `sas-demo-clock-${new Date().toISOString().replace(/[:.]/g, '-')}`));
  mkdirSync(out, { recursive: true });
  const cache = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'search-agent-studio', 'numerics.json');
  if (!values['keep-cache'] && existsSync(cache)) {
    rmSync(cache);
    process.stderr.write(`deleted ${cache}: the first run measures the dtypes, as on a new machine\n`);
  }
  const machine = [`HEAD ${head}, ${n} run${n === 1 ? '' : 's'} from fresh clones`, ...machineLines(root, python)];
  writeFileSync(join(out, 'machine.txt'), `${machine.join('\n')}\n`);
  const runs: DemoRun[] = [];
  for (let i = 1; i <= n; i++) {
    const dir = join(out, `run-${i}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const clone = join(dir, 'main');
    const cloned = spawnSync('git', ['clone', '-q', root, clone], { encoding: 'utf8' });
    if (cloned.status !== 0) throw new Error(`git clone ${root} ${clone}: ${cloned.stderr}`);
    process.stderr.write(`run ${i} of ${n} (${head}), ${new Date().toISOString()}: ${join(dir, 'demo.log')}\n`);
    const args = ['scripts/demo.sh', '--run-dir', join(dir, 'run'), ...(values.seed ? ['--seed', values.seed] : [])];
    const t0 = Date.now();
    const code = await run('bash', args, clone, join(dir, 'demo.log'));
    writeFileSync(
      join(dir, 'times.json'),
      `${JSON.stringify({ wall_s: (Date.now() - t0) / 1000, exit: code, head })}\n`,
    );
    rmSync(clone, { recursive: true, force: true });
    const r = await readDemoRun(dir, String(i));
    if (code !== 0) r.problems.push(`bash scripts/demo.sh exited ${code}`);
    runs.push(r);
    process.stderr.write(`run ${i}: ${clock(r.clockS)} (with the setup ${clock(r.wallS)}), exit ${code}\n`);
  }
  const report = renderReport(runs, machine);
  writeFileSync(join(out, 'report.md'), report);
  process.stdout.write(report);
  return runs.every((r) => r.goals.every((g) => g.ok) && !r.problems.length) ? 0 : 1;
}

if (require.main === module)
  main().then(
    (code) => process.exit(code),
    (e: Error) => {
      process.stderr.write(`demo-clock: ${e.message}\n`);
      process.exit(2);
    },
  );
