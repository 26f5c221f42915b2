import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SummaryBuilder, trajectoryFacts } from '../../src/core/audit/summary';
import { JsonlFile, readLines } from '../../src/core/store/jsonl';
import { RolloutStore, rolloutFiles, streamRollouts } from '../../src/core/store/rollouts';

let dir: string;
/** A fresh temp directory per test of this file. */
function useTempDir() {
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-store-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
}

const rec = (i: number, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    v: 1,
    id: `r${i}`,
    step: 1,
    group: Math.floor(i / 2),
    sample: i % 2,
    prompt: 'p',
    response: `<think>t</think>\n<answer>a${i}</answer>`,
    reward: i % 2,
    ...extra,
  });

describe('JSONL index', () => {
  useTempDir();
  it('indexes rows, skipping blank lines, with file line numbers, CRLF and unicode', async () => {
    const f = join(dir, 'a.jsonl');
    writeFileSync(f, `${rec(0)}\r\n\r\n${rec(1, { question: 'héllo 😀' })}\n\n\n${rec(2)}`);
    const j = await JsonlFile.open(f);
    assert.equal(j.count, 3);
    assert.deepEqual(
      [0, 1, 2].map((i) => j.lineOf(i)),
      [1, 3, 6],
    );
    const rows = await j.readRows(0, 3);
    assert.equal(JSON.parse(rows[1]!.text).question, 'héllo 😀');
    assert.equal(JSON.parse(rows[2]!.text).id, 'r2', 'a last line without newline is a row');
    assert.equal((await j.readRow(0))!.text.endsWith('\r'), true, 'CR stays (JSON whitespace)');
    await j.close();
  });

  it('handles lines across 4 MB chunk boundaries', async () => {
    const f = join(dir, 'big.jsonl');
    const big = 'x'.repeat(3 * 1024 * 1024);
    const lines = Array.from({ length: 7 }, (_, i) =>
      JSON.stringify({ i, pad: big.slice(0, (i * 997_001) % big.length) }),
    );
    writeFileSync(f, `${lines.join('\n')}\n`);
    const j = await JsonlFile.open(f);
    assert.equal(j.count, 7);
    for (const [i, r] of (await j.readRows(0, 7)).entries()) assert.equal(JSON.parse(r.text).i, i);
    const streamed: number[] = [];
    for await (const l of readLines(f)) streamed.push(JSON.parse(l.text).i);
    assert.deepEqual(streamed, [0, 1, 2, 3, 4, 5, 6]);
    await j.close();
  });

  it('follows a file a writer appends to: a partial last line is pending until completed or the writer ends', async () => {
    const f = join(dir, 'live.jsonl');
    writeFileSync(f, `${rec(0)}\n${rec(1).slice(0, 20)}`);
    const j = await JsonlFile.open(f, { follow: true });
    assert.equal(j.count, 1);
    assert.ok((await j.pendingBytes()) > 0);
    appendFileSync(f, `${rec(1).slice(20)}\n${rec(2).slice(0, 5)}`);
    assert.deepEqual(await j.update(), { added: 1, reset: false });
    assert.equal(JSON.parse((await j.readRow(1))!.text).id, 'r1');
    assert.equal(j.count, 2);
    // The writer ends with a partial line: now it is a row (and a malformed one).
    assert.equal(await j.finish(), true);
    assert.equal(j.count, 3);
    assert.equal((await j.readRow(2))!.text, rec(2).slice(0, 5));
    await j.close();
  });

  it('rebuilds when the file is truncated or replaced', async () => {
    const f = join(dir, 'r.jsonl');
    writeFileSync(f, `${rec(0)}\n${rec(1)}\n`);
    const j = await JsonlFile.open(f, { follow: true });
    writeFileSync(f, `${rec(5)}\n`);
    const u = await j.update();
    assert.equal(u.reset, true);
    assert.equal(j.count, 1);
    assert.equal(JSON.parse((await j.readRow(0))!.text).id, 'r5');
    const g = join(dir, 'r2.jsonl');
    writeFileSync(g, `${rec(7)}\n${rec(8)}\n${rec(9)}\n`);
    renameSync(g, f);
    assert.equal((await j.update()).reset, true);
    assert.equal(j.count, 3);
    await j.close();
  });
});

