/**
 * Query evaluation over block postings (postings.ts): exact top-k BM25 with dynamic pruning, and the
 * exhaustive reference it is tested against.
 *
 * The pruned search is block-max MaxScore (Turtle & Flood's MaxScore, with the per-block bounds of
 * Ding & Suel's block-max indexes, organised in doc-id windows as Lucene's MaxScoreBulkScorer does):
 *   1. Doc ids are visited in windows [wMin, wEnd) that end at a block boundary of the essential terms.
 *   2. For the window, each term's bound is the max of its block-max scores over the blocks the window
 *      touches (× the term's count in the query). Terms sorted by bound: the longest prefix whose bounds sum
 *      below the current k-th score θ is *non-essential* — a document matching only those cannot enter the
 *      top k — and when every term is non-essential the whole window is skipped without decoding a block.
 *   3. Essential terms are scored term-at-a-time into a 4,096-doc accumulator (a bitset and a score array;
 *      a single one straight into the candidate list); each candidate then probes the non-essential terms
 *      from the largest bound down, dropped as soon as its score plus the remaining bounds falls below θ —
 *      the term about to be probed counted with its bound in the candidate's block, read without decoding;
 *      a probe decodes only the 32-posting run of the block that can hold the candidate.
 *   4. Survivors enter a bounded heap ordered by (score desc, id asc); θ is its minimum once full.
 *   Before the scan, θ is seeded from the short lists ({@link Bm25Searcher.seed}) so that the first windows
 *   already prune as if the best documents had been found.
 * Exactness: a document is only ever skipped when an upper bound of its score is *strictly* below θ (an
 * equal score could still win on id). Scores are floats summed in double, as Lucene's disjunctions do; a bound
 * is a double sum of float bounds, so it is inflated by 2^-30 before its float comparison with θ to absorb
 * any difference in summation order. The bounds are the exact maxima of the scorer's own float arithmetic.
 */
import * as postings from './postings';

/** The arrays of a loaded index that search reads. */
export interface PostingArrays {
  /** Block words (with one padding word at the end). */
  postings: Int32Array;
  dfs: Uint32Array;
  /** Per term (T + 1): its first block. */
  blocksIdx: Uint32Array;
  blockLast: Int32Array;
  blockOffset: Uint32Array;
  blockMax: Float32Array;
  /** Per block, postings.SKIPS doc ids: the ends of its first 32-posting runs. */
  blockSkip: Int32Array;
  termMax: Float32Array;
  norms: Uint8Array;
}

/** A query term: its dictionary ordinal and how often it occurs in the query (k times weighs k). */
export interface QueryTerm {
  ordinal: number;
  count: number;
}

export interface ScoredDoc {
  doc: number;
  score: number;
}

// Bound once: under the TypeScript loader the tests and benches use, each call through an import binding goes
// through a getter, which costs in the inner loops.
const { BLOCK, RUN, SKIPS, bm25Idf, bm25Score } = postings;
const NO_MORE = 0x7fffffff;
const WINDOW = 4096;
/** Terms with at most this many postings are read whole before the scan, to seed the threshold. */
const SEED_DF = 8 * 128;
/** A lead term with at most this many postings has all its documents scored before the scan. */
const SEED_ALL = 256;
/** Bounds are inflated by this factor before comparing them with θ (see the module comment). */
const SLACK = 1 + 2 ** -30;
const f = Math.fround;

/**
 * A forward-only iterator over one term's block postings. Doc ids are decoded lazily, only as far into a
 * block as a target needs (probing a candidate rarely needs the whole block); term frequencies, packed at a
 * fixed width, are read at the position that matched without decoding the others.
 */
class Cursor {
  weight = 0;
  ordinal = 0;
  /** The term's count in the query, and what its bounds are widened by when it is over 1 (see reset). */
  count = 1;
  slack = 0;
  df = 0;
  b0 = 0;
  b1 = 0;
  /** Current block for skipping (never behind the entered one). */
  blk = 0;
  /** The entered block and its size; position of the current document in it. */
  dec = -1;
  n = 0;
  pos = 0;
  /** Current document: −1 before the start, NO_MORE past the end. */
  doc = -1;
  /** This term's bound over the current window (count × max block score). */
  windowMax = 0;
  readonly docs = new Int32Array(BLOCK);
  /** Doc-id decoding state in the entered block: values decoded, last doc, first word of the gaps, width, mask. */
  private decoded = 0;
  private lastDecoded = 0;
  private word = 0;
  private docBits = 0;
  private docMask = 0;
  /** Where the block's frequencies start, their width and mask. */
  private tfWord = 0;
  private tfBits = 0;
  private tfMask = 0;

