/**
 * Reward modules compiled on the fly and run in the sandbox: misbehaving modules are stopped and reported with
 * the user's file and line (source-mapped) and the rollout; the other items still score; workers are reused.
 */
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileRewardModule, RewardCompileError } from '../../src/core/rewards/compile';
import { type RewardItem, RewardSandbox } from '../../src/core/rewards/sandbox';
import { openReward, scoreRollouts } from '../../src/core/rewards/scoring';

const ROOT = join(__dirname, '..', '..');
const MODULES = join(ROOT, 'test', 'fixtures', 'rewards', 'modules');
const MISBEHAVING = join(MODULES, 'misbehaving.reward.ts');
const lineOf = (file: string, needle: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(needle)) + 1;

const item = (id: string, c = 'ok', answer = 'Ilse Marrow'): RewardItem => ({
  id,
  prompt: 'Question: q?\n',
  response: `<think>t</think>\n<answer> ${answer} </answer>`,
  golden: ['Ilse Marrow'],
  question: `question ${id}`,
  meta: { case: c },
  where: `rollouts.jsonl:${id.slice(1)}`,
});

describe('reward sandbox', function () {
  this.timeout(60_000);

  it('compiles built-ins and user modules with esbuild, with a source map to the TypeScript', async () => {
    const r = await openReward('builtin:em', { workers: 1 });
    try {
      const out = await r.sandbox.score([
        item('r1'),
        item('r2', 'ok', 'Quendal'),
        { ...item('r3'), response: 'no answer' },
      ]);
      assert.deepEqual(out, [
        { id: 'r1', reward: 1, parts: {} },
        { id: 'r2', reward: 0, parts: {} },
        { id: 'r3', reward: 0, parts: {} },
      ]);
      assert.ok(JSON.parse(r.compiled.map).sources.some((s: string) => s.endsWith('em.reward.ts')));
    } finally {
      await r.sandbox.close();
    }
  });

  it('reports each failing item with the file, the line and the rollout; the others still score', async () => {
    const compiled = await compileRewardModule(MISBEHAVING);
    const logs: string[] = [];
    const sb = new RewardSandbox(compiled, {
      workers: 2,
      itemTimeoutMs: 300,
      heapMb: 64,
      chunk: 3,
      onLog: (l) => logs.push(l),
    });
    try {
      // 'memory' runs in its own sandbox below, with a time limit it cannot reach on a loaded machine; here index 10 is a
      // plain item so the others keep their places.
      const cases = [
        'ok',
        'throw',
        'deep',
        'nan',
        'string',
        'bad-parts',
        'loop',
        'ok',
        'async-loop',
        'escape',
        'ok',
        'log',
        'ok',
      ];
      const items = cases.map((c, i) => item(`r${i}`, c));
      const out = await sb.score(items);
      const by = (i: number) => out[i]!;
      const err = (i: number) => {
        const o = by(i);
        assert.ok('error' in o, `${cases[i]} should fail: ${JSON.stringify(o)}`);
        return o.error;
      };
      for (const i of [0, 7, 12]) assert.deepEqual(by(i), { id: `r${i}`, reward: 1, parts: { answered: 1 } });
      assert.deepEqual(by(9), { id: 'r9', reward: 1, parts: {} }, 'no process, no require inside the sandbox');
      const thrown = err(1);
      assert.equal(thrown.kind, 'throw');
      assert.equal(thrown.message, 'Error: cannot score Ilse Marrow');
      assert.equal(thrown.file, MISBEHAVING);
      assert.equal(thrown.line, lineOf(MISBEHAVING, "if (id === 'throw')"));
      const deep = err(2);
      assert.equal(
        deep.line,
        lineOf(MISBEHAVING, "throw new RangeError('thrown from deep()')"),
        'the frame that threw, in the user’s TypeScript',
      );
      assert.match(deep.stack ?? '', /misbehaving\.reward\.ts:\d+:\d+/);
      assert.deepEqual([err(3).kind, err(3).message], ['nan', 'returned NaN']);
      assert.deepEqual(
        [err(4).kind, err(4).message],
        ['type', 'returned string (expected a number or { reward, parts })'],
      );
      assert.match(err(5).message, /parts\.em is Infinity/);
      assert.deepEqual([err(6).kind, err(6).message], ['timeout', 'did not finish within 300 ms']);
      assert.equal(err(8).kind, 'timeout', 'a loop after an await is stopped too');
      assert.deepEqual(by(10), { id: 'r10', reward: 1, parts: { answered: 1 } });
      const roomy = new RewardSandbox(compiled, { workers: 1, itemTimeoutMs: 20_000, heapMb: 64 });
      try {
        const [hog, after] = await roomy.score([item('m0', 'memory'), item('m1')]);
        assert.ok(hog && 'error' in hog, `memory should fail: ${JSON.stringify(hog)}`);
        assert.equal(hog.error.kind, 'memory');
        assert.match(hog.error.message, /ran out of memory \(the limit is 64 MB\)/);
        assert.deepEqual(
          after,
          { id: 'm1', reward: 1, parts: { answered: 1 } },
          'the replaced worker scores the next item',
        );
      } finally {
        await roomy.close();
      }
      assert.deepEqual(by(11), { id: 'r11', reward: 1, parts: { answered: 1 } });
      assert.ok(logs.includes('hello from question r11'));
      // The same sandbox keeps working after workers were replaced.
      const again = await sb.score([item('x1'), item('x2', 'throw')]);
      assert.ok('reward' in again[0]!);
      assert.ok('error' in again[1]!);
    } finally {
      await sb.close();
    }
  });

  it('names the file, line and column of compile errors, and refuses Node built-ins', async () => {
    const syntax = join(MODULES, 'syntax-error.reward.ts');
    await assert.rejects(
      compileRewardModule(syntax),
      (e: unknown) => e instanceof RewardCompileError && e.file === syntax && e.line === 6,
    );
    await assert.rejects(
      compileRewardModule(join(MODULES, 'imports-fs.reward.ts')),
      (e: unknown) =>
        e instanceof RewardCompileError &&
        /"node:fs" cannot be imported: reward modules run sandboxed/.test(e.message) &&
        e.line === 1,
    );
    await assert.rejects(
      compileRewardModule(join(MODULES, 'no-default.reward.ts')),
      /no-default\.reward\.ts:1:1: no default export: a reward module must `export default defineReward/,
    );
  });

  it('compiles an edited, unsaved version of a module from memory', async () => {
    const src = readFileSync(join(ROOT, 'examples', 'rewards', 'em.reward.ts'), 'utf8').replace(
      'return traj.answer === null ? 0 : em(traj.answer, example.golden);',
      'return 0.5;',
    );
    const r = await openReward(join(ROOT, 'examples', 'rewards', 'em.reward.ts'), { workers: 1 }, src);
    try {
      assert.deepEqual(await r.sandbox.score([item('r1')]), [{ id: 'r1', reward: 0.5, parts: {} }]);
    } finally {
      await r.sandbox.close();
    }
  });

  for (const chunk of [2, 1]) {
    it(`scores concurrent calls each with its own results, round after round (the env server answers /reward requests concurrently; chunk ${chunk})`, async () => {
      // A call once resolved when its last result came in, before the other worker's 'done': the next call then sent
      // to a worker whose old listener took the new request's messages, and hung (stop 42's CI). One item per
      // chunk spreads every call over both workers; a hundred rounds hung the old code within a few.
      // A hang fails as the batch's own timeout, in seconds, and leaves no timer keeping the test process alive.
      const r = await openReward('builtin:em', { workers: 2, chunk, batchTimeoutMs: 10_000 });
      try {
        for (let round = 0; round < 100; round++) {
          const calls = [1, 3, 2, 5, 1].map((n, c) =>
            Array.from({ length: n }, (_, i) =>
              item(`c${c}-${i}-${round}`, 'ok', (c + i + round) % 2 ? 'Ilse Marrow' : 'nobody'),
            ),
          );
          const outs = await Promise.all(calls.map((items) => r.sandbox.score(items)));
          outs.forEach((out, c) => {
            assert.deepEqual(
              out.map((o) => [o.id, 'reward' in o ? o.reward : o.error]),
              calls[c]!.map((it, i) => [it.id, (c + i + round) % 2 ? 1 : 0]),
              `round ${round}, call ${c}`,
            );
          });
        }
      } finally {
        await r.sandbox.close();
      }
    });
  }

  it('spreads a large batch over the workers and keeps the order', async () => {
    const r = await openReward('builtin:f1', { workers: 2, chunk: 500 });
    try {
      const items = Array.from({ length: 5000 }, (_, i) => item(`r${i}`, 'ok', i % 2 ? 'Ilse Marrow' : 'Marrow'));
      const out = await r.sandbox.score(items);
      assert.equal(out.length, 5000);
      out.forEach((o, i) => {
        assert.equal(o.id, `r${i}`);
        assert.ok('reward' in o);
        assert.equal(o.reward, i % 2 ? 1 : 2 / 3);
      });
    } finally {
      await r.sandbox.close();
    }
  });
});

describe('scoring the same rollout set again', function () {
  this.timeout(60_000);
  it('a run records the set it read; given it, a later run scores exactly those rollouts though the file grew (a live run)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-set-'));
    const file = join(dir, 'rollouts.jsonl');
    const rec = (i: number) =>
      `${JSON.stringify({ v: 1, id: `r${i}`, prompt: 'p', response: '<answer> Ilse Marrow </answer>', golden: ['Ilse Marrow'] })}\n`;
    writeFileSync(file, Array.from({ length: 5 }, (_, i) => rec(i)).join(''));
    const r = await openReward('builtin:em', { workers: 1 });
    try {
      const read: Record<string, number> = {};
      const first: string[] = [];
      for await (const s of scoreRollouts(file, r.sandbox, { read })) first.push(s.record.id);
      assert.deepEqual(read, { [file]: 5 });
      appendFileSync(file, rec(5) + rec(6));
      const again: string[] = [];
      for await (const s of scoreRollouts(file, r.sandbox, { only: read })) again.push(s.record.id);
      assert.deepEqual(again, first, 'the two new rollouts are left out');
      const all: string[] = [];
      for await (const s of scoreRollouts(file, r.sandbox)) all.push(s.record.id);
      assert.equal(all.length, 7);
    } finally {
      await r.sandbox.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
