"""The dump reader (search_agent_trainer/dumps.py) on slime/miles sample dumps: a sample that cannot be read is
reported with its row and field and skipped, and every other sample of the file is still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from search_agent_trainer import dumps


def _sample(i: int, n: int = 6, rlen: int = 3) -> dict[str, Any]:
    return {
        "index": i,
        "group_index": i // 2,
        "tokens": list(range(10, 10 + n)),
        "response_length": rlen,
        "loss_mask": [1] * rlen,
        "rollout_log_probs": [-0.5] * rlen,
        "reward": float(i % 2),
        "status": "completed",
    }


def _bad_pack() -> dict[str, Any]:
    samples = [_sample(i) for i in range(8)]
    samples[1]["loss_mask"] = 7  # not a list: a TypeError inside the reader before
    samples[3]["rollout_log_probs"] = samples[3]["rollout_log_probs"][:-1]
    samples[5]["tokens"] = ["a"] + samples[5]["tokens"][1:]
    samples[6] = "not a sample"
    samples[7]["response_length"] = "many"
    return {"rollout_id": 1, "samples": samples}


def test_each_bad_sample_is_reported_with_its_row_and_field_and_the_rest_are_read() -> None:
    items = list(dumps.slime_samples(_bad_pack(), Path("rollout_1.pt"), "slime", None, "train", None, {}))
    issues = [i["issue"] for i in items if "issue" in i]
    samples = [i["sample"] for i in items if "sample" in i]
    assert [s["line"] for s in samples] == [1, 3, 5]
    assert [(i["line"], i["field"]) for i in issues] == [
        (2, "loss_mask"),
        (4, "rollout_log_probs"),
        (6, "tokens[0]"),
        (7, ""),
        (8, "response_length"),
    ]
    assert issues[0]["message"] == "expected a list or tensor, got int"
    assert "expected a token id" in issues[2]["message"]
    assert all(i["file"] == "rollout_1.pt" for i in issues)
    assert samples[0]["loss_mask"] == [0, 0, 0, 1, 1, 1]
    assert "sample_excluded" not in samples[0]["meta"]


def test_a_removed_sample_is_trained_nowhere_and_says_so() -> None:
    s = _sample(0)
    s["remove_sample"] = True
    (item,) = dumps.slime_samples({"rollout_id": 1, "samples": [s]}, Path("r.pt"), "slime", None, "train", None, {})
    assert item["sample"]["loss_mask"] == [0] * 6
    assert item["sample"]["meta"]["sample_excluded"] == "remove_sample (slime)"


def test_a_torch_file_with_bad_samples_keeps_its_good_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    torch.save(_bad_pack(), tmp_path / "rollout_1.pt")
    torch.save({"rollout_id": 2, "samples": [_sample(i) for i in range(2)]}, tmp_path / "rollout_2.pt")
    assert dumps.read(tmp_path, None, trust=False) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    counts = {Path(x["file"]).name: x["samples"] for x in lines if "samples" in x}
    assert counts == {"rollout_1.pt": 3, "rollout_2.pt": 2}
    issues = [x["issue"] for x in lines if "issue" in x]
    assert [(Path(i["file"]).name, i["line"], i["field"]) for i in issues] == [
        ("rollout_1.pt", 2, "loss_mask"),
        ("rollout_1.pt", 4, "rollout_log_probs"),
        ("rollout_1.pt", 6, "tokens[0]"),
        ("rollout_1.pt", 7, ""),
        ("rollout_1.pt", 8, "response_length"),
    ]
