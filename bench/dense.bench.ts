/**
 * Dense scan: plain JavaScript loops vs an ONNX Gemm+TopK graph (onnxruntime-node, our default) vs FAISS
 * IndexFlatIP (faiss-cpu in the dev venv, bench/faiss_flat.py) over the same float32 matrix and the same
 * queries, exact top-10, at batch sizes 1, 8 and 32; GB/s scanned against this machine's memory bandwidth
 * measured in the same run (memcpy of a buffer much larger than the caches, and a plain JS read loop).
 * SAS_BENCH_VECTORS: rows (default 100,000). Goal: ≥ 1× FAISS's queries/s at every batch size.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { scanJs } from '../src/core/retrieval/dense';
import { ort } from '../src/core/retrieval/encoder';
import { innerProductTopKModel } from '../src/core/retrieval/onnxGraph';
import { BENCH_DIR } from './data';
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

const BATCHES = [1, 8, 32];
const ROUNDS = [7, 3, 3];

/**
 * FAISS over the same files, at its best of three threadings per batch size: its defaults, OpenBLAS held to one
 * thread (batches of 20+ go through sgemm, whose threads otherwise contend with FAISS's OpenMP ones on a small
 * machine), and everything on one thread (OpenMP's barriers spin badly when other jobs hold the cores). Null
 * (with the reason reported) when the dev venv lacks it.
 */
function faiss(
  vectorsFile: string,
  n: number,
  d: number,
  queriesFile: string,
  lines: string[],
): { version: string; threads: number; seconds: Record<string, number>; config: Record<string, string> } | null {
  const python = join(__dirname, '..', '.venv', 'bin', 'python');
  try {
    const runs = [
      ['defaults', {}],
      ['OPENBLAS_NUM_THREADS=1', { OPENBLAS_NUM_THREADS: '1' }],
      ['one thread', { OMP_NUM_THREADS: '1', OPENBLAS_NUM_THREADS: '1' }],
    ].map(([name, env]) => {
      const out = execFileSync(
        python,
        [
          join(__dirname, 'faiss_flat.py'),
          vectorsFile,
          String(n),
          String(d),
          queriesFile,
          BATCHES.join(','),
          ROUNDS.join(','),
        ],
        {
          encoding: 'utf8',
          maxBuffer: 1 << 20,
          env: { ...process.env, ...(env as Record<string, string>) },
        },
      );
      return {
        name: name as string,
        r: JSON.parse(out.trim().split('\n').pop()!) as {
          faiss: string;
          threads: number;
          batches: Record<string, number>;
        },
      };
    });
    const seconds: Record<string, number> = {};
    const config: Record<string, string> = {};
    for (const q of BATCHES) {
      const best = runs.reduce((a, b) => (b.r.batches[q]! < a.r.batches[q]! ? b : a));
      seconds[q] = best.r.batches[q]!;
      config[q] = best.name;
    }
    return { version: runs[0]!.r.faiss, threads: runs[0]!.r.threads, seconds, config };
  } catch (e) {
    report(
      lines,
      `faiss: not measured (${(e as Error).message.split('\n')[0]}); install the dev requirements: bash scripts/setup.sh --test`,
    );
    return null;
  }
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const n = Number(process.env.SAS_BENCH_VECTORS ?? 100_000);
  const d = 768; // E5-base
  const r = rng(9);
  const vectors = new Float32Array(n * d);
  for (let i = 0; i < vectors.length; i++) vectors[i] = r() - 0.5;
  const allQueries = Float32Array.from({ length: BATCHES.reduce((a, b) => a + b, 0) * d }, () => r() - 0.5);
  mkdirSync(BENCH_DIR, { recursive: true });
  const vectorsFile = join(BENCH_DIR, `dense-vectors-${n}.f32`);
  const queriesFile = join(BENCH_DIR, 'dense-queries.f32');
  if (!existsSync(vectorsFile)) writeFileSync(vectorsFile, new Uint8Array(vectors.buffer));
  writeFileSync(queriesFile, new Uint8Array(allQueries.buffer));
  const bytes = vectors.byteLength;
  const bw = bandwidth();
  report(
    lines,
    `machine memory bandwidth: memcpy ${bw.memcpy.toFixed(1)} GB/s (read+write traffic), plain JS read loop ${bw.jsRead.toFixed(1)} GB/s`,
  );
  const { InferenceSession, Tensor } = ort();
  const session = await InferenceSession.create(innerProductTopKModel(), { executionProviders: ['cpu'] });
  const corpus = new Tensor('float32', vectors, [n, d]);
  const ours: Record<string, { js: number; onnx: number }> = {};
  let offset = 0;
  for (const [b, q] of BATCHES.entries()) {
    const queries = allQueries.subarray(offset * d, (offset + q) * d);
    offset += q;
    const onnxRun = () =>
      session.run({
        queries: new Tensor('float32', queries, [q, d]),
        corpus,
        k: new Tensor('int64', BigInt64Array.of(10n), [1]),
      });
    scanJs(vectors, d, queries, q, 10);
    await onnxRun();
    const js: number[] = [];
    const onnx: number[] = [];
    for (let round = 0; round < ROUNDS[b]!; round++) {
      let t = performance.now();
      scanJs(vectors, d, queries, q, 10);
      js.push((performance.now() - t) / 1000);
      t = performance.now();
      await onnxRun();
      onnx.push((performance.now() - t) / 1000);
    }
    ours[q] = { js: median(js), onnx: median(onnx) };
  }
  await session.release();
  const peer = faiss(vectorsFile, n, d, queriesFile, lines);
  if (peer)
    report(
      lines,
      `faiss-cpu ${peer.version} IndexFlatIP, ${peer.threads} OpenMP threads, the best of its default threading, one BLAS thread, and one thread in all, per batch size; onnxruntime CPU with its default threads`,
    );
  for (const q of BATCHES) {
    const { js: tj, onnx: to } = ours[q]!;
    const tf = peer?.seconds[q];
    report(
      lines,
      `${n.toLocaleString()} × ${d} float32 (${(bytes / 1e9).toFixed(2)} GB), ${q} quer${q === 1 ? 'y' : 'ies'}: JS ${fmt.ms(tj)} (${(bytes / tj / 1e9).toFixed(1)} GB/s) vs ONNX ${fmt.ms(to)} (${(bytes / to / 1e9).toFixed(1)} GB/s, ${((bytes / to / 1e9 / bw.memcpy) * 100).toFixed(0)}% of memcpy bandwidth) → ONNX ${fmt.ratio(tj / to)} faster` +
        (tf !== undefined
          ? `; FAISS ${fmt.ms(tf)} (${peer!.config[q]}) → vs faiss: ${fmt.ratio(tf / to)} its queries/s`
          : ''),
    );
  }
  return lines;
}
