"""Our datasets as veRL's RL parquet, and back.

veRL's RLHFDataset (verl/utils/dataset/rl_dataset.py, 0.9.1) reads a parquet file with one row per prompt:
`data_source` (str; `data.reward_fn_key`), `prompt` (the chat messages, `data.prompt_key`; the agent loop applies
the chat template), `reward_model` (`{style, ground_truth}`, handed to the reward function), `extra_info` (a dict;
`index` becomes the row's `index`, `tools_kwargs` the tool agent loop's per-tool kwargs) and optionally
`agent_name` (which registered agent loop plays the row; else `rollout.agent.default_agent_loop`). Every column
reaches the agent loop's `run(**kwargs)` and the reward manager.

We write Search-R1's layout (`scripts/data_process/nq_search.py`): one user message holding the prompt template with
the question in it, `ability: fact-reasoning`, `reward_model: {style: rule, ground_truth: {target: [golden…]}}`,
and in `extra_info` what our records need back: the example's id, question, golden answers and data source, and
the dataset's `meta.hops`, `meta.kind` and `meta.bridge` where it says them (the held-out metrics by hops and kind).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...data import Example, meta_fields, render_prompt

ABILITY = "fact-reasoning"


def verl_rows(
    examples: Sequence[Example], prompt_template: str, split: str, agent_name: str | None = None
) -> list[dict[str, Any]]:
    """One veRL row per example, in Search-R1's layout."""
    rows = []
    for i, ex in enumerate(examples):
        row: dict[str, Any] = {
            "data_source": ex.data_source or "unknown",
            "prompt": [{"role": "user", "content": render_prompt(prompt_template, ex.question)}],
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": {"target": list(ex.golden)}},
            "extra_info": {
                "split": split,
                "index": i,
                "id": ex.id,
                "question": ex.question,
                "golden": list(ex.golden),
                "data_source": ex.data_source,
            },
        }
        # Nullable, so every row has the same struct whatever the example says (parquet's columns are typed).
        row["extra_info"].update(hops=ex.hops, kind=ex.kind, bridge=list(ex.bridge) if ex.bridge else None)
        if agent_name:
            row["agent_name"] = agent_name
        rows.append(row)
    return rows


def write_verl_parquet(
    examples: Sequence[Example], prompt_template: str, path: str | Path, split: str, agent_name: str | None = None
) -> Path:
    """The examples as a parquet file veRL's RLHFDataset reads (pyarrow infers the nested columns' types)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(verl_rows(examples, prompt_template, split, agent_name)), str(path))
    return path


def _plain(v: Any) -> Any:
    """numpy arrays and scalars (what a DataProto's object arrays hold) as Python values."""
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def golden_of(ground_truth: Any) -> list[str]:
    """The golden answers in any of the shapes veRL datasets use: Search-R1's `{target: [...]}`, a list, a string."""
    gt = _plain(ground_truth)
    if isinstance(gt, Mapping):
        gt = _plain(gt.get("target", gt.get("golden_answers", [])))
    if isinstance(gt, str):
        return [gt]
    return [str(g) for g in gt] if isinstance(gt, (list, tuple)) else []


def example_of(row: Mapping[str, Any]) -> Example:
    """Our Example from a veRL row (the agent loop's kwargs, a batch item's non-tensor fields): from `extra_info` as
    we write it, else from the columns every veRL dataset has (so a user's own Search-R1 parquet works too)."""
    info = _plain(row.get("extra_info")) or {}
    golden = info.get("golden")
    if golden is None:
        golden = golden_of((_plain(row.get("reward_model")) or {}).get("ground_truth"))
    question = info.get("question")
    if question is None:
        prompt = _plain(row.get("raw_prompt", row.get("prompt"))) or []
        question = str(prompt[-1].get("content", "")) if prompt and isinstance(prompt[-1], Mapping) else ""
    data_source = info.get("data_source", row.get("data_source", ""))
    ident = info.get("id", info.get("index", row.get("index", "")))
    # The dataset's meta as load_dataset reads it; a user's own parquet saying a field otherwise loses that field only
    # (never fatal). Parquet read back through pandas may give a whole number as a float.
    hops = _plain(info.get("hops"))
    if isinstance(hops, float) and hops.is_integer():
        hops = int(hops)
    hops, kind, bridge, _problems = meta_fields(
        {"hops": hops, "kind": _plain(info.get("kind")), "bridge": _plain(info.get("bridge"))}
    )
    return Example(
        id=str(_plain(ident)),
        question=str(question),
        golden=tuple(str(g) for g in _plain(golden)),
        data_source=str(_plain(data_source) or ""),
        hops=hops,
        kind=kind,
        bridge=bridge,
    )
