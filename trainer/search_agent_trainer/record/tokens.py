"""A rollout record (DESIGN §4.3) from the token arrays an engine trained on, whichever engine: the veRL engine's
recorder (engines/verl/recorder.py) and the drop-in recorders of record/ build every record here.

What a record says, and where the values come from:
- `tokens.ids`: the prompt's ids then the response's, as the engine had them (never re-tokenised); `tokens.text`: each
  id decoded on its own (special tokens kept, so the texts join into the prompt + response);
- `tokens.role`: `prompt` over the prompt, then the response's roles as the caller knows them (our agent loops
  record them; an engine's own loop only has its mask: `generated` where it trained, `retrieved` where it did not —
  the caller says which in `meta.roles`);
- `tokens.loss_mask`: 0 over the prompt, then the mask the engine trained with;
- per-token numbers (response-aligned in `arrays`): null where not scored — `rollout_logprob` off the generated
  tokens, the others (`logprob`, `ref_logprob`, `advantage`, `value`, `entropy`) off the tokens the engine trained on.
A trajectory's searches, turns and finish reason are written only when the caller knows them (`known=False`: a loop
of the user's own; readers derive them from the text).

Before any training pass (a held-out evaluation, a fork) a trajectory's arrays are its own (`token_arrays`): the loss
mask of its roles and the sampling-time log-probs; `trajectory_data` builds an evaluation's step data from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import token_store
from ..data import Example
from ..recorder import StepData
from ..rollout import Trajectory
from ..run_writer import rollout_record

# Per array: scored on the generated tokens (the sampler's) or on the trained ones (the trainer's).
SCORED_ON_GENERATED = ("rollout_logprob",)


def trajectory_of(
    example: Example,
    group: int,
    sample: int,
    prompt_text: str,
    prompt_ids: Sequence[int],
    ids: Sequence[int],
    roles: Sequence[str],
    response_text: str,
    **fields: Any,
) -> Trajectory:
    """A Trajectory holding what an engine produced (for records and the metrics of metrics.py); `fields` sets the
    rest (finish, turns, searches, valid_actions, reward, reward_parts, metrics, reward_error, retrieval, dialect…)."""
    t = Trajectory(example, group, sample, prompt_text, list(prompt_ids), ids=list(ids), roles=list(roles))
    t.pieces = [response_text]
    for k, v in fields.items():
        setattr(t, k, v)
    return t


def token_record(
    t: Trajectory,
    token_texts: Any,
    *,
    run_id: str,
    step: int,
    split: str,
    mask: Sequence[int],
    arrays: Mapping[str, Sequence[float | None] | None] | None = None,
    known: bool = True,
) -> dict[str, Any]:
    """The record of `t` with its token arrays. `token_texts(ids)`: each id's text (policy.Tokenizer.token_texts);
    `mask`: the engine's loss mask over the response; `arrays`: response-aligned numbers by our names."""
    P = len(t.prompt_ids)
    mask = [int(m) for m in mask]
    tokens: dict[str, list[Any]] = {
        "text": token_texts(list(t.prompt_ids) + list(t.ids)),
        "ids": list(t.prompt_ids) + list(t.ids),
        "role": ["prompt"] * P + list(t.roles),
        "loss_mask": [0] * P + mask,
    }
    for name, values in (arrays or {}).items():
        if values is None:
            continue
        values = list(values)
        scored = [r == "generated" for r in t.roles] if name in SCORED_ON_GENERATED else [m == 1 for m in mask]
        tokens[name] = [None] * P + [
            round(float(x), 6) if s and x is not None else None for x, s in zip(values, scored)
        ]
    rec = rollout_record(t, run_id=run_id, step=step, split=split, tokens=tokens)
    if not known:
        for k in ("finish", "turns", "searches"):
            rec.pop(k, None)
    elif rec.get("finish") is None:
        rec.pop("finish", None)
    return rec


def token_arrays(tok: Any, t: Trajectory) -> dict[str, list[Any]]:
    """A trajectory's token arrays before any training pass: text, ids, roles, the loss mask of its roles (1 exactly on
    generated tokens) and the sampling-time log-prob where the policy sampled a token (null on the prompt and the
    observations). The update's records replace the loss mask with the one it used and add its own arrays."""
    P = len(t.prompt_ids)
    ids = t.prompt_ids + t.ids
    return {
        "text": tok.token_texts(ids),
        "ids": ids,
        "role": ["prompt"] * P + t.roles,
        "loss_mask": [0] * P + [1 if role == "generated" else 0 for role in t.roles],
        "rollout_logprob": [None] * P + [None if x is None else round(float(x), 6) for x in t.sample_logprobs],
    }


def trajectory_data(trajs: list[Trajectory], tok: Any, *, run_id: str, step: int, split: str) -> Any:
    """The recorder's builder of a held-out evaluation's data (no training pass: the token arrays of the
    trajectories), run on its writer thread."""

    def build(keep: list[int]) -> StepData:
        records = [
            rollout_record(trajs[i], run_id=run_id, step=step, split=split, tokens=token_arrays(tok, trajs[i]))
            for i in keep
        ]
        rows, cols = token_store.columns_from_records(records)
        return StepData([{k: v for k, v in r.items() if k != "tokens"} for r in records], cols)

    return build
