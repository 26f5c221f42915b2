/**
 * `search-agent-studio audit` end to end (the real CLI in a child process): exit 0 clean, 1 flagged, 2 bad input;
 * the `--json` shape; the importance-sampling preview at `--is-level` / `--is-cap`; drift with a tokenizer given by
 * `--tokenizer`; and a real run directory from a short run of the trainer (tiny policy, GRPO, masking on) audited clean.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { IMPORTANCE_DEFAULTS } from '../../src/core/audit';
import type { Rollout, TokenRole } from '../../src/core/run/format';
import { loadTokenizerCodec } from '../../src/core/tokens/tokenizer';
import { trainTinyWithCli } from '../support/tinyRun';
import { writeTokenizerDir } from './bpe';

const ROOT = join(__dirname, '..', '..');
const cli = (args: string[], cwd?: string) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'audit', ...args], {
    reject: false,
    ...(cwd ? { cwd } : {}),
  });
const jsonl = (records: object[]) => records.map((r) => JSON.stringify(r)).join('\n') + '\n';
/** The defaults of the editor settings searchAgent.audit.isLevel / isCap (package.json). */
const defaultsOfSettings = () => {
  const props = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).contributes.configuration.properties;
  return { isLevel: props['searchAgent.audit.isLevel'].default, isCap: props['searchAgent.audit.isCap'].default };
};

