/**
 * Issue 46's audit instruments, each finding a fault planted in a recorded run: a real 4-step tiny run (the real CLI
 * trains it: test/support/tinyRun.ts), copied, made healthy where a tiny random policy is not (rewards [1, 0] per
 * group so every group has a signal, and constant step times: the machine's load is not under test), then changed
 * the way the fault would change it. Run health (src/core/audit/health.ts), group diagnostics (groupChecks.ts) and
 * search behaviour (search.ts), found by `audit` (in-process and as the real CLI) under the names
 * docs/instruments.md documents, and by the dashboard's run audit (RunAudit). Plus the rules' edges, on records.
 */
import assert from 'node:assert/strict';
import { cpSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { audit } from '../../src/cli/audit';
import { exportJsonl } from '../../src/cli/exportJsonl';
import {
  type AuditSummary,
  auditMetricRows,
  checkGroups,
  copiesQuestion,
  emptyHealthStep,
  emptySearchStep,
  groupMember,
  groupViews,
  healthAdvisories,
  searchFacts,
  thinkDriftSteps,
  thinkEntropy,
} from '../../src/core/audit';
import { RunAudit } from '../../src/core/audit/run';
import type { Rollout } from '../../src/core/run/format';
import { parseResponse } from '../../src/core/tags/trajectory';
import { scratchDir } from '../support/scratch';
import { sharedVariedRun } from '../support/tinyRun';

const ROOT = join(__dirname, '..', '..');

type Json = Record<string, unknown>;
interface AuditJson {
  alarms: Record<string, { count: number; steps: number[]; rollouts: number }>;
  advisories: { name: string; step: number; message: string }[];
  rollouts: { id: string; step: number; alarms: string[] }[];
  summary: AuditSummary;
}

/**
 * A copy of the run (without its checkpoints) with its rollouts as JSONL — the layout `train.record.format: "jsonl"`
 * writes, exported from the token store the run recorded — so that faults can be planted line by line.
 */
async function asJsonl(run: string): Promise<string> {
  const dir = join(scratchDir('sas-jsonl-'), 'run');
  cpSync(run, dir, { recursive: true, filter: (src) => !src.includes('checkpoints') });
  const rollouts = join(dir, 'rollouts');
  for (const n of readdirSync(rollouts))
    if (statSync(join(rollouts, n)).isDirectory()) rmSync(join(rollouts, n), { recursive: true });
  let err = '';
  assert.equal(await exportJsonl(join(run, 'rollouts'), rollouts, { out: () => {}, err: (s) => (err += s) }), 0, err);
  return dir;
}

/** A copy of the run (without its checkpoints) with `plant` applied to its records and metrics rows. */
function planted(
  run: string,
  plant: { records?: (rs: Rollout[], file: string) => Rollout[]; metrics?: (rows: Json[]) => Json[] },
): string {
  const dir = join(scratchDir('sas-plant-'), 'run');
  cpSync(run, dir, { recursive: true, filter: (src) => !src.includes('checkpoints') });
  const read = (f: string) =>
    readFileSync(f, 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  const write = (f: string, rows: unknown[]) => writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  for (const name of readdirSync(join(dir, 'rollouts'))) {
    if (!name.endsWith('.jsonl')) continue; // (a step's .recording.json beside it)
    const f = join(dir, 'rollouts', name);
    // the planted faults rewrite responses: the spans recorded for the old text would no longer tile them
    if (plant.records)
      write(
        f,
        plant.records(
          read(f).map(({ spans: _spans, ...r }: Rollout) => r as Rollout),
          name,
        ),
      );
  }
  if (plant.metrics) write(join(dir, 'metrics.jsonl'), plant.metrics(read(join(dir, 'metrics.jsonl'))));
  return dir;
}

const train = (r: Rollout) => r.split === 'train';
/** Broadcasts a sequence advantage over a record's advantage positions (as GRPO does). */
function setAdvantage(r: Rollout, a: number): void {
  const t = r.tokens!;
  if (t.advantage) t.advantage = t.advantage.map((x) => (x === null ? null : a));
}

/** The tiny run made healthy: each training group's rewards [1, 0] with EM [1, 0] and advantages ±1; constant timings. */
function healthy(rs: Rollout[]): Rollout[] {
  for (const r of rs.filter(train)) {
    const first = (r.sample ?? 0) === 0;
    r.reward = first ? 1 : 0;
    r.reward_parts = { em: first ? 1 : 0 };
    setAdvantage(r, first ? 1 : -1);
  }
  return rs;
}
const steady = (rows: Json[]) =>
  rows.map((m) =>
    m.step === 0
      ? m
      : { ...m, 'timing_s/step': 10, 'timing_s/reward': 1, 'env/retrieve_ms/p99': 5, 'env/retrieve_timeouts': 0 },
  );

async function auditJson(path: string): Promise<{ code: number; o: AuditJson; text: string }> {
  let out = '';
  let err = '';
  const code = await audit(path, { json: true, out: (s) => (out += s), err: (s) => (err += s) });
  let text = '';
  await audit(path, { json: false, out: (s) => (text += s), err: () => {} });
  assert.equal(err, '', err);
  return { code, o: JSON.parse(out), text };
}

/** The steps each named alarm fired on (from the top-level index, which must agree with summary.alarm_steps). */
function firedAt(o: AuditJson, names: string[]): Record<string, number[]> {
  for (const [k, v] of Object.entries(o.alarms)) assert.deepEqual(v.steps, o.summary.alarm_steps[k as never], k);
  return Object.fromEntries(names.map((n) => [n, o.alarms[n]?.steps ?? []]));
}

describe('issue 46 instruments on a planted run', function () {
  this.timeout(900_000);
  let run: string;
  let base: string;
  before(async () => {
    run = await sharedVariedRun(scratchDir('sas-inst2-'));
    base = planted(await asJsonl(run), { records: healthy, metrics: steady });
  });

  it('the run made healthy audits clean (exit 0, no alarm); the env server reported its own latencies into the metrics', async () => {
    const metrics = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Json);
    const step1 = metrics.find((m) => m.step === 1)!;
    assert.equal(typeof step1['env/reward_ms/p99'], 'number', 'Server-Timing of /reward, as the trainer recorded it');
    assert.equal(step1['env/reward_timeouts'], 0);
    assert.ok((step1['env/reward_wait_ms/p99'] as number) >= (step1['env/reward_ms/p50'] as number));
    const { code, o } = await auditJson(base);
    assert.deepEqual(o.alarms, {}, JSON.stringify(o.advisories));
    assert.equal(code, 0);
    assert.equal(o.summary.steps.length, 5, 'steps 0 (held-out only) to 4');
  });

  it('run health: step-stall, reward-slow, retriever-slow, retriever-timeouts, truncation-high, length-collapse, non-finite — at the planted steps, in audit --json, the exit code and the dashboard series', async () => {
    const dir = planted(base, {
      metrics: (rows) =>
        rows.map((m) => {
          if (m.step === 2) return { ...m, 'env/retrieve_timeouts': 3 };
          if (m.step === 3) return { ...m, 'actor/grad_norm': null };
          if (m.step === 4) return { ...m, 'timing_s/step': 100, 'timing_s/reward': 30, 'env/retrieve_ms/p99': 900 };
          return m;
        }),
      records: (rs, file) => {
        for (const r of rs.filter(train)) {
          if (file === 'step-000002.jsonl' && r === rs.find(train))
            r.meta = { ...r.meta, nonfinite: { logprob: [r.tokens!.role.indexOf('generated')] } };
          if (file === 'step-000003.jsonl' && r.sample === 1) r.finish = 'length';
          if (file === 'step-000004.jsonl') {
            // every response cut to its first 8 tokens: the lengths collapse
            const t = r.tokens as unknown as Record<string, unknown[]>;
            const P = r.tokens!.role.indexOf('generated');
            for (const k of Object.keys(t)) t[k] = t[k]!.slice(0, P + 8);
            r.response = (t.text as string[]).slice(P).join('');
          }
        }
        return rs;
      },
    });
    const { code, o, text } = await auditJson(dir);
    assert.equal(code, 1);
    assert.deepEqual(
      firedAt(o, [
        'step-stall',
        'reward-slow',
        'retriever-slow',
        'retriever-timeouts',
        'truncation-high',
        'length-collapse',
        'non-finite',
      ]),
      {
        'step-stall': [4],
        'reward-slow': [4],
        'retriever-slow': [4],
        'retriever-timeouts': [2],
        'truncation-high': [3],
        'length-collapse': [4],
        'non-finite': [2, 3],
      },
    );
    assert.equal(o.summary.alarms['step-stall'], 1, 'a run-level alarm counts the steps it fired on');
    assert.deepEqual(
      o.rollouts.filter((r) => r.alarms.includes('non-finite')).map((r) => r.step),
      [2],
      'the record with a NaN carries it',
    );
    assert.match(o.advisories.find((a) => a.name === 'step-stall')!.message, /step 4 took 100\.0 s, 10\.0× the median/);
    assert.match(o.advisories.find((a) => a.name === 'non-finite' && a.step === 3)!.message, /actor\/grad_norm/);
    assert.match(text, /step-stall\s+step 4 took/);
    // the dashboard's run audit: the same alarms at the same steps, as audit/alarm/… metrics
    const rows = auditMetricRows((await new RunAudit(dir).update())!);
    const at = (name: string) => rows.filter((r) => (r[`audit/alarm/${name}`] ?? 0) > 0).map((r) => r.step);
    assert.deepEqual(at('step-stall'), [4]);
    assert.deepEqual(at('retriever-timeouts'), [2]);
    assert.deepEqual(at('length-collapse'), [4]);
    assert.deepEqual(at('non-finite'), [2, 3]);
    // the real CLI: the same names, exit 1
    const cli = await execa(
      process.execPath,
      ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'audit', dir, '--json'],
      { reject: false },
    );
    assert.equal(cli.exitCode, 1, cli.stderr);
    assert.deepEqual(JSON.parse(cli.stdout).alarms['truncation-high'].steps, [3]);
  });

  it('group diagnostics: group-split, group-size, phantom-advantage, kl-only-gradient, stale-group, zero-std-high — on the planted groups', async () => {
    const dir = planted(base, {
      records: (rs, file) => {
        const t = rs.filter(train);
        const g = (k: number) => t.filter((r) => r.group === t[0]!.group!.toString().replace(/:\d+$/, `:${k}`));
        if (file === 'step-000001.jsonl') {
          // both groups flat
          for (const r of t) {
            Object.assign(r, { reward: 0.5, reward_parts: { em: 0 } });
            setAdvantage(r, 0);
          }
        }
        if (file === 'step-000002.jsonl') g(0).find((r) => r.sample === 1)!.group = 'train:2:9'; // one prompt under two ids
        if (file === 'step-000003.jsonl') {
          rs.splice(rs.indexOf(g(1).find((r) => r.sample === 1)!), 1); // a group of 1 where rollout.n is 2
          for (const r of g(0)) r.meta = { ...r.meta, weight_version: r.sample === 0 ? 2 : 0 }; // a sample from weights 2 updates old
        }
        if (file === 'step-000004.jsonl') {
          for (const r of g(0))
            Object.assign(r, {
              reward: r.sample === 0 ? 0.2 : 0,
              reward_parts: { em: 0, format: r.sample === 0 ? 0.2 : 0 },
            }); // all wrong, shaped
          for (const r of g(1)) {
            Object.assign(r, { reward: 1, reward_parts: { em: 1 } });
            setAdvantage(r, 0);
            const tk = r.tokens!;
            tk.ref_logprob = tk.logprob!.map((x) => (x === null ? null : x - 0.1)); // the policy has moved from the reference
          }
        }
        return rs;
      },
    });
    const { code, o } = await auditJson(dir);
    assert.equal(code, 1);
    assert.deepEqual(
      firedAt(o, [
        'zero-std-high',
        'group-split',
        'group-size',
        'phantom-advantage',
        'kl-only-gradient',
        'stale-group',
      ]),
      {
        'zero-std-high': [1, 4],
        'group-split': [2],
        'group-size': [2, 3],
        'phantom-advantage': [4],
        'kl-only-gradient': [4],
        'stale-group': [3],
      },
    );
    const marked = (name: string) =>
      o.rollouts.filter((r) => r.alarms.includes(name)).map((r) => r.id.split(':').slice(2).join(':'));
    assert.deepEqual(marked('group-split').sort(), ['2:0:0', '2:0:1']);
    assert.deepEqual(marked('phantom-advantage').sort(), ['4:0:0', '4:0:1']);
    assert.deepEqual(marked('stale-group').sort(), ['3:0:0', '3:0:1']);
    assert.ok(marked('kl-only-gradient').includes('4:1:0'));
    assert.equal(o.alarms['group-split']!.rollouts, 2);
  });

  it('search behaviour: query-copies-question, search-after-found, think-drift', async () => {
    const dir = planted(base, {
      records: (rs, file) => {
        const step = Number(/(\d+)\.jsonl$/.exec(file)![1]);
        for (const r of rs.filter(train)) {
          const think =
            step < 4 ? 'i will look up the entity in the question first' : '#### $$$ 1234 %%% @@@ ### 99 !!';
          let rest = '<answer> x </answer>';
          if (step === 2 && r.sample === 0)
            rest = `<search> ${r.question} </search>\n\n<information>Doc 1(Title: a) b</information>\n\n<answer> x </answer>`;
          if (step === 3 && r.sample === 0)
            rest = `<search> q </search>\n\n<information>Doc 1(Title: a) it is ${r.golden![0]}</information>\n\n<search> again </search>\n\n<information>Doc 1(Title: c) d</information>\n\n<answer> x </answer>`;
          r.response = `<think>${think}</think>\n${rest}`;
        }
        return rs;
      },
    });
    const { code, o } = await auditJson(dir);
    assert.equal(code, 1);
    assert.deepEqual(firedAt(o, ['query-copies-question', 'search-after-found', 'think-drift']), {
      'query-copies-question': [2],
      'search-after-found': [3],
      'think-drift': [4],
    });
    const step3 = o.summary.steps.find((s) => s.step === 3)!;
    assert.equal(step3.search.answerRetrieved, 2, "the answer-in-retrieval count of step 3 (each group's sample 0)");
    assert.match(o.advisories.find((a) => a.name === 'think-drift')!.message, /non-word share rose/);
  });
});

