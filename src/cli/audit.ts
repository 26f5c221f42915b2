/**
 * `search-agent-studio audit <rollouts.jsonl | run-dir | dump> [--tokenizer DIR] [--json]`: every check of
 * src/core/audit on every rollout (leaks, drift, log-probs, alarms), and the importance-sampling preview at
 * `--is-level` / `--is-cap`. Exit 0 when nothing is flagged, 1 when something is (a CI job or a training launch can
 * gate on it), 2 on bad input (unreadable, a bad option, a malformed item: reported and skipped, the rest still
 * audited; or nothing read at all — an empty file, a run with no rollouts yet: never a clean audit). The IS preview
 * is never a flag: what a correction would clip or drop is not a fault of the rollouts (the ratios behind it are
 * flagged by the log-prob band). With `--json`, one object on stdout: `rollouts` (per
 * rollout: id, leaks, drift, logprob, alarms — issue 18's shape, plus step, mask_mismatch and is), `issues`
 * (malformed items, each with file, line and field) and `summary` (counts and per-step series).
 */
import {
  type AuditOptions,
  AuditStream,
  type AuditSummary,
  type DriftScope,
  flagged,
  IMPORTANCE_DEFAULTS,
  mismatchNote,
  type RolloutAudit,
} from '../core/audit';
import { runFactsOf } from '../core/audit/groupChecks';
import { readRunMetrics } from '../core/audit/run';
import { detectSource, readSource } from '../core/importers';
import type { ForeignOptions } from '../core/importers/foreign';
import { formatIssue, type LocatedIssue, type ReadOptions } from '../core/run/format';
import { runConfigNear, samplingOf, storeRecording } from '../core/store/rollouts';
import { runTokenizer, runVocabSize, type TokenizerCodec } from '../core/tokens/tokenizer';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import {
  foreignOptionsFromArgs,
  readOptionsFromArgs,
  samplingLine,
  tokenizerFromArg,
  withForeignOptions,
  withReadOptions,
} from './inspect';

export interface AuditCommandOptions extends Omit<AuditOptions, 'tokenizer' | 'read'> {
  json: boolean;
  /** A model directory (or tokenizer.json) given by the user; its failure to load is bad input. */
  tokenizer?: string;
  read?: ReadOptions;
  /** How other engines' dumps are read (their tokenizer is `tokenizer`'s). */
  foreign?: Omit<ForeignOptions, 'tokenizer'>;
  out: (s: string) => void;
  err: (s: string) => void;
}

/** `--drift-scope`, `--ratio-low`, `--ratio-high`, `--is-level`, `--is-cap` → options (a UsageError names the bad one). */
export function auditOptionsFromArgs(v: {
  'drift-scope'?: string;
  'ratio-low'?: string;
  'ratio-high'?: string;
  'is-level'?: string;
  'is-cap'?: string;
}): Pick<AuditOptions, 'driftScope' | 'ratioLow' | 'ratioHigh' | 'isLevel' | 'isCap'> {
  const o: Pick<AuditOptions, 'driftScope' | 'ratioLow' | 'ratioHigh' | 'isLevel' | 'isCap'> = {};
  if (v['drift-scope'] !== undefined) {
    if (v['drift-scope'] !== 'segments' && v['drift-scope'] !== 'whole')
      throw new UsageError(`--drift-scope: expected segments or whole, got ${JSON.stringify(v['drift-scope'])}`);
    o.driftScope = v['drift-scope'] as DriftScope;
  }
  for (const [flag, key] of [
    ['ratio-low', 'ratioLow'],
    ['ratio-high', 'ratioHigh'],
  ] as const) {
    const s = v[flag];
    if (s === undefined) continue;
    const x = Number(s);
    if (!(x > 0) || !Number.isFinite(x))
      throw new UsageError(`--${flag}: expected a positive number, got ${JSON.stringify(s)}`);
    o[key] = x;
  }
  if ((o.ratioLow ?? 0.5) >= (o.ratioHigh ?? 2)) throw new UsageError('--ratio-low must be below --ratio-high');
  if (v['is-level'] !== undefined) {
    if (v['is-level'] !== 'token' && v['is-level'] !== 'sequence')
      throw new UsageError(`--is-level: expected token or sequence, got ${JSON.stringify(v['is-level'])}`);
    o.isLevel = v['is-level'];
  }
  if (v['is-cap'] !== undefined) {
    const c = Number(v['is-cap']);
    if (!(c > 1) || !Number.isFinite(c))
      throw new UsageError(`--is-cap: expected a number > 1, got ${JSON.stringify(v['is-cap'])}`);
    o.isCap = c;
  }
  return o;
}

