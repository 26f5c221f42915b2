// Run configs: every example in examples/ is valid against the one schema; "New Training Run…" templates are valid
// for every combination of answers; errors name the key.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  checkRunConfig,
  makeNewRunDir,
  newRunDir,
  RunConfigError,
  resolveConfigPath,
} from '../../src/core/host/runConfig';
import { type NewRunAnswers, newRunConfig } from '../../src/core/host/templates';
import { noPythonMessage, pythonCandidates } from '../../src/core/python';
import { RunConfigSchema } from '../../src/core/run/config';
import { ENGINE_LIMITS } from '../../src/core/run/engines';
import { validate } from '../../src/core/schema/schema';
import { scratchDir } from '../support/scratch';

const ROOT = resolve(__dirname, '../..');

function examples(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? examples(join(dir, e.name)) : e.name.endsWith('.run.json') ? [join(dir, e.name)] : [],
  );
}

describe('run configs', () => {
  it('every example config validates against the schema', () => {
    const files = examples(join(ROOT, 'examples'));
    assert.ok(files.length >= 5, files.join(', '));
    for (const f of files) assert.deepEqual(validate(RunConfigSchema, JSON.parse(readFileSync(f, 'utf8'))), [], f);
  });

  it("no shipped config names a relative $schema (it fails to load in a user's workspace and turns validation off; the contributed jsonValidation covers *.run.json)", () => {
    for (const f of [...examples(join(ROOT, 'examples')), ...examples(join(ROOT, 'test/fixtures'))]) {
      const c = JSON.parse(readFileSync(f, 'utf8'));
      assert.ok(c.$schema === undefined || /^https?:/.test(c.$schema), `${f}: $schema ${c.$schema}`);
    }
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    assert.deepEqual(pkg.contributes.jsonValidation, [
      { fileMatch: '*.run.json', url: './docs/schema/run-config.schema.json' },
    ]);
  });

  it('the demo configs name files that exist, by their built-in names (they run as shipped, and copied anywhere)', () => {
    for (const f of [
      'demo.run.json',
      'ablations/demo-no-loss-masking.run.json',
      'ablations/demo-no-retrieval.run.json',
      'ablations/demo-multihop-no-loss-masking.run.json',
    ]) {
      const file = join(ROOT, 'examples', f);
      const loaded = checkRunConfig(JSON.parse(readFileSync(file, 'utf8')), file, join(file, '..'));
      assert.equal(loaded.config.model.kind, 'tiny');
    }
  });

  it("the two-hop recipe (examples/demo-multihop.run.json, issue 20) runs as shipped: one config on the two-hop world, strict actions, a warm start that searches twice three times in four, half the flat groups kept, a 200-step stage three quarters two-hop, then 200 steps on the data's own mix, bf16 where the CPU has it natively and measures no slower than fp32 (stop 41, issue 48)", () => {
    const file = join(ROOT, 'examples/demo-multihop.run.json');
    const c = checkRunConfig(JSON.parse(readFileSync(file, 'utf8')), file, join(file, '..')).config;
    assert.deepEqual(c.train?.stages, [
      { steps: 200, hops_mix: { '1': 1, '2': 3 } },
      { steps: 200, hops_mix: null },
    ]);
    assert.equal(
      c.model.dtype,
      'fastest',
      'bf16 on a CPU without native bf16 is ~10x slower than fp32 (docs/demo.md: stop 41), and on a Xeon with AMX 1.4x slower although native (issue 48): measured',
    );
    assert.equal(c.train?.steps, undefined, "the steps are the stages' sum");
    assert.deepEqual(
      [
        c.train?.supervised_warmup?.two_searches,
        c.train?.supervised_warmup?.answer_from,
        c.train?.supervised_warmup?.second_query,
      ],
      [0.75, 'any', 'new_name'],
    );
    assert.deepEqual(
      [c.algorithm?.skip_zero_std_groups, c.algorithm?.zero_std_keep],
      [true, 0.5],
      'flat groups: half their sequences kept for the KL term (docs/demo.md: stop 37)',
    );
    assert.equal(c.data.hops_mix, undefined);
    assert.equal(
      c.rollout?.strict_actions,
      true,
      'an answer inside an unclosed <search> is no answer (docs/demo.md: the tag the policy dropped)',
    );
    // the two-hop world (as many rivers as towns): its data, vocabulary and corpus, by their built-in names
    const raw = JSON.parse(readFileSync(file, 'utf8'));
    assert.deepEqual(
      [raw.data.train, raw.data.eval, raw.model.tiny.vocab, raw.retriever.corpus],
      [
        'builtin:demo-multihop/train',
        'builtin:demo-multihop/eval',
        ['builtin:demo-multihop/corpus'],
        'builtin:demo-multihop/corpus',
      ],
    );
  });

  it("the two-hop recipe's masking ablation is the recipe with loss_masking off (and its own name), nothing else", () => {
    const recipe = JSON.parse(readFileSync(join(ROOT, 'examples/demo-multihop.run.json'), 'utf8'));
    const ablation = JSON.parse(
      readFileSync(join(ROOT, 'examples/ablations/demo-multihop-no-loss-masking.run.json'), 'utf8'),
    );
    assert.equal(ablation.algorithm.loss_masking, false);
    assert.deepEqual(
      { ...ablation, name: recipe.name, algorithm: { ...ablation.algorithm, loss_masking: undefined } },
      { ...recipe, algorithm: { ...recipe.algorithm, loss_masking: undefined } },
    );
  });

  it('the demo worlds are what scripts/make-demo-corpus.ts writes (seeded), and the two-hop world has many river answers, none shared by the splits', function () {
    this.timeout(60000);
    const rows = (dir: string, f: string) =>
      readFileSync(join(dir, f), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
    for (const [world, args] of [
      ['demo', []],
      ['demo-multihop', ['--rivers', '180']],
    ] as const) {
      const out = mkdtempSync(join(tmpdir(), 'sas-world-'));
      execFileSync(
        process.execPath,
        ['-r', './test/register.cjs', 'scripts/make-demo-corpus.ts', ...args, '--out', out],
        { cwd: ROOT, stdio: 'pipe' },
      );
      for (const f of ['corpus.jsonl', 'train.jsonl', 'eval.jsonl'])
        assert.ok(
          readFileSync(join(out, f)).equals(readFileSync(join(ROOT, 'examples', world, f))),
          `examples/${world}/${f} is not what the generator writes`,
        );
      rmSync(out, { recursive: true, force: true });
      const train = rows(join(ROOT, 'examples', world), 'train.jsonl');
      const held = rows(join(ROOT, 'examples', world), 'eval.jsonl');
      const answers = (xs: { golden: string[] }[]) => new Set(xs.map((q) => q.golden[0]));
      const heldAnswers = answers(held);
      assert.deepEqual(
        [...answers(train)].filter((a) => heldAnswers.has(a)),
        [],
        `${world}: the splits share an answer entity`,
      );
      const rivers = answers(train.filter((q) => /river/.test(q.meta.kind)));
      if (world === 'demo') assert.equal(rivers.size, 40);
      else assert.ok(rivers.size >= 90, `${world}: ${rivers.size} distinct river answers in training`);
      // meta.bridge: a person is [whole name, surname]; the surname is no other person's (a word of the world no one
      // else bears) and never said by the question, which could hand it to a query that found no one.
      const titles = readFileSync(join(ROOT, 'examples', world, 'corpus.jsonl'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse((JSON.parse(l).contents as string).split('\n')[0]!) as string);
      const rowsOf = [...train, ...held] as {
        question: string;
        meta: { hops: number; kind: string; bridge?: string | string[] };
      }[];
      const people = new Set(
        rowsOf.flatMap((q) =>
          q.meta.kind === 'birthplace-river' || !q.meta.bridge ? [] : [[q.meta.bridge].flat()[0]!],
        ),
      );
      let aliased = 0;
      for (const q of rowsOf) {
        assert.equal(q.meta.hops === 2, q.meta.bridge !== undefined, q.question);
        if (!Array.isArray(q.meta.bridge)) continue;
        aliased++;
        const [name, surname, ...more] = q.meta.bridge;
        assert.deepEqual(more, [], q.question);
        assert.equal(name!.split(' ').at(-1), surname, q.question);
        assert.ok(!new RegExp(`\\b${surname}\\b`, 'i').test(q.question), `${q.question}: says the surname ${surname}`);
        assert.ok(titles.includes(name!), `${name}: no passage titled so`);
        const namesakes = [...people].filter((p) => p !== name && p.split(' ').includes(surname!));
        assert.deepEqual(namesakes, [], `${surname} is another person's too`);
      }
      assert.ok(aliased > 100, `${world}: ${aliased} two-hop questions with a surname alias`);
    }
  });

  it('train.stages: train.steps beside them must be their sum; other engines refuse them', () => {
    const base = {
      data: { train: 'examples/demo/train.jsonl' },
      model: { kind: 'tiny' },
      train: { stages: [{ steps: 2 }, { steps: 3, hops_mix: null }] },
    };
    assert.deepEqual(validate(RunConfigSchema, base), []);
    assert.deepEqual(validate(RunConfigSchema, { ...base, train: { ...base.train, steps: 5 } }), []);
    assert.deepEqual(
      validate(RunConfigSchema, { ...base, train: { ...base.train, steps: 4 } }).map((i) => `${i.path}: ${i.message}`),
      ["train.steps: 4 is not the sum of train.stages' steps (5): leave train.steps out, or make it 5"],
    );
    assert.deepEqual(
      validate(RunConfigSchema, { ...base, train: { stages: [{ steps: 0 }] } }).map((i) => i.path),
      ['train.stages[0].steps'],
    );
    assert.deepEqual(
      validate(RunConfigSchema, { ...base, train: { stages: [{ steps: 1, lr: 1 }] } }).map((i) => i.path),
      ['train.stages[0].lr'],
    );
    const verl = validate(RunConfigSchema, { ...base, engine: 'verl', model: { kind: 'hf', path: 'm' } });
    assert.match(
      verl.map((i) => `${i.path}: ${i.message}`).join('\n'),
      /^train\.stages: this section is not supported by engine "verl".*engines that can: "builtin"$/m,
    );
  });

  it('the one-GPU examples use Search-R1’s settings (the presets, top-k 3; the rollout’s shape from the preset)', () => {
    const c = JSON.parse(readFileSync(join(ROOT, 'examples/one-gpu/qwen2.5-3b-grpo.run.json'), 'utf8'));
    assert.deepEqual([c.algorithm, c.retriever.topk, c.rollout], [{ preset: 'search-r1-grpo' }, 3, undefined]);
    const p = JSON.parse(readFileSync(join(ROOT, 'examples/one-gpu/qwen2.5-3b-ppo.run.json'), 'utf8'));
    assert.deepEqual(p.algorithm, { preset: 'search-r1-ppo' });
  });

  it('the TRL examples run as shipped (trl-tiny: files that exist) and use Search-R1’s settings on a GPU', () => {
    const tiny = join(ROOT, 'examples/trl-tiny.run.json');
    const loaded = checkRunConfig(JSON.parse(readFileSync(tiny, 'utf8')), tiny, join(tiny, '..'));
    assert.deepEqual(
      [loaded.config.engine, loaded.config.model.random_init, loaded.config.model.device],
      ['trl', true, 'cpu'],
    );
    const gpu = JSON.parse(readFileSync(join(ROOT, 'examples/qwen2.5-3b-trl.run.json'), 'utf8'));
    assert.deepEqual(
      [gpu.engine, gpu.algorithm, gpu.retriever.topk, gpu.rollout.max_turns, gpu.trl.use_vllm, gpu.trl.vllm_mode],
      ['trl', { preset: 'search-r1-grpo' }, 3, 4, true, 'colocate'],
    );
    assert.ok(existsSync(join(ROOT, 'examples', gpu.trl.accelerate_config)));
  });

  it('what an engine cannot do is an error naming the key, the value and the engines that can', () => {
    const base = {
      data: { train: 'examples/demo/train.jsonl' },
      model: { kind: 'hf', path: 'examples/trl-tiny/model' },
    };
    const problems = (c: object) => {
      try {
        checkRunConfig(c, 'c.run.json', ROOT);
      } catch (e) {
        return (e as RunConfigError).problems;
      }
      return [];
    };
    assert.deepEqual(problems({ ...base, engine: 'trl', algorithm: { name: 'ppo', kl_in_reward: true } }), [
      'algorithm.name: "ppo" is not supported by engine "trl" (PPO trains a critic, which TRL’s GRPOTrainer has not); engines that can: "builtin", "verl"',
      'algorithm.kl_in_reward: true is not supported by engine "trl" (TRL puts the KL term in the loss only); engines that can: "builtin", "verl"',
    ]);
    assert.match(
      problems({ ...base, engine: 'trl', model: { kind: 'tiny' } })[0]!,
      /^model\.kind: "tiny" is not supported by engine "trl".*engines that can: "builtin"$/,
    );
    assert.match(
      problems({ ...base, engine: 'verl', data: { ...base.data, hops_mix: { 1: 1, 2: 3 } } })[0]!,
      /^data\.hops_mix: this section is not supported by engine "verl".*engines that can: "builtin"$/,
    );
    assert.match(
      problems({ ...base, devices: 4 })[0]!,
      /^devices: 4 is not supported by engine "builtin".*engines that can: "trl", "verl"$/,
    );
    assert.match(
      problems({ ...base, trl: { use_vllm: true } })[0]!,
      /^trl: this section is not supported by engine "builtin".*engines that can: "trl"$/,
    );
    assert.deepEqual(
      problems({ ...base, engine: 'trl', devices: 2, trl: { use_vllm: true, some_grpo_option: 1 } }),
      [],
      'the trl section passes other GRPOConfig options (the trainer checks them)',
    );
    assert.deepEqual(
      validate(RunConfigSchema, { ...base, engine: 'trl', algorithm: { preset: 'search-r1-ppo' } }).map((i) => i.path),
      ['algorithm.preset'],
    );
  });

  it('docs/engines.md lists every engine limit with the engines that can', () => {
    const section = readFileSync(join(ROOT, 'docs/engines.md'), 'utf8')
      .split('## What each engine cannot do')[1]!
      .split('\n## ')[0]!;
    const rows = section.split('\n').filter((l) => l.startsWith('| `'));
    for (const limit of ENGINE_LIMITS) {
      const row = rows.find(
        (l) =>
          l.split('|')[1]!.includes(`\`${limit.key}\``) &&
          (!limit.when.equals || limit.when.equals.some((v) => l.includes(`\`${JSON.stringify(v)}\``))),
      );
      assert.ok(row, `docs/engines.md has no row for ${limit.key} ${JSON.stringify(limit.when)}`);
      assert.equal(row.split('|')[2]!.trim(), limit.engines.join(', '), `${limit.key}: the engines that can`);
    }
  });

  it('New Training Run… templates are valid for every combination of answers', () => {
    const models: NewRunAnswers['model'][] = [
      { kind: 'tiny' },
      { kind: 'hf', path: '/m' },
      { kind: 'hf', path: '/m', lora: true },
    ];
    const data: NewRunAnswers['data'][] = [
      { kind: 'demo' },
      { kind: 'files', train: '/d/train.jsonl', eval: '/d/eval.jsonl' },
    ];
    const retrievers: NewRunAnswers['retriever'][] = [
      { kind: 'demo' },
      { kind: 'bm25', index: '/i' },
      { kind: 'bm25', corpus: '/c.jsonl' },
      { kind: 'dense', index: '/i', model: '/e5' },
      { kind: 'remote', url: 'http://127.0.0.1:8000/retrieve' },
    ];
    let n = 0;
    for (const engine of ['builtin', 'trl'] as const)
      for (const model of models)
        for (const d of data)
          for (const retriever of retrievers)
            for (const algorithm of ['grpo', 'ppo'] as const) {
              const c = newRunConfig({ name: 'x', engine, model, data: d, retriever, algorithm });
              assert.deepEqual(
                validate(RunConfigSchema, c),
                [],
                JSON.stringify({ engine, model, d, retriever, algorithm }),
              );
              if (model.kind === 'hf')
                assert.equal(
                  c.algorithm?.preset,
                  algorithm === 'grpo' || engine === 'trl' ? 'search-r1-grpo' : 'search-r1-ppo',
                );
              if (engine === 'trl' && model.kind === 'tiny')
                assert.deepEqual(
                  [c.engine, c.model.path, c.model.random_init],
                  ['trl', 'builtin:trl-tiny/model', true],
                );
              n++;
            }
    assert.equal(n, 120);
  });

  it('New Training Run… names the demo data builtin:demo/… (no path into the versioned extension), and it resolves', () => {
    const c = newRunConfig({
      name: 'demo',
      model: { kind: 'tiny' },
      data: { kind: 'demo' },
      retriever: { kind: 'demo' },
      algorithm: 'grpo',
    });
    assert.deepEqual(
      [c.data.train, c.data.eval, c.model.tiny?.vocab],
      ['builtin:demo/train', 'builtin:demo/eval', ['builtin:demo/corpus']],
    );
    assert.ok(!JSON.stringify(c).includes('examples/'), 'no path into the package');
    // Written into a folder far from the package, it loads: the built-in names resolve to the files that ship.
    const loaded = checkRunConfig(c, '/elsewhere/demo.run.json', '/elsewhere');
    assert.equal(resolveConfigPath(loaded.config.data.train, loaded.base), join(ROOT, 'examples/demo/train.jsonl'));
    assert.throws(
      () => checkRunConfig({ ...c, data: { train: 'builtin:demo/nope' } }, '/x/a.run.json', '/x'),
      /data\.train: unknown built-in data "builtin:demo\/nope"; the built-ins are builtin:demo\/train/,
    );
  });

  it('problems are named by key path, all of them', () => {
    assert.throws(
      () =>
        checkRunConfig(
          { data: { train: 1 }, model: { kind: 'tiny' }, rollout: { tempreature: 1 } },
          '/x/a.run.json',
          '/x',
        ),
      (e: Error) =>
        e instanceof RunConfigError &&
        /^\/x\/a\.run\.json: /.test(e.message) &&
        /data\.train/.test(e.message) &&
        /rollout\.tempreature/.test(e.message),
    );
    assert.throws(
      () => checkRunConfig({ data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'hf' } }, 'c.run.json', ROOT),
      /model\.path: is required/,
    );
    assert.throws(
      () =>
        checkRunConfig(
          { data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' }, retriever: { kind: 'remote' } },
          'c.run.json',
          ROOT,
        ),
      /kind "remote" needs url/,
    );
  });

  it('new run directories are named <name>-<time> and never reuse one', () => {
    const loaded = checkRunConfig(
      { name: 'my run/1', data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' } },
      join(ROOT, 'x.run.json'),
      ROOT,
    );
    const t = new Date(2026, 10, 21, 9, 5, 7);
    assert.equal(newRunDir(loaded, '/tmp/none-such-parent', t), '/tmp/none-such-parent/my-run-1-20261121-090507');
    assert.equal(newRunDir(loaded, ROOT, t).startsWith(join(ROOT, 'my-run-1-')), true);
    const withOut = checkRunConfig(
      { name: 'r', output_dir: 'out', data: { train: 'examples/demo/train.jsonl' }, model: { kind: 'tiny' } },
      join(ROOT, 'x.run.json'),
      ROOT,
    );
    assert.equal(newRunDir(withOut, '/elsewhere', t), join(ROOT, 'out', 'r-20261121-090507'));
    // made at once, atomically: runs started in the same second each get their own (the second takes `-2`, …)
    const parent = join(scratchDir('sas-new-run-dir-'), 'runs');
    const made = [makeNewRunDir(loaded, parent, t), makeNewRunDir(loaded, parent, t), makeNewRunDir(loaded, parent, t)];
    assert.deepEqual(
      made.map((d) => d.slice(parent.length + 1)),
      ['my-run-1-20261121-090507', 'my-run-1-20261121-090507-2', 'my-run-1-20261121-090507-3'],
    );
    for (const d of made) assert.deepEqual(readdirSync(d), [], `${d} exists, empty`);
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
      assert.ok(
        !c.includes('/opt/py/bin/python'),
        'a SAS_PYTHON that does not exist is dropped (it was not named by the user here)',
      );
      if (existsSync(join(ROOT, '.venv/bin/python')))
        assert.ok(c.indexOf(join(ROOT, '.venv/bin/python')) < c.indexOf('python3'));
    } finally {
      if (saved === undefined) delete process.env.SAS_PYTHON;
      else process.env.SAS_PYTHON = saved;
    }
    const msg = noPythonMessage({ tried: [{ executable: '/x/python', ok: false, error: 'not found (ENOENT)' }] });
    assert.match(msg, /Tried:\n {2}\/x\/python: not found \(ENOENT\)\n.*search-agent-studio setup/s);
  });
});
