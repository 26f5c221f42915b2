/**
 * Dense retrieval: corpus embeddings in a flat inner-product index (float32, or float16 on disk), searched
 * exactly for batched queries. Two scans, both exact: plain JavaScript loops, and an ONNX Gemm+TopK graph run
 * by onnxruntime-node (its multi-threaded GEMM); `npm run bench dense` compares them and the faster one is the
 * default ('onnx'; 'js' is the fallback when onnxruntime cannot run the graph).
 *
 * Directory (versioned): meta.json, vectors.f32|vectors.f16 (row-major, N × dim), docids.bin/.idx,
 * contents.bin/.idx (stored documents for /retrieve). Building is resumable: documents are stored first, then
 * embedded in batches appended to the vectors file, with progress.json updated after each batch.
 */
import { closeSync, createWriteStream, openSync, readSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { InferenceSession } from 'onnxruntime-node';
import { type CorpusIssue, readCorpus } from './corpus';
import { type E5Encoder, ort } from './encoder';
import { innerProductTopKModel } from './onnxGraph';

export const DENSE_FORMAT = 'sas-dense';
export const DENSE_VERSION = 1;

export interface DenseMeta {
  format: typeof DENSE_FORMAT;
  version: number;
  dim: number;
  docs: number;
  dtype: 'float32' | 'float16';
  model: string;
  maxLength: number;
  source: string;
  created: string;
}

export interface DenseBuildProgress {
  phase: 'store' | 'embed';
  docs: number;
  total: number;
}

export interface DenseBuildOptions {
  dtype?: 'float32' | 'float16';
  /** Documents embedded per batch (progress is saved after each). */
  batchSize?: number;
  onProgress?: (p: DenseBuildProgress) => void;
  signal?: AbortSignal;
  issues?: CorpusIssue[];
}

interface Progress {
  corpus: string;
  corpusBytes: number;
  model: string;
  dtype: 'float32' | 'float16';
  dim: number;
  docs: number;
  stored: boolean;
  embedded: number;
}

// ---------------------------------------------------------------------------------------------------------
// float16 (IEEE 754 half) conversion; Node 20 has no Float16Array.

export function toHalf(v: number): number {
  const f32 = new Float32Array([v]);
  const x = new Uint32Array(f32.buffer)[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (exp >= 31) return sign | 0x7c00; // overflow → inf
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant = (mant | 0x800000) >> (1 - exp);
    return sign | ((mant + 0x1000) >> 13);
  }
  const h = sign | (exp << 10) | (mant >> 13);
  return mant & 0x1000 ? h + 1 : h; // round half up
}

export function fromHalf(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (mant / 1024);
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + mant / 1024);
}

// ---------------------------------------------------------------------------------------------------------

