/**
 * Tokenizers, for replaying token-less rollouts token by token and for the drift check: a model directory's
 * `tokenizer.json` (and `tokenizer_config.json` beside it when present) through `@huggingface/tokenizers`, the
 * maintained JS port of Hugging Face's tokenizers, or the built-in tiny policy's word-level tokenizer as its
 * checkpoints save it (`{"kind": "tiny-word", "pieces": […]}`; trainer/search_agent_trainer/tiny.py). Each token's
 * text is its own decoding, so byte-level pieces of a multi-byte character may show as replacement characters — the
 * ids are exact.
 *
 * The drift check's tokenizer is chosen per run ({@link runTokenizer}): the run's own (its model directory's, or the
 * tiny policy's from its checkpoint), else one named for the files' folder (the `searchAgent.audit.tokenizer`
 * setting) or on the command line. One that cannot be the run's — ids outside its vocabulary, special tokens at other
 * ids, token texts that are not its pieces, a vocabulary larger than the run's model — is reported as not matching
 * the run (src/core/audit/tokenizerMatch.ts), never as drift.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { runConfigNear, runModelDir } from '../store/rollouts';

/** Splits text into tokens (a tokenizer chosen by the user; the replay's, for token-less rollouts). */
export type TextTokenizer = (text: string) => { text: string[]; ids: number[] };

/** A model's tokenizer: encode and decode exactly as the model's pipeline would (no special tokens added). */
export interface TokenizerCodec {
  /** `<model dir>/tokenizer.json`, for messages. */
  name: string;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  /** `chat_template` of tokenizer_config.json, when it has one. */
  chatTemplate?: string;
  /** How many ids it has (its ids are 0 … vocabSize − 1, added tokens included). */
  vocabSize?: number;
  /** Its special and added tokens (`<|im_end|>`, `<think>`; the tiny policy's tags): text → id. */
  specials?: ReadonlyMap<string, number>;
  /** One token's text as the trainer records it in `tokens.text` (default: the id decoded alone). */
  tokenText?(id: number): string;
}

/** The tiny policy's specials and tags, its first ids (tiny.py SPECIALS + TAGS). */
const TINY_SPECIALS = ['<pad>', '<eos>', '<bos>', '<unk>'];
const TINY_TAG = '</?(?:think|search|information|answer)>';
/** Python's `\s` over str (str.isspace): JS's `\s` without U+FEFF, with U+001C–U+001F and U+0085. */
const PY_SPACE = '\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
/**
 * tiny.py's PIECE_RE (`TAG| ?[^\W\d_]+| ?\d+| ?_| ?(?!TAG)[^\w\s]|\s+(?!\S)|\s+`, Python `re` over str) in JS: Python's
 * Unicode `\w` is letters and numbers (Nd, Nl, No) and `_`, its `\d` the decimal digits (Nd).
 */
const TINY_PIECE = new RegExp(
  `${TINY_TAG}| ?[\\p{L}\\p{Nl}\\p{No}]+| ?\\p{Nd}+| ?_| ?(?!${TINY_TAG})[^\\p{L}\\p{N}_${PY_SPACE}]|[${PY_SPACE}]+(?![^${PY_SPACE}])|[${PY_SPACE}]+`,
  'gu',
);

/**
 * The tiny policy's tokenizer (tiny.py TinyTokenizer): pieces split as its PIECE_RE splits, a piece not in the
 * vocabulary as its characters (`<unk>` for an unknown one); decoding drops `<pad>`, `<eos>` and `<bos>`.
 */
export function tinyCodec(pieces: readonly string[], name: string): TokenizerCodec {
  const index = new Map<string, number>();
  pieces.forEach((p, i) => index.set(p, i));
  const [pad, eos, bos, unk] = TINY_SPECIALS.map((t) => index.get(t));
  if (unk === undefined) throw new Error(`${name}: not a tiny-word tokenizer (no <unk> piece)`);
  const specials = new Map<string, number>();
  for (const p of pieces.slice(0, 12))
    if (TINY_SPECIALS.includes(p) || new RegExp(`^${TINY_TAG}$`).test(p)) specials.set(p, index.get(p)!);
  return {
    name,
    encode: (text) => {
      const ids: number[] = [];
      for (const piece of text.match(TINY_PIECE) ?? []) {
        const i = index.get(piece);
        if (i !== undefined) ids.push(i);
        else for (const ch of piece) ids.push(index.get(ch) ?? unk);
      }
      return ids;
    },
    decode: (ids) => ids.map((i) => (i === pad || i === eos || i === bos ? '' : (pieces[i] ?? ''))).join(''),
    vocabSize: pieces.length,
    specials,
    tokenText: (i) => pieces[i] ?? '',
  };
}

