"""The token store (token_store.py): records → Parquet columns → records, exact for ids, roles and masks, within
float32 for numbers; a step is visible whole or not at all."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from search_agent_trainer import token_store as ts


def make_records(n: int = 12, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        P, R = rng.randint(3, 9), rng.randint(1, 30)
        roles = ["prompt"] * P + [rng.choice(["generated", "generated", "retrieved", "feedback"]) for _ in range(R)]
        ids = [rng.randrange(0, 151_936) for _ in roles]
        gen = [r == "generated" for r in roles]
        rec = {
            "v": 2,
            "id": f"run:train:3:{i // 4}:{i % 4}",
            "step": 3,
            "group": f"train:3:{i // 4}",
            "sample": i % 4,
            "split": "train",
            "question": f"question {i} ünïcode ✓",
            "golden": ["an answer"],
            "data_source": "nq",
            "prompt": "P" * P,
            "response": "<search> x </search>" * (i % 3),
            "finish": "answer",
            "turns": 2,
            "searches": i % 3,
            "dialect": "searchr1",
            "reward": float(i % 2),
            "reward_parts": {"em": float(i % 2)},
            "tokens": {
                "text": [f"w{t}" for t in ids],
                "ids": ids,
                "role": roles,
                "loss_mask": [1 if g else 0 for g in gen],
                "rollout_logprob": [round(-rng.random() * 5, 6) if g else None for g in gen],
                "logprob": [round(-rng.random() * 5, 6) if g else None for g in gen],
                "advantage": [0.5 if g else None for g in gen],
            },
            "meta": {"example_id": str(i), "metrics": {"em": 1.0}},
        }
        if i == 5:
            rec["meta"]["engine_loss_mask"] = rec["tokens"]["loss_mask"][:]
            rec["meta"]["engine_loss_mask"][P] = 1 - rec["meta"]["engine_loss_mask"][P]
        if i == 6:
            rec["group"] = 7  # an integer group: kept as an integer
            rec["strict_actions"] = True
        if i == 7:
            del rec["tokens"]  # an imported record without tokens
        out.append(rec)
    out.append({"v": 1, "id": "v1-record", "prompt": "p", "response": "r"})
    out.append({"id": "no-version", "prompt": "p", "response": "r", "reward": None})
    return out


def close(a, b, path="") -> None:
    """Equal, numbers within float32 (relative 2^-23, absolute below 2^-126 · 2)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, path
        assert abs(a - b) <= max(abs(b), 1e-30) * 2**-23 + 1e-38, (path, a, b)
    elif isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


def test_round_trip(tmp_path: Path) -> None:
    recs = make_records()
    d = ts.records_to_step(tmp_path, "step-000003", recs, info={"step": 3})
    assert d == tmp_path / "step-000003" and sorted(p.name for p in d.iterdir()) == [
        "rollouts.parquet",
        "tokens.parquet",
        "vocab.parquet",
    ]
    back = ts.read_step(d)
    assert back[-1]["reward"] is None  # a null kept as null (in `extra`)
    for a, b in zip(back, recs):
        close(a, b, a["id"])
        if "tokens" in b:  # ids, roles, masks: to the bit
            assert (
                a["tokens"]["ids"] == b["tokens"]["ids"]
                and a["tokens"]["role"] == b["tokens"]["role"]
                and a["tokens"]["loss_mask"] == b["tokens"]["loss_mask"]
            )
    assert back[6]["group"] == 7 and back[6]["strict_actions"] is True
    assert back[-2]["v"] == 1 and "v" not in back[-1]
    assert back[5]["meta"]["engine_loss_mask"] == recs[5]["meta"]["engine_loss_mask"]


