"""Turns sampled by TRL's colocated vLLM (`trl.use_vllm`), as a `TurnGenerator` for the rollout (rollout.py): the
same protocol, another sampler. TRL syncs the trained weights into vLLM before it calls the rollout; each turn is
one `LLM.generate` call over the active trajectories' token ids (never re-tokenised), with a turn's own budget and
stops (`</search>`, `</answer>` as strings, end-of-sequence ids as ids; the token that completes a stop string is
kept, as our sampler keeps it). The log-prob of each sampled token is vLLM's, which the records keep as
`rollout_logprob` and TRL's importance-sampling correction compares with the trainer's.

Untested here: there is no GPU and no vLLM on the machine this was written on (docs/engines.md says so); the
conversion of requests and outputs is tested with a stand-in for vLLM's LLM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...generation import GeneratedTurn, Stops


class VLLMTurnGenerator:
    def __init__(
        self, llm: Any, stops: Stops, temperature: float, top_p: float, seed: int, sampling_params: Any = None
    ):
        self.llm = llm
        self.stops = stops
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self._calls = 0
        if sampling_params is None:
            from vllm import SamplingParams as sampling_params  # noqa: N813 - vLLM's class
        self.sampling_params = sampling_params

    def release(self) -> None:
        pass  # vLLM keeps its own cache (prefix caching)

    def params(self, budget: int, row: int) -> Any:
        return self.sampling_params(
            n=1,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=budget,
            stop=list(self.stops.strings),
            stop_token_ids=sorted(self.stops.eos_ids),
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            logprobs=0,
            seed=self.seed + 104_729 * self._calls + row,
        )

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], keys: Sequence[Any] | None = None
    ) -> list[GeneratedTurn]:
        out = [GeneratedTurn([], []) for _ in contexts]
        rows = [i for i, b in enumerate(budgets) if b > 0]
        if not rows:
            return out
        prompts = [{"prompt_token_ids": list(contexts[i])} for i in rows]
        params = [self.params(budgets[i], i) for i in rows]
        self._calls += 1
        for i, result in zip(rows, self.llm.generate(prompts, sampling_params=params, use_tqdm=False)):
            o = result.outputs[0]
            ids = list(o.token_ids)[: budgets[i]]
            # one {token id: Logprob} per sampled token (logprobs=0: the sampled token's only)
            lps = [
                float(step[tok].logprob) if step and tok in step else 0.0
                for tok, step in zip(ids, o.logprobs or [{}] * len(ids))
            ]
            out[i] = GeneratedTurn(ids, lps)
        return out
