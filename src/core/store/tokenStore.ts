/**
 * The token store (docs/run-format.md#the-token-store): a run's rollouts as typed, compressed columns in Apache
 * Parquet, one directory per step, committed by renaming it whole. The Python writer is
 * trainer/search_agent_trainer/token_store.py; this module reads the same layout (and writes it, for converters).
 *
 *     rollouts/step-000042/rollouts.parquet   one row per rollout: its fields, tokens_offset, tokens_count, arrays
 *     rollouts/step-000042/tokens.parquet     one row per token: ids, role, loss_mask, the numbers (float32, NaN = null)
 *     rollouts/step-000042/vocab.parquet      id → text of the ids the step uses (or a `text` column in tokens)
 *
 * Reading: hyparquet, pages decompressed by Node's own brotli. A step's rollouts are read by row groups (256
 * rollouts; a tokens row group holds whole rollouts, ~128k tokens), decoded columns kept in a small cache, so a scan
 * reads each page once and one rollout reads one row group. Token arrays become the record's plain arrays only when
 * a reader touches them (a getter per array), so the audit's pass never builds the arrays it does not read.
 */

import { randomBytes } from 'node:crypto';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import * as zlib from 'node:zlib';
import { type AsyncBuffer, type FileMetaData, parquetMetadataAsync, parquetRead } from 'hyparquet';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { TOKEN_COLUMNS, TOKEN_TEXT_UNREAD, type TokenColumnsView } from '../run/columns';
import { type LocatedIssue, type Rollout, TOKEN_ROLES, type Tokens, validateRollout } from '../run/format';

export const STORE_VERSION = 1;
export const STORE_FILES = { rollouts: 'rollouts.parquet', tokens: 'tokens.parquet', vocab: 'vocab.parquet' } as const;
/** The per-token numbers, float32 in the store (NaN where the record holds null). */
export const FLOAT_ARRAYS = ['rollout_logprob', 'logprob', 'ref_logprob', 'advantage', 'value', 'entropy'] as const;
export type FloatArray = (typeof FLOAT_ARRAYS)[number];
/** Bits of rollouts.parquet's `arrays`: which token arrays a record has. */
export const HAS_TOKENS = 1 << 7;
export const ENGINE_MASK_BIT = 1 << 6;
export const arrayBit = (k: FloatArray) => 1 << FLOAT_ARRAYS.indexOf(k);
const STRING_FIELDS = [
  'id',
  'group',
  'split',
  'question',
  'data_source',
  'prompt',
  'response',
  'dialect',
  'finish',
] as const;
const INT_FIELDS = ['step', 'sample', 'turns', 'searches'] as const;
const JSON_FIELDS = ['golden', 'reward_parts', 'meta'] as const;
/** A step directory's name: step-NNNNNN (training) or val-step-NNNNNN (a held-out evaluation). */
export const STEP_DIR = /^(val-)?step-(\d+)$/;
const ROW_GROUP_TOKENS = 1 << 17;
const ROW_GROUP_ROLLOUTS = 256;

/** Token columns a reader may ask for: `audit` is what the checks read (no ids unless drift is checked, no text). */
export type TokenColumns = 'all' | 'audit' | 'audit+ids' | 'none';
// the audit's: masks and the two log-probs (leaks, the microscope, IS), and what the group and search checks read —
// advantages (phantom-advantage), reference log-probs (kl-only-gradient), entropies (the think channel's)
const AUDIT_COLUMNS = [
  'role',
  'loss_mask',
  'rollout_logprob',
  'logprob',
  'engine_mask',
  'advantage',
  'ref_logprob',
  'entropy',
];

// hyparquet passes the page's uncompressed size: one output buffer of that size (pages are ~1 MiB; a header that
// claims more than 16 MiB gets chunks of 16 MiB), not 16 KiB chunks then joined
const brotli = (input: Uint8Array, size: number): Uint8Array => {
  try {
    return zlib.brotliDecompressSync(input, { chunkSize: Math.min(1 << 24, Math.max(64, size)) });
  } catch (e) {
    throw new Error(`a page does not decompress (brotli: ${(e as Error).message}): the file is damaged`);
  }
};
const COMPRESSORS = { BROTLI: brotli } as const;

/**
 * An AsyncBuffer over a file: one positioned read per slice, through a descriptor opened on first use and closed
 * after a second without reads (a run of a thousand steps holds none of them open while idle).
 */
