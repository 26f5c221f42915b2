/**
 * `search-agent-studio inspect <file|run-dir> [--json] [--dialect D]`: a summary of any trajectory source we
 * read. With `--json`, one JSON object on stdout, streamed (a big run is not held in memory): `source`, `kind`,
 * `trajectories` (per trajectory: id, dialect, question, searches, answer, invalid_actions, diagnostics, …),
 * `issues` (malformed items, each with file, line and field) and `summary`.
 */
import type { Argv } from 'yargs';
import { readRunMetrics } from '../core/audit/run';
import { type RunSummary, SummaryBuilder, trajectoryFacts } from '../core/audit/summary';
import { detectSource, readSource } from '../core/importers';
import type { ForeignOptions } from '../core/importers/foreign';
import { resolveTokenizer } from '../core/importers/foreign/tokenizer';
import { formatIssue, type LocatedIssue, type ReadOptions } from '../core/run/format';
import { runConfigNear, type Sampling, samplingOf, storeRecording } from '../core/store/rollouts';
import { DIALECTS, parseDialectName } from '../core/tags/trajectory';
import { loadTokenizerCodec, type TokenizerCodec } from '../core/tokens/tokenizer';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';

export interface InspectOptions {
  json: boolean;
  out: (s: string) => void;
  err: (s: string) => void;
  /** How responses are read (`--dialect`). */
  read?: ReadOptions;
  /** How other engines' dumps are read (`--tokenizer`, `--python`, `--trust-pickle`). */
  foreign?: ForeignOptions;
}

/** The options for other engines' dumps (`inspect`, `import`, `audit`), declared on a command's parser. */
export function withForeignOptions<A>(y: Argv<A>) {
  return y
    .option('python', {
      type: 'string',
      describe: "the Python that reads pickles and .pt dumps (miles, slime, SkyRL; default: the trainer's)",
    })
    .option('trust-pickle', {
      type: 'boolean',
      default: false,
      describe:
        'load pickles and .pt dumps the restricted loaders refuse: this runs code the file names, so only for dumps you trust',
    })
    .option('reward-columns', {
      type: 'string',
      describe:
        "TRL completion tables: the reward functions' columns, comma-separated (default: those the run's trainer_state.json logs, else every float column)",
    });
}

/** `--tokenizer SPEC` (a model directory, tokenizer.json, or a model id in the Hugging Face cache) as a codec; a bad one is a UsageError. */
export async function tokenizerFromArg(spec: string): Promise<TokenizerCodec> {
  try {
    return await loadTokenizerCodec(await resolveTokenizer(spec));
  } catch (e) {
    throw new UsageError(`--tokenizer: ${(e as Error).message}`);
  }
}

/** `--tokenizer`, `--python`, `--trust-pickle`, `--reward-columns` → how dumps are read (a bad value is a UsageError); notes go to `err`. */
export function foreignOptionsFromArgs(
  values: { python?: string; 'trust-pickle'?: boolean; 'reward-columns'?: string },
  tokenizer: TokenizerCodec | undefined,
  err: (s: string) => void,
): ForeignOptions {
  const rewardColumns = values['reward-columns']
    ?.split(',')
    .map((c) => c.trim())
    .filter(Boolean);
  if (values['reward-columns'] !== undefined && !rewardColumns?.length)
    throw new UsageError('--reward-columns: expected column names, comma-separated');
  return {
    ...(tokenizer ? { tokenizer } : {}),
    ...(rewardColumns?.length ? { rewardColumns } : {}),
    ...(values.python ? { python: values.python } : {}),
    ...(values['trust-pickle'] ? { trustPickle: true } : {}),
    onNote: (n) => err(`note: ${n}\n`),
  };
}

/** The options that say how responses are read (`inspect` and `import`), declared on a command's parser. */
export function withReadOptions<A>(y: Argv<A>) {
  return y
    .option('dialect', {
      type: 'string',
      describe: `read responses in this dialect: auto (detected, the default), ${DIALECTS.join(', ')}`,
    })
    .option('search-tool', { type: 'string', describe: "the search tool's name in tool calls (default: search)" });
}

/** `--dialect auto|searchr1|toolcall|llama-json` and `--search-tool NAME` → read options; a bad value is a UsageError. */
export function readOptionsFromArgs(values: { dialect?: string; 'search-tool'?: string }): ReadOptions {
  const dialect = parseDialectName(values.dialect);
  if (typeof dialect === 'object') throw new UsageError(`--dialect: ${dialect.error}`);
  if (values['search-tool'] !== undefined && !values['search-tool'].trim())
    throw new UsageError('--search-tool: expected a tool name');
  return { dialect, ...(values['search-tool'] ? { searchTool: values['search-tool'] } : {}) };
}

