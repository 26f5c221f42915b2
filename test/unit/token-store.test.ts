// The token store (src/core/store/tokenStore.ts; docs/run-format.md#the-token-store) and every reader on it: records
// → Parquet columns → records (ids, roles, masks to the bit; numbers within float32), the Python writer's store read
// here and this writer's read by Python, a run of store steps as one sequence (order, follow, partial steps
// invisible), the inspector engine, the streaming audit against the whole-run one, readSource, the dashboard's
// RunAudit, and `export jsonl`.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { rng } from '../../bench/util'; // mulberry32: the same inputs in every run
import { Auditor, AuditStream, auditRollout } from '../../src/core/audit';
import { RunAudit } from '../../src/core/audit/run';
import { detectSource, readSource } from '../../src/core/importers';
import { type EngineMessage, InspectorEngine } from '../../src/core/inspect/engine';
import { RolloutTable } from '../../src/core/inspect/table';
import { findPython, pythonCandidates } from '../../src/core/python';
import { tokenColumnsOf } from '../../src/core/run/columns';
import type { Rollout } from '../../src/core/run/format';
import { RolloutStore, readPartRow, rolloutFiles, streamRollouts } from '../../src/core/store/rollouts';
import { StoreStep, shortFloat32, storeSteps, writeStoreStep } from '../../src/core/store/tokenStore';
import { scratchDir } from '../support/scratch';

const ROOT = resolve(__dirname, '../..');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

/** Records of one step, with token arrays (numbers rounded to 6 decimals, as the trainer's JSON has them). */
function records(step: number, n = 12, seed = step): Rollout[] {
  const r = rng(seed);
  const out: Rollout[] = [];
  for (let i = 0; i < n; i++) {
    const P = 3 + Math.floor(r() * 5);
    const roles = [
      ...Array(P).fill('prompt'),
      ...Array.from({ length: 5 + Math.floor(r() * 20) }, () =>
        r() < 0.6 ? 'generated' : r() < 0.9 ? 'retrieved' : 'feedback',
      ),
    ];
    const ids = roles.map(() => Math.floor(r() * 151_936));
    const gen = roles.map((x) => x === 'generated');
    const num = () => Math.round(-r() * 5e6) / 1e6;
    const rec: Rollout = {
      v: 2,
      id: `run:train:${step}:${Math.floor(i / 4)}:${i % 4}`,
      step,
      group: `train:${step}:${Math.floor(i / 4)}`,
      sample: i % 4,
      split: 'train',
      question: `question ${i} — ünïcode`,
      golden: [`gold ${i}`],
      prompt: 'Question: q',
      response:
        i % 3
          ? `<search> q${i} </search>\n\n<information>Doc 1(Title: T) NEEDLE${step}x${i}</information>\n\n<answer> gold ${i} </answer>`
          : `<answer> gold ${i} or other </answer>`,
      reward: i % 2,
      reward_parts: { em: i % 2 },
      finish: 'answer',
      turns: 2,
      searches: i % 3 ? 1 : 0,
      tokens: {
        text: ids.map((x) => `w${x}`),
        ids,
        role: roles as never,
        loss_mask: gen.map((g) => (g ? 1 : 0)),
        rollout_logprob: gen.map((g) => (g ? num() : null)),
        logprob: gen.map((g) => (g ? num() : null)),
        advantage: gen.map((g) => (g ? 0.5 : null)),
      },
      meta: { example_id: String(i) },
    };
    if (i === 5) rec.tokens!.loss_mask[P] = (1 - rec.tokens!.loss_mask[P]!) as 0 | 1; // a planted leak
    if (i === 6) rec.meta!.engine_loss_mask = rec.tokens!.loss_mask.map((m, k) => (k === P + 1 ? 1 - m : m));
    if (i === 7) rec.group = 7;
    if (i === 8) delete rec.tokens;
    out.push(rec);
  }
  return out;
}

