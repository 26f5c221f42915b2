"""The drop-in TRL recorder (search_agent_trainer.record.trl) on a script written the way a user writes one: their own
tiny dataset, reward function and GRPOConfig, a tiny random Qwen2-style model (examples/trl-tiny/model's config),
no run config of ours — one import changed. The run directory beside their output_dir must hold records that
validate, carry TRL's tensors (ids, its mask, advantages, reference log-probs), rewards and groups, and that our
`audit` reads (the CLI: every record audited, none malformed); `record(trainer)` does the same for a trainer built already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, TRAINER, audit_json
from test_train import SCHEMAS, jsonschema, lines

pytest.importorskip("trl")

SCRIPT = """
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig
{import_line}

# a small model of my own (here: random weights in the Qwen2 layout, saved where a downloaded model would be)
torch.manual_seed(0)
MODEL = "my-model"
tokenizer = AutoTokenizer.from_pretrained({model!r})
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained({model!r})).save_pretrained(MODEL)
tokenizer.save_pretrained(MODEL)

# my own little dataset: a question and its answer
rows = [
    {{"prompt": [{{"role": "user", "content": "Question: What is the capital of Arnland?"}}], "answer": "Velm"}},
    {{"prompt": [{{"role": "user", "content": "Question: Who wrote Ossel?"}}], "answer": "Ilse Marrow"}},
]
dataset = Dataset.from_list(rows * 4)

def exact_match(completions, answer, **kwargs):
    return [1.0 if a.lower() in c[0]["content"].lower() else 0.0 for c, a in zip(completions, answer)]

def brevity(completions, **kwargs):
    return [1.0 / (1 + len(c[0]["content"])) for c in completions]

args = GRPOConfig(
    output_dir={output_dir!r},
    max_steps=2,
    per_device_train_batch_size=4,
    num_generations=2,
    max_completion_length=12,
    learning_rate=1e-4,
    beta=0.04,
    logging_steps=1,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    seed=0,
)
trainer = GRPOTrainer(model=MODEL, processing_class=tokenizer, reward_funcs=[exact_match, brevity], args=args, train_dataset=dataset)
{after_build}
trainer.train()
"""


def run_script(tmp_path: Path, import_line: str, after_build: str = "") -> Path:
    out = tmp_path / "outputs" / "my-grpo"
    script = tmp_path / "train_grpo.py"
    script.write_text(
        textwrap.dedent(
            SCRIPT.format(
                import_line=import_line,
                after_build=after_build,
                model=str(ROOT / "examples" / "trl-tiny" / "model"),
                output_dir=str(out),
            )
        )
    )
    env = {
        "PYTHONPATH": str(TRAINER),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "",
    }
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return out


def check_run(run: Path) -> list[dict]:
    run_json = json.loads((run / "run.json").read_text())
    jsonschema.validate(run_json, SCHEMAS["run"])
    assert (
        run_json["status"] == "finished"
        and run_json["engine"] == "trl"
        and run_json["config"]["recorded_by"] == "search_agent_trainer.record.trl"
    )
    events = lines(run / "events.jsonl")
    for e in events:
        jsonschema.validate(e, SCHEMAS["event"])
    assert [e["event"] for e in events][0] == "started" and events[-1]["event"] == "finished"
    metrics = lines(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert "trl/reward" in metrics[0] and "critic/score/mean" in metrics[0] and "response_length/mean" in metrics[0]
    recs = [r for step in (1, 2) for r in lines(run / "rollouts" / f"step-{step:06d}.jsonl")]
    assert len(recs) == 8, "4 completions a step"
    for r in recs:
        jsonschema.validate(r, SCHEMAS["rollout"])
        tk = r["tokens"]
        n = len(tk["ids"])
        assert all(len(tk[k]) == n for k in ("text", "role", "loss_mask", "advantage", "ref_logprob"))
        P = tk["role"].index("generated")
        assert tk["role"][:P] == ["prompt"] * P and tk["loss_mask"][:P] == [0] * P
        assert "".join(tk["text"]) == r["prompt"] + r["response"]
        assert r["prompt"].startswith("<|im_start|>user\nQuestion:") and r["prompt"].endswith("<|im_start|>assistant\n")
        assert r["question"] in ("What is the capital of Arnland?", "Who wrote Ossel?") and r["golden"] in (
            ["Velm"],
            ["Ilse Marrow"],
        )
        assert set(r["reward_parts"]) == {"exact_match", "brevity"} and r["reward"] == pytest.approx(
            sum(r["reward_parts"].values())
        )
        trained = [i for i, m in enumerate(tk["loss_mask"]) if m]
        assert trained and all(tk["advantage"][i] is not None and tk["ref_logprob"][i] is not None for i in trained)
        assert r["meta"]["roles"].startswith("engine loss mask")
    # GRPO groups: num_generations consecutive rows of a batch, one prompt each
    by_group: dict[tuple[int, str], list[dict]] = {}
    for r in recs:
        by_group.setdefault((r["step"], r["group"]), []).append(r)
    assert all(len(g) == 2 and len({x["prompt"] for x in g}) == 1 for g in by_group.values())
    for g in by_group.values():  # the group's advantages are its rewards, normalised
        a = [x["tokens"]["advantage"][x["tokens"]["loss_mask"].index(1)] for x in g if 1 in x["tokens"]["loss_mask"]]
        if len(a) == 2 and g[0]["reward"] != g[1]["reward"]:
            assert (a[0] > a[1]) == (g[0]["reward"] > g[1]["reward"])
    return recs


def test_a_users_trl_script_with_the_recording_trainer_writes_a_run_that_audit_accepts(tmp_path):
    out = run_script(tmp_path, "from search_agent_trainer.record.trl import RecordingGRPOTrainer as GRPOTrainer")
    run = out.parent / "my-grpo-sas"
    check_run(run)
    a = audit_json(run)
    assert a["issues"] == [] and a["summary"]["rollouts"] == 8, "every record read"
    assert a["summary"]["leaks"] == {"rollouts": 0, "tokens": 0, "mask_mismatch": 0}
    assert a["tokenizer"] == "my-model/tokenizer.json", (
        "the drift check ran with the model's tokenizer (run.json's model.path)"
    )
    # A random model samples ids its tokenizer would not produce for their text (it would merge them otherwise): the
    # drift check says so — the check working on TRL's recorded ids, not a fault of the recording.
    assert (
        a["summary"]["drift"]["checked"]
        and a["summary"]["drift"]["text"] == 0
        and a["summary"]["drift"]["template"] == 0
    )


def test_record_makes_a_trainer_built_already_record_into_the_directory_asked_for(tmp_path):
    run = tmp_path / "elsewhere"
    run_script(
        tmp_path,
        "from trl import GRPOTrainer\nfrom search_agent_trainer.record.trl import record",
        f"record(trainer, {str(run)!r})",
    )
    check_run(run)
    assert not (tmp_path / "outputs" / "my-grpo-sas").exists()