export async function inspect(path: string, o: InspectOptions): Promise<number> {
  const kind = await detectSource(path);
  const summary = new SummaryBuilder();
  const issues: LocatedIssue[] = [];
  let first = true;
  if (o.json) o.out(`{"source":${JSON.stringify(path)},"kind":${JSON.stringify(kind)},"trajectories":[`);
  for await (const item of readSource(path, kind, o.read, 'all', o.foreign)) {
    if (!item.record) {
      summary.addIssue(item.issues);
      issues.push(...item.issues);
      continue;
    }
    const r = item.record;
    const facts = trajectoryFacts(r, o.read);
    summary.add(r, facts);
    if (o.json) {
      // a record whose text is its token ids (no tokenizer): what would be read from the text is null
      const t = facts.text;
      const entry = {
        id: r.id,
        dialect: t ? facts.dialect : null,
        question: r.question ?? null,
        searches: t ? facts.searches : null,
        turns: t ? facts.turns : null,
        answer: facts.answer,
        invalid_actions: t ? facts.invalidActions : null,
        reward: r.reward ?? null,
        em: facts.em,
        format_valid: t ? facts.formatValid : null,
        finish: r.finish ?? null,
        ...(t ? {} : { text: 'token ids' }),
        diagnostics: (t ? facts.parsed.diagnostics : []).map((d) => ({
          code: d.code,
          severity: d.severity,
          message: d.message,
          start: d.start,
          end: d.end,
        })),
      };
      o.out(`${first ? '' : ','}\n${JSON.stringify(entry)}`);
      first = false;
    }
  }
  const result = summary.result();
  // a token store that recorded a sample of its training steps, and the trainer's rate over every rollout
  const sampling = kind === 'rollouts' ? samplingOf(await storeRecording(path)) : undefined;
  const trainer = kind === 'rollouts' ? await trainerZeroStd(path) : undefined;
  if (o.json) {
    const s = { ...result, sampled: sampling ?? null, trainer_frac_zero_std: trainer ?? null };
    o.out(
      `\n],"issues":${JSON.stringify(issues.map((i) => ({ ...i, text: formatIssue(i) })))},"summary":${JSON.stringify(s)}}\n`,
    );
  } else {
    o.out(renderSummary(path, kind, result, { sampling, trainer }));
  }
  for (const i of issues.slice(0, 50)) o.err(`${formatIssue(i)}\n`);
  if (issues.length > 50) o.err(`… and ${issues.length - 50} more problems with malformed items\n`);
  // a file that could not be read (a damaged store step) is unreadable input: the summary lacks what it holds
  const unreadable = issues.filter((i) => i.unreadable).length;
  if (unreadable)
    o.err(
      `search-agent-studio: ${unreadable} ${unreadable === 1 ? 'part' : 'parts'} of ${path} could not be read (above); the summary is of the rest\n`,
    );
  // Nothing read is not a summary of anything: a script must not take an empty source (or only malformed lines) for
  // a clean one, as `audit` and `import` do not.
  if (result.trajectories === 0)
    o.err(
      `search-agent-studio: ${path} (${kind}): nothing to inspect: no trajectories were read${result.malformed ? ` (${result.malformed} malformed, above)` : kind === 'rollouts' && (await runConfigNear(path)) ? ' (the run has recorded none yet)' : ' (an empty file, or a directory without trajectories)'}\n`,
    );
  return unreadable || result.trajectories === 0 ? 2 : 0;
}

/**
 * The line that says a store recorded a sample (`audit` and `inspect`): counts and rates over the records are over
 * it, and the recorder keeps flagged groups always, so they lean toward flagged groups.
 */
