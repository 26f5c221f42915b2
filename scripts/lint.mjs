// `npm run lint`: the formatters and linters, checked: Biome on the TypeScript/JavaScript (biome.jsonc), Ruff on the
// Python (ruff.toml). Every violation is printed as file:line; exit 1 if any. Each check runs even if an earlier one
// failed. `npm run format` (`--write`): the formatters applied, and the linters' safe fixes (unused imports, import
// order, …); what is left is printed as `npm run lint` prints it. A few seconds on 2 cores.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const write = process.argv.includes('--write');
const biome = join(root, 'node_modules', '.bin', 'biome');
const python = process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python');

const colors = process.stdout.isTTY ? [] : ['--colors=off'];
const steps = write
  ? [
      // Biome twice: 2.6.8's formatter can lay out a call chain differently once a first pass has laid out its
      // arguments (a yargs builder in src/cli/environment.ts); the second pass settles it, a third changes nothing.
      [
        'biome: format, safe fixes, import order',
        biome,
        ['check', '--write', ...colors, '--max-diagnostics=0', '.'],
        'first',
      ],
      [
        'biome: again, and what is left',
        biome,
        ['check', '--write', ...colors, '--error-on-warnings', '--max-diagnostics=50', '.'],
      ],
      ['ruff: safe fixes, import order', python, ['-m', 'ruff', 'check', '--fix', '.']],
      ['ruff: format', python, ['-m', 'ruff', 'format', '.']],
    ]
  : [
      [
        'biome: format, lint, import order',
        biome,
        ['ci', ...colors, '--error-on-warnings', '--max-diagnostics=50', '.'],
      ],
      ['ruff: lint', python, ['-m', 'ruff', 'check', '.']],
      ['ruff: format', python, ['-m', 'ruff', 'format', '--check', '.']],
    ];

const missing = [];
if (!existsSync(biome)) missing.push(`${biome} (npm ci installs Biome, a devDependency)`);
if (!existsSync(python) || spawnSync(python, ['-m', 'ruff', '--version'], { stdio: 'ignore' }).status !== 0) {
  missing.push(`ruff in ${python} (trainer/requirements-dev.txt pins it: bash scripts/setup.sh --test)`);
}
if (missing.length) {
  console.error(`lint: not installed: ${missing.join('; ')}`);
  process.exit(2);
}

const failed = [];
for (const [name, cmd, args, first] of steps) {
  console.log(`── ${name}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0 && !first) failed.push(name); // the first Biome pass: what it leaves, the second reports
}
if (failed.length) {
  console.error(
    `\nlint: failed: ${failed.join('; ')}${write ? '' : ' (`npm run format` fixes what can be fixed by a tool)'}`,
  );
  process.exit(1);
}
console.log(write ? 'format: done' : 'lint: clean');
