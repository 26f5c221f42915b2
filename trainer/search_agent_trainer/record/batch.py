"""The records of a training step from the batch the builtin engine trained on (batch.py's `SequenceBatch`): the
numbers of the update over the response window and where each is scored (docs/run-format.md), the in-run checks of
every row (recorder.rollout_flags) and the recorder's builder of the step's records and token columns.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import token_store
from ..batch import SequenceBatch
from ..recorder import StepData, columns_from_window, role_codes_of, rollout_flags
from ..rollout import Trajectory
from ..run_writer import rollout_record


def scored_window(
    batch: SequenceBatch, entropy: torch.Tensor | None
) -> dict[str, tuple[torch.Tensor, torch.Tensor] | None]:
    """The (B, R) numbers of the records and where each is scored (null elsewhere, docs/run-format.md): log-probs
    and entropies on the loss tokens of the trained rows, advantages where advantages are defined, values on
    every response token, sampling-time log-probs on the generated tokens."""
    trained = batch.loss_mask.bool() if batch.trained is None else batch.loss_mask.bool() & batch.trained[:, None]
    pairs = {
        "rollout_logprob": batch.rollout_logprob,
        "logprob": batch.old_logprob,
        "ref_logprob": batch.ref_logprob,
        "advantage": batch.advantages,
        "value": batch.old_values,
        "entropy": entropy,
    }
    where = {
        "rollout_logprob": batch.generated_mask,
        "logprob": trained,
        "ref_logprob": trained,
        "advantage": batch.adv_mask,
        "value": batch.response_mask,
        "entropy": trained,
    }
    return {k: (x, where[k]) if x is not None else None for k, x in pairs.items()}


def batch_flags(
    batch: SequenceBatch, entropy: torch.Tensor | None, loss_masking: bool, stats: dict[str, float] | None = None
) -> list[list[str]]:
    """The in-run checks of every row (recorder.rollout_flags): a leak, a non-finite number, a log-prob gap; their
    sums into `stats` (the step's audit/* metrics)."""
    scored = scored_window(batch, entropy)
    expected = batch.generated_mask if loss_masking else batch.response_mask
    trained = scored["logprob"]
    return rollout_flags(
        valid=batch.response_mask,
        loss_mask=batch.loss_mask,
        expected=expected,
        logprob=trained[0] if trained else None,
        logprob_scored=trained[1] if trained else None,
        rollout_logprob=batch.rollout_logprob,
        rollout_scored=batch.generated_mask,
        numbers=[p for p in scored.values() if p is not None],
        stats=stats,
        generated=batch.generated_mask,
    )


def batch_data(
    trajs: list[Trajectory], batch: SequenceBatch, entropy: torch.Tensor | None, *, run_id: str, step: int, split: str
) -> Any:
    """The writer thread's builder of a training step's data: the step's tensors and trajectories, referenced (a
    new batch is made each step, so nothing here changes after the step)."""
    scored, untrained = scored_window(batch, entropy), None if batch.trained is None else (~batch.trained).tolist()

    def build(keep: list[int]) -> StepData:
        records = [rollout_record(trajs[i], run_id=run_id, step=step, split=split, tokens=None) for i in keep]
        codes = {i: role_codes_of(trajs[i].roles) for i in keep}
        nonfinite: dict[int, dict[str, list[int]]] = {}
        cols = columns_from_window(
            rows=keep,
            seq_ids={i: trajs[i].prompt_ids + trajs[i].ids for i in keep},
            prompt_lengths=[len(t.prompt_ids) for t in trajs],
            role_codes=codes,
            window=scored,
            loss_mask=batch.loss_mask,
            nonfinite=nonfinite,
        )
        # the store's NaN is the record's null: a NaN or ∞ where a number is scored is listed in meta.nonfinite
        # (for the audit's non-finite), as is a reward that is not finite
        for k, i in enumerate(keep):
            bad = dict(nonfinite.get(k, {}))
            if trajs[i].reward is not None and not math.isfinite(trajs[i].reward):
                bad["reward"] = []
            if bad:
                records[k].setdefault("meta", {})["nonfinite"] = bad
        # a row the trainer left out (skip_zero_std_groups) has no trainer log-probs or entropies
        if untrained is not None:
            off = sum(token_store.ARRAY_BIT[k] for k in ("logprob", "ref_logprob", "entropy") if scored[k] is not None)
            for k, i in enumerate(keep):
                if untrained[i]:
                    cols.arrays[k] &= ~off
        return StepData(records, cols)

    return build