/** Builds (or resumes building) a dense index of a corpus with an encoder. */
export async function buildDenseIndex(
  corpus: string,
  dir: string,
  encoder: E5Encoder,
  options: DenseBuildOptions = {},
): Promise<DenseMeta> {
  const dtype = options.dtype ?? 'float32';
  const batchSize = options.batchSize ?? 256;
  const corpusBytes = (await stat(corpus)).size;
  await mkdir(dir, { recursive: true });
  const progressFile = join(dir, 'progress.json');
  const vectorsFile = join(dir, dtype === 'float32' ? 'vectors.f32' : 'vectors.f16');
  const bytesPer = dtype === 'float32' ? 4 : 2;
  let progress: Progress | undefined = await readFile(progressFile, 'utf8').then(JSON.parse, () => undefined);
  const signature = { corpus, corpusBytes, model: encoder.dir, dtype, dim: encoder.dim };
  if (
    progress &&
    (progress.corpus !== corpus ||
      progress.corpusBytes !== corpusBytes ||
      progress.model !== encoder.dir ||
      progress.dtype !== dtype ||
      progress.dim !== encoder.dim)
  ) {
    progress = undefined; // a different build: start over
  }
  const save = async (p: Progress) => {
    await writeFile(`${progressFile}.tmp`, JSON.stringify(p));
    await rename(`${progressFile}.tmp`, progressFile);
  };

  // 1. Store ids and contents (one pass; quick).
  if (!progress?.stored) {
    const ids = createWriteStream(join(dir, 'docids.bin'));
    const contents = createWriteStream(join(dir, 'contents.bin'));
    const idIdx: number[] = [0];
    const cIdx: number[] = [0];
    let n = 0;
    for await (const d of readCorpus(corpus, options.issues, options.signal)) {
      const idb = Buffer.from(d.id, 'utf8');
      const cb = Buffer.from(d.contents, 'utf8');
      if (!ids.write(idb)) await new Promise<void>((r) => ids.once('drain', () => r()));
      if (!contents.write(cb)) await new Promise<void>((r) => contents.once('drain', () => r()));
      idIdx.push(idIdx[idIdx.length - 1]! + idb.length);
      cIdx.push(cIdx[cIdx.length - 1]! + cb.length);
      if (++n % 10_000 === 0) options.onProgress?.({ phase: 'store', docs: n, total: 0 });
    }
    await Promise.all([
      new Promise<void>((r) => ids.end(() => r())),
      new Promise<void>((r) => contents.end(() => r())),
    ]);
    if (n === 0) throw new Error(`${corpus}: no documents (expected JSONL lines with id and contents)`);
    await writeFile(join(dir, 'docids.idx'), new Uint8Array(Float64Array.from(idIdx).buffer));
    await writeFile(join(dir, 'contents.idx'), new Uint8Array(Float64Array.from(cIdx).buffer));
    await rm(vectorsFile, { force: true });
    await writeFile(vectorsFile, new Uint8Array(0));
    progress = { ...signature, docs: n, stored: true, embedded: 0 };
    await save(progress);
  }

  // 2. Embed in batches, appending; resume from what is complete on disk.
  const row = encoder.dim * bytesPer;
  const onDisk = (await stat(vectorsFile)).size;
  const done = Math.min(progress!.embedded, Math.floor(onDisk / row));
  if (onDisk !== done * row) await truncate(vectorsFile, done * row); // a batch cut off mid-write
  progress!.embedded = done;
  const fh = await open(vectorsFile, 'a');
  try {
    let k = 0;
    let batch: string[] = [];
    const flush = async () => {
      options.signal?.throwIfAborted();
      const vecs = await encoder.encode(batch, 'passage');
      let bytes: Uint8Array;
      if (dtype === 'float32') bytes = new Uint8Array(vecs.buffer, vecs.byteOffset, vecs.byteLength);
      else {
        const half = new Uint16Array(vecs.length);
        for (let i = 0; i < vecs.length; i++) half[i] = toHalf(vecs[i]!);
        bytes = new Uint8Array(half.buffer);
      }
      await fh.write(bytes);
      progress!.embedded += batch.length;
      await save(progress!);
      options.onProgress?.({ phase: 'embed', docs: progress!.embedded, total: progress!.docs });
      batch = [];
    };
    for await (const d of readCorpus(corpus, undefined, options.signal)) {
      if (k++ < done) continue;
      batch.push(d.contents);
      if (batch.length >= batchSize) await flush();
    }
    if (batch.length) await flush();
  } finally {
    await fh.close();
  }
  const meta: DenseMeta = {
    format: DENSE_FORMAT,
    version: DENSE_VERSION,
    dim: encoder.dim,
    docs: progress!.docs,
    dtype,
    model: encoder.dir,
    maxLength: encoder.maxLength,
    source: corpus,
    created: new Date().toISOString(),
  };
  await writeFile(join(dir, 'meta.json'), `${JSON.stringify(meta, null, 2)}\n`);
  await rm(progressFile, { force: true });
  return meta;
}

export interface DenseHit {
  doc: number;
  id: string;
  score: number;
}

export type ScanMethod = 'onnx' | 'js';

export class DenseIndex {
  private session: InferenceSession | undefined;
  private readonly contentsFd: number;

  private constructor(
    readonly dir: string,
    readonly meta: DenseMeta,
    /** N × dim, float32 in memory. */
    readonly vectors: Float32Array,
    private readonly idsBin: Buffer,
    private readonly idsIdx: Float64Array,
    private readonly contentsIdx: Float64Array,
  ) {
    this.contentsFd = openSync(join(dir, 'contents.bin'), 'r');
  }

  static async load(dir: string): Promise<DenseIndex> {
    let meta: DenseMeta;
    try {
      meta = JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8'));
    } catch (e) {
      const inProgress = await stat(join(dir, 'progress.json')).then(
        () => true,
        () => false,
      );
      throw new Error(
        `${dir}: not a dense index${inProgress ? ' (building was interrupted: run the build again to resume)' : ''} (meta.json: ${(e as Error).message})`,
      );
    }
    if (meta.format !== DENSE_FORMAT || meta.version !== DENSE_VERSION)
      throw new Error(
        `${dir}/meta.json: ${meta.format} v${meta.version}; this build reads ${DENSE_FORMAT} v${DENSE_VERSION}`,
      );
    const raw = await readFile(join(dir, meta.dtype === 'float32' ? 'vectors.f32' : 'vectors.f16'));
    const expected = meta.docs * meta.dim * (meta.dtype === 'float32' ? 4 : 2);
    if (raw.length !== expected)
      throw new Error(
        `${dir}: vectors file has ${raw.length} bytes, expected ${expected} (${meta.docs} × ${meta.dim} ${meta.dtype})`,
      );
    let vectors: Float32Array;
    if (meta.dtype === 'float32') {
      vectors = new Float32Array(meta.docs * meta.dim);
      new Uint8Array(vectors.buffer).set(raw);
    } else {
      const half = new Uint16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
      vectors = new Float32Array(half.length);
      for (let i = 0; i < half.length; i++) vectors[i] = fromHalf(half[i]!);
    }
    const f64 = (b: Buffer) => new Float64Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    const [idsBin, idsIdx, contentsIdx] = await Promise.all([
      readFile(join(dir, 'docids.bin')),
      readFile(join(dir, 'docids.idx')),
      readFile(join(dir, 'contents.idx')),
    ]);
    return new DenseIndex(dir, meta, vectors, idsBin, f64(idsIdx), f64(contentsIdx));
  }

