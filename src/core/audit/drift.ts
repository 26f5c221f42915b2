/**
 * Re-tokenisation drift (DESIGN §7): the recorded token ids against the record's text re-encoded by the model's
 * tokenizer, as a pipeline that decodes and re-tokenises would train on them. Where they differ, such a pipeline
 * trains on ids the model never sampled (veRL #6501 dropped a separator token at every tool boundary; TRL #5224).
 *
 * Two kinds: `text` — the recorded ids do not even decode to the record's text (a token dropped, added or
 * replaced); `split` — they decode to the same text but are not the tokenizer's own split (a word sampled as
 * "Par" + "is" where the tokenizer encodes "Paris"): invisible in any text view, yet a re-tokenising pipeline
 * trains on other ids and the log-probs it computes belong to a sequence that was never sampled.
 *
 * Two scopes. `segments` (the default): each run of tokens with one role (the prompt, a generated turn, an
 * observation) is re-encoded on its own, as a multi-turn rollout that keeps the sampled ids encodes them — so a
 * merge across a tool boundary (Qwen's ">\n\n" after "</search>") is not drift, and a correct record audits clean
 * unless the policy sampled a non-canonical split. `whole`: prompt + response re-encoded at once, as a pipeline that
 * decodes and re-tokenises the whole conversation would; boundary merges show up there, at every tool boundary.
 */
import type { TokenizerCodec } from '../tokens/tokenizer';

export interface Drift {
  /** First index into tokens.ids where the recorded and the re-encoded ids differ. */
  token: number;
  /** Recorded ids around it (from `from`), and the re-encoded ids over the same window. */
  recorded: number[];
  reencoded: number[];
  /** Where the window starts (an index into both). */
  from: number;
  /** `template`: the messages rendered with the chat template are not the record's text (template.ts). */
  kind: 'text' | 'split' | 'template';
}

export type DriftScope = 'segments' | 'whole';

export interface DriftOptions {
  /** Ids shown on each side of the first difference. Default 3. */
  context?: number;
  /** What is re-encoded at once: each role's run of tokens (default), or prompt + response. */
  driftScope?: DriftScope;
}

type Codec = Pick<TokenizerCodec, 'encode' | 'decode'>;

/** The first difference of two id sequences (a prefix of the other counts, at the shorter length); -1 when equal. */
export function firstDifference(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** A drift at `at`, with `context` ids each side from both sequences. */
export function driftAt(
  ids: readonly number[],
  reencoded: readonly number[],
  at: number,
  kind: Drift['kind'],
  context: number,
): Drift {
  const from = Math.max(0, at - context);
  return {
    token: at,
    recorded: ids.slice(from, at + context + 1),
    reencoded: reencoded.slice(from, at + context + 1),
    from,
    kind,
  };
}

/** The first token whose decoding leaves `text` (the ids decode to something else); -1 when they spell it exactly. */
function firstTextDifference(ids: readonly number[], text: string, codec: Codec): number {
  if (codec.decode(ids) === text) return -1;
  // the longest prefix of ids that still decodes to a prefix of text; the next token is where they part
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (text.startsWith(codec.decode(ids.slice(0, mid)))) lo = mid;
    else hi = mid - 1;
  }
  return Math.min(lo, Math.max(0, ids.length - 1));
}

/**
 * Drift of one record: `text` is what the ids stand for (prompt + response), `role` the tokens' roles (the runs
 * re-encoded in the `segments` scope). Null when re-encoding gives the recorded ids.
 */
export function findDrift(
  ids: readonly number[],
  text: string,
  codec: Codec,
  options: DriftOptions & { role?: readonly string[] } = {},
): Drift | null {
  const context = options.context ?? 3;
  const textAt = firstTextDifference(ids, text, codec);
  if (options.driftScope === 'whole' || !options.role) {
    const reencoded = codec.encode(text);
    const at = firstDifference(ids, reencoded);
    return at < 0 ? null : driftAt(ids, reencoded, at, textAt >= 0 ? 'text' : 'split', context);
  }
  const role = options.role;
  for (let start = 0; start < ids.length; ) {
    let end = start + 1;
    while (end < ids.length && role[end] === role[start]) end++;
    const run = ids.slice(start, end);
    const again = codec.encode(codec.decode(run));
    const d = firstDifference(run, again);
    if (d >= 0) {
      const at = textAt >= 0 && textAt < start + d ? textAt : start + d;
      return driftAt(
        ids,
        [...ids.slice(0, start), ...again, ...codec.encode(codec.decode(ids.slice(end)))],
        at,
        textAt >= 0 ? 'text' : 'split',
        context,
      );
    }
    if (textAt >= 0 && textAt < end) return driftAt(ids, codec.encode(text), textAt, 'text', context);
    start = end;
  }
  return textAt >= 0 ? driftAt(ids, codec.encode(text), textAt, 'text', context) : null;
}
