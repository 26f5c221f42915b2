"""The dataset reader: `meta.hops` is kept (for the `val/*_by_hops/*` metrics), absent is fine, malformed is a
reported, skipped line."""

from __future__ import annotations

import json

from search_agent_trainer.data import load_dataset


def test_meta_hops_is_read_absent_is_none_and_a_bad_value_is_a_skipped_line_naming_the_field(tmp_path):
    rows = [
        {"id": "a", "question": "who wrote X?", "golden": ["Bo"], "meta": {"hops": 2, "kind": "author"}},
        {"id": "b", "question": "who wrote Y?", "golden": ["Cy"]},
        {"id": "c", "question": "who wrote Z?", "golden": ["Di"], "meta": {"hops": "two"}},
        {"id": "d", "question": "who wrote W?", "golden": ["Ed"], "meta": {"hops": 0}},
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    warnings: list[str] = []
    out = load_dataset(str(path), warnings.append)
    assert [(e.id, e.hops) for e in out] == [("a", 2), ("b", None)]
    assert warnings == [f"{path}:3: meta.hops: expected a positive integer; line skipped", f"{path}:4: meta.hops: expected a positive integer; line skipped"]
