// `npm test`: every suite the project has, in order, each run even if an earlier one failed; a summary at the
// end, with what failed in each failed suite printed again (CI keeps only the tail of the output: a unit failure
// scrolled out of it once); exit 1 if any failed. SAS_SUITES=unit,python limits the run (for local iteration only).
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { failureReport } from './failure-report.mjs';

const root = join(import.meta.dirname, '..');
const suites = [
  { name: 'typecheck', cmd: ['npm', 'run', '-s', 'typecheck'] },
  { name: 'unit', cmd: ['npm', 'run', '-s', 'test:unit'] },
  { name: 'python', cmd: ['npm', 'run', '-s', 'test:python'] },
  { name: 'verl', cmd: ['npm', 'run', '-s', 'test:verl'] },
  { name: 'e2e', cmd: ['npm', 'run', '-s', 'test:e2e'] },
];
const only = process.env.SAS_SUITES?.split(',').map((s) => s.trim());
const results = [];
for (const suite of suites) {
  if (only && !only.includes(suite.name)) continue;
  console.log(`\n━━━ ${suite.name}: ${suite.cmd.join(' ')}`);
  const t0 = Date.now();
  const { status, output, quietSeconds } = await run(suite.cmd);
  results.push({ name: suite.name, ok: status === 0, seconds: (Date.now() - t0) / 1000, status, output, quietSeconds });
}
console.log('\n━━━ summary');
// A suite that prints its result and then does not exit (a timer or a worker keeping the process alive) spends CI
// minutes nobody sees (stop 42's unit suite: 4 minutes of tests, then 8 silent ones); the summary names the silence.
const QUIET_NOTE_S = 30;
for (const r of results) {
  const quiet = r.quietSeconds >= QUIET_NOTE_S ? `  (silent for its last ${r.quietSeconds.toFixed(0)} s before it exited)` : '';
  console.log(`  ${r.ok ? '✓' : '✗'} ${r.name.padEnd(10)} ${r.seconds.toFixed(1).padStart(7)} s${r.ok ? '' : `  (exit ${r.status})`}${quiet}`);
}
const failed = results.filter((r) => !r.ok);
for (const r of failed) {
  console.log(`\n━━━ ${r.name}: what failed (again, from its output above)`);
  console.log(failureReport(r.output));
}
if (failed.length) console.log(`\n${failed.length} suite(s) failed: ${failed.map((r) => r.name).join(', ')}`);
process.exit(failed.length ? 1 : 0);

/** Runs a suite with its output passed through as it comes, and kept (the last 4 MB) for the failure report. */
function run(cmd) {
  return new Promise((resolve) => {
    const child = spawn(cmd[0], cmd.slice(1), { cwd: root, stdio: ['inherit', 'pipe', 'pipe'] });
    let output = '';
    let last = Date.now();
    const keep = (chunk, to) => {
      last = Date.now();
      to.write(chunk);
      output += chunk.toString('utf8');
      if (output.length > 4_000_000) output = output.slice(-2_000_000);
    };
    child.stdout.on('data', (c) => keep(c, process.stdout));
    child.stderr.on('data', (c) => keep(c, process.stderr));
    const quietSeconds = () => (Date.now() - last) / 1000;
    child.on('error', (e) => resolve({ status: String(e), output, quietSeconds: quietSeconds() }));
    child.on('close', (code, signal) => resolve({ status: code ?? signal, output, quietSeconds: quietSeconds() }));
  });
}
