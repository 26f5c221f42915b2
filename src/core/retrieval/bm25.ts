/**
 * BM25 that reproduces Pyserini's (Lucene 9 BM25Similarity over Anserini's DefaultEnglishAnalyzer), score for
 * score:
 *   idf(t)   = ln(1 + (N − n_t + 0.5) / (n_t + 0.5))                      (as a float, like Lucene)
 *   s(t, d)  = idf · tf / (tf + k1 · (1 − b + b · dl/avgdl))              (Lucene's form: no (k1+1) factor)
 * with dl the document length *as Lucene stores it* (one SmallFloat byte: exact to 40, then 4 significant
 * bits), avgdl = total tokens / N exactly, k1 = 0.9 and b = 0.4 by default, a query term repeated k times
 * weighing k (as Lucene's BooleanQuery rewrite merges duplicate clauses: one clause, weight = float(k · idf)),
 * and ties broken by document id ascending. The arithmetic follows Lucene's float32 steps
 * (BM25Scorer: weight − weight / (1 + tf · normInverse)), summed in double as Lucene's disjunctions do.
 * Top k is exact and pruned: block-max MaxScore over block postings with per-block score bounds
 * (bm25Search.ts, postings.ts); `searchExhaustive` scores every posting and is the reference it is tested on.
 *
 * The index is a directory of versioned binary files (typed arrays, never one giant JSON string), version 2:
 *   meta.json          format, version, analyzer, k1/b, N, terms, total tokens, blocks, sizes
 *   terms.bin/.idx     the sorted term dictionary (UTF-8) and its offsets;  df.bin  document frequencies
 *   postings.bin       block postings (32-bit words, see postings.ts)
 *   blocks.idx         per term, its first block;  term-max.bin  per term, its max score (float32)
 *   block-last.bin, block-offset.bin, block-max.bin, block-skip.bin   per block: last doc id, word offset, max
 *                      score, and the doc ids ending its first three 32-posting runs
 *   norms.bin          one SmallFloat length byte per document
 *   docids.bin/.idx    document ids;  contents.bin/.idx   stored contents (for /retrieve)
 * Version 1 (VByte postings without blocks) is migrated in place by {@link migrateBm25Index}
 * (`search-agent-studio index --migrate DIR`); loading one says so. It is built in one analysis pass over the
 * corpus (postings sized exactly, then filled, then cut into blocks), loaded by reading the files into typed
 * arrays — in SharedArrayBuffers when worker threads are to share them (bm25Pool.ts) — while contents stay
 * on disk and are read per hit.
 */
import { closeSync, fstatSync, mkdirSync, openSync, readSync, rmSync } from 'node:fs';
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { freemem, totalmem } from 'node:os';
import { join } from 'node:path';
import { type Analyzer, DefaultEnglishAnalyzer } from './analyzer';
import { Bm25Searcher, type PostingArrays, type QueryTerm, type SearchStats } from './bm25Search';
import { BinaryFile, BLOCK, type BlockTables, BlockWriter, SKIPS } from './postings';
import { intToByte4, LENGTH_TABLE } from './smallfloat';

export interface Bm25Params {
  k1: number;
  b: number;
}
/** Pyserini's defaults, as Search-R1 uses them. */
export const PYSERINI_BM25: Bm25Params = { k1: 0.9, b: 0.4 };

export const INDEX_FORMAT = 'sas-bm25';
export const INDEX_VERSION = 2;

export interface IndexMeta {
  format: typeof INDEX_FORMAT;
  version: number;
  analyzer: string;
  k1: number;
  b: number;
  docs: number;
  terms: number;
  totalTokens: number;
  /** Size of postings.bin. */
  postingsBytes: number;
  /** Postings per block, and blocks in all (version 2). */
  blockSize: number;
  blocks: number;
  created: string;
  /** When a version-1 index was migrated to this version. */
  migrated?: string;
  source?: string;
}

