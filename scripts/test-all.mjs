// `npm test`: every suite the project has, each run even if an earlier one failed; a summary at the end, with what
// failed in each failed suite printed again (CI keeps only the tail of the output: a unit failure scrolled out of it
// once); exit 1 if any failed. SAS_SUITES=unit,python limits the run (for local iteration only).
//
// The suites run in phases. Within a phase, lanes run side by side, each lane's suites one after another, their
// processes with one torch thread each (below). `unit` and `python` are mostly one process waiting on another (a
// trainer, an env server, a CLI): side by side, one thread a process, the two lanes (typecheck, unit, verl: 411 s;
// python: 488 s in stop 49's rehearsal of CI) took 488 s where the suites in sequence took 898 s (stop 48's CI, which
// used 44 of its 45 minutes). The two learning tests run side by side, each with the two threads its trajectory is
// pinned to, waiting asleep (OMP_WAIT_POLICY=PASSIVE, below); until stop 55 they ran one after the other (each kept
// both cores busy, 1.97 measured, much of it threads spinning between small products). e2e runs alone: its waits are
// a browser's.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { failureReport } from './failure-report.mjs';

const root = join(import.meta.dirname, '..');
// Python test files run on the typecheck → unit → verl lane, after them, to even the two lanes: on issue 48's Intel
// Xeon the python lane took 777 s against the other's 537 s (on the AMD EPYC 601 s against 448 s); test_benchmark.py
// and test_numerics.py were ~110 s of it. Stop 60's rehearsal: the other lane had grown to 752 s (unit 536 s) against
// python's 648 s, so `model.dtype fastest`'s runs (test_numerics.py, 59 s) went back; the GPU check's CPU rehearsal
// (test_benchmark.py, 73 s: four phases) stays.
const PYTHON_2 = ['trainer/tests/test_benchmark.py'];
const commands = {
  lint: ['npm', 'run', '-s', 'lint'], // the formatters and linters, checked (seconds)
  typecheck: ['npm', 'run', '-s', 'typecheck'],
  unit: ['npm', 'run', '-s', 'test:unit'],
  // the Python suite in two parts, one on each lane: `python`, and `python-2` after the other lane's suites (below)
  python: ['npm', 'run', '-s', 'test:python', '--', ...PYTHON_2.map((f) => `--ignore=${f}`)],
  'python-2': ['node', 'scripts/run-python.mjs', '-m', 'pytest', ...PYTHON_2, '-q', '--durations=3'],
  verl: ['npm', 'run', '-s', 'test:verl'],
  e2e: ['npm', 'run', '-s', 'test:e2e'],
  // the two learning tests, side by side (below)
  'learning-1': [
    'node',
    'scripts/run-python.mjs',
    '-m',
    'pytest',
    'trainer/tests/test_demo_multihop.py',
    '-q',
    '--durations=1',
  ],
  'learning-2': ['node', 'scripts/run-python.mjs', '-m', 'pytest', 'trainer/tests/test_demo.py', '-q', '--durations=1'],
};
/** Phases in order; a phase is lanes run side by side; a lane is suites run one after another. */
const phases = [
  [['lint']],
  [['typecheck', 'unit', 'verl', 'python-2'], ['python']],
  [['e2e']],
  [['learning-1'], ['learning-2']],
];

