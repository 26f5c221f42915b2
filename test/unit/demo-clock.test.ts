import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  goalsOf,
  parseDuration,
  readDemoRun,
  renderReport,
  spread,
  trajectoryFingerprint,
  volatileMetric,
} from '../../scripts/demo-clock';

/** A run folder as scripts/demo-clock.ts leaves it: the command's log, its wall time, and the run directory. */
function writeRun(
  dir: string,
  o: {
    clock: string;
    wall: number;
    em1: number;
    em2: number;
    searches2: number;
    off: number;
    seconds: [number, number, number];
    loss?: number;
  },
) {
  const run = join(dir, 'run');
  mkdirSync(join(run, 'eval-no-retrieval'), { recursive: true });
  writeFileSync(
    join(dir, 'demo.log'),
    [
      '==> setup done (main) in 114 s',
      'warm start 100/300: loss 0.416  (42s)',
      `held-out exact match: 0.006 before training (after the warm start) → 0.591 after 400 steps (${o.clock}); searches per question 1.44`,
    ].join('\n'),
  );
  writeFileSync(join(dir, 'times.json'), JSON.stringify({ wall_s: o.wall }));
  writeFileSync(
    join(run, 'run.json'),
    JSON.stringify({ numerics: { source: 'measured', dtype: 'fp32', reason: 'bf16 measured 1.29× fp32' } }),
  );
  writeFileSync(
    join(run, 'events.jsonl'),
    `${JSON.stringify({ event: 'progress', phase: 'warmup', pace: { s_per_step: 0.4107, speed: 0.98 } })}\n`,
  );
  const evalLine = (step: number, em1: number, em2: number, s2: number) => ({
    step,
    'val/em': (em1 + em2) / 2,
    'val/searches_mean': 1.4,
    'val/em_by_hops/1': em1,
    'val/searches_by_hops/1': 1.03,
    'val/em_by_hops/2': em2,
    'val/searches_by_hops/2': s2,
    'val/bridge_searched_by_hops/2': 0.857,
  });
  const lines = [
    { step: 0, 'warmup/loss': o.loss ?? 0.1731307651847601, time: o.seconds[0] },
    { ...evalLine(0, 0, 0, 1), 'timing_s/eval': o.seconds[1] },
    {
      step: 1,
      'critic/score/mean': 0.5,
      'timing_s/step': o.seconds[2],
      'perf/throughput': 1000 / o.seconds[2],
      'env/retrieve_ms/p50': o.seconds[0],
      'record/queue': 1,
    },
    evalLine(400, o.em1, o.em2, o.searches2),
  ];
  writeFileSync(join(run, 'metrics.jsonl'), `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  writeFileSync(
    join(run, 'eval-no-retrieval', 'metrics.jsonl'),
    `${JSON.stringify({ ...evalLine(0, o.off, o.off, 1), 'val/em': o.off })}\n`,
  );
}

/** Stop 56's seed-1 run on the Xeon: every goal held. */
const GOOD = {
  clock: '14m58s',
  wall: 1014,
  em1: 0.663,
  em2: 0.5,
  searches2: 1.96,
  off: 0,
  seconds: [1, 2, 3] as [number, number, number],
};

describe('scripts/demo-clock.ts: the README command timed as its goal is stated', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-demo-clock-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("reads a run back: the command's clock, the wall time, the pace, the numerics, the goals", async () => {
    writeRun(join(dir, 'run-1'), GOOD);
    const r = await readDemoRun(join(dir, 'run-1'), '1');
    assert.equal(r.clockS, 14 * 60 + 58);
    assert.equal(r.wallS, 1014);
    assert.equal(r.setupS, 114);
    assert.equal(r.paceSPerStep, 0.4107);
    assert.deepEqual(r.numerics, { source: 'measured', dtype: 'fp32', reason: 'bf16 measured 1.29× fp32' });
    assert.equal(r.after?.step, 400);
    assert.equal(r.off?.em, 0);
    assert.deepEqual(
      r.goals.map((g) => g.ok),
      [true, true, true, true],
    );
    assert.deepEqual(r.problems, []);
  });

  it('a goal missed by a hair is missed; a missing evaluation is a goal not met, not a pass', () => {
    const after = {
      step: 400,
      em: 0.5,
      byHops: [
        { hops: 1, em: 0.6499, searches: 1 },
        { hops: 2, em: 0.25, searches: 1.8 },
      ],
    };
    assert.deepEqual(
      goalsOf(after, { step: 0, em: 0.031, byHops: [] }).map((g) => [g.goal, g.ok]),
      [
        ['one-hop EM ≥ 0.65', false],
        ['two-hop EM ≥ 0.25', true],
        ['searches per two-hop question ≥ 1.8', true],
        ['EM with retrieval off ≤ 0.03', false],
      ],
    );
    assert.ok(goalsOf(undefined, undefined).every((g) => !g.ok && g.value === undefined));
  });

  it("one trajectory whatever the times; another trajectory when a metric's last bit moves", async () => {
    const base = { clock: '14m54s', wall: 1010, em1: 0.663, em2: 0.5, searches2: 1.96, off: 0 };
    writeRun(join(dir, 'run-1'), { ...base, seconds: [1, 2, 3] });
    writeRun(join(dir, 'run-2'), { ...base, clock: '15m05s', wall: 1024, seconds: [7, 8, 9] });
    writeRun(join(dir, 'run-3'), { ...base, seconds: [1, 2, 3], loss: 0.17313076518476 });
    const runs = await Promise.all([1, 2, 3].map((i) => readDemoRun(join(dir, `run-${i}`), String(i))));
    const [one, two, three] = runs;
    assert.equal(one?.trajectory?.hash, two?.trajectory?.hash);
    assert.notEqual(one?.trajectory?.hash, three?.trajectory?.hash);
    assert.ok(one?.trajectory?.hash);
    const report = renderReport(runs.slice(0, 2), ['CPU: `Intel(R) Xeon(R) Processor`']);
    assert.match(report, /min \/ median \/ max: \*\*14m54s \/ 15m00s \/ 15m05s\*\*/);
    assert.match(report, /1 of 2 over 15 minutes/);
    assert.match(report, /\| 16m50s \(setup 1m54s\) \|/); // the wall time, and the set-up's share of it
    assert.match(report, /Every goal held in 2 of 2 runs; one trajectory/);
    assert.match(report, /^CPU: `Intel\(R\) Xeon\(R\) Processor`/);
    assert.match(renderReport(runs, []), /3 runs; 2 trajectories/);
  });

  it('a malformed metrics line is reported with its file and line and left out; a run without a summary says so', async () => {
    writeRun(join(dir, 'run-1'), GOOD);
    const metrics = join(dir, 'run-1', 'run', 'metrics.jsonl');
    writeFileSync(metrics, '{"step": 1, "critic/score/mean": 0.5}\n{"step": 2, "crit\n');
    writeFileSync(join(dir, 'run-1', 'demo.log'), 'the run failed at step 2\n');
    const r = await readDemoRun(join(dir, 'run-1'), '1');
    assert.equal(r.trajectory?.lines, 1);
    assert.ok(r.problems.some((p) => p.startsWith(`${metrics}:2: not JSON`)));
    assert.ok(r.problems.some((p) => p.includes('no summary line')));
    assert.equal(r.clockS, undefined);
    assert.match(renderReport([r], []), /Problems:\n- 1: /);
    assert.match(renderReport([r], []), /\*\*missed\*\*: one-hop EM ≥ 0\.65/);
  });

  it('--report reads a folder back and names the machine the runs wrote down, not the one reading', () => {
    const base = { clock: '14m16s', wall: 964, em1: 0.663, em2: 0.5, searches2: 1.96, off: 0 };
    writeRun(join(dir, 'run-1'), { ...base, seconds: [1, 2, 3] });
    writeRun(join(dir, 'run-2'), { ...base, seconds: [4, 5, 6] });
    mkdirSync(join(dir, 'not-a-run'));
    writeFileSync(join(dir, 'machine.txt'), 'HEAD abc1234, 2 runs from fresh clones\nCPU: `AMD EPYC` (AuthenticAMD)\n');
    const root = join(__dirname, '..', '..');
    const p = spawnSync(
      process.execPath,
      ['-r', join(root, 'test', 'register.cjs'), join(root, 'scripts', 'demo-clock.ts'), '--report', dir],
      { encoding: 'utf8' },
    );
    assert.equal(p.status, 0, p.stderr);
    assert.match(p.stdout, /^HEAD abc1234, 2 runs from fresh clones {2}\nCPU: `AMD EPYC` \(AuthenticAMD\) {2}\n/);
    assert.equal(p.stdout.match(/^\| [12] \| 14m16s \| 16m04s \(setup 1m54s\) \|/gm)?.length, 2);
    assert.match(p.stdout, /Every goal held in 2 of 2 runs; one trajectory/);
  });

  it('the pieces: durations, spreads, which metrics measure the machine', () => {
    assert.equal(parseDuration('14m58s'), 898);
    assert.equal(parseDuration('58s'), 58);
    assert.equal(parseDuration('14:58'), undefined);
    assert.deepEqual(spread([3, undefined, 1, 2]), [1, 2, 3]);
    assert.deepEqual(spread([4, 1, 3, 2]), [1, 2.5, 4]);
    assert.equal(spread([undefined]), undefined);
    for (const k of [
      'time',
      'timing_s/step',
      'perf/throughput',
      'env/retrieve_ms/p50',
      'val/record/queue',
      'record/queue',
    ])
      assert.ok(volatileMetric(k), k);
    for (const k of ['warmup/loss', 'val/em', 'env/number_of_valid_search', 'record/rollouts', 'actor/grad_norm'])
      assert.ok(!volatileMetric(k), k);
    assert.equal(trajectoryFingerprint('', 'x').lines, 0);
  });
});
