"""Multi-turn rollouts, as Search-R1's generation loop (`search_r1/llm_agent/generation.py`) does them, with every
token's role tracked from the start (never reconstructed by re-tokenising text).

This loop is the protocol, and the only implementation of it: every engine and the policy server call `run_rollouts`
with a `TurnGenerator` (generation.py's `LMGenerator` over the policy, or a stand-in); the generator never sees the
protocol except through its `Stops`. `turn_budget`, `take_turn` and `observe` are the protocol for one trajectory (an
engine that rolls out one trajectory at a time calls them); `run_rollouts` batches them.

How the model acts is a **dialect** (`run_rollouts(..., dialect=...)`, DESIGN §4.1; dialect.py): Search-R1's tags
(`SearchR1`, the default, below) or chat-template tool calls (`toolcall.ToolCall`). A dialect says when a turn stops, what a turn's
text asks for (`Action`: calls to answer, an answer, or an invalid turn's feedback) and how the environment's answer
is written and tokenised; the loop is the same.

One trajectory: the prompt, then turns. A turn is generated (batched over every active trajectory of a wave, see
`RolloutSettings.wave_size`) until the dialect's stop (Search-R1: `</search>`, `</answer>` or an end-of-sequence
token, `search_r1_stops`), the per-turn token budget or the response budget. Search-R1's action is the first
`<(search|answer)>(.*?)</\\1>` of the turn's text:
- answer: the trajectory is done (`finish: answer`);
- search: the query goes to `/retrieve` (one batched request for the whole turn, every trajectory and every call)
  and the observation `\\n\\n<information>{Doc 1(Title: …) …}</information>\\n\\n` is appended, role `retrieved`;
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
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .data import Example
from .dialect import Action, Call, Dialect, Spans
from .env_client import EnvClient, passages_to_string
from .generation import Stops, TurnGenerator
from .toolcall import ToolCall

ACTION_RE = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
INVALID_ACTION_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
STOP_STRINGS = ("</search>", "</answer>")
# The protocol's own texts for the built-in tiny tokenizer's vocabulary (beside the data's): the invalid-action
# message and the pieces of an observation. Kept byte for byte as first written — the vocabulary's order, and with it
# every seeded tiny run and documented demo number, depends on this text, not on `information()`'s whitespace.
VOCABULARY_TEXTS = (INVALID_ACTION_FEEDBACK, "Doc 1(Title: ) \n<information></information>")
DIALECTS = ("searchr1", "toolcall")
# The version of a trajectory's `spans` (Trajectory.spans; docs/run-format.md).
SPANS_VERSION = 1


def search_r1_stops(tokenizer: Any) -> Stops:
    """The stop condition of a Search-R1 turn: `</search>`, `</answer>` or an end-of-sequence token."""
    return Stops(tokenizer, STOP_STRINGS)


def information(passages: str) -> str:
    """Search-R1's observation: the passages' text between <information> tags, set apart by blank lines."""
    return f"\n\n<information>{passages.strip()}</information>\n\n"


def observation(hits: list[dict[str, Any]]) -> str:
    """Search-R1's observation for a search's hits (what the dialect writes, and the warm start copies)."""
    return information(passages_to_string(hits))


def search_action(query: str) -> str:
    """A Search-R1 search as the policy writes it (what `turn_action` reads back as ("search", query))."""
    return f"<search> {query} </search>"


def answer_action(answer: str) -> str:
    """A Search-R1 final answer as the policy writes it (what `turn_action` reads back as ("answer", answer))."""
    return f"<answer> {answer} </answer>"


def turn_action(text: str) -> tuple[str | None, str]:
    """Search-R1's `postprocess_predictions`: (search|answer|None, the stripped content)."""
    m = ACTION_RE.search(text)
    return (m.group(1), m.group(2).strip()) if m else (None, "")


ACTION_OPEN_RE = re.compile(r"<(search|answer)>")


def strict_turn_action(text: str) -> tuple[str | None, str]:
    """`rollout.strict_actions`: the first `<search>` or `<answer>` the turn opens is its action, and it must close
    before another of the two opens; else (None, ""). `turn_action` reads `<search> X <answer> Y </answer>` as the
    answer Y (its regex skips the unclosed search); this reads a search that never closed. The reward reads answers
    the same way (src/core/tags/searchr1.ts, `strictAction`; test/fixtures/tags/strict-actions.json holds both)."""
    m = ACTION_OPEN_RE.search(text)
    if not m:
        return None, ""
    close = text.find(f"</{m.group(1)}>", m.end())
    if close < 0:
        return None, ""
    body = text[m.end() : close]
    if ACTION_OPEN_RE.search(body):
        return None, ""
    return m.group(1), body.strip()


