"""The search tool's declaration, one for every engine: the builtin and TRL tool-call rollouts (toolcall.py) and veRL's
tool agent loop (engines/verl) put this in the chat template's tool list, so a model sees the same prompt whichever
engine trains it. No import beyond the standard library: veRL's launch side reads it too."""

from __future__ import annotations

from typing import Any


def search_tool_schema(name: str = "search") -> dict[str, Any]:
    """The search tool as the chat templates declare tools (OpenAI's function format): one string argument, `query`;
    `name` is the run config's rollout.search_tool."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "Searches the document collection and returns the most relevant passages.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to search for."}},
                "required": ["query"],
            },
        },
    }
