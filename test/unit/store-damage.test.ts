// A run whose token store has one damaged committed step (docs/run-format.md#the-token-store): a file cut short,
// bytes flipped, a file missing, a tokens.parquet of another step. Every view — the streamed readers (`inspect`,
// `audit`, `export jsonl`), the inspector's RolloutStore and its facts threads' storeStepRows — reports the step
// with its directory, the file and why, reads the other steps, and ends with exit 2 (valid JSON with --json).
import assert from 'node:assert/strict';
import { cpSync, readFileSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { audit } from '../../src/cli/audit';
import { exportJsonl } from '../../src/cli/exportJsonl';
import { inspect } from '../../src/cli/inspect';
import { readSource } from '../../src/core/importers';
import type { LocatedIssue, Rollout } from '../../src/core/run/format';
import { RolloutStore, readPartRow, storeStepRows } from '../../src/core/store/rollouts';
import { StoreStep, writeStoreStep } from '../../src/core/store/tokenStore';
import { scratchDir } from '../support/scratch';

/** `n` rollouts of one step, `len` tokens each (steps of different lengths: a swapped tokens.parquet has other rows). */
function records(step: number, n: number, len: number): Rollout[] {
  return Array.from({ length: n }, (_, i) => {
    const roles = Array.from({ length: len }, (_, k) => (k < 3 ? 'prompt' : 'generated'));
    return {
      v: 2,
      id: `run:train:${step}:${Math.floor(i / 4)}:${i % 4}`,
      step,
      group: `train:${step}:${Math.floor(i / 4)}`,
      sample: i % 4,
      split: 'train',
      question: `q${i}`,
      golden: [`g${i}`],
      prompt: 'Question: q',
      response: `<answer> g${i} </answer>`,
      reward: i % 2,
      finish: 'answer',
      turns: 1,
      searches: 0,
      tokens: {
        text: roles.map((_, k) => `w${(step * 7 + k) % 50}`),
        ids: roles.map((_, k) => (step * 7 + k) % 50),
        role: roles as never,
        loss_mask: roles.map((r) => (r === 'generated' ? 1 : 0)),
        rollout_logprob: roles.map((r) => (r === 'generated' ? -0.5 : null)),
        logprob: roles.map((r) => (r === 'generated' ? -0.5 : null)),
      },
    } as Rollout;
  });
}

/** A run of three steps of 8 rollouts; `damage` spoils step 2 (its directory given). */
async function run(damage: (step2: string, rollouts: string) => void): Promise<{ dir: string; step2: string }> {
  const dir = scratchDir('sas-store-damage-');
  const rollouts = join(dir, 'rollouts');
  for (const step of [1, 2, 3]) await writeStoreStep(rollouts, `step-00000${step}`, records(step, 8, 10 + step * 5));
  writeFileSync(
    join(dir, 'run.json'),
    JSON.stringify({ v: 1, id: 'run', status: 'finished', created: 'x', config: {} }),
  );
  const step2 = join(rollouts, 'step-000002');
  damage(step2, rollouts);
  return { dir, step2 };
}

const cut = (file: string) => truncateSync(file, Math.floor((statSync(file).size * 2) / 3));
const flip = (file: string) => {
  const b = readFileSync(file);
  for (let i = Math.floor(b.length / 4); i < Math.floor(b.length / 2); i++) b[i] = b[i]! ^ 0xa5;
  writeFileSync(file, b);
};

function io() {
  const o = { out: '', err: '' };
  return { o, out: (s: string) => void (o.out += s), err: (s: string) => void (o.err += s) };
}

/** The issues of readSource over the run, and the ids of the records read. */
async function readAll(path: string, tokens: 'all' | 'audit' = 'all') {
  const ids: string[] = [];
  const issues: LocatedIssue[] = [];
  for await (const item of readSource(path, undefined, {}, tokens)) {
    if (item.record) ids.push(item.record.id);
    else issues.push(...item.issues);
  }
  return { ids, issues };
}

const intact = [...records(1, 8, 1), ...records(3, 8, 1)].map((r) => r.id);

describe('a damaged step of a token store', function () {
  this.timeout(120_000);

  for (const [name, file, damage] of [
    ['tokens.parquet cut to 2/3', 'tokens.parquet', cut],
    ['rollouts.parquet cut to 2/3', 'rollouts.parquet', cut],
    ['bytes flipped in tokens.parquet', 'tokens.parquet', flip],
    ['vocab.parquet cut to 2/3', 'vocab.parquet', cut],
  ] as const) {
    it(`${name}: the step is reported (its directory, ${file}, why), the other steps are read`, async () => {
      const { dir, step2 } = await run((s) => damage(join(s, file)));
      const { ids, issues } = await readAll(dir);
      assert.deepEqual(ids, intact);
      assert.equal(issues.length, 1, JSON.stringify(issues));
      assert.equal(issues[0]!.file, step2);
      assert.equal(issues[0]!.field, file);
      assert.equal(issues[0]!.unreadable, true);
      assert.match(issues[0]!.message, /(none of the step's \d+ rollouts was read|were not read|step was not read)$/);
    });
  }

  it('a missing tokens.parquet is named as missing', async () => {
    const { dir, step2 } = await run((s) => renameSync(join(s, 'tokens.parquet'), join(s, '..', 'elsewhere')));
    const { ids, issues } = await readAll(dir, 'audit');
    assert.deepEqual(ids, intact);
    assert.equal(issues[0]!.file, step2);
    assert.equal(issues[0]!.field, 'tokens.parquet');
    assert.match(issues[0]!.message, /missing/);
  });

  it('a tokens.parquet of another step (row counts disagree): a clear error naming both files, never a TypeError', async () => {
    for (const from of ['step-000001', 'step-000003']) {
      const { dir, step2 } = await run((s, r) => cpSync(join(r, from, 'tokens.parquet'), join(s, 'tokens.parquet')));
      for (const tokens of ['all', 'audit'] as const) {
        const { ids, issues } = await readAll(dir, tokens);
        assert.deepEqual(ids, intact);
        assert.equal(issues.length, 1);
        assert.equal(issues[0]!.file, step2);
        assert.equal(issues[0]!.field, 'rollouts.parquet, tokens.parquet');
        assert.match(issues[0]!.message, /row counts disagree/);
      }
    }
  });

  it('the inspector: RolloutStore and storeStepRows show the damaged rows as malformed, the others as records', async () => {
    const cutTokens = await run((s) => cut(join(s, 'tokens.parquet')));
    const store = await RolloutStore.open(cutTokens.dir);
    try {
      assert.equal(store.count, 24);
      const rows = await store.rows(0, 24);
      assert.deepEqual(
        rows.filter((r) => r.record).map((r) => r.record!.id),
        intact,
      );
      const bad = rows.filter((r) => !r.record);
      assert.equal(bad.length, 8);
      assert.ok(bad.every((r) => r.errors[0]!.file === cutTokens.step2 && r.errors[0]!.field === 'tokens.parquet'));
    } finally {
      await store.close();
    }
    const step = await StoreStep.open(cutTokens.step2);
    const part = await storeStepRows(step, 2, 5, {}, 'audit');
    assert.deepEqual(
      part.map((r) => [r.line, r.errors[0]?.field]),
      [
        [3, 'tokens.parquet'],
        [4, 'tokens.parquet'],
        [5, 'tokens.parquet'],
      ],
    );
    const one = await readPartRow(cutTokens.step2, 4);
    assert.equal(one?.record, undefined);
    assert.match(one!.errors[0]!.message, /footer/);
    // rollouts.parquet unreadable: the step is one malformed row, the store still opens
    const cutRollouts = await run((s) => cut(join(s, 'rollouts.parquet')));
    const store2 = await RolloutStore.open(cutRollouts.dir);
    try {
      const rows = await store2.rows(0, store2.count);
      assert.deepEqual(
        rows.filter((r) => r.record).map((r) => r.record!.id),
        intact,
      );
      assert.deepEqual(
        rows.filter((r) => !r.record).map((r) => [r.file, r.errors[0]!.field]),
        [[cutRollouts.step2, 'rollouts.parquet']],
      );
    } finally {
      await store2.close();
    }
  });

  it('inspect, audit and export: the other steps in the output, the step on stderr / in issues, exit 2, valid JSON', async () => {
    const { dir, step2 } = await run((s) => cut(join(s, 'tokens.parquet')));
    // inspect --json
    let c = io();
    assert.equal(await inspect(dir, { json: true, out: c.out, err: c.err }), 2);
    const j = JSON.parse(c.o.out) as { trajectories: { id: string }[]; issues: (LocatedIssue & { text: string })[] };
    assert.deepEqual(
      j.trajectories.map((t) => t.id),
      intact,
    );
    assert.equal(j.issues.length, 1);
    assert.ok(j.issues[0]!.text.startsWith(`${step2}:1: tokens.parquet: `), j.issues[0]!.text);
    assert.match(c.o.err, /step-000002:1: tokens\.parquet: /);
    // inspect (text)
    c = io();
    assert.equal(await inspect(dir, { json: false, out: c.out, err: c.err }), 2);
    assert.match(c.o.out, /16 trajectories/);
    assert.match(c.o.err, /could not be read/);
    // audit --json
    c = io();
    assert.equal(await audit(dir, { json: true, out: c.out, err: c.err }), 2);
    const a = JSON.parse(c.o.out) as { rollouts: { id: string }[]; issues: LocatedIssue[] };
    assert.deepEqual(
      a.rollouts.map((r) => r.id),
      intact,
    );
    assert.deepEqual(
      a.issues.map((i) => [i.file, i.field]),
      [[step2, 'tokens.parquet']],
    );
    // export jsonl: one file (the other steps' rows), and one per step (none for the damaged step)
    c = io();
    const out = join(dir, 'all.jsonl');
    assert.equal(await exportJsonl(dir, out, c), 2);
    assert.deepEqual(
      readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as Rollout).id),
      intact,
    );
    assert.match(c.o.err, /step-000002:1: tokens\.parquet: /);
    c = io();
    const outDir = join(dir, 'per-step');
    assert.equal(await exportJsonl(dir, outDir, c), 2);
    assert.ok(statSync(join(outDir, 'step-000001.jsonl')).isFile());
    assert.ok(statSync(join(outDir, 'step-000003.jsonl')).isFile());
    assert.throws(() => statSync(join(outDir, 'step-000002.jsonl')));
  });
});
