import assert from 'node:assert/strict';
import { join } from 'node:path';
import { execa } from 'execa';
import { probePython } from '../../src/core/python';

const ROOT = join(__dirname, '..', '..');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], { reject: false });

describe('CLI', () => {
  it('prints its version', async () => {
    const r = await cli('--version');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.trim(), JSON.parse(require('node:fs').readFileSync(join(ROOT, 'package.json'), 'utf8')).version);
  });

  it('exits 2 with usage on an unknown command', async () => {
    const r = await cli('frobnicate');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /unknown command: frobnicate/);
    assert.match(r.stderr, /Usage:/);
  });

  it('doctor names the Python it tried and why it is unusable', async () => {
    const r = await cli('doctor', '--python', '/nonexistent/python3');
    assert.equal(r.exitCode, 1);
    assert.match(r.stdout, /✗ \/nonexistent\/python3: .*(ENOENT|not found|no such file)/i);
  });

  it('probePython reports a Python without torch as unusable, with the import error', async () => {
    // The machine's bare python3 has no torch (the trainer's lives in .venv).
    const p = await probePython('python3');
    if (p.ok) return; // a machine with a global torch: nothing to assert here
    assert.match(p.error ?? '', /cannot import torch/);
    assert.match(p.python ?? '', /^3\./);
  });
});