  /** Per norm byte, the score of a posting with tf 1 (most of them): the same floats, without the division. */
  private readonly scoreTf1 = new Float32Array(256);

  constructor(
    private readonly a: PostingArrays,
    private readonly normInverse: Float32Array,
  ) {}

  reset(t: QueryTerm, docCount: number): void {
    this.ordinal = t.ordinal;
    this.df = this.a.dfs[t.ordinal]!;
    // A term repeated in the query: Lucene's BooleanQuery rewrite merges the duplicate SHOULD clauses into one
    // with boost = count, and BM25Scorer's weight is boost · idf, in float. Its scores are count times the
    // boost-1 ones (which the stored bounds bound) up to float rounding: each differs from the exact
    // weight · x / (1 + x) by at most weight · 2^-22, so count × (stored bound + idf · 2^-20) bounds them.
    const idf = bm25Idf(docCount, this.df);
    this.weight = f(t.count * idf);
    this.count = t.count;
    this.slack = t.count === 1 ? 0 : idf * 2 ** -20;
    for (let i = 0; i < 256; i++) this.scoreTf1[i] = bm25Score(this.weight, 1, this.normInverse[i]!);
    this.b0 = this.a.blocksIdx[t.ordinal]!;
    this.b1 = this.a.blocksIdx[t.ordinal + 1]!;
    this.rewind();
  }

  /** Back to the start of the list. */
  rewind(): void {
    this.blk = this.b0;
    this.dec = -1;
    this.n = 0;
    this.pos = 0;
    this.doc = -1;
  }

  /** Enters block b: reads its header; decodes nothing yet. */
  enter(b: number): void {
    const { postings, blockOffset, blockLast } = this.a;
    const off = blockOffset[b]!;
    const header = postings[off]!;
    const n = b === this.b1 - 1 ? this.df - (b - this.b0) * BLOCK : BLOCK;
    const docBits = header & 0xff;
    const tfBits = (header >>> 8) & 0xff;
    this.n = n;
    this.docBits = docBits;
    this.docMask = docBits === 32 ? -1 : (1 << docBits) - 1;
    this.word = off + 1;
    this.tfWord = off + 1 + ((n * docBits + 31) >>> 5);
    this.tfBits = tfBits;
    this.tfMask = tfBits === 32 ? -1 : (1 << tfBits) - 1;
    this.decoded = 0;
    this.lastDecoded = b === this.b0 ? -1 : blockLast[b - 1]!;
    this.dec = b;
    this.pos = 0;
  }

  /** Decodes doc ids of the entered block until one ≥ target (or the block's end). */
  decodeTo(target: number): void {
    const n = this.n;
    let i = this.decoded;
    let doc = this.lastDecoded;
    if (i === n || doc >= target) return;
    const docs = this.docs;
    const bits = this.docBits;
    if (bits === 0) {
      while (i < n && doc < target) docs[i++] = ++doc;
    } else if (bits === 32) {
      const words = this.a.postings;
      const base = this.word;
      while (i < n && doc < target) docs[i] = doc += words[base + i++]! + 1;
    } else {
      // Branch-free: value i starts at bit i · bits of the run; its high part, if any, is in the next word.
      // (x << 1) << (31 − sh) is x << (32 − sh) without JavaScript's shift-by-32-is-0 when sh = 0.
      const words = this.a.postings;
      const mask = this.docMask;
      const base = this.word;
      let bit = i * bits;
      while (i < n && doc < target) {
        const w = base + (bit >>> 5);
        const sh = bit & 31;
        doc += (((words[w]! >>> sh) | ((words[w + 1]! << 1) << (31 - sh))) & mask) + 1;
        docs[i++] = doc;
        bit += bits;
      }
    }
    this.decoded = i;
    this.lastDecoded = doc;
  }

  /** The term frequency at position p of the entered block. */
  tf(p: number): number {
    const bits = this.tfBits;
    if (bits === 0) return 1;
    const bit = p * bits;
    const w = this.tfWord + (bit >>> 5);
    const sh = bit & 31;
    const words = this.a.postings;
    let v = words[w]! >>> sh;
    if (sh + bits > 32) v |= words[w + 1]! << (32 - sh);
    return (v & this.tfMask) + 1;
  }

