"""Our agent loops, registered in veRL (verl/experimental/agent_loop, 0.9.1).

veRL runs one `AgentLoopBase.run(sampling_params, **row)` coroutine per trajectory (an `AgentLoopWorker` gathers a
chunk of the batch), talking to the async vLLM/SGLang servers through `server_manager.generate(request_id,
prompt_ids=…, sampling_params=…) -> TokenOutput(token_ids, log_probs)`. A loop returns `AgentLoopOutput`: the prompt
ids, the response ids (generated and environment tokens), `response_mask` (1 where veRL trains), the response
log-probs at sampling time, and `extra_fields`, which become columns of the batch (`non_tensor_batch`) and reach the
reward function as `extra_info` entries. The worker pads everything to `rollout.prompt_length` /
`rollout.response_length`.

- `search_r1_agent` (SearchR1AgentLoop): Search-R1's protocol — tags, `</search>`/`</answer>` stops, the observation
  format, the invalid-action feedback, max turns and the forced final turn — played by rollout.py's `play` (the
  builtin trainer's protocol coroutine, fed one trajectory at a time here). Token ids are kept as the server generated
  them; observations are tokenised once and appended. Roles per response token go to `extra_fields["sas"]`. A turn's
  search goes out with the worker's other trajectories' searches as one `/retrieve` request (batching.py), as
  Search-R1 sends a turn's queries together.
- `sas_tool_agent` (SearchToolAgentLoop): veRL's own ToolAgentLoop (the tool-call dialect, with tool.py's
  `SearchTool`), plus the per-token roles it does not keep: generated (mask 1), the tool turns' template tokens
  (`prompt`), and their tool results (`retrieved`, or `feedback` for an error reply).

Settings come from the agent-loop config file veRL loads (`rollout.agent.agent_loop_config_path`, written by
overrides.py): each entry's keys besides `name` and `_target_` are constructor arguments here.
"""

from __future__ import annotations

import os
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentState, ToolAgentLoop
from verl.utils.rollout_trace import rollout_trace_op

from ...policy import Tokenizer
from ...rollout import STOP_STRINGS, Generate, RolloutSettings, Trajectory, make_dialect, play, role_runs, turn_action
from . import ENV_URL_VAR, SEARCH_R1_AGENT, TOOL_AGENT
from .batching import env_batchers
from .dataset import example_of

_TOKENIZERS: dict[int, Tokenizer] = {}


def our_tokenizer(hf_tokenizer: Any) -> Tokenizer:
    """policy.Tokenizer over veRL's tokenizer (encode without special tokens, decode without them, the end-of-turn
    ids), once per worker: veRL instantiates an agent loop per trajectory."""
    tok = _TOKENIZERS.get(id(hf_tokenizer))
    if tok is None or tok.impl is not hf_tokenizer:
        tok = _TOKENIZERS[id(hf_tokenizer)] = Tokenizer(hf_tokenizer, "hf")
    return tok


def env_url_of(env_url: str | None) -> str:
    url = env_url or os.environ.get(ENV_URL_VAR)
    if not url:
        raise ValueError(
            f"no env server URL: set env_url in the agent loop / tool config, or the {ENV_URL_VAR} environment variable"
        )
    return url


