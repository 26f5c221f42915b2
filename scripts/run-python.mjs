// Runs the project's venv Python (.venv) with the trainer package on PYTHONPATH: node scripts/run-python.mjs ARGS…
// --verl first: veRL's own venv (.venv-verl, scripts/setup-verl.sh) instead.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

const root = join(import.meta.dirname, '..');
const verl = process.argv[2] === '--verl';
const args = process.argv.slice(verl ? 3 : 2);
const python = verl
  ? join(root, '.venv-verl', 'bin', 'python')
  : (process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python'));
if (!existsSync(python)) {
  console.error(
    `run-python: ${python} does not exist; run \`bash scripts/setup.sh --test\` first (or set SAS_PYTHON).`,
  );
  process.exit(2);
}
const env = {
  ...process.env,
  PYTHONPATH: [join(root, 'trainer'), process.env.PYTHONPATH].filter(Boolean).join(delimiter),
};
const r = spawnSync(python, args, { stdio: 'inherit', env });
process.exit(r.status ?? 1);
