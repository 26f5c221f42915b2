"""The tool-call dialect (DESIGN §4.1; docs/trajectory-format.md, "Chat-template layouts"): a search agent acting
through its chat template's tool calls, as veRL's tool agent loop and TRL's GRPOTrainer with `tools` run one. A
`Dialect` (dialect.py) of rollout.py's loop: the multi-turn loop is the same, only these rules differ.

- **Prompt**: the model's own chat template with the search tool's JSON schema,
  `apply_chat_template([{"role": "user", …}], tools=[search_tool_schema(name)], add_generation_prompt=True)`.
- **Turn**: generated up to the model's end of turn (an end-of-sequence id: `<|im_end|>` for Qwen), with no stop
  string, as veRL and TRL generate; so one turn may hold several calls (parallel calls: several searches).
- **Action**: each complete `<tool_call>…</tool_call>` of the turn is a call, read as the engines read one (`json.loads`
  of the body, then `name` and `arguments`): the search tool with a string `query` (or veRL's `query_list`, joined
  with `; `, as our TypeScript parser reads it) is a search; a body that is not JSON, another tool, or no query is an
  invalid call, answered by an error reply (`Error: …`, role `feedback`). A turn without a call ends the trajectory
  when it holds an `<answer>…</answer>` (the final answer is the last one); otherwise it is an invalid action,
  answered by `invalid_turn_message` in a user turn (role `feedback`).
- **Observation**: one tool turn answering the calls in order, written exactly as the template writes it after the
  model's end of turn. How the text is found is TRL's (`GRPOTrainer._get_tool_suffix_ids`): render `[user, assistant
  with the calls]` without, and `[user, assistant with the calls, *tool messages]` with the generation prompt, and take
  the second after as many end-of-turn markers as the first holds (counting, rather than cutting the first, works for
  templates that render the last assistant message differently from an earlier one, as Qwen3's does). The generated
  turns are never rendered back (Qwen3's template rewrites an assistant message's `<think>` whitespace): the tokens
  stay as sampled and only the tool turn is appended. A tool response's text is the passages as Search-R1 writes them
  (`Doc 1(Title: …) …` lines), each cut to `rollout.max_obs_length` tokens.
- **Tokens and roles**: the tool turn's text is encoded once; each token's role comes from where it starts (the offset
  mapping): inside a tool response's text `retrieved` (an error reply's `feedback`), anywhere else — the turn's
  markers, the `<tool_response>` tags, the next generation prompt — `prompt`. None of them is generated, so none is
  trained on (DESIGN §6). When a turn stopped without its end-of-turn token (its token budget ran out) the template's
  end-of-turn marker is written first, role `prompt`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .dialect import ANSWER_RE, Action, Call, Spans
from .generation import Stops
from .policy import END_OF_TURN
from .tool_schema import search_tool_schema  # noqa: F401 (toolcall's API: the tool list of the chat template)

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# What the template checks render as a tool response (found verbatim in the rendered turn, or the template is refused).
PROBE = "Doc 1(Title: probe) probe text"


def read_call(body: str, search_tool: str) -> Call:
    """A `<tool_call>` body as the engines read it: a search (`query`) or an invalid call (`error`: the reply)."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        return Call(error=f"Error: the tool call is not valid JSON ({e.msg} at character {e.pos}).")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return Call(error='Error: a tool call must be a JSON object with a string "name" and an "arguments" object.')
    name = value["name"]
    args = value["arguments"] if "arguments" in value else value.get("parameters")
    if not isinstance(args, dict):
        return Call(error=f'Error: the call of "{name}" needs an "arguments" object.')
    if name != search_tool:
        return Call(error=f'Error: unknown tool "{name}"; the only tool is "{search_tool}".')
    query, queries = args.get("query"), args.get("query_list")
    if isinstance(query, str):
        return Call(query=query.strip())
    if query is None and isinstance(queries, list) and queries and all(isinstance(q, str) for q in queries):
        return Call(query="; ".join(q.strip() for q in queries))
    return Call(error=f'Error: the call of "{name}" needs a string "query" argument.')


def invalid_turn_message(search_tool: str) -> str:
    """The environment's answer to a turn that neither calls a tool nor answers (Search-R1's invalid-action message,
    for tool calls)."""
    return (
        f"My previous action is invalid. If I want to search, I should call the {search_tool} tool between <tool_call> and "
        "</tool_call>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again."
    )


