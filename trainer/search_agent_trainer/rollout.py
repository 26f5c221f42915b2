"""Multi-turn rollouts, as Search-R1's generation loop (`search_r1/llm_agent/generation.py`) does them, with every
token's role tracked from the start (never reconstructed by re-tokenising text).

This loop is the protocol, and the only implementation of it: every engine and the policy server call `run_rollouts`
with a `TurnGenerator` (generation.py's `LMGenerator` over the policy, or a stand-in); the generator never sees the
protocol except through its `Stops`.

One trajectory: the prompt, then turns. A turn is generated (batched over every active trajectory of a wave, see
`RolloutSettings.wave_size`) until `</search>`, `</answer>`, an end-of-sequence token (`search_r1_stops`), the
per-turn token budget or the response budget. The turn's
action is Search-R1's: the first `<(search|answer)>(.*?)</\\1>` of the turn's text.
- answer: the trajectory is done (`finish: answer`);
- search: the query goes to `/retrieve` (one batched request for the whole turn) and the observation
  `\\n\\n<information>{Doc 1(Title: …) …}</information>\\n\\n` is appended, role `retrieved`;
- anything else: Search-R1's invalid-action message is appended, role `feedback`.
An observation longer than `max_obs_length` tokens is cut to that many tokens (as Search-R1 does) and a warning is
raised. After `max_turns` turns, trajectories still going get one forced final turn with no environment step
(Search-R1's final rollout): `finish: answer` if it answers, else `max_turns`. A trajectory whose response reaches
`max_response_length` tokens stops there: `finish: length`.

Generated tokens are kept as sampled: a token that completes `</search>` and carries more text stays whole, and an
end-of-sequence token stays in the response (it was generated, so it is trained on).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .data import Example
from .env_client import EnvClient, passages_to_string
from .generation import Stops, TurnGenerator

ACTION_RE = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
INVALID_ACTION_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
STOP_STRINGS = ("</search>", "</answer>")


def search_r1_stops(tokenizer: Any) -> Stops:
    """The stop condition of a Search-R1 turn: `</search>`, `</answer>` or an end-of-sequence token."""
    return Stops(tokenizer, STOP_STRINGS)


def observation(hits: list[dict[str, Any]]) -> str:
    """Search-R1's observation for a search: the passages between <information> tags, set apart by blank lines."""
    return f"\n\n<information>{passages_to_string(hits).strip()}</information>\n\n"


def turn_action(text: str) -> tuple[str | None, str]:
    """Search-R1's `postprocess_predictions`: (search|answer|None, the stripped content)."""
    m = ACTION_RE.search(text)
    return (m.group(1), m.group(2).strip()) if m else (None, "")


