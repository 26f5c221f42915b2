// The inspector's facts threads (src/core/inspect/factsPool.ts, factsWorker.ts; RolloutTable.extend with a pool): the
// facts they build are the engine thread's to the bit — on a run the trainer's recorder wrote (bench/searchr1_sim.py
// through recorder.Recorder into the token store), with a malformed row and a non-finite value beside it, and with the
// drift check's tokenizer — appended in row order; an analysis cancelled half-way leaves a correct prefix and resumes;
// a followed run's new step is analysed by the threads, a removed one resets the table; a task a worker cannot do is
// reported, and the worker serves the next.
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { type EngineMessage, InspectorEngine } from '../../src/core/inspect/engine';
import { FactsPool } from '../../src/core/inspect/factsPool';
import { planTasks, RolloutTable, type RowFacts } from '../../src/core/inspect/table';
import { findPython, pythonCandidates } from '../../src/core/python';
import type { Rollout } from '../../src/core/run/format';
import { RolloutStore } from '../../src/core/store/rollouts';
import { writeStoreStep } from '../../src/core/store/tokenStore';
import { loadTokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';
import { until as waitUntil } from '../support/until';
import { recordOf, writeTokenizerDir } from './bpe';

const ROOT = resolve(__dirname, '../..');
type Status = Extract<EngineMessage, { t: 'status' }>['status'];

const until = <T>(fn: () => T | undefined | false, ms = 60_000) => waitUntil(fn, ms);

/** An engine over `path` with `workers` facts threads, opened and analysed; its facts, status and the rows the threads built. */
async function analysed(
  path: string,
  workers: number,
  tokenizer?: string,
): Promise<{ facts: RowFacts[]; status: Status; threadRows: number; view: number }> {
  const msgs: EngineMessage[] = [];
  // (threadsFrom 0: these small runs use the threads too; by default a run under 4,096 rows is analysed on one)
  const engine = new InspectorEngine((m) => msgs.push(m), { workers, threadsFrom: 0 });
  await engine.open(path, false, {}, tokenizer);
  const facts: RowFacts[] = [];
  for (;;) {
    const page = await engine.page(facts.length, 1000);
    if (!page.length) break;
    facts.push(...page);
  }
  await engine.setQuery(1, { filter: 'reward == 0 && searches >= 2 && mask.leaks == 0', search: '' });
  const status = engine.status();
  const out = { facts, status, threadRows: engine.threadRows, view: status.view };
  await engine.close();
  return out;
}

/** Records of a step with token arrays: a leak, an engine mask, one without tokens; `bad`: a malformed one and ±∞. */
function records(step: number, n: number, bad = false): Rollout[] {
  const out: Rollout[] = [];
  for (let i = 0; i < n; i++) {
    const P = 3 + (i % 4);
    const roles = [
      ...Array(P).fill('prompt'),
      ...Array.from({ length: 6 + (i % 9) }, (_, k) => (k % 4 === 3 ? 'retrieved' : 'generated')),
    ];
    const gen = roles.map((x) => x === 'generated');
    const rec: Rollout = {
      v: 2,
      id: `run:train:${step}:${Math.floor(i / 4)}:${i % 4}`,
      step,
      group: `train:${step}:${Math.floor(i / 4)}`,
      sample: i % 4,
      split: 'train',
      question: `who wrote book ${i} of the series`,
      golden: [`gold ${i}`],
      prompt: 'Question: q',
      response:
        i % 3
          ? `<think>look it up</think><search> who wrote book ${i} of the series </search>\n\n<information>Doc 1(Title: T) the gold ${i} text</information>\n\n<search> again ${i} </search>\n\n<information>Doc 1(Title: U) more</information>\n\n<answer> gold ${i} </answer>`
          : `<answer> gold ${i} or other </answer>`,
      reward: i % 2,
      finish: 'answer',
      tokens: {
        text: roles.map((_, k) => `w${k}`),
        ids: roles.map((_, k) => 1000 + k),
        role: roles as never,
        loss_mask: gen.map((g) => (g ? 1 : 0)),
        rollout_logprob: gen.map((g, k) => (g ? -0.5 - k / 100 : null)),
        logprob: gen.map((g, k) => (g ? -0.5 - k / 100 - (k === 7 ? 1 : 0) : null)),
        advantage: gen.map((g) => (g ? 0.5 : null)),
        entropy: gen.map((g) => (g ? 1.25 : null)),
      },
    };
    if (i === 5) rec.tokens!.loss_mask[P] = (1 - rec.tokens!.loss_mask[P]!) as 0 | 1; // a planted leak
    if (i === 6) rec.meta = { engine_loss_mask: rec.tokens!.loss_mask.map((m, k) => (k === P + 1 ? 1 - m : m)) };
    if (i === 8) delete rec.tokens;
    if (bad && i === 2) rec.tokens!.entropy![P] = Number.POSITIVE_INFINITY; // non-finite
    if (bad && i === 4) rec.tokens!.advantage![P + 1] = Number.NEGATIVE_INFINITY;
    if (bad && i === 3) (rec as unknown as Record<string, unknown>).reward = 'high'; // malformed: reward is not a number
    out.push(rec);
  }
  return out;
}

describe('inspector facts threads', () => {
  it('build the facts of a recorded run to the bit as the engine thread does (with a malformed row and ±∞)', async function () {
    const found = await findPython(pythonCandidates([], ROOT));
    if (!found.found) this.skip();
    const dir = scratchDir('sas-facts-threads-');
    const run = join(dir, 'run');
    // three steps of 40 trajectories through the trainer's recorder: Search-R1-shaped responses, token columns
    const sim = await execa(
      found.found.executable,
      [join(ROOT, 'bench', 'searchr1_sim.py'), run, '--steps', '3', '--rollouts', '40', '--metrics-steps', '3'],
      { env: { PYTHONPATH: join(ROOT, 'trainer') }, reject: false },
    );
    assert.equal(sim.exitCode, 0, sim.stderr);
    // and a step written by this writer with a malformed record and an infinite entropy
    await writeStoreStep(join(run, 'rollouts'), 'step-000004', records(4, 30, true));
    const one = await analysed(run, 0);
    const many = await analysed(run, 2);
    const total = one.status.total;
    assert.ok(total > 30 * 3, `the recorded steps and the extra one: ${total} rows`);
    assert.equal(one.threadRows, 0);
    assert.ok(many.threadRows > 0, 'the threads built facts');
    assert.deepEqual(many.status.threads, { workers: 2, rows: many.threadRows }, 'the status says so');
    assert.equal(one.status.threads, undefined);
    assert.equal(many.status.analysed, total);
    assert.equal(many.facts.length, total);
    assert.deepStrictEqual(many.facts, one.facts);
    assert.equal(many.view, one.view);
    assert.ok(one.view > 0);
    // what the extra step planted shows in the facts, whichever thread built them
    const step4 = many.facts.filter((f) => f.file.endsWith('step-000004'));
    assert.equal(many.status.malformed, 1);
    assert.match(step4[3]!.error!, /step-000004:4: reward: /);
    assert.deepEqual(step4[2]!.alarms?.includes('non-finite'), true);
    assert.deepEqual(step4[4]!.alarms?.includes('non-finite'), true);
    assert.equal(step4[1]!.alarms?.includes('non-finite') ?? false, false);
    assert.equal(step4[5]!.leaks, 1);
    assert.ok(
      many.facts.some((f) => (f.leaks ?? 0) > 0 && !f.file.endsWith('step-000004')),
      "the recorder's planted leaks",
    );
  });

  it('with the drift check: each thread loads the tokenizer the engine loaded, and finds the same drift', async () => {
    const dir = scratchDir('sas-facts-drift-');
    const model = writeTokenizerDir(join(dir, 'model'), [' Paris', '<answer>', '</answer>', 'user', 'assistant']);
    const codec = await loadTokenizerCodec(model);
    const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';
    const recs = (step: number) =>
      Array.from({ length: 20 }, (_, i) =>
        i % 5 === 1
          ? recordOf(
              codec,
              PROMPT,
              ['<answer>', ' Par', 'is', ' </answer>'].map((text) => ({ text, role: 'generated' as const })),
              { id: `s${step}-${i}`, step, reward: 1 },
            )
          : recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }], {
              id: `s${step}-${i}`,
              step,
              reward: 0,
            }),
      );
    for (const step of [1, 2, 3]) await writeStoreStep(join(dir, 'rollouts'), `step-00000${step}`, recs(step));
    const one = await analysed(dir, 0, model);
    const many = await analysed(dir, 2, model);
    assert.match(many.status.drift!, /drift checked with/);
    assert.ok(many.threadRows > 0);
    assert.deepStrictEqual(many.facts, one.facts);
    assert.equal(many.facts.filter((f) => typeof f.drift === 'number').length, 12);
  });

  it('an analysis cancelled half-way leaves the prefix it appended, and the next one finishes it the same', async () => {
    const dir = scratchDir('sas-facts-cancel-');
    for (const step of [1, 2, 3, 4, 5, 6])
      await writeStoreStep(join(dir, 'rollouts'), `step-00000${step}`, records(step, 600));
    const store = await RolloutStore.open(dir);
    const whole = new RolloutTable();
    await whole.extend(store);
    const pool = new FactsPool(2);
    const table = new RolloutTable();
    let stopAt = 0;
    await table.extend(store, {
      pool,
      threadsFrom: 0,
      batch: 128,
      cancelled: () => {
        stopAt ||= table.rows.length; // the first rows appended: stop
        return stopAt > 0;
      },
      yieldEvery: () => new Promise((r) => setImmediate(r)),
    });
    assert.ok(table.rows.length > 0 && table.rows.length < store.count, `stopped at ${table.rows.length}`);
    assert.deepStrictEqual(table.rows, whole.rows.slice(0, table.rows.length));
    // the workers were told to stop: they are free again before finishing their steps
    await until(() => pool.idle === 2);
    await table.extend(store, { pool, threadsFrom: 0 });
    assert.deepStrictEqual(table.rows, whole.rows);
    assert.equal(table.malformed, whole.malformed);
    assert.ok(pool.rowsBuilt > 0);
    await pool.close();
    await store.close();
  });

  it('the engine closed while analysing: open returns, the threads stop, nothing is posted after', async () => {
    const dir = scratchDir('sas-facts-close-');
    for (const step of [1, 2, 3, 4])
      await writeStoreStep(join(dir, 'rollouts'), `step-00000${step}`, records(step, 800));
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m), { workers: 2, threadsFrom: 0 });
    const opened = engine.open(dir, false);
    await until(() => msgs.some((m) => m.t === 'status' && m.status.total > 0));
    await engine.close();
    await opened;
    const n = msgs.length;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(msgs.length, n, 'no message after close');
    assert.ok(engine.status().analysed < 3200, `stopped at ${engine.status().analysed} of 3200`);
  });

  it('follows a run: a new step is analysed by the threads, a removed one resets the table', async () => {
    const dir = scratchDir('sas-facts-follow-');
    const rollouts = join(dir, 'rollouts');
    mkdirSync(rollouts, { recursive: true });
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({ v: 1, id: 'run', status: 'running', created: 'x', config: {} }),
    );
    await writeStoreStep(rollouts, 'step-000001', records(1, 300));
    await writeStoreStep(rollouts, 'step-000002', records(2, 300, true));
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m), { workers: 2, threadsFrom: 0 });
    const last = () => engine.status();
    await engine.open(dir, true);
    await until(() => last().analysed === 600 && !last().busy);
    const before = engine.threadRows;
    await writeStoreStep(rollouts, 'step-000003', records(3, 500));
    await until(() => last().total === 1100 && last().analysed === 1100 && !last().busy);
    assert.ok(engine.threadRows > before, 'the new step went to the threads');
    const facts = async () => {
      const out: RowFacts[] = [];
      for (let p = await engine.page(0, 1000); p.length; p = await engine.page(out.length, 1000)) out.push(...p);
      return out;
    };
    assert.deepStrictEqual(await facts(), (await analysed(dir, 0)).facts);
    assert.equal(last().malformed, 1);
    // a resume that went back: step 3 is gone, the table starts over from what is there
    renameSync(join(rollouts, 'step-000003'), join(rollouts, '.gone'));
    await until(() => last().total === 600 && last().analysed === 600 && !last().busy);
    assert.deepStrictEqual(await facts(), (await analysed(dir, 0)).facts);
    await engine.close();
  });

  it('a run of fewer store rows than THREADS_FROM is analysed on the engine thread alone (no worker started)', async () => {
    const dir = scratchDir('sas-facts-few-');
    for (const step of [1, 2]) await writeStoreStep(join(dir, 'rollouts'), `step-00000${step}`, records(step, 300));
    const store = await RolloutStore.open(dir);
    const pool = new FactsPool(2);
    const table = new RolloutTable();
    await table.extend(store, { pool });
    assert.equal(table.rows.length, 600);
    assert.equal(pool.rowsBuilt, 0);
    await table.extend(store, { pool });
    const more = new RolloutTable();
    await more.extend(store, { pool, threadsFrom: 600 });
    assert.ok(pool.rowsBuilt > 0, 'at the threshold, the threads');
    assert.deepStrictEqual(more.rows, table.rows);
    await pool.close();
    await store.close();
  });

  it('a task a worker cannot do is reported with its path; the worker takes the next', async () => {
    const dir = scratchDir('sas-facts-fail-');
    const good = await writeStoreStep(join(dir, 'rollouts'), 'step-000001', records(1, 10));
    const pool = new FactsPool(1);
    const job = { read: {}, tokens: 'audit' as const, checks: {} };
    await assert.rejects(
      pool.run({ file: join(dir, 'rollouts', 'step-000009'), base: 0, from: 0, to: 5 }, job, () => {}).done,
      /step-000009/,
    );
    assert.equal(pool.idle, 1);
    const got: RowFacts[] = [];
    await pool.run({ file: good, base: 100, from: 2, to: 10 }, job, (_from, rows) => got.push(...rows), 3).done;
    assert.deepEqual(
      got.map((f) => [f.index, f.line, f.id]),
      records(1, 10)
        .slice(2)
        .map((r, k) => [102 + k, 3 + k, r.id]),
    );
    await pool.close();
    assert.equal(pool.size, 0);
  });

  it('cuts the rows into tasks: JSONL files whole and here, store steps whole or in 256-row ranges for idle threads', () => {
    const parts = [
      { path: 'a.jsonl', base: 0, lo: 10, hi: 300, storeStep: false },
      { path: 's1', base: 300, lo: 0, hi: 2560, storeStep: true },
      { path: 's2', base: 2860, lo: 0, hi: 100, storeStep: true },
    ];
    const many = planTasks(parts, 2);
    assert.deepEqual(
      many.map((t) => [t.file, t.next, t.hi, t.remote]),
      [
        ['a.jsonl', 10, 300, false],
        ['s1', 0, 512, true],
        ['s1', 512, 1024, true],
        ['s1', 1024, 1536, true],
        ['s1', 1536, 2048, true],
        ['s1', 2048, 2560, true],
        ['s2', 0, 100, true],
      ],
    );
    const steps = Array.from({ length: 20 }, (_, k) => ({
      path: `s${k}`,
      base: k * 2560,
      lo: 0,
      hi: 2560,
      storeStep: true,
    }));
    assert.deepEqual(
      planTasks(steps, 2).map((t) => t.hi - t.next),
      steps.map(() => 2560),
      'enough steps to go round: one task a step',
    );
  });
});