  /** Moves the skip pointer to the first block that can hold `target` (no decoding). */
  shallow(target: number): void {
    const last = this.a.blockLast;
    let b = this.blk;
    while (b < this.b1 && last[b]! < target) b++;
    this.blk = b;
  }

  /** The first document ≥ target (NO_MORE when none). */
  advance(target: number): number {
    if (this.doc >= target) return this.doc;
    this.shallow(target);
    if (this.blk >= this.b1) return (this.doc = NO_MORE);
    if (this.dec !== this.blk) this.enter(this.blk);
    if (this.lastDecoded < target) this.skipTo(target);
    this.decodeTo(target); // the block's last doc is ≥ target, so this stops on one
    const docs = this.docs;
    let p = this.pos;
    while (docs[p]! < target) p++;
    this.pos = p;
    return (this.doc = docs[p]!);
  }

  /**
   * Jumps to the latest run boundary of the entered block whose preceding doc id is below target: the values
   * before it are never decoded. (Run r starts at value 32r, on a word boundary; the skip table holds the doc
   * id ending each of the first runs.)
   */
  private skipTo(target: number): void {
    const skips = this.a.blockSkip;
    const at = this.dec * SKIPS;
    for (let r = SKIPS; r >= 1 && r * RUN > this.decoded; r--) {
      if (r * RUN < this.n && skips[at + r - 1]! < target) {
        this.decoded = this.pos = r * RUN;
        this.lastDecoded = skips[at + r - 1]!;
        return;
      }
    }
  }

  /** This term's score for the posting at position p of the entered block (document d). */
  scoreAt(p: number, d: number): number {
    const tf = this.tf(p);
    const norm = this.a.norms[d]!;
    return tf === 1 ? this.scoreTf1[norm]! : bm25Score(this.weight, tf, this.normInverse[norm]!);
  }

  /** This term's score in the current document (after advance landed on it). */
  score(): number {
    return this.scoreAt(this.pos, this.doc);
  }

  /** The bound over [wMin, wEnd): max block score of the blocks that window can touch, × count. */
  updateWindowMax(wMin: number, wEnd: number): void {
    if (this.doc >= wEnd) {
      this.windowMax = 0;
      return;
    }
    this.shallow(wMin);
    const { blockMax, blockLast } = this.a;
    let m = 0;
    for (let b = this.blk; b < this.b1; b++) {
      if (blockMax[b]! > m) m = blockMax[b]!;
      if (blockLast[b]! >= wEnd - 1) break;
    }
    this.windowMax = m > 0 ? this.count * (m + this.slack) : 0;
  }

  /** Adds this term's scores for its documents in [lo, hi) into the window accumulator. */
  scoreWindow(lo: number, hi: number, scores: Float64Array, matches: Int32Array): void {
    if (this.advance(lo) >= hi) return;
    const docs = this.docs;
    let p = this.pos;
    for (;;) {
      this.decodeTo(NO_MORE);
      const n = this.n;
      for (; p < n; p++) {
        const d = docs[p]!;
        if (d >= hi) {
          this.pos = p;
          this.doc = d;
          return;
        }
        const i = d - lo;
        matches[i >>> 5]! |= 1 << (i & 31);
        scores[i]! += this.scoreAt(p, d);
      }
      const b = this.dec + 1;
      if (b >= this.b1) {
        this.blk = this.b1;
        this.doc = NO_MORE;
        return;
      }
      this.blk = b;
      this.enter(b);
      p = 0;
    }
  }

  /** One essential term: its documents in [lo, hi) and their scores straight into the candidate arrays. */
  collect(lo: number, hi: number, docsOut: Int32Array, scoresOut: Float64Array): number {
    let n = 0;
    if (this.advance(lo) >= hi) return 0;
    const docs = this.docs;
    let p = this.pos;
    for (;;) {
      this.decodeTo(NO_MORE);
      const end = this.n;
      for (; p < end; p++) {
        const d = docs[p]!;
        if (d >= hi) {
          this.pos = p;
          this.doc = d;
          return n;
        }
        docsOut[n] = d;
        scoresOut[n++] = this.scoreAt(p, d);
      }
      const b = this.dec + 1;
      if (b >= this.b1) {
        this.blk = this.b1;
        this.doc = NO_MORE;
        return n;
      }
      this.blk = b;
      this.enter(b);
      p = 0;
    }
  }

