/**
 * One sequence of another engine's per-token dump (a *token sample*: ids, the mask the engine trained with, its
 * per-token numbers, what else it kept), and its conversion into our rollout record (DESIGN §4.3). Every reader of
 * src/core/importers/foreign yields token samples — the JSON readers here, the trainer's Python for pickles and
 * `.pt` files (trainer/search_agent_trainer/dumps.py writes the same fields as JSON lines) — so the conversion,
 * the roles and the groups are decided once.
 */

import { derivedFields, goldenList, jsonSafe } from '../../run/fields';
import {
  type LocatedIssue,
  type ReadOptions,
  ROLLOUT_RECORD_VERSION,
  type Rollout,
  rolloutContext,
  type TokenRole,
} from '../../run/format';
import { readLines } from '../../store/jsonl';
import { extractQuestion } from '../../tags/transcript';
import { type ChatMarkers, inferRoles, rolesFromMask } from './roles';

export const FOREIGN_KINDS = ['prime-rl', 'nemo-rl', 'miles', 'slime', 'skyrl'] as const;

/**
 * `meta.text` of a record whose prompt and response are its token ids written as `⟨id⟩` (read without a tokenizer,
 * from a dump that keeps no text): nothing is read from them (searches, turns, format, answer: not available).
 */
export const TOKEN_IDS_TEXT = 'token ids';
export type ForeignKind = (typeof FOREIGN_KINDS)[number];

/** Our per-token number arrays, as a token sample carries them: over the whole sequence (prompt + response). */
export const SAMPLE_ARRAYS = ['rollout_logprob', 'logprob', 'ref_logprob', 'advantage', 'value', 'entropy'] as const;
export type SampleArray = (typeof SAMPLE_ARRAYS)[number];

export interface TokenSample {
  engine: ForeignKind;
  /** Where it came from: the file, and its line (JSON lines) or its row (1-based) in a batch. */
  file: string;
  line: number;
  /** Several samples packed into one line (prime-rl): which one, from 0. */
  part?: number;
  step?: number;
  split?: string;
  /** The GRPO group when the dump says it; otherwise samples of one step with the same prompt ids form one. */
  group?: string | number;
  sample?: number;
  rank?: number;
  ids: number[];
  /** How many of `ids` are the prompt, when the dump says. */
  prompt_length?: number;
  /** The mask the engine trained with, over `ids` (0/1). */
  loss_mask?: number[];
  arrays?: Partial<Record<SampleArray, (number | null)[]>>;
  reward?: number;
  reward_parts?: Record<string, number>;
  golden?: unknown;
  prompt_text?: string;
  response_text?: string;
  finish?: Rollout['finish'];
  /** Which of the engine's own per-token arrays the dump has (for "what was found"). */
  engine_arrays?: string[];
  meta?: Record<string, unknown>;
}

/** A field of a dump that cannot be read (file and line come from the sample; the reader reports it and skips the sample). */
export class SampleError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
    this.name = 'SampleError';
  }
}

/**
 * The JSON objects of an engine's JSON-lines dump, each read by `read` (which yields what the line holds and may throw
 * a SampleError); a line that is not JSON, not an object, or a SampleError is an issue (file, line, field) and the
 * rest go on. `what` names the line expected ("a prime-rl token export line").
 */
export async function* readJsonLines<T>(
  file: string,
  what: string,
  read: (o: Record<string, unknown>, line: number) => Iterable<T>,
): AsyncGenerator<T | { issues: LocatedIssue[] }> {
  for await (const { line, text } of readLines(file)) {
    let o: unknown;
    try {
      o = JSON.parse(text);
    } catch (e) {
      yield { issues: [{ file, line, field: '', message: `invalid JSON: ${(e as Error).message}` }] };
      continue;
    }
    if (typeof o !== 'object' || o === null || Array.isArray(o)) {
      yield { issues: [{ file, line, field: '', message: `expected a JSON object (${what})` }] };
      continue;
    }
    try {
      yield* read(o as Record<string, unknown>, line);
    } catch (e) {
      if (!(e instanceof SampleError)) throw e;
      yield { issues: [{ file, line, field: e.field, message: e.message }] };
    }
  }
}

/** The tokenizer a conversion decodes with (a TokenizerCodec), and the chat template's markers. */
export interface SampleCodec {
  name: string;
  decode(ids: readonly number[]): string;
  markers?: ChatMarkers;
}

export interface ConvertOptions {
  codec?: SampleCodec;
  read?: ReadOptions;
}

