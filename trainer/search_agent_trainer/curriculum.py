"""A curriculum in one run: `train.stages`, stages that run one after another.

Each stage after the first starts as a new run with `model.init` at the previous stage's last policy would (the way
DeepScaleR-style curricula chain runs, each from the last one's checkpoint): the KL reference π_ref becomes that
policy, and the optimizer (AdamW's moments), the LR schedule (`optim.warmup_steps`, then the decay over the stage's
own steps), the batch sampler (the stage's `hops_mix`) and every step-keyed seed restart, keyed by the step *within
the stage*. So a staged run and the chain of runs it replaces train the same policy, number for number (a test
holds them to it); what the stage adds is one run directory, one config and one step count (metrics, rollouts and
checkpoints keep counting over the whole run; a stage's last step is always checkpointed, so a resume there, and the
reference of the next stage, can read it).

Without `train.stages` a run is one stage of `train.steps` steps with `data.hops_mix`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stage:
    index: int  # 0-based
    start: int  # the run's step before this stage's first step (its policy is the stage's reference)
    steps: int
    hops_mix: dict[str, float] | None  # None: the data's own mix

    @property
    def end(self) -> int:
        """The run's step of this stage's last step."""
        return self.start + self.steps

    def local(self, step: int) -> int:
        """A run step as the step within this stage (1 … steps): what the LR schedule and the seeds are keyed by."""
        return step - self.start


def stages(cfg: Any) -> list[Stage]:
    """The run's stages (one, without train.stages). A stage's `hops_mix` replaces data.hops_mix; null is the data's
    own mix; left out, data.hops_mix."""
    raw = cfg.train.stages
    if not raw:
        return [Stage(0, 0, int(cfg.train.steps), cfg.data.hops_mix or None)]
    out: list[Stage] = []
    start = 0
    for i, s in enumerate(raw):
        mix = s["hops_mix"] if "hops_mix" in s else cfg.data.hops_mix
        out.append(Stage(i, start, int(s["steps"]), mix or None))
        start += int(s["steps"])
    return out


def stage_of(all_stages: list[Stage], step: int) -> Stage:
    """The stage that runs `step` (1 … total); step 0 (before any update) and steps past the end belong to the first
    and the last stage."""
    for s in all_stages:
        if step <= s.end:
            return s
    return all_stages[-1]


def describe(s: Stage, total_stages: int, per_step: dict[int, int] | None = None) -> str:
    """The stage's log line. `per_step`: the questions a step takes of each number of hops (MixSampler.counts of the
    batch size) — what a mix's weights come to after rounding, which can differ from them: 1 : 3 over six questions a
    step is 2 one-hop and 4 two-hop, a third fewer two-hop questions than eight give, not a quarter."""
    mix = (
        "the data's own mix"
        if not s.hops_mix
        else "hops_mix " + ", ".join(f"{h}: {w:g}" for h, w in s.hops_mix.items())
    )
    if s.hops_mix and per_step:
        mix += (
            f" (a step's {sum(per_step.values())} questions: "
            + ", ".join(f"{n} {h}-hop" for h, n in sorted(per_step.items()))
            + ")"
        )
    return f"stage {s.index + 1} of {total_stages}: steps {s.start + 1}–{s.end}, {mix}"