@register(SEARCH_R1_AGENT)
class SearchR1AgentLoop(AgentLoopBase):
    """Search-R1's multi-turn protocol on veRL's LLM servers, with rollout.py's per-trajectory steps."""

    def __init__(
        self,
        *args: Any,
        env_url: str | None = None,
        max_turns: int = 4,
        max_turn_tokens: int = 500,
        max_obs_length: int = 500,
        topk: int = 3,
        chat_template: bool = True,
        loss_masking: bool = True,
        strict_actions: bool = False,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.env_url = env_url_of(env_url)
        self.tok = our_tokenizer(self.tokenizer)
        self.settings = RolloutSettings(
            int(max_turns),
            int(max_turn_tokens),
            int(self.rollout_config.response_length),
            int(max_obs_length),
            int(topk),
        )
        self.chat_template = bool(chat_template)
        self.loss_masking = bool(loss_masking)
        self.dialect = make_dialect("searchr1", self.tok, strict_actions=bool(strict_actions))

    async def _prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt as the builtin trainer feeds it: the chat template applied by veRL's own builder (so ids match
        veRL's other loops, its `apply_chat_template_kwargs` included), or the user text as is."""
        if self.chat_template:
            return await self.ct_build_initial_tokens(messages)
        return self._cap_text_prompt_length(self.tok.encode(str(messages[-1]["content"])))

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        s = self.settings
        prompt_ids = await self._prompt_ids(list(kwargs["raw_prompt"]))
        t = Trajectory(
            example_of(kwargs),
            0,
            0,
            self.tokenizer.decode(prompt_ids, skip_special_tokens=False),
            list(prompt_ids),
            strict_actions=self.dialect.strict,
        )
        # Stop where the builtin trainer's generator stops: `</search>`, `</answer>` (strings: vLLM forces a tokenizer
        # on, SGLang needs rollout.skip_tokenizer_init false) or an end-of-turn token.
        params = {**sampling_params, "stop": list(STOP_STRINGS), "stop_token_ids": sorted(self.tok.eos_ids)}
        request_id = uuid4().hex  # one id per trajectory: its turns go to the same server (prefix cache)
        metrics: dict[str, float] = {"generate_sequences": 0.0, "tool_calls": 0.0}
        cut = {"truncated": 0, "longest": 0}
        # rollout.py's protocol, one trajectory, fed by veRL's server calls
        protocol = play(t, self.tok, s, cut, self.dialect)
        request = next(protocol)
        while True:
            t0 = time.perf_counter()
            if isinstance(request, Generate):
                out = await self.server_manager.generate(
                    request_id,
                    prompt_ids=request.context,
                    sampling_params={**params, "max_tokens": request.budget},
                    priority=int(priority),
                )
                metrics["generate_sequences"] += time.perf_counter() - t0
                if out.stop_reason == "aborted":
                    raise RuntimeError(
                        f"the rollout server aborted the generation of turn {request.turn + 1} (trajectory {t.example.id})"
                    )
                ids = list(out.token_ids[: request.budget])
                reply: Any = (ids, list(out.log_probs[: len(ids)]) if out.log_probs else None)
            else:
                # with the worker's other trajectories' queries
                reply = await env_batchers(self.env_url).retrieve(request.queries, s.topk)
                metrics["tool_calls"] += time.perf_counter() - t0
            try:
                request = protocol.send(reply)
            except StopIteration:
                break
        mask = [1 if role == "generated" or not self.loss_masking else 0 for role in t.roles]
        return AgentLoopOutput(
            prompt_ids=t.prompt_ids,
            response_ids=t.ids,
            response_mask=mask,
            response_logprobs=[0.0 if x is None else float(x) for x in t.sample_logprobs]
            if params.get("logprobs")
            else None,
            num_turns=1 + len(t.pieces),
            metrics=metrics,
            extra_fields={"sas": rollout_fields(t, "searchr1", cut), "turn_scores": [], "tool_rewards": []},
        )


def rollout_fields(t: Trajectory, dialect: str, cut: dict[str, int] | None = None) -> dict[str, Any]:
    """What our records need that veRL's batch does not carry (`extra_fields["sas"]`, one per trajectory)."""
    return {
        "dialect": dialect,
        **({"strict_actions": True} if t.strict_actions else {}),
        "roles": list(t.roles),
        "prompt": t.prompt,
        "response": t.response,
        **({"spans": t.spans} if t.spans else {}),
        "finish": t.finish,
        "turns": t.turns,
        "searches": t.searches,
        "valid_actions": t.valid_actions,
        "retrieval": t.retrieval,
        "obs_truncated": (cut or {}).get("truncated", 0),
        "obs_longest": (cut or {}).get("longest", 0),
    }


# -- the tool-call dialect ---------------------------------------------------------------------------------------
# What veRL's ToolAgentLoop (0.9.1) writes as a tool's reply when the call itself fails; our SearchTool's own error
# reply starts with "Error:". These tool results are `feedback`, not `retrieved`.
TOOL_ERROR_PREFIXES = ("Unknown function", "Invalid JSON in arguments", "Error executing tool", "Error:")


def segment_roles(tokenizer: Any, ids: list[int], replies: list[str]) -> list[str]:
    """Roles of an environment turn's tokens (all mask 0): the tokens inside each tool reply's text are `retrieved`
    (`feedback` for an error reply), the chat template's markers around them `prompt`. Character offsets come from
    decoding growing prefixes, so a token split across a reply's edge counts as inside."""
    ends = [len(tokenizer.decode(ids[: k + 1], skip_special_tokens=False)) for k in range(len(ids))]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    roles = ["prompt"] * len(ids)
    at = 0
    for reply in replies:
        body = reply.strip()
        if not body:
            continue
        start = text.find(body, at)
        if start < 0:
            continue
        end = at = start + len(body)
        role = "feedback" if body.startswith(TOOL_ERROR_PREFIXES) else "retrieved"
        for k in range(len(ids)):
            lo = ends[k - 1] if k else 0
            if lo < end and ends[k] > start:
                roles[k] = role
    return roles


@register(TOOL_AGENT)
class SearchToolAgentLoop(ToolAgentLoop):
    """veRL's tool agent loop, unchanged, plus the roles of its tokens and our record fields."""

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        self._tool_turns: list[
            tuple[int, int, list[str]]
        ] = []  # an environment turn: (start, end) in the context, its replies
        self._turns = 0
        self._finish = "length"
        output = await super().run(sampling_params, priority=priority, **kwargs)
        P = len(output.prompt_ids)
        roles = ["generated" if m else "prompt" for m in output.response_mask]
        for start, end, replies in self._tool_turns:
            lo, hi = max(start - P, 0), min(end - P, len(roles))
            if lo < hi:
                roles[lo:hi] = segment_roles(self.tokenizer, list(output.response_ids[lo:hi]), replies)
        t = Trajectory(
            example_of(kwargs),
            0,
            0,
            self.tokenizer.decode(output.prompt_ids, skip_special_tokens=False),
            list(output.prompt_ids),
        )
        t.ids, t.roles, t.turns, t.finish = list(output.response_ids), roles, self._turns, self._finish
        # The response piece by piece, one per run of one role, so its spans say which text the environment wrote.
        for a, b in role_runs(roles):
            t.append([], roles[a], self.tokenizer.decode(output.response_ids[a:b], skip_special_tokens=False))
        t.retrieval = list(output.extra_fields.pop("sas_retrieval", None) or [])
        t.searches = len(t.retrieval)
        t.valid_actions = t.searches + (t.finish == "answer")
        output.extra_fields["sas"] = rollout_fields(t, "toolcall")
        return output

    async def _handle_generating_state(
        self, agent_data: Any, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        before = len(agent_data.prompt_ids)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        self._turns = agent_data.assistant_turns
        if state == AgentState.TERMINATED:
            # ToolAgentLoop's reasons to stop, in its order: the response budget, the turn limits, no tool call.
            if len(agent_data.response_mask) >= self.response_length:
                self._finish = "length"
            elif (self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns) or (
                self.max_user_turns and agent_data.user_turns >= self.max_user_turns
            ):
                self._finish = "max_turns"
            else:
                text = self.tokenizer.decode(agent_data.prompt_ids[before:], skip_special_tokens=True)
                self._finish = "answer" if turn_action(text)[0] == "answer" else "invalid"
        return state

    async def _handle_processing_tools_state(self, agent_data: Any) -> AgentState:
        old = list(agent_data.prompt_ids)
        n_messages = len(agent_data.messages)
        state = await super()._handle_processing_tools_state(agent_data)
        new = agent_data.prompt_ids
        start = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        replies = [
            m["content"] if isinstance(m["content"], str) else ""
            for m in agent_data.messages[n_messages:]
            if m.get("role") == "tool"
        ]
        if len(new) > start:
            self._tool_turns.append((start, len(new), replies))
        return state