@dataclass
class Trajectory:
    example: Example
    group: int
    sample: int
    prompt: str
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # the response's tokens
    roles: list[str] = field(default_factory=list)  # generated | retrieved | feedback, one per response token
    pieces: list[str] = field(default_factory=list)  # the response's text, piece by piece
    sample_logprobs: list[float | None] = field(default_factory=list)
    turns: int = 0
    searches: int = 0
    valid_actions: int = 0
    finish: str | None = None
    reward: float | None = None
    reward_parts: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    reward_error: str | None = None
    # Per search: the query and its hits' ids and retrieval scores (the replay panel shows them on the documents).
    retrieval: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.finish is not None

    @property
    def response(self) -> str:
        return "".join(self.pieces)

    def append(self, ids: Sequence[int], role: str, text: str, logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.roles.extend([role] * len(ids))
        self.pieces.append(text)
        self.sample_logprobs.extend(logprobs if logprobs is not None else [None] * len(ids))


@dataclass
class RolloutSettings:
    max_turns: int
    max_turn_tokens: int
    max_response_length: int
    max_obs_length: int
    topk: int
    # Trajectories taken through all their turns together (a multiple of n; None: all of them). Bounds the KV cache a
    # generator keeps across turns (LMGenerator.wave_size); each wave makes its own /retrieve request per turn.
    wave_size: int | None = None


def retrieval_entry(query: str, hits: list[dict[str, Any]]) -> dict[str, Any]:
    """A search as the records keep it (`meta.retrieval`): the query, its hits' ids and retrieval scores."""
    return {"query": query, "hits": [{"id": str(h.get("document", {}).get("id", "")), "score": h.get("score")} for h in hits]}


def turn_budget(t: Trajectory, s: RolloutSettings) -> int:
    """New tokens the trajectory's next turn may generate: the per-turn budget, within the response budget."""
    return min(s.max_turn_tokens, s.max_response_length - len(t.ids))


def take_turn(t: Trajectory, ids: Sequence[int], logprobs: Sequence[float] | None, text: str, final: bool, s: RolloutSettings) -> tuple[str, str] | None:
    """Appends a generated turn (its tokens as sampled, `text` their decoding) and applies Search-R1's action rule.
    Returns what the environment must answer, `("search", query)` or `("invalid", "")`, or None when the trajectory
    is done (answered, its last turn, or out of response budget)."""
    t.append(ids, "generated", text, logprobs)
    t.turns += 1
    action, content = turn_action(text)
    if action is not None:
        t.valid_actions += 1
    if action == "answer":
        t.finish = "answer"
    elif final:
        t.finish = "max_turns"
    elif len(t.ids) >= s.max_response_length:
        t.finish = "length"
    else:
        return ("search", content) if action == "search" else ("invalid", "")
    return None


def observe(t: Trajectory, request: tuple[str, str], hits: list[dict[str, Any]] | None, tokenizer: Any, s: RolloutSettings, cut: dict[str, int]) -> None:
    """Appends the environment's answer to `request` (from take_turn): a search's passages (role `retrieved`; the query
    and hits go to `t.retrieval`) or Search-R1's invalid-action feedback (role `feedback`), tokenised, cut to
    `max_obs_length` tokens (counted in `cut`) and to the response budget (then `finish: length`)."""
    if request[0] == "search":
        assert hits is not None
        t.retrieval.append(retrieval_entry(request[1], hits))
        t.searches += 1
        text, role = observation(hits), "retrieved"
    else:
        text, role = INVALID_ACTION_FEEDBACK, "feedback"
    ids = tokenizer.encode(text)
    if len(ids) > s.max_obs_length:
        cut["truncated"] += 1
        cut["longest"] = max(cut["longest"], len(ids))
        ids = ids[: s.max_obs_length]
        text = tokenizer.decode(ids)
    room = s.max_response_length - len(t.ids)
    if len(ids) >= room:
        ids = ids[:room]
        text = tokenizer.decode(ids)
        t.finish = "length"
    t.append(ids, role, text)


def truncation_warning(cut: dict[str, int], max_obs_length: int) -> str | None:
    """The warning for observations cut to max_obs_length (None when none was)."""
    if not cut["truncated"]:
        return None
    return f"{cut['truncated']} observations were longer than rollout.max_obs_length ({max_obs_length} tokens; the longest had {cut['longest']}) and were cut: raise max_obs_length or lower retriever.topk"


def run_rollouts(
    examples: Sequence[Example],
    prompts: Sequence[tuple[str, list[int]]],
    n: int,
    generator: TurnGenerator,
    tokenizer: Any,
    env: EnvClient,
    s: RolloutSettings,
    warn: Callable[[str], None] = lambda _m: None,
) -> list[Trajectory]:
    """n trajectories per example (a GRPO group each); `prompts[i]` is example i's prompt text and token ids. The
    trajectories go through their turns in waves of `s.wave_size`; the generator is called once per wave and turn
    with every active trajectory of the wave (keyed by its index, so it may keep their caches between turns) and
    released after each wave. take_turn and observe are the protocol, per trajectory (the veRL engine's agent loop
    calls them one trajectory at a time)."""
    trajs = [Trajectory(ex, g, k, prompts[g][0], list(prompts[g][1])) for g, ex in enumerate(examples) for k in range(n)]
    size = s.wave_size or len(trajs)
    cut = {"truncated": 0, "longest": 0}
    for lo in range(0, len(trajs), size):
        try:
            _run_wave(trajs, range(lo, min(lo + size, len(trajs))), generator, tokenizer, env, s, cut)
        finally:
            generator.release()
    message = truncation_warning(cut, s.max_obs_length)
    if message:
        warn(message)
    return trajs


def _run_wave(trajs: list[Trajectory], wave: range, generator: TurnGenerator, tokenizer: Any, env: EnvClient, s: RolloutSettings, cut: dict[str, int]) -> None:
    for turn in range(s.max_turns + 1):
        active = [i for i in wave if not trajs[i].done]
        if not active:
            break
        outs = generator.generate([trajs[i].prompt_ids + trajs[i].ids for i in active], [turn_budget(trajs[i], s) for i in active], active)
        requests = [(t, take_turn(t, o.ids, o.logprobs, tokenizer.decode(o.ids), turn == s.max_turns, s)) for t, o in zip((trajs[i] for i in active), outs)]
        searches = [(t, r) for t, r in requests if r is not None and r[0] == "search"]
        results = env.retrieve([r[1] for _, r in searches], s.topk) if searches else []
        for (t, r), hits in zip(searches, results):
            observe(t, r, hits, tokenizer, s, cut)
        for t, r in requests:
            if r is not None and r[0] == "invalid":
                observe(t, r, None, tokenizer, s, cut)
