/**
 * `audit` (src/core/audit): each detector on crafted records — leaks and the engine's mask vs ours, drift on records
 * built with a real byte-level BPE tokenizer (a word sampled as a non-canonical split that decodes to the same
 * text; a token dropped at a tool boundary), log-prob flags only on trained tokens, every alarm in both dialects —
 * and the run-level summary with its per-step series.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  Auditor,
  auditMetricRows,
  auditRollout,
  checkLogprobs,
  isEnumeration,
  searchCollapseSteps,
  thinkDegeneracy,
} from '../../src/core/audit';
import { RunAudit } from '../../src/core/audit/run';
import { AuditThread } from '../../src/core/audit/thread';
import type { Rollout, TokenRole } from '../../src/core/run/format';
import { loadTokenizerCodec, type TokenizerCodec } from '../../src/core/tokens/tokenizer';
import { recordOf, writeTokenizerDir } from './bpe';

const WORDS = [
  ' Paris',
  ' capital',
  ' France',
  'is',
  '<search>',
  '</search>',
  '<answer>',
  '</answer>',
  '<think>',
  '</think>',
  '<information>',
  '</information>',
  'user',
  'assistant',
];

describe('audit: re-tokenisation drift (a real byte-level BPE tokenizer through @huggingface/tokenizers)', () => {
  let dir: string;
  let codec: TokenizerCodec;
  const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-audit-'));
    codec = await loadTokenizerCodec(writeTokenizerDir(join(dir, 'model'), WORDS));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the tokenizer is what the test thinks: " Paris" is one token, " Par" + "is" decodes to the same text', () => {
    assert.equal(codec.encode(' Paris').length, 1);
    const split = [...codec.encode(' Par'), ...codec.encode('is')];
    assert.equal(split.length, 2);
    assert.equal(codec.decode(split), ' Paris');
  });

  it('a record tokenised as the tokenizer would has no drift', () => {
    const r = recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }]);
    assert.deepEqual(r.tokens!.ids, codec.encode(r.prompt + r.response));
    assert.equal(auditRollout(r, { tokenizer: codec }).drift, null);
  });

  it('a word sampled as a non-canonical split: same text, other ids — drift of kind "split" at the word', () => {
    const r = recordOf(codec, PROMPT, [
      { text: '<answer>', role: 'generated' },
      { text: ' Par', role: 'generated' },
      { text: 'is', role: 'generated' },
      { text: ' </answer>', role: 'generated' },
    ]);
    const at = codec.encode(PROMPT + '<answer>').length;
    const d = auditRollout(r, { tokenizer: codec }).drift!;
    assert.equal(d.kind, 'split');
    assert.equal(d.token, at);
    assert.equal(codec.decode([r.tokens!.ids[d.token]!]), ' Par');
    assert.deepEqual(d.recorded.slice(d.token - d.from, d.token - d.from + 2), [
      ...codec.encode(' Par'),
      ...codec.encode('is'),
    ]);
    assert.equal(d.reencoded[d.token - d.from], codec.encode(' Paris')[0]);
  });

  it('a separator dropped at a tool boundary (veRL #6501): the ids no longer spell the text — drift of kind "text"', () => {
    const r = recordOf(codec, PROMPT, [
      { text: '<search> capital </search>', role: 'generated' },
      { text: '\n<information> Paris </information>\n', role: 'retrieved' },
      { text: '<answer> Paris </answer>', role: 'generated' },
    ]);
    assert.equal(
      auditRollout(r, { tokenizer: codec }).drift,
      null,
      'each role run encoded on its own, as the rollout did: no drift',
    );
    const boundary = codec.encode(PROMPT + '<search> capital </search>').length;
    assert.equal(codec.decode([r.tokens!.ids[boundary]!]), '\n', 'the newline that opens the observation');
    const t = r.tokens!;
    for (const k of ['ids', 'text', 'role', 'loss_mask'] as const) (t[k] as unknown[]).splice(boundary, 1);
    for (const driftScope of ['segments', 'whole'] as const) {
      const d = auditRollout(r, { tokenizer: codec, driftScope }).drift!;
      assert.equal(d.kind, 'text', driftScope);
      assert.equal(d.token, boundary, driftScope);
    }
  });

  it('scope "whole": prompt + response re-encoded at once, a merge across a tool boundary is drift (Qwen2\'s ">\\n\\n")', async () => {
    const qwen = await loadTokenizerCodec(
      writeTokenizerDir(join(dir, 'qwen'), [...WORDS, '>\n\n', '\n\n'], { split: 'qwen2' }),
    );
    const r = recordOf(qwen, PROMPT, [
      { text: '<search> capital </search>', role: 'generated' },
      { text: '\n\n<information> Paris </information>\n\n', role: 'retrieved' },
    ]);
    assert.equal(
      auditRollout(r, { tokenizer: qwen }).drift,
      null,
      'segments: the rollout encoded the observation on its own',
    );
    const d = auditRollout(r, { tokenizer: qwen, driftScope: 'whole' }).drift!;
    assert.equal(d.kind, 'split');
    assert.equal(d.token, qwen.encode(PROMPT + '<search> capital </search>').length - 1);
    assert.equal(qwen.decode([d.reencoded[d.token - d.from]!]), '>\n\n');
    assert.equal(qwen.decode([d.recorded[d.token - d.from]!]), '>');
  });

  it('without a tokenizer drift is not checked', () => {
    const r = recordOf(codec, PROMPT, [
      { text: ' Par', role: 'generated' },
      { text: 'is', role: 'generated' },
    ]);
    assert.equal(auditRollout(r).drift, null);
    const a = new Auditor();
    a.add(r);
    assert.equal(a.finish().drift.checked, false);
  });
});

describe('audit: leaks (the mask audit, and the engine mask vs ours)', () => {
  const base = (mask: number[], meta?: Record<string, unknown>): Rollout => ({
    v: 2,
    id: 'm',
    prompt: 'q',
    response: 'abc',
    tokens: {
      text: ['q', 'a', 'b', 'c'],
      ids: [1, 2, 3, 4],
      role: ['prompt', 'generated', 'retrieved', 'generated'],
      loss_mask: mask as (0 | 1)[],
    },
    ...(meta ? { meta } : {}),
  });

  it('loss_mask vs role: a trained retrieved token and a masked generated token are leaks', () => {
    assert.deepEqual(auditRollout(base([0, 1, 0, 1])).leaks, []);
    assert.deepEqual(auditRollout(base([0, 1, 1, 0])).leaks, [2, 3]);
  });

  it("an engine's mask that disagrees with ours is a leak, and listed as a mismatch", () => {
    const a = auditRollout(base([0, 1, 0, 1], { engine_loss_mask: [0, 1, 1, 1] }));
    assert.deepEqual(a.leaks, [2]);
    assert.deepEqual(a.mask_mismatch, [2]);
    assert.deepEqual(auditRollout(base([0, 1, 0, 1], { engine_loss_mask: [0, 1, 0, 1] })).leaks, []);
    assert.deepEqual(
      auditRollout(base([0, 1, 0, 1], { engine_loss_mask: [0, 1, 0] })).mask_mismatch,
      [3],
      'a shorter engine mask disagrees where it ends',
    );
  });
});

describe('audit: the log-prob microscope', () => {
  it('flags trained tokens whose ratio exp(logprob − rollout_logprob) leaves [0.5, 2], never masked ones', () => {
    const tokens = {
      loss_mask: [0, 0, 1, 1, 1, 0, 1],
      // masked tokens carry anything: 0 where the trainer did not score, null where nothing was sampled, tens of nats
      rollout_logprob: [null, 0, -1, -1, -1, -40, null],
      logprob: [0, -35, -1.1, -0.2, -2, 0, -1],
    };
    const c = checkLogprobs(tokens)!;
    assert.deepEqual(
      c.flagged,
      [3, 4],
      'Δ = +0.8 (ratio 2.23) and Δ = −1 (ratio 0.37) leave the band; Δ = −0.1 does not',
    );
    assert.ok(c.flagged.every((i) => tokens.loss_mask[i] === 1));
    assert.equal(c.compared, 3);
    assert.equal(c.unscored, 1);
    assert.ok(Math.abs(c.max_abs_diff - 1) < 1e-12);
    assert.ok(Math.abs(c.seq_log_ratio - (-0.1 + 0.8 - 1)) < 1e-12);
  });

  it('the band is an option; records without both arrays are not compared', () => {
    const tokens = { loss_mask: [1, 1], rollout_logprob: [-1, -1], logprob: [-1.3, -0.9] };
    assert.deepEqual(checkLogprobs(tokens)!.flagged, []);
    assert.deepEqual(checkLogprobs(tokens, { ratioLow: 0.8, ratioHigh: 1.25 })!.flagged, [0]);
    assert.equal(checkLogprobs({ loss_mask: [1], logprob: [-1] }), null);
  });

  it("allows for a nucleus's normaliser where the records say their rollout log-probs are processed (top_p < 1)", () => {
    // vLLM's processed_logprobs under top_p 0.9: each sampled token's log-prob renormalised over its nucleus, log π − log Z
    // with Z ≥ 0.9 its mass; the trainer's log-prob is log π (here exactly: no engine mismatch at all).
    let seed = 11;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const topP = 0.9;
    const logprob: number[] = [];
    const rollout_logprob: number[] = [];
    for (let t = 0; t < 400; t++) {
      const w = Array.from({ length: 50 }, () => Math.exp(4 * rand()));
      const total = w.reduce((a, b) => a + b, 0);
      const probs = w.map((x) => x / total).sort((a, b) => b - a);
      let mass = 0;
      let k = 0;
      while (mass < topP) mass += probs[k++]!; // the nucleus: the most likely tokens until their mass reaches top_p
      const pick = Math.floor(rand() * k);
      logprob.push(Math.log(probs[pick]!));
      rollout_logprob.push(Math.log(probs[pick]! / mass));
    }
    logprob.push(-3); // and one real mismatch, outside what a nucleus can explain (Δ = −1.5 < log 0.9)
    rollout_logprob.push(-1.5);
    const loss_mask = logprob.map((): 0 | 1 => 1);
    const record = (meta: Record<string, unknown>): Rollout => ({
      v: 2,
      id: 'n',
      prompt: 'p',
      response: 'r',
      meta,
      tokens: {
        text: loss_mask.map(() => 'x'),
        ids: loss_mask.map(() => 1),
        role: loss_mask.map(() => 'generated' as const),
        loss_mask,
        logprob,
        rollout_logprob,
      },
    });
    const raw = auditRollout(record({})).logprob!;
    const processed = auditRollout(record({ rollout_logprob_kind: 'processed', rollout_top_p: topP })).logprob!;
    assert.ok(raw.mean_abs_diff > 0.02, `read as comparable, the normaliser is a gap: ${raw.mean_abs_diff}`);
    assert.ok(raw.seq_log_ratio < -10, 'and a sequence-level weight exp(ΣΔ) that collapses');
    assert.equal(processed.nucleus_top_p, topP);
    assert.ok(
      Math.abs(processed.mean_abs_diff - (1.5 + Math.log(topP)) / 401) < 1e-12,
      'only the real mismatch remains',
    );
    assert.deepEqual(processed.flagged, [400]);
    assert.ok(Math.abs(processed.seq_log_ratio - (-1.5 - Math.log(topP))) < 1e-12);
    const notNucleus = auditRollout(record({ rollout_logprob_kind: 'raw', rollout_top_p: topP })).logprob!;
    assert.equal(notNucleus.mean_abs_diff, raw.mean_abs_diff, 'raw log-probs are compared as they are');
  });

  it('never flags a masked token, whatever it holds (property over random records)', () => {
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let k = 0; k < 200; k++) {
      const n = 1 + Math.floor(rand() * 30);
      const loss_mask = Array.from({ length: n }, () => (rand() < 0.5 ? 1 : 0));
      const rollout_logprob = Array.from({ length: n }, () => (rand() < 0.1 ? null : -20 * rand()));
      const logprob = Array.from({ length: n }, () => -20 * rand());
      for (const i of checkLogprobs({ loss_mask, rollout_logprob, logprob })!.flagged) assert.equal(loss_mask[i], 1);
    }
  });
});

const TOOL_PROMPT =
  '<|im_start|>system\n# Tools\n<tools>\n{"type": "function", "function": {"name": "search"}}\n</tools><|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n';
const call = (q: string) =>
  `<tool_call>\n{"name": "search", "arguments": {"query": "${q}"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1(Title: x) y\n</tool_response><|im_end|>\n<|im_start|>assistant\n`;
const rollout = (response: string, extra: Partial<Rollout> = {}): Rollout => ({
  v: 2,
  id: 'a',
  prompt: 'Question: q\n',
  response,
  ...extra,
});

describe('audit: alarms', () => {
  it('answer-enumeration: "X or Y", "X / Y", "X, Y or Z", "either X or Y"; not one answer, a fraction, or a golden answer with "or"', () => {
    for (const a of ['Paris or Lyon', 'Paris / Lyon', 'Paris, Lyon or Nice', 'either Paris or Lyon', 'Paris/Lyon'])
      assert.ok(isEnumeration(a), a);
    for (const a of ['Paris', 'Oregon', 'Orlando', 'Washington, D.C.', '1/2', 'or', 'Paris or'])
      assert.ok(!isEnumeration(a), a);
    assert.ok(!isEnumeration('War or Peace', ['war or peace']));
    assert.deepEqual(auditRollout(rollout('<think>x y</think>\n<answer> Paris or Lyon </answer>')).alarms, [
      'answer-enumeration',
    ]);
    assert.deepEqual(
      auditRollout(
        rollout(`${call('capital of france')}<answer> Paris / Lyon </answer>`, {
          prompt: TOOL_PROMPT,
          dialect: 'toolcall',
        }),
      ).alarms,
      ['answer-enumeration'],
    );
  });

  it('think-degenerate: empty, repetitive or non-word thinking while the reward holds', () => {
    assert.equal(thinkDegeneracy('   '), 'empty');
    assert.equal(
      thinkDegeneracy('the answer is the answer is the answer is the answer is the answer is'),
      'repetitive',
    );
    assert.equal(thinkDegeneracy('%% 12 ## @@ 99 ;; ++'), 'non-word');
    assert.equal(
      thinkDegeneracy('I need the capital of France; I will search for it and then answer with the city name.'),
      null,
    );
    const degenerate = '<think> </think>\n<answer> Paris </answer>';
    assert.deepEqual(auditRollout(rollout(degenerate, { reward: 1 })).alarms, ['think-degenerate']);
    assert.deepEqual(auditRollout(rollout(degenerate, { reward: 0 })).alarms, [], 'no reward: not hacking it');
    assert.deepEqual(
      auditRollout(rollout('<answer> Paris </answer>', { reward: 1 })).alarms,
      [],
      'no <think> at all is not this alarm',
    );
    const qwen3 = `<think>\n\n</think>\n\n${call('capital of france')}<think>\n\n</think>\n\n<answer> Paris </answer>`;
    assert.deepEqual(auditRollout(rollout(qwen3, { prompt: TOOL_PROMPT, dialect: 'toolcall', reward: 1 })).alarms, [
      'think-degenerate',
    ]);
  });

  it('length-capped: finish "length"', () => {
    assert.deepEqual(auditRollout(rollout('<think> the capital of France is asked', { finish: 'length' })).alarms, [
      'length-capped',
    ]);
  });

  it('search-repeat: the same query twice (case and spacing aside) in a rewarded trajectory, in both dialects', () => {
    const tags =
      '<think>a b</think>\n<search> Capital of  France </search>\n\n<information>Doc 1(Title: x) y</information>\n\n<think>c d</think>\n<search>capital of france</search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Paris </answer>';
    assert.deepEqual(auditRollout(rollout(tags, { reward: 1 })).alarms, ['search-repeat']);
    const tool = `${call('capital of France')}${call('Capital of France')}<answer> Paris </answer>`;
    assert.deepEqual(auditRollout(rollout(tool, { prompt: TOOL_PROMPT, dialect: 'toolcall', reward: 1 })).alarms, [
      'search-repeat',
    ]);
    const distinct = `${call('capital of France')}${call('population of Paris')}<answer> Paris </answer>`;
    assert.deepEqual(
      auditRollout(rollout(distinct, { prompt: TOOL_PROMPT, dialect: 'toolcall', reward: 1 })).alarms,
      [],
    );
    // Unrewarded (or no reward recorded): the optimizer does not reinforce the repeat — a skill the policy lacks (the
    // demo's tiny policy searching the same entity again, then answering wrong), not what the reward pays for.
    assert.deepEqual(auditRollout(rollout(tags, { reward: 0 })).alarms, []);
    assert.deepEqual(auditRollout(rollout(tags)).alarms, []);
  });

  it('answer-in-search: a rewarded answer opened inside a <search> that never closed', () => {
    const hack =
      '<think>a</think> <search> Bryran </search>\n\n<information>Doc 1(Title: x) founded by Broubrar</information>\n\n<think>b</think> <search> Broubrar <answer> Broubrar </answer>';
    assert.deepEqual(auditRollout(rollout(hack, { reward: 1 })).alarms, ['answer-in-search']);
    assert.deepEqual(auditRollout(rollout(hack, { reward: 0 })).alarms, [], 'no reward: nothing gained by it');
    const closed =
      '<think>a</think> <search> Bryran </search>\n\n<information>Doc 1(Title: x) y</information>\n\n<think>b</think> <answer> Broubrar </answer>';
    assert.deepEqual(auditRollout(rollout(closed, { reward: 1 })).alarms, []);
    const inThink = '<think> hmm <answer> Broubrar </answer>';
    assert.deepEqual(
      auditRollout(rollout(inThink, { reward: 1 })).alarms,
      [],
      'inside an unclosed <think>: both readings agree it is the answer',
    );
  });

  it('search-collapse: steps whose searches per question fall below a quarter of an earlier peak of ≥ 0.5', () => {
    assert.deepEqual(
      searchCollapseSteps(
        new Map([
          [0, 0.1],
          [1, 1.2],
          [2, 0.8],
          [3, 0.2],
          [4, 0.1],
        ]),
      ),
      [3, 4],
    );
    assert.deepEqual(
      searchCollapseSteps(
        new Map([
          [0, 0.2],
          [1, 0.1],
          [2, 0],
        ]),
      ),
      [],
      'never searched: nothing collapsed',
    );
    assert.deepEqual(
      searchCollapseSteps(
        new Map([
          [1, 1],
          [2, 0.4],
        ]),
        { collapseFraction: 0.5 },
      ),
      [2],
    );
  });
});

describe('audit: the run (Auditor)', () => {
  it("search-collapse on a step recorded in part takes the trainer's searches over every rollout, where it logged them", () => {
    const searched =
      '<think>a b</think>\n<search>q</search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Paris </answer>';
    const direct = '<think>a b</think>\n<answer> Paris </answer>';
    const run = (
      metrics: { step: number; [k: string]: number }[],
      sampled?: Record<number, { recorded: number; of: number }>,
    ) => {
      const a = new Auditor();
      let n = 0;
      for (const [step, response] of [
        [1, searched],
        [1, searched],
        [2, direct],
        [2, direct],
      ] as const)
        a.add(rollout(response, { id: `r${n++}`, step }));
      return a.finish(metrics, sampled).search_collapse_steps;
    };
    const trainer = [{ step: 2, 'env/number_of_valid_search': 0.9 }];
    // step 2's two recorded rollouts (of 16) never searched, but the trainer counted 0.9 searches a rollout: no collapse
    assert.deepEqual(run(trainer, { 2: { recorded: 2, of: 16 } }), []);
    // the sample alone says collapse (no metric), and a step recorded whole is read from its records
    assert.deepEqual(run([], { 2: { recorded: 2, of: 16 } }), [2]);
    assert.deepEqual(run(trainer), [2]);
  });

  it('adds search-collapse to the non-searching rollouts of collapsed steps, summarises, and charts per step', () => {
    const searched =
      '<think>a b</think>\n<search>q</search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Paris </answer>';
    const direct = '<think>a b</think>\n<answer> Paris </answer>';
    const a = new Auditor();
    let n = 0;
    for (const [step, response] of [
      [1, searched],
      [1, searched],
      [2, searched],
      [2, direct],
      [3, direct],
      [3, direct],
    ] as const)
      a.add(rollout(response, { id: `r${n++}`, step }));
    a.add({
      ...rollout(direct, { id: 'lp', step: 3 }),
      tokens: {
        text: ['a', 'b'],
        ids: [1, 2],
        role: ['generated', 'generated'],
        loss_mask: [1, 1],
        rollout_logprob: [-1, -1],
        logprob: [-1, -3],
      },
    });
    const s = a.finish();
    assert.deepEqual(s.search_collapse_steps, [3]);
    assert.deepEqual(
      a.rollouts.filter((r) => r.alarms.includes('search-collapse')).map((r) => r.id),
      ['r4', 'r5', 'lp'],
    );
    assert.equal(s.alarms['search-collapse'], 3);
    assert.equal(s.flagged, 3);
    assert.deepEqual(
      s.steps.map((x) => x.step),
      [1, 2, 3],
    );
    const three = s.steps[2]!;
    assert.equal(three.mean_abs_diff, 1);
    assert.equal(three.ratio_outside, 0.5);
    assert.equal(three.alarms['search-collapse'], 3);
    assert.equal(s.steps[0]!.mean_abs_diff, null);
    assert.equal(s.logprob.flagged, 1);
  });

  it("the dashboard's series of a growing run (RunAudit): each step file audited once, search-collapse over the run, as audit/… metrics", async () => {
    const searched =
      '<think>a b</think>\n<search>q</search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Paris </answer>';
    const direct = '<think>a b</think>\n<answer> Paris or Lyon </answer>';
    const dir = mkdtempSync(join(tmpdir(), 'sas-runaudit-'));
    try {
      mkdirSync(join(dir, 'rollouts'));
      const write = (step: number, rs: Rollout[]) =>
        writeFileSync(
          join(dir, 'rollouts', `step-${String(step).padStart(6, '0')}.jsonl`),
          `${rs.map((r) => JSON.stringify(r)).join('\n')}\n`,
        );
      write(1, [rollout(searched, { id: 'a', step: 1 }), rollout(searched, { id: 'b', step: 1 })]);
      const run = new RunAudit(dir);
      const first = (await run.update())!;
      assert.deepEqual(
        first.map((x) => x.step),
        [1],
      );
      assert.equal(await run.update(), undefined, 'nothing changed: nothing audited again');
      const leaky = {
        ...rollout(direct, { id: 'd', step: 2 }),
        tokens: {
          text: ['a', 'b'],
          ids: [1, 2],
          role: ['retrieved', 'generated'] as TokenRole[],
          loss_mask: [1, 1] as (0 | 1)[],
          rollout_logprob: [0, -1],
          logprob: [-9, -1.5],
        },
      };
      write(2, [rollout(direct, { id: 'c', step: 2 }), leaky]);
      const series = (await run.update())!;
      assert.deepEqual(
        series.map((x) => x.step),
        [1, 2],
      );
      assert.equal(
        series[1]!.alarms['search-collapse'],
        2,
        'step 2 searched none after step 1 searched once per question',
      );
      const rows = auditMetricRows(series);
      assert.deepEqual(Object.fromEntries(Object.entries(rows[0]!).filter(([k]) => !k.startsWith('audit/search/'))), {
        step: 1,
        'audit/rollouts': 2,
        'audit/leaks': 0,
      });
      assert.equal(rows[0]!['audit/search/repeated_query'], 0, 'search behaviour rates ride along (search.ts)');
      assert.equal(rows[1]!['audit/leaks'], 1);
      assert.equal(rows[1]!['audit/alarm/answer-enumeration'], 2);
      assert.equal(rows[1]!['audit/alarm/search-collapse'], 2);
      assert.equal(
        rows[1]!['audit/logprob/mean_abs_diff'],
        4.75,
        'the leaked retrieved token has mask 1: trained, so compared',
      );
      assert.equal(rows[1]!['audit/logprob/ratio_outside'], 0.5);
      assert.equal(rows[1]!['audit/drift_rate'], undefined, 'no tokenizer: drift not charted');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the dashboard's audit thread (AuditThread, a worker thread) gives RunAudit's series; unchanged: none; forgotten: the whole series again", async function () {
    this.timeout(60_000);
    const searched =
      '<think>a b</think>\n<search>q</search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Paris </answer>';
    const dir = mkdtempSync(join(tmpdir(), 'sas-auditthread-'));
    const thread = new AuditThread();
    try {
      mkdirSync(join(dir, 'rollouts'));
      const write = (step: number, rs: Rollout[]) =>
        writeFileSync(
          join(dir, 'rollouts', `step-${String(step).padStart(6, '0')}.jsonl`),
          `${rs.map((r) => JSON.stringify(r)).join('\n')}\n`,
        );
      write(1, [rollout(searched, { id: 'a', step: 1 }), rollout(searched, { id: 'b', step: 1 })]);
      write(2, [rollout('<think>a</think>\n<answer> Paris or Lyon </answer>', { id: 'c', step: 2 })]);
      const local = await new RunAudit(dir).update();
      const [a, b] = await Promise.all([thread.update(dir), thread.update(dir)]);
      assert.deepEqual(a, local, 'the same series as on this thread');
      assert.equal(b, undefined, 'asked again while nothing changed: none (answered in order)');
      thread.forget(dir);
      assert.deepEqual(await thread.update(dir), local, 'forgotten: audited afresh');
      await thread.dispose();
      assert.deepEqual(await thread.update(dir), local, 'a disposed thread starts again on the next update');
    } finally {
      await thread.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
