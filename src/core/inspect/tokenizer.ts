/**
 * A tokenizer for replaying token-less rollouts token by token: a model directory's `tokenizer.json` (and
 * `tokenizer_config.json` beside it when present) through `@huggingface/tokenizers`, the maintained JS port of
 * Hugging Face's tokenizers. Each token's text is its own decoding, so byte-level pieces of a multi-byte
 * character may show as replacement characters — the ids are exact.
 */
import { readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { runModelDir } from '../store/rollouts';
import type { TextTokenizer } from './replay';

/** A model's tokenizer: encode and decode exactly as the model's pipeline would (no special tokens added). */
export interface TokenizerCodec {
  /** `<model dir>/tokenizer.json`, for messages. */
  name: string;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  /** `chat_template` of tokenizer_config.json, when it has one. */
  chatTemplate?: string;
}

/** Opens a `tokenizer.json` (a file, or a directory holding one) with the `tokenizer_config.json` beside it. */
export async function loadTokenizerCodec(path: string): Promise<TokenizerCodec> {
  const file = (await stat(path).then((s) => s.isDirectory(), () => false)) ? join(path, 'tokenizer.json') : path;
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
  const template = (config as { chat_template?: unknown }).chat_template;
  return {
    name: `${basename(dirname(file))}/${basename(file)}`,
    encode: (text) => tok.encode(text, { add_special_tokens: false }).ids.map(Number),
    decode: (ids) => (ids.length ? tok.decode([...ids], { skip_special_tokens: false }) : ''),
    ...(typeof template === 'string' ? { chatTemplate: template } : {}),
  };
}

/**
 * The tokenizer of the run `path` is or lies in (its model directory's tokenizer.json), for the drift check of the
 * audit and the inspector; otherwise a note saying why drift is not checked.
 */
export async function runTokenizer(path: string): Promise<{ codec?: TokenizerCodec; note?: string }> {
  const model = await runModelDir(path);
  if (!model || !(await stat(join(model, 'tokenizer.json')).catch(() => undefined))) return { note: 'drift not checked: no tokenizer (none named, and no run whose model directory has a tokenizer.json)' };
  try {
    return { codec: await loadTokenizerCodec(model) };
  } catch (e) {
    return { note: `drift not checked: the run's tokenizer cannot be read (${(e as Error).message})` };
  }
}

export async function loadTextTokenizer(file: string): Promise<{ name: string; tokenize: TextTokenizer }> {
  const codec = await loadTokenizerCodec(file);
  return {
    name: codec.name,
    tokenize: (text) => {
      const ids = codec.encode(text);
      return { ids, text: ids.map((id) => codec.decode([id])) };
    },
  };
}
