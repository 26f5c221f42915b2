"""bf16 against fp32 matrix products on this CPU, one thread, in CPU time (`npm run bench cpu-matmul`).

`model.dtype: fastest` measures the demo's own model (numerics.py); this says why its verdict differs by CPU. torch
multiplies fp32 through MKL's sgemm and bf16 through oneDNN's kernels for the CPU's best bf16 instructions
(AVX512-BF16's `vdpbf16ps`, or AMX tiles), at the shapes of the demo's micro-batch (8 sequences × 300 tokens: the
attention's input projection, the MLP's two products, the vocabulary head) and at one large square product (near the
CPU's peak). The trainer's environment first (cpu_env: MKL's strict mode). Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "trainer"))
from search_agent_trainer import cpu_env  # noqa: E402

cpu_env.apply()
import torch  # noqa: E402

ROWS = 8 * 300  # the demo's micro-batch: 8 sequences of ~300 tokens
SHAPES = [
    ("attention input (128→384)", ROWS, 128, 384),
    ("MLP up (128→512)", ROWS, 128, 512),
    ("MLP down (512→128)", ROWS, 512, 128),
    ("vocabulary head (128→5,700)", ROWS, 128, 5700),
    ("2048³ (near peak)", 2048, 2048, 2048),
]


def per_call(fn, budget: float = 0.4) -> float:
    """The CPU seconds of one call: the best of 3 rounds of as many calls as fit the budget."""
    fn()
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-5)
    n = max(2, min(200, int(budget / once)))
    best = float("inf")
    for _ in range(3):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best


def kernel() -> dict[str, str | None]:
    """The ISA oneDNN dispatches to and the kernel a bf16 product takes (ONEDNN_VERBOSE, in a child process)."""
    code = "import torch; a = torch.ones(256, 128, dtype=torch.bfloat16); (a @ a.T).sum()"
    p = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "ONEDNN_VERBOSE": "1"}, capture_output=True, text=True
    )
    isa = re.search(r"info,cpu,isa:(.*)", p.stdout)
    impl = re.search(r"exec,cpu,matmul,([^,]+)", p.stdout)
    return {"isa": isa.group(1).strip() if isa else None, "bf16_kernel": impl.group(1) if impl else None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            return m.group(1) if m else "?"
    except OSError:
        return "?"


def main() -> None:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    out = []
    for name, m, k, n in SHAPES:
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        a16, b16 = a.bfloat16(), b.bfloat16()
        flops = 2 * m * k * n
        fp32 = per_call(lambda a=a, b=b: torch.mm(a, b))
        bf16 = per_call(lambda a=a16, b=b16: torch.mm(a, b))
        out.append(
            {
                "shape": name,
                "m": m,
                "k": k,
                "n": n,
                "fp32_gflops": flops / fp32 / 1e9,
                "bf16_gflops": flops / bf16 / 1e9,
            }
        )
        print(f"{name}: fp32 {flops / fp32 / 1e9:.1f} GFLOP/s, bf16 {flops / bf16 / 1e9:.1f}", file=sys.stderr)
    print(json.dumps({"cpu": cpu_model(), "torch": torch.__version__, "threads": 1, **kernel(), "shapes": out}))


if __name__ == "__main__":
    main()
