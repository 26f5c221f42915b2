/**
 * `search-agent-studio reward <module|builtin:em|builtin:subem|builtin:f1|builtin:em-format> <rollouts>
 *  [--json] [--out scored.jsonl] [--timeout MS] [--workers N]`
 * Scores rollouts with a reward module in the sandbox. With --json: one JSON object (count, mean,
 * frac_zero_std_groups, errors, items: id, reward, parts). With --out: the rollouts re-written with the new
 * rewards, streamed (for big files); the recorded reward is kept in meta.reward_recorded. Otherwise a summary.
 * Exit 0 when every item scored, 1 when some failed (each reported on stderr), 2 for bad usage, unreadable
 * input or a module that does not compile.
 */
import { sourceFiles } from '../core/importers';
import { RewardCompileError } from '../core/rewards/compile';
import { BUILTIN_REWARDS, openReward, RewardReportBuilder, scoreRollouts } from '../core/rewards/scoring';
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
  workers?: number;
  /** For the editor: the full report as one JSON object on stdout, progress as JSON lines on stderr. */
  report: boolean;
}

export const rewardCommandDef = defineCommand({
  command: 'reward <module> <rollouts>',
  describe: 'score rollouts with a reward module (sandboxed)',
  builder: (y) =>
    y
      .positional('module', { type: 'string', demandOption: true, describe: `a *.reward.ts module, or ${Object.keys(BUILTIN_REWARDS).map((k) => `builtin:${k}`).join(', ')}` })
      .positional('rollouts', { type: 'string', demandOption: true, describe: 'a rollout file or run directory (or anything `inspect` reads)' })
      .option('json', { type: 'boolean', default: false, describe: 'one JSON object: count, mean, zero-variance groups, errors, items' })
      .option('out', { type: 'string', describe: 'write the rollouts re-scored (the recorded reward kept in meta.reward_recorded)' })
      .option('timeout', { type: 'number', default: 2000, describe: 'time limit per item (ms)' })
      .option('workers', { type: 'number', describe: 'sandbox worker threads' })
      .option('report', { type: 'boolean', default: false, hidden: true }),
  run: (a, io) => withInputErrors(io, () => rewardCommand(a, io.out, io.err)),
});

export async function rewardCommand(values: RewardArgs, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  if (values.report && (values.json || values.out)) throw new UsageError('--report cannot be combined with --json or --out');
  // The output is refused when it is one of the files read, and put in place only when every rollout was read.
  const file = values.out ? await OutputFile.create(values.out, await sourceFiles(values.rollouts)) : undefined;
  try {
    return await scoreAll(values, out, err, file);
  } finally {
    await file?.abort();
  }
}

async function scoreAll(values: RewardArgs, out: (s: string) => void, err: (s: string) => void, file: OutputFile | undefined): Promise<number> {
  const { module: spec, rollouts } = values;
  let opened;
  try {
    opened = await openReward(spec, { itemTimeoutMs: Number(values.timeout) || 2000, ...(values.workers ? { workers: Number(values.workers) } : {}), onLog: (l) => err(`[reward] ${l}\n`) });
  } catch (e) {
    if (e instanceof RewardCompileError) {
      if (values.report) out(`${JSON.stringify({ compileError: { file: e.file, line: e.line, column: e.column, message: e.detail } })}\n`);
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
  try {
    for await (const s of scoreRollouts(rollouts, opened.sandbox, {
      onMalformed: (m) => err(values.report ? `${JSON.stringify({ malformed: m })}\n` : `${m}\n`),
      onProgress: (done) => (values.report ? err(`${JSON.stringify({ progress: done })}\n`) : isTty && err(`\rscored ${done.toLocaleString()}\u001b[K`)),
      batch: values.report ? 2048 : 4096,
    })) {
      report.add(s);
      const o = s.outcome;
      const scored = 'reward' in o ? { reward: o.reward, parts: o.parts } : undefined;
      const error = 'error' in o ? o.error.message : undefined;
      if (values.json) {
        out(`${first ? '' : ','}\n${JSON.stringify({ id: s.record.id, reward: scored?.reward ?? null, parts: scored?.parts ?? {}, ...(error ? { error } : {}) })}`);
        first = false;
      }
      if (file) {
        const meta = { ...s.record.meta, ...(typeof s.record.reward === 'number' ? { reward_recorded: s.record.reward } : {}), ...(error ? { reward_error: error } : {}) };
        const { reward: _r, reward_parts: _p, ...rest } = s.record;
        await write(JSON.stringify({ ...rest, ...(scored ? { reward: scored.reward, reward_parts: scored.parts } : {}), meta }));
      }
    }
  } finally {
    if (isTty) err('\n');
    await opened.sandbox.close();
  }
  // Every rollout is in it (a failed item with its error): put in place before the summary says it was written.
  await file?.commit();
  const r = report.result();
  if (values.report) {
    out(`${JSON.stringify({ report: r, module: opened.compiled.file, rollouts })}\n`);
    return r.errors ? 1 : 0;
  }
  if (values.json) {
    out(`\n],"count":${r.count},"mean":${JSON.stringify(r.mean)},"std":${JSON.stringify(r.std)},"frac_zero_std_groups":${JSON.stringify(r.frac_zero_std_groups)},"errors":${r.errors},"agreement":${JSON.stringify(r.agreement)}}\n`);
  } else {
    const pct = (x: number | null) => (x === null ? '–' : `${(100 * x).toFixed(1)}%`);
    out(
      [
        `${opened.spec} on ${rollouts}: ${r.count} rollouts, ${r.scored} scored${r.errors ? `, ${r.errors} failed` : ''}`,
        `  mean reward     ${r.mean === null ? '–' : r.mean.toFixed(4)}${r.recordedMean !== null ? ` (recorded: ${r.recordedMean.toFixed(4)})` : ''}`,
        `  same as recorded ${pct(r.agreement)}`,
        `  zero-variance GRPO groups ${pct(r.frac_zero_std_groups)}${r.frac_zero_std_groups_recorded !== null ? ` (recorded: ${pct(r.frac_zero_std_groups_recorded)})` : ''} of ${r.groups}`,
        ...(values.out ? [`  wrote ${values.out}`] : []),
      ].join('\n') + '\n',
    );
  }
  for (const f of r.failures.slice(0, 20)) err(`${f.message}\n`);
  if (r.errors > 20) err(`… and ${r.errors - 20} more failures\n`);
  return r.errors ? 1 : 0;
}