class SearchR1:
    """Search-R1's dialect: the first `<search>`/`<answer>` of a turn acts; the observation is an `<information>`
    block (or the invalid-action message), tokenised as one piece after the generated tokens. `strict`
    (`rollout.strict_actions`): actions read by `strict_turn_action` instead of Search-R1's regex."""

    name = "searchr1"

    def __init__(self, strict: bool = False):
        self.strict = strict

    def stops(self, tokenizer: Any) -> Stops:
        return search_r1_stops(tokenizer)

    def prompt(self, tokenizer: Any, user_text: str, use_chat_template: bool) -> str:
        return tokenizer.prompt(user_text, use_chat_template)

    def text(self, tokenizer: Any, ids: Sequence[int]) -> str:
        return tokenizer.decode(ids)

    def parse(self, text: str) -> Action:
        action, content = (strict_turn_action if self.strict else turn_action)(text)
        if action == "answer":
            return Action(answer=True, valid=True)
        if action == "search":
            return Action([Call(query=content)], valid=True)
        return Action(feedback=INVALID_ACTION_FEEDBACK)

    def observation(
        self,
        tokenizer: Any,
        response_ids: Sequence[int],
        replies: list[tuple[str, str]],
        feedback: str | None,
        max_obs_length: int,
        cut: dict[str, int],
    ) -> Spans:
        role, text = replies[0] if replies else ("feedback", feedback or "")
        if role == "retrieved":
            text = information(text)
        ids = tokenizer.encode(text)
        if len(ids) > max_obs_length:
            cut["truncated"] += 1
            cut["longest"] = max(cut["longest"], len(ids))
            ids = ids[:max_obs_length]
            text = tokenizer.decode(ids)
        return [(ids, role, text)]


SEARCH_R1 = SearchR1()


def make_dialect(name: str, tokenizer: Any, search_tool: str = "search", strict_actions: bool = False) -> Dialect:
    """The dialect `rollout.dialect` names, for this tokenizer (`toolcall` checks the tokenizer's chat template;
    `strict_actions`: Search-R1's tags read strictly)."""
    if name == "searchr1":
        return SearchR1(strict=True) if strict_actions else SEARCH_R1
    if name == "toolcall":
        return ToolCall(tokenizer, search_tool)
    raise ValueError(f"rollout.dialect: expected one of {', '.join(DIALECTS)}, got {name!r}")


