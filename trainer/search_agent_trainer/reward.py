"""A step's trajectories scored by the env server's `/reward` (the user's reward module; the trainer computes no
reward itself): the item each trajectory is sent as, and the scores set on the trajectories. Every engine that
rolls out with rollout.py scores through here (the builtin and TRL engines, and a fork of a recorded rollout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .env_client import EnvClient
from .rollout import Trajectory


def reward_item(t: Trajectory, search_tool: str) -> dict[str, Any]:
    """A trajectory as `/reward` scores it (the tool-call dialect names its search tool)."""
    tool = {"search_tool": search_tool} if t.dialect == "toolcall" else {}
    strict = {"strict_actions": True} if t.strict_actions else {}
    # Who wrote what: the reward reads the answer from the policy's text only, never from tags in a document.
    spans = t.spans
    return {
        "id": f"{t.group}:{t.sample}",
        "prompt": t.prompt,
        "response": t.response,
        "golden": list(t.example.golden),
        "question": t.example.question,
        "data_source": t.example.data_source,
        "dialect": t.dialect,
        **tool,
        **strict,
        **({"spans": spans} if spans else {}),
    }


def score(env: EnvClient, trajs: list[Trajectory], search_tool: str, warning: Callable[..., None]) -> int:
    """Rewards from /reward; a failed item is reported, kept with reward 0 for training and its error recorded.
    Returns how many failed."""
    items = [reward_item(t, search_tool) for t in trajs]
    failed = 0
    first = None
    for t, res in zip(trajs, env.reward(items)):
        t.metrics = res.get("metrics") or {}
        if res.get("reward") is None:
            failed += 1
            first = first or res.get("error")
            t.reward, t.reward_parts, t.reward_error = 0.0, {}, res.get("error", "the reward module failed")
        else:
            t.reward, t.reward_parts = float(res["reward"]), dict(res.get("parts") or {})
    if failed:
        warning(
            f"the reward module failed on {failed} of {len(trajs)} trajectories (scored 0 for training): {first}",
            failed=failed,
        )
    return failed