  get size(): number {
    return this.meta.docs;
  }

  docId(doc: number): string {
    return this.idsBin.toString('utf8', this.idsIdx[doc]!, this.idsIdx[doc + 1]!);
  }

  contents(doc: number): string {
    const start = this.contentsIdx[doc]!;
    const buf = Buffer.allocUnsafe(this.contentsIdx[doc + 1]! - start);
    let off = 0;
    while (off < buf.length) off += readSync(this.contentsFd, buf, off, buf.length - off, start + off);
    return buf.toString('utf8');
  }

  /** Top-k by inner product for each of `q` query vectors (rows of dim), exact. */
  async scan(queries: Float32Array, k: number, method: ScanMethod = 'onnx'): Promise<DenseHit[][]> {
    const q = queries.length / this.meta.dim;
    k = Math.min(k, this.meta.docs);
    const raw =
      method === 'onnx' ? await this.scanOnnx(queries, q, k) : scanJs(this.vectors, this.meta.dim, queries, q, k);
    return raw.map((hits) =>
      hits
        .map(([doc, score]) => ({ doc, id: this.docId(doc), score }))
        .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
    );
  }

  private async scanOnnx(queries: Float32Array, q: number, k: number): Promise<[number, number][][]> {
    const { InferenceSession, Tensor } = ort();
    this.session ??= await InferenceSession.create(innerProductTopKModel(), { executionProviders: ['cpu'] });
    const d = this.meta.dim;
    const out = await this.session.run({
      queries: new Tensor('float32', queries, [q, d]),
      corpus: new Tensor('float32', this.vectors, [this.meta.docs, d]),
      k: new Tensor('int64', BigInt64Array.of(BigInt(k)), [1]),
    });
    const values = out.values!.data as Float32Array;
    const indices = out.indices!.data as BigInt64Array;
    return Array.from({ length: q }, (_, j) =>
      Array.from({ length: k }, (_, r) => [Number(indices[j * k + r]!), values[j * k + r]!] as [number, number]),
    );
  }

  close(): void {
    closeSync(this.contentsFd);
    void this.session?.release();
  }
}

/** The plain-loop scan: documents outer (each row read once), queries inner; a bounded min-heap per query. */
export function scanJs(
  vectors: Float32Array,
  dim: number,
  queries: Float32Array,
  q: number,
  k: number,
): [number, number][][] {
  const n = vectors.length / dim;
  const heapScores = Array.from({ length: q }, () => new Float32Array(k).fill(-Infinity));
  const heapDocs = Array.from({ length: q }, () => new Int32Array(k).fill(-1));
  for (let i = 0; i < n; i++) {
    const base = i * dim;
    for (let j = 0; j < q; j++) {
      const qb = j * dim;
      let s0 = 0;
      let s1 = 0;
      let s2 = 0;
      let s3 = 0;
      let t = 0;
      for (; t + 3 < dim; t += 4) {
        s0 += vectors[base + t]! * queries[qb + t]!;
        s1 += vectors[base + t + 1]! * queries[qb + t + 1]!;
        s2 += vectors[base + t + 2]! * queries[qb + t + 2]!;
        s3 += vectors[base + t + 3]! * queries[qb + t + 3]!;
      }
      for (; t < dim; t++) s0 += vectors[base + t]! * queries[qb + t]!;
      const s = s0 + s1 + s2 + s3;
      const hs = heapScores[j]!;
      if (s <= hs[0]!) continue;
      // replace the root (the smallest of the top k) and sift down
      const hd = heapDocs[j]!;
      let p = 0;
      for (;;) {
        const l = 2 * p + 1;
        if (l >= k) break;
        const r = l + 1;
        const c = r < k && hs[r]! < hs[l]! ? r : l;
        if (hs[c]! >= s) break;
        hs[p] = hs[c]!;
        hd[p] = hd[c]!;
        p = c;
      }
      hs[p] = s;
      hd[p] = i;
    }
  }
  return heapScores.map((hs, j) =>
    Array.from(hs, (score, r) => [heapDocs[j]![r]!, score] as [number, number])
      .filter(([doc]) => doc >= 0)
      .sort((a, b) => b[1] - a[1]),
  );
}