class ToolCall:
    """The tool-call dialect for a Hugging Face tokenizer (policy.Tokenizer) whose chat template supports tools. The
    template is checked when the dialect is made: it must declare the tool, end an assistant message with an
    end-of-turn token, and write a tool response's text as it is."""

    name = "toolcall"
    strict = False  # rollout.strict_actions reads Search-R1 tags; calls are JSON here

    def __init__(self, tokenizer: Any, search_tool: str = "search"):
        if getattr(tokenizer, "kind", None) != "hf":
            raise RuntimeError(
                'rollout.dialect "toolcall" needs a Hugging Face model (model.kind "hf") whose chat template supports tools; the built-in tiny policy has no chat template and speaks "searchr1" only'
            )
        if not getattr(tokenizer.impl, "chat_template", None):
            raise RuntimeError(
                'rollout.dialect "toolcall": the model\'s tokenizer has no chat template (the prompt and the tool turns are written with it); use a chat model or rollout.dialect "searchr1"'
            )
        self.tok = tokenizer
        self.search_tool = search_tool
        self.tools = [search_tool_schema(search_tool)]
        self.eot = self._end_of_turn()
        self.eot_id = tokenizer.impl.convert_tokens_to_ids(self.eot)
        if search_tool not in self.prompt(tokenizer, "probe", True):
            raise RuntimeError(
                f'rollout.dialect "toolcall": the chat template ignores tools= (the search tool "{search_tool}" is not in the prompt it writes); use a template that supports tools'
            )
        self.tool_turn([{"role": "tool", "name": search_tool, "content": PROBE}], ["retrieved"])

    def _render(
        self, messages: list[dict[str, Any]], generation_prompt: bool, tools: list[dict[str, Any]] | None = None
    ) -> str:
        return self.tok.impl.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _end_of_turn(self) -> str:
        """The end-of-turn marker the template closes an assistant message with (the one of END_OF_TURN that comes
        last in a rendered conversation); generation stops there (policy.Tokenizer's eos_ids hold it)."""
        text = self._render([{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}], False)
        vocab = self.tok.impl.get_vocab()
        found = [(text.rfind(m), m) for m in END_OF_TURN if m in vocab and m in text]
        if not found:
            raise RuntimeError(
                f'rollout.dialect "toolcall": the chat template closes an assistant message with none of {", ".join(END_OF_TURN)}'
            )
        return max(found)[1]

    # -- the Dialect ---------------------------------------------------------------------------------------------
    def stops(self, tokenizer: Any) -> Stops:
        return Stops(tokenizer, ())

    def prompt(self, tokenizer: Any, user_text: str, use_chat_template: bool) -> str:
        return self._render([{"role": "user", "content": user_text}], True, self.tools)

    def text(self, tokenizer: Any, ids: Sequence[int]) -> str:
        return tokenizer.decode(ids, keep_special=True)

    def parse(self, text: str) -> Action:
        calls = [read_call(m.group(1), self.search_tool) for m in TOOL_CALL_RE.finditer(text)]
        answer = ANSWER_RE.search(TOOL_CALL_RE.sub("", text)) is not None
        valid = answer or any(c.query is not None for c in calls)
        return Action(calls, answer, valid, None if calls or answer else invalid_turn_message(self.search_tool))

    def observation(
        self,
        tokenizer: Any,
        response_ids: Sequence[int],
        replies: list[tuple[str, str]],
        feedback: str | None,
        max_obs_length: int,
        cut: dict[str, int],
    ) -> Spans:
        if replies:
            messages = [
                {"role": "tool", "name": self.search_tool, "content": self._fit(text.strip(), max_obs_length, cut)}
                for _role, text in replies
            ]
            roles = [role for role, _text in replies]
        else:
            messages, roles = (
                [{"role": "user", "content": self._fit(feedback or "", max_obs_length, cut)}],
                ["feedback"],
            )
        text, marks = self.tool_turn(messages, roles)
        if not response_ids or response_ids[-1] != self.eot_id:  # the turn was cut before its end of turn: close it
            text = self.eot + text
            marks = [(a + len(self.eot), b + len(self.eot), role) for a, b, role in marks]
        return self._spans(text, marks)

    # -- the tool turn -------------------------------------------------------------------------------------------
    def tool_turn(self, messages: list[dict[str, Any]], roles: Sequence[str]) -> tuple[str, list[tuple[int, int, str]]]:
        """The text the template writes after an assistant message's end of turn for `messages` (tool messages, or
        one user message), up to and including the next generation prompt; and where each message's content is in
        it, with its role."""
        calls = [
            {"type": "function", "function": {"name": m.get("name", self.search_tool), "arguments": {}}}
            for m in messages
            if m["role"] == "tool"
        ]
        head: list[dict[str, Any]] = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": "", **({"tool_calls": calls} if calls else {})},
        ]
        k = self._render(head, False).count(self.eot)
        full = self._render(head + messages, True)
        at = -len(self.eot)
        for _ in range(k):
            at = full.find(self.eot, at + len(self.eot))
            if at < 0:
                raise RuntimeError(
                    f'rollout.dialect "toolcall": the chat template renders an earlier turn differently once a tool turn follows (fewer {self.eot} markers)'
                )
        text = full[at + len(self.eot) :] if k else full
        marks, pos = [], 0
        for m, role in zip(messages, roles):
            i = text.find(m["content"], pos)
            if i < 0:
                raise RuntimeError(
                    f"rollout.dialect \"toolcall\": the chat template does not write a {m['role']} message's content as it is, so its tokens cannot be told from the template's"
                )
            marks.append((i, i + len(m["content"]), role))
            pos = i + len(m["content"])
        return text, marks

    def _fit(self, content: str, max_obs_length: int, cut: dict[str, int]) -> str:
        """`content`, cut to `max_obs_length` tokens (counted in `cut`)."""
        ids = self.tok.encode(content)
        if len(ids) <= max_obs_length:
            return content
        cut["truncated"] += 1
        cut["longest"] = max(cut["longest"], len(ids))
        return self.tok.decode(ids[:max_obs_length], keep_special=True)

    def _spans(self, text: str, marks: list[tuple[int, int, str]]) -> Spans:
        """`text` encoded once, cut into runs of tokens of one role: a token's role is that of the message content it
        starts in, else `prompt`."""
        ids, starts = self.tok.encode_offsets(text)
        roles = [next((role for a, b, role in marks if a <= s < b), "prompt") for s in starts]
        runs: list[tuple[int, int]] = []  # token index ranges
        for i in range(len(ids)):
            if i and roles[i] == roles[i - 1]:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        bounds = [0] + [starts[a] for a, _b in runs[1:]] + [len(text)]
        if any(x > y for x, y in zip(bounds, bounds[1:])):  # offsets out of order: each run's text decoded instead
            return [(ids[a:b], roles[a], self.tok.decode(ids[a:b], keep_special=True)) for a, b in runs]
        return [(ids[a:b], roles[a], text[bounds[j] : bounds[j + 1]]) for j, (a, b) in enumerate(runs)]
