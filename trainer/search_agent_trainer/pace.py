"""The warm start's pace against the reference machine's: a run of a recipe whose time the README states says early,
from its first warm-start steps, how fast this machine runs it and how long it should take here — not after the
minutes the user expected have passed (issue 48: a Xeon ran the README's demo in about 30 minutes where the README
said 14).

The pace is measured over warm-start steps FROM_STEP to AT_STEP (the first steps build kernels and touch memory), about
20 seconds into the warm start on the reference machine, and compared with REFERENCES' recipe of the same name and
shape (what the speed of a run depends on: the model, the warm start, the rollout and the steps; not the seed or the
data paths), computed in the same dtype. A run of any other config logs its pace only.

By dtype, because the warm start and the RL steps gain unequally from bf16: the warm start is forward and backward
passes, where bf16 pays most (1.38x on the AMD EPYC), and an RL step is half decoding, where it pays little (1.13x).
Against the EPYC's bf16 reference, stop 55's Xeon in fp32 paced its warm start at 0.82x and was told ~17m33s; its
run took 14m45s, 0.97x (its later runs 12m49s and 12m07s, told ~16m24s and, with the fp32 reference, ~12m45s). A run
is compared with a machine that computed in its own dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FROM_STEP = 25
AT_STEP = 75
SLOW = 0.8  # below this share of the reference speed the message says the machine is slower than expected


@dataclass(frozen=True)
class Reference:
    cpu: str
    warmup_s_per_step: float  # the warm start's seconds per step there (steps FROM_STEP to AT_STEP)
    run_s: float  # the whole command there: setup, warm start, RL, evaluations
    source: str
    shape: tuple[Any, ...]  # recipe_shape() of the recipe measured


DEMO_MULTIHOP_SHAPE = ((2, 128, 4), (300, 32), (8, 8, 600, 3), 400)
# The README's first command (examples/demo-multihop.run.json, seed 1, `demo`), by the dtype `fastest` chose, on the
# machines its time is stated for (docs/demo.md, "Two CPUs"):
# - bf16: the AMD EPYC of family 26 (Zen 5); the warm-start pace measured through `demo` itself at issue 48 (steps
#   25–75, other work on the machine at load ~1: 0.33 s; the stop-42 table's warm start, 1m56s from the command's
#   start less ~10 s of start-up over 300 steps, gives 0.35 s); the whole command stop 44's 14m22s. An EPYC of family
#   25 (Zen 4, 2.6 GHz; stop 63) is another machine: paced 0.52-0.65 s, told 0.63-0.51x, and took 19m48s (0.73x);
# - fp32: the Intel Xeon of stops 55 and 56 (family 6 model 207, AVX512-BF16 without AMX, where bf16 measured
#   1.29-1.38x slower); stop 56's three runs alone from fresh clones, under MKL's strict mode (cpu_env.py): paces
#   0.41, 0.42, 0.43 s, the command 15m05s, 14m58s, 14m54s (medians here). Stop 55's, outside it: 0.35-0.40 s,
#   12m07s-14m45s, other trajectories.
REFERENCES: dict[tuple[str, str], Reference] = {  # (recipe name, the dtype it computed in)
    ("demo-multihop", "bf16"): Reference(
        cpu="a 2-core AMD EPYC of family 26 (Zen 5) with AVX512-BF16 (docs/demo.md)",
        warmup_s_per_step=0.33,
        run_s=14 * 60 + 22,
        source="docs/demo.md, stops 42 and 44",
        shape=DEMO_MULTIHOP_SHAPE,
    ),
    ("demo-multihop", "fp32"): Reference(
        cpu="a 2-core Intel Xeon in fp32 (docs/demo.md)",
        warmup_s_per_step=0.42,
        run_s=14 * 60 + 58,
        source="docs/demo.md, stop 56",
        shape=DEMO_MULTIHOP_SHAPE,
    ),
}


def recipe_shape(cfg: Any) -> tuple[Any, ...] | None:
    """What a run's speed depends on, comparably across runs (None: not the tiny policy with a warm start)."""
    if cfg.model.kind != "tiny" or not cfg.train.supervised_warmup or not cfg.train.supervised_warmup.steps:
        return None
    t, w, r = cfg.model.tiny, cfg.train.supervised_warmup, cfg.rollout
    return (
        (t.layers, t.d_model, t.heads),
        (w.steps, w.batch_size),
        (r.batch_size, r.n, r.max_response_length, r.max_turns),
        int(cfg.train.steps),
    )


def minutes(s: float) -> str:
    s = round(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def report(cfg: Any, s_per_step: float, dtype: str) -> tuple[str, dict[str, Any] | None]:
    """The log line for a warm-start pace of `s_per_step` in `dtype` ("bf16" or "fp32": what the run computes in), and
    the `pace` fields of the progress event (None where no reference recipe matches in that dtype)."""
    ref = REFERENCES.get((cfg.get("name") or "", dtype))
    if ref is None or recipe_shape(cfg) != ref.shape or s_per_step <= 0:
        return f"warm start: {s_per_step:.3f} s a step", None
    speed = ref.warmup_s_per_step / s_per_step
    expected = ref.run_s / speed
    what = "slower than the reference machine: " if speed < SLOW else ""
    message = (
        f"warm start: {s_per_step:.2f} s a step, {ref.warmup_s_per_step:.2f} s on {ref.cpu}: {what}this CPU runs the demo at "
        f"~{speed:.2f}× the reference speed; expect ~{minutes(expected)} in all ({minutes(ref.run_s)} there)"
    )
    fields = {
        "s_per_step": round(s_per_step, 4),
        "reference_s_per_step": ref.warmup_s_per_step,
        "speed": round(speed, 3),
        "expected_s": round(expected),
        "reference_s": ref.run_s,
        "reference_cpu": ref.cpu,
        "dtype": dtype,
        "slow": speed < SLOW,
        "message": message,
    }
    return message, fields


def announce(writer: Any, cfg: Any, s_per_step: float, dtype: str) -> dict[str, Any] | None:
    """Says the warm start's pace (report): a `warning` event where the machine is slower than the reference (the CLI
    prints it, with --quiet too; the editor's trainer log shows it as a warning; events.jsonl keeps it), a log line
    otherwise. Returns the progress event's `pace` fields."""
    message, fields = report(cfg, s_per_step, dtype)
    if fields is not None and fields["slow"]:
        writer.warning(message, pace=fields)
    else:
        writer.log(message)
    return fields
