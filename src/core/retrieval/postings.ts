/**
 * Postings in blocks, for exact top-k with dynamic pruning (index format v2, see bm25.ts).
 *
 * A term's postings are cut into blocks of {@link BLOCK} documents. Each block is stored frame-of-reference
 * bit-packed in 32-bit words: one header word (`docBits | tfBits << 8`), then the doc-id gaps minus one
 * (`doc − previous doc − 1`, the first against the previous block's last doc, or −1), then the term
 * frequencies minus one, each run packed at its bit width and padded to a word. A term in every document
 * needs 0 bits a gap; most frequencies are 1 and need 0 or 1 bit. Beside the words, per block: its last doc
 * id (for skipping), its word offset, and its **block-max score**: the largest per-posting BM25 score in the
 * block, computed with exactly the float arithmetic of the scorer, so it bounds every score it stands for.
 * A term's max score is the max of its blocks'. And per block, the doc ids at positions 31, 63 and 95 (its
 * **skips**): a 32-value run of gaps starts on a word boundary (32 · bits is a whole number of words), so a
 * probe for a document deep in a block decodes only the run that can hold it.
 */
import { closeSync, openSync, writeSync } from 'node:fs';

/** Postings per block (Lucene's as well). */
export const BLOCK = 128;
/** Values per skip run inside a block, and skips per block. */
export const RUN = 32;
export const SKIPS = BLOCK / RUN - 1;

/** Bits needed for `v` (0 for 0). */
export function bitWidth(v: number): number {
  return v === 0 ? 0 : 32 - Math.clz32(v);
}

/** Packs `n` values of `bits` bits (each < 2^bits) into `out` from word `at`; returns the next free word. */
export function pack(values: Int32Array, n: number, bits: number, out: Uint32Array, at: number): number {
  if (bits === 0) return at;
  const words = (n * bits + 31) >>> 5;
  out.fill(0, at, at + words);
  let bit = 0;
  for (let i = 0; i < n; i++) {
    const w = at + (bit >>> 5);
    const sh = bit & 31;
    const v = values[i]! >>> 0;
    out[w] = (out[w]! | (v << sh)) >>> 0;
    if (sh + bits > 32) out[w + 1] = (v >>> (32 - sh)) >>> 0;
    bit += bits;
  }
  return at + words;
}

/** The float32 steps of Lucene's BM25Scorer: `weight − weight / (1 + tf · normInverse)`. */
export function bm25Score(weight: number, tf: number, normInverse: number): number {
  const f = Math.fround;
  return f(weight - f(weight / f(1 + f(tf * normInverse))));
}

/** Lucene's idf as a float: ln(1 + (N − n + 0.5) / (n + 0.5)). */
export function bm25Idf(docs: number, df: number): number {
  return Math.fround(Math.log(1 + (docs - df + 0.5) / (df + 0.5)));
}