/** Per-token decoding, cached by id (a dump repeats a vocabulary of a few thousand ids millions of times). */
export class PieceCache {
  private readonly cache = new Map<number, string>();
  constructor(private readonly codec: SampleCodec) {}
  piece(id: number): string {
    let p = this.cache.get(id);
    if (p === undefined) {
      p = this.codec.decode([id]);
      this.cache.set(id, p);
    }
    return p;
  }
}

function fnv1a(ids: readonly number[]): string {
  let h = 0x811c9dc5;
  for (const id of ids) {
    h ^= id & 0xffff;
    h = Math.imul(h, 0x01000193);
    h ^= id >>> 16;
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

/**
 * Groups for dumps that do not say them: GRPO samples one prompt n times, so within a step (and split) the samples
 * with the same prompt ids are one group. Numbered by first appearance; samples numbered within their group.
 */
export class GroupKeeper {
  private readonly groups = new Map<string, { id: string; n: number }>();
  assign(s: TokenSample, promptIds: readonly number[]): { group: string | number; sample: number } {
    const key =
      s.group !== undefined
        ? `g\u0000${s.split ?? ''}\u0000${s.step ?? ''}\u0000${s.group}`
        : `p\u0000${s.split ?? ''}\u0000${s.step ?? ''}\u0000${fnv1a(promptIds)}\u0000${promptIds.length}`;
    let g = this.groups.get(key);
    if (!g) {
      g = { id: s.group !== undefined ? String(s.group) : `${s.step ?? 'x'}:p${fnv1a(promptIds)}`, n: 0 };
      this.groups.set(key, g);
    }
    const sample = s.sample ?? g.n;
    g.n++;
    return { group: s.group ?? g.id, sample };
  }
}

const isBit = (x: unknown) => x === 0 || x === 1;

function checkSample(s: TokenSample): void {
  if (!Array.isArray(s.ids) || s.ids.length === 0)
    throw new SampleError('ids', 'expected a non-empty list of token ids');
  for (let i = 0; i < s.ids.length; i++) {
    const id = s.ids[i];
    if (!Number.isInteger(id) || (id as number) < 0)
      throw new SampleError(`ids[${i}]`, `expected a token id (an integer ≥ 0), got ${JSON.stringify(id)}`);
  }
  const n = s.ids.length;
  if (s.loss_mask) {
    if (s.loss_mask.length !== n)
      throw new SampleError('loss_mask', `has ${s.loss_mask.length} entries but there are ${n} token ids`);
    const bad = s.loss_mask.findIndex((m) => !isBit(m));
    if (bad >= 0)
      throw new SampleError(`loss_mask[${bad}]`, `expected 0 or 1, got ${JSON.stringify(s.loss_mask[bad])}`);
  }
  for (const [k, a] of Object.entries(s.arrays ?? {})) {
    if (!a) continue;
    if (a.length !== n) throw new SampleError(k, `has ${a.length} entries but there are ${n} token ids`);
    const bad = a.findIndex((x) => x !== null && (typeof x !== 'number' || !Number.isFinite(x)));
    if (bad >= 0) throw new SampleError(`${k}[${bad}]`, `expected a number or null, got ${JSON.stringify(a[bad])}`);
  }
  if (
    s.prompt_length !== undefined &&
    !(Number.isInteger(s.prompt_length) && s.prompt_length >= 0 && s.prompt_length <= n)
  )
    throw new SampleError('prompt_length', `expected an integer in [0, ${n}], got ${JSON.stringify(s.prompt_length)}`);
}

const round6 = (x: number | null) => (x === null ? null : Math.round(x * 1e6) / 1e6);

/**
 * Our rollout record for a token sample. Roles are read from the text with a tokenizer (roles.ts), else restated
 * from the mask; `loss_mask` is the dump's (what the engine trained with); numbers are null where the dump's mask
 * is 0 (the engine did not score them) and, for `rollout_logprob`, where the token was not generated.
 */
export function recordOfSample(
  s: TokenSample,
  groups: GroupKeeper,
  o: ConvertOptions = {},
  pieces?: PieceCache,
): Rollout {
  checkSample(s);
  const n = s.ids.length;
  const mask = s.loss_mask ?? s.ids.map((_, i) => (s.prompt_length !== undefined && i >= s.prompt_length ? 1 : 0));
  const firstTrained = mask.indexOf(1);
  const promptEnd = s.prompt_length ?? (firstTrained < 0 ? n : firstTrained);
  let roles: TokenRole[];
  let text: string[];
  let how: string;
  let promptTokens: number;
  let prompt: string;
  let response: string;
  if (o.codec) {
    const cache = pieces ?? new PieceCache(o.codec);
    text = s.ids.map((id) => cache.piece(id));
    const inferred = inferRoles(text, o.codec.markers, promptEnd);
    roles = inferred.roles;
    how = `${inferred.how} (${o.codec.name})`;
    // The prompt: up to the first token that is not the prompt's (the chat template's first assistant turn).
    let p = roles.findIndex((r) => r !== 'prompt');
    if (p < 0) p = n;
    prompt = o.codec.decode(s.ids.slice(0, p));
    response = o.codec.decode(s.ids.slice(p));
    promptTokens = p;
  } else {
    roles = rolesFromMask(mask, promptEnd);
    text = s.ids.map((id) => `⟨${id}⟩`);
    how = 'loss mask (no tokenizer)';
    prompt = s.prompt_text ?? text.slice(0, promptEnd).join('');
    response = s.response_text ?? text.slice(promptEnd).join('');
    promptTokens = promptEnd;
  }
  const tokens: NonNullable<Rollout['tokens']> = {
    text,
    ids: s.ids,
    role: roles,
    loss_mask: mask.map((m) => (m ? 1 : 0)),
  };
  for (const k of Object.keys(s.arrays ?? {}) as SampleArray[]) {
    const a = s.arrays![k];
    if (!a) continue;
    tokens[k] = a.map((x, i) =>
      mask[i] === 1 || (k === 'rollout_logprob' && roles[i] === 'generated') || (k === 'value' && i >= promptTokens)
        ? round6(x)
        : null,
    );
  }
  const { group, sample } = groups.assign(s, s.ids.slice(0, promptEnd));
  const id = `${s.engine}:${s.split ?? 'train'}:${s.step ?? 'x'}:${s.rank ?? 0}:${s.line}${s.part !== undefined ? `.${s.part}` : ''}`;
  const question = extractQuestion(prompt);
  const golden = s.golden !== undefined ? goldenList(s.golden) : [];
  const rec: Rollout = {
    v: ROLLOUT_RECORD_VERSION,
    id,
    ...(s.step !== undefined ? { step: Math.max(0, Math.trunc(s.step)) } : {}),
    group,
    sample,
    split: s.split ?? 'train',
    ...(question ? { question } : {}),
    ...(golden.length ? { golden } : {}),
    prompt,
    response,
    ...(s.reward !== undefined && Number.isFinite(s.reward) ? { reward: s.reward } : {}),
    ...(s.reward_parts && Object.keys(s.reward_parts).length ? { reward_parts: s.reward_parts } : {}),
    // searches, turns, finish read from the text (there is none without a tokenizer, unless the dump kept it)
    ...(o.codec || s.response_text !== undefined
      ? derivedFields(response, rolloutContext({ v: 1, id: '', prompt, response }, o.read))
      : {}),
    ...(s.finish ? { finish: s.finish } : {}),
    tokens,
    meta: {
      source: s.file,
      line: s.line,
      ...(s.part !== undefined ? { part: s.part } : {}),
      engine: s.engine,
      roles: how,
      ...(!o.codec && s.response_text === undefined ? { text: TOKEN_IDS_TEXT } : {}),
      ...(s.engine_arrays ? { engine_arrays: s.engine_arrays } : {}),
      ...(s.meta ? (jsonSafe(s.meta) as Record<string, unknown>) : {}),
    },
  };
  return rec;
}

/**
 * A record whose roles restate its engine's mask (the drop-in recorders' records of a loop of the user's own:
 * `meta.roles` "engine loss mask (…)") with roles read from the text instead (roles.ts), when a tokenizer is given;
 * other records are returned as they are.
 */
export function withInferredRoles(r: Rollout, codec: SampleCodec, pieces?: PieceCache): Rollout {
  const how = r.meta?.roles;
  const tk = r.tokens;
  if (!tk || typeof how !== 'string' || !how.startsWith('engine loss mask')) return r;
  const cache = pieces ?? new PieceCache(codec);
  const text = tk.ids.map((id) => cache.piece(id));
  let promptEnd = tk.role.findIndex((x) => x !== 'prompt');
  if (promptEnd < 0) promptEnd = tk.ids.length;
  const inferred = inferRoles(text, codec.markers, promptEnd);
  return {
    ...r,
    tokens: { ...tk, role: inferred.roles },
    meta: { ...r.meta, roles: `${inferred.how} (${codec.name})`, roles_recorded: how },
  };
}
