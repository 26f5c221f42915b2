/**
 * Re-tokenisation drift (DESIGN §7): the recorded token ids against the record's text re-encoded by the model's
 * tokenizer, as a pipeline that decodes and re-tokenises would train on them. Where they differ, such a pipeline
 * trains on ids the model never sampled (veRL #6501 dropped a separator token at every tool boundary; TRL #5224).
 *
 * Two kinds: `text` — the recorded ids do not even decode to the record's text (a token dropped, added or
 * replaced); `split` — they decode to the same text but are not the tokenizer's own split (a word sampled as
 * "Par" + "is" where the tokenizer encodes "Paris"): invisible in any text view, yet a re-tokenising pipeline
 * trains on other ids and the log-probs it computes belong to a sequence that was never sampled.
 */
import type { TokenizerCodec } from '../inspect/tokenizer';

export interface Drift {
  /** First index into tokens.ids where the recorded and the re-encoded ids differ. */
  token: number;
  /** Recorded ids around it (from `token - context`), and the re-encoded ids over the same window. */
  recorded: number[];
  reencoded: number[];
  /** Where the window starts (an index into both). */
  from: number;
  kind: 'text' | 'split';
}

export interface DriftOptions {
  /** Ids shown on each side of the first difference. Default 3. */
  context?: number;
}

/** The first difference of two id sequences (a prefix of the other counts, at the shorter length); -1 when equal. */
export function firstDifference(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** Drift of one record: `text` is what the ids stand for (prompt + response); null when re-encoding gives the same ids. */
export function findDrift(ids: readonly number[], text: string, codec: Pick<TokenizerCodec, 'encode' | 'decode'>, options: DriftOptions = {}): Drift | null {
  const reencoded = codec.encode(text);
  const at = firstDifference(ids, reencoded);
  if (at < 0) return null;
  const context = options.context ?? 3;
  const from = Math.max(0, at - context);
  return {
    token: at,
    recorded: ids.slice(from, at + context + 1),
    reencoded: reencoded.slice(from, at + context + 1),
    from,
    kind: codec.decode(ids) === text ? 'split' : 'text',
  };
}
