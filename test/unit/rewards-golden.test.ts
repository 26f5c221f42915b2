/**
 * The built-in rewards against a Python reference that this suite runs (trainer/tests/reference_rewards.py,
 * Search-R1's algorithms in Python), on cases the project wrote: Unicode, punctuation, articles, empty answers,
 * several golds, formats, the qa_em_format table. Any drift from Python's semantics fails here.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { formatValid } from '../../src/core/rewards/format';
import { em, f1, normalizeAnswer, subem } from '../../src/core/rewards/normalize';
import { qaEmFormatCase, SEARCH_R1_WEIGHTS, searchR1QaEmFormat } from '../../src/core/rewards/qaEmFormat';
import { openReward } from '../../src/core/rewards/scoring';
import { searchR1ExtractSolution } from '../../src/core/tags/searchr1';

const ROOT = join(__dirname, '..', '..');
const PYTHON = process.env.SAS_PYTHON ?? join(ROOT, '.venv', 'bin', 'python');
const CASES = join(ROOT, 'test', 'fixtures', 'rewards', 'cases.jsonl');

describe('rewards vs the Python reference', function () {
  this.timeout(60_000);
  let expected: Map<string, Record<string, unknown>>;
  before(async () => {
    assert.ok(existsSync(PYTHON), `the project's Python (${PYTHON}) is needed: run \`bash scripts/setup.sh\``);
    const r = await execa(PYTHON, [join(ROOT, 'trainer', 'tests', 'reference_rewards.py'), CASES]);
    expected = new Map(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => {
          const o = JSON.parse(l);
          return [o.id, o];
        }),
    );
  });
  const cases = () =>
    readFileSync(CASES, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));

  it('normalizeAnswer, em, subem and f1 equal Python’s on every prediction case', () => {
    const diffs: string[] = [];
    for (const c of cases().filter((x) => 'prediction' in x)) {
      const want = expected.get(c.id)!;
      const got = {
        normalized: normalizeAnswer(c.prediction),
        em: em(c.prediction, c.golden),
        subem: subem(c.prediction, c.golden),
        f1: f1(c.prediction, c.golden),
      };
      for (const k of ['normalized', 'em', 'subem'] as const)
        if (got[k] !== want[k])
          diffs.push(
            `${c.id} ${JSON.stringify(c.prediction)} ${k}: ours ${JSON.stringify(got[k])}, Python ${JSON.stringify(want[k])}`,
          );
      if (Math.abs(got.f1 - (want.f1 as number)) > 1e-12) diffs.push(`${c.id} f1: ours ${got.f1}, Python ${want.f1}`);
    }
    assert.deepEqual(diffs, []);
  });

  it('is_valid_sequence, extract_solution and qa_em_format (default and custom weights) equal Python’s', () => {
    const diffs: string[] = [];
    for (const c of cases().filter((x) => 'solution' in x)) {
      const want = expected.get(c.id)!;
      const got = {
        valid: formatValid(c.solution, { strict: true }).valid,
        answer: searchR1ExtractSolution(c.solution),
        em_format: searchR1QaEmFormat(c.solution, c.golden).reward,
        em_format_custom: searchR1QaEmFormat(c.solution, c.golden, {
          structureFormatScore: 0.3,
          finalFormatScore: 0.05,
          retrievalScore: 0.1,
          score: 1,
        }).reward,
      };
      for (const k of ['valid', 'answer'] as const)
        if (got[k] !== want[k])
          diffs.push(`${c.id} ${k}: ours ${JSON.stringify(got[k])}, Python ${JSON.stringify(want[k])}`);
      for (const k of ['em_format', 'em_format_custom'] as const)
        if (Math.abs(got[k] - (want[k] as number)) > 1e-12)
          diffs.push(`${c.id} ${k}: ours ${got[k]}, Python ${want[k]}`);
    }
    assert.deepEqual(diffs, []);
  });

  it('inside the sandbox (QuickJS in WebAssembly), the same functions give Python’s results on every case', async () => {
    // Reward modules run in another JavaScript engine than the tests above: its Unicode tables, regular expressions and
    // case mapping must agree with Python's too (test/fixtures/rewards/modules/golden.reward.ts compares, case by case).
    const r = await openReward(join(ROOT, 'test', 'fixtures', 'rewards', 'modules', 'golden.reward.ts'), {
      workers: 2,
    });
    try {
      const all = cases();
      const out = await r.sandbox.score(
        all.map((c) => ({
          id: c.id,
          prompt: '',
          response: c.solution ?? '',
          golden: c.golden,
          meta: { case: c, want: expected.get(c.id) },
        })),
      );
      const diffs: string[] = [];
      out.forEach((o, i) => {
        const c = all[i]!;
        if ('error' in o) return diffs.push(`${c.id}: ${o.error.message}`);
        assert.equal(Object.keys(o.parts).length, 4, `${c.id}: every measure compared`);
        for (const [k, v] of Object.entries(o.parts)) {
          if (k.endsWith('_diff') ? v > 1e-12 : v !== 1)
            diffs.push(
              `${c.id} ${k}: ${k.endsWith('_diff') ? `off by ${v}` : 'differs from Python'} (${JSON.stringify(c.prediction ?? c.solution).slice(0, 80)})`,
            );
        }
      });
      assert.deepEqual(diffs, []);
      assert.equal(out.length, all.length);
    } finally {
      await r.sandbox.close();
    }
  });

  it('the generalised format check ignores chat-template markers and accepts Llama-3 transcripts', () => {
    const chatml =
      '<|im_start|>user\nQ\n<|im_end|>\n<|im_start|>assistant\n<think>x</think>\n<answer> y </answer><|im_end|>';
    assert.equal(formatValid(chatml, { strict: true }).valid, false, 'Search-R1 counts the trailing marker as content');
    assert.equal(formatValid(chatml).valid, true);
    const llama =
      '<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<think>x</think>\n<answer> y </answer><|eot_id|>';
    assert.equal(formatValid(llama, { strict: true }).valid, false, 'theirs needs ChatML');
    assert.equal(formatValid(llama).valid, true);
  });

  it('the qa_em_format table, case by case, with Search-R1’s default weights 0.2 / 0.1 / 0', () => {
    const w = SEARCH_R1_WEIGHTS;
    assert.deepEqual([w.structureFormatScore, w.finalFormatScore, w.retrievalScore], [0.2, 0.1, 0]);
    const g = ['Paris'];
    const rw = { ...w, retrievalScore: 0.1 };
    assert.equal(qaEmFormatCase(null, g, true, true, rw), 0.30000000000000004);
    assert.equal(qaEmFormatCase(null, g, true, false), 0.2);
    assert.equal(qaEmFormatCase(null, g, false, false), 0);
    assert.equal(qaEmFormatCase('paris', g, true, false), 1);
    assert.equal(qaEmFormatCase('paris', g, false, false), 0.8);
    assert.equal(qaEmFormatCase('rome', g, true, true, rw), 0.30000000000000004);
    assert.equal(qaEmFormatCase('rome', g, true, false), 0.2);
    assert.equal(qaEmFormatCase('rome', g, false, false), 0.1);
  });

  it('the Unicode cases the issue names come out as Python’s', () => {
    assert.equal(normalizeAnswer('théa'), 'théa', 'no article split inside a word');
    assert.equal(normalizeAnswer('café a'), 'café');
    assert.equal(normalizeAnswer('naïve an'), 'naïve');
    assert.equal(normalizeAnswer('“Quoted” — ¿qué?'), '“quoted” — ¿qué', 'only ASCII punctuation is removed');
  });
});
