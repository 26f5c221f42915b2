/**
 * The reward API's published types (dist/reward-api.d.ts, generated from src/core/rewards/api.ts): the example
 * reward modules type-check against them alone, as a user's module does, and a mistake is caught.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import ts from 'typescript';
import { openReward } from '../../src/core/rewards/scoring';
import { rewardTemplate } from '../../src/core/rewards/template';

const ROOT = join(__dirname, '..', '..');

function check(files: string[]): string[] {
  const program = ts.createProgram(files, { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler, types: [], lib: ['lib.es2022.d.ts'], skipLibCheck: false });
  return ts.getPreEmitDiagnostics(program).map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
}

describe('reward API types for reward modules', function () {
  this.timeout(60_000);
  let dir: string;
  let dts: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-reward-types-'));
    dts = join(dir, 'reward-api.d.ts');
    await execa(process.execPath, [join(ROOT, 'scripts', 'reward-types.mjs'), dts]);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the example modules type-check against the generated declarations alone', () => {
    const examples = readdirSync(join(ROOT, 'examples', 'rewards')).map((f) => join(ROOT, 'examples', 'rewards', f));
    assert.ok(examples.length >= 4);
    assert.deepEqual(check([dts, ...examples]), []);
  });

  it('a wrong use is a type error (the types are real, not any)', () => {
    const bad = join(dir, 'bad.reward.ts');
    writeFileSync(bad, "import { defineReward, em } from 'search-agent-studio/reward';\nexport default defineReward({ name: 'x', score(traj, example) { return em(traj.searches, example.golden) + traj.nope; } });\n");
    const errors = check([dts, bad]);
    assert.ok(errors.some((e) => /string\[\]' is not assignable to parameter of type 'string'/.test(e)), errors.join('\n'));
    assert.ok(errors.some((e) => /Property 'nope' does not exist/.test(e)), errors.join('\n'));
  });
});

describe('New Reward Function template', function () {
  this.timeout(60_000);
  it('type-checks against the generated types and scores in the sandbox', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-template-'));
    try {
      const types = join(dir, '.search-agent', 'reward-api.d.ts');
      await execa(process.execPath, [join(ROOT, 'scripts', 'reward-types.mjs'), types]);
      const file = join(dir, 'rewards', 'my-reward.reward.ts');
      mkdirSync(join(dir, 'rewards'));
      writeFileSync(file, rewardTemplate('my-reward', '../.search-agent/reward-api.d.ts'));
      assert.deepEqual(check([file]), [], 'the triple-slash reference brings the types');
      const r = await openReward(file, { workers: 1 });
      try {
        const out = await r.sandbox.score([
          { id: 'a', prompt: '', response: '<think>x</think>\n<answer> Paris </answer>', golden: ['Paris'] },
          { id: 'b', prompt: '', response: 'Paris', golden: ['Paris'] },
        ]);
        assert.deepEqual(out, [
          { id: 'a', reward: 1, parts: { em: 1, format: 1 } },
          { id: 'b', reward: 0, parts: { em: 0, format: 0 } },
        ]);
      } finally {
        await r.sandbox.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
