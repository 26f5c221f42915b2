// `npm test`: every suite the project has, in order, each run even if an earlier one failed; a summary at the
// end; exit 1 if any failed. SAS_SUITES=unit,python limits the run (for local iteration only).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

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
  const r = spawnSync(suite.cmd[0], suite.cmd.slice(1), { cwd: root, stdio: 'inherit' });
  results.push({ name: suite.name, ok: r.status === 0, seconds: (Date.now() - t0) / 1000, status: r.status ?? r.signal });
}
console.log('\n━━━ summary');
for (const r of results) console.log(`  ${r.ok ? '✓' : '✗'} ${r.name.padEnd(10)} ${r.seconds.toFixed(1).padStart(7)} s${r.ok ? '' : `  (exit ${r.status})`}`);
const failed = results.filter((r) => !r.ok);
if (failed.length) console.log(`\n${failed.length} suite(s) failed: ${failed.map((r) => r.name).join(', ')}`);
process.exit(failed.length ? 1 : 0);
