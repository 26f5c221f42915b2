/** The rollout inspector's pure logic: the filter language, the table (facts, groups, queries, paging, search), the mask audit, the replay model. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ImportanceOptions } from '../../src/core/audit/importance';
import { auditMask, nextLeak } from '../../src/core/audit/masks';
import { SummaryBuilder } from '../../src/core/audit/summary';
import { type EngineMessage, InspectorEngine } from '../../src/core/inspect/engine';
import { checkFilter, compileFilter, FilterError, type FilterRow } from '../../src/core/inspect/filter';
import { replayModel } from '../../src/core/inspect/replay';
import { RolloutTable, rowFacts } from '../../src/core/inspect/table';
import { RewardReportBuilder } from '../../src/core/rewards/scoring';
import { groupKeyOf, type Rollout, validateRollout } from '../../src/core/run/format';
import { RolloutStore } from '../../src/core/store/rollouts';
import { loadTextTokenizer, loadTokenizerCodec } from '../../src/core/tokens/tokenizer';
import { until as waitUntil } from '../support/until';
import { recordOf, writeTokenizerDir } from './bpe';

const row = (r: FilterRow) => r;

describe('filter language', () => {
  it('compares numbers and strings, combines with && || ! and parentheses', () => {
    const f = compileFilter('(reward == 0 || searches > 3) && !(finish == "length")');
    assert.equal(f(row({ reward: 0, searches: 1, finish: 'answer' })), true);
    assert.equal(f(row({ reward: 1, searches: 4, finish: 'answer' })), true);
    assert.equal(f(row({ reward: 1, searches: 2, finish: 'answer' })), false);
    assert.equal(f(row({ reward: 0, searches: 1, finish: 'length' })), false);
    assert.equal(
      compileFilter("reward >= 0.5 and data_source != 'nq'")(row({ reward: 0.5, data_source: 'hotpot' })),
      true,
    );
    assert.equal(compileFilter('not valid or error')(row({ valid: true, error: false })), false);
  });

  it('~ is sub-EM after Search-R1 normalisation against text or any element of a list; /regex/ as is', () => {
    const f = compileFilter('reward == 0 && answer ~ golden');
    assert.equal(
      f(row({ reward: 0, answer: 'The Eiffel Tower.', golden: ['eiffel tower', 'x'] })),
      true,
      'a right answer the reward missed',
    );
    assert.equal(f(row({ reward: 0, answer: 'Louvre', golden: ['eiffel tower'] })), false);
    assert.equal(f(row({ reward: 0, answer: null, golden: ['eiffel tower'] })), false, 'no answer matches nothing');
    assert.equal(compileFilter('answer ~ /^\\d+$/')(row({ answer: '1984' })), true);
    assert.equal(compileFilter('answer !~ /^\\d+$/')(row({ answer: 'x1984' })), true);
    assert.equal(compileFilter('question ~ "PARIS"')(row({ question: 'Is Paris big?' })), true);
  });

  it('fields alone are conditions; missing values make comparisons false except == null', () => {
    assert.equal(compileFilter('group.zero_variance')(row({ 'group.zero_variance': true })), true);
    assert.equal(compileFilter('mask.leaks > 0')(row({ 'mask.leaks': 3 })), true);
    assert.equal(compileFilter('mask.leaks > 0')(row({})), false);
    assert.equal(compileFilter('reward == null')(row({})), true);
    assert.equal(compileFilter('reward != null')(row({})), false);
    assert.equal(compileFilter('reward != 1')(row({})), true, 'a missing reward is not 1');
    assert.equal(compileFilter('group == 3')(row({ group: '3' })), true, 'group ids compare as text');
    // A list == a string: the list holds exactly that string.
    assert.equal(compileFilter('golden == "paris"')(row({ golden: ['Lyon', 'paris'] })), true);
    assert.equal(
      compileFilter('"paris" == golden')(row({ golden: ['Paris'] })),
      false,
      'exact, not normalised (that is ~)',
    );
    assert.equal(compileFilter('golden != "paris"')(row({ golden: ['Lyon'] })), true);
    assert.equal(compileFilter('golden != "paris"')(row({})), true, 'a missing list holds nothing');
    assert.equal(compileFilter('')(row({})), true);
  });

  it('reports errors with their span: unknown fields (with a suggestion), types, syntax', () => {
    const cases: [string, RegExp, number, number][] = [
      ['rewrd == 1', /unknown field rewrd; did you mean reward\?/, 0, 5],
      ['reward == "a"', /cannot compare number with string/, 7, 9],
      ['searches > 3 &&', /expected a value/, 15, 15],
      ['reward = 1', /use == to compare/, 7, 8],
      ['(reward == 1', /missing \)/, 0, 12],
      ['golden == 3', /compare a list with ~/, 7, 9],
      ['reward ~ "1"', /~ needs text on its left/, 0, 6],
      ['answer ~ /(/', /invalid regular expression/, 9, 12],
      ['answer "x"', /expected && or \|\| here/, 7, 10],
      ['finish == "length', /unterminated string/, 10, 17],
    ];
    for (const [src, msg, s, e] of cases) {
      const err = checkFilter(src);
      assert.ok(err, `${src} is an error`);
      assert.match(err.message, msg, src);
      assert.deepEqual([err.start, err.end], [s, e], `span of the error in ${src}`);
    }
    assert.throws(() => compileFilter('foo'), FilterError);
    assert.equal(checkFilter('reward == 0 && answer ~ golden'), null);
  });
});

describe('mask audit', () => {
  it('flags retrieved/prompt/feedback tokens with mask 1 and generated tokens with mask 0; next leak wraps', () => {
    const a = auditMask(['prompt', 'generated', 'retrieved', 'retrieved', 'generated', 'feedback'], [0, 1, 1, 0, 0, 0]);
    assert.deepEqual(a.leaks, [2, 4]);
    assert.equal(a.byKind['trained-on-retrieved'], 1);
    assert.equal(a.byKind['generated-masked'], 1);
    assert.equal(a.trained, 2);
    assert.equal(a.generated, 2);
    assert.equal(nextLeak(a.leaks, 0), 2);
    assert.equal(nextLeak(a.leaks, 2), 4);
    assert.equal(nextLeak(a.leaks, 4), 2, 'wraps');
    assert.equal(nextLeak(a.leaks, 3, -1), 2);
    assert.equal(nextLeak([], 0), undefined);
    assert.deepEqual(auditMask(['generated', 'retrieved'], [1, 0]).leaks, []);
  });
});

const tokenized = (leak = false): Rollout => {
  const prompt = 'Q: who?\n';
  const pieces: [string, 'prompt' | 'generated' | 'retrieved'][] = [
    ['Q: who?\n', 'prompt'],
    ['<think>', 'generated'],
    ['hm', 'generated'],
    ['</think>', 'generated'],
    ['<search>', 'generated'],
    [' who ', 'generated'],
    ['</search>', 'generated'],
    ['\n\n<information>', 'retrieved'],
    ['Doc 1(Title: A) Ann is.', 'retrieved'],
    ['</information>\n\n', 'retrieved'],
    ['<answer>', 'generated'],
    [' Ann ', 'generated'],
    ['</answer>', 'generated'],
  ];
  const text = pieces.map((p) => p[0]);
  const role = pieces.map((p) => p[1]);
  const mask = role.map((r, i) => (r === 'generated' || (leak && i === 8) ? 1 : 0)) as (0 | 1)[];
  return {
    v: 1,
    id: 'x',
    step: 2,
    group: 'g',
    sample: 0,
    prompt,
    response: text.slice(1).join(''),
    golden: ['Ann'],
    reward: 1,
    meta: { retrieval: [{ query: 'who', hits: [{ id: 'd7', score: 3.25 }] }] },
    tokens: {
      text,
      ids: text.map((_, i) => i),
      role,
      loss_mask: mask,
      logprob: text.map(() => -0.5),
      ref_logprob: text.map(() => -0.75),
    },
  };
};

describe('replay model', () => {
  it('builds the timeline with token spans, documents with scores, overlays and the audit', () => {
    const m = replayModel(tokenized(true), { index: 0, file: 'f', line: 1 });
    assert.equal(m.level, 'token');
    assert.deepEqual(
      m.entries.map((e) => e.kind),
      ['prompt', 'think', 'search', 'information', 'answer'],
    );
    const byKind = Object.fromEntries(m.entries.map((e) => [e.kind, [e.tokenStart, e.tokenEnd]]));
    assert.deepEqual(byKind, { prompt: [0, 1], think: [1, 4], search: [4, 7], information: [7, 10], answer: [10, 13] });
    assert.equal(m.entries[2]!.query, 'who');
    assert.deepEqual(m.entries[3]!.docs, [{ index: 1, title: 'A', text: 'Ann is.', score: 3.25, id: 'd7' }]);
    assert.deepEqual(m.audit?.leaks, [8]);
    assert.equal(m.tokens.overlays.kl?.[1], 0.25);
    assert.equal(m.answer, 'Ann');
    assert.equal(m.alignment, undefined, 'tokens round-trip the text');
  });

  it('positions that were not scored are null ("not recorded"): null in new records, 0 on a non-generated token in older ones', () => {
    // A record as the trainer writes it now: null on the prompt and the retrieved block, numbers on generated tokens.
    const r = tokenized();
    const role = r.tokens!.role;
    r.tokens!.logprob = role.map((x) => (x === 'generated' ? -0.5 : null));
    r.tokens!.ref_logprob = role.map((x) => (x === 'generated' ? -0.75 : null));
    const m = replayModel(r, { index: 0, file: 'f', line: 1 });
    const info = m.entries.find((e) => e.kind === 'information')!;
    for (const o of ['logprob', 'ref_logprob', 'kl'] as const) {
      assert.equal(m.tokens.overlays[o]![0], null, `${o}: the prompt is not scored`);
      assert.ok(
        m.tokens.overlays[o]!.slice(info.tokenStart, info.tokenEnd).every((v) => v === null),
        `${o}: retrieved tokens are not scored`,
      );
    }
    assert.equal(m.tokens.overlays.kl![1], 0.25);
    // An older record (v1, no null anywhere): 0 on the prompt and retrieved tokens meant "not scored"; a 0 on a
    // generated token is a real value (a zero advantage in a zero-variance group).
    const old = tokenized();
    old.tokens!.logprob = old.tokens!.role.map((x) => (x === 'generated' ? -0.5 : 0));
    old.tokens!.advantage = old.tokens!.role.map(() => 0);
    const o = replayModel(old, { index: 0, file: 'f', line: 1 });
    assert.equal(o.tokens.overlays.logprob![0], null);
    assert.ok(o.tokens.overlays.logprob!.slice(info.tokenStart, info.tokenEnd).every((v) => v === null));
    assert.equal(o.tokens.overlays.logprob![1], -0.5);
    assert.equal(o.tokens.overlays.advantage![1], 0, 'a generated token keeps its 0');
    assert.equal(o.tokens.overlays.advantage![info.tokenStart], null);
    // The schema accepts null in the number arrays (and nothing else).
    assert.deepEqual(validateRollout(r, 'f', 1), []);
    assert.match(
      validateRollout({ ...r, tokens: { ...r.tokens!, logprob: r.tokens!.logprob.map(() => 'x') } }, 'f', 1)[0]!
        .message,
      /number|null/,
    );
  });

  it('replays token-less rollouts by segment, or split by a tokenizer with one role per token', () => {
    const r = tokenized();
    delete r.tokens;
    const seg = replayModel(r, { index: 0, file: 'f', line: 1 });
    assert.equal(seg.level, 'segment');
    assert.deepEqual(seg.tokens.role, ['prompt', 'generated', 'generated', 'retrieved', 'generated']);
    assert.equal(seg.tokens.mask, undefined);
    assert.equal(seg.audit, undefined);
    const chars = (t: string) => ({ text: [...t], ids: [...t].map((c) => c.charCodeAt(0)) });
    const tk = replayModel(r, { index: 0, file: 'f', line: 1 }, { tokenizer: chars, tokenizerName: 'chars' });
    assert.equal(tk.level, 'tokenizer');
    assert.equal(tk.tokens.text.join(''), r.prompt + r.response);
    const info = tk.entries.find((e) => e.kind === 'information')!;
    assert.ok(tk.tokens.role.slice(info.tokenStart, info.tokenEnd).every((x) => x === 'retrieved'));
  });

  it('replays token arrays of mismatched lengths over their common prefix with a warning', () => {
    const r = tokenized();
    r.tokens!.loss_mask = r.tokens!.loss_mask.slice(0, 5);
    const m = replayModel(r, { index: 0, file: 'f', line: 1 });
    assert.equal(m.tokens.text.length, 5);
    assert.match(m.warnings.join('\n'), /tokens\.loss_mask has 5 entries but tokens\.text has 13/);
  });
});

describe('GRPO groups are keyed by split as well as step (the held-out collision)', () => {
  // As older trainers wrote them: step 20's training group "20:0" (8 samples, rewards vary) and the held-out
  // evaluation at step 20, whose first question also got group "20:0" — another question, another split.
  const rec = (i: number, split: string, reward: number): Rollout => ({
    v: 1,
    id: `${split}-${i}`,
    step: 20,
    group: '20:0',
    sample: i,
    split,
    question: split === 'train' ? 'q-train' : `q-val-${i}`,
    prompt: 'p',
    response: '<answer>x</answer>',
    golden: ['x'],
    reward,
  });
  // Training group "20:1" (4 samples) has all rewards 0: no learning signal.
  const train = [
    ...Array.from({ length: 8 }, (_, i) => rec(i, 'train', i % 2)),
    ...Array.from({ length: 4 }, (_, i) => ({ ...rec(i, 'train', 0), id: `train-b${i}`, group: '20:1' })),
  ];
  // Three held-out rows, each alone in its group, rewarded 1: a reader keyed by step and group alone puts one into
  // "20:0" (9 members) and one into "20:1" (which then is not zero-variance: the no-signal group is missed).
  const val = [rec(0, 'val', 1), { ...rec(1, 'val', 1), group: '20:1' }, { ...rec(2, 'val', 1), group: '20:2' }];
  const all = [...train.slice(0, 4), val[0]!, ...train.slice(4, 10), val[1]!, ...train.slice(10), val[2]!];

  it("the inspector: group size, zero variance, the group's rows, and a split column to filter on", () => {
    const table = new RolloutTable();
    all.forEach((r, i) => table.add(rowFacts({ index: i, file: 'f', line: i + 1, record: r, errors: [] } as never)));
    const trainRow = table.rows.find((f) => f.split === 'train')!;
    const valRow = table.rows.find((f) => f.split === 'val')!;
    assert.equal(table.group(trainRow)?.size, 8);
    assert.equal(table.group(trainRow)?.zeroVariance, false);
    assert.equal(table.group(valRow)?.size, 1);
    assert.equal(table.group(valRow)?.zeroVariance, false, 'a group of one is not a zero-variance group');
    assert.deepEqual(
      table.groupRows(valRow).map((f) => f.id),
      ['val-0'],
    );
    assert.equal(table.groupRows(trainRow).length, 8);
    assert.equal(table.query({ filter: 'split == "val"' })!.length, 3);
    assert.equal(table.query({ filter: 'group.size == 8' })!.length, 8, 'no held-out row joins the training group');
    assert.deepEqual(
      [...table.query({ filter: 'group.zero_variance' })!].map((i) => table.rows[i]!.id),
      ['train-b0', 'train-b1', 'train-b2', 'train-b3'],
    );
    const sorted = [...table.query({ sort: { column: 'split' } })!].map((i) => table.rows[i]!.split);
    assert.deepEqual(sorted, [...Array(12).fill('train'), ...Array(3).fill('val')]);
  });

  it('the run summary (inspect) and the Reward Lab count the training groups alone', async () => {
    const summary = new SummaryBuilder();
    for (const r of all) summary.add(r);
    assert.deepEqual(summary.result().groups, { count: 2, zero_variance: 1, frac_zero_std: 0.5 });
    const report = new RewardReportBuilder();
    for (const r of all) report.add({ record: r, where: 'f:1', outcome: { id: r.id, reward: r.reward!, parts: {} } });
    const res = report.result();
    assert.equal(res.groups, 2);
    assert.equal(res.frac_zero_std_groups, 0.5);
    assert.equal(res.frac_zero_std_groups_recorded, 0.5);
  });

  it('the trainer now names the split in its group ids; TRL tables key their groups by mode', () => {
    assert.notEqual(
      groupKeyOf({ split: 'train', step: 20, group: 'train:20:0' }),
      groupKeyOf({ split: 'val', step: 20, group: 'val:20:0' }),
    );
    assert.notEqual(
      groupKeyOf({ split: 'train', step: 20, group: '20:0' }),
      groupKeyOf({ split: 'val', step: 20, group: '20:0' }),
    );
    assert.equal(groupKeyOf({ step: 20 }), undefined);
  });
});

describe('inspector table', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-inspect-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const line = (i: number, extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      v: 1,
      id: `r${i}`,
      step: 1 + Math.floor(i / 4),
      group: Math.floor(i / 2),
      sample: i % 2,
      prompt: 'p',
      golden: ['Ann'],
      response: `<think>t</think>\n<search>q${i}</search>\n\n<information>Doc 1(Title: T) needle${i}</information>\n\n<answer>${i % 3 ? 'Bob' : 'Ann'}</answer>`,
      reward: i < 4 ? 1 : i % 2,
      ...extra,
    });

  it('facts, group statistics, filters, sorting and pages; malformed rows keep their line and error', async () => {
    const f = join(dir, 'r.jsonl');
    const lines = Array.from({ length: 10 }, (_, i) => line(i));
    lines[5] = '{"v": 1, "id": "bad", broken';
    lines[7] = JSON.stringify({ v: 1, id: 'r7', prompt: 'p' });
    const t = tokenized(true);
    lines.push(JSON.stringify({ ...t, id: 'tok', step: 9, group: 'z' }));
    writeFileSync(f, `${lines.join('\n')}\n`);
    const store = await RolloutStore.open(f);
    const table = new RolloutTable();
    await table.extend(store, { batch: 3 });
    assert.equal(table.rows.length, 11);
    assert.match(table.rows[5]!.error!, /r\.jsonl:6: invalid JSON/);
    assert.match(table.rows[7]!.error!, /r\.jsonl:8: response: /);
    assert.equal(table.rows[7]!.id, 'r7');
    assert.equal(table.rows[10]!.leaks, 1);
    assert.equal(table.rows[10]!.lengthUnit, 'tokens');
    assert.equal(table.rows[0]!.searches, 1);
    assert.equal(table.rows[0]!.em, 1);

    const q = (filter: string, sort?: { column: 'reward' | 'answer' | 'index'; desc?: boolean }) => [
      ...table.query({ filter, sort })!,
    ];
    assert.deepEqual(q('group.zero_variance'), [0, 1, 2, 3], 'groups 0 and 1 (step 1) all rewarded 1');
    assert.deepEqual(q('error'), [5, 7]);
    assert.deepEqual(q('mask.leaks > 0'), [10]);
    assert.deepEqual(q('reward == 0 && answer ~ golden'), [6], 'row 6 answered Ann with reward 0');
    assert.deepEqual(
      q('searches > 0', { column: 'reward', desc: true }),
      [0, 1, 2, 3, 9, 10, 4, 6, 8],
      'stable within equal rewards',
    );
    assert.deepEqual(q('', { column: 'index', desc: true }).slice(0, 3), [10, 9, 8]);
    assert.deepEqual(
      q('answer != null', { column: 'answer' })
        .map((i) => table.rows[i]!.answer)
        .slice(0, 2),
      ['Ann', 'Ann'],
    );
    assert.throws(() => table.query({ filter: 'nope' }), FilterError);
    assert.equal(
      table.query({ filter: '' }, () => true)?.length ?? -1,
      11,
      'a small table finishes before the first cancellation check',
    );

    const hits = await table.search(store, 'NEEDLE3');
    assert.deepEqual([...hits!], [3]);
    assert.equal(await table.search(store, 'needle', () => true), undefined, 'cancelled');
    assert.deepEqual([...table.query({ filter: 'reward == 1' }, undefined, hits!)!], [3]);
    assert.deepEqual(
      table.groupRows(table.rows[2]!).map((r) => r.index),
      [2, 3],
    );
    await store.close();
  });

  it('rowFacts clips long answers and questions (bounded memory per row)', () => {
    const long = 'x'.repeat(10_000);
    const f = rowFacts({
      index: 0,
      file: 'f',
      line: 1,
      errors: [],
      record: { v: 1, id: 'a', prompt: 'p', question: long, response: `<answer>${long}</answer>` },
    });
    assert.ok(f.answer!.length <= 201 && f.question!.length <= 201);
  });
});

describe('inspector engine (the worker thread without the thread)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-engine-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const rec = (i: number) =>
    JSON.stringify({
      v: 1,
      id: `r${i}`,
      step: 1,
      group: Math.floor(i / 2),
      sample: i % 2,
      prompt: 'p',
      golden: ['a'],
      response: `<search>s</search>\n\n<information>Doc 1(Title: T) t</information>\n\n<answer>${i % 2 ? 'a' : 'b'}</answer>`,
      reward: i % 2,
    });

  const until = <T>(fn: () => T | undefined | false, ms = 5000) => waitUntil(fn, ms);

  it('previews, indexes, answers pages and queries (the latest wins), reports filter errors, and follows appends', async () => {
    const f = join(dir, 'r.jsonl');
    writeFileSync(f, `${Array.from({ length: 300 }, (_, i) => rec(i)).join('\n')}\n`);
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m));
    const last = () =>
      [...msgs].reverse().find((m) => m.t === 'status') as Extract<(typeof msgs)[number], { t: 'status' }> | undefined;
    await engine.open(f, true);
    const preview = msgs.find((m) => m.t === 'preview');
    assert.equal(preview?.t === 'preview' && preview.rows.length, 100, 'the first rows before the index');
    assert.ok(
      msgs.findIndex((m) => m.t === 'preview') < msgs.findIndex((m) => m.t === 'status' && m.status.total > 0),
      'preview comes first',
    );
    await until(() => last()?.status.analysed === 300 && !last()?.status.busy);
    assert.equal(last()!.status.total, 300);

    // Two queries in a row: the first is superseded, the view answers the second.
    const q1 = engine.setQuery(1, { filter: 'reward == 1', search: '' });
    const q2 = engine.setQuery(2, {
      filter: 'reward == 0 && answer ~ "b"',
      search: '',
      sort: { column: 'index', desc: true },
    });
    await Promise.all([q1, q2]);
    assert.equal(last()!.status.seq, 2);
    assert.equal(last()!.status.view, 150);
    const page = await engine.page(0, 3);
    assert.deepEqual(
      page.map((r) => r.index),
      [298, 296, 294],
    );

    // A bad filter: the error with its span, the previous view kept.
    await engine.setQuery(3, { filter: 'reward == ', search: '' });
    assert.match(last()!.status.filterError!.message, /expected a value/);
    assert.equal(last()!.status.view, 150);

    // Text search (raw lines), combined with a filter.
    writeFileSync(
      join(dir, 'r.jsonl'),
      `${Array.from({ length: 300 }, (_, i) => rec(i)).join('\n')}\n${JSON.stringify({ ...JSON.parse(rec(300)), question: 'the needle here' })}\n`,
    );
    await until(() => last()?.status.total === 301 && last()!.status.analysed === 301);
    await engine.setQuery(4, { filter: '', search: 'NEEDLE' });
    assert.equal(last()!.status.view, 1);
    assert.deepEqual(
      (await engine.page(0, 10)).map((r) => r.index),
      [300],
    );
    await engine.setQuery(5, { filter: '', search: '' });
    assert.equal(last()!.status.view, 301, 'no query: every row');
    await engine.close();
  });

  it('reports a source that cannot be read', async () => {
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m));
    await engine.open(join(dir, 'missing.jsonl'), false);
    const s = msgs.find((m) => m.t === 'status');
    assert.match(s?.t === 'status' ? (s.status.error ?? '') : '', /missing\.jsonl: ENOENT/);
    await engine.close();
  });

  it("the audit's columns and filters: drift (with a named tokenizer, or the run's model directory's), alarms, leaks, log-prob ratios", async () => {
    const WORDS = [' Paris', '<answer>', '</answer>', 'user', 'assistant'];
    const model = writeTokenizerDir(join(dir, 'model'), WORDS);
    const codec = await loadTokenizerCodec(model);
    const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';
    const clean = recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }], {
      id: 'clean',
      step: 1,
    });
    // " Paris" sampled as " Par" + "is": same text, other ids.
    const split = recordOf(
      codec,
      PROMPT,
      [
        { text: '<answer>', role: 'generated' },
        { text: ' Par', role: 'generated' },
        { text: 'is', role: 'generated' },
        { text: ' </answer>', role: 'generated' },
      ],
      { id: 'split', step: 1 },
    );
    const enumerates = recordOf(codec, PROMPT, [{ text: '<answer> Paris or Lyon </answer>', role: 'generated' }], {
      id: 'enum',
      step: 1,
      golden: ['Paris'],
    });
    const leaky = recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }], {
      id: 'leaky',
      step: 1,
    });
    leaky.tokens!.loss_mask[0] = 1;
    const gap = recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }], {
      id: 'gap',
      step: 1,
    });
    const n = gap.tokens!.ids.length;
    gap.tokens!.rollout_logprob = gap.tokens!.role.map((r) => (r === 'generated' ? -1 : 0));
    // The last generated token: trainer −2 vs rollout −1, ratio e^−1 ≈ 0.37, outside [0.5, 2]; the prompt's logprob is garbage (masked, never flagged).
    gap.tokens!.logprob = gap.tokens!.role.map((r, i) => (r === 'generated' ? (i === n - 1 ? -2 : -1.01) : -50));
    const f = join(dir, 'rollouts.jsonl');
    writeFileSync(f, `${[clean, split, enumerates, leaky, gap].map((r) => JSON.stringify(r)).join('\n')}\n`);

    const open = async (tokenizer?: string, importance?: ImportanceOptions) => {
      const msgs: EngineMessage[] = [];
      const engine = new InspectorEngine((m) => msgs.push(m));
      const last = () =>
        [...msgs].reverse().find((m) => m.t === 'status') as Extract<EngineMessage, { t: 'status' }> | undefined;
      await engine.open(f, false, {}, tokenizer, importance);
      await until(() => last()?.status.analysed === 5 && !last()?.status.busy);
      const ids = async (filter: string) => {
        await engine.setQuery(1, { filter, search: '' });
        assert.equal(last()!.status.filterError, undefined, filter);
        return (await engine.page(0, 10)).map((r) => r.id);
      };
      return { engine, last, ids };
    };

    const e = await open(model);
    assert.match(e.last()!.status.drift!, /drift checked with model\/tokenizer.json/);
    assert.deepEqual(await e.ids('drift'), ['split']);
    assert.equal(e.last()!.status.notChecked, undefined, 'checked');
    assert.deepEqual(await e.ids('drift.token == ' + codec.encode(PROMPT + '<answer>').length), ['split']);
    assert.deepEqual(await e.ids('alarm == "answer-enumeration"'), ['enum']);
    assert.deepEqual(await e.ids('alarm != "answer-enumeration" && !drift'), ['clean', 'leaky', 'gap']);
    assert.deepEqual(await e.ids('leaks > 0'), ['leaky']);
    assert.deepEqual(await e.ids('logprob.flagged > 0'), ['gap']);
    assert.deepEqual(
      await e.ids('logprob.max_abs_diff > 0.5'),
      ['gap'],
      'the masked prompt tokens (Δ = 50) are not compared',
    );
    // the importance-sampling preview (cap 2, token level): MIS drops the ratio-0.37 token, TIS clips nothing (no ratio > 2)
    assert.deepEqual(await e.ids('is.dropped == 1'), ['gap']);
    assert.deepEqual(await e.ids('is.clipped > 0'), []);
    await e.engine.setQuery(2, { filter: '', search: '' });
    const rows = await e.engine.page(0, 5);
    assert.deepEqual(
      rows.map((r) => r.drift),
      [null, codec.encode(PROMPT + '<answer>').length, null, null, null],
    );
    assert.deepEqual(rows[2]!.alarms, ['answer-enumeration']);
    assert.equal(rows[4]!.ratioFlags, 1);
    assert.ok(Math.abs(rows[4]!.logprob! - 1) < 1e-9);
    await e.engine.setQuery(3, { filter: 'alarm == 3', search: '' });
    assert.match(e.last()!.status.filterError!.message, /compare a list with ~ .* or with == and a string/);
    await e.engine.close();

    // Sequence level, cap 1.5: ρ_seq = exp(−1 − 0.01·k) < 1/1.5, so MIS drops every trained token of 'gap'.
    const seq = await open(undefined, { isLevel: 'sequence', isCap: 1.5 });
    assert.deepEqual(await seq.ids('is.dropped > 1 && is.clipped == 0'), ['gap']);
    await seq.engine.close();

    // No tokenizer named, no run: drift is not checked (the column stays empty), and the status says why.
    const none = await open();
    assert.match(none.last()!.status.drift!, /drift not checked: no tokenizer/);
    assert.deepEqual(await none.ids('drift'), []);
    // …and a filter on drift says "not checked", not "0 match" (issue 44); one without drift says nothing of it.
    assert.match(none.last()!.status.notChecked!, /^drift not checked: no tokenizer/);
    assert.deepEqual(await none.ids('reward == 1 || drift.token > 3'), []);
    assert.match(none.last()!.status.notChecked!, /^drift not checked/);
    assert.deepEqual(await none.ids(''), ['clean', 'split', 'enum', 'leaky', 'gap']);
    assert.equal(none.last()!.status.notChecked, undefined);
    assert.deepEqual(await none.ids('searches >= 0'), ['clean', 'split', 'enum', 'leaky', 'gap']);
    assert.equal(none.last()!.status.notChecked, undefined);
    assert.equal((await none.engine.page(0, 5))[1]!.drift, undefined);
    await none.engine.close();

    // Inside a run whose model directory has a tokenizer.json: that one.
    writeFileSync(join(dir, 'run.json'), JSON.stringify({ config: { model: { path: 'model' } } }));
    const run = await open();
    assert.deepEqual(await run.ids('drift'), ['split']);
    await run.engine.close();
  });
});

describe('replay tokenizer (tokenizer.json through @huggingface/tokenizers)', () => {
  it("loads a model directory's tokenizer.json and splits each entry into tokens with one role each", async () => {
    const tk = await loadTextTokenizer(join(__dirname, '..', 'fixtures', 'tiny-e5', 'tokenizer.json'));
    assert.equal(tk.name, 'tiny-e5/tokenizer.json');
    const r = tokenized();
    delete r.tokens;
    const m = replayModel(r, { index: 0, file: 'f', line: 1 }, { tokenizer: tk.tokenize, tokenizerName: tk.name });
    assert.equal(m.level, 'tokenizer');
    assert.ok(m.tokens.text.length > m.entries.length, 'more tokens than entries');
    assert.equal(m.tokens.ids!.length, m.tokens.text.length);
    for (const e of m.entries)
      assert.ok(
        m.tokens.role
          .slice(e.tokenStart, e.tokenEnd)
          .every((x) => x === (e.kind === 'information' ? 'retrieved' : e.kind === 'prompt' ? 'prompt' : 'generated')),
      );
    await assert.rejects(loadTextTokenizer(join(__dirname, '..', 'fixtures', 'bm25', 'queries.txt')), /queries\.txt: /);
  });
});

describe('inspector over imported sources', () => {
  it("opens a folder of veRL's {step}.jsonl dumps as it is: rows converted, replayed at segment level", async () => {
    const dir = join(__dirname, '..', 'fixtures', 'verl');
    const store = await RolloutStore.open(dir);
    const table = new RolloutTable();
    await table.extend(store);
    assert.ok(table.rows.length >= 2);
    // The fixture's one malformed dump line is reported with its file, line and field; the others convert.
    assert.deepEqual(
      table.rows.filter((r) => r.error).map((r) => r.error),
      [`${join(dir, '10.jsonl')}:2: output: expected a string (the decoded response), got number`],
    );
    assert.deepEqual(
      [...new Set(table.rows.filter((r) => !r.error).map((r) => r.step))],
      [5, 10],
      'steps from the lines or the file names, in order',
    );
    const row = (await store.row(0))!;
    const m = replayModel(row.record!, { index: 0, file: row.file, line: row.line });
    assert.equal(m.level, 'segment');
    assert.ok(m.entries.some((e) => e.kind === 'information') && m.tokens.role.includes('retrieved'));
    await store.close();
  });
});
