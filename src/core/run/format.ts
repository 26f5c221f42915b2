/**
 * The run format (DESIGN §4.2–4.3): the rollout record (version 2; version 1 records are read as they are),
 * `run.json` (version 1), and the lines of `events.jsonl` and `metrics.jsonl`. The TypeScript types below are derived from these schemas, and
 * docs/schema/*.schema.json is generated from them (`npm run schema`; a unit test fails when it is stale).
 *
 * Readers accept fields they do not know (forward compatibility inside a version); `v` changes when a field
 * changes meaning.
 */
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../schema/bounds';
import { type Issue, S, type Static, toJsonSchema, validate } from '../schema/schema';
import { DIALECTS, type Dialect } from '../tags/parser';
import { type ResponseSpan, SPAN_ROLES, spansFromTokens, spansFromWire } from '../tags/spans';
import type { ResponseContext } from '../tags/trajectory';
import { tokenTextUnread } from './columns';
import { RunConfigSchema } from './config';
import { ENGINE_LIMITS, ENGINES } from './engines';
import { PRESETS } from './presets';

/** run.json's version. */
export const RUN_FORMAT_VERSION = 1;
/**
 * The rollout record's version, what writers (our trainer, the importers) write. 2 added `tokens.rollout_logprob` (the
 * log-prob at sampling time) beside `tokens.logprob` (the trainer's old log-prob); readers accept 1 and 2.
 */
export const ROLLOUT_RECORD_VERSION = 2;
export const ROLLOUT_RECORD_VERSIONS = [1, 2] as const;

export const TOKEN_ROLES = ['generated', 'prompt', 'retrieved', 'feedback'] as const;
export type TokenRole = (typeof TOKEN_ROLES)[number];

export const FINISH_REASONS = ['answer', 'max_turns', 'length', 'invalid'] as const;

const TOKEN_ARRAYS = [
  'ids',
  'role',
  'loss_mask',
  'rollout_logprob',
  'logprob',
  'ref_logprob',
  'advantage',
  'value',
  'entropy',
] as const;

/**
 * A per-token number, or null where that position was not scored. Records written before null was allowed hold 0
 * there instead: readers treat 0 on a token that is not `generated` as not scored when an array has no null at all
 * (src/core/inspect/replay.ts: scoredValues).
 */
const NUMBER_OR_NULL = S.union(S.number(), S.null());

export const TokensSchema = S.object(
  {
    text: S.array(S.string(), {
      description: 'Each token decoded on its own (concatenated: the prompt+response as tokenised).',
    }),
    ids: S.array(S.integer({ minimum: 0 }), { description: 'Token ids.' }),
    role: S.array(S.enum(TOKEN_ROLES), {
      description:
        'Who produced each token: the policy (generated), the prompt, the retriever, or the environment (feedback).',
    }),
    loss_mask: S.array(S.union(S.literal(0), S.literal(1)), {
      description:
        '1 where the token was in the policy loss (DESIGN §6: exactly the generated tokens, unless masking is off).',
    }),
    rollout_logprob: S.optional(
      S.array(NUMBER_OR_NULL, {
        description:
          'v2: log-probability of the token at sampling time, from the generation pass (the rollout engine’s), of the temperature-scaled distribution before top-p; null where no token was sampled (the prompt, observations).',
      }),
    ),
    logprob: S.optional(
      S.array(NUMBER_OR_NULL, {
        description:
          'Log-probability of the token under the policy that sampled it, as the trainer computed it (the old log-prob of the update); null where not scored (the prompt, tokens outside the loss).',
      }),
    ),
    ref_logprob: S.optional(
      S.array(NUMBER_OR_NULL, {
        description: 'Log-probability under the frozen reference policy; null where not scored.',
      }),
    ),
    advantage: S.optional(
      S.array(NUMBER_OR_NULL, {
        description:
          'Advantage used in the update, per token; null where advantages are not defined (the prompt; tokens outside the advantage mask).',
      }),
    ),
    value: S.optional(S.array(NUMBER_OR_NULL, { description: 'Critic value (PPO), per token; null on the prompt.' })),
    entropy: S.optional(
      S.array(NUMBER_OR_NULL, { description: 'Policy entropy at the token; null where not scored.' }),
    ),
  },
  {
    description: 'Per-token provenance and training signals. All arrays have the length of `text`.',
    refine: (t: Record<string, unknown[] | undefined>, path) => {
      const n = t.text?.length ?? 0;
      const issues: Issue[] = [];
      for (const k of TOKEN_ARRAYS) {
        const a = t[k];
        if (Array.isArray(a) && a.length !== n)
          issues.push({ path: path ? `${path}.${k}` : k, message: `has ${a.length} entries but tokens.text has ${n}` });
      }
      return issues;
    },
  },
);

