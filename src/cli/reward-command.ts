/**
 * `search-agent-studio reward <module|builtin:em|builtin:subem|builtin:f1|builtin:em-format> <rollouts>
 *  [--json] [--out scored.jsonl] [--timeout MS] [--batch-timeout MS] [--memory MB] [--workers N]`
 * Scores rollouts with a reward module in the sandbox. With --json: one JSON object (count, mean,
 * frac_zero_std_groups, errors, items: id, reward, parts). With --out: the rollouts re-written with the new
 * rewards, streamed (for big files); the recorded reward is kept in meta.reward_recorded. Otherwise a summary.
 * Exit 0 when every item scored, 1 when some failed (each reported on stderr), 2 for bad usage, unreadable
 * input, nothing read (then `--out` is not written) or a module that does not compile.
 */
import { readFile, stat } from 'node:fs/promises';
import { sourceFiles, UnreadableInput } from '../core/importers';
import { RewardCompileError } from '../core/rewards/compile';
import { SANDBOX_LIMITS } from '../core/rewards/sandbox';
import {
  BUILTIN_REWARDS,
  openReward,
  RewardReportBuilder,
  type RolloutSet,
  scoreRollouts,
} from '../core/rewards/scoring';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import { OutputFile } from './output';

export interface RewardArgs {
  module: string;
  rollouts: string;
  json: boolean;
  out?: string;
  timeout: number;
  'batch-timeout': number;
  memory: number;
  workers?: number;
  /** For the editor: score only the rollouts of an earlier run's `set` (a JSON file, or `-` for standard input). */
  set?: string;
  /** For the editor: the full report as one JSON object on stdout, progress as JSON lines on stderr. */
  report: boolean;
}

export const rewardCommandDef = defineCommand({
  command: 'reward <module> <rollouts>',
  describe: 'score rollouts with a reward module (sandboxed)',
  builder: (y) =>
    y
      .positional('module', {
        type: 'string',
        demandOption: true,
        describe: `a *.reward.ts module, or ${Object.keys(BUILTIN_REWARDS)
          .map((k) => `builtin:${k}`)
          .join(', ')}`,
      })
      .positional('rollouts', {
        type: 'string',
        demandOption: true,
        describe: 'a rollout file or run directory (or anything `inspect` reads)',
      })
      .option('json', {
        type: 'boolean',
        default: false,
        describe: 'one JSON object: count, mean, zero-variance groups, errors, items',
      })
      .option('out', {
        type: 'string',
        describe: 'write the rollouts re-scored (the recorded reward kept in meta.reward_recorded)',
      })
      .option('timeout', { type: 'number', default: 2000, describe: 'time limit per item (ms, at most 600,000)' })
      .option('batch-timeout', {
        type: 'number',
        default: 120_000,
        describe: 'time limit per batch of 4,096 rollouts (ms)',
      })
      .option('memory', {
        type: 'number',
        default: 256,
        describe: 'memory limit of each sandbox thread (MB; the module and everything it allocates)',
      })
      .option('workers', { type: 'number', describe: 'sandbox worker threads' })
      .option('report', { type: 'boolean', default: false, hidden: true })
      .option('set', { type: 'string', hidden: true }),
  run: (a, io) => withInputErrors(io, () => rewardCommand(a, io.out, io.err)),
});