describe('issue 46 rules at their edges', () => {
  const rec = (over: Partial<Rollout> = {}): Rollout => ({
    v: 2,
    id: 'r',
    step: 5,
    split: 'train',
    group: 'g',
    sample: 0,
    prompt: 'Q: who?\n',
    response: '',
    reward: 0,
    ...over,
  });

  it('query-copies-question: most of the question, with at least four words', () => {
    assert.ok(copiesQuestion('where was the founder of Acme born', 'Where was the founder of Acme born?'));
    assert.ok(!copiesQuestion('Acme founder', 'Where was the founder of Acme born?'));
    assert.ok(!copiesQuestion('Paris', 'Paris?'), 'a one-word question is not copied by its answer');
  });

  it('search-after-found counts searches after the observation that held the answer, in both dialects', () => {
    const p = parseResponse(
      '<search> a </search>\n\n<information>Doc 1(Title: t) Koben lies in Paris</information>\n\n<search> b </search>\n\n<information>x</information>\n\n<answer> Paris </answer>',
    );
    const f = searchFacts(p, { question: 'where is Koben?', golden: ['Paris'] });
    assert.equal(f.searchAfterFound, 1);
    assert.equal(f.answerRetrieved, true);
    assert.equal(searchFacts(p, { golden: ['Lyon'] }).searchAfterFound, null);
  });

  it('think entropy reads the recorded entropies of the tokens inside <think>', () => {
    const p = parseResponse('<think>ab</think>c');
    const text = ['Q', '<think>', 'a', 'b', '</think>', 'c'];
    const e = thinkEntropy(p, 1, { text, entropy: [null, 9, 1, 3, 9, 9] });
    assert.deepEqual(e, { sum: 4, n: 2 });
  });

  it('think-drift needs EM to hold, and a baseline of three steps', () => {
    const step = (s: number, nonword: number, em: number) => ({
      step: s,
      search: { ...emptySearchStep(), rollouts: 1, thinkChars: 100, thinkNonword: nonword, emN: 1, emSum: em },
    });
    assert.deepEqual(
      thinkDriftSteps([step(1, 0, 0.5), step(2, 0, 0.5), step(3, 0, 0.5), step(4, 40, 0.5)]).map((d) => d.step),
      [4],
    );
    assert.deepEqual(
      thinkDriftSteps([step(1, 0, 0.5), step(2, 0, 0.5), step(3, 0, 0.5), step(4, 40, 0.1)]),
      [],
      'EM fell: not the lagging indicator',
    );
    assert.deepEqual(thinkDriftSteps([step(1, 0, 0.5), step(2, 0, 0.5), step(3, 40, 0.5)]), []);
  });

  it('group-split: a prompt drawn twice into two full groups is no split when rollout.n is known; a split is', () => {
    const m = (group: string, sample: number, prompt = 'same') => groupMember(rec({ group, sample, prompt }), 0, 0)!;
    const twice = [m('a', 0), m('a', 1), m('b', 0), m('b', 1)];
    assert.deepEqual(
      checkGroups(twice, { n: 2 }).findings.flatMap((f) => f.alarms),
      [],
    );
    assert.deepEqual(
      checkGroups(twice, {}).findings.flatMap((f) => f.alarms),
      ['group-split', 'group-split'],
      'without rollout.n it cannot tell',
    );
    assert.deepEqual(
      checkGroups([m('a', 0), m('b', 0), m('c', 0, 'other'), m('c', 1, 'other')], { n: 2 }).findings.map(
        (f) => f.alarms,
      ),
      [['group-split', 'group-size'], ['group-split', 'group-size'], []],
    );
  });

  it('stale-group reads meta.weight_versions (one per turn) and meta.weight_version; held-out rollouts are not grouped', () => {
    const m = (sample: number, meta: Record<string, unknown>) => groupMember(rec({ sample, meta }), sample, 0)!;
    assert.deepEqual(
      checkGroups([m(0, { weight_versions: [4] }), m(1, { weight_versions: ['2', '4'] })]).findings[0]!.alarms,
      ['stale-group'],
    );
    assert.deepEqual(checkGroups([m(0, { weight_version: 4 }), m(1, { weight_version: 3 })]).findings[0]!.alarms, []);
    assert.equal(groupMember(rec({ split: 'val' }), 0, 0), undefined);
  });

  it('the GRPO group view shows each group with the diagnostics that fire on it (the same checks)', () => {
    const located = (r: Rollout, line: number) => ({ record: r, file: 'f.jsonl', line });
    const views = groupViews(
      [
        rec({ id: 'a', group: 'x', sample: 0 }),
        rec({ id: 'b', group: 'y', sample: 0 }),
        rec({ id: 'c', group: 'z', sample: 0, prompt: 'Q: other?\n', golden: ['p'], reward: 0.3 }),
        rec({ id: 'd', group: 'z', sample: 1, prompt: 'Q: other?\n', golden: ['p'], reward: 0 }),
      ].map(located),
      {},
      { n: 2 },
    );
    assert.deepEqual(
      views.map((v) => [v.group, v.alarms]),
      [
        ['x', ['group-split', 'group-size']],
        ['y', ['group-split', 'group-size']],
        ['z', ['phantom-advantage']],
      ],
    );
  });

  it('run health from the metrics alone (a run recorded without rollouts): floors keep noise quiet', () => {
    const m = (step: number, t: number, p99: number) => ({
      step,
      'timing_s/step': t,
      'env/retrieve_ms/p99': p99,
      'response_length/clip_ratio': step === 6 ? 0.3 : 0,
    });
    const adv = healthAdvisories(
      [m(1, 0.1, 1), m(2, 0.1, 1), m(3, 0.1, 1), m(4, 0.5, 9), m(5, 10, 200), m(6, 0.1, 1)],
      [],
    );
    assert.deepEqual(
      adv.map((a) => `${a.name}@${a.step}`),
      ['retriever-slow@5', 'step-stall@5', 'truncation-high@6'],
      'step 4 is 5× but under a second, and 9 ms is under the latency floor',
    );
    assert.deepEqual(
      healthAdvisories([], [{ step: 1, health: { ...emptyHealthStep(), rollouts: 4, truncated: 1 } }]).map(
        (a) => a.name,
      ),
      ['truncation-high'],
    );
  });
});