async function fileBuffer(path: string): Promise<AsyncBuffer> {
  const { size } = await stat(path);
  let handle: Promise<FileHandle> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let busy = 0;
  const idle = () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      if (busy || !handle) return;
      const h = handle;
      handle = undefined;
      void h.then((x) => x.close()).catch(() => {});
    }, 1000);
    timer.unref?.();
  };
  return {
    byteLength: size,
    async slice(start: number, end?: number): Promise<ArrayBuffer> {
      const n = (end ?? size) - start;
      const buf = new ArrayBuffer(n);
      if (n === 0) return buf;
      busy++;
      try {
        handle ??= open(path, 'r');
        const h = await handle;
        let done = 0;
        while (done < n) {
          const { bytesRead } = await h.read(new Uint8Array(buf, done, n - done), 0, n - done, start + done);
          if (bytesRead === 0) throw new Error(`${path}: ended at byte ${start + done} of ${size}`);
          done += bytesRead;
        }
      } catch (e) {
        const h = handle;
        handle = undefined;
        void h?.then((x) => x.close()).catch(() => {});
        throw e;
      } finally {
        busy--;
        idle();
      }
      return buf;
    },
  };
}

/**
 * A file of a committed step that cannot be read — missing, cut short, damaged, or not of one step with the step's
 * other files (`files` then names both) — with the step's directory and why. Readers report it as an issue of that
 * step and read the other steps (rollouts.ts readPart, storeStepRows).
 */
export class StoreFileError extends Error {
  constructor(
    readonly dir: string,
    readonly files: readonly string[],
    readonly reason: string,
  ) {
    super(`${dir}: ${files.join(', ')}: ${reason}`);
    this.name = 'StoreFileError';
  }
}

/** Runs a read of one of the step's files; what it throws becomes a StoreFileError naming the step and the file. */
async function reading<T>(dir: string, file: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof StoreFileError) throw e;
    const err = e as NodeJS.ErrnoException;
    const reason =
      err?.code === 'ENOENT'
        ? 'missing (the step directory has no such file)'
        : (err?.message ?? String(e)).replace(`${join(dir, file)}: `, '');
    throw new StoreFileError(dir, [file], reason);
  }
}

/** Whether `dir` is a committed step of a store (it has rollouts.parquet). */
export async function isStoreStep(dir: string): Promise<boolean> {
  try {
    return (await stat(join(dir, STORE_FILES.rollouts))).isFile();
  } catch {
    return false;
  }
}

/** The committed steps in a run's rollouts/ directory, by step (a held-out evaluation after its step's training). */
export async function storeSteps(rolloutsDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(rolloutsDir);
  } catch {
    return [];
  }
  const found: { step: number; val: boolean; dir: string }[] = [];
  for (const n of names) {
    const m = STEP_DIR.exec(n);
    if (m && (await isStoreStep(join(rolloutsDir, n))))
      found.push({ step: Number(m[2]), val: !!m[1], dir: join(rolloutsDir, n) });
  }
  found.sort((a, b) => a.step - b.step || Number(a.val) - Number(b.val));
  return found.map((f) => f.dir);
}

/** A step's number from its directory name (NaN if it has none). */
export function stepOfDir(dir: string): number {
  const m = STEP_DIR.exec(basename(dir));
  return m ? Number(m[2]) : Number.NaN;
}

type Column = Uint32Array | Int32Array | Float32Array | Uint8Array | string[];

interface RolloutRowData {
  record?: Rollout;
  value?: unknown;
  errors: LocatedIssue[];
}

/**
 * One committed step: its rollouts by row number (the `line` of a RolloutRow is row + 1, so `dir:line` names a
 * rollout as `file:line` does in a JSONL file).
 */
export class StoreStep {
  private tokensMeta: FileMetaData | undefined;
  private tokensFile: AsyncBuffer | undefined;
  private groupStarts: number[] = [];
  private vocab: Map<number, string> | undefined;
  private readonly cache = new Map<string, Promise<Column>>();
  private readonly rolloutCache = new Map<number, Promise<Record<string, unknown>[]>>();

  private constructor(
    readonly dir: string,
    private readonly rolloutsFile: AsyncBuffer,
    private readonly rolloutsMeta: FileMetaData,
  ) {}

  static async open(dir: string): Promise<StoreStep> {
    const { file, meta, version } = await reading(dir, STORE_FILES.rollouts, async () => {
      const file = await fileBuffer(join(dir, STORE_FILES.rollouts));
      const meta = await parquetMetadataAsync(file);
      const info = meta.key_value_metadata?.find((kv) => kv.key === 'sas.store')?.value;
      const version = info ? (JSON.parse(info) as { version?: number }).version : undefined;
      return { file, meta, version };
    });
    if (version !== undefined && version > STORE_VERSION)
      throw new Error(
        `${dir}: a token store of version ${version}; this reader knows version ${STORE_VERSION} (update the extension)`,
      );
    return new StoreStep(dir, file, meta);
  }

