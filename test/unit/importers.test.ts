import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import {
  detectSource,
  importDataset,
  readSource,
  rolloutFileKind,
  type SourceItem,
  UnreadableInput,
} from '../../src/core/importers';
import { DatasetExampleSchema, type DatasetImportIssue } from '../../src/core/importers/dataset';
import { goldenList } from '../../src/core/run/fields';
import { type Rollout, validateRollout } from '../../src/core/run/format';
import { validate } from '../../src/core/schema/schema';

const ROOT = join(__dirname, '..', '..');
const FIX = join(ROOT, 'test', 'fixtures');

async function all(path: string): Promise<SourceItem[]> {
  const out: SourceItem[] = [];
  for await (const item of readSource(path)) out.push(item);
  return out;
}
const records = (items: SourceItem[]) => items.filter((i) => i.record).map((i) => i.record!);

describe('importers', () => {
  it('detects what a path holds', async () => {
    assert.equal(await detectSource(join(FIX, 'transcripts', 'searchr1-infer.txt')), 'searchr1');
    assert.equal(await detectSource(join(FIX, 'verl')), 'verl');
    assert.equal(await detectSource(join(FIX, 'verl', '5.jsonl')), 'verl');
    assert.equal(await detectSource(join(FIX, 'trl')), 'trl');
    assert.equal(await detectSource(join(FIX, 'trl', 'completions', 'completions_00010.parquet')), 'trl');
    await assert.rejects(
      detectSource(join(FIX, 'missing')),
      (e: unknown) => e instanceof UnreadableInput && /no such file/.test(e.message),
    );
    await assert.rejects(
      detectSource(join(FIX, 'transcripts')),
      (e: unknown) => e instanceof UnreadableInput && /no run\.json/.test(e.message),
    );
  });

  it('Search-R1 transcripts: one record per conversation, prompt/response split, question, derived counts', async () => {
    const rs = records(await all(join(FIX, 'transcripts', 'searchr1-infer.txt')));
    assert.equal(rs.length, 3);
    assert.deepEqual(
      rs.map((r) => r.question),
      [
        'who founded the varnholt observatory?',
        'in which town was the founder of the varnholt observatory born?',
        'what river runs through quendal?',
      ],
    );
    assert.ok(rs[0]!.prompt.endsWith('<|im_start|>assistant\n'));
    assert.ok(rs[0]!.response.startsWith('<think>'));
    assert.deepEqual(
      rs.map((r) => [r.searches, r.turns, r.finish]),
      [
        [1, 2, 'answer'],
        [2, 4, 'answer'],
        [1, 2, 'length'],
      ],
    );
    assert.equal(rs[2]!.meta!.template, 'llama3');
    for (const r of rs) assert.deepEqual(validateRollout(r, 'x', 1), []);
  });

  it('veRL dumps: steps in numeric order, golden from {target}, extra numbers as reward parts, bad lines reported', async () => {
    const items = await all(join(FIX, 'verl'));
    const rs = records(items);
    assert.deepEqual(
      rs.map((r) => r.step),
      [5, 5, 10],
    );
    assert.deepEqual(rs[0]!.golden, ['Ilse Marrow']);
    assert.deepEqual(rs[2]!.golden, ['Ossel', 'the Ossel']);
    assert.deepEqual(
      rs.map((r) => r.reward),
      [1, 0, 1],
    );
    assert.deepEqual(rs[0]!.reward_parts, { acc: 1 });
    assert.deepEqual(rs[2]!.reward_parts, { acc: 1 }, 'a boolean extra becomes 0/1');
    assert.equal(rs[1]!.meta!.pred, 'Quendal');
    assert.match(rs[0]!.prompt, /Question: varnholt founder/);
    assert.deepEqual(
      rs.map((r) => r.question),
      ['varnholt founder', 'varnholt founder', 'quendal river'],
      'the question is read from the prompt',
    );
    const bad = items.find((i) => !i.record)!;
    assert.deepEqual(
      bad.issues.map((i) => [i.file.endsWith('10.jsonl'), i.line, i.field]),
      [[true, 2, 'output']],
    );
  });

  it('TRL completion tables: strings and conversational messages, groups by prompt, rewards summed', async () => {
    const rs = records(await all(join(FIX, 'trl')));
    assert.equal(rs.length, 8);
    assert.deepEqual(
      rs.map((r) => r.step),
      [10, 10, 10, 10, 10, 10, 20, 20],
    );
    assert.deepEqual(
      rs.map((r) => `${r.group}/${r.sample}`),
      ['0/0', '0/1', '0/2', '1/0', '1/1', '1/2', '0/0', '0/1'],
    );
    assert.deepEqual(rs[0]!.reward_parts, { reward_em: 1, reward_format: 0.2 });
    assert.equal(rs[0]!.reward, 1.2);
    assert.equal(rs[2]!.meta!.advantage, -1.155);
    assert.ok(rs[6]!.prompt.includes('Question: varnholt founder'), 'conversational prompt → its text');
    assert.ok(rs[7]!.response.includes('<answer> Beijing </answer>'));
  });

  it('Search-R1 datasets → our dataset examples', async () => {
    const issues: DatasetImportIssue[] = [];
    const out = [];
    for await (const ex of importDataset(join(FIX, 'searchr1-dataset', 'train.parquet'), issues)) out.push(ex);
    assert.deepEqual(issues, []);
    assert.deepEqual(out[1], {
      id: 'train_1',
      question: 'in which town was the founder of the varnholt observatory born?',
      golden: ['Quendal', 'Quendal, Ossel Valley'],
      data_source: 'hotpotqa',
      split: 'train',
    });
    for (const ex of out) assert.deepEqual(validate(DatasetExampleSchema, ex), []);
  });

  it('golden answers from every shape sources use', () => {
    assert.deepEqual(goldenList('Paris'), ['Paris']);
    assert.deepEqual(goldenList({ target: ['a', 'b'] }), ['a', 'b']);
    assert.deepEqual(goldenList('["a", "b"]'), ['a', 'b']);
    assert.deepEqual(goldenList("{'target': 'not json'}"), ["{'target': 'not json'}"]);
    assert.deepEqual(goldenList([1, null, 'x']), ['1', 'x']);
    assert.deepEqual(goldenList(undefined), []);
  });
});

