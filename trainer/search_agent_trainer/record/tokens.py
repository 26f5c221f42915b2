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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..data import Example
from ..rollout import Trajectory
from ..run_writer import rollout_record

# Per array: scored on the generated tokens (the sampler's) or on the trained ones (the trainer's).
SCORED_ON_GENERATED = ("rollout_logprob",)


def trajectory_of(example: Example, group: int, sample: int, prompt_text: str, prompt_ids: Sequence[int], ids: Sequence[int], roles: Sequence[str], response_text: str, **fields: Any) -> Trajectory:
    """A Trajectory holding what an engine produced (for records and the metrics of train.py); `fields` sets the
    rest (finish, turns, searches, valid_actions, reward, reward_parts, metrics, reward_error, retrieval, dialect…)."""
    t = Trajectory(example, group, sample, prompt_text, list(prompt_ids), ids=list(ids), roles=list(roles))
    t.pieces = [response_text]
    for k, v in fields.items():
        setattr(t, k, v)
    return t


def token_record(t: Trajectory, token_texts: Any, *, run_id: str, step: int, split: str, mask: Sequence[int], arrays: Mapping[str, Sequence[float | None] | None] | None = None, known: bool = True) -> dict[str, Any]:
    """The record of `t` with its token arrays. `token_texts(ids)`: each id's text (policy.Tokenizer.token_texts);
    `mask`: the engine's loss mask over the response; `arrays`: response-aligned numbers by our names."""
    P = len(t.prompt_ids)
    mask = [int(m) for m in mask]
    tokens: dict[str, list[Any]] = {"text": token_texts(list(t.prompt_ids) + list(t.ids)), "ids": list(t.prompt_ids) + list(t.ids), "role": ["prompt"] * P + list(t.roles), "loss_mask": [0] * P + mask}
    for name, values in (arrays or {}).items():
        if values is None:
            continue
        values = list(values)
        scored = [r == "generated" for r in t.roles] if name in SCORED_ON_GENERATED else [m == 1 for m in mask]
        tokens[name] = [None] * P + [round(float(x), 6) if s and x is not None else None for x, s in zip(values, scored)]
    rec = rollout_record(t, run_id=run_id, step=step, split=split, tokens=tokens)
    if not known:
        for k in ("finish", "turns", "searches"):
            rec.pop(k, None)
    elif rec.get("finish") is None:
        rec.pop("finish", None)
    return rec
