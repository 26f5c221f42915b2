"""Multi-turn rollouts, as Search-R1's generation loop (`search_r1/llm_agent/generation.py`) does them, with every
token's role tracked from the start (never reconstructed by re-tokenising text).

One trajectory: the prompt, then turns. A turn is generated (batched over every active trajectory, KV-cached) until
`</search>`, `</answer>`, an end-of-sequence token, the per-turn token budget or the response budget. The turn's
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
from typing import Any, Protocol

import torch

from .data import Example
from .env_client import EnvClient, passages_to_string

ACTION_RE = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
INVALID_ACTION_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
STOP_STRINGS = ("</search>", "</answer>")


def observation(hits: list[dict[str, Any]]) -> str:
    """Search-R1's observation for a search: the passages between <information> tags, set apart by blank lines."""
    return f"\n\n<information>{passages_to_string(hits).strip()}</information>\n\n"


def turn_action(text: str) -> tuple[str | None, str]:
    """Search-R1's `postprocess_predictions`: (search|answer|None, the stripped content)."""
    m = ACTION_RE.search(text)
    return (m.group(1), m.group(2).strip()) if m else (None, "")


@dataclass
class GeneratedTurn:
    ids: list[int]
    logprobs: list[float]  # log-probability of each sampled token under the sampling distribution


class TurnGenerator(Protocol):
    """What produces a turn: the policy (LMGenerator) or, in tests, a scripted stand-in for the model."""

    def generate(self, contexts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[GeneratedTurn]: ...


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


def stops_turn(tokenizer: Any, ids: Sequence[int]) -> bool:
    """A turn ends at an end-of-sequence token or once its text contains `</search>` or `</answer>`."""
    if ids and ids[-1] in tokenizer.eos_ids:
        return True
    tail = tokenizer.decode(ids[-12:])
    return any(s in tail for s in STOP_STRINGS)


class LMGenerator:
    """Batched sampling from the policy with a KV cache: the contexts are left-padded and prefilled once, then one
    token per step for the whole batch until every sequence has stopped."""

    def __init__(self, policy: Any, tokenizer: Any, temperature: float, top_p: float, device: torch.device, generator: torch.Generator | None = None, autocast: Any = None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.device = device
        self.generator = generator
        self.autocast = autocast

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = logits.float()
        if self.temperature == 0:
            tok = logits.argmax(-1)
            return tok, torch.log_softmax(logits, -1).gather(-1, tok[:, None]).squeeze(-1)
        logits = logits / self.temperature
        logp = torch.log_softmax(logits, -1)
        probs = logp.exp()
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            keep = (sorted_p.cumsum(-1) - sorted_p) < self.top_p
            keep[:, 0] = True
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
        tok = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)

    @torch.no_grad()
    def generate(self, contexts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[GeneratedTurn]:
        B = len(contexts)
        T = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_id
        ids = torch.full((B, T), pad, dtype=torch.long)
        attn = torch.zeros((B, T), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, T - len(c) :] = torch.tensor(c, dtype=torch.long)
            attn[i, T - len(c) :] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = [GeneratedTurn([], []) for _ in range(B)]
        running = [True] * B
        with self.autocast() if self.autocast else _null():
            logits, past, _ = self.policy(ids, attn, pos, use_cache=True, logits_to_keep=1)
        next_logits = logits[:, -1]
        last_pos = pos[:, -1]
        for _ in range(max(budgets)):
            tok, lp = self._sample(next_logits)
            toks, lps = tok.tolist(), lp.tolist()
            feed = []
            for i in range(B):
                if running[i]:
                    out[i].ids.append(toks[i])
                    out[i].logprobs.append(lps[i])
                    if len(out[i].ids) >= budgets[i] or stops_turn(self.tokenizer, out[i].ids):
                        running[i] = False
                        feed.append(False)
                        continue
                    feed.append(True)
                else:
                    feed.append(False)
            if not any(running):
                break
            live = torch.tensor(feed, dtype=torch.long, device=self.device)
            step_ids = torch.where(live.bool(), tok, torch.full_like(tok, pad))[:, None]
            attn = torch.cat([attn, live[:, None]], dim=1)
            last_pos = last_pos + 1
            with self.autocast() if self.autocast else _null():
                logits, past, _ = self.policy(step_ids, attn, last_pos[:, None], past, use_cache=True)
            next_logits = logits[:, -1]
        return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@dataclass
class RolloutSettings:
    max_turns: int
    max_turn_tokens: int
    max_response_length: int
    max_obs_length: int
    topk: int


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
    """n trajectories per example (a GRPO group each); `prompts[i]` is example i's prompt text and token ids. Each
    turn is one batched generation over the active trajectories and one batched `/retrieve`; take_turn and observe
    are the protocol, per trajectory (the veRL engine's agent loop calls them one trajectory at a time)."""
    trajs = [Trajectory(ex, g, k, prompts[g][0], list(prompts[g][1])) for g, ex in enumerate(examples) for k in range(n)]
    cut = {"truncated": 0, "longest": 0}
    for turn in range(s.max_turns + 1):
        active = [t for t in trajs if not t.done]
        if not active:
            break
        outs = generator.generate([t.prompt_ids + t.ids for t in active], [turn_budget(t, s) for t in active])
        requests = [(t, take_turn(t, o.ids, o.logprobs, tokenizer.decode(o.ids), turn == s.max_turns, s)) for t, o in zip(active, outs)]
        searches = [(t, r) for t, r in requests if r is not None and r[0] == "search"]
        results = env.retrieve([r[1] for _, r in searches], s.topk) if searches else []
        for (t, r), hits in zip(searches, results):
            observe(t, r, hits, tokenizer, s, cut)
        for t, r in requests:
            if r is not None and r[0] == "invalid":
                observe(t, r, None, tokenizer, s, cut)
    message = truncation_warning(cut, s.max_obs_length)
    if message:
        warn(message)
    return trajs