describe('what the Reward Lab offers to score against', () => {
  it('rollout files by place or content; not metrics, events, datasets or corpora', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-kinds-'));
    try {
      const run = join(dir, 'runs', 'demo-1');
      mkdirSync(join(run, 'rollouts'), { recursive: true });
      const rollout = JSON.stringify({
        v: 1,
        id: 'r',
        step: 1,
        prompt: 'p',
        response: '<answer>x</answer>',
        tokens: { text: ['x'.repeat(70_000)] },
      });
      const files: Record<string, string> = {
        'runs/demo-1/rollouts/step-000001.jsonl': rollout,
        'runs/demo-1/rollouts/val-step-000000.jsonl': rollout,
        'runs/demo-1/metrics.jsonl': JSON.stringify({ step: 1, 'critic/score/mean': 0.5 }),
        'runs/demo-1/events.jsonl': JSON.stringify({ event: 'started' }),
        'data/train.jsonl': JSON.stringify({ id: 'q1', question: 'who?', golden: ['x'] }),
        'data/corpus.jsonl': JSON.stringify({ id: 'd1', contents: 'Title\ntext' }),
        'exported/scored.jsonl': `\n${rollout}`,
        'dumps/5.jsonl': JSON.stringify({ input: 'p', output: 'o', score: 1 }),
      };
      for (const [f, text] of Object.entries(files)) {
        mkdirSync(join(dir, f, '..'), { recursive: true });
        writeFileSync(join(dir, f), `${text}\n`);
      }
      const kinds = Object.fromEntries(
        await Promise.all(Object.keys(files).map(async (f) => [f, (await rolloutFileKind(join(dir, f))) ?? null])),
      );
      assert.deepEqual(kinds, {
        'runs/demo-1/rollouts/step-000001.jsonl': 'rollouts',
        'runs/demo-1/rollouts/val-step-000000.jsonl': 'rollouts',
        'runs/demo-1/metrics.jsonl': null,
        'runs/demo-1/events.jsonl': null,
        'data/train.jsonl': null,
        'data/corpus.jsonl': null,
        'exported/scored.jsonl': 'rollouts',
        'dumps/5.jsonl': 'verl',
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('CLI inspect and import', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-cli-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const cli = (...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
      reject: false,
    });

  it('inspect --json prints one object with per-trajectory facts and diagnostics', async () => {
    const r = await cli('inspect', join(FIX, 'transcripts', 'searchr1-infer.txt'), '--json');
    assert.equal(r.exitCode, 0, r.stderr);
    const o = JSON.parse(r.stdout);
    assert.equal(o.kind, 'searchr1');
    assert.equal(o.trajectories.length, 3);
    const t = o.trajectories[1];
    assert.equal(t.question, 'in which town was the founder of the varnholt observatory born?');
    assert.equal(t.searches, 2);
    assert.equal(t.answer, 'Quendal');
    assert.equal(t.invalid_actions, 1);
    assert.deepEqual(
      t.diagnostics.map((d: { code: string }) => d.code),
      ['text-between-tags'],
    );
    assert.ok(Array.isArray(o.trajectories[0].diagnostics));
    assert.equal(o.summary.trajectories, 3);
  });

  it('inspect summarises a run directory, and reports malformed lines on stderr', async () => {
    const run = join(dir, 'run');
    mkdirSync(join(run, 'rollouts'), { recursive: true });
    writeFileSync(join(run, 'run.json'), '{}');
    const line = (i: number, reward: number) =>
      JSON.stringify({
        v: 1,
        id: `r${i}`,
        step: 1,
        group: 0,
        sample: i,
        prompt: 'p',
        response: '<think>x</think>\n<answer>y</answer>',
        reward,
        golden: ['y'],
      });
    writeFileSync(join(run, 'rollouts', 'step-000001.jsonl'), `${line(0, 1)}\n${line(1, 1)}\n{"v":1}\n`);
    const r = await cli('inspect', run);
    assert.equal(r.exitCode, 0);
    assert.match(r.stdout, /2 trajectories, 1 malformed/);
    assert.match(r.stdout, /GRPO groups {3}1, all rewards equal in 1 \(100\.0%\)/);
    assert.match(r.stderr, /step-000001\.jsonl:3: prompt: is required/);
  });

  it('exits 2 naming the file when input is unreadable', async () => {
    const missing = await cli('inspect', join(dir, 'nope.jsonl'));
    assert.equal(missing.exitCode, 2);
    assert.match(missing.stderr, /nope\.jsonl: no such file or directory/);
    const r = await cli('import', 'verl', join(dir, 'nothing'), '--out', join(dir, 'o.jsonl'));
    assert.equal(r.exitCode, 2);
    assert.equal((await cli('import', 'bogus', 'x', '--out', 'y')).exitCode, 2);
    assert.equal((await cli('inspect')).exitCode, 2);
  });

  it('inspect and import read tool-call trajectories: --json gives each one’s dialect; --dialect forces one', async () => {
    const traj = join(FIX, 'toolcall', 'conversations.traj');
    const r = await cli('inspect', traj, '--json');
    assert.equal(r.exitCode, 0, r.stderr);
    const o = JSON.parse(r.stdout);
    assert.deepEqual(
      o.trajectories.map((t: { dialect: string; searches: number; invalid_actions: number }) => [
        t.dialect,
        t.searches,
        t.invalid_actions,
      ]),
      [
        ['toolcall', 1, 0],
        ['toolcall', 2, 1],
        ['toolcall', 1, 1],
      ],
    );
    assert.deepEqual(o.summary.dialects, { toolcall: 3 });
    const text = await cli('inspect', join(FIX, 'toolcall', 'verl'));
    assert.match(text.stdout, /3 trajectories/);
    assert.match(text.stdout, /searches {6}mean 1\.33/);
    assert.match(text.stdout, /invalid {7}2 actions in 2 trajectories/);
    assert.match(text.stdout, /dialect {7}toolcall: 3/);
    const forced = JSON.parse((await cli('inspect', traj, '--json', '--dialect', 'searchr1')).stdout);
    assert.deepEqual(
      forced.trajectories.map((t: { dialect: string; searches: number }) => [t.dialect, t.searches]),
      [
        ['searchr1', 0],
        ['searchr1', 0],
        ['searchr1', 0],
      ],
    );
    const bad = await cli('inspect', traj, '--dialect', 'xml');
    assert.equal(bad.exitCode, 2);
    assert.match(bad.stderr, /--dialect: unknown dialect "xml": expected auto, searchr1, toolcall, llama-json/);
    const out = join(dir, 'toolcall.jsonl');
    assert.equal((await cli('import', 'verl', join(FIX, 'toolcall', 'verl'), '--out', out)).exitCode, 0);
    const lines = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Rollout);
    assert.deepEqual(
      lines.map((l) => [l.dialect, l.searches, l.turns]),
      [
        ['toolcall', 1, 2],
        ['toolcall', 2, 3],
        ['toolcall', 1, 3],
      ],
    );
  });

  it('import converts each kind into valid JSONL', async () => {
    for (const [kind, src, n] of [
      ['searchr1', join(FIX, 'transcripts', 'searchr1-infer.txt'), 3],
      ['verl', join(FIX, 'verl'), 3],
      ['trl', join(FIX, 'trl'), 8],
    ] as const) {
      const out = join(dir, `${kind}.jsonl`);
      const r = await cli('import', kind, src, '--out', out);
      assert.equal(r.exitCode, 0, r.stderr);
      const lines = readFileSync(out, 'utf8').trim().split('\n');
      assert.equal(lines.length, n, kind);
      for (const [k, l] of lines.entries()) assert.deepEqual(validateRollout(JSON.parse(l) as Rollout, out, k + 1), []);
    }
    const out = join(dir, 'dataset.jsonl');
    const r = await cli('import', 'searchr1-dataset', join(FIX, 'searchr1-dataset', 'train.parquet'), '--out', out);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stderr, /3 examples/);
    assert.equal(JSON.parse(readFileSync(out, 'utf8').split('\n')[0]!).id, 'train_0');
  });
});