  get count(): number {
    return Number(this.rolloutsMeta.num_rows);
  }

  /** The step's own description (`sas.store` in the files' metadata: version, step, split, what was recorded). */
  get info(): Record<string, unknown> {
    const v = this.rolloutsMeta.key_value_metadata?.find((kv) => kv.key === 'sas.store')?.value;
    return v ? (JSON.parse(v) as Record<string, unknown>) : {};
  }

  private async tokens(): Promise<{ file: AsyncBuffer; meta: FileMetaData }> {
    if (!this.tokensMeta || !this.tokensFile) {
      const { file, meta } = await reading(this.dir, STORE_FILES.tokens, async () => {
        const file = await fileBuffer(join(this.dir, STORE_FILES.tokens));
        return { file, meta: await parquetMetadataAsync(file) };
      });
      this.tokensFile = file;
      this.tokensMeta = meta;
      let at = 0;
      this.groupStarts = this.tokensMeta.row_groups.map((g) => {
        const s = at;
        at += Number(g.num_rows);
        return s;
      });
      this.groupStarts.push(at);
    }
    return { file: this.tokensFile, meta: this.tokensMeta };
  }

  private async tokenColumnNames(): Promise<Set<string>> {
    const { meta } = await this.tokens();
    return new Set(meta.schema.slice(1).map((s) => s.name));
  }

  /** Columns of one tokens row group, decoded in one read (each cached: a few row groups' worth). */
  private tokenColumns(group: number, columns: readonly string[]): Promise<Column>[] {
    const missing = columns.filter((c) => !this.cache.has(`${group}:${c}`));
    if (missing.length) {
      const read = reading(this.dir, STORE_FILES.tokens, async () => {
        const { file, meta } = await this.tokens();
        const start = this.groupStarts[group]!;
        const end = this.groupStarts[group + 1]!;
        const parts = new Map<string, { at: number; data: ArrayLike<unknown> }[]>(missing.map((c) => [c, []]));
        await parquetRead({
          file,
          metadata: meta,
          columns: missing,
          rowStart: start,
          rowEnd: end,
          compressors: COMPRESSORS,
          onChunk: (c) => parts.get(c.columnName)?.push({ at: c.rowStart, data: c.columnData as ArrayLike<unknown> }),
        });
        return new Map(missing.map((c) => [c, assemble(parts.get(c)!, start, end - start, c)]));
      });
      for (const c of missing) {
        const key = `${group}:${c}`;
        const p = read.then((m) => m.get(c)!);
        p.catch(() => this.cache.delete(key));
        this.cache.set(key, p);
      }
    }
    const out = columns.map((c) => {
      const key = `${group}:${c}`;
      const p = this.cache.get(key)!;
      this.cache.delete(key); // most recently used last
      this.cache.set(key, p);
      return p;
    });
    while (this.cache.size > 64) this.cache.delete(this.cache.keys().next().value!);
    return out;
  }

  /** Rows [lo, hi) of rollouts.parquet as objects (by row groups of 256, cached). */
  private async rolloutRows(lo: number, hi: number): Promise<Record<string, unknown>[]> {
    const out: Record<string, unknown>[] = [];
    for (let g = Math.floor(lo / ROW_GROUP_ROLLOUTS); g * ROW_GROUP_ROLLOUTS < hi; g++) {
      let p = this.rolloutCache.get(g);
      if (!p) {
        const from = g * ROW_GROUP_ROLLOUTS;
        p = reading(this.dir, STORE_FILES.rollouts, () =>
          readObjects(this.rolloutsFile, this.rolloutsMeta, from, Math.min(this.count, from + ROW_GROUP_ROLLOUTS)),
        );
        p.catch(() => this.rolloutCache.delete(g));
        this.rolloutCache.set(g, p);
        while (this.rolloutCache.size > 4) this.rolloutCache.delete(this.rolloutCache.keys().next().value!);
      }
      const rows = await p;
      const base = g * ROW_GROUP_ROLLOUTS;
      for (let i = Math.max(lo, base); i < Math.min(hi, base + rows.length); i++) out.push(rows[i - base]!);
    }
    return out;
  }

  private async loadVocab(): Promise<Map<number, string>> {
    if (!this.vocab) {
      this.vocab = await reading(this.dir, STORE_FILES.vocab, async () => {
        const file = await fileBuffer(join(this.dir, STORE_FILES.vocab));
        const metadata = await parquetMetadataAsync(file);
        const ids: number[] = [];
        const texts: string[] = [];
        await parquetRead({
          file,
          metadata,
          compressors: COMPRESSORS,
          onChunk: (c) => {
            const target = c.columnName === 'id' ? ids : texts;
            for (let i = 0; i < c.columnData.length; i++) (target as unknown[]).push(c.columnData[i]);
          },
        });
        return new Map(ids.map((id, i) => [Number(id), texts[i]!]));
      });
    }
    return this.vocab;
  }

