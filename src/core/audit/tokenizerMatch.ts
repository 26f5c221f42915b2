/**
 * Whether a tokenizer can be the one a run's rollouts were tokenised with (issue 44): the drift check re-encodes a
 * record's text and compares ids, so the wrong tokenizer reports "drift at token 0" on every rollout — false drift.
 * A tokenizer that cannot be the run's is reported as such ("tokenizer does not match this run: …"), and drift is
 * then not checked. It cannot be the run's when:
 *
 * - its vocabulary is larger than the run's model's (`vocab_size` of the model's config.json, or the tiny policy's
 *   pieces): the model has no embedding for its top ids;
 * - a recorded id lies outside its vocabulary;
 * - a recorded token whose text is one of its special or added tokens (`<|im_end|>`, `<think>`, the tiny policy's
 *   `<search>`) has another id than that token's;
 * - most recorded token texts (`tokens.text`) are not what it decodes their ids to (the first 512 tokens compared).
 *
 * A record with neither token texts nor out-of-range ids or specials gives no verdict (undefined): drift is checked.
 */

import type { Rollout } from '../run/format';
import type { TokenizerCodec } from '../tokens/tokenizer';

type Codec = Pick<TokenizerCodec, 'name' | 'decode' | 'vocabSize' | 'specials' | 'tokenText'>;

/** Token texts compared at most, and the share of them that must differ for a mismatch. */
const COMPARED = 512;
const DIFFERING = 0.5;

/** Why `codec` cannot have tokenised `r` (a sentence), or undefined when nothing says so. */
export function tokenizerMismatch(codec: Codec, r: Pick<Rollout, 'tokens'>, runVocab?: number): string | undefined {
  if (runVocab !== undefined && codec.vocabSize !== undefined && codec.vocabSize > runVocab)
    return `its vocabulary has ${codec.vocabSize.toLocaleString('en-US')} ids, the run's model ${runVocab.toLocaleString('en-US')}`;
  const tk = r.tokens;
  if (!tk?.ids?.length) return undefined;
  const ids = tk.ids;
  if (codec.vocabSize !== undefined) {
    const bad = ids.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= codec.vocabSize!);
    if (bad >= 0)
      return `token ${bad}'s id ${ids[bad]} is outside its vocabulary (${codec.vocabSize.toLocaleString('en-US')} ids)`;
  }
  const text = Array.isArray(tk.text) && tk.text.length === ids.length ? tk.text : undefined;
  if (text && codec.specials?.size) {
    for (let i = 0; i < ids.length; i++) {
      const sid = codec.specials.get(text[i]!);
      if (sid !== undefined && sid !== ids[i])
        return `the run recorded ${JSON.stringify(text[i])} as id ${ids[i]} (token ${i}); this tokenizer's ${JSON.stringify(text[i])} is id ${sid}`;
    }
  }
  if (text) {
    const pieceOf = codec.tokenText ?? ((id: number) => codec.decode([id]));
    const n = Math.min(ids.length, COMPARED);
    let differ = 0;
    let first = -1;
    for (let i = 0; i < n; i++) {
      if (pieceOf(ids[i]!) === text[i]) continue;
      differ++;
      if (first < 0) first = i;
    }
    if (n >= 4 && differ > DIFFERING * n)
      return `${differ} of ${n} recorded token texts are not its pieces for their ids (token ${first}: id ${ids[first]} is ${JSON.stringify(pieceOf(ids[first]!))} here, the run recorded ${JSON.stringify(text[first])})`;
  }
  return undefined;
}

/** The note shown where drift is not checked because the tokenizer is not the run's. */
export function mismatchNote(codec: Pick<TokenizerCodec, 'name'>, why: string): string {
  return `drift not checked: tokenizer does not match this run (${codec.name}: ${why})`;
}
