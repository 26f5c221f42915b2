// The tests' scratch directories (test/support/scratch.ts): gone when the process that made them exits, whether it
// ended normally or threw; kept, and printed, with SAS_KEEP_TMP=1.
import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';

const ROOT = join(__dirname, '..', '..');
const script = (end: string) =>
  `const { scratchDir } = require(${JSON.stringify(join(ROOT, 'test/support/scratch.ts'))});` +
  `const fs = require('node:fs'); const a = scratchDir('sas-scratch-test-'); const b = scratchDir('sas-scratch-test-');` +
  `fs.mkdirSync(a + '/deep/er', { recursive: true }); fs.writeFileSync(a + '/deep/er/f.txt', 'x');` +
  `console.log(JSON.stringify([a, b])); ${end}`;

async function made(end: string, env: Record<string, string> = {}) {
  const r = await execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), '-e', script(end)], {
    reject: false,
    env: { SAS_KEEP_TMP: '', SAS_E2E_KEEP: '', ...env },
  });
  const dirs = JSON.parse(r.stdout.split('\n')[0]!) as string[];
  return { r, dirs };
}

describe('scratch directories (test/support/scratch.ts)', () => {
  it('are removed, with what is in them, when the process exits normally', async () => {
    const { r, dirs } = await made('');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(dirs.length, 2);
    for (const d of dirs) assert.equal(existsSync(d), false, d);
  });

  it('are removed when the process ends on an uncaught error', async () => {
    const { r, dirs } = await made("throw new Error('boom');");
    assert.notEqual(r.exitCode, 0);
    for (const d of dirs) assert.equal(existsSync(d), false, d);
  });

  it('are kept, and named on stderr, with SAS_KEEP_TMP=1', async () => {
    const { r, dirs } = await made('', { SAS_KEEP_TMP: '1' });
    try {
      for (const d of dirs) assert.equal(existsSync(d), true, d);
      assert.match(r.stderr, /kept 2 scratch directories/);
      for (const d of dirs) assert.ok(r.stderr.includes(d), r.stderr);
    } finally {
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    }
  });
});
