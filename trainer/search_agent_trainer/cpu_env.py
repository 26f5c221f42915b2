"""What every trainer process sets in its environment before it computes on a CPU; a value the user set is kept.

- `MKL_CBWR=AUTO,STRICT`: Intel MKL's strict conditional numerical reproducibility on the CPU's own (fastest) branch.
  Outside that mode MKL's results on Intel depend on where in memory its inputs land: on stop 55's Xeon the demo
  that ran the numerics probe (numerics.py) in its own process and the runs that read the probe's cached choice were
  two trajectories from the warm start on, because the probe's allocations moved the run's tensors (80 warm-start
  steps: loss 0.8708486 against 0.8707121; with this setting 0.8707484 both ways). A run that replay, fork or a
  resume must reproduce cannot depend on its allocator. Its cost on that Xeon, the demo's recipe at two threads:
  1.03x MKL's default in the warm start, 1.02x in an RL step (about 20 s of the demo's 15 minutes; docs/demo.md,
  stop 56); non-strict `AUTO` is no slower but keeps the alignment dependence. On an AMD EPYC, MKL ran the same bits
  for every `MKL_CBWR` but COMPATIBLE (docs/demo.md, stop 40); STRICT was not among those measured there.
  MKL reads the variable at its first call, not at `import torch`: setting it at the start of `main()` is in time.
- `ONEDNN_PRIMITIVE_CACHE_CAPACITY=64`, `LRU_CACHE_CAPACITY=64`: torch's bf16 matrix products on CPU go through
  oneDNN, which keeps every primitive it builds (one per shape) in two caches of 1,024 entries each by default
  (oneDNN's and ideep's). A run's sequence lengths change with every micro-batch, so they fill with shapes seldom
  seen again, 2–3 MB apiece at the demo's size (the trainer's resident memory grew by 1.1 GB in its first 20
  warm-start steps in bf16, and reached 3.5–4.2 GB on a Xeon; 64 entries each: 0.5 GB less after 20 steps, no
  slower; docs/trainer.md, "Memory on CPU"). Read when torch builds its first primitive.

Every entry point that computes a run's numbers calls `apply()` first: the trainer (`__main__`), fork, replay-step
and the benchmarks; TRL's and veRL's worker processes inherit it.
"""

from __future__ import annotations

import os

DEFAULTS = {
    "MKL_CBWR": "AUTO,STRICT",
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64",
    "LRU_CACHE_CAPACITY": "64",
}


def apply() -> dict[str, str]:
    """Set each of DEFAULTS the environment does not already set; returns those it set."""
    added = {key: value for key, value in DEFAULTS.items() if key not in os.environ}
    os.environ.update(added)
    return added
