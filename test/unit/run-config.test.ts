// Run configs: every example in examples/ is valid against the one schema; "New Training Run…" templates are valid
// for every combination of answers; errors name the key.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { checkRunConfig, newRunDir, RunConfigError } from '../../src/core/host/runConfig';
import { newRunConfig, type NewRunAnswers } from '../../src/core/host/templates';
import { RunConfigSchema } from '../../src/core/run/config';
import { validate } from '../../src/core/schema/schema';
import { noPythonMessage, pythonCandidates } from '../../src/core/python';

const ROOT = resolve(__dirname, '../..');

function examples(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? examples(join(dir, e.name)) : e.name.endsWith('.run.json') ? [join(dir, e.name)] : []));
}

describe('run configs', () => {
  it('every example config validates against the schema', () => {
    const files = examples(join(ROOT, 'examples'));
    assert.ok(files.length >= 5, files.join(', '));
    for (const f of files) assert.deepEqual(validate(RunConfigSchema, JSON.parse(readFileSync(f, 'utf8'))), [], f);
  });

  it('the demo configs name files that exist (they run as shipped)', () => {
    for (const f of ['demo.run.json', 'ablations/demo-no-loss-masking.run.json', 'ablations/demo-no-retrieval.run.json']) {
      const file = join(ROOT, 'examples', f);
      const loaded = checkRunConfig(JSON.parse(readFileSync(file, 'utf8')), file, join(file, '..'));
      assert.equal(loaded.config.model.kind, 'tiny');
    }
  });

  it('the GPU examples use Search-R1’s settings (the presets; top-k 3, max_turns 4)', () => {
    const c = JSON.parse(readFileSync(join(ROOT, 'examples/qwen2.5-3b-grpo.run.json'), 'utf8'));
    assert.deepEqual([c.algorithm, c.retriever.topk, c.rollout.max_turns], [{ preset: 'search-r1-grpo' }, 3, 4]);
    const p = JSON.parse(readFileSync(join(ROOT, 'examples/qwen2.5-3b-ppo.run.json'), 'utf8'));
    assert.deepEqual(p.algorithm, { preset: 'search-r1-ppo' });
  });

  it('New Training Run… templates are valid for every combination of answers', () => {
    const models: NewRunAnswers['model'][] = [{ kind: 'tiny' }, { kind: 'hf', path: '/m' }, { kind: 'hf', path: '/m', lora: true }];
    const data: NewRunAnswers['data'][] = [{ kind: 'demo' }, { kind: 'files', train: '/d/train.jsonl', eval: '/d/eval.jsonl' }];
    const retrievers: NewRunAnswers['retriever'][] = [{ kind: 'demo' }, { kind: 'bm25', index: '/i' }, { kind: 'bm25', corpus: '/c.jsonl' }, { kind: 'dense', index: '/i', model: '/e5' }, { kind: 'remote', url: 'http://127.0.0.1:8000/retrieve' }];
    let n = 0;
    for (const model of models)
      for (const d of data)
        for (const retriever of retrievers)
          for (const algorithm of ['grpo', 'ppo'] as const) {
            const c = newRunConfig({ name: 'x', model, data: d, retriever, algorithm }, 'examples/demo');
            assert.deepEqual(validate(RunConfigSchema, c), [], JSON.stringify({ model, d, retriever, algorithm }));
            if (model.kind === 'hf') assert.equal(c.algorithm?.preset, algorithm === 'grpo' ? 'search-r1-grpo' : 'search-r1-ppo');
            n++;
          }
    assert.equal(n, 60);
  });

  it('problems are named by key path, all of them', () => {
    assert.throws(
      () => checkRunConfig({ data: { train: 1 }, model: { kind: 'tiny' }, rollout: { tempreature: 1 } }, '/x/a.run.json', '/x'),
      (e: Error) => e instanceof RunConfigError && /^\/x\/a\.run\.json: /.test(e.message) && /data\.train/.test(e.message) && /rollout\.tempreature/.test(e.message),
    );
    assert.throws(() => checkRunConfig({ data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'hf' } }, 'c.run.json', ROOT), /model\.path: is required/);
    assert.throws(() => checkRunConfig({ data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' }, retriever: { kind: 'remote' } }, 'c.run.json', ROOT), /kind "remote" needs url/);
  });

  it('new run directories are named <name>-<time> and never reuse one', () => {
    const loaded = checkRunConfig({ name: 'my run/1', data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' } }, join(ROOT, 'x.run.json'), ROOT);
    const t = new Date(2026, 10, 21, 9, 5, 7);
    assert.equal(newRunDir(loaded, '/tmp/none-such-parent', t), '/tmp/none-such-parent/my-run-1-20261121-090507');
    assert.equal(newRunDir(loaded, ROOT, t).startsWith(join(ROOT, 'my-run-1-')), true);
    const withOut = checkRunConfig({ name: 'r', output_dir: 'out', data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' } }, join(ROOT, 'x.run.json'), ROOT);
    assert.equal(newRunDir(withOut, '/elsewhere', t), join(ROOT, 'out', 'r-20261121-090507'));
  });
});

describe('trainer Python candidates', () => {
  it('named first (setting, Python extension), then SAS_PYTHON, the .venv, python3 on PATH, /usr/bin/python3; no duplicates', () => {
    const saved = process.env.SAS_PYTHON;
    process.env.SAS_PYTHON = '/opt/py/bin/python';
    try {
      const c = pythonCandidates(['/my/python', undefined, '/my/python'], ROOT);
      assert.equal(c[0], '/my/python');
      assert.equal(c.filter((p) => p === '/my/python').length, 1);
      assert.ok(c.indexOf('python3') > 0);
      assert.ok(!c.includes('/opt/py/bin/python'), 'a SAS_PYTHON that does not exist is dropped (it was not named by the user here)');
      if (existsSync(join(ROOT, '.venv/bin/python'))) assert.ok(c.indexOf(join(ROOT, '.venv/bin/python')) < c.indexOf('python3'));
    } finally {
      if (saved === undefined) delete process.env.SAS_PYTHON;
      else process.env.SAS_PYTHON = saved;
    }
    const msg = noPythonMessage({ tried: [{ executable: '/x/python', ok: false, error: 'not found (ENOENT)' }] });
    assert.match(msg, /Tried:\n {2}\/x\/python: not found \(ENOENT\)\n.*searchAgent\.pythonPath/s);
  });
});
