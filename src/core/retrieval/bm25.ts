/**
 * BM25 that reproduces Pyserini's (Lucene 9 BM25Similarity over Anserini's DefaultEnglishAnalyzer), score for
 * score:
 *   idf(t)   = ln(1 + (N − n_t + 0.5) / (n_t + 0.5))                      (as a float, like Lucene)
 *   s(t, d)  = idf · tf / (tf + k1 · (1 − b + b · dl/avgdl))              (Lucene's form: no (k1+1) factor)
 * with dl the document length *as Lucene stores it* (one SmallFloat byte: exact to 40, then 4 significant
 * bits), avgdl = total tokens / N exactly, k1 = 0.9 and b = 0.4 by default, a query term repeated k times
 * weighing k, and ties broken by document id ascending. The arithmetic follows Lucene's float32 steps
 * (BM25Scorer: weight − weight / (1 + tf · normInverse)), summed in double as Lucene's disjunctions do.
 *
 * The index is a directory of versioned binary files (typed arrays, never one giant JSON string):
 *   meta.json          format, version, analyzer, k1/b, N, terms, total tokens, sizes
 *   terms.bin/.idx     the sorted term dictionary (UTF-8) and its offsets
 *   postings.bin/.idx  per term, VByte (doc-id delta, tf) pairs; offsets and document frequencies
 *   norms.bin          one SmallFloat length byte per document
 *   docids.bin/.idx    document ids;  contents.bin/.idx   stored contents (for /retrieve)
 * It is built in one analysis pass over the corpus (postings sized exactly, then filled), loaded by reading
 * the files into typed arrays (contents stay on disk and are read per hit).
 */
import { closeSync, mkdirSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { freemem, totalmem } from 'node:os';
import { join } from 'node:path';
import { DefaultEnglishAnalyzer, type Analyzer } from './analyzer';
import { LENGTH_TABLE, intToByte4 } from './smallfloat';

export interface Bm25Params {
  k1: number;
  b: number;
}
/** Pyserini's defaults, as Search-R1 uses them. */
export const PYSERINI_BM25: Bm25Params = { k1: 0.9, b: 0.4 };

export const INDEX_FORMAT = 'sas-bm25';
export const INDEX_VERSION = 1;

export interface IndexMeta {
  format: typeof INDEX_FORMAT;
  version: number;
  analyzer: string;
  k1: number;
  b: number;
  docs: number;
  terms: number;
  totalTokens: number;
  postingsBytes: number;
  created: string;
  source?: string;
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
  phase: 'analyze' | 'postings' | 'write';
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
  private readonly docTerms = new ChunkedBytes();
  private norms = new Uint8Array(1 << 16);
  private docs = 0;
  /** Ids and contents go to disk as they come (a large corpus's text must not stay in memory). */
  private readonly idsOut: BufferedFile;
  private readonly contentsOut: BufferedFile;
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
    this.idsOut = new BufferedFile(join(this.tmp, 'docids.bin'));
    this.contentsOut = new BufferedFile(join(this.tmp, 'contents.bin'));
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
    this.idsIdx[doc + 1] = this.idsIdx[doc]! + this.idsOut.write(id);
    this.contentsIdx[doc + 1] = this.contentsIdx[doc]! + this.contentsOut.write(contents);
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

  /** Writes the index into its directory (atomically: the temporary directory is renamed at the end). */
  async write(): Promise<IndexMeta> {
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
    if (totalPostings > 2 ** 32 - 1) throw new IndexTooLargeError(`postings of ${(totalPostings / 2 ** 30).toFixed(1)} GiB exceed this format's 4 GiB single-file limit`);
    const postings = new Uint8Array(totalPostings);
    const cursor = new Float64Array(T);
    const last = new Int32Array(T).fill(-1);
    for (let k = 0; k < T; k++) cursor[k] = postingsIdx[k]!;
    const reader = new ChunkReader(this.docTerms.finish());
    for (let doc = 0; doc < N; doc++) {
      const n = reader.next();
      for (let j = 0; j < n; j++) {
        const s = rank[reader.next()]!;
        const tf = reader.next();
        const delta = last[s]! < 0 ? doc : doc - last[s]!;
        last[s] = doc;
        let pos = cursor[s]!;
        pos = writeVByte(postings, pos, delta);
        cursor[s] = writeVByte(postings, pos, tf);
      }
      if ((doc & 0xffff) === 0) this.options.onProgress?.({ phase: 'postings', docs: doc, tokens: this.totalTokens, terms: T });
    }
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
      postingsBytes: totalPostings,
      created: new Date().toISOString(),
      ...(this.options.source ? { source: this.options.source } : {}),
    };
    const tmp = this.tmp;
    const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    await writeFile(join(tmp, 'terms.bin'), Buffer.concat(termBytes));
    await writeFile(join(tmp, 'terms.idx'), bytes(termsIdx));
    await writeFile(join(tmp, 'postings.bin'), postings);
    await writeFile(join(tmp, 'postings.idx'), bytes(postingsIdx));
    await writeFile(join(tmp, 'df.bin'), bytes(dfs));
    await writeFile(join(tmp, 'norms.bin'), this.norms.subarray(0, N));
    await writeFile(join(tmp, 'docids.idx'), bytes(this.idsIdx.subarray(0, N + 1)));
    await writeFile(join(tmp, 'contents.idx'), bytes(this.contentsIdx.subarray(0, N + 1)));
    await writeFile(join(tmp, 'meta.json'), `${JSON.stringify(meta, null, 2)}\n`);
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    return meta;
  }
}