export const RolloutSchema = S.object(
  {
    v: S.union(
      S.literal(1, 'Rollout record version 1.'),
      S.literal(2, 'Rollout record version 2 (adds tokens.rollout_logprob).'),
    ),
    id: S.string({ minLength: 1, description: 'Unique within the run.' }),
    step: S.optional(
      S.integer({ minimum: 0, description: 'Training step that produced it (0: before the first update).' }),
    ),
    group: S.optional(S.union(S.string(), S.integer())),
    sample: S.optional(S.integer({ minimum: 0, description: 'Index of the sample within its GRPO group.' })),
    split: S.optional(S.string({ description: '`train`, `val`, …' })),
    question: S.optional(S.string()),
    golden: S.optional(S.array(S.string(), { description: 'Golden answers.' })),
    data_source: S.optional(S.string()),
    prompt: S.string({ description: 'The prompt as fed to the policy (chat template applied).' }),
    response: S.string({ description: 'Everything after the prompt: generated text, information blocks, feedback.' }),
    dialect: S.optional(
      S.enum(
        DIALECTS,
        'How the response acts (docs/trajectory-format.md): Search-R1 tags, chat-template tool calls, or Llama JSON tool calls. Absent: detected from the prompt and response.',
      ),
    ),
    strict_actions: S.optional(
      S.boolean(
        'The run read actions strictly (rollout.strict_actions): a turn acts with its first <search> or <answer>, which must close before another opens. A reward re-scored from the record reads the answer the same way.',
      ),
    ),
    reward: S.optional(S.number()),
    reward_parts: S.optional(S.record(S.number(), 'Named components of the reward (e.g. em, format).')),
    finish: S.optional(S.enum(FINISH_REASONS, 'Why the trajectory ended.')),
    turns: S.optional(S.integer({ minimum: 0 })),
    searches: S.optional(S.integer({ minimum: 0 })),
    tokens: S.optional(TokensSchema),
    spans: S.optional(
      S.object(
        {
          v: S.literal(1, 'Spans version 1.'),
          runs: S.array(S.array(S.union(S.enum(SPAN_ROLES), S.integer({ minimum: 0 }))), {
            description: '[role, length] pairs in order; lengths in Unicode code points; they tile `response` exactly.',
          }),
        },
        {
          description:
            'Who wrote each part of `response` (the environment that built it says so): runs of `generated` (the policy), `retrieved` (documents), `feedback` (the environment’s messages) and `prompt` (chat-template text). Rewards, the parser and every instrument read actions and the answer from `generated` text only, so tags inside a document are document text (docs/rewards.md, “Who wrote what”). Without it, token roles are used when the tokens’ texts concatenate to the response; else the tags.',
        },
      ),
    ),
    meta: S.optional(S.record(S.any(), 'Anything else an importer or user keeps (source file, line, extra fields).')),
  },
  {
    description: `One trajectory: a line of rollouts/step-NNNNNN.jsonl. No field but \`tokens\` may nest deeper than ${MAX_JSON_DEPTH} levels.`,
    // Records go on to workers and webviews by structured clone, which recurses: a deep \`meta\` would kill them.
    refine: (r: Record<string, unknown>, path) => {
      const issues: Issue[] = [];
      for (const [k, v] of Object.entries(r))
        if (k !== 'tokens' && nestsDeeperThan(v, MAX_JSON_DEPTH))
          issues.push({ path: path ? `${path}.${k}` : k, message: `nested deeper than ${MAX_JSON_DEPTH} levels` });
      if (r.spans !== undefined && typeof r.response === 'string') {
        const read = spansFromWire(r.spans, r.response, path ? `${path}.spans` : 'spans');
        if ('error' in read) {
          const [field, ...rest] = read.error.split(': ');
          issues.push({ path: field!, message: rest.join(': ') });
        }
      }
      return issues;
    },
  },
);
export type Rollout = Static<typeof RolloutSchema>;
export type Tokens = Static<typeof TokensSchema>;

export const RUN_STATUSES = ['running', 'finished', 'failed', 'stopped'] as const;