export function samplingLine(s: Sampling): string {
  return `recorded ${s.recorded} of ${s.of} training rollouts (sampled) at ${s.steps} of ${s.of_steps} training steps: counts and rates below are over the sample, which always keeps flagged groups (so it leans toward them)`;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const hist = (h: Record<string, number>) =>
  Object.entries(h)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');

/** The trainer's reward/frac_zero_std_groups (over every rollout of a step), averaged over the steps that logged it. */
export async function trainerZeroStd(path: string): Promise<{ mean: number; steps: number } | undefined> {
  if (!(await runConfigNear(path))) return undefined;
  const f = (await readRunMetrics(path))
    .map((r) => r['reward/frac_zero_std_groups'])
    .filter((x): x is number => typeof x === 'number' && Number.isFinite(x));
  return f.length ? { mean: f.reduce((a, b) => a + b, 0) / f.length, steps: f.length } : undefined;
}

export function renderSummary(
  path: string,
  kind: string,
  s: RunSummary,
  run: { sampling?: Sampling; trainer?: { mean: number; steps: number } } = {},
): string {
  const lines = [
    `${path} (${kind}): ${s.trajectories} trajectories${s.malformed ? `, ${s.malformed} malformed (skipped)` : ''}`,
  ];
  // nothing read: no rates of nothing (the command says so on stderr and exits 2)
  if (s.trajectories === 0) return `${lines.join('\n')}\n`;
  if (run.sampling) lines.push(`  ${samplingLine(run.sampling)}`);
  if (s.reward)
    lines.push(
      `  reward        mean ${s.reward.mean.toFixed(3)} ± ${s.reward.std.toFixed(3)} (min ${s.reward.min}, max ${s.reward.max})`,
    );
  else lines.push('  reward        none recorded');
  lines.push(
    s.em
      ? `  exact match   ${pct(s.em.rate)} of ${s.em.count}`
      : s.without_text === s.trajectories && s.trajectories > 0
        ? '  exact match   not available (no text)'
        : '  exact match   no golden answers',
  );
  if (s.without_text)
    lines.push(
      `  text          ${s.without_text === s.trajectories ? 'none' : `none in ${s.without_text} of ${s.trajectories} trajectories`}: token ids only, no tokenizer given — nothing is read from them (pass --tokenizer)`,
    );
  const na = '  not available (no text)';
  const over = s.without_text ? ` (of the ${s.trajectories - s.without_text} with text)` : '';
  lines.push(`  valid format${s.format ? `  ${pct(s.format.rate)}${over}` : na}`);
  lines.push(
    `  searches    ${s.searches ? `  mean ${s.searches.mean.toFixed(2)}  [${hist(s.searches.histogram)}]` : na}`,
  );
  lines.push(`  turns       ${s.turns ? `  mean ${s.turns.mean.toFixed(2)}  [${hist(s.turns.histogram)}]` : na}`);
  lines.push(
    `  invalid     ${s.invalid_actions ? `  ${s.invalid_actions.total} actions in ${s.invalid_actions.trajectories} trajectories` : na}`,
  );
  if (Object.keys(s.dialects).some((d) => d !== 'searchr1')) lines.push(`  dialect       ${hist(s.dialects)}`);
  if (Object.keys(s.finish).length) lines.push(`  finish        ${hist(s.finish)}`);
  if (Object.keys(s.data_sources).length > 1 || !s.data_sources['(none)'])
    lines.push(`  data sources  ${hist(s.data_sources)}`);
  // the trainer's rate is over every rollout: it, where logged, says whether GRPO gets a learning signal
  const signal = '  ← most groups give GRPO no learning signal';
  if (s.groups) {
    const warn =
      !run.trainer && s.groups.frac_zero_std > 0.5
        ? run.sampling
          ? `${signal} (in the sample, which leans toward flagged groups; the trainer logged no reward/frac_zero_std_groups)`
          : signal
        : '';
    lines.push(
      `  GRPO groups   ${s.groups.count}${run.sampling ? ' recorded' : ''}, all rewards equal in ${s.groups.zero_variance} (${pct(s.groups.frac_zero_std)}${run.sampling ? ' of the sample' : ''})${warn}`,
    );
  }
  if (run.trainer)
    lines.push(
      `  trainer       all rewards equal in ${pct(run.trainer.mean)} of the groups (reward/frac_zero_std_groups over every rollout, mean of ${run.trainer.steps} step${run.trainer.steps === 1 ? '' : 's'})${run.trainer.mean > 0.5 ? signal : ''}`,
    );
  return `${lines.join('\n')}\n`;
}

export const inspectCommand = defineCommand({
  command: 'inspect <path>',
  describe:
    'summarise trajectories: our rollout JSONL, run directories, Search-R1 transcripts, veRL dumps, TRL completion tables, and the per-token dumps of prime-rl, NeMo-RL, miles, slime and SkyRL; Search-R1 tags or tool calls (detected unless --dialect)',
  builder: (y) =>
    withForeignOptions(
      withReadOptions(
        y
          .positional('path', {
            type: 'string',
            demandOption: true,
            describe: "a file, a run directory, or another engine's dump folder",
          })
          .option('json', {
            type: 'boolean',
            default: false,
            describe: 'one JSON object on stdout (streamed): trajectories, issues, summary',
          })
          .option('tokenizer', {
            type: 'string',
            describe:
              "the model's tokenizer (a model directory, tokenizer.json, or a model id in the Hugging Face cache): token text and roles of dumps that hold only ids",
          }),
      ),
    ),
  run: async (a, io) => {
    const read = readOptionsFromArgs(a);
    const tokenizer = a.tokenizer ? await tokenizerFromArg(a.tokenizer) : undefined;
    return withInputErrors(io, () =>
      inspect(a.path, {
        json: a.json,
        read,
        foreign: foreignOptionsFromArgs(a, tokenizer, io.err),
        out: io.out,
        err: io.err,
      }),
    );
  },
});