/** Thrown when an index directory holds an older format version; the message says how to migrate it. */
export class IndexVersionError extends Error {
  constructor(
    readonly dir: string,
    readonly version: number,
  ) {
    super(
      version < INDEX_VERSION
        ? `${dir}: BM25 index format version ${version}, from before block-max pruning; this build reads version ${INDEX_VERSION}. ` +
            `Migrate it in place (no corpus needed): search-agent-studio index --migrate ${dir}  — or rebuild it from its corpus.`
        : `${dir}: BM25 index format version ${version} is newer than this build reads (${INDEX_VERSION}); update Search Agent Studio or rebuild the index.`,
    );
    this.name = 'IndexVersionError';
  }
}

/** Per norm byte, 1 / (k1 · (1 − b + b · L / avgdl)) in Lucene's float steps (BM25Similarity.scorer's cache). */
export function normInverseTable(meta: Pick<IndexMeta, 'k1' | 'b' | 'totalTokens' | 'docs'>): Float32Array {
  const avgdl = f(meta.totalTokens / meta.docs);
  const k1 = f(meta.k1);
  const b = f(meta.b);
  const cache = new Float32Array(256);
  for (let i = 0; i < 256; i++) cache[i] = f(1 / f(k1 * f(f(1 - b) + f(f(b * LENGTH_TABLE[i]!) / avgdl))));
  return cache;
}

export interface Hit {
  /** Internal document number. */
  doc: number;
  id: string;
  score: number;
}

const f = Math.fround;

// ---------------------------------------------------------------------------------------------------------
// Variable-byte integers (7 bits a byte, high bit = more).