/** Appends bytes to a file through a 4 MB buffer (synchronous). */
export class BinaryFile {
  private readonly fd: number;
  private readonly buf = Buffer.allocUnsafe(4 << 20);
  private used = 0;
  private closed = false;
  /** Bytes written so far. */
  length = 0;
  constructor(path: string) {
    this.fd = openSync(path, 'w');
  }
  write(bytes: Uint8Array): void {
    if (this.used + bytes.length > this.buf.length) this.flush();
    if (bytes.length > this.buf.length) {
      let off = 0;
      while (off < bytes.length) off += writeSync(this.fd, bytes, off, bytes.length - off);
    } else {
      this.buf.set(bytes, this.used);
      this.used += bytes.length;
    }
    this.length += bytes.length;
  }
  /** Writes UTF-8 text; returns its length in bytes. */
  writeText(text: string): number {
    const n = Buffer.byteLength(text, 'utf8');
    if (this.used + n > this.buf.length) this.flush();
    if (n > this.buf.length) this.write(Buffer.from(text, 'utf8'));
    else {
      this.buf.write(text, this.used, 'utf8');
      this.used += n;
      this.length += n;
    }
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

/** What {@link BlockWriter} produces besides the words file. */
export interface BlockTables {
  /** Per term (T + 1): its first block. */
  blocksIdx: Uint32Array;
  /** Per block: last doc id, word offset into the postings, max score. */
  blockLast: Uint32Array;
  blockOffset: Uint32Array;
  blockMax: Float32Array;
  /** Per block, SKIPS entries: the doc id ending each of its first runs (the block's last doc where it is shorter). */
  blockSkip: Uint32Array;
  /** Per term: max score over its postings. */
  termMax: Float32Array;
  /** Words written (the postings file holds them plus one padding word). */
  words: number;
}

/**
 * Writes block postings term by term (terms in dictionary order, each term's postings in doc order) to a
 * file, computing the block and term upper bounds with the index's scoring (`normInverse` per norm byte).
 */
export class BlockWriter {
  private readonly out: BinaryFile;
  private readonly tables: BlockTables;
  private readonly docs = new Int32Array(BLOCK);
  private readonly tfs = new Int32Array(BLOCK);
  private readonly gaps = new Int32Array(BLOCK);
  private readonly scratch = new Uint32Array(2 * BLOCK + 1);
  private term = 0;
  private block = 0;
  private n = 0;
  private prevLast = -1;
  private weight = 0;
  private max = 0;

  /** `dfs`: every term's document frequency (sizes the block tables). */
  constructor(
    path: string,
    private readonly dfs: Uint32Array,
    private readonly docCount: number,
    private readonly norms: Uint8Array,
    private readonly normInverse: Float32Array,
  ) {
    const T = dfs.length;
    const blocksIdx = new Uint32Array(T + 1);
    for (let t = 0; t < T; t++) blocksIdx[t + 1] = blocksIdx[t]! + Math.ceil(dfs[t]! / BLOCK);
    const B = blocksIdx[T]!;
    this.tables = {
      blocksIdx,
      blockLast: new Uint32Array(B),
      blockOffset: new Uint32Array(B),
      blockMax: new Float32Array(B),
      blockSkip: new Uint32Array(B * SKIPS),
      termMax: new Float32Array(T),
      words: 0,
    };
    this.out = new BinaryFile(path);
    this.startTerm();
  }

  private startTerm(): void {
    this.n = 0;
    this.prevLast = -1;
    this.max = 0;
    if (this.term < this.dfs.length) this.weight = bm25Idf(this.docCount, this.dfs[this.term]!);
  }

  /** Adds the next posting of the current term. */
  add(doc: number, tf: number): void {
    this.docs[this.n] = doc;
    this.tfs[this.n] = tf;
    if (++this.n === BLOCK) this.flushBlock();
  }

  /** Ends the current term (its posting count must equal its df). */
  endTerm(): void {
    if (this.n > 0) this.flushBlock();
    const t = this.term;
    if (this.block !== this.tables.blocksIdx[t + 1])
      throw new Error(
        `term ${t}: ${this.block - this.tables.blocksIdx[t]!} blocks written, df ${this.dfs[t]} needs ${this.tables.blocksIdx[t + 1]! - this.tables.blocksIdx[t]!}`,
      );
    this.tables.termMax[t] = this.max;
    this.term++;
    this.startTerm();
  }

  private flushBlock(): void {
    const { docs, tfs, gaps, n } = this;
    let maxGap = 0;
    let maxTf = 0;
    let prev = this.prevLast;
    let bmax = 0;
    for (let i = 0; i < n; i++) {
      const g = docs[i]! - prev - 1;
      gaps[i] = g;
      if (g > maxGap) maxGap = g;
      prev = docs[i]!;
      if (tfs[i]! - 1 > maxTf) maxTf = tfs[i]! - 1;
      const s = bm25Score(this.weight, tfs[i]!, this.normInverse[this.norms[docs[i]!]!]!);
      if (s > bmax) bmax = s;
    }
    for (let i = 0; i < n; i++) tfs[i] = tfs[i]! - 1;
    const docBits = bitWidth(maxGap);
    const tfBits = bitWidth(maxTf);
    const w = this.scratch;
    w[0] = docBits | (tfBits << 8);
    const end = pack(tfs, n, tfBits, w, pack(gaps, n, docBits, w, 1));
    const b = this.block++;
    this.tables.blockLast[b] = prev;
    this.tables.blockOffset[b] = this.tables.words;
    this.tables.blockMax[b] = bmax;
    for (let r = 0; r < SKIPS; r++) this.tables.blockSkip[b * SKIPS + r] = docs[Math.min(n, (r + 1) * RUN) - 1]!;
    if (bmax > this.max) this.max = bmax;
    this.out.write(new Uint8Array(w.buffer, 0, end * 4));
    this.tables.words += end;
    this.prevLast = prev;
    this.n = 0;
  }

  /** Closes the file (with its padding word) and returns the tables. */
  finish(): BlockTables {
    if (this.term !== this.dfs.length) throw new Error(`${this.term} of ${this.dfs.length} terms written`);
    this.out.write(new Uint8Array(4));
    this.out.close();
    return this.tables;
  }
}