  /** This term's bound for document d from the block that can hold it (0 past its last block); no decoding. */
  blockBound(d: number): number {
    this.shallow(d);
    return this.blk < this.b1 ? this.count * (this.a.blockMax[this.blk]! + this.slack) : 0;
  }

  /** Every posting, for the exhaustive reference: calls fn(doc, score). */
  forEach(fn: (doc: number, score: number) => void): void {
    for (let b = this.b0; b < this.b1; b++) {
      this.enter(b);
      this.decodeTo(NO_MORE);
      for (let p = 0; p < this.n; p++) {
        const d = this.docs[p]!;
        fn(d, this.scoreAt(p, d));
      }
    }
  }
}

/** A binary min-heap of numbers in an array (the seed's k best scores). */
function heapPush(h: number[], x: number): void {
  let i = h.length;
  h.push(x);
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (h[p]! <= x) break;
    h[i] = h[p]!;
    i = p;
  }
  h[i] = x;
}

function heapReplaceRoot(h: number[], x: number): void {
  const n = h.length;
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && h[r]! < h[l]! ? r : l;
    if (h[c]! >= x) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = x;
}

/** The best k (score desc, then id asc, then doc asc) in a bounded heap whose root is the worst kept. */
class TopK {
  private docs: Int32Array = new Int32Array(0);
  private scores: Float64Array = new Float64Array(0);
  private ids: (string | undefined)[] = [];
  size = 0;
  k = 0;

  constructor(private readonly idOf: (doc: number) => string) {}

  reset(k: number): void {
    this.k = k;
    this.size = 0;
    if (this.docs.length < k) {
      this.docs = new Int32Array(k);
      this.scores = new Float64Array(k);
    }
    this.ids = new Array(k);
  }

  /** The score to beat (−∞ until k documents are kept). */
  get threshold(): number {
    return this.size === this.k ? this.scores[0]! : -Infinity;
  }

  private id(i: number): string {
    return (this.ids[i] ??= this.idOf(this.docs[i]!));
  }

  /** Whether slot i ranks below (doc, score, id). */
  private worseThan(i: number, score: number, doc: number, id: () => string): boolean {
    const s = this.scores[i]!;
    if (s !== score) return s < score;
    const a = this.id(i);
    const b = id();
    return a !== b ? a > b : this.docs[i]! > doc;
  }

  private less(i: number, j: number): boolean {
    return this.worseThan(i, this.scores[j]!, this.docs[j]!, () => this.id(j));
  }

  private swap(i: number, j: number): void {
    const d = this.docs[i]!;
    this.docs[i] = this.docs[j]!;
    this.docs[j] = d;
    const s = this.scores[i]!;
    this.scores[i] = this.scores[j]!;
    this.scores[j] = s;
    const x = this.ids[i];
    this.ids[i] = this.ids[j];
    this.ids[j] = x;
  }

  offer(doc: number, score: number): void {
    if (this.size < this.k) {
      let i = this.size++;
      this.docs[i] = doc;
      this.scores[i] = score;
      this.ids[i] = undefined;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (!this.less(i, p)) break;
        this.swap(i, p);
        i = p;
      }
      return;
    }
    if (this.k === 0 || score < this.scores[0]!) return;
    let id: string | undefined;
    if (!this.worseThan(0, score, doc, () => (id ??= this.idOf(doc)))) return;
    this.docs[0] = doc;
    this.scores[0] = score;
    this.ids[0] = id;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < this.size && this.less(l, m)) m = l;
      if (r < this.size && this.less(r, m)) m = r;
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }

  /** The kept documents, best first. */
  drain(): ScoredDoc[] {
    const order = Array.from({ length: this.size }, (_, i) => i);
    order.sort((i, j) => (this.less(j, i) ? -1 : this.less(i, j) ? 1 : 0));
    return order.map((i) => ({ doc: this.docs[i]!, score: this.scores[i]! }));
  }
}

/** Counters of the last pruned search (for tests and the benchmark). */
export interface SearchStats {
  windows: number;
  skippedWindows: number;
  candidates: number;
}

