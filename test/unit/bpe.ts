/**
 * A real byte-level BPE tokenizer (GPT-2's byte-to-unicode alphabet, its pre-tokenising regex, ChatML special
 * tokens), written as a `tokenizer.json` that `@huggingface/tokenizers` loads: the 256 byte symbols, then for each
 * word its left-to-right merges in the order given (earlier words' merges rank first), then the special tokens.
 * Small enough to reason about which split is canonical: "Paris" is one token even when "is" is also one.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Rollout, TokenRole } from '../../src/core/run/format';
import type { TokenizerCodec } from '../../src/core/tokens/tokenizer';

/** GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards. */
export function byteAlphabet(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out: string[] = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = keep.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  return out;
}

export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];

/** tokenizer.json for `words` (each as it appears after pre-tokenising, e.g. " Paris" with its space). */
/** Qwen2's pre-tokenising regex (its `(?i:…)` contractions written out): punctuation keeps the newlines after it (">\\n\\n"). */
export const QWEN2_SPLIT =
  "'s|'t|'re|'ve|'m|'ll|'d|'S|'T|'RE|'VE|'M|'LL|'D|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

export function byteLevelBpeJson(words: readonly string[], split: 'gpt2' | 'qwen2' = 'gpt2'): object {
  const alphabet = byteAlphabet();
  const vocab: Record<string, number> = {};
  for (const s of alphabet) vocab[s] = Object.keys(vocab).length;
  const merges: string[] = [];
  for (const w of words) {
    const symbols = [...Buffer.from(w, 'utf8')].map((b) => alphabet[b]!);
    let left = symbols[0]!;
    for (const s of symbols.slice(1)) {
      const merged = left + s;
      if (vocab[merged] === undefined) {
        vocab[merged] = Object.keys(vocab).length;
        merges.push(`${left} ${s}`);
      }
      left = merged;
    }
  }
  const added = SPECIAL_TOKENS.map((content, k) => ({
    id: Object.keys(vocab).length + k,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer:
      split === 'gpt2'
        ? { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }
        : {
            type: 'Sequence',
            pretokenizers: [
              { type: 'Split', pattern: { Regex: QWEN2_SPLIT }, behavior: 'Isolated', invert: false },
              { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
            ],
          },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
}

/** Writes a model directory with tokenizer.json (and tokenizer_config.json with a chat template when given). */
export function writeTokenizerDir(
  dir: string,
  words: readonly string[],
  o: { chatTemplate?: string; split?: 'gpt2' | 'qwen2' } = {},
): string {
  const chatTemplate = o.chatTemplate;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(byteLevelBpeJson(words, o.split)));
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({ eos_token: '<|im_end|>', ...(chatTemplate ? { chat_template: chatTemplate } : {}) }),
  );
  return dir;
}

/** A record whose tokens are the given pieces, each encoded on its own (so pieces may split words non-canonically). */
export function recordOf(
  codec: TokenizerCodec,
  prompt: string,
  pieces: { text: string; role: TokenRole }[],
  extra: Partial<Rollout> = {},
): Rollout {
  const ids: number[] = [];
  const role: TokenRole[] = [];
  for (const p of [{ text: prompt, role: 'prompt' as TokenRole }, ...pieces]) {
    const e = codec.encode(p.text);
    ids.push(...e);
    role.push(...e.map(() => p.role));
  }
  const response = pieces.map((p) => p.text).join('');
  return {
    v: 2,
    id: 'r',
    prompt,
    response,
    tokens: {
      text: ids.map((i) => codec.decode([i])),
      ids,
      role,
      loss_mask: role.map((r) => (r === 'generated' ? 1 : 0)),
    },
    ...extra,
  };
}
