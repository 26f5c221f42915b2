"""The reward for veRL: `compute_score`, named by `reward.custom_reward_function.{path,name}`, scores with the user's
reward module through our env server's `/reward` (the trainer computes no reward itself, whatever the engine).

veRL 0.9.1 (verl/experimental/reward_loop, verl/trainer/ppo/reward.py) calls it once per trajectory from its reward
loop workers (Ray actors, `reward.num_workers`), as `compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)`: `solution_str` is the response decoded without special tokens, `extra_info` the
row's `extra_info` plus the agent loop's `extra_fields` (ours: `sas`, with the response as the protocol wrote it
and the prompt) and `num_turns`; `reward_kwargs` come from `custom_reward_function.reward_kwargs` (we pass
`env_url`). It returns a dict: `score` is the reward veRL trains on, every other key becomes a batch column; ours is
`sas_reward`, one JSON string (the reward, its parts, metrics and any error), so columns are the same for every
trajectory whatever the module returns.

Being a coroutine, it lets a worker's concurrent calls share one `/reward` request (batching.py: calls arriving
within `BATCH_WAIT_S` of the first, or `BATCH_MAX` of them, go out together).
"""

from __future__ import annotations

import json
from typing import Any

from .agent_loop import env_url_of
from .batching import Coalescer, env_batchers
from .dataset import golden_of


def batcher(env_url: str) -> Coalescer:
    """The running event loop's `/reward` coalescer for `env_url` (batching.py)."""
    return env_batchers(env_url).reward


def reward_item(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None
) -> dict[str, Any]:
    """The `/reward` item for one trajectory, as the builtin trainer sends it: our agent loop's response text (the
    protocol's pieces) and prompt when present, else what veRL decoded."""
    info = dict(extra_info or {})
    sas = info.get("sas") or {}
    item = {
        "response": sas.get("response", solution_str),
        "golden": list(info.get("golden") or golden_of(ground_truth)),
        "question": info.get("question"),
        "data_source": info.get("data_source", data_source),
    }
    if sas.get("prompt") is not None:
        item["prompt"] = sas["prompt"]
    if sas.get("strict_actions"):
        item["strict_actions"] = True
    if sas.get("spans") and "response" in sas:  # who wrote what, over our agent loop's response text
        item["spans"] = sas["spans"]
    return item


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    env_url: str | None = None,
    **_kwargs: Any,
) -> dict[str, Any]:
    """veRL's reward function: our `/reward` for one trajectory. A module that fails on it scores 0 for training and
    the error is kept (as the builtin trainer does); an env server that does not answer fails the step."""
    res = await batcher(env_url_of(env_url)).submit(reward_item(data_source, solution_str, ground_truth, extra_info))
    reward = res.get("reward")
    detail = {"reward": reward, "parts": res.get("parts") or {}, "metrics": res.get("metrics") or {}}
    if reward is None:
        detail["error"] = res.get("error") or "the reward module failed"
    return {"score": float(reward) if reward is not None else 0.0, "sas_reward": json.dumps(detail)}