  /**
   * Rollouts [from, to) as rows: the record (validated: its fields; its token arrays are typed columns and the same
   * length by construction), or the issues that make it malformed. `tokens` says which token arrays are read
   * (`audit`: roles, masks, the two log-probs, advantages, reference log-probs and entropies; `audit+ids` also the ids and their texts; the others then throw when
   * touched).
   */
  async rows(from: number, to: number, tokens: TokenColumns = 'all'): Promise<({ line: number } & RolloutRowData)[]> {
    from = Math.max(0, from);
    to = Math.min(this.count, to);
    if (from >= to) return [];
    const raw = await this.rolloutRows(from, to);
    const present = tokens === 'none' ? new Set<string>() : await this.tokenColumnNames();
    // audit+ids: the ids with their texts (the drift check and the tokenizer match read both) — from the step's vocab,
    // loaded once per step, or its text column where one id has several texts
    const want =
      tokens === 'all'
        ? [...present]
        : tokens === 'none'
          ? []
          : [...AUDIT_COLUMNS, ...(tokens === 'audit+ids' ? ['ids', 'text'] : [])].filter((c) => present.has(c));
    const vocab =
      (tokens === 'all' || tokens === 'audit+ids') && !present.has('text') ? await this.loadVocab() : undefined;
    // the token range these rollouts cover, by row group
    let lo = Infinity;
    let hi = -Infinity;
    for (const r of raw) {
      if (!(Number(r.arrays) & HAS_TOKENS)) continue;
      lo = Math.min(lo, Number(r.tokens_offset));
      hi = Math.max(hi, Number(r.tokens_offset) + Number(r.tokens_count));
    }
    const columns = new Map<string, { start: number; data: Column }[]>();
    if (lo < hi && want.length) {
      await this.tokens();
      // the rollouts' token rows must lie in tokens.parquet (a tokens.parquet of another step has other rows)
      const total = this.groupStarts[this.groupStarts.length - 1]!;
      if (hi > total || lo < 0) {
        const k = raw.findIndex(
          (r) =>
            Number(r.arrays) & HAS_TOKENS &&
            (Number(r.tokens_offset) < 0 || Number(r.tokens_offset) + Number(r.tokens_count) > total),
        );
        const r = raw[k]!;
        const off = Number(r.tokens_offset);
        throw new StoreFileError(
          this.dir,
          [STORE_FILES.rollouts, STORE_FILES.tokens],
          `the row counts disagree: rollouts.parquet puts rollout ${from + k + 1}'s tokens at rows ${off}–${off + Number(r.tokens_count) - 1} of tokens.parquet, which has ${total} rows (the two files are not of one step)`,
        );
      }
      // and the last rollout's tokens end where tokens.parquet does
      let last: Record<string, unknown> | undefined;
      if (to === this.count) for (const r of raw) if (Number(r.arrays) & HAS_TOKENS) last = r;
      const end = last ? Number(last.tokens_offset) + Number(last.tokens_count) : total;
      if (end !== total)
        throw new StoreFileError(
          this.dir,
          [STORE_FILES.rollouts, STORE_FILES.tokens],
          `the row counts disagree: rollouts.parquet's rollouts have ${end} tokens, tokens.parquet has ${total} rows (the two files are not of one step)`,
        );
      const g0 = groupOf(this.groupStarts, lo);
      const g1 = groupOf(this.groupStarts, hi - 1);
      for (const c of want) columns.set(c, []);
      for (let g = g0; g <= g1; g++) {
        const got = await Promise.all(this.tokenColumns(g, want));
        want.forEach((c, k) => columns.get(c)!.push({ start: this.groupStarts[g]!, data: got[k]! }));
      }
    }
    const slice = (c: string, off: number, n: number): Column | undefined => {
      const parts = columns.get(c);
      if (!parts) return undefined;
      for (const p of parts)
        if (off >= p.start && off + n <= p.start + p.data.length) return sub(p.data, off - p.start, off - p.start + n);
      // spans row groups (a store another writer wrote): copy the pieces
      const pieces = parts
        .filter((p) => off < p.start + p.data.length && off + n > p.start)
        .map((p) => sub(p.data, Math.max(0, off - p.start), Math.min(p.data.length, off + n - p.start)));
      return concatColumns(pieces);
    };
    return raw.map((r, k) => {
      const line = from + k + 1;
      const file = this.dir;
      const { value, errors } = recordOf(r, file, line);
      if (errors.length) return { line, value, errors };
      const rec = value as Rollout;
      const bits = Number(r.arrays);
      if (bits & HAS_TOKENS && tokens !== 'none') {
        const off = Number(r.tokens_offset);
        const n = Number(r.tokens_count);
        rec.tokens = lazyTokens(n, bits, (c) => slice(c, off, n), vocab, present.has('text'), `${file}:${line}`);
        if (bits & ENGINE_MASK_BIT && columns.has('engine_mask')) {
          const m = slice('engine_mask', off, n)!;
          rec.meta = { ...(rec.meta ?? {}), engine_loss_mask: Array.from(m as ArrayLike<number>) };
        }
      }
      return { line, record: rec, errors: [] };
    });
  }