/** Appends UTF-8 text to a file through a 4 MB buffer (synchronous writes: the builder's add() is sync). */
class BufferedFile {
  private readonly fd: number;
  private readonly buf = Buffer.allocUnsafe(4 << 20);
  private used = 0;
  private closed = false;
  constructor(path: string) {
    this.fd = openSync(path, 'w');
  }
  /** Writes `text`; returns its length in bytes. */
  write(text: string): number {
    const n = Buffer.byteLength(text, 'utf8');
    if (this.used + n > this.buf.length) this.flush();
    if (n > this.buf.length) {
      writeSync(this.fd, Buffer.from(text, 'utf8'));
      return n;
    }
    this.buf.write(text, this.used, 'utf8');
    this.used += n;
    return n;
  }
  private flush(): void {
    let off = 0;
    while (off < this.used) off += writeSync(this.fd, this.buf, off, this.used - off);
    this.used = 0;
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.flush();
    closeSync(this.fd);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Searching.

export interface SearchOptions {
  k?: number;
}

export class Bm25Index {
  readonly analyzer: Analyzer;
  private readonly cache = new Float32Array(256);
  private readonly avgdl: number;
  /** Per-search accumulator, reused (scores as doubles, and which documents were touched). */
  private readonly acc: Float64Array;
  private readonly touched: Uint32Array;
  private readonly seen: Uint8Array;
  private readonly encoder = new TextEncoder();
  private readonly contentsFd: number;

  private constructor(
    readonly dir: string,
    readonly meta: IndexMeta,
    private readonly termsBin: Buffer,
    private readonly termsIdx: Float64Array,
    private readonly postings: Buffer,
    private readonly postingsIdx: Float64Array,
    private readonly dfs: Uint32Array,
    private readonly norms: Uint8Array,
    private readonly idsBin: Buffer,
    private readonly idsIdx: Float64Array,
    private readonly contentsIdx: Float64Array,
  ) {
    if (meta.analyzer !== new DefaultEnglishAnalyzer().id) throw new Error(`${dir}: built with analyzer "${meta.analyzer}", which this version does not have`);
    this.analyzer = new DefaultEnglishAnalyzer();
    // avgdl and the per-norm cache exactly as Lucene's BM25Similarity.scorer computes them (floats).
    this.avgdl = f(meta.totalTokens / meta.docs);
    const k1 = f(meta.k1);
    const b = f(meta.b);
    for (let i = 0; i < 256; i++) this.cache[i] = f(1 / f(k1 * f(f(1 - b) + f(f(b * LENGTH_TABLE[i]!) / this.avgdl))));
    this.acc = new Float64Array(meta.docs);
    this.touched = new Uint32Array(meta.docs);
    this.seen = new Uint8Array(meta.docs);
    this.contentsFd = openSync(join(dir, 'contents.bin'), 'r');
  }

  static async load(dir: string): Promise<Bm25Index> {
    let meta: IndexMeta;
    try {
      meta = JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8'));
    } catch (e) {
      throw new Error(`${dir}: not a BM25 index (meta.json: ${(e as Error).message})`);
    }
    if (meta.format !== INDEX_FORMAT) throw new Error(`${dir}/meta.json: format "${meta.format}" is not ${INDEX_FORMAT}`);
    if (meta.version !== INDEX_VERSION) throw new Error(`${dir}/meta.json: index version ${meta.version}; this build reads version ${INDEX_VERSION} (rebuild the index)`);
    const size = (await stat(join(dir, 'postings.bin'))).size;
    if (size !== meta.postingsBytes) throw new Error(`${dir}/postings.bin: ${size} bytes, meta.json says ${meta.postingsBytes} (incomplete or corrupt index)`);
    const read = (name: string) => readFile(join(dir, name));
    const f64 = (b: Buffer) => new Float64Array(b.buffer, b.byteOffset, b.byteLength / 8);
    const u32 = (b: Buffer) => new Uint32Array(b.buffer, b.byteOffset, b.byteLength / 4);
    const aligned = async (name: string) => {
      const b = await read(name);
      // typed views need aligned offsets; readFile's Buffer may come from a pool
      return b.byteOffset % 8 === 0 ? b : Buffer.from(b);
    };
    const [termsBin, termsIdx, postings, postingsIdx, dfs, norms, idsBin, idsIdx, contentsIdx] = await Promise.all([
      read('terms.bin'),
      aligned('terms.idx'),
      read('postings.bin'),
      aligned('postings.idx'),
      aligned('df.bin'),
      read('norms.bin'),
      read('docids.bin'),
      aligned('docids.idx'),
      aligned('contents.idx'),
    ]);
    return new Bm25Index(dir, meta, termsBin, f64(termsIdx), postings, f64(postingsIdx), u32(dfs), norms, idsBin, f64(idsIdx), f64(contentsIdx));
  }

  /** Bytes held in memory by the loaded index (contents stay on disk). */
  get memoryBytes(): number {
    return (
      this.termsBin.byteLength +
      this.termsIdx.byteLength +
      this.postings.byteLength +
      this.postingsIdx.byteLength +
      this.dfs.byteLength +
      this.norms.byteLength +
      this.idsBin.byteLength +
      this.idsIdx.byteLength +
      this.contentsIdx.byteLength +
      this.acc.byteLength +
      this.touched.byteLength +
      this.seen.byteLength
    );
  }

  /** The sorted position of a term, or -1 (binary search over UTF-8 bytes). */
  termOrdinal(term: string): number {
    const q = this.encoder.encode(term);
    let lo = 0;
    let hi = this.meta.terms - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const c = compareBytes(this.termsBin, this.termsIdx[mid]!, this.termsIdx[mid + 1]!, q);
      if (c === 0) return mid;
      if (c < 0) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  docId(doc: number): string {
    return this.idsBin.toString('utf8', this.idsIdx[doc]!, this.idsIdx[doc + 1]!);
  }

  contents(doc: number): string {
    const start = this.contentsIdx[doc]!;
    const buf = Buffer.allocUnsafe(this.contentsIdx[doc + 1]! - start);
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
    return o < 0 ? 0 : this.dfs[o]!;
  }

  /** The top `k` documents for a query (analysed like the documents), by score then id. */
  search(query: string, options: SearchOptions = {}): Hit[] {
    const k = options.k ?? 10;
    const counts = new Map<string, number>();
    this.analyzer.analyze(query, (t) => counts.set(t, (counts.get(t) ?? 0) + 1));
    const N = this.meta.docs;
    const { acc, touched, seen, cache, norms, postings } = this;
    let nTouched = 0;
    for (const [term, count] of counts) {
      const o = this.termOrdinal(term);
      if (o < 0) continue;
      const df = this.dfs[o]!;
      const idf = f(Math.log(1 + (N - df + 0.5) / (df + 0.5)));
      const weight = f(1 * idf); // boost 1 per clause; `count` clauses
      let pos = this.postingsIdx[o]!;
      const end = this.postingsIdx[o + 1]!;
      let doc = 0;
      let first = true;
      while (pos < end) {
        // VByte doc delta
        let v = 0;
        let shift = 1;
        let byte: number;
        do {
          byte = postings[pos++]!;
          v += (byte & 0x7f) * shift;
          shift *= 128;
        } while (byte >= 0x80);
        doc = first ? v : doc + v;
        first = false;
        let tf = 0;
        shift = 1;
        do {
          byte = postings[pos++]!;
          tf += (byte & 0x7f) * shift;
          shift *= 128;
        } while (byte >= 0x80);
        const normInverse = cache[norms[doc]!]!;
        const s = f(weight - f(weight / f(1 + f(tf * normInverse))));
        if (seen[doc] === 0) {
          seen[doc] = 1;
          touched[nTouched++] = doc;
          acc[doc] = 0;
        }
        acc[doc]! += count * s;
      }
    }
    // Top k by (score desc, id asc): a bounded min-heap on "worse" order.
    const heap: Hit[] = [];
    const worse = (a: Hit, b: Hit) => a.score < b.score || (a.score === b.score && a.id > b.id);
    for (let j = 0; j < nTouched; j++) {
      const doc = touched[j]!;
      seen[doc] = 0;
      const score = f(acc[doc]!);
      if (heap.length === k && score < heap[0]!.score) continue;
      const hit = { doc, id: '', score };
      if (heap.length < k) {
        hit.id = this.docId(doc);
        heap.push(hit);
        siftUp(heap, heap.length - 1, worse);
      } else {
        hit.id = this.docId(doc);
        if (worse(heap[0]!, hit)) {
          heap[0] = hit;
          siftDown(heap, 0, worse);
        }
      }
    }
    return heap.sort((a, b) => (worse(a, b) ? 1 : worse(b, a) ? -1 : 0));
  }

  close(): void {
    closeSync(this.contentsFd);
  }
}

function compareBytes(bin: Buffer, start: number, end: number, q: Uint8Array): number {
  const len = end - start;
  const n = Math.min(len, q.length);
  for (let i = 0; i < n; i++) {
    const d = bin[start + i]! - q[i]!;
    if (d !== 0) return d;
  }
  return len - q.length;
}

function siftUp<T>(h: T[], i: number, worse: (a: T, b: T) => boolean): void {
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (!worse(h[i]!, h[p]!)) break;
    [h[i], h[p]] = [h[p]!, h[i]!];
    i = p;
  }
}

function siftDown<T>(h: T[], i: number, worse: (a: T, b: T) => boolean): void {
  for (;;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let m = i;
    if (l < h.length && worse(h[l]!, h[m]!)) m = l;
    if (r < h.length && worse(h[r]!, h[m]!)) m = r;
    if (m === i) return;
    [h[i], h[m]] = [h[m]!, h[i]!];
    i = m;
  }
}
