/**
 * A tokenizer for replaying token-less rollouts token by token: a model directory's `tokenizer.json` (and
 * `tokenizer_config.json` beside it when present) through `@huggingface/tokenizers`, the maintained JS port of
 * Hugging Face's tokenizers. Each token's text is its own decoding, so byte-level pieces of a multi-byte
 * character may show as replacement characters — the ids are exact.
 */
import { readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import type { TextTokenizer } from './replay';

export async function loadTextTokenizer(file: string): Promise<{ name: string; tokenize: TextTokenizer }> {
  let json: object;
  try {
    json = JSON.parse(await readFile(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
  const config = await readFile(join(dirname(file), 'tokenizer_config.json'), 'utf8').then(JSON.parse, () => ({}));
  let tok: Tokenizer;
  try {
    tok = new Tokenizer(json, config);
  } catch (e) {
    throw new Error(`${file}: not a tokenizer.json this library reads (${(e as Error).message})`);
  }
  const name = `${basename(dirname(file))}/${basename(file)}`;
  return {
    name,
    tokenize: (text) => {
      const ids = tok.encode(text, { add_special_tokens: false }).ids.map(Number);
      return { ids, text: ids.map((id) => tok.decode([id], { skip_special_tokens: false })) };
    },
  };
}