/** Equal as JSON values, numbers compared as float32 (the store's precision). */
function sameAsFloat32(a: unknown, b: unknown, path = ''): void {
  if (typeof a === 'number' && typeof b === 'number') {
    assert.equal(Math.fround(a), Math.fround(b), `${path}: ${a} vs ${b}`);
    return;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    assert.equal(a.length, b.length, `${path}: length`);
    a.forEach((x, i) => sameAsFloat32(x, b[i], `${path}[${i}]`));
    return;
  }
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), `${path}: keys`);
    for (const k of Object.keys(a))
      sameAsFloat32((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`);
    return;
  }
  assert.deepEqual(a, b, path);
}

const plain = (x: unknown) => JSON.parse(JSON.stringify(x)) as unknown;

describe('token store', function () {
  this.timeout(120_000);

  it('round-trips records: ids, roles and masks to the bit, numbers within float32, every other field as it was', async () => {
    const dir = scratchDir('sas-tstore-');
    const recs = records(3);
    const stepDir = await writeStoreStep(dir, 'step-000003', recs, { step: 3 });
    assert.deepEqual(readdirSync(stepDir).sort(), ['rollouts.parquet', 'tokens.parquet', 'vocab.parquet']);
    const step = await StoreStep.open(stepDir);
    assert.equal(step.count, recs.length);
    assert.equal(step.info.step, 3);
    const rows = await step.rows(0, step.count);
    rows.forEach((row, i) => {
      assert.deepEqual(row.errors, []);
      assert.equal(row.line, i + 1);
      const got = plain(row.record) as Rollout;
      const want = recs[i]!;
      if (want.tokens) {
        assert.deepEqual(got.tokens!.ids, want.tokens.ids);
        assert.deepEqual(got.tokens!.role, want.tokens.role);
        assert.deepEqual(got.tokens!.loss_mask, want.tokens.loss_mask);
      }
      sameAsFloat32(got, want, want.id);
    });
    assert.equal((rows[7]!.record as Rollout).group, 7, 'an integer group stays an integer');
    assert.equal(rows[8]!.record!.tokens, undefined, 'a record without tokens');
    // the audit's columns only: the others are not read, and say so when touched
    const audit = await step.rows(0, 2, 'audit');
    assert.deepEqual(audit[0]!.record!.tokens!.loss_mask, recs[0]!.tokens!.loss_mask);
    assert.throws(() => audit[0]!.record!.tokens!.ids, /tokens\.ids was not read/);
    // the audit's checks over the typed columns give what they give over the arrays (a JSON copy has no columns)
    for (const level of ['token', 'sequence'] as const) {
      for (const row of await step.rows(0, step.count, 'audit')) {
        const copy = JSON.parse(
          JSON.stringify({
            ...row.record,
            tokens: {
              role: row.record!.tokens?.role,
              loss_mask: row.record!.tokens?.loss_mask,
              logprob: row.record!.tokens?.logprob,
              rollout_logprob: row.record!.tokens?.rollout_logprob,
            },
          }),
        ) as Rollout;
        if (!row.record!.tokens) delete copy.tokens;
        const o = { isLevel: level, isCap: 1.5, ratioLow: 0.9, ratioHigh: 1.1 };
        const viaColumns = plain(auditRollout(row.record!, o));
        assert.ok(tokenColumnsOf(row.record!.tokens) || !row.record!.tokens);
        assert.equal(tokenColumnsOf(copy.tokens), undefined);
        assert.deepEqual(viaColumns, plain(auditRollout(copy, o)), row.record!.id);
      }
    }
    // exported as JSONL: the shortest decimal of each float32 gives the 6-decimal numbers back exactly
    assert.equal(shortFloat32(Math.fround(-0.123456)), -0.123456);
  });

  it('reads what the Python writer wrote, and Python reads what this writer wrote', async function () {
    const found = await findPython(pythonCandidates([], ROOT));
    if (!found.found) this.skip();
    const dir = scratchDir('sas-tstore-py-');
    const recs = records(5, 16);
    writeFileSync(join(dir, 'recs.json'), JSON.stringify(recs));
    await writeStoreStep(join(dir, 'ts'), 'step-000005', recs);
    const py = [
      'import json, sys',
      'from search_agent_trainer import token_store as ts',
      'recs = json.load(open(sys.argv[1]))',
      'ts.records_to_step(sys.argv[2], "step-000005", recs)',
      'print(json.dumps(ts.read_step(sys.argv[3] + "/step-000005")))',
    ].join('\n');
    const p = await execa(
      found.found.executable,
      ['-c', py, join(dir, 'recs.json'), join(dir, 'py'), join(dir, 'ts')],
      { env: { PYTHONPATH: join(ROOT, 'trainer') } },
    );
    const fromPython = JSON.parse(p.stdout) as Rollout[];
    fromPython.forEach((r, i) => sameAsFloat32(r, recs[i], `python read ${i}`));
    const step = await StoreStep.open(join(dir, 'py', 'step-000005'));
    (await step.rows(0, step.count)).forEach((row, i) => sameAsFloat32(plain(row.record), recs[i], `ts read ${i}`));
  });

  it('a run of store steps (and a JSONL step) is one sequence in step order; new steps are followed; partial ones never show', async () => {
    const run = scratchDir('sas-tstore-run-');
    const rollouts = join(run, 'rollouts');
    mkdirSync(rollouts, { recursive: true });
    writeFileSync(
      join(run, 'run.json'),
      JSON.stringify({
        v: 1,
        id: 'run',
        status: 'running',
        created: 'x',
        config: { rollout: { dialect: 'searchr1' } },
      }),
    );
    await writeStoreStep(rollouts, 'step-000002', records(2));
    await writeStoreStep(rollouts, 'val-step-000000', records(0, 3));
    writeFileSync(
      join(rollouts, 'step-000001.jsonl'),
      `${records(1, 4)
        .map((r) => JSON.stringify(r))
        .join('\n')}\n`,
    );
    mkdirSync(join(rollouts, '.step-000003.tmp-1-abcdef'));
    writeFileSync(join(rollouts, '.step-000003.tmp-1-abcdef', 'rollouts.parquet'), 'PAR1 half');
    const parts = (await rolloutFiles(run)).map((f) => f.slice(rollouts.length + 1));
    assert.deepEqual(parts, ['val-step-000000', 'step-000001.jsonl', 'step-000002']);
    assert.deepEqual(
      (await storeSteps(rollouts)).map((d) => d.slice(rollouts.length + 1)),
      ['val-step-000000', 'step-000002'],
    );
    const store = await RolloutStore.open(run, { follow: true });
    assert.equal(store.count, 3 + 4 + 12);
    const rows = await store.rows(5, 9);
    assert.deepEqual(
      rows.map((r) => [r.file.slice(rollouts.length + 1), r.line]),
      [
        ['step-000001.jsonl', 3],
        ['step-000001.jsonl', 4],
        ['step-000002', 1],
        ['step-000002', 2],
      ],
    );
    assert.equal(rows[2]!.record!.tokens!.text[0], records(2)[0]!.tokens!.text[0]);
    assert.equal((await readPartRow(join(rollouts, 'step-000002'), 3))!.record!.id, records(2)[2]!.id);
    // the table's facts and its text search over a store
    const table = new RolloutTable();
    await table.extend(store);
    assert.deepEqual([...table.query({ filter: 'mask.leaks > 0 && step == 2' })!], [7 + 5, 7 + 6]);
    assert.deepEqual([...(await table.search(store, 'needle2x4'))!], [7 + 4]);
    // a committed step appears; a removed one (a resume that went back) resets the sequence
    await writeStoreStep(rollouts, 'step-000003', records(3, 2));
    assert.deepEqual(await store.update(), { added: 2, reset: false });
    renameSync(join(rollouts, 'step-000003'), join(rollouts, '.gone'));
    const r = await store.update();
    assert.equal(r.reset, true);
    assert.equal(store.count, 19);
    await store.close();
  });

  it('the inspector engine shows a store step: first rows, the index, a typed filter, a whole row for the replay', async () => {
    const dir = scratchDir('sas-tstore-eng-');
    const stepDir = await writeStoreStep(dir, 'step-000004', records(4, 40));
    const msgs: EngineMessage[] = [];
    const engine = new InspectorEngine((m) => msgs.push(m));
    await engine.open(join(stepDir, 'rollouts.parquet').replace(/\/rollouts\.parquet$/, ''), false);
    const preview = msgs.find((m) => m.t === 'preview');
    assert.ok(preview?.t === 'preview' && preview.rows.length === 40 && preview.rows[5]!.leaks === 1);
    await engine.setQuery(1, { filter: 'alarm == "answer-enumeration"', search: '' });
    const status = [...msgs].reverse().find((m) => m.t === 'status');
    assert.ok(status?.t === 'status' && status.status.view === 14 && status.status.total === 40);
    await engine.handle({ t: 'row', req: 1, index: 3 });
    const row = msgs.find((m) => m.t === 'row');
    assert.ok(row?.t === 'row' && row.row?.record?.tokens?.text.length === records(4, 40)[3]!.tokens!.ids.length);
    await engine.close();
  });

  it('audit: the streamed audit equals the whole-run one; readSource, the CLI and the dashboard read a store', async () => {
    const run = scratchDir('sas-tstore-audit-');
    const rollouts = join(run, 'rollouts');
    const all: Rollout[] = [];
    // searches collapse at step 3: search-collapse marks its rollouts that did not search
    for (const step of [1, 2, 3]) {
      const recs = records(step, 12).map((r) => (step === 3 ? { ...r, searches: 0 } : r));
      await writeStoreStep(rollouts, `step-00000${step}`, recs);
      all.push(...recs);
    }
    writeFileSync(
      join(run, 'run.json'),
      JSON.stringify({ v: 1, id: 'run', status: 'finished', created: 'x', config: {} }),
    );
    assert.equal(await detectSource(run), 'rollouts');
    assert.equal(await detectSource(join(rollouts, 'step-000002')), 'rollouts');
    assert.equal(await detectSource(join(rollouts, 'step-000002', 'rollouts.parquet')), 'rollouts');
    const whole = new Auditor();
    for await (const item of readSource(run)) whole.add(item.record!);
    const want = whole.finish();
    const seen: string[] = [];
    const stream = new AuditStream({}, (a) => seen.push(a.id));
    for await (const item of readSource(run, undefined, {}, 'audit')) stream.add(item.record!);
    const got = stream.finish();
    assert.deepEqual(
      seen,
      all.map((r) => r.id),
    );
    assert.deepEqual(plain(got), plain(want));
    assert.ok(got.search_collapse_steps.includes(3) && (got.alarms['search-collapse'] ?? 0) > 0);
    // the CLI (streamed --json), the same findings as on the JSONL export
    const exported = join(run, 'all.jsonl');
    const e = await cli('export', 'jsonl', run, '--out', exported);
    assert.equal(e.exitCode, 0, e.stderr);
    const lines = readFileSync(exported, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Rollout);
    assert.equal(lines.length, all.length);
    lines.forEach(
      (l, i) => assert.deepEqual(l, plain(all[i])),
      'export jsonl gives the records back exactly (6-decimal numbers)',
    );
    const [a, b] = await Promise.all([cli('audit', run, '--json'), cli('audit', exported, '--json')]);
    assert.equal(a.exitCode, 1);
    const ja = JSON.parse(a.stdout);
    const jb = JSON.parse(b.stdout);
    // the same findings; numbers as float32 against the JSON's 6 decimals
    const close = (x: unknown, y: unknown): void => {
      if (typeof x === 'number' && typeof y === 'number')
        assert.ok(Math.abs(x - y) <= 1e-6 * Math.max(1, Math.abs(y)) * 8, `${x} vs ${y}`);
      else if (x && y && typeof x === 'object')
        for (const k of Object.keys(y as object))
          close((x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k]);
      else assert.deepEqual(x, y);
    };
    close(ja.rollouts, jb.rollouts);
    close(ja.summary, jb.summary);
    assert.deepEqual(
      ja.rollouts.map((r: { leaks: number[]; alarms: string[] }) => [r.leaks, r.alarms]),
      jb.rollouts.map((r: { leaks: number[]; alarms: string[] }) => [r.leaks, r.alarms]),
    );
    // the dashboard's per-step audit
    const series = await new RunAudit(run).update();
    assert.deepEqual(plain(series), plain(want.steps));
    // kept in rollouts/.audit-cache.json: a dashboard opened again charts it without auditing (a step removed drops out)
    assert.ok(existsSync(join(rollouts, '.audit-cache.json')));
    const again = new RunAudit(run);
    assert.deepEqual(plain(await again.update()), plain(want.steps));
    assert.equal(await again.update(), undefined, 'nothing changed since');
    renameSync(join(rollouts, 'step-000003'), join(rollouts, '.step-000003.gone'));
    assert.deepEqual(
      (await again.update())!.map((x) => x.step),
      [1, 2],
    );
    renameSync(join(rollouts, '.step-000003.gone'), join(rollouts, 'step-000003'));
    // per step export: the layout train.record.format "jsonl" writes
    const e2 = await cli('export', 'jsonl', join(rollouts, 'step-000002'), '--out', join(run, 'out'));
    assert.equal(e2.exitCode, 0, e2.stderr);
    assert.deepEqual(readdirSync(join(run, 'out')), ['step-000002.jsonl']);
    let n = 0;
    for await (const row of streamRollouts(join(run, 'out'))) n += row.record ? 1 : 0;
    assert.equal(n, 12);
    // a run that recorded nothing: no empty file passing for an export, exit 2 as audit's "nothing to audit"
    const empty = join(run, 'empty-run');
    mkdirSync(join(empty, 'rollouts'), { recursive: true });
    const e3 = await cli('export', 'jsonl', empty, '--out', join(run, 'empty.jsonl'));
    assert.equal(e3.exitCode, 2, e3.stderr);
    assert.match(e3.stderr, /empty-run: no recorded rollouts to export/);
    assert.ok(!existsSync(join(run, 'empty.jsonl')));
  });
});