def test_columns_are_typed(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    d = ts.records_to_step(tmp_path, "step-000001", make_records())
    schema = pq.read_schema(d / "tokens.parquet")
    types = {f.name: str(f.type) for f in schema}
    assert (
        types["ids"] == "uint32"
        and types["role"] == "uint8"
        and types["loss_mask"] == "uint8"
        and types["logprob"] == "float"
    )
    assert "ref_logprob" not in types and "text" not in types  # no record has it; texts are a function of the id
    assert not any(f.nullable for f in schema)
    meta = pq.read_metadata(d / "tokens.parquet")
    assert meta.row_group(0).column(0).compression == "BROTLI"
    assert "DELTA_BINARY_PACKED" in meta.row_group(0).column(1).encodings  # roles come in runs


def test_texts_that_are_not_a_function_of_the_id_keep_a_column(tmp_path: Path) -> None:
    recs = make_records(4)
    t = recs[1]["tokens"]
    t["text"][0] = t["text"][0] + "!"  # the same id as elsewhere? make it so
    recs[2]["tokens"]["ids"][0] = t["ids"][0]
    back = ts.read_step(ts.records_to_step(tmp_path, "step-000001", recs))
    assert [b["tokens"]["text"] for b in back if "tokens" in b] == [r["tokens"]["text"] for r in recs if "tokens" in r]


def test_a_partial_step_is_invisible_and_removed(tmp_path: Path) -> None:
    ts.records_to_step(tmp_path, "step-000001", make_records(3))
    partial = tmp_path / ".step-000002.tmp-123-abcdef"
    partial.mkdir()
    (partial / "tokens.parquet").write_bytes(b"PAR1 half")
    jsonl = tmp_path / ".step-000002.jsonl.tmp-123"  # the JSONL format's half-written step
    jsonl.write_text('{"v": 2, "id": "x", "prom', encoding="utf-8")
    assert [p.name for p in ts.committed_steps(tmp_path)] == ["step-000001"]
    assert ts.remove_partial(tmp_path) == sorted([partial, jsonl]) and not partial.exists() and not jsonl.exists()


def test_truncate_after_and_order(tmp_path: Path) -> None:
    for name in ("step-000002", "val-step-000002", "step-000001", "step-000010", "val-step-000000"):
        ts.records_to_step(tmp_path, name, make_records(2))
    assert [p.name for p in ts.committed_steps(tmp_path)] == [
        "val-step-000000",
        "step-000001",
        "step-000002",
        "val-step-000002",
        "step-000010",
    ]
    ts.truncate_after(tmp_path, 2)
    assert [p.name for p in ts.committed_steps(tmp_path)] == [
        "val-step-000000",
        "step-000001",
        "step-000002",
        "val-step-000002",
    ]


def test_bad_names_and_lengths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="step-NNNNNN"):
        ts.records_to_step(tmp_path, "steps-1", make_records(1))
    rows, cols = ts.columns_from_records(make_records(2))
    cols.lengths = cols.lengths + 1
    with pytest.raises(ValueError, match="tokens"):
        ts.write_step(tmp_path, "step-000001", rows, cols)
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_large_step_row_groups_hold_whole_rollouts(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    n = 40
    lengths = np.full(n, 5_000, dtype=np.int64)
    total = int(lengths.sum())
    cols = ts.StepColumns(
        ids=np.arange(total, dtype=np.uint32) % 1000,
        role=np.zeros(total, np.uint8),
        loss_mask=np.ones(total, np.uint8),
        floats={"logprob": np.full(total, -0.5, np.float32)},
        lengths=lengths,
        arrays=np.full(n, ts.HAS_TOKENS | ts.ARRAY_BIT["logprob"], np.int32),
        vocab={i: f"t{i}" for i in range(1000)},
    )
    rows = [ts._split_record({"v": 2, "id": f"r{i}", "prompt": "", "response": ""}) for i in range(n)]
    d = ts.write_step(tmp_path, "step-000001", rows, cols)
    meta = pq.read_metadata(d / "tokens.parquet")
    assert meta.num_row_groups > 1 and all(meta.row_group(g).num_rows % 5_000 == 0 for g in range(meta.num_row_groups))
    back = ts.read_step(d)
    assert (
        back[-1]["tokens"]["ids"][:3] == [195_000 % 1000, 195_001 % 1000, 195_002 % 1000]
        and back[-1]["tokens"]["logprob"][0] == -0.5
    )
    assert json.loads(pq.read_metadata(d / "rollouts.parquet").metadata[b"sas.store"])["version"] == ts.STORE_VERSION