function vbyteSize(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

function writeVByte(buf: Uint8Array, pos: number, v: number): number {
  while (v >= 0x80) {
    buf[pos++] = (v & 0x7f) | 0x80;
    v = Math.floor(v / 128);
  }
  buf[pos++] = v;
  return pos;
}

/**
 * Feeds version-1 postings (per term, VByte (doc gap, tf) pairs at `idx[t]..idx[t+1]`) to a block writer,
 * term by term: the last step of building, and the whole of migrating a version-1 index.
 */
function vbyteToBlocks(postings: Uint8Array, idx: Float64Array, terms: number, writer: BlockWriter): void {
  for (let t = 0; t < terms; t++) {
    let pos = idx[t]!;
    const end = idx[t + 1]!;
    let doc = 0;
    let first = true;
    while (pos < end) {
      let v = 0;
      let mul = 1;
      let byte: number;
      do {
        byte = postings[pos++]!;
        v += (byte & 0x7f) * mul;
        mul *= 128;
      } while (byte >= 0x80);
      doc = first ? v : doc + v;
      first = false;
      let tf = 0;
      mul = 1;
      do {
        byte = postings[pos++]!;
        tf += (byte & 0x7f) * mul;
        mul *= 128;
      } while (byte >= 0x80);
      writer.add(doc, tf);
    }
    writer.endTerm();
  }
}

/** Writes the block tables beside postings.bin. */
async function writeBlockTables(dir: string, tables: BlockTables): Promise<void> {
  await writeFile(join(dir, 'blocks.idx'), bytes(tables.blocksIdx));
  await writeFile(join(dir, 'term-max.bin'), bytes(tables.termMax));
  await writeFile(join(dir, 'block-last.bin'), bytes(tables.blockLast));
  await writeFile(join(dir, 'block-offset.bin'), bytes(tables.blockOffset));
  await writeFile(join(dir, 'block-max.bin'), bytes(tables.blockMax));
  await writeFile(join(dir, 'block-skip.bin'), bytes(tables.blockSkip));
}

const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** A growable byte buffer in 32 MB chunks (no copying as it grows). */
class ChunkedBytes {
  chunks: Uint8Array[] = [];
  private cur = new Uint8Array(32 << 20);
  private pos = 0;
  length = 0;
  writeVByte(v: number): void {
    if (this.pos + 10 > this.cur.length) {
      this.chunks.push(this.cur.subarray(0, this.pos));
      this.cur = new Uint8Array(32 << 20);
      this.pos = 0;
    }
    const before = this.pos;
    this.pos = writeVByte(this.cur, this.pos, v);
    this.length += this.pos - before;
  }
  finish(): Uint8Array[] {
    this.chunks.push(this.cur.subarray(0, this.pos));
    return this.chunks;
  }
}

/** Reads VBytes from a list of chunks in order. */
class ChunkReader {
  private k = 0;
  private pos = 0;
  constructor(private readonly chunks: Uint8Array[]) {}
  next(): number {
    let v = 0;
    let mul = 1;
    for (;;) {
      let c = this.chunks[this.k]!;
      if (this.pos >= c.length) {
        this.k++;
        this.pos = 0;
        c = this.chunks[this.k]!;
      }
      const byte = c[this.pos++]!;
      v += (byte & 0x7f) * mul;
      if (byte < 0x80) return v;
      mul *= 128;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Building.

export interface BuildProgress {
  phase: 'analyze' | 'postings' | 'blocks' | 'write';
  docs: number;
  tokens: number;
  terms: number;
}

export interface BuildOptions {
  params?: Bm25Params;
  analyzer?: Analyzer;
  onProgress?: (p: BuildProgress) => void;
  /** Refuse to build past this many bytes of memory (default: 85% of the machine's memory). */
  memoryLimitBytes?: number;
  source?: string;
  signal?: AbortSignal;
}

/** Thrown when an index would not fit in memory; the message says how much it needs and what to do. */
export class IndexTooLargeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'IndexTooLargeError';
  }
}

/** Term → id, sharded (a V8 Map holds at most 2^24 entries; large corpora have more distinct terms). */
class TermIds {
  private shards = Array.from({ length: 64 }, () => new Map<string, number>());
  size = 0;
  private shard(t: string): Map<string, number> {
    return this.shards[(t.charCodeAt(0) * 31 + t.length + t.charCodeAt(t.length - 1)) & 63]!;
  }
  id(t: string): number {
    const m = this.shard(t);
    let id = m.get(t);
    if (id === undefined) {
      id = this.size++;
      m.set(t, id);
    }
    return id;
  }
  *entries(): Generator<[string, number]> {
    for (const m of this.shards) yield* m.entries();
  }
}

function growU32(a: Uint32Array, n: number): Uint32Array {
  if (n <= a.length) return a;
  const b = new Uint32Array(Math.max(n, a.length * 2));
  b.set(a);
  return b;
}

/**
 * Builds an index from documents streamed in order. Pass 1 analyses each document once and keeps its
 * (term, tf) pairs compactly; pass 2 lays postings out at exact offsets. Returns the directory.
 */
export class Bm25Builder {
  private readonly analyzer: Analyzer;
  private readonly params: Bm25Params;
  private readonly terms = new TermIds();
  private df: Uint32Array = new Uint32Array(1 << 16);
  private lastDoc: Uint32Array = new Uint32Array(1 << 16);
  private postingBytes = new Float64Array(1 << 16);
  private docTerms = new ChunkedBytes();
  private norms = new Uint8Array(1 << 16);
  private docs = 0;
  /** Ids and contents go to disk as they come (a large corpus's text must not stay in memory). */
  private readonly idsOut: BinaryFile;
  private readonly contentsOut: BinaryFile;
  private idsIdx = new Float64Array(1 << 16);
  private contentsIdx = new Float64Array(1 << 16);
  private totalTokens = 0;
  private readonly memoryLimit: number;
  private readonly freq = new Map<number, number>();
  private readonly tmp: string;

  /** Builds into `dir` (through a temporary sibling directory renamed at the end). */
  constructor(
    private readonly dir: string,
    private readonly options: BuildOptions = {},
  ) {
    this.analyzer = options.analyzer ?? new DefaultEnglishAnalyzer();
    this.params = options.params ?? PYSERINI_BM25;
    this.memoryLimit = options.memoryLimitBytes ?? Math.floor(totalmem() * 0.85);
    this.tmp = `${dir}.tmp-${process.pid}`;
    rmSync(this.tmp, { recursive: true, force: true });
    mkdirSync(this.tmp, { recursive: true });
    this.idsOut = new BinaryFile(join(this.tmp, 'docids.bin'));
    this.contentsOut = new BinaryFile(join(this.tmp, 'contents.bin'));
  }

  get docCount(): number {
    return this.docs;
  }

  /** Adds one document (`contents` as Search-R1's corpus: `"Title"\ntext`). */
  add(id: string, contents: string): void {
    const doc = this.docs++;
    if (doc + 1 >= this.idsIdx.length) {
      const grow = (a: Float64Array) => {
        const b = new Float64Array(a.length * 2);
        b.set(a);
        return b;
      };
      this.idsIdx = grow(this.idsIdx);
      this.contentsIdx = grow(this.contentsIdx);
    }
    this.idsIdx[doc + 1] = this.idsIdx[doc]! + this.idsOut.writeText(id);
    this.contentsIdx[doc + 1] = this.contentsIdx[doc]! + this.contentsOut.writeText(contents);
    const freq = this.freq;
    freq.clear();
    let length = 0;
    this.analyzer.analyze(contents, (term) => {
      const t = this.terms.id(term);
      freq.set(t, (freq.get(t) ?? 0) + 1);
      length++;
    });
    this.totalTokens += length;
    if (doc >= this.norms.length) {
      const n = new Uint8Array(this.norms.length * 2);
      n.set(this.norms);
      this.norms = n;
    }
    this.norms[doc] = intToByte4(length);
    const need = this.terms.size;
    if (need > this.df.length) {
      this.df = growU32(this.df, need);
      this.lastDoc = growU32(this.lastDoc, need);
      const p = new Float64Array(this.df.length);
      p.set(this.postingBytes);
      this.postingBytes = p;
    }
    this.docTerms.writeVByte(freq.size);
    for (const [t, tf] of freq) {
      this.docTerms.writeVByte(t);
      this.docTerms.writeVByte(tf);
      const delta = this.df[t] === 0 ? doc : doc - this.lastDoc[t]!;
      this.postingBytes[t]! += vbyteSize(delta) + vbyteSize(tf);
      this.df[t]!++;
      this.lastDoc[t] = doc;
    }
    if ((doc & 0xfff) === 0) {
      this.checkMemory();
      this.options.onProgress?.({ phase: 'analyze', docs: doc + 1, tokens: this.totalTokens, terms: this.terms.size });
    }
  }

  private checkMemory(): void {
    const rss = process.memoryUsage().rss;
    if (rss > this.memoryLimit) {
      this.abandon();
      throw new IndexTooLargeError(
        `indexing stopped at ${this.docs.toLocaleString()} documents: this process uses ${(rss / 2 ** 30).toFixed(1)} GiB, over the limit of ` +
          `${(this.memoryLimit / 2 ** 30).toFixed(1)} GiB (85% of this machine's ${(totalmem() / 2 ** 30).toFixed(1)} GiB). ` +
          'The corpus does not fit for in-memory indexing here: index on a machine with more memory, index a subset, or serve it with a remote retriever (--retriever remote).',
      );
    }
  }

  /** Removes the temporary directory (after a failure). */
  abandon(): void {
    this.idsOut.close();
    this.contentsOut.close();
    rmSync(this.tmp, { recursive: true, force: true });
  }

  /** Pass 2: each document's (term, tf) pairs into per-term VByte postings at exact offsets. */
  private fillPostings(totalPostings: number, postingsIdx: Float64Array, rank: Uint32Array): Uint8Array {
    const T = postingsIdx.length - 1;
    const postings = new Uint8Array(totalPostings);
    const cursor = postingsIdx.slice(0, T);
    const last = new Int32Array(T).fill(-1);
    const reader = new ChunkReader(this.docTerms.finish());
    for (let doc = 0; doc < this.docs; doc++) {
      const n = reader.next();
      for (let j = 0; j < n; j++) {
        const s = rank[reader.next()]!;
        const tf = reader.next();
        const delta = last[s]! < 0 ? doc : doc - last[s]!;
        last[s] = doc;
        cursor[s] = writeVByte(postings, writeVByte(postings, cursor[s]!, delta), tf);
      }
      if ((doc & 0xffff) === 0)
        this.options.onProgress?.({ phase: 'postings', docs: doc, tokens: this.totalTokens, terms: T });
    }
    return postings;
  }

  /**
   * Writes the index into its directory (atomically: the temporary directory is renamed at the end), with `extra`
   * files (name → text) written into it before the rename.
   */
  async write(extra: Record<string, string> = {}): Promise<IndexMeta> {
    const dir = this.dir;
    const N = this.docs;
    const T = this.terms.size;
    const totalPostings = this.postingBytes.subarray(0, T).reduce((a, b) => a + b, 0);
    // Pass 2 needs the postings, the pass-1 pairs, the dictionary and the norms at once.
    const estimate = totalPostings + this.docTerms.length + T * 64 + N * 24;
    if (process.memoryUsage().rss + totalPostings > this.memoryLimit) {
      this.abandon();
      throw new IndexTooLargeError(
        `the index needs about ${(estimate / 2 ** 30).toFixed(1)} GiB to write (${T.toLocaleString()} terms, ${(totalPostings / 2 ** 30).toFixed(2)} GiB of postings); ` +
          `${(freemem() / 2 ** 30).toFixed(1)} GiB is free. Index on a machine with more memory or a subset of the corpus.`,
      );
    }
    // Sort the dictionary by UTF-8 bytes (the order the reader's binary search compares in).
    const entries = [...this.terms.entries()].map(([t, id]) => [Buffer.from(t, 'utf8'), id] as const);
    entries.sort((a, b) => Buffer.compare(a[0], b[0]));
    const order = new Uint32Array(T); // sorted position → term id
    const rank = new Uint32Array(T); // term id → sorted position
    entries.forEach(([, id], k) => {
      order[k] = id;
      rank[id] = k;
    });
    const postingsIdx = new Float64Array(T + 1);
    const dfs = new Uint32Array(T);
    for (let k = 0; k < T; k++) {
      postingsIdx[k + 1] = postingsIdx[k]! + this.postingBytes[order[k]!]!;
      dfs[k] = this.df[order[k]!]!;
    }
    if (totalPostings > 2 ** 32 - 1)
      throw new IndexTooLargeError(
        `postings of ${(totalPostings / 2 ** 30).toFixed(1)} GiB exceed this format's 4 GiB single-file limit`,
      );
    const postings = this.fillPostings(totalPostings, postingsIdx, rank);
    this.docTerms = new ChunkedBytes(); // the pass-1 pairs are no longer needed
    // Pass 3: cut each term's postings into blocks with their score bounds.
    this.options.onProgress?.({ phase: 'blocks', docs: N, tokens: this.totalTokens, terms: T });
    const writer = new BlockWriter(
      join(this.tmp, 'postings.bin'),
      dfs,
      N,
      this.norms,
      normInverseTable({ k1: this.params.k1, b: this.params.b, totalTokens: this.totalTokens, docs: N }),
    );
    vbyteToBlocks(postings, postingsIdx, T, writer);
    const tables = writer.finish();
    this.options.onProgress?.({ phase: 'write', docs: N, tokens: this.totalTokens, terms: T });

    const termBytes = entries.map(([t]) => t);
    const termsIdx = new Float64Array(T + 1);
    for (let k = 0; k < T; k++) termsIdx[k + 1] = termsIdx[k]! + termBytes[k]!.length;
    this.idsOut.close();
    this.contentsOut.close();

    const meta: IndexMeta = {
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      analyzer: this.analyzer.id,
      k1: this.params.k1,
      b: this.params.b,
      docs: N,
      terms: T,
      totalTokens: this.totalTokens,
      postingsBytes: (tables.words + 1) * 4,
      blockSize: BLOCK,
      blocks: tables.blockLast.length,
      created: new Date().toISOString(),
      ...(this.options.source ? { source: this.options.source } : {}),
    };
    const tmp = this.tmp;
    await writeFile(join(tmp, 'terms.bin'), Buffer.concat(termBytes));
    await writeFile(join(tmp, 'terms.idx'), bytes(termsIdx));
    await writeBlockTables(tmp, tables);
    await writeFile(join(tmp, 'df.bin'), bytes(dfs));
    await writeFile(join(tmp, 'norms.bin'), this.norms.subarray(0, N));
    await writeFile(join(tmp, 'docids.idx'), bytes(this.idsIdx.subarray(0, N + 1)));
    await writeFile(join(tmp, 'contents.idx'), bytes(this.contentsIdx.subarray(0, N + 1)));
    await writeFile(join(tmp, 'meta.json'), `${JSON.stringify(meta, null, 2)}\n`);
    for (const [name, text] of Object.entries(extra)) await writeFile(join(tmp, name), text);
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    return meta;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Migrating a version-1 index.

/**
 * Rewrites a version-1 index (VByte postings, no blocks) as version 2 in place: postings cut into blocks
 * with their score bounds; dictionary, norms, ids and contents are kept. Idempotent; returns the new meta.
 */
export async function migrateBm25Index(dir: string): Promise<IndexMeta> {
  const meta = await readMeta(dir);
  if (meta.version === INDEX_VERSION) return meta;
  if (meta.version !== 1) throw new IndexVersionError(dir, meta.version);
  const [postings, idx, dfBuf, norms] = await Promise.all(
    ['postings.bin', 'postings.idx', 'df.bin', 'norms.bin'].map((n) => readFile(join(dir, n))),
  );
  if (postings!.length !== meta.postingsBytes)
    throw new Error(
      `${dir}/postings.bin: ${postings!.length} bytes, meta.json says ${meta.postingsBytes} (incomplete or corrupt index)`,
    );
  const aligned = (b: Buffer) => new Uint8Array(b).buffer; // a copy at offset 0
  const postingsIdx = new Float64Array(aligned(idx!));
  const dfs = new Uint32Array(aligned(dfBuf!));
  const tmp = join(dir, `postings.bin.tmp-${process.pid}`);
  const writer = new BlockWriter(tmp, dfs, meta.docs, norms!, normInverseTable(meta));
  vbyteToBlocks(postings!, postingsIdx, meta.terms, writer);
  const tables = writer.finish();
  await writeBlockTables(dir, tables);
  await rename(tmp, join(dir, 'postings.bin'));
  const next: IndexMeta = {
    ...meta,
    version: INDEX_VERSION,
    postingsBytes: (tables.words + 1) * 4,
    blockSize: BLOCK,
    blocks: tables.blockLast.length,
    migrated: new Date().toISOString(),
  };
  await writeFile(join(dir, 'meta.json.tmp'), `${JSON.stringify(next, null, 2)}\n`);
  await rename(join(dir, 'meta.json.tmp'), join(dir, 'meta.json'));
  await rm(join(dir, 'postings.idx'), { force: true });
  return next;
}

async function readMeta(dir: string): Promise<IndexMeta> {
  let meta: IndexMeta;
  try {
    meta = JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8'));
  } catch (e) {
    throw new Error(`${dir}: not a BM25 index (meta.json: ${(e as Error).message})`);
  }
  if (meta.format !== INDEX_FORMAT) throw new Error(`${dir}/meta.json: format "${meta.format}" is not ${INDEX_FORMAT}`);
  return meta;
}

// ---------------------------------------------------------------------------------------------------------
// Searching.

export interface SearchOptions {
  k?: number;
}

/** A loaded index's arrays: what worker threads share (SharedArrayBuffer-backed when loaded with `shared`). */
export interface IndexArrays extends PostingArrays {
  termsBin: Uint8Array;
  termsIdx: Float64Array;
  idsBin: Uint8Array;
  idsIdx: Float64Array;
  contentsIdx: Float64Array;
}

/** What a worker thread needs to open the same index over the same memory (structured-cloned: the buffers are shared, not copied). */
export interface SharedIndex {
  dir: string;
  meta: IndexMeta;
  arrays: IndexArrays;
}

/** Reads a whole file into a fresh (Shared)ArrayBuffer, plus `pad` zero bytes. */
function readInto(path: string, shared: boolean, pad = 0): ArrayBuffer | SharedArrayBuffer {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const buf = shared ? new SharedArrayBuffer(size + pad) : new ArrayBuffer(size + pad);
    const view = new Uint8Array(buf);
    let off = 0;
    while (off < size) {
      const n = readSync(fd, view, off, Math.min(size - off, 1 << 30), off);
      if (n === 0) throw new Error(`${path}: truncated while reading`);
      off += n;
    }
    return buf;
  } finally {
    closeSync(fd);
  }
}

export class Bm25Index {
  readonly analyzer: Analyzer;
  private readonly encoder = new TextEncoder();
  private readonly contentsFd: number;
  private readonly idsText: Buffer;
  private readonly searcher: Bm25Searcher;

  private constructor(
    readonly dir: string,
    readonly meta: IndexMeta,
    readonly arrays: IndexArrays,
  ) {
    if (meta.analyzer !== new DefaultEnglishAnalyzer().id)
      throw new Error(`${dir}: built with analyzer "${meta.analyzer}", which this version does not have`);
    this.analyzer = new DefaultEnglishAnalyzer();
    const ids = arrays.idsBin;
    this.idsText = Buffer.from(ids.buffer, ids.byteOffset, ids.byteLength);
    this.searcher = new Bm25Searcher(arrays, meta.docs, normInverseTable(meta), (doc) => this.docId(doc));
    this.contentsFd = openSync(join(dir, 'contents.bin'), 'r');
  }

  /**
   * Loads an index directory. With `shared`, every array lives in a SharedArrayBuffer, so {@link shared}
   * can hand the same memory to worker threads. A version-1 index throws {@link IndexVersionError}.
   */
  static async load(dir: string, options: { shared?: boolean } = {}): Promise<Bm25Index> {
    const meta = await readMeta(dir);
    if (meta.version !== INDEX_VERSION) throw new IndexVersionError(dir, meta.version);
    const size = (await stat(join(dir, 'postings.bin'))).size;
    if (size !== meta.postingsBytes)
      throw new Error(
        `${dir}/postings.bin: ${size} bytes, meta.json says ${meta.postingsBytes} (incomplete or corrupt index)`,
      );
    const sh = options.shared ?? false;
    const read = (name: string) => readInto(join(dir, name), sh);
    const arrays: IndexArrays = {
      termsBin: new Uint8Array(read('terms.bin')),
      termsIdx: new Float64Array(read('terms.idx')),
      dfs: new Uint32Array(read('df.bin')),
      postings: new Int32Array(read('postings.bin')),
      blocksIdx: new Uint32Array(read('blocks.idx')),
      termMax: new Float32Array(read('term-max.bin')),
      blockLast: new Int32Array(read('block-last.bin')),
      blockOffset: new Uint32Array(read('block-offset.bin')),
      blockMax: new Float32Array(read('block-max.bin')),
      blockSkip: new Int32Array(read('block-skip.bin')),
      norms: new Uint8Array(read('norms.bin')),
      idsBin: new Uint8Array(read('docids.bin')),
      idsIdx: new Float64Array(read('docids.idx')),
      contentsIdx: new Float64Array(read('contents.idx')),
    };
    const check = (name: string, length: number, want: number) => {
      if (length !== want)
        throw new Error(`${dir}/${name}: ${length} entries, meta.json implies ${want} (incomplete or corrupt index)`);
    };
    check('df.bin', arrays.dfs.length, meta.terms);
    check('blocks.idx', arrays.blocksIdx.length, meta.terms + 1);
    check('block-max.bin', arrays.blockMax.length, meta.blocks);
    check('block-skip.bin', arrays.blockSkip.length, meta.blocks * SKIPS);
    check('norms.bin', arrays.norms.length, meta.docs);
    check('docids.idx', arrays.idsIdx.length, meta.docs + 1);
    return new Bm25Index(dir, meta, arrays);
  }

  /** The same index over the same memory, in another thread (see {@link shared}). */
  static fromShared(s: SharedIndex): Bm25Index {
    return new Bm25Index(s.dir, s.meta, s.arrays);
  }

  /** What {@link fromShared} needs; the arrays must have been loaded with `shared: true` to be shared rather than copied. */
  get shared(): SharedIndex {
    if (!(this.arrays.postings.buffer instanceof SharedArrayBuffer))
      throw new Error(`${this.dir}: loaded without shared: true; its arrays would be copied into every worker`);
    return { dir: this.dir, meta: this.meta, arrays: this.arrays };
  }

  /** Bytes held in memory by the loaded index (contents stay on disk). */
  get memoryBytes(): number {
    return Object.values(this.arrays).reduce((sum: number, a: ArrayBufferView) => sum + a.byteLength, 0);
  }

  /** The sorted position of a term, or -1 (binary search over UTF-8 bytes). */
  termOrdinal(term: string): number {
    const q = this.encoder.encode(term);
    const { termsBin, termsIdx } = this.arrays;
    let lo = 0;
    let hi = this.meta.terms - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const c = compareBytes(termsBin, termsIdx[mid]!, termsIdx[mid + 1]!, q);
      if (c === 0) return mid;
      if (c < 0) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  docId(doc: number): string {
    return this.idsText.toString('utf8', this.arrays.idsIdx[doc]!, this.arrays.idsIdx[doc + 1]!);
  }

  contents(doc: number): string {
    const start = this.arrays.contentsIdx[doc]!;
    const buf = Buffer.allocUnsafe(this.arrays.contentsIdx[doc + 1]! - start);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(this.contentsFd, buf, off, buf.length - off, start + off);
      if (n === 0) throw new Error(`${this.dir}/contents.bin: truncated`);
      off += n;
    }
    return buf.toString('utf8');
  }

  /** Document frequency of an analysed term. */
  df(term: string): number {
    const o = this.termOrdinal(term);
    return o < 0 ? 0 : this.arrays.dfs[o]!;
  }

  /** An analysed term's postings (document numbers ascending, with term frequencies), decoded. */
  postings(term: string): { docs: Int32Array; tfs: Int32Array } {
    const o = this.termOrdinal(term);
    return o < 0 ? { docs: new Int32Array(0), tfs: new Int32Array(0) } : this.searcher.postings(o);
  }

  /** The query's terms in the index, each with its count in the query (analysed like the documents). */
  queryTerms(query: string): QueryTerm[] {
    const counts = new Map<string, number>();
    this.analyzer.analyze(query, (t) => counts.set(t, (counts.get(t) ?? 0) + 1));
    const terms: QueryTerm[] = [];
    for (const [term, count] of counts) {
      const ordinal = this.termOrdinal(term);
      if (ordinal >= 0) terms.push({ ordinal, count });
    }
    return terms;
  }

  /** The top `k` documents for a query, by score then id: exact, with block-max MaxScore pruning. */
  search(query: string, options: SearchOptions = {}): Hit[] {
    return this.hits(this.searcher.search(this.queryTerms(query), options.k ?? 10));
  }

  /** The same top `k` by scoring every posting of every query term (the reference the pruned search is tested against). */
  searchExhaustive(query: string, options: SearchOptions = {}): Hit[] {
    return this.hits(this.searcher.exhaustive(this.queryTerms(query), options.k ?? 10));
  }

  /** Counters of the last pruned search. */
  get lastSearchStats(): SearchStats {
    return { ...this.searcher.stats };
  }

  private hits(docs: { doc: number; score: number }[]): Hit[] {
    return docs.map(({ doc, score }) => ({ doc, id: this.docId(doc), score }));
  }

  close(): void {
    closeSync(this.contentsFd);
  }
}

function compareBytes(bin: Uint8Array, start: number, end: number, q: Uint8Array): number {
  const len = end - start;
  const n = Math.min(len, q.length);
  for (let i = 0; i < n; i++) {
    const d = bin[start + i]! - q[i]!;
    if (d !== 0) return d;
  }
  return len - q.length;
}