export async function rewardCommand(
  values: RewardArgs,
  out: (s: string) => void,
  err: (s: string) => void,
): Promise<number> {
  if (values.report && (values.json || values.out))
    throw new UsageError('--report cannot be combined with --json or --out');
  // Bounded above too: a time limit past Node's largest timer (~24.8 days) would fire at once and fail every rollout.
  const int = (name: string, v: unknown, min: number, max: number, unit: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new UsageError(
        `--${name} must be a whole number of ${unit} from ${min.toLocaleString('en-US')} to ${max.toLocaleString('en-US')}, got ${String(v)}`,
      );
    return n;
  };
  const limits = {
    itemTimeoutMs: int('timeout', values.timeout ?? 2000, 1, SANDBOX_LIMITS.itemTimeoutMs, 'milliseconds'),
    batchTimeoutMs: int(
      'batch-timeout',
      values['batch-timeout'] ?? 120_000,
      1,
      SANDBOX_LIMITS.batchTimeoutMs,
      'milliseconds',
    ),
    memoryMb: int('memory', values.memory ?? 256, ...SANDBOX_LIMITS.memoryMb, 'MB'),
    ...(values.workers !== undefined
      ? { workers: int('workers', values.workers, 1, SANDBOX_LIMITS.workers, 'threads') }
      : {}),
  };
  // Both inputs named before anything is compiled or started: a missing module is not a failed import in it.
  if (!values.module.startsWith('builtin:')) {
    const st = await stat(values.module).catch(() => undefined);
    if (!st)
      throw new UnreadableInput(values.module, 'no such reward module (expected a *.reward.ts file, or builtin:em, …)');
    if (!st.isFile())
      throw new UnreadableInput(
        values.module,
        `${st.isDirectory() ? 'is a directory' : 'is not a regular file'}; expected a reward module (a *.reward.ts file)`,
      );
  }
  if (!(await stat(values.rollouts).catch(() => undefined)))
    throw new UnreadableInput(values.rollouts, 'no such file or directory');
  const only = values.set ? await readSet(values.set) : undefined;
  // The output is refused when it is one of the files read, and put in place only when every rollout was read.
  const file = values.out ? await OutputFile.create(values.out, await sourceFiles(values.rollouts)) : undefined;
  try {
    return await scoreAll(values, out, err, file, limits, only);
  } finally {
    await file?.abort();
  }
}

type Limits = { itemTimeoutMs: number; batchTimeoutMs: number; memoryMb: number; workers?: number };

