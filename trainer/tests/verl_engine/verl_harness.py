"""What the veRL engine's tests share: a scripted stand-in for the model (the GPU part: vLLM/SGLang's servers and
the policy cannot run here), run configs for the tiny Qwen2 model, and the veRL config they compose to."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from conftest import DEMO, ROOT  # noqa: E402
from search_agent_trainer.config import config_from_dict  # noqa: E402
from search_agent_trainer.rollout import STOP_STRINGS  # noqa: E402

try:  # the trainer issue moves the generator's types to generation.py
    from search_agent_trainer.generation import GeneratedTurn  # type: ignore[import-not-found]
except ImportError:
    from search_agent_trainer.rollout import GeneratedTurn


class ScriptedModel:
    """TEST DOUBLE for the policy behind vLLM/SGLang: each trajectory's turns are given as text (chosen by the question
    in its prompt, in order for a group's samples), and a turn comes back as the tokens a sampler stopping like vLLM
    returns: the turn text's tokens up to and including the first one after which the text contains a stop string,
    or a stop token, or the budget; with made-up log-probs. A trajectory is recognised by its context extending one
    it was given before, so the same double serves veRL's per-trajectory server calls and the builtin trainer's
    batched generator."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[list[str]]], stop_ids: Sequence[int]):
        self.tok = tokenizer
        self.scripts = {q: list(per_sample) for q, per_sample in scripts.items()}
        self.stop_ids = set(stop_ids)
        self.live: list[tuple[list[int], list[str]]] = []  # (context so far, turns left)
        self.calls: list[tuple[list[int], int]] = []  # (context, budget) per turn generated

    def _script(self, context: list[int]) -> tuple[int, list[str]]:
        best = max(
            (k for k, (c, _) in enumerate(self.live) if context[: len(c)] == c),
            key=lambda k: len(self.live[k][0]),
            default=None,
        )
        if best is not None:
            return best, self.live[best][1]
        text = self.tok.decode(context, skip_special_tokens=False)
        question = next(q for q in self.scripts if q in text)
        self.live.append((list(context), list(self.scripts[question].pop(0))))
        return len(self.live) - 1, self.live[-1][1]

    def turn(
        self, context: Sequence[int], budget: int, stop_strings: Sequence[str] = STOP_STRINGS
    ) -> tuple[list[int], list[float]]:
        context = list(context)
        self.calls.append((context, budget))
        k, turns = self._script(context)
        ids = self.tok.encode(turns.pop(0), add_special_tokens=False)
        for n in range(1, len(ids) + 1):
            if (
                n == budget
                or ids[n - 1] in self.stop_ids
                or any(s in self.tok.decode(ids[:n], skip_special_tokens=False) for s in stop_strings)
            ):
                ids = ids[:n]
                break
        self.live[k] = (context + ids, turns)
        return ids, [-(j + 1) / 64 for j in range(len(ids))]  # exact in float32, as veRL stores them


class ScriptedLLMServer:
    """TEST DOUBLE for veRL's LLMServerClient (the async vLLM/SGLang servers): `generate` as the agent loops call it,
    answered by a ScriptedModel; it keeps the sampling parameters it was sent."""

    def __init__(self, model: ScriptedModel):
        self.model = model
        self.params: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_kw: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.params.append(dict(sampling_params))
        ids, lps = self.model.turn(
            prompt_ids, int(sampling_params.get("max_tokens", 10**9)), sampling_params.get("stop") or ()
        )
        return TokenOutput(
            token_ids=ids, log_probs=lps if sampling_params.get("logprobs") else None, stop_reason="completed"
        )


class ScriptedTurnGenerator:
    """TEST DOUBLE for the builtin trainer's generator (LMGenerator), answered by a ScriptedModel."""

    def __init__(self, model: ScriptedModel):
        self.model = model

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], keys: Any = None
    ) -> list[GeneratedTurn]:
        return [GeneratedTurn(*self.model.turn(c, b)) for c, b in zip(contexts, budgets)]

    def release(self) -> None:
        pass


def run_config(qwen_dir: Path, **sections: Any) -> Any:
    """A resolved run config for the tiny Qwen2 model over the demo data (sections merged over the base; a scalar
    such as devices=4 replaces the key)."""
    raw: dict[str, Any] = {
        "engine": "verl",
        "seed": 3,
        "data": {"train": str(DEMO / "train.jsonl"), "eval": str(DEMO / "eval.jsonl"), "eval_size": 4},
        "model": {"kind": "hf", "path": str(qwen_dir)},
        "rollout": {
            "batch_size": 4,
            "n": 2,
            "max_turns": 2,
            "max_turn_tokens": 48,
            "max_response_length": 400,
            "max_obs_length": 200,
            "max_prompt_length": 400,
        },
        "optim": {"mini_batch_size": 4, "micro_batch_size": 2},
        "train": {"steps": 3, "eval_every": 2, "checkpoint_every": 2},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values} if isinstance(values, dict) else values
    return config_from_dict(raw, base=ROOT)
