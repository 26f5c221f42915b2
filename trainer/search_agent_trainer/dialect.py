"""What a dialect is (DESIGN §4.1): how the model acts and how the environment answers, the vocabulary rollout.py's
loop and each dialect share — Search-R1's tags (rollout.py `SearchR1`) and chat-template tool calls (toolcall.py
`ToolCall`). A generated turn's text is read as an `Action` (calls to answer, an answer, or an invalid turn's
feedback); the environment's answer to it is written as `Spans` (token ids, role, text), so every token's role is
known from the start.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .generation import Stops

# A final answer in either dialect (its content: group 1); the tool-call dialect answers with the same tags.
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class Call:
    """One call of a turn, answered by the environment: a search (`query`) or an invalid call (`error`, the
    environment's reply: role `feedback`)."""

    query: str | None = None
    error: str | None = None


@dataclass
class Action:
    """What a generated turn asks of the environment (`Dialect.parse`)."""

    calls: list[Call] = field(default_factory=list)  # answered in order, in one observation
    answer: bool = False  # the turn gives an answer: the trajectory ends unless it also calls
    valid: bool = False  # a valid action (a valid search call, or an answer): env/number_of_valid_action
    feedback: str | None = None  # a turn that neither calls nor answers: the environment's message (role feedback)

    @property
    def queries(self) -> list[str]:
        return [c.query for c in self.calls if c.query is not None]


# An observation, piece by piece: (token ids, role, text), in order.
Spans = list[tuple[list[int], str, str]]


class Dialect(Protocol):
    """How the model acts and how the environment answers (Search-R1's tags, or tool calls)."""

    name: str
    strict: (
        bool  # actions read strictly (rollout.strict_actions; Search-R1 tags only): trajectories carry it to /reward
    )

    def stops(self, tokenizer: Any) -> Stops: ...

    def prompt(self, tokenizer: Any, user_text: str, use_chat_template: bool) -> str:
        """The prompt as fed, for a user message (`data.prompt_template` with the question in it)."""
        ...

    def text(self, tokenizer: Any, ids: Sequence[int]) -> str:
        """Response tokens as the record's text."""
        ...

    def parse(self, text: str) -> Action:
        """A generated turn's action, from its text."""
        ...

    def observation(
        self,
        tokenizer: Any,
        response_ids: Sequence[int],
        replies: list[tuple[str, str]],
        feedback: str | None,
        max_obs_length: int,
        cut: dict[str, int],
    ) -> Spans:
        """The environment's answer to a turn (whose response so far is `response_ids`): `replies` are (role, text) per
        call (`retrieved`: the passages as `passages_to_string` writes them; `feedback`: an invalid call's error),
        `feedback` the message for a turn that called nothing. Observations longer than `max_obs_length` tokens are
        cut (counted in `cut`)."""
        ...