@dataclass
class Trajectory:
    example: Example
    group: int
    sample: int
    prompt: str
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # the response's tokens
    roles: list[str] = field(default_factory=list)  # generated | prompt | retrieved | feedback, one per response token
    pieces: list[str] = field(default_factory=list)  # the response's text, piece by piece
    sample_logprobs: list[float | None] = field(default_factory=list)
    piece_roles: list[str] = field(default_factory=list)  # who wrote each piece (the role of its tokens)
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
    dialect: str = "searchr1"
    strict_actions: bool = False  # its actions were read strictly (rollout.strict_actions): its reward reads them so

    @property
    def done(self) -> bool:
        return self.finish is not None

    @property
    def response(self) -> str:
        return "".join(self.pieces)

    @property
    def spans(self) -> dict[str, Any] | None:
        """Who wrote each part of `response` (the record's and the `/reward` item's `spans`, version 1): runs of
        [role, length in code points] tiling it — the environment knows where each observation starts and ends, so a
        reward never reads tags inside a document as the policy's (src/core/tags/spans.ts). None when a piece has no
        role (a response set as one text)."""
        if len(self.piece_roles) != len(self.pieces):
            return None
        runs: list[list[Any]] = []
        for role, text in zip(self.piece_roles, self.pieces):
            if not text:
                continue
            if runs and runs[-1][0] == role:
                runs[-1][1] += len(text)
            else:
                runs.append([role, len(text)])
        return {"v": SPANS_VERSION, "runs": runs}

    def append(self, ids: Sequence[int], role: str, text: str, logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.roles.extend([role] * len(ids))
        self.pieces.append(text)
        self.piece_roles.append(role)
        self.sample_logprobs.extend(logprobs if logprobs is not None else [None] * len(ids))


def role_runs(roles: Sequence[str]) -> list[tuple[int, int]]:
    """The [start, end) index ranges of consecutive tokens of one role."""
    runs: list[tuple[int, int]] = []
    for i, role in enumerate(roles):
        if i and role == roles[i - 1]:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


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

    @classmethod
    def of(cls, cfg: Any, wave_size: int | None = None) -> RolloutSettings:
        """A run config's settings (`rollout.*`, `retriever.topk`): the one mapping every trainer uses."""
        r = cfg.rollout
        return cls(
            r.max_turns, r.max_turn_tokens, r.max_response_length, r.max_obs_length, cfg.retriever.topk, wave_size
        )


def retrieval_entry(query: str, hits: list[dict[str, Any]]) -> dict[str, Any]:
    """A search as the records keep it (`meta.retrieval`): the query, its hits' ids and retrieval scores."""
    return {
        "query": query,
        "hits": [{"id": str(h.get("document", {}).get("id", "")), "score": h.get("score")} for h in hits],
    }


def turn_budget(t: Trajectory, s: RolloutSettings) -> int:
    """New tokens the trajectory's next turn may generate: the per-turn budget, within the response budget."""
    return min(s.max_turn_tokens, s.max_response_length - len(t.ids))


def take_turn(
    t: Trajectory,
    ids: Sequence[int],
    logprobs: Sequence[float] | None,
    final: bool,
    tokenizer: Any,
    s: RolloutSettings,
    dialect: Dialect = SEARCH_R1,
) -> Action | None:
    """Appends a generated turn (its tokens as sampled) and reads its action in the dialect. Returns what the
    environment must answer, or None when the trajectory is done: it answered without calling, this was its forced
    final turn (`answer` if it answered, else `max_turns`), or its response budget is spent (`length`)."""
    text = dialect.text(tokenizer, ids)
    t.append(ids, "generated", text, logprobs)
    t.turns += 1
    action = dialect.parse(text)
    if action.valid:
        t.valid_actions += 1
    if action.answer and (final or not action.calls):
        t.finish = "answer"
    elif final:
        t.finish = "max_turns"
    elif len(t.ids) >= s.max_response_length:
        t.finish = "length"
    else:
        return action
    return None


def observe(
    t: Trajectory,
    action: Action,
    hits: Sequence[list[dict[str, Any]]],
    tokenizer: Any,
    s: RolloutSettings,
    cut: dict[str, int],
    dialect: Dialect = SEARCH_R1,
) -> None:
    """Appends the environment's answer to `action` (from take_turn), given the hits of each of its searches in order:
    the passages (role `retrieved`; queries and hits go to `t.retrieval`), invalid calls' errors and an invalid
    turn's message (role `feedback`), and in the tool-call dialect the chat template's markers around them (role
    `prompt`), tokenised as the dialect writes them, observations cut to `max_obs_length` tokens (counted in `cut`)
    and the whole cut to the response budget (then `finish: length`)."""
    replies: list[tuple[str, str]] = []
    found = iter(hits)
    for c in action.calls:
        if c.query is None:
            replies.append(("feedback", c.error or ""))
            continue
        h = next(found)
        t.retrieval.append(retrieval_entry(c.query, h))
        t.searches += 1
        replies.append(("retrieved", passages_to_string(h)))
    room = s.max_response_length - len(t.ids)
    for ids, role, text in dialect.observation(tokenizer, t.ids, replies, action.feedback, s.max_obs_length, cut):
        if len(ids) >= room:
            if len(ids) > room:
                ids = ids[:room]
                text = dialect.text(tokenizer, ids)
            t.append(ids, role, text)
            t.finish = "length"
            return
        t.append(ids, role, text)
        room -= len(ids)


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
    dialect: Dialect = SEARCH_R1,
) -> list[Trajectory]:
    """n trajectories per example (a GRPO group each); `prompts[i]` is example i's prompt text and token ids (rendered
    by `dialect.prompt`). The generator must stop turns at `dialect.stops(tokenizer)`. The trajectories go through
    their turns in waves of `s.wave_size`; the generator is called once per wave and turn with every active trajectory
    of the wave (keyed by its index, so it may keep their caches between turns) and released after each wave. The
    protocol itself is `play`, per trajectory."""
    trajs = [
        Trajectory(ex, g, k, prompts[g][0], list(prompts[g][1]), dialect=dialect.name, strict_actions=dialect.strict)
        for g, ex in enumerate(examples)
        for k in range(n)
    ]
    return play_all(trajs, generator, tokenizer, env, s, warn, dialect)


