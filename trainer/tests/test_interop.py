"""Interop between the Python side and the TypeScript side of the run format:

- parquet files written by pyarrow (as HF ``datasets.to_parquet`` and TRL write them) are imported by our
  TypeScript CLI;
- the JSON Schemas we publish (docs/schema, generated from the TypeScript schemas) are checked by an
  independent validator (``jsonschema``) on what the importers write, and agree with our validator on
  invalid records.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH")

PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. ... For example, <answer> Beijing </answer>. Question: {q}\n"
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODE, "-r", str(ROOT / "test" / "register.cjs"), str(ROOT / "src" / "cli" / "main.ts"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def schema(name: str) -> dict:
    return json.loads((ROOT / "docs" / "schema" / name).read_text())


def test_pyarrow_written_searchr1_dataset_imports(tmp_path: Path):
    rows = [
        {
            "id": "test_7",
            "question": "what river runs through quendal?",
            "golden_answers": ["the Ossel", "Ossel"],
            "data_source": "nq",
            "prompt": [{"content": PROMPT.format(q="what river runs through quendal?"), "role": "user"}],
            "ability": "fact-reasoning",
            "reward_model": {"ground_truth": {"target": ["the Ossel", "Ossel"]}, "style": "rule"},
            "extra_info": {"index": 7, "split": "test"},
        },
        {
            # No question column value: the question comes from the prompt.
            "id": None,
            "question": None,
            "golden_answers": ["Ilse Marrow"],
            "data_source": "hotpotqa",
            "prompt": [{"content": PROMPT.format(q="who founded varnholt?"), "role": "user"}],
            "ability": "fact-reasoning",
            "reward_model": {"ground_truth": {"target": ["Ilse Marrow"]}, "style": "rule"},
            "extra_info": {"index": 8, "split": "test"},
        },
    ]
    src = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    out = tmp_path / "dataset.jsonl"
    r = cli("import", "searchr1-dataset", str(src), "--out", str(out))
    assert r.returncode == 0, r.stderr
    examples = [json.loads(line) for line in out.read_text().splitlines()]
    assert examples[0] == {
        "id": "test_7",
        "question": "what river runs through quendal?",
        "golden": ["the Ossel", "Ossel"],
        "data_source": "nq",
        "split": "test",
    }
    assert examples[1]["question"] == "who founded varnholt?"
    assert examples[1]["id"] == "hotpotqa-test-8"


def test_pyarrow_written_trl_completions_import_and_match_the_published_schema(tmp_path: Path):
    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    answer = "<think>t</think>\n<search> q </search>\n\n<information>Doc 1(Title: x) y</information>\n\n<think>u</think>\n<answer> y </answer>"
    table = pa.table(
        {
            "step": ["3", "3", "3"],
            "prompt": [PROMPT.format(q="a?")] * 3,
            "completion": [answer, answer, "<think>no</think>\n<answer> z </answer>"],
            "accuracy_reward": [1.0, 1.0, 0.0],
            "advantage": [0.58, 0.58, -1.15],
        }
    )
    pq.write_table(table, completions / "completions_00003.parquet")
    out = tmp_path / "rollouts.jsonl"
    r = cli("import", "trl", str(tmp_path / "out"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["step"], x["group"], x["sample"], x["reward"]) for x in records] == [
        (3, 0, 0, 1.0),
        (3, 0, 1, 1.0),
        (3, 0, 2, 0.0),
    ]
    validator = jsonschema.Draft202012Validator(schema("rollout.schema.json"))
    for x in records:
        validator.validate(x)
    # inspect sees the zero-variance-free group and the searches
    s = json.loads(cli("inspect", str(out), "--json").stdout)["summary"]
    assert s["groups"] == {"count": 1, "zero_variance": 0, "frac_zero_std": 0}
    assert s["searches"]["histogram"] == {"0": 1, "1": 2}


@pytest.mark.parametrize(
    "record, ok",
    [
        ({"v": 1, "id": "a", "prompt": "", "response": ""}, True),
        ({"v": 1, "id": "a", "prompt": "", "response": "", "extra": {"x": 1}}, True),
        ({"v": 1, "id": "a", "prompt": "", "response": "", "finish": "done"}, False),
        ({"v": 2, "id": "a", "prompt": "", "response": ""}, True),
        ({"v": 3, "id": "a", "prompt": "", "response": ""}, False),
        (
            {
                "v": 2,
                "id": "a",
                "prompt": "",
                "response": "",
                "tokens": {
                    "text": ["a"],
                    "ids": [1],
                    "role": ["generated"],
                    "loss_mask": [1],
                    "rollout_logprob": [-0.5],
                    "logprob": [-0.4],
                },
            },
            True,
        ),
        (
            {
                "v": 2,
                "id": "a",
                "prompt": "",
                "response": "",
                "tokens": {
                    "text": ["a"],
                    "ids": [1],
                    "role": ["generated"],
                    "loss_mask": [1],
                    "rollout_logprob": ["x"],
                },
            },
            False,
        ),
        ({"v": 1, "id": "", "prompt": "", "response": ""}, False),
        ({"v": 1, "id": "a", "prompt": ""}, False),
        ({"v": 1, "id": "a", "prompt": "", "response": "", "reward": "1"}, False),
        ({"v": 1, "id": "a", "prompt": "", "response": "", "group": 1.5}, False),
        ({"v": 1, "id": "a", "prompt": "", "response": "", "reward_parts": {"em": "x"}}, False),
        (
            {
                "v": 1,
                "id": "a",
                "prompt": "",
                "response": "",
                "tokens": {"text": ["a"], "ids": [1], "role": ["retrieved"], "loss_mask": [2]},
            },
            False,
        ),
        (
            {
                "v": 1,
                "id": "a",
                "prompt": "",
                "response": "",
                "tokens": {"text": ["a"], "ids": [1], "role": ["retrieved"], "loss_mask": [0]},
            },
            True,
        ),
    ],
)
def test_published_schema_agrees_with_our_validator(tmp_path: Path, record: dict, ok: bool):
    valid = jsonschema.Draft202012Validator(schema("rollout.schema.json")).is_valid(record)
    assert valid is ok
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps(record) + "\n")
    ours = json.loads(cli("inspect", str(f), "--json").stdout)
    assert (len(ours["issues"]) == 0) is ok, ours["issues"]
