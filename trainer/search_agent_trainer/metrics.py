"""The metrics every engine writes of its rollouts, in veRL's names (`response_length/mean`, `env/…`, `mask/…`,
`reward/em/mean`) and our held-out ones (`val/*`): the builtin and TRL engines' steps and evaluations and the veRL
recorder's batches all read them here, so a run reads the same whatever trained it.

- `rollout_metrics`: lengths, actions (`env/number_of_valid_search`: Search-R1's searches per trajectory), the token
  roles (`mask/generated_tokens`, `mask/retrieved_tokens`, …) and the env server's built-in measures (EM, F1, format);
- `held_out_metrics`: an evaluation's `val/*` — exact match (`val/em`), by data source, by the searches a question
  needs (`meta.hops`) and by question type (`meta.kind`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .data import bridge_searched
from .rollout import Trajectory

# At most this many question types get `val/*_by_kind/*` metrics (more is an id, not a type: nothing is logged).
MAX_KINDS = 16

# The metrics repeated in the stdout `metrics` event (all of them are in metrics.jsonl).
SUMMARY_KEYS = (
    "critic/score/mean",
    "reward/em/mean",
    "reward/frac_zero_std_groups",
    "response_length/mean",
    "env/number_of_valid_search",
    "env/ratio_of_valid_action",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/kl_loss",
    "actor/grad_norm",
    "mask/generated_tokens",
    "val/em",
    "timing_s/step",
)


def mean(xs: Sequence[float]) -> float:
    """The mean, 0 of nothing."""
    return float(sum(xs) / len(xs)) if xs else 0.0


def metric_name(kind: str) -> str:
    """A `meta.kind` as one metric-key segment: runs of anything but letters, digits, `.`, `_` and `-` become `_`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", kind).strip("_") or "_"


def rollout_metrics(trajs: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """The rollouts' metrics (`prefix`: `val/` for an evaluation's)."""
    n = len(trajs)
    resp = [len(t.ids) for t in trajs]
    m = {
        f"{prefix}response_length/mean": mean(resp),
        f"{prefix}response_length/max": float(max(resp)),
        f"{prefix}response_length/min": float(min(resp)),
        f"{prefix}response_length/clip_ratio": sum(t.finish == "length" for t in trajs) / n,
        f"{prefix}prompt_length/mean": mean([len(t.prompt_ids) for t in trajs]),
        f"{prefix}env/number_of_actions/mean": mean([t.turns for t in trajs]),
        f"{prefix}env/finish_ratio": sum(t.finish == "answer" for t in trajs) / n,
        f"{prefix}env/number_of_valid_action": mean([t.valid_actions for t in trajs]),
        f"{prefix}env/ratio_of_valid_action": mean([t.valid_actions / max(1, t.turns) for t in trajs]),
        f"{prefix}env/number_of_valid_search": mean([t.searches for t in trajs]),
        f"{prefix}mask/generated_tokens": mean([t.roles.count("generated") for t in trajs]),
        f"{prefix}mask/retrieved_tokens": mean([t.roles.count("retrieved") for t in trajs]),
        f"{prefix}mask/feedback_tokens": mean([t.roles.count("feedback") for t in trajs]),
    }
    for key in ("em", "f1", "format", "answer_retrieved"):
        vals = [t.metrics[key] for t in trajs if key in t.metrics]
        if vals:
            m[f"{prefix}reward/{key}/mean"] = mean(vals)
    return m


def held_out_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The held-out metrics (`val/*`) of an evaluation's trajectories: every engine's (the builtin and TRL trainers'
    evaluation, veRL's validation batches through its recorder), so a run reads the same whatever trained it."""
    trajs = list(trajs)
    m = rollout_metrics(trajs, prefix="val/")
    m["val/em"] = mean([t.metrics.get("em", 0.0) for t in trajs])
    m["val/score"] = mean([t.reward or 0.0 for t in trajs])
    m["val/searches_mean"] = mean([t.searches for t in trajs])
    sources = sorted({t.example.data_source for t in trajs})
    if len(sources) > 1:
        for s in sources:
            m[f"val/em/{s}"] = mean([t.metrics.get("em", 0.0) for t in trajs if t.example.data_source == s])
    # By the searches a question needs (the dataset's `meta.hops`; questions without it are left out): does the
    # policy search again where one search cannot answer?
    for h in sorted({t.example.hops for t in trajs if t.example.hops is not None}):
        part = [t for t in trajs if t.example.hops == h]
        m.update(part_metrics(part, f"by_hops/{h}"))
        # Did a search after the first name the entity the first found (the dataset's `meta.bridge`)? What the
        # second search is for: searches per question say that it searched again, this says what it searched.
        named = [
            b for b in (bridge_searched(t.example, [r["query"] for r in t.retrieval]) for t in part) if b is not None
        ]
        if named:
            m[f"val/bridge_searched_by_hops/{h}"] = mean(named)
    # By the question's type (the dataset's `meta.kind`), when it names 2–MAX_KINDS of them: a mean over mixed
    # types hides the one the policy fails (the demo's two-hop policies answered held-out river questions with the
    # town found on the way while the two town kinds generalised; docs/demo.md).
    kinds = sorted({t.example.kind for t in trajs if t.example.kind is not None})
    if 2 <= len(kinds) <= MAX_KINDS:
        for k in kinds:
            m.update(part_metrics([t for t in trajs if t.example.kind == k], f"by_kind/{metric_name(k)}"))
    return m


def part_metrics(part: Sequence[Trajectory], group: str) -> dict[str, float]:
    """Exact match, searches per question and answer retrieved of one group of held-out questions (`group`:
    `by_hops/2`, `by_kind/river`, …)."""
    m = {
        f"val/em_{group}": mean([t.metrics.get("em", 0.0) for t in part]),
        f"val/searches_{group}": mean([t.searches for t in part]),
    }
    # Had a search put a golden answer in front of the policy? (the env server's `answer_retrieved`): a low EM with a
    # high value here is a reading failure, with a low one a search failure.
    found = [t.metrics["answer_retrieved"] for t in part if "answer_retrieved" in t.metrics]
    if found:
        m[f"val/answer_retrieved_{group}"] = mean(found)
    return m