async function tokenizerFor(path: string, o: AuditCommandOptions): Promise<{ codec?: TokenizerCodec; note?: string }> {
  if (o.tokenizer) return { codec: await tokenizerFromArg(o.tokenizer) };
  return runTokenizer(path);
}

export async function audit(path: string, o: AuditCommandOptions): Promise<number> {
  const kind = await detectSource(path);
  const { codec, note } = await tokenizerFor(path, o);
  const { tokenizer: _dir, json: _json, out: _out, err: _err, foreign, ...checks } = o;
  const runVocab = codec ? await runVocabSize(path) : undefined;
  // a run directory (or a file in one): its config's rollout.n and KL term, and its metrics for the run-health rules
  const config = (await runConfigNear(path))?.config;
  // Streamed: each rollout's findings are printed (--json) or kept (the first 50 flagged) when its step is done, so
  // memory stays flat in the run's size; a token store is read without the arrays the checks do not read.
  const shown: RolloutAudit[] = [];
  const marked = new Map<string, number>();
  let k = 0;
  if (o.json)
    o.out(
      `{"source":${JSON.stringify(path)},"kind":${JSON.stringify(kind)},"tokenizer":${JSON.stringify(codec?.name ?? null)},"rollouts":[`,
    );
  const options = {
    ...checks,
    run: { ...runFactsOf(config), ...checks.run },
    ...(codec ? { tokenizer: codec } : {}),
    ...(runVocab !== undefined ? { runVocab } : {}),
  };
  const auditor = new AuditStream(options, (a) => {
    for (const name of a.alarms) marked.set(name, (marked.get(name) ?? 0) + 1);
    if (o.json) o.out(`${k++ ? ',' : ''}\n${JSON.stringify(jsonOf(a))}`);
    else if (shown.length < 50 && flagged(a)) shown.push(a);
  });
  const issues: LocatedIssue[] = [];
  let malformed = 0; // items skipped (one may have several issues)
  for await (const item of readSource(path, kind, o.read, codec ? 'audit+ids' : 'audit', {
    ...foreign,
    ...(codec ? { tokenizer: codec } : {}),
  })) {
    if (item.record) auditor.add(item.record);
    else {
      malformed++;
      issues.push(...item.issues);
    }
  }
  const metrics = config ? await readRunMetrics(path) : [];
  // a token store that recorded a sample of its training steps (train.record.groups / every): say so
  const sampling = kind === 'rollouts' ? samplingOf(await storeRecording(path)) : undefined;
  const summary = auditor.finish(metrics, sampling?.by_step);
  if (o.json) {
    o.out(
      `\n],"alarms":${JSON.stringify(alarmIndex(summary, marked))},"advisories":${JSON.stringify(summary.advisories)},"issues":${JSON.stringify(issues.map((i) => ({ ...i, text: formatIssue(i) })))},"summary":${JSON.stringify({ ...summary, sampled: sampling ?? null })}}\n`,
    );
  } else {
    const advSteps = new Set(summary.advisories.map((a) => a.step)).size;
    const lines = [
      `${path} (${kind}): ${summary.rollouts} rollouts audited, ${summary.flagged} flagged${summary.advisories.length ? `, ${summary.advisories.length} run-level alarm${summary.advisories.length === 1 ? '' : 's'} on ${advSteps} step${advSteps === 1 ? '' : 's'}` : ''}${malformed ? `, ${malformed} malformed (skipped)` : ''}`,
    ];
    if (sampling) lines.push(`  ${samplingLine(sampling)}`);
    for (const a of shown)
      lines.push(`  ${a.id}${a.step !== null ? ` (step ${a.step})` : ''}: ${findings(a).join('; ')}`);
    if (summary.flagged > 50) lines.push(`  … and ${summary.flagged - 50} more`);
    lines.push(
      `  leaks         ${summary.leaks.tokens} tokens in ${summary.leaks.rollouts} rollouts${summary.leaks.mask_mismatch ? ` (${summary.leaks.mask_mismatch} where the engine's mask disagrees)` : ''}`,
    );
    lines.push(
      summary.drift.checked
        ? `  drift         ${summary.drift.rollouts} rollouts (${summary.drift.text} text, ${summary.drift.split} split, ${summary.drift.template} template) with ${codec!.name}${summary.drift.prompt_not_comparable ? `; the prompt of ${summary.drift.prompt_not_comparable} not compared (their messages lack the tools or system turn it was rendered with)` : ''}`
        : `  drift         ${summary.drift.mismatch ? mismatchNote(codec!, summary.drift.mismatch) : note}`,
    );
    lines.push(
      summary.logprob.rollouts
        ? `  log-probs     ${summary.logprob.compared} trained tokens compared, ${summary.logprob.flagged} with a ratio outside [${o.ratioLow ?? 0.5}, ${o.ratioHigh ?? 2}]; |Δ| mean ${summary.logprob.mean_abs_diff.toFixed(4)}, max ${summary.logprob.max_abs_diff.toFixed(4)}`
        : '  log-probs     not compared (no rollout_logprob and logprob recorded)',
    );
    const is = summary.is;
    const seq = is.level === 'sequence';
    lines.push(
      !is.rollouts
        ? '  IS preview    none (no rollout_logprob and logprob recorded)'
        : seq
          ? `  IS preview    sequence level, cap ${is.cap}: ${is.clipped_rollouts} of ${is.rollouts} sequences clipped (TIS), ${is.dropped_rollouts} dropped (MIS)`
          : `  IS preview    token level, cap ${is.cap}: ${is.clipped} of ${is.scored} trained tokens clipped (TIS, in ${is.clipped_rollouts} rollouts), ${is.dropped} dropped (MIS, in ${is.dropped_rollouts} rollouts)`,
    );
    const alarms = Object.entries(summary.alarms);
    lines.push(`  alarms        ${alarms.length ? alarms.map(([k, v]) => `${k}: ${v}`).join(', ') : 'none'}`);
    const adv = summary.advisories;
    lines.push(
      `  run health    ${adv.length ? `${adv.length} advisor${adv.length === 1 ? 'y' : 'ies'}${metrics.length ? '' : ' (no metrics.jsonl: from the rollouts only)'}` : metrics.length || summary.steps.length ? 'no advisory' : 'not checked (no steps)'}`,
    );
    for (const a of adv.slice(0, 30)) lines.push(`    ${a.name.padEnd(20)} ${a.message}`);
    if (adv.length > 30) lines.push(`    … and ${adv.length - 30} more`);
    o.out(`${lines.join('\n')}\n`);
  }
  for (const i of issues.slice(0, 50)) o.err(`${formatIssue(i)}\n`);
  if (issues.length > 50) o.err(`… and ${issues.length - 50} more problems with malformed items\n`);
  // A tokenizer named on the command line that is not the run's is a bad option (the rest is still audited and printed).
  if (summary.drift.mismatch && o.tokenizer)
    o.err(
      `search-agent-studio: --tokenizer ${o.tokenizer}: tokenizer does not match this run: ${summary.drift.mismatch}\n`,
    );
  // Nothing read is not a clean audit: a gate must not pass on a source it could not read (or a run with no rollouts yet).
  if (summary.rollouts === 0 && issues.length === 0)
    o.err(
      `search-agent-studio: ${path} (${kind}): nothing to audit: no rollouts were read ${config ? '(the run has recorded none yet)' : '(an empty file, or a directory without rollouts)'}\n`,
    );
  return issues.length || (summary.drift.mismatch && o.tokenizer) || summary.rollouts === 0
    ? 2
    : summary.flagged > 0 || summary.advisories.length > 0
      ? 1
      : 0;
}

/**
 * `--json`'s top-level `alarms`: every alarm that fired, on rollouts or on steps, with how often (rollouts marked,
 * or steps for the run-level ones) and where (steps) — so a check can look any alarm up by its name.
 */
export function alarmIndex(
  s: AuditSummary,
  marked: ReadonlyMap<string, number>,
): Record<string, { count: number; steps: number[]; rollouts: number }> {
  const out: Record<string, { count: number; steps: number[]; rollouts: number }> = {};
  const names = new Set([...Object.keys(s.alarms), ...Object.keys(s.alarm_steps)]);
  for (const name of names)
    out[name] = {
      count: s.alarms[name as keyof typeof s.alarms] ?? 0,
      steps: s.alarm_steps[name as keyof typeof s.alarm_steps] ?? [],
      rollouts: marked.get(name) ?? 0,
    };
  return out;
}

function jsonOf(a: RolloutAudit) {
  return {
    id: a.id,
    step: a.step,
    leaks: a.leaks,
    mask_mismatch: a.mask_mismatch,
    drift: a.drift,
    ...(a.drift_prompt ? { drift_prompt: a.drift_prompt } : {}),
    logprob: a.logprob,
    is: a.is,
    alarms: a.alarms,
    ...(a.non_finite ? { non_finite: a.non_finite } : {}),
  };
}

function findings(a: RolloutAudit): string[] {
  const f: string[] = [];
  if (a.leaks.length) f.push(`${a.leaks.length} leaked tokens (first ${a.leaks[0]})`);
  if (a.drift) f.push(`drift (${a.drift.kind}) at token ${a.drift.token}`);
  if (a.logprob?.flagged.length)
    f.push(
      `${a.logprob.flagged.length} trained tokens with a ratio outside the band (max |Δ| ${a.logprob.max_abs_diff.toFixed(3)})`,
    );
  if (a.alarms.length) f.push(a.alarms.join(', '));
  return f;
}

export const auditCommand = defineCommand({
  command: 'audit <path>',
  describe:
    'check every rollout: mask leaks, re-tokenisation drift, rollout vs trainer log-probs on trained tokens, reward-hacking alarms; exit 1 when anything is flagged (docs/instruments.md)',
  builder: (y) =>
    withForeignOptions(
      withReadOptions(
        y
          .positional('path', {
            type: 'string',
            demandOption: true,
            describe:
              'our rollout JSONL, a run directory, or a dump we import (veRL, TRL, Search-R1; prime-rl, NeMo-RL, miles, slime, SkyRL)',
          })
          .option('tokenizer', {
            type: 'string',
            describe:
              "a model directory, tokenizer.json, or model id in the Hugging Face cache: the drift check's tokenizer, and the token text and roles of dumps that hold only ids (default: the run's model directory)",
          })
          .option('json', {
            type: 'boolean',
            default: false,
            describe: 'one JSON object on stdout: rollouts (leaks, drift, logprob, is, alarms), issues, summary',
          })
          .option('drift-scope', {
            type: 'string',
            describe: 're-encode each role segment (segments, the default) or the whole text (whole)',
          })
          .option('ratio-low', {
            type: 'string',
            describe: 'flag trained tokens whose ratio exp(logprob − rollout_logprob) is below this (default 0.5)',
          })
          .option('ratio-high', {
            type: 'string',
            describe: 'flag trained tokens whose ratio is above this (default 2)',
          })
          .option('is-level', {
            type: 'string',
            describe: `the importance-sampling preview's level: token ratios or the sequence ratio (token or sequence; default ${IMPORTANCE_DEFAULTS.isLevel}, as the editor's searchAgent.audit.isLevel)`,
          })
          .option('is-cap', {
            type: 'string',
            describe: `the preview's cap C > 1: truncated IS clips ratios above C, masked IS drops ratios outside [1/C, C] (default ${IMPORTANCE_DEFAULTS.isCap}, as searchAgent.audit.isCap); a preview, never a flag`,
          }),
      ),
    ),
  run: async (a, io) => {
    const read = readOptionsFromArgs(a);
    const o = auditOptionsFromArgs(a);
    const { tokenizer: _t, ...foreign } = foreignOptionsFromArgs(a, undefined, io.err);
    return withInputErrors(io, () =>
      audit(a.path, {
        ...o,
        json: a.json,
        read,
        foreign,
        ...(a.tokenizer ? { tokenizer: a.tokenizer } : {}),
        out: io.out,
        err: io.err,
      }),
    );
  },
});
