import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { cliPythonCandidates, demoSummary, heldOutEm, noRetrievalConfig, ProgressPrinter } from '../../src/cli/train';
import { checkRunConfig, standaloneConfig } from '../../src/core/host/runConfig';
import { interpreterPath } from '../../src/core/host/runs';
import { probePython, runPythonNote } from '../../src/core/python';
import { scratchDir } from '../support/scratch';
import { trainTinyWithCli } from '../support/tinyRun';

const ROOT = join(__dirname, '..', '..');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

describe('CLI', () => {
  it('prints its version', async () => {
    const r = await cli('--version');
    assert.equal(r.exitCode, 0);
    assert.equal(
      r.stdout.trim(),
      JSON.parse(require('node:fs').readFileSync(join(ROOT, 'package.json'), 'utf8')).version,
    );
  });

  it('exits 2 with usage on an unknown command', async () => {
    const r = await cli('frobnicate');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /unknown command: frobnicate/);
    assert.match(r.stderr, /search-agent-studio <command> \[options\]/);
  });

  it('every subcommand prints its own usage with --help and exits 0', async function () {
    // One Node process (TypeScript transpiled at start) per subcommand: run a few at a time, with room for a loaded
    // machine (no timing is asserted).
    this.timeout(240_000);
    const top = await cli('--help');
    assert.equal(top.exitCode, 0);
    const names = [...top.stdout.matchAll(/^ {2}search-agent-studio ([\w-]+)/gm)].map((m) => m[1]!);
    for (const c of [
      'doctor',
      'setup',
      'demo',
      'train',
      'serve',
      'index',
      'inspect',
      'audit',
      'import',
      'reward',
      'export',
      'fork',
      'whatif',
      'replay-step',
    ])
      assert.ok(names.includes(c), `${c} is listed (${names.join(', ')})`);
    const subcommands = names.filter((n) => n !== 'completion');
    const results = new Map<string, Awaited<ReturnType<typeof cli>>>();
    const queue = [...subcommands];
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let name = queue.shift(); name !== undefined; name = queue.shift())
          results.set(name, await cli(name, '--help'));
      }),
    );
    for (const name of subcommands) {
      const r = results.get(name)!;
      assert.equal(r.exitCode, 0, `${name} --help: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`^search-agent-studio ${name}\\b`, 'm'), `${name} --help shows its own usage`);
      assert.equal(r.stderr, '');
    }
    const train = await cli('train', '--help');
    assert.match(train.stdout, /--resume/);
    assert.match(train.stdout, /--run-dir/);
  });

  it("an unknown option is bad usage: exit 2, the option named, the command's usage", async () => {
    const r = await cli('inspect', 'x.jsonl', '--jsno');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /Unknown argument: jsno/);
    assert.match(r.stderr, /search-agent-studio inspect <path>/);
  });

  it('prints a shell completion script, and completes subcommands', async () => {
    const r = await cli('completion');
    assert.equal(r.exitCode, 0);
    assert.match(
      r.stdout,
      /complete -o bashdefault -o default -F _search-agent-studio_yargs_completions search-agent-studio/,
    );
    const c = await cli('--get-yargs-completions', 'search-agent-studio', '');
    assert.deepEqual(
      c.stdout
        .split('\n')
        .filter((l) => /^(doctor|setup|train|inspect)$/.test(l))
        .sort(),
      ['doctor', 'inspect', 'setup', 'train'],
    );
  });

  it('doctor names the Python it tried and why it is unusable', async () => {
    const r = await cli('doctor', '--python', '/nonexistent/python3');
    assert.equal(r.exitCode, 1);
    assert.match(r.stdout, /✗ \/nonexistent\/python3: .*(ENOENT|not found|no such file)/i);
    assert.match(r.stdout, /search-agent-studio setup/);
  });

  it('probePython reports a Python without torch as unusable, with the import error', async () => {
    // The machine's bare python3 has no torch (the trainer's lives in .venv).
    const p = await probePython('python3');
    if (p.ok) return; // a machine with a global torch: nothing to assert here
    assert.match(p.error ?? '', /cannot import torch/);
    assert.match(p.python ?? '', /^3\./);
  });

  describe('train', function () {
    this.timeout(120_000);
    const fixture = join(ROOT, 'test/fixtures/runs/tiny.run.json');

    it('without a config: usage, exit 2', async () => {
      const r = await cli('train');
      assert.equal(r.exitCode, 2);
      assert.match(r.stderr, /name one run config/);
      assert.match(r.stderr, /--resume/);
      assert.match(r.stderr, /--run-dir/);
    });

    it('an invalid config: exit 2, the file and every bad key named, nothing started', async () => {
      const dir = scratchDir('sas-cli-train-');
      const bad = join(dir, 'bad.run.json');
      writeFileSync(
        bad,
        JSON.stringify({
          data: { train: join(ROOT, 'examples/demo/train.jsonl') },
          model: { kind: 'tiny' },
          rollout: { n: 0, temprature: 1 },
        }),
      );
      const r = await execa(
        process.execPath,
        ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'train', bad],
        { reject: false, cwd: dir },
      );
      assert.equal(r.exitCode, 2, r.stderr);
      assert.match(r.stderr, /bad\.run\.json: .*rollout\.n.*rollout\.temprature/);
      assert.equal(existsSync(join(dir, 'runs')), false);
    });

    it("a resume tries the run's own Python first (run.json python), --python alone when given", () => {
      const own = '/elsewhere/venv/bin/python';
      assert.equal(cliPythonCandidates(undefined, own)[0], own, 'kept first even where it is gone: the probe says why');
      assert.ok(cliPythonCandidates(undefined, own).length > 1, 'then the usual candidates');
      assert.ok(!cliPythonCandidates(undefined).includes(own));
      assert.deepEqual(cliPythonCandidates('/my/python', own), ['/my/python']);
      // what the resume says: its own Python, or why another one resumed it
      const probe = (executable: string, ok: boolean, error?: string) =>
        ({ executable, ok, ...(error ? { error } : {}) }) as never;
      assert.equal(
        runPythonNote({ found: probe(own, true), tried: [probe(own, true)] }, own),
        `resuming in the Python the run started in: ${own}`,
      );
      assert.equal(
        runPythonNote(
          { found: probe('/v/python', true), tried: [probe(own, false, 'not found'), probe('/v/python', true)] },
          own,
        ),
        `the Python the run started in (${own}) is not usable (not found); resuming in /v/python`,
      );
      assert.equal(runPythonNote({ tried: [] }, own), undefined);
      // run.json names it; a run directory from elsewhere cannot make a resume run just any program
      assert.equal(interpreterPath('/opt/venv/bin/python3.11'), '/opt/venv/bin/python3.11');
      for (const bad of ['/tmp/evil', 'python3', '/usr/bin/python3; rm -rf ~', 42, undefined])
        assert.equal(interpreterPath(bad), undefined, String(bad));
    });

    it('no Python with torch: exit 1 and what was tried', async () => {
      const r = await cli('train', fixture, '--python', '/nonexistent/python3');
      assert.equal(r.exitCode, 1);
      assert.match(
        r.stderr,
        /No usable Python for the trainer \(torch ≥ 2\.0\) was found\. Tried:\n {2}\/nonexistent\/python3: /,
      );
      assert.match(r.stderr, /search-agent-studio setup/);
    });

    it('runs a config end to end (plain lines when not a TTY) and ends with held-out EM before → after', async () => {
      const dir = scratchDir('sas-cli-train-');
      const r = await trainTinyWithCli(dir);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(r.stdout, /^run directory: runs\/tiny-\d{8}-\d{6} /m);
      assert.match(r.stdout, /^step 0: held-out exact match \d\.\d{3}, searches per question/m);
      assert.match(r.stdout, /^step 2: reward \d\.\d{3}/m);
      assert.match(
        r.stdout.trim().split('\n').pop()!,
        /^held-out exact match: \d\.\d{3} before → \d\.\d{3} after \(step 2\)$/,
      );
      assert.ok(!r.stdout.includes('\x1b['), 'no terminal control codes when not a TTY');
    });
  });

  describe('demo', function () {
    // a real (shrunk) two-hop run twice: ~100 s alone, 200–240 s on a loaded 2-core machine (a timeout is not a finding)
    this.timeout(480_000);

    it('runs the two-hop recipe (shrunk: a curriculum of two 1-step stages) end to end with --seed, then its last checkpoint with retrieval disabled, and prints both by hops', async () => {
      const dir = scratchDir('sas-cli-demo-');
      const c = JSON.parse(readFileSync(join(ROOT, 'examples/demo-multihop.run.json'), 'utf8'));
      c.data.eval_size = 12;
      c.rollout = { ...c.rollout, batch_size: 2, n: 2 };
      c.optim = { ...c.optim, mini_batch_size: 4, micro_batch_size: 4, warmup_steps: 0 };
      c.train.stages = [
        { steps: 1, hops_mix: { '1': 1, '2': 3 } },
        { steps: 1, hops_mix: null },
      ];
      c.train.supervised_warmup.steps = 2;
      c.train.checkpoint_every = 0;
      writeFileSync(join(dir, 'small.run.json'), JSON.stringify(c));
      const r = await execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'demo',
          '--config',
          'small.run.json',
          '--run-dir',
          'run',
          '--seed',
          '7',
        ],
        // the recipe's model.dtype fastest keeps its measurement for the machine: in the scratch dir, not the user's cache
        { reject: false, cwd: dir, env: { XDG_CACHE_HOME: join(dir, 'cache') } },
      );
      assert.equal(r.exitCode, 0, r.stderr);
      // --seed: the config with the seed, written into the run directory, is what the trainer ran
      const seeded = JSON.parse(readFileSync(join(dir, 'run', 'demo.run.json'), 'utf8'));
      assert.deepEqual([seeded.seed, seeded.train, seeded.data.train], [7, c.train, c.data.train]);
      assert.equal(JSON.parse(readFileSync(join(dir, 'run', 'run.json'), 'utf8')).config.seed, 7);
      assert.doesNotMatch(r.stderr, /no-retrieval check failed/);
      const last = r.stdout.trim().split('\n').pop()!;
      assert.match(
        last,
        /^held-out exact match: \d\.\d{3} before training \(after the warm start\) → \d\.\d{3} after 2 steps \((?:\d+m\d\d|\d+)s\); searches per question \d\.\d\d; by hops: 1-hop \d\.\d{3} \(\d\.\d\d searches, answer retrieved \d\.\d{3}\), 2-hop \d\.\d{3} \(\d\.\d\d searches, bridge entity searched \d\.\d{3}, answer retrieved \d\.\d{3}\); with retrieval disabled \d\.\d{3} \(1-hop \d\.\d{3}, 2-hop \d\.\d{3}\)$/,
      );
      // the evaluation-only run: the last checkpoint, no retriever, no training, its own run directory
      const blind = JSON.parse(readFileSync(join(dir, 'run', 'eval-no-retrieval', 'run.json'), 'utf8'));
      assert.equal(blind.status, 'finished');
      assert.equal(blind.config.retriever.kind, 'none');
      assert.equal(blind.config.model.init, join(dir, 'run', 'checkpoints', 'step-000002'));
      const m = readFileSync(join(dir, 'run', 'eval-no-retrieval', 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      assert.deepEqual([...new Set(m.map((x) => x.step))], [0], 'evaluated, not trained');
      assert.equal(m.find((x) => 'val/em' in x)['val/env/number_of_valid_search'] >= 0, true);
    });
  });
});

describe("the demo's --seed", () => {
  it('refuses a seed that is not a non-negative integer before starting anything', async () => {
    for (const seed of ['-1', '1.5', 'x']) {
      const r = await execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'demo',
          '--seed',
          seed,
          '--run-dir',
          join(tmpdir(), 'sas-never'),
        ],
        { reject: false },
      );
      assert.notEqual(r.exitCode, 0, seed);
      assert.match(r.stderr, /--seed must be a non-negative integer/, seed);
    }
    assert.equal(existsSync(join(tmpdir(), 'sas-never')), false);
  });

  it("standaloneConfig: relative paths absolute against the config's directory, builtin: names kept", () => {
    const dir = scratchDir('sas-standalone-');
    writeFileSync(join(dir, 'train.jsonl'), '');
    writeFileSync(join(dir, 'corpus.jsonl'), '');
    writeFileSync(join(dir, 'r.ts'), '');
    const loaded = checkRunConfig(
      {
        seed: 1,
        output_dir: 'out',
        data: { train: 'train.jsonl', eval: 'builtin:demo-multihop/eval' },
        model: { kind: 'tiny', tiny: { vocab: ['corpus.jsonl', 'builtin:demo-multihop/corpus'] } },
        retriever: { kind: 'bm25', corpus: 'corpus.jsonl' },
        reward: { module: 'r.ts' },
      },
      join(dir, 'x.run.json'),
      dir,
    );
    const c = standaloneConfig(loaded);
    assert.deepEqual(
      [c.data.train, c.data.eval, c.model.tiny.vocab, c.retriever.corpus, c.reward.module, c.output_dir],
      [
        join(dir, 'train.jsonl'),
        'builtin:demo-multihop/eval',
        [join(dir, 'corpus.jsonl'), 'builtin:demo-multihop/corpus'],
        join(dir, 'corpus.jsonl'),
        join(dir, 'r.ts'),
        join(dir, 'out'),
      ],
    );
    assert.equal((loaded.config as any).data.train, 'train.jsonl', 'the loaded config is left as it was');
  });
});

describe("the demo's no-retrieval evaluation and last line", () => {
  it("the evaluation-only config keeps the run's data, model and rollout, starts from the checkpoint, retrieves nothing and trains nothing (no stages, no warm start)", () => {
    const run = JSON.parse(readFileSync(join(ROOT, 'examples/demo-multihop.run.json'), 'utf8'));
    const cfg = noRetrievalConfig(run, '/runs/x/checkpoints/step-000440');
    assert.deepEqual(cfg.train, {
      steps: 0,
      eval_every: run.train.eval_every,
      checkpoint_every: run.train.checkpoint_every,
    });
    assert.deepEqual(cfg.retriever, { kind: 'none', topk: 3 });
    assert.equal(cfg.model.init, '/runs/x/checkpoints/step-000440');
    assert.deepEqual(cfg.model.tiny, run.model.tiny);
    assert.deepEqual(
      [cfg.data, cfg.rollout, cfg.reward, cfg.name],
      [run.data, run.rollout, run.reward, 'demo-multihop-no-retrieval'],
    );
    assert.ok(run.train.stages && run.train.supervised_warmup, 'the recipe itself is unchanged');
  });

  it('prints before → after, by hops with searches, bridge entity searched and answer retrieved, and the no-retrieval numbers by hops; – where a number is missing', () => {
    const before = {
      step: 0,
      em: 0.02,
      searches: 1.5,
      byHops: [
        { hops: 1, em: 0.04, searches: 1.0 },
        { hops: 2, em: 0, searches: 2.0 },
      ],
    };
    const after = {
      step: 440,
      em: 0.52,
      searches: 1.52,
      byHops: [
        { hops: 1, em: 0.7, searches: 1.07, retrieved: 0.9 },
        { hops: 2, em: 0.3, searches: 1.9, retrieved: 0.6, bridge: 0.75 },
      ],
    };
    const blind = {
      step: 0,
      em: 0.006,
      searches: 1.5,
      byHops: [
        { hops: 1, em: 0.011, searches: 1.0 },
        { hops: 2, em: 0, searches: 2.0 },
      ],
    };
    assert.equal(
      demoSummary({ before, after }, 845, blind),
      'held-out exact match: 0.020 before training (after the warm start) → 0.520 after 440 steps (14m05s); searches per question 1.52; ' +
        'by hops: 1-hop 0.700 (1.07 searches, answer retrieved 0.900), 2-hop 0.300 (1.90 searches, bridge entity searched 0.750, answer retrieved 0.600); with retrieval disabled 0.006 (1-hop 0.011, 2-hop 0.000)',
    );
    assert.match(demoSummary({ before, after }, 119.6, blind), /after 440 steps \(2m00s\)/, 'not 1m60s');
    assert.equal(
      demoSummary({ before: { step: 0, em: 0.1, byHops: [] } }, 5, undefined),
      'held-out exact match: 0.100 before training (after the warm start) → – after 0 steps (5s); searches per question –; with retrieval disabled –',
    );
  });
});

describe("the progress printer: the run's numerics and the warm start's pace against the reference machine (issue 48)", () => {
  // the events as the trainer writes them (pace.announce): the pace on the progress event, and for a slower machine a
  // warning carrying the same message
  const printed = (quiet: boolean, isTTY: boolean, pace: Record<string, unknown>) => {
    const out: string[] = [];
    const printer = new ProgressPrinter({ isTTY, columns: 200, write: (s: string) => out.push(s) > 0 }, quiet);
    printer.event({
      event: 'started',
      model: 'tiny',
      parameters: 1,
      device: 'cpu',
      train_examples: 1,
      eval_examples: 1,
      total: 400,
    });
    printer.event({
      event: 'progress',
      step: 0,
      total: 400,
      phase: 'warmup',
      warmup_step: 50,
      warmup_steps: 300,
      loss: 1,
    });
    if (pace.slow === true) printer.event({ event: 'warning', message: pace.message as string, pace });
    printer.event({
      event: 'progress',
      step: 0,
      total: 400,
      phase: 'warmup',
      warmup_step: 75,
      warmup_steps: 300,
      loss: 1,
      pace,
    });
    // biome-ignore lint/suspicious/noControlCharactersInRegex: splits on the terminal's erase-line sequence
    const lines = out.join('').split(/\r\x1b\[K|\n/);
    return lines.filter((l) => l.includes('warm start: '));
  };
  const slow = {
    speed: 0.5,
    slow: true,
    message:
      'warm start: 0.66 s a step, 0.33 s on a 2-core AMD EPYC: slower than the reference machine: this CPU runs the demo at ~0.50× the reference speed; expect ~28m44s in all (14m22s there)',
  };
  const fine = {
    ...slow,
    speed: 1,
    slow: false,
    message:
      'warm start: 0.33 s a step, 0.33 s on a 2-core AMD EPYC: this CPU runs the demo at ~1.00× the reference speed; expect ~14m22s in all (14m22s there)',
  };

  it('a slower machine is warned as soon as the warm start has measured it, once, on a terminal and in a log, --quiet too', () => {
    for (const quiet of [false, true])
      for (const tty of [false, true])
        assert.deepEqual(printed(quiet, tty, slow), [`warning: ${slow.message}`], `quiet ${quiet}, isTTY ${tty}`);
  });

  it('a machine at the reference pace is told its pace; --quiet leaves it out', () => {
    for (const tty of [false, true]) assert.deepEqual(printed(false, tty, fine), [fine.message], `isTTY ${tty}`);
    assert.deepEqual(printed(true, false, fine), []);
  });

  it("the first line says what the run computes in, and why (the started event's precision)", () => {
    const out: string[] = [];
    const printer = new ProgressPrinter({ isTTY: false, write: (s: string) => out.push(s) > 0 }, true);
    const precision =
      'bf16 autocast, fp32 master weights (model.dtype fastest: bf16 measured 1.26× faster than fp32 on this CPU)';
    printer.event({
      event: 'started',
      model: 'tiny',
      parameters: 1254400,
      device: 'cpu',
      precision,
      train_examples: 2,
      eval_examples: 3,
      total: 400,
    });
    printer.event({
      event: 'started',
      model: 'tiny',
      parameters: 1,
      device: 'cpu',
      train_examples: 2,
      eval_examples: 3,
      total: 4,
    });
    assert.deepEqual(out.join('').trim().split('\n'), [
      `run started: tiny policy (1,254,400 parameters) on cpu, ${precision}; 2 training / 3 held-out questions; 400 steps`,
      'run started: tiny policy (1 parameters) on cpu; 2 training / 3 held-out questions; 4 steps',
    ]);
  });
});

describe("heldOutEm (the demo's last line)", () => {
  it('reads the first and last evaluation of metrics.jsonl with exact match and searches by hops, in hops order; a partial last line is ignored', async () => {
    const dir = scratchDir('sas-heldout-');
    const lines = [
      {
        step: 0,
        'val/em': 0.02,
        'val/searches_mean': 1.1,
        'val/em_by_hops/2': 0,
        'val/searches_by_hops/2': 1.5,
        'val/em_by_hops/1': 0.04,
        'val/searches_by_hops/1': 1.0,
      },
      { step: 1, 'critic/score/mean': 0.1 },
      {
        step: 2,
        'val/em': 0.4,
        'val/searches_mean': 1.4,
        'val/em_by_hops/1': 0.7,
        'val/searches_by_hops/1': 1.0,
        'val/answer_retrieved_by_hops/1': 0.9,
        'val/em_by_hops/2': 0.25,
        'val/searches_by_hops/2': 1.9,
        'val/answer_retrieved_by_hops/2': 0.6,
        'val/bridge_searched_by_hops/2': 0.75,
        'val/em/demo': 0.4,
      },
    ];
    writeFileSync(join(dir, 'metrics.jsonl'), lines.map((l) => JSON.stringify(l)).join('\n') + '\n{"step": 3, "val/em');
    const { before, after } = await heldOutEm(dir);
    assert.deepEqual(before?.byHops, [
      { hops: 1, em: 0.04, searches: 1.0 },
      { hops: 2, em: 0, searches: 1.5 },
    ]);
    assert.deepEqual(after, {
      step: 2,
      em: 0.4,
      searches: 1.4,
      byHops: [
        { hops: 1, em: 0.7, searches: 1.0, retrieved: 0.9 },
        { hops: 2, em: 0.25, searches: 1.9, retrieved: 0.6, bridge: 0.75 },
      ],
    });
    writeFileSync(join(dir, 'metrics.jsonl'), JSON.stringify({ step: 0, 'val/em': 0.1 }) + '\n');
    assert.deepEqual((await heldOutEm(dir)).before?.byHops, [], 'data without meta.hops: no by-hops numbers');
  });
});
