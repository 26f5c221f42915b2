"""`search(query)` for veRL's tool agent loop (the tool-call dialect, docs/trajectory-format.md): a `BaseTool`
(verl/tools/base_tool.py, 0.9.1) over our env server's `/retrieve`.

veRL loads native tools from `rollout.multi_turn.tool_config_path`, a YAML list of `{class_name, config: {type:
native, …}, tool_schema?}`; it builds each tool once per agent-loop worker and calls `execute(instance_id,
parameters, agent_data=…)` per call, which returns `(ToolResponse(text=…), step_reward, metrics)`. The chat template
renders the reply inside `<tool_response>…</tool_response>`. Our reply is the passages as Search-R1 writes them
(`Doc {i}(Title: {title}) {text}` lines), so the replay shows document cards and rewards read them like
`<information>` blocks. The query and hits also go to the trajectory's `extra_fields["sas_retrieval"]`. Concurrent
calls of a worker share one `/retrieve` request (batching.py).
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from ...env_client import EnvError, passages_to_string
from ...rollout import retrieval_entry
from . import search_tool_schema
from .agent_loop import env_url_of
from .batching import env_batchers

SEARCH_TOOL_SCHEMA = search_tool_schema()


class SearchTool(BaseTool):
    """config: `env_url` (else $SAS_ENV_URL), `topk` (default 3); its name is the tool schema's (tools.yaml: the run
    config's rollout.search_tool, default search)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SEARCH_TOOL_SCHEMA))
        self.env_url = env_url_of(config.get("env_url"))
        self.topk = int(config.get("topk", 3))

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        query = parameters.get("query")
        if not isinstance(query, str) or not query.strip():
            return (
                ToolResponse(text=f"Error: {self.name} needs a non-empty string argument `query`."),
                0.0,
                {"error": "no query"},
            )
        try:
            # with the worker's other calls
            hits = (await env_batchers(self.env_url).retrieve([query.strip()], self.topk))[0]
        except EnvError as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {"error": str(e)}
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            agent_data.extra_fields.setdefault("sas_retrieval", []).append(retrieval_entry(query.strip(), hits))
        return ToolResponse(text=passages_to_string(hits).strip()), 0.0, {"hits": len(hits)}