/** Evaluates queries over one index's arrays; holds the scratch state (one per thread). */
export class Bm25Searcher {
  private readonly cursors: Cursor[] = [];
  private readonly order: Cursor[] = [];
  private neSum = new Float64Array(64);
  private readonly windowScores = new Float64Array(WINDOW);
  private readonly matches = new Int32Array(WINDOW / 32);
  private readonly candDocs = new Int32Array(WINDOW);
  private readonly candScores = new Float64Array(WINDOW);
  private readonly top: TopK;
  private m = 0;
  /** Non-essential terms: order[0..firstEssential). */
  private firstEssential = 0;
  private nextThreshold = Infinity;
  /** A lower bound of the final k-th score known before scanning, and the documents scored then (see {@link seed}). */
  private floor = -Infinity;
  private readonly seedHeap: number[] = [];
  private readonly seedCursors: Cursor[] = [];
  private readonly seeded: number[] = [];
  /** The next seeded document not yet passed by the scan (seeded is in doc order, as the scan goes). */
  private seededAt = 0;
  private acc: Float64Array | undefined;
  private touched: Int32Array | undefined;
  private seen: Uint8Array | undefined;
  readonly stats: SearchStats = { windows: 0, skippedWindows: 0, candidates: 0 };

  constructor(
    private readonly a: PostingArrays,
    private readonly docCount: number,
    /** Per norm byte: 1 / (k1 · (1 − b + b · length / avgdl)), as Lucene's BM25Scorer caches it. */
    private readonly normInverse: Float32Array,
    idOf: (doc: number) => string,
  ) {
    this.top = new TopK(idOf);
  }

  private prepare(terms: QueryTerm[], k: number): void {
    while (this.cursors.length < terms.length) this.cursors.push(new Cursor(this.a, this.normInverse));
    if (this.neSum.length < terms.length) this.neSum = new Float64Array(terms.length);
    this.m = terms.length;
    this.order.length = 0;
    terms.forEach((t, i) => {
      this.cursors[i]!.reset(t, this.docCount);
      this.order.push(this.cursors[i]!);
    });
    this.top.reset(k);
  }

  /** The exact top k by block-max MaxScore. */
  search(terms: QueryTerm[], k: number): ScoredDoc[] {
    this.prepare(terms, k);
    if (this.m === 0 || k < 1) return [];
    const N = this.docCount;
    const st = this.stats;
    st.windows = st.skippedWindows = st.candidates = 0;
    this.firstEssential = 0;
    this.nextThreshold = Infinity;
    this.floor = this.seed(k);
    let minWindow = 1;
    let wMin = 0;
    outer: while (wMin < N) {
      // Window end: the nearest block end among the essential terms (the best term when none is), but at
      // least minWindow docs, grown while windows yield few candidates (as Lucene does) so that bounds are
      // not recomputed more often than documents are scored.
      if (this.m - Math.min(this.firstEssential, this.m - 1) > 1)
        minWindow = st.candidates < st.windows * 32 * this.m ? Math.min(minWindow * 2, WINDOW) : 1;
      let wEnd = Math.min(N, Math.max(this.windowEnd(wMin), wMin + minWindow));
      for (;;) {
        for (const c of this.order) c.updateWindowMax(wMin, wEnd);
        if (!this.partition()) {
          st.skippedWindows++;
          wMin = wEnd;
          continue outer;
        }
        const shorter = Math.min(N, Math.max(this.windowEnd(wMin), wMin + minWindow));
        if (shorter >= wEnd) break;
        wEnd = shorter;
      }
      st.windows++;
      let next = this.firstEssentialDoc(wMin);
      while (next < wEnd) {
        this.scoreInnerWindow(next, Math.min(wEnd, next + WINDOW));
        next = this.firstEssentialDoc(next);
        if (this.threshold() > this.nextThreshold) break; // a better partition is now possible
      }
      wMin = Math.min(next, wEnd);
    }
    this.seeded.length = 0;
    return this.top.drain();
  }

  /** The score a document must reach to matter: the heap's k-th score, or the floor while that is lower. */
  private threshold(): number {
    const t = this.top.threshold;
    // biome-ignore lint/complexity/useMathMinMax: not Math.max, which returns NaN for a NaN threshold; this returns the floor
    return t > this.floor ? t : this.floor;
  }

