"""The token store's format, chosen by measurement (bench/store-formats.bench.ts reads what this writes).

One Search-R1-shaped step's token columns (bench/searchr1_sim.py's generator: ids Zipf-like over 151,936, roles and
masks in turns, float32 log-probs with NaN where not scored) written as:
- Parquet (pyarrow), flat required columns, codecs zstd, brotli, gzip, snappy, none (levels as named);
- NumPy-style column files (raw little-endian arrays, floats byte-shuffled) each zlib-compressed, with a JSON index.
Prints one JSON object: per variant its bytes a token and pyarrow's / zlib's write throughput (tokens/s, one thread).

    python bench/store_formats.py OUT_DIR [--rollouts 512]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))

import searchr1_sim as sim  # noqa: E402
from search_agent_trainer import token_store as ts  # noqa: E402

VARIANTS = [("zstd", 1), ("zstd", 3), ("brotli", 1), ("brotli", 3), ("gzip", 1), ("snappy", None), ("none", None)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rollouts", type=int, default=500)
    a = ap.parse_args()
    torch.set_num_threads(1)
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, sim.VOCAB + 1) ** 1.07
    zipf = rng.permutation(sim.VOCAB)[rng.choice(sim.VOCAB, 1 << 20, p=p / p.sum())]
    trajs, w = sim.make_step(1, a.rollouts, 5, rng, zipf)
    data = sim.handoff(trajs, w, 1, "bench").build(list(range(len(trajs))))
    c = data.cols
    cols = {"ids": c.ids, "role": c.role, "loss_mask": c.loss_mask, **c.floats}
    T = len(c.ids)
    schema = pa.schema([pa.field(k, pa.from_numpy_dtype(v.dtype), nullable=False) for k, v in cols.items()])
    table = pa.table({k: pa.array(v) for k, v in cols.items()}, schema=schema)
    # pyarrow's first write imports pandas
    pq.write_table(table.slice(0, 10), out / "warm.parquet", compression="snappy")
    result: dict[str, object] = {
        "tokens": T,
        "raw_bytes_per_token": sum(v.nbytes for v in cols.values()) / T,
        "variants": {},
    }
    for codec, level in VARIANTS:
        name = f"parquet-{codec}{level or ''}"
        path = out / f"{name}.parquet"
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            pq.write_table(
                table,
                path,
                row_group_size=ts.ROW_GROUP_TOKENS,
                use_dictionary=False,
                write_statistics=False,
                data_page_version="2.0",
                compression=codec,
                compression_level=level,
            )
            best = min(best, time.perf_counter() - t0)
        result["variants"][name] = {"bytes_per_token": path.stat().st_size / T, "write_tokens_per_s": T / best}
    # NumPy-style column files, floats byte-shuffled, zlib level 1
    d = out / "npy-zlib1"
    d.mkdir(exist_ok=True)
    best, size = float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        index, size = {}, 0
        for k, v in cols.items():
            raw = (
                np.ascontiguousarray(v.view(np.uint8).reshape(-1, v.itemsize).T).tobytes()
                if v.dtype.kind == "f"
                else v.tobytes()
            )
            z = zlib.compress(raw, 1)
            (d / f"{k}.bin").write_bytes(z)
            index[k] = {"dtype": v.dtype.str, "n": int(len(v)), "shuffled": v.dtype.kind == "f"}
            size += len(z)
        (d / "index.json").write_text(json.dumps(index))
        best = min(best, time.perf_counter() - t0)
    result["variants"]["npy-zlib1"] = {"bytes_per_token": size / T, "write_tokens_per_s": T / best}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
