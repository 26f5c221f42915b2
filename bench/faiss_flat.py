"""The dense peer of `npm run bench dense`: FAISS IndexFlatIP (exact inner product) over the same float32
vectors and queries, top 10, at each batch size; prints one JSON line {batch: median seconds per batch}.

    python bench/faiss_flat.py VECTORS.f32 N DIM QUERIES.f32 BATCH[,BATCH…] ROUNDS[,ROUNDS…]

Threads: FAISS's OpenMP default (one per core), as onnxruntime's default is for ours.
"""

import json
import statistics
import sys
import time

import faiss
import numpy as np


def main() -> None:
    vectors_path, n, dim, queries_path, batches, rounds = sys.argv[1:7]
    n, dim = int(n), int(dim)
    vectors = np.fromfile(vectors_path, dtype=np.float32).reshape(n, dim)
    queries = np.fromfile(queries_path, dtype=np.float32).reshape(-1, dim)
    t = time.perf_counter()
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    add_seconds = time.perf_counter() - t
    out = {
        "faiss": faiss.__version__,
        "threads": faiss.omp_get_max_threads(),
        "add_seconds": add_seconds,
        "batches": {},
    }
    offset = 0
    for batch, r in zip((int(b) for b in batches.split(",")), (int(x) for x in rounds.split(","))):
        q = np.ascontiguousarray(queries[offset : offset + batch])
        offset += batch
        index.search(q, 10)  # warm-up
        samples = []
        for _ in range(r):
            t = time.perf_counter()
            index.search(q, 10)
            samples.append(time.perf_counter() - t)
        out["batches"][str(batch)] = statistics.median(samples)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