async function scoreAll(
  values: RewardArgs,
  out: (s: string) => void,
  err: (s: string) => void,
  file: OutputFile | undefined,
  limits: Limits,
  only: RolloutSet | undefined,
): Promise<number> {
  const { module: spec, rollouts } = values;
  let opened;
  try {
    opened = await openReward(spec, { ...limits, onLog: (l) => err(`[reward] ${l}\n`) });
  } catch (e) {
    if (e instanceof RewardCompileError) {
      if (values.report)
        out(
          `${JSON.stringify({ compileError: { file: e.file, line: e.line, column: e.column, message: e.detail } })}\n`,
        );
      err(`${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const report = new RewardReportBuilder();
  const write = async (line: string) => file?.write(`${line}\n`);
  let first = true;
  if (values.json) out(`{"module":${JSON.stringify(opened.compiled.file)},"items":[`);
  const isTty = Boolean(process.stderr.isTTY);
  const read: RolloutSet = {};
  let lastProgress = 0;
  try {
    for await (const s of scoreRollouts(rollouts, opened.sandbox, {
      onMalformed: (m) => err(values.report ? `${JSON.stringify({ malformed: m })}\n` : `${m}\n`),
      onProgress: (done, errors) => {
        // At most five lines a second (the sandbox reports every item).
        const now = Date.now();
        if (now - lastProgress < 200) return;
        lastProgress = now;
        if (values.report) err(`${JSON.stringify({ progress: done, errors })}\n`);
        else if (isTty) {
          const failed = Object.values(errors).reduce((a, b) => a + (b ?? 0), 0);
          err(
            `\rscored ${done.toLocaleString()}${failed ? ` (${failed.toLocaleString()} failed${errors.timeout ? `, ${errors.timeout.toLocaleString()} timed out` : ''})` : ''}\u001b[K`,
          );
        }
      },
      batch: values.report ? 2048 : 4096,
      ...(only ? { only } : {}),
      read,
    })) {
      report.add(s);
      const o = s.outcome;
      const scored = 'reward' in o ? { reward: o.reward, parts: o.parts } : undefined;
      const error = 'error' in o ? o.error.message : undefined;
      if (values.json) {
        out(
          `${first ? '' : ','}\n${JSON.stringify({ id: s.record.id, reward: scored?.reward ?? null, parts: scored?.parts ?? {}, ...(error ? { error } : {}) })}`,
        );
        first = false;
      }
      if (file) {
        const meta = {
          ...s.record.meta,
          ...(typeof s.record.reward === 'number' ? { reward_recorded: s.record.reward } : {}),
          ...(error ? { reward_error: error } : {}),
        };
        const { reward: _r, reward_parts: _p, ...rest } = s.record;
        await write(
          JSON.stringify({ ...rest, ...(scored ? { reward: scored.reward, reward_parts: scored.parts } : {}), meta }),
        );
      }
    }
  } finally {
    if (isTty) err('\n');
    await opened.sandbox.close();
  }
  const r = report.result();
  // Every rollout is in it (a failed item with its error): put in place before the summary says it was written;
  // nothing read writes nothing.
  if (r.count) await file?.commit();
  if (values.report) {
    out(`${JSON.stringify({ report: r, module: opened.compiled.file, rollouts, set: read })}\n`);
    return r.errors ? 1 : 0;
  }
  if (values.json) {
    out(
      `\n],"count":${r.count},"mean":${JSON.stringify(r.mean)},"std":${JSON.stringify(r.std)},"frac_zero_std_groups":${JSON.stringify(r.frac_zero_std_groups)},"errors":${r.errors},"agreement":${JSON.stringify(r.agreement)}}\n`,
    );
  } else {
    const pct = (x: number | null) => (x === null ? '–' : `${(100 * x).toFixed(1)}%`);
    out(
      [
        `${opened.spec} on ${rollouts}: ${r.count} rollouts, ${r.scored} scored${r.errors ? `, ${r.errors} failed (${kindSummary(r.errorsByKind)})` : ''}`,
        `  mean reward     ${r.mean === null ? '–' : r.mean.toFixed(4)}${r.recordedMean !== null ? ` (recorded: ${r.recordedMean.toFixed(4)})` : ''}`,
        `  same as recorded ${pct(r.agreement)}`,
        `  zero-variance GRPO groups ${pct(r.frac_zero_std_groups)}${r.frac_zero_std_groups_recorded !== null ? ` (recorded: ${pct(r.frac_zero_std_groups_recorded)})` : ''} of ${r.groups}`,
        ...(values.out && r.count ? [`  wrote ${values.out}`] : []),
      ].join('\n') + '\n',
    );
  }
  for (const f of r.failures.slice(0, 20)) err(`${f.message}\n`);
  if (r.errors > 20) err(`… and ${r.errors - 20} more failures\n`);
  // Nothing read is not a clean score (as in `audit`): a script gating on the exit status must not pass on it.
  if (r.count === 0) {
    err(
      `search-agent-studio: ${rollouts}: nothing to score: no rollouts were read (an empty file, only malformed lines, or a directory without rollouts)\n`,
    );
    return 2;
  }
  return r.errors ? 1 : 0;
}

const KIND_WORDS: Record<string, string> = {
  throw: 'threw',
  nan: 'not a number',
  type: 'wrong type',
  timeout: 'timed out',
  memory: 'out of memory',
  crash: 'crashed',
  'batch-timeout': 'batch time limit',
  skipped: 'not run',
  cancelled: 'cancelled',
  input: 'unreadable rollout',
};

/** `3 timed out, 9,984 not run`. */
function kindSummary(byKind: Partial<Record<string, number>>): string {
  return Object.entries(byKind)
    .filter(([, n]) => n)
    .map(([k, n]) => `${n!.toLocaleString()} ${KIND_WORDS[k] ?? k}`)
    .join(', ');
}

/** A rollout set (`--set FILE`, `-`: standard input): `{ "<file>": <last line>, … }`. */
async function readSet(from: string): Promise<RolloutSet> {
  let text: string;
  if (from === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    text = Buffer.concat(chunks).toString('utf8');
  } else text = await readFile(from, 'utf8');
  let set: unknown;
  try {
    set = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`--set ${from}: not JSON: ${(e as Error).message}`);
  }
  if (
    !set ||
    typeof set !== 'object' ||
    Array.isArray(set) ||
    !Object.values(set).every((v) => Number.isInteger(v) && (v as number) >= 0)
  ) {
    throw new UsageError(`--set ${from}: expected {"<file>": <last line>, …}`);
  }
  return set as RolloutSet;
}