  /**
   * Before the scan, so that the first windows already prune as if the best documents had been found:
   * 1. a lower bound of the final k-th score (the floor): a document's score is at least its score for one
   *    term, so the k-th best single-term score of any term bounds it; taken for each term with at most
   *    SEED_DF postings (a few blocks decoded);
   * 2. the documents of the term behind the best such bound — all of them when it has at most SEED_ALL, else
   *    those reaching the floor on that term alone — are scored in full (probing the other terms with cursors
   *    of their own, summing in query-term order as the exhaustive reference does) and offered to the heap now;
   *    they are marked, and the scan passes over them. Most top documents hold the rare terms, so the heap's
   *    k-th score is usually near its final value before the first window.
   */
  private seed(k: number): number {
    let floor = -Infinity;
    let lead: Cursor | undefined;
    const heap = this.seedHeap;
    for (let i = 0; i < this.m; i++) {
      const c = this.cursors[i]!;
      if (c.df < k || c.df > SEED_DF) continue;
      heap.length = 0;
      for (let b = c.b0; b < c.b1; b++) {
        c.enter(b);
        c.decodeTo(NO_MORE);
        for (let p = 0; p < c.n; p++) {
          const s = c.scoreAt(p, c.docs[p]!);
          if (heap.length < k) heapPush(heap, s);
          else if (s > heap[0]!) heapReplaceRoot(heap, s);
        }
      }
      if (heap[0]! > floor) {
        floor = heap[0]!;
        lead = c;
      }
      c.rewind();
    }
    if (!lead || this.m === 1) return floor;
    const docs = this.seeded;
    for (let b = lead.b0; b < lead.b1; b++) {
      lead.enter(b);
      lead.decodeTo(NO_MORE);
      for (let p = 0; p < lead.n; p++) {
        if (lead.df <= SEED_ALL || lead.scoreAt(p, lead.docs[p]!) >= floor) docs.push(lead.docs[p]!);
      }
    }
    lead.rewind();
    const sums = new Float64Array(docs.length);
    for (let i = 0; i < this.m; i++) {
      const c = this.seedCursor(i);
      for (let j = 0; j < docs.length; j++) if (c.advance(docs[j]!) === docs[j]) sums[j]! += c.score();
    }
    for (let j = 0; j < docs.length; j++) this.top.offer(docs[j]!, f(sums[j]!));
    this.seededAt = 0;
    return floor;
  }

  /** A second cursor on query term i, for the seed's probes (the scan's cursors stay where they are). */
  private seedCursor(i: number): Cursor {
    while (this.seedCursors.length <= i) this.seedCursors.push(new Cursor(this.a, this.normInverse));
    const c = this.seedCursors[i]!;
    const t = this.cursors[i]!;
    c.reset({ ordinal: t.ordinal, count: t.count }, this.docCount);
    return c;
  }

  /** min over the essential terms (at least the best one) of the end of their block holding wMin. */
  private windowEnd(wMin: number): number {
    let end = NO_MORE;
    const lead = Math.min(this.firstEssential, this.m - 1);
    const last = this.a.blockLast;
    for (let i = lead; i < this.m; i++) {
      const c = this.order[i]!;
      c.shallow(Math.max(c.doc, wMin));
      if (c.blk < c.b1) end = Math.min(end, last[c.blk]! + 1);
    }
    return end;
  }

  /** Sorts terms by window bound and splits off the non-essential prefix; false when no term is essential. */
  private partition(): boolean {
    const order = this.order;
    for (let i = 1; i < order.length; i++) {
      const c = order[i]!;
      let j = i - 1;
      while (j >= 0 && order[j]!.windowMax > c.windowMax) {
        order[j + 1] = order[j]!;
        j--;
      }
      order[j + 1] = c;
    }
    const theta = this.threshold();
    let sum = 0;
    let p = 0;
    this.nextThreshold = Infinity;
    for (; p < order.length; p++) {
      const s = sum + order[p]!.windowMax;
      const bound = f(s * SLACK);
      if (!(bound < theta)) {
        this.nextThreshold = bound;
        break;
      }
      sum = s;
      this.neSum[p] = sum;
    }
    this.firstEssential = p;
    return p < order.length;
  }

  private firstEssentialDoc(target: number): number {
    let d = NO_MORE;
    for (let i = this.firstEssential; i < this.m; i++) {
      const c = this.order[i]!;
      const x = c.doc >= target ? c.doc : c.advance(target);
      if (x < d) d = x;
    }
    return d;
  }