export const RunJsonSchema = S.object(
  {
    v: S.literal(1),
    id: S.string({ minLength: 1 }),
    status: S.enum(RUN_STATUSES),
    created: S.string({ description: 'ISO 8601 time the run was created.' }),
    updated: S.optional(S.string({ description: 'ISO 8601 time of the last write.' })),
    engine: S.optional(S.enum(ENGINES, 'The engine that trains the run (the config’s `engine`).')),
    config: S.record(
      S.any(),
      'The run config as the trainer completed it (defaults filled in, relative paths absolute), its `builtin:` data names kept as written: a resume resolves them in its own install.',
    ),
    versions: S.optional(S.record(S.string(), 'Versions of the trainer, torch, transformers, peft, the studio, …')),
    step: S.optional(S.integer({ minimum: 0, description: 'Last completed step.' })),
    total_steps: S.optional(S.integer({ minimum: 0 })),
    pid: S.optional(S.integer({ minimum: 0 })),
    python: S.optional(
      S.string({
        description:
          'The Python the trainer runs in (its sys.executable; engines builtin and trl): a resume tries it first, so a run continues with the versions it started with.',
      }),
    ),
    error: S.optional(
      S.object({
        message: S.string(),
        traceback: S.optional(S.string()),
        rank: S.optional(
          S.integer({
            minimum: 1,
            description:
              'engine "trl" on several processes: the process whose error is the run’s, when it is not rank 0 (it failed first; rank 0 failed, or was ended, waiting for it).',
          }),
        ),
      }),
    ),
    numerics: S.optional(
      S.object(
        {
          requested: S.string({ description: 'model.dtype as configured.' }),
          dtype: S.enum(
            ['bf16', 'fp32'] as const,
            'What the run computes in: bf16 autocast over fp32 master weights, or fp32.',
          ),
          source: S.enum(
            ['config', 'device', 'no-native-bf16', 'measured', 'cached', 'checkpoint'] as const,
            'Where the choice came from: the config itself, the device (a GPU), a CPU without native bf16, a measurement now, the first measurement on this machine (the cache), or the run\u2019s own checkpoint (a resume).',
          ),
          reason: S.string(),
          seconds: S.optional(
            S.record(
              S.record(S.number()),
              'model.dtype fastest: per dtype, the seconds of one micro-batch\u2019s forward+backward (train), one decode burst (decode) and the RL step they estimate (step).',
            ),
          ),
          machine: S.optional(
            S.record(
              S.any(),
              'The CPU as measured: model, logical CPUs, physical cores, torch threads, bf16/AMX flags, torch, ISA settings, load average.',
            ),
          ),
        },
        {
          description:
            'The run\u2019s compute precision and why (model.dtype; `fastest` measures: trainer/search_agent_trainer/numerics.py).',
        },
      ),
    ),
    stop_reason: S.optional(
      S.enum(
        ['signal', 'host-gone'] as const,
        'Why a `stopped` run stopped: asked to (SIGTERM/SIGINT), or its host went away (SIGHUP, or the process that started it died: a window reload, a crash); a new window offers to resume the second.',
      ),
    ),
  },
  { description: 'runs/<id>/run.json: written atomically (write to a temporary file, then rename).' },
);
export type RunJson = Static<typeof RunJsonSchema>;

export const EVENT_KINDS = [
  'started',
  'progress',
  'step',
  'metrics',
  'checkpoint',
  'eval',
  'warning',
  'error',
  'finished',
] as const;

export const EventSchema = S.object(
  {
    event: S.enum(EVENT_KINDS),
    time: S.optional(S.union(S.string(), S.number())),
    step: S.optional(S.integer({ minimum: 0 })),
    total: S.optional(S.integer({ minimum: 0 })),
    phase: S.optional(S.enum(['warmup', 'rollout', 'reward', 'update', 'eval'] as const)),
    message: S.optional(S.string()),
  },
  {
    description: 'A line of events.jsonl, and of the trainer’s stdout (DESIGN §4.5). Other fields are event-specific.',
  },
);
export type RunEvent = Static<typeof EventSchema>;

export const MetricsSchema = S.object(
  { step: S.integer({ minimum: 0 }), time: S.optional(S.number()) },
  {
    additional: S.union(S.number(), S.null()),
    description:
      'A line of metrics.jsonl: one object per step; names follow veRL where one exists (critic/score/mean, actor/ppo_kl, …).',
  },
);
export type MetricsLine = Static<typeof MetricsSchema>;

/**
 * The GRPO group a record belongs to, keyed by its split, step and group id together: a held-out evaluation at step
 * k numbers its questions from 0 like training does (older trainers wrote the same group ids for both), so split
 * and step are part of the key in every reader. Undefined for a record without a group.
 */
export function groupKeyOf(r: { split?: string; step?: number; group?: string | number }): string | undefined {
  return r.group === undefined ? undefined : `${r.split ?? ''}\u0000${r.step ?? ''}\u0000${r.group}`;
}

