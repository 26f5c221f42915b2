/**
 * `search-agent-studio inspect <file|run-dir> [--json] [--dialect D]`: a summary of any trajectory source we
 * read. With `--json`, one JSON object on stdout, streamed (a big run is not held in memory): `source`, `kind`,
 * `trajectories` (per trajectory: id, dialect, question, searches, answer, invalid_actions, diagnostics, …),
 * `issues` (malformed items, each with file, line and field) and `summary`.
 */
import type { Argv } from 'yargs';
import { type RunSummary, SummaryBuilder, trajectoryFacts } from '../core/audit/summary';
import { detectSource, readSource } from '../core/importers';
import type { ForeignOptions } from '../core/importers/foreign';
import { resolveTokenizer } from '../core/importers/foreign/tokenizer';
import { formatIssue, type LocatedIssue, type ReadOptions } from '../core/run/format';
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
  if (o.json) {
    o.out(
      `\n],"issues":${JSON.stringify(issues.map((i) => ({ ...i, text: formatIssue(i) })))},"summary":${JSON.stringify(result)}}\n`,
    );
  } else {
    o.out(renderSummary(path, kind, result));
  }
  for (const i of issues.slice(0, 50)) o.err(`${formatIssue(i)}\n`);
  if (issues.length > 50) o.err(`… and ${issues.length - 50} more malformed items\n`);
  return 0;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const hist = (h: Record<string, number>) =>
  Object.entries(h)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');

export function renderSummary(path: string, kind: string, s: RunSummary): string {
  const lines = [
    `${path} (${kind}): ${s.trajectories} trajectories${s.malformed ? `, ${s.malformed} malformed (skipped)` : ''}`,
  ];
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
  if (s.groups) {
    const warn = s.groups.frac_zero_std > 0.5 ? '  ← most groups give GRPO no learning signal' : '';
    lines.push(
      `  GRPO groups   ${s.groups.count}, all rewards equal in ${s.groups.zero_variance} (${pct(s.groups.frac_zero_std)})${warn}`,
    );
  }
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