  /** What the inspector's text search matches for rows [from, to): each record's JSON without its token arrays. */
  async searchTexts(from: number, to: number): Promise<string[]> {
    return (await this.rows(from, to, 'none')).map((r) => JSON.stringify(r.record ?? r.value ?? null));
  }
}

function groupOf(starts: readonly number[], at: number): number {
  let lo = 0;
  let hi = starts.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid]! <= at) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

function sub(c: Column, a: number, b: number): Column {
  return Array.isArray(c) ? c.slice(a, b) : (c as Uint32Array).subarray(a, b);
}

function concatColumns(pieces: Column[]): Column {
  if (pieces.length === 1) return pieces[0]!;
  if (Array.isArray(pieces[0])) return (pieces as string[][]).flat();
  const n = pieces.reduce((t, p) => t + p.length, 0);
  const out = new (pieces[0]!.constructor as new (n: number) => Uint32Array)(n);
  let at = 0;
  for (const p of pieces as Uint32Array[]) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The decoded pages of one column over rows [start, start + n) as one array (typed for numbers). */
function assemble(parts: { at: number; data: ArrayLike<unknown> }[], start: number, n: number, column: string): Column {
  if (column === 'text') {
    const out: string[] = new Array(n);
    for (const p of parts) for (let i = 0; i < p.data.length; i++) out[p.at - start + i] = p.data[i] as string;
    return out;
  }
  const first = parts[0]?.data;
  if (parts.length === 1 && first && first.length === n && ArrayBuffer.isView(first)) return first as unknown as Column;
  const out =
    column === 'ids'
      ? new Uint32Array(n)
      : column === 'role' || column === 'loss_mask' || column === 'engine_mask'
        ? new Uint8Array(n)
        : new Float32Array(n);
  for (const p of parts) {
    if (ArrayBuffer.isView(p.data)) out.set(p.data as unknown as ArrayLike<number>, p.at - start);
    else for (let i = 0; i < p.data.length; i++) out[p.at - start + i] = Number(p.data[i]);
  }
  return out;
}

async function readObjects(
  file: AsyncBuffer,
  metadata: FileMetaData,
  rowStart: number,
  rowEnd: number,
): Promise<Record<string, unknown>[]> {
  let out: Record<string, unknown>[] = [];
  await parquetRead({
    file,
    metadata,
    rowStart,
    rowEnd,
    rowFormat: 'object',
    compressors: COMPRESSORS,
    onComplete: (rows) => (out = rows as Record<string, unknown>[]),
  });
  return out;
}

/** A record (without its tokens) from a row of rollouts.parquet, validated. */
function recordOf(r: Record<string, unknown>, file: string, line: number): { value: unknown; errors: LocatedIssue[] } {
  const rec: Record<string, unknown> = { v: 2 };
  const errors: LocatedIssue[] = [];
  for (const k of [...STRING_FIELDS, ...INT_FIELDS, 'reward'] as const) {
    const v = r[k];
    if (v !== null && v !== undefined) rec[k] = typeof v === 'bigint' ? Number(v) : v;
  }
  for (const k of [...JSON_FIELDS, 'extra'] as const) {
    const v = r[k];
    if (typeof v !== 'string') continue;
    try {
      const parsed = JSON.parse(v) as unknown;
      if (k === 'extra') {
        for (const [key, x] of Object.entries(parsed as Record<string, unknown>)) {
          if (key === 'v' && x === null) delete rec.v;
          else rec[key] = x;
        }
      } else rec[k] = parsed;
    } catch (e) {
      errors.push({ file, line, field: k, message: `invalid JSON in rollouts.parquet: ${(e as Error).message}` });
    }
  }
  if (errors.length) return { value: rec, errors };
  return { value: rec, errors: validateRollout(rec, file, line) };
}

/**
 * A record's `tokens` whose arrays are made from the typed columns when first read (then kept): the audit reads
 * four of them, the replay all. Each is an own enumerable property, so JSON.stringify and structured clone (a
 * worker's or a webview's message) see plain arrays.
 */
function lazyTokens(
  n: number,
  bits: number,
  column: (c: string) => Column | undefined,
  vocab: Map<number, string> | undefined,
  hasText: boolean,
  where: string,
): Tokens {
  const t = {} as Tokens;
  const define = (key: string, make: () => unknown) =>
    Object.defineProperty(t, key, {
      enumerable: true,
      configurable: true,
      get() {
        const value = make();
        Object.defineProperty(t, key, { value, enumerable: true, configurable: true, writable: true });
        return value;
      },
      set(value: unknown) {
        Object.defineProperty(t, key, { value, enumerable: true, configurable: true, writable: true });
        delete (t as Record<symbol, unknown>)[TOKEN_COLUMNS]; // the columns no longer stand for the arrays
        if (key === 'text') delete (t as Record<symbol, unknown>)[TOKEN_TEXT_UNREAD];
      },
    });
  const need = (c: string) => {
    const col = column(c);
    if (!col)
      throw new Error(
        `${where}: tokens.${c} was not read (the store was read for ${c === 'text' || c === 'ids' ? 'the audit' : 'a view'} without it)`,
      );
    return col;
  };
  // read without the texts (the audit's columns): say so, so that a reader that can do without them need not catch
  if (hasText ? !column('text') : !vocab || !column('ids'))
    Object.defineProperty(t, TOKEN_TEXT_UNREAD, { value: true, enumerable: false, configurable: true });
  define('text', () => {
    if (hasText) return Array.from(need('text') as string[]);
    if (!vocab) throw new Error(`${where}: tokens.text was not read`);
    const ids = need('ids') as Uint32Array;
    const out = new Array<string>(n);
    for (let i = 0; i < n; i++) {
      const s = vocab.get(ids[i]!);
      if (s === undefined) throw new Error(`${where}: token id ${ids[i]} is not in the step's vocab.parquet`);
      out[i] = s;
    }
    return out;
  });
  define('ids', () => Array.from(need('ids') as Uint32Array));
  define('role', () => {
    const c = need('role') as Uint8Array;
    const out = new Array<(typeof TOKEN_ROLES)[number]>(n);
    for (let i = 0; i < n; i++) {
      const r = TOKEN_ROLES[c[i]!];
      if (r === undefined) throw new Error(`${where}: tokens.role[${i}]: code ${c[i]} is not a role`);
      out[i] = r;
    }
    return out;
  });
  define('loss_mask', () => Array.from(need('loss_mask') as Uint8Array));
  // the typed columns themselves, for the audit's checks (src/core/audit/columns.ts)
  const role = column('role');
  const mask = column('loss_mask');
  if (role && mask) {
    const view: TokenColumnsView = { n, role: role as Uint8Array, loss_mask: mask as Uint8Array };
    for (const k of ['logprob', 'rollout_logprob', 'ref_logprob', 'advantage', 'value', 'entropy'] as const) {
      const c = bits & arrayBit(k) ? column(k) : undefined;
      if (c) view[k] = c as Float32Array;
    }
    Object.defineProperty(t, TOKEN_COLUMNS, { value: view, enumerable: false, configurable: true });
  }
  for (const k of FLOAT_ARRAYS) {
    if (!(bits & arrayBit(k))) continue;
    define(k, () => {
      const c = need(k) as Float32Array;
      const out = new Array<number | null>(n);
      for (let i = 0; i < n; i++) {
        const x = c[i]!;
        out[i] = Number.isNaN(x) ? null : x;
      }
      return out;
    });
  }
  return t;
}

// -- writing ---------------------------------------------------------------------------------------------------------

const brotliCompress = (input: Uint8Array): Uint8Array =>
  zlib.brotliCompressSync(input, {
    params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 1, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: input.length },
  });