/**
 * How rollouts are read: a dialect the user forces (`--dialect`, the editor setting), else each record's own
 * `dialect`, else the run config's `rollout.dialect` (`runDialect`), else detection; and the search tool's name.
 */
export interface ReadOptions {
  dialect?: Dialect | 'auto';
  runDialect?: Dialect;
  searchTool?: string;
}

/** Sets a record's `dialect` from the read options (the record was just parsed; it is changed in place). */
export function applyDialect(r: Rollout, o: ReadOptions): Rollout {
  const d = o.dialect && o.dialect !== 'auto' ? o.dialect : (r.dialect ?? o.runDialect);
  if (d !== undefined) r.dialect = d;
  return r;
}

/** What the parser needs to read a record's response in its dialect. */
export function rolloutContext(r: Rollout, o: ReadOptions = {}): ResponseContext {
  const spans = rolloutSpans(r);
  return {
    prompt: r.prompt,
    dialect: o.dialect && o.dialect !== 'auto' ? o.dialect : (r.dialect ?? o.runDialect ?? 'auto'),
    ...(o.searchTool ? { searchTool: o.searchTool } : {}),
    ...(spans ? { spans } : {}),
  };
}

/**
 * Who wrote each part of a record's response: its `spans` (written by the environment), else its token roles when the
 * response tokens' texts concatenate to the response; undefined for plain text (read by its tags).
 */
export function rolloutSpans(r: Pick<Rollout, 'response' | 'spans' | 'tokens'>): ResponseSpan[] | undefined {
  if (r.spans !== undefined) {
    const read = spansFromWire(r.spans, r.response);
    if (!('error' in read)) return read;
  }
  if (!r.tokens || tokenTextUnread(r.tokens)) return undefined; // read by its tags, as plain text (below)
  let text: readonly string[];
  try {
    text = r.tokens.text;
  } catch {
    // a token-store record read without its ids and texts (the audit's columns): read by its tags, as plain text
    return undefined;
  }
  return Array.isArray(text) && Array.isArray(r.tokens.role)
    ? spansFromTokens(r.response, text, r.tokens.role)
    : undefined;
}

/** A located problem in a file: `file:line: field: message`. */
export interface LocatedIssue {
  file: string;
  /** The line (a store row's number, from 1); 0: the file as a whole. */
  line: number;
  field: string;
  message: string;
  /** A file that could not be read (a damaged store step): what it holds was not read, not just one bad row. */
  unreadable?: true;
}

export function formatIssue(i: LocatedIssue): string {
  return `${i.file}${i.line ? `:${i.line}` : ''}: ${i.field ? `${i.field}: ` : ''}${i.message}`;
}

/** Validates one parsed rollout line; issues carry the file and line. */
export function validateRollout(value: unknown, file: string, line: number): LocatedIssue[] {
  return validate(RolloutSchema, value).map((i) => ({ file, line, field: i.path, message: i.message }));
}

/** The documents published in docs/schema/, generated from the schemas above. */
export const PUBLISHED_SCHEMAS = {
  // x-engine-limits: what each engine cannot do (src/core/run/engines.ts), for the trainer's validator; x-presets:
  // algorithm.preset's values (src/core/run/presets.ts), which the trainer applies
  'run-config.schema.json': {
    schema: RunConfigSchema,
    title: 'Search Agent Studio run config (*.run.json)',
    extra: { 'x-engine-limits': ENGINE_LIMITS, 'x-presets': PRESETS },
  },
  'rollout.schema.json': { schema: RolloutSchema, title: 'Search Agent Studio rollout record (v2; v1 accepted)' },
  'run.schema.json': { schema: RunJsonSchema, title: 'Search Agent Studio run.json (v1)' },
  'event.schema.json': { schema: EventSchema, title: 'Search Agent Studio trainer event / events.jsonl line (v1)' },
  'metrics.schema.json': { schema: MetricsSchema, title: 'Search Agent Studio metrics.jsonl line (v1)' },
} as const;

/** The JSON text of each published schema, keyed by file name (docs/schema/<name>). */
export function renderPublishedSchemas(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(PUBLISHED_SCHEMAS).map(([name, p]) => [
      name,
      `${JSON.stringify({ ...toJsonSchema(p.schema, { title: p.title }), ...('extra' in p ? p.extra : {}) }, null, 2)}\n`,
    ]),
  );
}

/** The trainer validates run configs with, and takes defaults from, its own copy of the run-config schema. */
export const TRAINER_SCHEMA_COPY = 'trainer/search_agent_trainer/run_config.schema.json';
