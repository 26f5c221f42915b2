import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  formatIssue,
  ROLLOUT_RECORD_VERSION,
  type Rollout,
  RolloutSchema,
  renderPublishedSchemas,
  TRAINER_SCHEMA_COPY,
  validateRollout,
} from '../../src/core/run/format';
import { S, type Static, toJsonSchema, validate } from '../../src/core/schema/schema';

const ROOT = join(__dirname, '..', '..');

const GOOD: Rollout = {
  v: 2,
  id: 'step1-g0-s0',
  step: 1,
  group: 0,
  sample: 0,
  split: 'train',
  question: 'who?',
  golden: ['Ilse Marrow'],
  data_source: 'demo',
  prompt: 'Question: who?\n',
  response: '<answer>Ilse Marrow</answer>',
  reward: 1,
  reward_parts: { em: 1 },
  finish: 'answer',
  turns: 1,
  searches: 0,
  tokens: {
    text: ['<answer>', 'Ilse'],
    ids: [5, 6],
    role: ['generated', 'generated'],
    loss_mask: [1, 1],
    rollout_logprob: [-0.11, -0.19],
    logprob: [-0.1, -0.2],
  },
};

// Compile-time checks that the types are derived from the schema (tsc runs over tests).
const minimal: Rollout = { v: 1, id: 'x', prompt: '', response: '' };
// @ts-expect-error response is required
const missing: Rollout = { v: 1, id: 'x', prompt: '' };
// @ts-expect-error finish is an enum
const badFinish: Rollout = { ...minimal, finish: 'done' };
void [missing, badFinish];

describe('run format', () => {
  it('accepts a full record and a minimal one', () => {
    assert.deepEqual(validateRollout(GOOD, 'f.jsonl', 1), []);
    assert.deepEqual(validateRollout(minimal, 'f.jsonl', 1), []);
    assert.deepEqual(
      validateRollout({ ...minimal, extra_field: { anything: 1 } }, 'f.jsonl', 1),
      [],
      'unknown fields are allowed',
    );
  });

  it('names the file, line and field of each problem', () => {
    const bad = {
      ...GOOD,
      reward: 'high',
      golden: ['a', 3],
      finish: 'done',
      tokens: { ...GOOD.tokens, loss_mask: [1, 2] },
    };
    const issues = validateRollout(bad, 'runs/x/rollouts/step-000001.jsonl', 17).map(formatIssue);
    assert.deepEqual(issues, [
      'runs/x/rollouts/step-000001.jsonl:17: golden[1]: expected a string, got number',
      'runs/x/rollouts/step-000001.jsonl:17: reward: expected a number, got string',
      'runs/x/rollouts/step-000001.jsonl:17: finish: expected one of "answer", "max_turns", "length", "invalid", got "done"',
      'runs/x/rollouts/step-000001.jsonl:17: tokens.loss_mask[1]: expected 0 or 1, got number',
    ]);
    assert.deepEqual(
      validateRollout({ v: 3, id: '' }, 'f', 3).map((i) => `${i.field}: ${i.message}`),
      ['prompt: is required', 'response: is required', 'v: expected 1 or 2, got number', 'id: must not be empty'],
    );
    assert.deepEqual(
      validateRollout([1], 'f', 1).map((i) => i.message),
      ['expected an object, got array'],
    );
  });

  it('checks that token arrays have equal lengths', () => {
    const bad = {
      ...GOOD,
      tokens: { ...GOOD.tokens!, role: ['generated'], rollout_logprob: [-1], logprob: [-1, -2, -3] },
    };
    assert.deepEqual(
      validateRollout(bad, 'f', 2).map((i) => `${i.field}: ${i.message}`),
      [
        'tokens.role: has 1 entries but tokens.text has 2',
        'tokens.rollout_logprob: has 1 entries but tokens.text has 2',
        'tokens.logprob: has 3 entries but tokens.text has 2',
      ],
    );
  });

  it('reads version 1 records as they are (v2 only added tokens.rollout_logprob); writers write version 2', () => {
    const { rollout_logprob: _dropped, ...v1Tokens } = GOOD.tokens!;
    assert.deepEqual(validateRollout({ ...GOOD, v: 1, tokens: v1Tokens }, 'old.jsonl', 1), []);
    assert.deepEqual(validateRollout({ ...GOOD, v: 2 }, 'new.jsonl', 1), []);
    assert.equal(ROLLOUT_RECORD_VERSION, 2);
  });

  it('publishes JSON Schemas that are generated from the same source (run `npm run schema` if this fails)', () => {
    for (const [name, text] of Object.entries(renderPublishedSchemas())) {
      assert.equal(readFileSync(join(ROOT, 'docs', 'schema', name), 'utf8'), text, `docs/schema/${name} is stale`);
    }
    assert.equal(
      readFileSync(join(ROOT, TRAINER_SCHEMA_COPY), 'utf8'),
      renderPublishedSchemas()['run-config.schema.json'],
      `${TRAINER_SCHEMA_COPY} is stale`,
    );
    const json = toJsonSchema(RolloutSchema) as { required: string[]; properties: Record<string, unknown> };
    assert.deepEqual(json.required, ['v', 'id', 'prompt', 'response']);
    assert.ok('tokens' in json.properties);
  });

  it('schema builder: strict objects, unions, records, limits', () => {
    const Strict = S.object(
      { a: S.integer({ minimum: 0, maximum: 9 }), b: S.optional(S.union(S.string(), S.null())) },
      { additional: false },
    );
    type StrictT = Static<typeof Strict>;
    const ok: StrictT = { a: 1 };
    assert.deepEqual(validate(Strict, ok), []);
    assert.deepEqual(
      validate(Strict, { a: 10, b: 1, c: true }).map((i) => `${i.path}: ${i.message}`),
      ['a: must be ≤ 9, got 10', 'b: expected a string or null, got number', 'c: is not a known field'],
    );
    assert.deepEqual(
      validate(Strict, { a: 1.5 }).map((i) => i.message),
      ['expected an integer, got 1.5'],
    );
    assert.deepEqual(
      validate(S.number(), NaN).map((i) => i.message),
      ['expected a number, got NaN'],
    );
    assert.deepEqual(
      validate(S.record(S.number()), { 'a b': 'x' }).map((i) => i.path),
      ['["a b"]'],
    );
    assert.equal(validate(S.array(S.string()), Array(100).fill(1)).length, 20, 'at most 20 issues');
  });
});