type SchemaElement = Record<string, unknown> & { name: string };
const u32 = (name: string): SchemaElement => ({
  name,
  type: 'INT32',
  repetition_type: 'REQUIRED',
  converted_type: 'UINT_32',
});
const u8 = (name: string): SchemaElement => ({
  name,
  type: 'INT32',
  repetition_type: 'REQUIRED',
  converted_type: 'UINT_8',
});
const f32 = (name: string): SchemaElement => ({ name, type: 'FLOAT', repetition_type: 'REQUIRED' });
const str = (name: string, required = false): SchemaElement => ({
  name,
  type: 'BYTE_ARRAY',
  repetition_type: required ? 'REQUIRED' : 'OPTIONAL',
  converted_type: 'UTF8',
  logical_type: { type: 'STRING' },
});
const i32 = (name: string, required = false): SchemaElement => ({
  name,
  type: 'INT32',
  repetition_type: required ? 'REQUIRED' : 'OPTIONAL',
});
const i64 = (name: string): SchemaElement => ({ name, type: 'INT64', repetition_type: 'REQUIRED' });
const f64 = (name: string): SchemaElement => ({ name, type: 'DOUBLE', repetition_type: 'OPTIONAL' });

async function writeParquet(
  path: string,
  columns: { element: SchemaElement; data: unknown; encoding?: 'DELTA_BINARY_PACKED' }[],
  rowGroupSize: number[] | number,
  kv: Record<string, string>,
): Promise<void> {
  const buf = parquetWriteBuffer({
    columnData: columns.map((c) => ({
      name: c.element.name,
      data: c.data as never,
      ...(c.encoding ? { encoding: c.encoding } : {}),
    })),
    schema: [{ name: 'root', num_children: columns.length }, ...columns.map((c) => c.element)] as never,
    codec: 'BROTLI',
    compressors: { BROTLI: brotliCompress },
    statistics: false,
    rowGroupSize,
    kvMetadata: Object.entries(kv).map(([key, value]) => ({ key, value })),
    createdBy: 'search-agent-studio',
  });
  const h = await open(path, 'w');
  try {
    await h.writeFile(new Uint8Array(buf));
    await h.sync();
  } finally {
    await h.close();
  }
}