/** Opens a `tokenizer.json` (a file, or a directory holding one) with the `tokenizer_config.json` beside it. */
export async function loadTokenizerCodec(path: string): Promise<TokenizerCodec> {
  const file = (await stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  ))
    ? join(path, 'tokenizer.json')
    : path;
  let json: object;
  try {
    json = JSON.parse(await readFile(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
  const name = `${basename(dirname(file))}/${basename(file)}`;
  const tiny = json as { kind?: unknown; pieces?: unknown };
  if (tiny.kind === 'tiny-word') {
    if (!Array.isArray(tiny.pieces) || !tiny.pieces.every((p) => typeof p === 'string'))
      throw new Error(`${file}: a tiny-word tokenizer without its pieces`);
    return tinyCodec(tiny.pieces as string[], name);
  }
  const config = await readFile(join(dirname(file), 'tokenizer_config.json'), 'utf8').then(JSON.parse, () => ({}));
  let tok: Tokenizer;
  try {
    tok = new Tokenizer(json, config);
  } catch (e) {
    throw new Error(`${file}: not a tokenizer.json this library reads (${(e as Error).message})`);
  }
  const template = (config as { chat_template?: unknown }).chat_template;
  let vocabSize = 0;
  for (const id of tok.get_vocab(true).values()) vocabSize = Math.max(vocabSize, Number(id) + 1);
  const specials = new Map<string, number>();
  for (const [id, t] of tok.get_added_tokens_decoder()) specials.set(t.content, Number(id));
  const decode = (ids: readonly number[]) => (ids.length ? tok.decode([...ids], { skip_special_tokens: false }) : '');
  return {
    name,
    encode: (text) => tok.encode(text, { add_special_tokens: false }).ids.map(Number),
    decode,
    ...(typeof template === 'string' ? { chatTemplate: template } : {}),
    vocabSize,
    specials,
    tokenText: (id) => decode([id]),
  };
}

/** The newest checkpoint's tokenizer.json of a run directory (the tiny policy saves its vocabulary with each). */
async function checkpointTokenizer(runDir: string): Promise<string | undefined> {
  const names = await readdir(join(runDir, 'checkpoints')).catch(() => [] as string[]);
  const steps = names.filter((n) => /^step-\d+$/.test(n)).sort((a, b) => Number(b.slice(5)) - Number(a.slice(5)));
  for (const n of steps) {
    const file = join(runDir, 'checkpoints', n, 'tokenizer.json');
    if (
      await stat(file).then(
        (st) => st.isFile(),
        () => false,
      )
    )
      return file;
  }
  return undefined;
}

/** Where a drift tokenizer came from: the run's own model, or named (a setting, `--tokenizer`). */
export type TokenizerSource = 'run' | 'named';

/**
 * The vocabulary size of the run `path` is or lies in, when it says: its model directory's config.json `vocab_size`
 * (the embedding rows: a tokenizer with more ids cannot be this model's), or the tiny policy's pieces.
 */
export async function runVocabSize(path: string): Promise<number | undefined> {
  const model = await runModelDir(path);
  if (model) {
    const v = await readFile(join(model, 'config.json'), 'utf8').then(
      (t) => (JSON.parse(t) as { vocab_size?: unknown }).vocab_size,
      () => undefined,
    );
    return typeof v === 'number' && v > 0 ? v : undefined;
  }
  const run = await runConfigNear(path);
  const file =
    run && (run.config.model as { kind?: unknown } | undefined)?.kind === 'tiny'
      ? await checkpointTokenizer(run.dir)
      : undefined;
  if (!file) return undefined;
  const pieces = await readFile(file, 'utf8').then(
    (t) => (JSON.parse(t) as { pieces?: unknown }).pieces,
    () => undefined,
  );
  return Array.isArray(pieces) ? pieces.length : undefined;
}

/**
 * The drift check's tokenizer for the rollouts at `path` (a run directory, a file in one, or a rollout file of no
 * run), chosen per run: the run's own — its model directory's tokenizer.json (run.json `config.model.path`), or for
 * the tiny policy (`config.model.kind: "tiny"`) the vocabulary its newest checkpoint saved — else `named` (the
 * `searchAgent.audit.tokenizer` setting of the files' folder), else none, with a note saying why drift is not checked.
 * A named tokenizer is still checked against the records (tokenizerMatch.ts): it may not be the run's. `pending`: the
 * run's own will come (a tiny-policy run before its first checkpoint).
 */
export async function runTokenizer(
  path: string,
  named?: string,
): Promise<{ codec?: TokenizerCodec; note?: string; source?: TokenizerSource; pending?: boolean }> {
  const fromNamed = async (why: string) => {
    if (!named) return { note: `drift not checked: ${why}` };
    try {
      return { codec: await loadTokenizerCodec(named), source: 'named' as const };
    } catch (e) {
      return { note: `drift not checked: ${(e as Error).message}` };
    }
  };
  const model = await runModelDir(path);
  if (model && (await stat(join(model, 'tokenizer.json')).catch(() => undefined))) {
    try {
      return { codec: await loadTokenizerCodec(model), source: 'run' };
    } catch (e) {
      return fromNamed(`the run's tokenizer cannot be read (${(e as Error).message})`);
    }
  }
  const run = await runConfigNear(path);
  if (run && !model && (run.config.model as { kind?: unknown } | undefined)?.kind === 'tiny') {
    const file = await checkpointTokenizer(run.dir);
    if (file) {
      try {
        const codec = await loadTokenizerCodec(file);
        return { codec: { ...codec, name: `the tiny policy's tokenizer (${basename(dirname(file))})` }, source: 'run' };
      } catch (e) {
        return fromNamed(`the tiny policy's tokenizer cannot be read (${(e as Error).message})`);
      }
    }
    return {
      ...(await fromNamed("the tiny policy's tokenizer is saved with the run's first checkpoint, and it has none yet")),
      pending: true,
    };
  }
  return fromNamed('no tokenizer (none named, and no run whose model directory has a tokenizer.json)');
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