describe('CLI audit', function () {
  this.timeout(240_000);
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), 'sas-audit-cli-'))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  const tokens = (role: TokenRole[], mask: (0 | 1)[], lp?: { rollout: (number | null)[]; trainer: number[] }) => ({
    text: role.map((_, i) => `t${i}`),
    ids: role.map((_, i) => i + 1),
    role,
    loss_mask: mask,
    ...(lp ? { rollout_logprob: lp.rollout as number[], logprob: lp.trainer } : {}),
  });
  const clean: Rollout = {
    v: 2,
    id: 'clean',
    step: 1,
    prompt: 'Question: q\n',
    response: '<think>look it up</think>\n<answer> Paris </answer>',
    tokens: tokens(['prompt', 'generated', 'generated'], [0, 1, 1], { rollout: [0, -1, -2], trainer: [0, -1.01, -2] }),
  };

  it('exit 0 on clean rollouts; --json has rollouts with leaks, drift, logprob, alarms, and a summary', async () => {
    writeFileSync(join(dir, 'clean.jsonl'), jsonl([clean]));
    const r = await cli([join(dir, 'clean.jsonl'), '--json']);
    assert.equal(r.exitCode, 0, r.stderr);
    const o = JSON.parse(r.stdout);
    assert.deepEqual(
      Object.keys(o.rollouts[0]).sort(),
      ['alarms', 'drift', 'id', 'is', 'leaks', 'logprob', 'mask_mismatch', 'step'].sort(),
    );
    assert.deepEqual(o.rollouts[0].leaks, []);
    assert.equal(o.rollouts[0].drift, null);
    assert.deepEqual(o.rollouts[0].logprob.flagged, []);
    assert.equal(o.summary.flagged, 0);
    assert.equal(o.summary.drift.checked, false);
    const text = await cli([join(dir, 'clean.jsonl')]);
    assert.equal(text.exitCode, 0);
    assert.match(text.stdout, /1 rollouts audited, 0 flagged/);
    assert.match(text.stdout, /drift not checked: no tokenizer/);
  });

  it('exit 1 when anything is flagged: a leak, a log-prob ratio on a trained token, an alarm', async () => {
    const leak = { ...clean, id: 'leak', tokens: tokens(['prompt', 'retrieved', 'generated'], [0, 1, 1]) };
    const ratio = {
      ...clean,
      id: 'ratio',
      tokens: tokens(['prompt', 'generated', 'retrieved'], [0, 1, 0], { rollout: [0, -1, -40], trainer: [0, -3, 0] }),
    };
    const alarm = { ...clean, id: 'alarm', response: '<think>x</think>\n<answer> Paris or Lyon </answer>' };
    writeFileSync(join(dir, 'flagged.jsonl'), jsonl([clean, leak, ratio, alarm]));
    const r = await cli([join(dir, 'flagged.jsonl'), '--json']);
    assert.equal(r.exitCode, 1, r.stderr);
    const o = JSON.parse(r.stdout);
    const by = Object.fromEntries(o.rollouts.map((x: { id: string }) => [x.id, x]));
    assert.deepEqual(by.leak.leaks, [1]);
    assert.deepEqual(by.ratio.logprob.flagged, [1], 'the masked token with −40 is never flagged');
    assert.deepEqual(by.alarm.alarms, ['answer-enumeration']);
    assert.equal(o.summary.flagged, 3);
    writeFileSync(join(dir, 'malformed.jsonl'), jsonl([clean, leak]) + '{"v": 2, "id": \n');
    const bad = await cli([join(dir, 'malformed.jsonl'), '--json']);
    assert.equal(bad.exitCode, 2, 'a malformed line is bad input, whatever else is flagged');
    assert.equal(JSON.parse(bad.stdout).issues.length, 1, 'reported and skipped; the rest audited');
    assert.deepEqual(JSON.parse(bad.stdout).rollouts[1].leaks, [1]);
    assert.match(bad.stderr, /malformed\.jsonl:3/);
    const loose = await cli([join(dir, 'flagged.jsonl'), '--ratio-low', '0.01', '--ratio-high', '100', '--json']);
    assert.deepEqual(JSON.parse(loose.stdout).rollouts[2].logprob.flagged, [], 'the band is an option');
  });

  it('the IS preview: clipped at token level, dropped under masked IS, aggregated at sequence level; a preview, never a flag', async () => {
    // Δ on trained tokens: high +1 (ρ 2.72), 0, −0.2 → Σ 0.8 (ρ_seq 2.23); low −1 (ρ 0.37), 0 → Σ −1 (ρ_seq 0.37). The
    // prompt's −50 is masked: never clipped or dropped. `none` records no log-probs: no preview.
    const high = {
      ...clean,
      id: 'high',
      tokens: tokens(['prompt', 'generated', 'generated', 'generated'], [0, 1, 1, 1], {
        rollout: [null, -1, -1, -1],
        trainer: [-50, 0, -1, -1.2],
      }),
    };
    const low = {
      ...clean,
      id: 'low',
      tokens: tokens(['prompt', 'generated', 'generated'], [0, 1, 1], {
        rollout: [-1, -2, -1],
        trainer: [-60, -3, -1],
      }),
    };
    const none = { ...clean, id: 'none', tokens: tokens(['prompt', 'generated'], [0, 1]) };
    writeFileSync(join(dir, 'is.jsonl'), jsonl([high, low, none]));
    const loose = ['--ratio-low', '0.01', '--ratio-high', '100', '--json'];
    const tok = await cli([join(dir, 'is.jsonl'), ...loose]);
    assert.equal(tok.exitCode, 0, `clipping and dropping alone flag nothing: ${tok.stdout}`);
    const t = JSON.parse(tok.stdout);
    const by = Object.fromEntries(t.rollouts.map((x: { id: string; is: unknown }) => [x.id, x.is]));
    assert.deepEqual(defaultsOfSettings(), IMPORTANCE_DEFAULTS, "the CLI's defaults are the editor settings' defaults");
    assert.deepEqual([by.high.level, by.high.cap], [IMPORTANCE_DEFAULTS.isLevel, IMPORTANCE_DEFAULTS.isCap]);
    assert.deepEqual(
      [by.high.clipped, by.high.dropped],
      [[1], [1]],
      'token level, cap 2: ρ 2.72 clipped by TIS and dropped by MIS',
    );
    assert.deepEqual([by.low.clipped, by.low.dropped], [[], [1]], 'ρ 0.37 < 1/2: dropped, not clipped');
    assert.equal(by.none, null);
    assert.deepEqual(t.summary.is, {
      level: 'token',
      cap: 2,
      rollouts: 2,
      scored: 5,
      clipped: 1,
      dropped: 2,
      clipped_rollouts: 1,
      dropped_rollouts: 2,
    });
    const seq = JSON.parse((await cli([join(dir, 'is.jsonl'), ...loose, '--is-level', 'sequence'])).stdout);
    const bySeq = Object.fromEntries(seq.rollouts.map((x: { id: string; is: unknown }) => [x.id, x.is]));
    assert.deepEqual(
      [bySeq.high.clipped, bySeq.high.dropped],
      [
        [1, 2, 3],
        [1, 2, 3],
      ],
      'ρ_seq 2.23 > 2: every trained token of the sequence',
    );
    assert.deepEqual([bySeq.low.clipped, bySeq.low.dropped], [[], [1, 2]]);
    assert.deepEqual(seq.summary.is, {
      level: 'sequence',
      cap: 2,
      rollouts: 2,
      scored: 5,
      clipped: 3,
      dropped: 5,
      clipped_rollouts: 1,
      dropped_rollouts: 2,
    });
    const wide = JSON.parse(
      (await cli([join(dir, 'is.jsonl'), ...loose, '--is-level', 'sequence', '--is-cap', '3'])).stdout,
    );
    assert.deepEqual([wide.summary.is.clipped, wide.summary.is.dropped], [0, 0], 'cap 3 holds ρ_seq 2.23 and 0.37');
    const text = await cli([join(dir, 'is.jsonl')]);
    assert.equal(text.exitCode, 1, 'the log-prob band (default [0.5, 2]) still flags the ratios behind them');
    assert.match(
      text.stdout,
      /IS preview +token level, cap 2: 1 of 5 trained tokens clipped \(TIS, in 1 rollouts\), 2 dropped \(MIS, in 2 rollouts\)/,
    );
    for (const [args, named] of [
      [['--is-level', 'tokens'], /--is-level: expected token or sequence, got "tokens"/],
      [['--is-cap', '1'], /--is-cap: expected a number > 1, got "1"/],
      [['--is-cap', 'x'], /--is-cap/],
    ] as const) {
      const bad = await cli([join(dir, 'is.jsonl'), ...args]);
      assert.equal(bad.exitCode, 2, args.join(' '));
      assert.match(bad.stderr, named);
    }
  });

  it('exit 2 on bad input: a missing file, an unreadable --tokenizer, a bad option', async () => {
    const missing = await cli([join(dir, 'nope.jsonl')]);
    assert.equal(missing.exitCode, 2);
    assert.match(missing.stderr, /nope\.jsonl/);
    const tok = await cli([join(dir, 'clean.jsonl'), '--tokenizer', join(dir, 'clean.jsonl')]);
    assert.equal(tok.exitCode, 2);
    assert.match(tok.stderr, /--tokenizer: .*clean\.jsonl/);
    assert.equal((await cli([join(dir, 'clean.jsonl'), '--ratio-low', 'x'])).exitCode, 2);
    assert.equal((await cli([join(dir, 'clean.jsonl'), '--drift-scope', 'some'])).exitCode, 2);
    assert.equal((await cli([])).exitCode, 2);
  });

  it('--tokenizer DIR: drift found on a non-canonical split, with the ids on both sides', async () => {
    const model = writeTokenizerDir(join(dir, 'model'), [' Paris', 'is', '<answer>', '</answer>']);
    const codec = await loadTokenizerCodec(model);
    const prompt = 'Question: capital of France?\n';
    const pieces: [string, TokenRole][] = [
      ['<answer>', 'generated'],
      [' Par', 'generated'],
      ['is', 'generated'],
      [' </answer>', 'generated'],
    ];
    const ids = codec.encode(prompt);
    const role: TokenRole[] = ids.map(() => 'prompt');
    for (const [t, r] of pieces) {
      for (const id of codec.encode(t)) {
        ids.push(id);
        role.push(r);
      }
    }
    const rec = {
      v: 2,
      id: 'split',
      prompt,
      response: pieces.map((p) => p[0]).join(''),
      tokens: {
        text: ids.map((i) => codec.decode([i])),
        ids,
        role,
        loss_mask: role.map((r) => (r === 'generated' ? 1 : 0)),
      },
    };
    writeFileSync(join(dir, 'split.jsonl'), jsonl([rec]));
    const r = await cli([join(dir, 'split.jsonl'), '--tokenizer', model, '--json']);
    assert.equal(r.exitCode, 1, r.stderr);
    const d = JSON.parse(r.stdout).rollouts[0].drift;
    assert.equal(d.kind, 'split');
    assert.equal(d.token, codec.encode(prompt + '<answer>').length);
    assert.equal(codec.decode(d.recorded.slice(d.token - d.from, d.token - d.from + 2)), ' Paris');
    assert.deepEqual(d.reencoded[d.token - d.from], codec.encode(' Paris')[0]);
  });

  it('a real run of the trainer (tiny policy, GRPO, masking on): no leak, no log-prob flag, no rollout alarm, drift checked with its own tokenizer, no text drift — and no learning signal, which the run-level zero-std-high says (exit 1)', async () => {
    const train = await trainTinyWithCli(dir);
    assert.equal(train.exitCode, 0, train.stderr);
    const run = join(dir, 'runs', readdirSync(join(dir, 'runs'))[0]!);
    const r = await cli([run, '--json']);
    const o = JSON.parse(r.stdout);
    assert.ok(o.summary.rollouts >= 8);
    assert.ok(o.summary.logprob.compared > 0, 'the trainer records both log-probs on trained tokens');
    assert.deepEqual({ leaks: o.summary.leaks.tokens, logprob: o.summary.logprob.flagged }, { leaks: 0, logprob: 0 });
    // The tiny policy's tokenizer is read from the run's checkpoint (issue 44): drift is checked. Its recorded ids always
    // spell its text (no `text` drift); a barely trained policy samples word pieces side by side that its tokenizer
    // would encode otherwise ("the" + "cat" → "thecat", characters): `split` drift, the only rollout finding.
    assert.match(o.tokenizer, /^the tiny policy's tokenizer \(step-\d{6}\)$/);
    assert.equal(o.summary.drift.checked, true);
    assert.deepEqual([o.summary.drift.text, o.summary.drift.template], [0, 0]);
    assert.equal(o.summary.flagged, o.summary.drift.split);
    // builtin:em on a random policy: every reward 0, every group flat, on both steps (docs/instruments.md)
    assert.deepEqual(o.alarms, { 'zero-std-high': { count: 2, steps: [1, 2], rollouts: 0 } });
    assert.equal(r.exitCode, 1, r.stdout);
  });
});