def play_all(
    trajs: list[Trajectory],
    generator: TurnGenerator,
    tokenizer: Any,
    env: EnvClient,
    s: RolloutSettings,
    warn: Callable[[str], None] = lambda _m: None,
    dialect: Dialect = SEARCH_R1,
) -> list[Trajectory]:
    """Plays `trajs` to their end, in waves of `s.wave_size`: fresh ones (run_rollouts) or ones started from a
    recorded prefix (fork.py: the prompt and the turns before the fork, `turns` set to their number)."""
    size = s.wave_size or len(trajs)
    cut = {"truncated": 0, "longest": 0}
    for lo in range(0, len(trajs), size):
        try:
            _run_wave(trajs, range(lo, min(lo + size, len(trajs))), generator, tokenizer, env, s, cut, dialect)
        finally:
            generator.release()
    message = truncation_warning(cut, s.max_obs_length)
    if message:
        warn(message)
    return trajs


@dataclass
class Generate:
    """The protocol asks for a turn: generate at most `budget` tokens after `context` (prompt + response so far);
    it is sent back (token ids as sampled, their log-probs or None)."""

    context: list[int]
    budget: int
    turn: int


@dataclass
class Retrieve:
    """The protocol asks for the hits of `queries` (one list per query, in order); they are sent back."""

    queries: list[str]


def play(
    t: Trajectory, tokenizer: Any, s: RolloutSettings, cut: dict[str, int], dialect: Dialect = SEARCH_R1
) -> Generator[Generate | Retrieve, Any, None]:
    """The multi-turn protocol of one trajectory, as a coroutine its driver feeds: it yields a Generate or a Retrieve
    request and is sent the answer, until the trajectory is done. run_rollouts drives many in lockstep (one batched
    generation and one /retrieve a turn); an engine that rolls out one trajectory at a time (veRL's agent loop) drives
    one with its own server calls. Turns 0..max_turns; the last is the forced final turn. A trajectory that already
    has turns (a recorded prefix, fork.py) goes on from its next one."""
    for turn in range(t.turns, s.max_turns + 1):
        if t.done:
            return
        ids, logprobs = yield Generate(t.prompt_ids + t.ids, turn_budget(t, s), turn)
        action = take_turn(t, ids, logprobs, turn == s.max_turns, tokenizer, s, dialect)
        if action is None:
            return
        hits = (yield Retrieve(action.queries)) if action.queries else []
        observe(t, action, hits, tokenizer, s, cut, dialect)


def _send(p: Generator[Generate | Retrieve, Any, None], value: Any) -> Generate | Retrieve | None:
    """The protocol's next request after `value`, or None when its trajectory is done."""
    try:
        return p.send(value)
    except StopIteration:
        return None


def _run_wave(
    trajs: list[Trajectory],
    wave: range,
    generator: TurnGenerator,
    tokenizer: Any,
    env: EnvClient,
    s: RolloutSettings,
    cut: dict[str, int],
    dialect: Dialect,
) -> None:
    """The wave's trajectories in lockstep: each turn one generator call for every active one, then one /retrieve
    for every query they made, in trajectory order."""
    plays = {i: play(trajs[i], tokenizer, s, cut, dialect) for i in wave}
    requests: dict[int, Generate | Retrieve | None] = {i: _send(p, None) for i, p in plays.items()}
    while True:
        active = [i for i, r in requests.items() if isinstance(r, Generate)]
        if not active:
            break
        outs = generator.generate([requests[i].context for i in active], [requests[i].budget for i in active], active)  # type: ignore[union-attr]
        requests = {i: _send(plays[i], (o.ids, o.logprobs)) for i, o in zip(active, outs)}
        searching = [i for i, r in requests.items() if isinstance(r, Retrieve)]
        queries = [q for i in searching for q in requests[i].queries]  # type: ignore[union-attr]
        results = iter(env.retrieve(queries, s.topk) if queries else [])
        for i in searching:
            requests[i] = _send(plays[i], [next(results) for _ in requests[i].queries])  # type: ignore[union-attr]