/**
 * Writes rollout records as one step of a store (`name`: step-NNNNNN or val-step-NNNNNN) in `rolloutsDir`, committed
 * by renaming its directory (an existing step of that name is replaced). The records' token arrays become columns;
 * `tokens.text` becomes the step's vocab when each id has one text, else a column of its own.
 */
export async function writeStoreStep(
  rolloutsDir: string,
  name: string,
  records: readonly Rollout[],
  info: Record<string, unknown> = {},
): Promise<string> {
  if (!STEP_DIR.test(name))
    throw new Error(`a store step is named step-NNNNNN or val-step-NNNNNN, not ${JSON.stringify(name)}`);
  await mkdir(rolloutsDir, { recursive: true });
  const final = join(rolloutsDir, name);
  const tmp = join(rolloutsDir, `.${name}.tmp-${process.pid}-${randomBytes(3).toString('hex')}`);
  await mkdir(tmp);
  try {
    const total = records.reduce((t, r) => t + (r.tokens?.ids.length ?? 0), 0);
    const ids = new Uint32Array(total);
    const role = new Uint8Array(total);
    const mask = new Uint8Array(total);
    const wanted = FLOAT_ARRAYS.filter((k) => records.some((r) => r.tokens?.[k]));
    const floats = new Map(wanted.map((k) => [k, new Float32Array(total).fill(Number.NaN)]));
    const engineOf = (r: Rollout) => {
      const m = r.meta?.engine_loss_mask;
      return r.tokens && Array.isArray(m) && m.length === r.tokens.ids.length && m.every((x) => x === 0 || x === 1)
        ? (m as number[])
        : undefined;
    };
    const withEngine = records.some((r) => engineOf(r));
    const engine = withEngine ? new Uint8Array(total) : undefined;
    const vocab = new Map<number, string>();
    let consistent = true;
    const texts: string[] = [];
    const rows: Record<string, unknown>[] = [];
    const offsets: bigint[] = [];
    const counts: number[] = [];
    const arrays: number[] = [];
    let at = 0;
    for (const r of records) {
      const t = r.tokens;
      const n = t?.ids.length ?? 0;
      let bits = t ? HAS_TOKENS : 0;
      let rec: Rollout = r;
      if (t) {
        for (let i = 0; i < n; i++) {
          ids[at + i] = t.ids[i]!;
          role[at + i] = TOKEN_ROLES.indexOf(t.role[i]!);
          mask[at + i] = t.loss_mask[i]!;
          const prev = vocab.get(t.ids[i]!);
          if (prev === undefined) vocab.set(t.ids[i]!, t.text[i]!);
          else if (prev !== t.text[i]) consistent = false;
          texts.push(t.text[i]!);
        }
        for (const k of wanted) {
          const a = t[k];
          if (!a) continue;
          bits |= arrayBit(k);
          const f = floats.get(k)!;
          for (let i = 0; i < n; i++) f[at + i] = a[i] ?? Number.NaN;
        }
        const em = engineOf(r);
        if (em && engine) {
          bits |= ENGINE_MASK_BIT;
          engine.set(em, at);
          const { engine_loss_mask: _m, ...meta } = r.meta!;
          rec = { ...r, meta };
        }
      }
      rows.push(rolloutColumns(rec));
      offsets.push(BigInt(at));
      counts.push(n);
      arrays.push(bits);
      at += n;
    }
    const kv = { 'sas.store': JSON.stringify({ version: STORE_VERSION, ...info }) };
    // tokens: row groups of whole rollouts, ~128k tokens each
    const groups: number[] = [];
    let acc = 0;
    for (const n of counts) {
      acc += n;
      if (acc >= ROW_GROUP_TOKENS) {
        groups.push(acc);
        acc = 0;
      }
    }
    if (acc > 0 || groups.length === 0) groups.push(acc);
    const tokenCols = [
      { element: u32('ids'), data: ids },
      // runs (turns): delta-encoded, as the Python writer does
      { element: u8('role'), data: Int32Array.from(role), encoding: 'DELTA_BINARY_PACKED' as const },
      { element: u8('loss_mask'), data: Int32Array.from(mask), encoding: 'DELTA_BINARY_PACKED' as const },
      ...wanted.map((k) => ({ element: f32(k), data: floats.get(k)! })),
      ...(engine
        ? [{ element: u8('engine_mask'), data: Int32Array.from(engine), encoding: 'DELTA_BINARY_PACKED' as const }]
        : []),
      ...(consistent ? [] : [{ element: str('text', true), data: texts }]),
    ];
    await writeParquet(join(tmp, STORE_FILES.tokens), tokenCols, groups.length ? groups : [0], kv);
    const vids = [...vocab.keys()].sort((a, b) => a - b);
    await writeParquet(
      join(tmp, STORE_FILES.vocab),
      consistent
        ? [
            { element: u32('id'), data: Uint32Array.from(vids) },
            { element: str('text', true), data: vids.map((i) => vocab.get(i)!) },
          ]
        : [
            { element: u32('id'), data: new Uint32Array(0) },
            { element: str('text', true), data: [] },
          ],
      vids.length || 1,
      {},
    );
    const col = (k: string) => rows.map((r) => r[k] ?? null);
    await writeParquet(
      join(tmp, STORE_FILES.rollouts),
      [
        ...STRING_FIELDS.map((k) => ({ element: str(k, k === 'id'), data: col(k) })),
        ...INT_FIELDS.map((k) => ({ element: i32(k), data: col(k) })),
        { element: f64('reward'), data: col('reward') },
        ...[...JSON_FIELDS, 'extra'].map((k) => ({ element: str(k), data: col(k) })),
        { element: i64('tokens_offset'), data: BigInt64Array.from(offsets) },
        { element: i32('tokens_count', true), data: Int32Array.from(counts) },
        { element: i32('arrays', true), data: Int32Array.from(arrays) },
      ],
      ROW_GROUP_ROLLOUTS,
      kv,
    );
    await rm(final, { recursive: true, force: true });
    await rename(tmp, final);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
  return final;
}

/** The per-rollout columns of a record (what has no column of its own, or a value of another type, goes to `extra`). */
function rolloutColumns(r: Rollout): Record<string, unknown> {
  const row: Record<string, unknown> = {};
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    if (k === 'tokens') continue;
    if ((STRING_FIELDS as readonly string[]).includes(k) && typeof v === 'string') row[k] = v;
    else if ((INT_FIELDS as readonly string[]).includes(k) && Number.isInteger(v) && Math.abs(v as number) < 2 ** 31)
      row[k] = v;
    else if (k === 'reward' && typeof v === 'number' && Number.isFinite(v)) row[k] = v;
    else if ((JSON_FIELDS as readonly string[]).includes(k)) row[k] = JSON.stringify(v);
    else if (k === 'v' && v === 2) continue;
    else extra[k] = v;
  }
  if (!('v' in r)) extra.v = null;
  if (Object.keys(extra).length) row.extra = JSON.stringify(extra);
  return row;
}

/** A float32 number printed as the shortest decimal that reads back as the same float32 (for JSONL export). */
export function shortFloat32(x: number): number {
  for (let p = 6; p < 10; p++) {
    const y = Number(x.toPrecision(p));
    if (Math.fround(y) === x) return y;
  }
  return x;
}

/** Removes what a killed writer left in a rollouts/ directory (its temporary step directories). */
export async function removePartialSteps(rolloutsDir: string): Promise<string[]> {
  const gone: string[] = [];
  for (const n of await readdir(rolloutsDir).catch(() => [] as string[])) {
    if (/^\..*\.tmp-/.test(n)) {
      await rm(join(rolloutsDir, n), { recursive: true, force: true });
      gone.push(n);
    }
  }
  return gone;
}