describe('rollout store', () => {
  useTempDir();
  it('reports malformed lines with file, line and field, and keeps the others', async () => {
    const f = join(dir, 'rollouts.jsonl');
    writeFileSync(f, [rec(0), '{"v":1,"id":"broken",', rec(1, { reward: 'x' }), '', rec(2)].join('\n'));
    const store = await RolloutStore.open(f);
    assert.equal(store.count, 4);
    const rows = await store.rows(0, 4);
    assert.equal(rows[0]!.record!.id, 'r0');
    assert.equal(rows[1]!.record, undefined);
    assert.match(rows[1]!.errors[0]!.message, /^invalid JSON: /);
    assert.equal(rows[1]!.errors[0]!.line, 2);
    assert.deepEqual(
      rows[2]!.errors.map((e) => [e.file, e.line, e.field]),
      [[f, 3, 'reward']],
    );
    assert.equal((rows[2]!.value as { id: string }).id, 'r1', 'the JSON is kept for display');
    assert.equal(rows[3]!.line, 5);
    await store.close();
  });

  it('reads a run directory’s step files in step order as one sequence, and follows new steps', async () => {
    const run = join(dir, 'run');
    mkdirSync(join(run, 'rollouts'), { recursive: true });
    writeFileSync(join(run, 'rollouts', 'step-000010.jsonl'), `${rec(3)}\n`);
    writeFileSync(join(run, 'rollouts', 'step-000002.jsonl'), `${rec(0)}\n${rec(1)}\n${rec(2)}\n`);
    assert.deepEqual(
      (await rolloutFiles(run)).map((p) => p.split('/').pop()),
      ['step-000002.jsonl', 'step-000010.jsonl'],
    );
    const store = await RolloutStore.open(run, { follow: true });
    assert.equal(store.count, 4);
    assert.deepEqual(
      (await store.rows(2, 4)).map((r) => r.record!.id),
      ['r2', 'r3'],
    );
    const changes: number[] = [];
    store.watch((e) => changes.push(e.count), 50);
    writeFileSync(join(run, 'rollouts', 'step-000011.jsonl'), `${rec(4)}\n${rec(5)}\n`);
    appendFileSync(join(run, 'rollouts', 'step-000010.jsonl'), `${rec(6)}\n`);
    const deadline = Date.now() + 5000;
    while (store.count < 7 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(store.count, 7);
    assert.ok(changes.length > 0);
    assert.deepEqual(
      (await store.rows(0, 7)).map((r) => r.record!.id),
      ['r0', 'r1', 'r2', 'r3', 'r6', 'r4', 'r5'],
    );
    await store.close();
  });

  it('summarises: reward, EM, format, histograms, finish reasons, zero-variance groups', async () => {
    const f = join(dir, 's.jsonl');
    const lines = [
      rec(0, { reward: 1, golden: ['a0'], searches: 1, finish: 'answer' }), // group 0: rewards 1, 1 → zero variance
      rec(1, { reward: 1, golden: ['A1.'], searches: 2, finish: 'answer' }),
      rec(2, { reward: 0, golden: ['zzz'], finish: 'length' }), // group 1: 0, 1 → signal
      rec(3, { reward: 1, reward_parts: { em: 0 } }),
      'not json',
    ];
    writeFileSync(f, lines.join('\n'));
    const b = new SummaryBuilder();
    for await (const row of streamRollouts(f)) {
      if (row.record) b.add(row.record);
      else b.addIssue(row.errors);
    }
    const s = b.result();
    assert.equal(s.trajectories, 4);
    assert.equal(s.malformed, 1);
    assert.match(s.issues[0]!, /s\.jsonl:5: invalid JSON/);
    assert.deepEqual(s.reward, { count: 4, mean: 0.75, std: Math.sqrt(0.75 - 0.5625), min: 0, max: 1 });
    assert.deepEqual(s.em, { count: 4, rate: 0.5 }, 'a0 ✓, A1. ✓ (normalised), zzz ✗, recorded em 0');
    assert.equal(s.format!.rate, 1);
    assert.deepEqual(s.searches!.histogram, { 0: 2, 1: 1, 2: 1 });
    assert.deepEqual(s.finish, { answer: 2, length: 1 });
    assert.deepEqual(s.groups, { count: 2, zero_variance: 1, frac_zero_std: 0.5 });
    const facts = trajectoryFacts({
      v: 1,
      id: 'x',
      prompt: '',
      response: '<think>x</think>\nhmm\n\n<answer>y</answer>',
    });
    assert.equal(facts.formatValid, false);
    assert.equal(facts.answer, 'y');
  });
});
