/**
 * Dense scan: plain JavaScript loops vs an ONNX Gemm+TopK graph (onnxruntime-node) over the same float32
 * matrix, exact top-10, for several query batch sizes; GB/s scanned against this machine's memory bandwidth
 * measured in the same run (memcpy of a buffer much larger than the caches, and a plain JS read loop).
 */
import { performance } from 'node:perf_hooks';
import { scanJs } from '../src/core/retrieval/dense';
import { ort } from '../src/core/retrieval/encoder';
import { innerProductTopKModel } from '../src/core/retrieval/onnxGraph';
import { fmt, median, report, rng } from './util';

function bandwidth(): { memcpy: number; jsRead: number } {
  const bytes = 512 << 20;
  const a = Buffer.alloc(bytes, 1);
  const b = Buffer.alloc(bytes);
  const copies: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t = performance.now();
    a.copy(b);
    copies.push((performance.now() - t) / 1000);
  }
  const f = new Float32Array(a.buffer, a.byteOffset, bytes / 4);
  const reads: number[] = [];
  let sink = 0;
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    let s0 = 0;
    let s1 = 0;
    for (let i = 0; i < f.length; i += 2) {
      s0 += f[i]!;
      s1 += f[i + 1]!;
    }
    sink += s0 + s1;
    reads.push((performance.now() - t) / 1000);
  }
  if (sink === 42) console.log(sink);
  // memcpy reads and writes each byte: 2 × bytes of traffic.
  return { memcpy: (2 * bytes) / median(copies) / 1e9, jsRead: bytes / median(reads) / 1e9 };
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_VECTORS ?? 100_000);
  const d = 768; // E5-base
  const r = rng(9);
  const vectors = new Float32Array(n * d);
  for (let i = 0; i < vectors.length; i++) vectors[i] = r() - 0.5;
  const bytes = vectors.byteLength;
  const bw = bandwidth();
  report(lines, `machine memory bandwidth: memcpy ${bw.memcpy.toFixed(1)} GB/s (read+write traffic), plain JS read loop ${bw.jsRead.toFixed(1)} GB/s`);
  const { InferenceSession, Tensor } = ort();
  const session = await InferenceSession.create(innerProductTopKModel(), { executionProviders: ['cpu'] });
  const corpus = new Tensor('float32', vectors, [n, d]);
  for (const q of [1, 8, 32]) {
    const queries = Float32Array.from({ length: q * d }, () => r() - 0.5);
    const js: number[] = [];
    const onnx: number[] = [];
    for (let round = 0; round < (q === 1 ? 7 : 3); round++) {
      let t = performance.now();
      scanJs(vectors, d, queries, q, 10);
      js.push((performance.now() - t) / 1000);
      t = performance.now();
      await session.run({ queries: new Tensor('float32', queries, [q, d]), corpus, k: new Tensor('int64', BigInt64Array.of(10n), [1]) });
      onnx.push((performance.now() - t) / 1000);
    }
    const tj = median(js);
    const to = median(onnx);
    report(
      lines,
      `${n.toLocaleString()} × ${d} float32 (${(bytes / 1e9).toFixed(2)} GB), ${q} quer${q === 1 ? 'y' : 'ies'}: JS ${fmt.ms(tj)} (${(bytes / tj / 1e9).toFixed(1)} GB/s) vs ONNX ${fmt.ms(to)} (${(bytes / to / 1e9).toFixed(1)} GB/s, ${((bytes / to / 1e9 / bw.memcpy) * 100).toFixed(0)}% of memcpy bandwidth) → ONNX ${fmt.ratio(tj / to)} faster`,
    );
  }
  await session.release();
  return lines;
}