  private scoreInnerWindow(lo: number, hi: number): void {
    const { candDocs, candScores } = this;
    let n: number;
    if (this.firstEssential === this.m - 1) n = this.order[this.m - 1]!.collect(lo, hi, candDocs, candScores);
    else n = this.accumulate(lo, hi);
    if (this.seededAt < this.seeded.length) n = this.dropSeeded(n);
    this.stats.candidates += n;
    // Non-essential terms, the largest bound first. A candidate is dropped once its score plus the bounds of the
    // terms not yet probed falls below θ, the term about to be probed counted with its bound in the candidate's
    // block (no decoding needed to read it) rather than over the window.
    for (let i = this.firstEssential - 1; i >= 0 && n > 0; i--) {
      const theta = this.threshold();
      const rest = i > 0 ? this.neSum[i - 1]! : 0;
      const c = this.order[i]!;
      let kept = 0;
      for (let j = 0; j < n; j++) {
        const d = candDocs[j]!;
        let score = candScores[j]!;
        if (c.doc < d) {
          const bound = c.blockBound(d);
          if (f((score + bound + rest) * SLACK) < theta) continue;
          if (bound > 0) c.advance(d);
        }
        if (c.doc === d) score += c.score();
        else if (f((score + rest) * SLACK) < theta) continue;
        candDocs[kept] = d;
        candScores[kept++] = score;
      }
      n = kept;
    }
    const top = this.top;
    for (let j = 0; j < n; j++) top.offer(candDocs[j]!, f(candScores[j]!));
  }

  /** Removes from the candidates the documents the seed scored in full (both lists are in doc order). */
  private dropSeeded(n: number): number {
    const { candDocs, candScores, seeded } = this;
    let at = this.seededAt;
    let kept = 0;
    for (let j = 0; j < n; j++) {
      const d = candDocs[j]!;
      while (at < seeded.length && seeded[at]! < d) at++;
      if (at < seeded.length && seeded[at] === d) continue;
      candDocs[kept] = d;
      candScores[kept++] = candScores[j]!;
    }
    this.seededAt = at;
    return kept;
  }

  /** Several essential terms: scored into the window accumulator, then read back in doc order. */
  private accumulate(lo: number, hi: number): number {
    const { windowScores, matches, candDocs, candScores } = this;
    for (let i = this.firstEssential; i < this.m; i++) this.order[i]!.scoreWindow(lo, hi, windowScores, matches);
    let n = 0;
    const words = (hi - lo + 31) >>> 5;
    for (let w = 0; w < words; w++) {
      let bits = matches[w]!;
      if (bits === 0) continue;
      matches[w] = 0;
      const base = w << 5;
      while (bits !== 0) {
        const t = bits & -bits;
        const i = base + 31 - Math.clz32(t);
        candDocs[n] = lo + i;
        candScores[n++] = windowScores[i]!;
        windowScores[i] = 0;
        bits ^= t;
      }
    }
    return n;
  }

  /** A term's postings, decoded (for tests and inspection). */
  postings(ordinal: number): { docs: Int32Array; tfs: Int32Array } {
    const c = new Cursor(this.a, this.normInverse);
    c.reset({ ordinal, count: 1 }, this.docCount);
    const docs = new Int32Array(c.df);
    const tfs = new Int32Array(c.df);
    let i = 0;
    for (let b = c.b0; b < c.b1; b++) {
      c.enter(b);
      c.decodeTo(NO_MORE);
      for (let p = 0; p < c.n; p++, i++) {
        docs[i] = c.docs[p]!;
        tfs[i] = c.tf(p);
      }
    }
    return { docs, tfs };
  }

  /** The reference: every posting of every term scored into a per-document accumulator. */
  exhaustive(terms: QueryTerm[], k: number): ScoredDoc[] {
    this.prepare(terms, k);
    if (this.m === 0 || k < 1) return [];
    const acc = (this.acc ??= new Float64Array(this.docCount));
    const touched = (this.touched ??= new Int32Array(this.docCount));
    const seen = (this.seen ??= new Uint8Array(this.docCount));
    let nTouched = 0;
    for (let i = 0; i < this.m; i++) {
      this.cursors[i]!.forEach((d, s) => {
        if (seen[d] === 0) {
          seen[d] = 1;
          touched[nTouched++] = d;
        }
        acc[d]! += s;
      });
    }
    for (let j = 0; j < nTouched; j++) {
      const d = touched[j]!;
      this.top.offer(d, f(acc[d]!));
      acc[d] = 0;
      seen[d] = 0;
    }
    return this.top.drain();
  }
}