const only = process.env.SAS_SUITES?.split(',').map((s) => s.trim());
// SAS_SUITES=python runs both parts of the Python suite
const chosen = (name) => !only || only.includes(name) || only.includes(name.replace(/-\d+$/, ''));
const results = [];
const t0 = Date.now();
for (const phase of phases) {
  const lanes = phase.map((lane) => lane.filter(chosen)).filter((lane) => lane.length);
  const shared = lanes.length > 1;
  await Promise.all(
    lanes.map(async (lane) => {
      for (const name of lane) {
        const cmd = commands[name];
        console.log(
          `\n━━━ ${name}: ${cmd.join(' ')}${
            shared
              ? `  (beside ${lanes
                  .filter((l) => l !== lane)
                  .map((l) => l.join(' → '))
                  .join(', ')}; its lines start with "${name} │")`
              : ''
          }`,
        );
        const started = Date.now();
        const { status, output, quietSeconds } = await run(cmd, shared ? name : '');
        results.push({
          name,
          ok: status === 0,
          seconds: (Date.now() - started) / 1000,
          status,
          output,
          quietSeconds,
          shared,
        });
        console.log(
          `━━━ ${name}: ${status === 0 ? 'passed' : `FAILED (exit ${status})`} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
        );
      }
    }),
  );
}
console.log('\n━━━ summary');
// A suite that prints its result and then does not exit (a timer or a worker keeping the process alive) spends CI
// minutes nobody sees (stop 42's unit suite: 4 minutes of tests, then 8 silent ones); the summary names the silence.
const QUIET_NOTE_S = 30;
for (const r of results) {
  const quiet =
    r.quietSeconds >= QUIET_NOTE_S ? `  (silent for its last ${r.quietSeconds.toFixed(0)} s before it exited)` : '';
  const beside = r.shared ? '  (beside another lane)' : '';
  console.log(
    `  ${r.ok ? '✓' : '✗'} ${r.name.padEnd(10)} ${r.seconds.toFixed(1).padStart(7)} s${r.ok ? '' : `  (exit ${r.status})`}${beside}${quiet}`,
  );
}
console.log(`  all suites: ${((Date.now() - t0) / 1000).toFixed(1)} s of wall time`);
const failed = results.filter((r) => !r.ok);
for (const r of failed) {
  console.log(`\n━━━ ${r.name}: what failed (again, from its output above)`);
  console.log(failureReport(r.output));
}
if (failed.length) console.log(`\n${failed.length} suite(s) failed: ${failed.map((r) => r.name).join(', ')}`);
process.exit(failed.length ? 1 : 0);

/**
 * Runs a suite with its output passed through as it comes, and kept (the last 4 MB) for the failure report. With a
 * `prefix` (a suite beside another), its output is passed through whole lines at a time, each line prefixed, so two
 * suites' lines do not interleave mid-line.
 */
function run(cmd, prefix) {
  return new Promise((resolve) => {
    // Beside another lane, torch gets one thread a process (unless the caller set them): two suites' processes
    // each spinning two OpenMP threads on 2 cores wait on each other (stop 49: the shrunk demo test took 175 s beside
    // the python lane, 14 s alone). The learning tests pin their own threads (conftest.PINNED_NUMERICS).
    // The learning tests keep their two threads (their pin) and wait for work asleep, not spinning
    // (OMP_WAIT_POLICY=PASSIVE: how a thread waits, not how work is divided, so the same bits): side by side, one
    // test's Python between its products is the other's time on the second core rather than a spinning thread's.
    const env = prefix
      ? {
          ...process.env,
          OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? '1',
          MKL_NUM_THREADS: process.env.MKL_NUM_THREADS ?? '1',
          OMP_WAIT_POLICY: process.env.OMP_WAIT_POLICY ?? 'PASSIVE',
        }
      : process.env;
    const child = spawn(cmd[0], cmd.slice(1), { cwd: root, env, stdio: ['inherit', 'pipe', 'pipe'] });
    let output = '';
    let last = Date.now();
    const partial = { out: '', err: '' };
    const pass = (text, to, key) => {
      if (!prefix) return void to.write(text);
      const lines = (partial[key] + text).split('\n');
      partial[key] = lines.pop();
      if (lines.length) to.write(lines.map((l) => `${prefix} │ ${l}\n`).join(''));
    };
    const keep = (chunk, to, key) => {
      last = Date.now();
      const text = chunk.toString('utf8');
      pass(text, to, key);
      output += text;
      if (output.length > 4_000_000) output = output.slice(-2_000_000);
    };
    child.stdout.on('data', (c) => keep(c, process.stdout, 'out'));
    child.stderr.on('data', (c) => keep(c, process.stderr, 'err'));
    const flush = () => {
      if (prefix && partial.out) process.stdout.write(`${prefix} │ ${partial.out}\n`);
      if (prefix && partial.err) process.stderr.write(`${prefix} │ ${partial.err}\n`);
    };
    const quietSeconds = () => (Date.now() - last) / 1000;
    child.on('error', (e) => resolve({ status: String(e), output, quietSeconds: quietSeconds() }));
    child.on('close', (code, signal) => {
      flush();
      resolve({ status: code ?? signal, output, quietSeconds: quietSeconds() });
    });
  });
}
