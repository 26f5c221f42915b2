/**
 * A BM25 search thread (bundled as dist/bm25-worker.js; see bm25Pool.ts): opens the index over the
 * SharedArrayBuffers it is given — the same memory as every other worker, nothing copied — and answers
 * `{id, queries, k}` with, per query, its hits and their stored contents (and `{cpu}` with this thread's CPU time).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Bm25Index, type SharedIndex } from './bm25';
import { type PoolRequest, type PoolResponse, threadCpuSeconds } from './bm25Pool';

const port = parentPort;
if (!port) throw new Error('bm25-worker runs as a worker thread');
const index = Bm25Index.fromShared((workerData as { index: SharedIndex }).index);
port.on('message', (m: PoolRequest | { cpu: number }) => {
  if ('cpu' in m) {
    port.postMessage({ cpu: m.cpu, seconds: threadCpuSeconds() });
    return;
  }
  let reply: PoolResponse;
  try {
    reply = {
      id: m.id,
      results: m.queries.map((q) =>
        index.search(q, { k: m.k }).map((h) => ({ id: h.id, contents: index.contents(h.doc), score: h.score })),
      ),
    };
  } catch (e) {
    reply = { id: m.id, error: (e as Error).stack ?? String(e) };
  }
  port.postMessage(reply);
});
// The arrays arrive over the very SharedArrayBuffers the main thread loaded (nothing copied): say so.
port.postMessage({ ready: true, shared: index.arrays.postings.buffer instanceof SharedArrayBuffer });
