"""Counterfactual replay (fork.py): a recorded rollout forked at a generation turn and continued by the run's policy
from a checkpoint, with the real env server. Identity: a greedy held-out rollout forked at turn 2 with nothing edited,
from its step's checkpoint, comes back token for token (the built-in tiny policy, and a tiny random Hugging Face model
with a LoRA adapter). An edit (the user's documents) changes the continuation and the reward, and the documents are
`retrieved` tokens with loss mask 0. The policy server over stdio answers requests and reports bad ones."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO, tiny_config, trainer_env
from test_train import audit_rollout, lines, run_trainer


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, varied_env) -> Path:
    tmp = tmp_path_factory.mktemp("fork-tiny")
    proc = run_trainer(tmp, tiny_config(), varied_env.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run"


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory, varied_env) -> Path:
    """A 2-step LoRA run of a tiny random Qwen2 taught to search first (so its held-out rollouts retrieve)."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from transformers import AutoTokenizer

    from hf_fixture import build_tiny_qwen2, demo_texts, teach
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.data import load_dataset, render_prompt
    from search_agent_trainer.policy import Tokenizer

    tmp = tmp_path_factory.mktemp("fork-hf")
    base = build_tiny_qwen2(tmp / "qwen", demo_texts(DEMO))
    cfg = tiny_config(**{"data.eval_size": 2, "rollout.max_turn_tokens": 40, "rollout.max_response_length": 300})
    cfg["model"] = {
        "kind": "hf",
        "path": str(tmp / "taught"),
        "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    c = config_from_dict(cfg)
    tok = Tokenizer(AutoTokenizer.from_pretrained(str(base), local_files_only=True), "hf")
    evals = load_dataset(c.data.eval)[:2]
    teach(
        base,
        tmp / "taught",
        [
            (
                tok.prompt(render_prompt(c.data.prompt_template, e.question), c.data.chat_template),
                f"<search> {e.question} </search>",
            )
            for e in evals
        ],
        steps=60,
    )
    proc = run_trainer(tmp, cfg, varied_env.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run"


def server(run: Path, env_url: str, step: int = 2):
    from search_agent_trainer.fork import PolicyServer

    return PolicyServer(run, f"step-{step:06d}", env_url)


def held_out(run: Path, step: int = 2) -> list[dict]:
    return lines(run / "rollouts" / f"val-step-{step:06d}.jsonl")


def assert_identity(run: Path, env_url: str) -> None:
    srv = server(run, env_url)
    forked = 0
    for rec in held_out(run):
        if rec["turns"] < 2:
            continue
        (c,) = srv.fork(rec, 2)
        forked += 1
        assert c["diverges_at"] is None, rec["id"]
        assert c["response"] == rec["response"]
        for key in ("ids", "role", "loss_mask", "text"):
            assert c["tokens"][key] == rec["tokens"][key], key
        assert c["tokens"]["rollout_logprob"] == pytest.approx(rec["tokens"]["rollout_logprob"], abs=1e-4)
        assert (
            c["reward"] == rec["reward"]
            and c["turns"] == rec["turns"]
            and c["searches"] == rec["searches"]
            and c["finish"] == rec["finish"]
        )
    assert forked, "no held-out rollout has two turns"


def test_a_greedy_held_out_rollout_forked_at_turn_2_unedited_comes_back_token_for_token_tiny(tiny_run, varied_env):
    assert_identity(tiny_run, varied_env.url)


def test_a_greedy_held_out_rollout_forked_at_turn_2_unedited_comes_back_token_for_token_hf_lora(hf_run, varied_env):
    assert_identity(hf_run, varied_env.url)


def test_edited_documents_change_the_continuation_and_reward_and_are_retrieved_tokens_with_mask_0(hf_run, varied_env):
    srv = server(hf_run, varied_env.url)
    rec = next(r for r in held_out(hf_run) if r["searches"] >= 1 and r["turns"] >= 2)
    doc = "Zekrouv Island\nThe capital of Zekrouv is Plimsoll, a harbour town of eleven streets."
    (c,) = srv.fork(rec, 2, documents=[doc])
    t, r = c["tokens"], rec["tokens"]
    P = r["role"].index("generated")
    obs = next(i for i in range(P, len(r["role"])) if r["role"][i] != "generated")  # turn 1's observation starts here
    assert t["ids"][:obs] == r["ids"][:obs]
    assert c["diverges_at"] is not None and c["diverges_at"] >= obs
    assert c["response"] != rec["response"] and c["reward"] != rec["reward"]
    end = next(i for i in range(obs, len(t["role"])) if t["role"][i] == "generated")
    assert set(t["role"][obs:end]) == {"retrieved"} and set(t["loss_mask"][obs:end]) == {0}
    assert "Plimsoll, a harbour town of eleven streets" in "".join(t["text"][obs:end])
    assert "Doc 1(Title: Zekrouv Island) The capital of Zekrouv is Plimsoll" in c["response"]
    assert c["retrieval"][0]["hits"] == [{"id": "edited-1", "score": None}]
    audit_rollout(
        {**rec, **{k: c[k] for k in ("response", "tokens", "turns", "searches", "finish")}, "reward": c["reward"]}
    )
    # a new query re-runs the search (the same retriever), and n samples come back as n continuations
    two = srv.fork(rec, 2, query="capital", samples=2, greedy=False)
    assert len(two) == 2 and all(x["retrieval"][0]["query"] == "capital" for x in two)


def test_a_checkpoint_that_is_a_plain_hugging_face_model_directory_forks(hf_run, varied_env, tmp_path):
    """A run whose checkpoints are Hugging Face model directories (as TRL saves them): the held-out rollouts of step 0
    were generated before any update, by the base model (a LoRA adapter starts at zero), so a copy of the run whose
    step-0 checkpoint is the base model's own directory reproduces them token for token."""
    run = tmp_path / "run"
    shutil.copytree(hf_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    base = Path(json.loads((hf_run / "run.json").read_text())["config"]["model"]["path"])
    shutil.copytree(base, run / "checkpoints" / "step-000000")
    assert (
        not (run / "checkpoints" / "step-000000" / "trainable.pt").exists()
        and (run / "checkpoints" / "step-000000" / "config.json").exists()
    )
    srv = server(run, varied_env.url, step=0)
    assert srv.step is None  # no trainer_state.json: a plain model directory
    recs = [r for r in held_out(run, step=0) if r["turns"] >= 2]
    assert recs, "no held-out rollout of step 0 has two turns"
    for rec in recs:
        (c,) = srv.fork(rec, 2)
        assert c["diverges_at"] is None, rec["id"]
        assert c["tokens"]["ids"] == rec["tokens"]["ids"] and c["response"] == rec["response"]


def test_a_fastest_run_forks_in_the_dtype_its_checkpoint_records(tiny_run, varied_env, tmp_path):
    """model.dtype fastest (numerics.py): the policy server computes in what the run's machine chose, from the
    checkpoint's trainer_state.json, not in what this process would measure."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["model"]["dtype"] = "fastest"
    (run / "run.json").write_text(json.dumps(meta))
    state_file = run / "checkpoints" / "step-000002" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    for chosen, dtype in (("bf16", torch.bfloat16), ("fp32", None)):
        state["numerics"] = {"requested": "fastest", "dtype": chosen, "source": "measured", "reason": "test"}
        state_file.write_text(json.dumps(state))
        assert server(run, varied_env.url).dtype == dtype


def test_bad_requests_name_what_is_wrong(tiny_run, varied_env):
    from search_agent_trainer.fork import ForkError

    srv = server(tiny_run, varied_env.url)
    rec = held_out(tiny_run)[0]
    with pytest.raises(ForkError, match="--turn 9: rollout .* has 3 generation turns"):
        srv.fork(rec, 9)
    with pytest.raises(ForkError, match="there is none before turn 1"):
        srv.fork(rec, 1, documents=["x\ny"])
    with pytest.raises(ForkError, match="no token ids"):
        srv.fork({**rec, "tokens": None}, 2)


def test_the_policy_server_answers_json_lines_on_stdio(tiny_run, varied_env):
    rec = held_out(tiny_run)[0]
    requests = [{"id": 1, "record": rec, "turn": 2}, "not json", {"id": 3, "record": rec, "turn": 0}]
    stdin = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in requests) + "\n"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer.fork",
            "--run-dir",
            str(tiny_run),
            "--checkpoint",
            "step-000002",
            "--env-url",
            varied_env.url,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(l) for l in proc.stdout.splitlines()]
    assert out[0]["event"] == "ready" and out[0]["step"] == 2 and out[0]["model"] == "tiny"
    assert out[1]["id"] == 1 and out[1]["continuations"][0]["diverges_at"] is None
    assert out[2] == {"id": None, "error": out[2]["error"]} and "stdin line 2: not a JSON request" in out[2]["error"]
    assert out[3]["id"] == 3 and "--turn 0" in out[3]["error"]
