"""The drop-in veRL recorder (`python -m search_agent_trainer.record.verl <their Hydra args>`, in .venv-verl) on a job
written the way a user writes one: their own parquet (veRL's RL columns, none of ours), their own overrides, veRL's
own single-turn agent loop — no run config of ours. Their config is composed as main_ppo composes it, our recorder
put in, and veRL's checks pass; veRL's AgentLoopWorker runs their loop (the model behind it a scripted TEST DOUBLE:
no GPU here) and the recorder turns the DataProto into records that validate and that our `audit` reads whole.
A full veRL run needs a GPU (vLLM/SGLang): not run here."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="the veRL engine's tests run in .venv-verl (npm run test:verl)")

from conftest import TRAINER, audit_json  # noqa: E402
from hf_fixture import build_tiny_qwen2, demo_texts  # noqa: E402
from search_agent_trainer.engines.verl.agent_loop import our_tokenizer  # noqa: E402
from search_agent_trainer.record.verl import compose_user_config, split_args  # noqa: E402
from test_train import SCHEMAS, jsonschema, lines  # noqa: E402
from verl_harness import DEMO, ScriptedLLMServer, ScriptedModel  # noqa: E402

QUESTIONS = {"What river flows through Torneind?": "Arn", "Who founded Velm?": "Ilse Marrow"}


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("hf") / "tiny-qwen2", demo_texts(DEMO))


def their_parquet(path: Path) -> Path:
    """A dataset as a user prepares one for veRL (its RLHFDataset's columns), with nothing of ours in it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "my_qa",
            "prompt": [{"role": "user", "content": f"Answer briefly. {q}"}],
            "ability": "qa",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"index": i},
        }
        for i, (q, a) in enumerate(QUESTIONS.items())
    ]
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return path


def their_args(tmp: Path, qwen_dir: Path, data: Path) -> list[str]:
    a = "actor_rollout_ref"
    return [
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=32",
        f"{a}.model.path={qwen_dir}",
        f"{a}.rollout.n=2",
        f"{a}.rollout.name=vllm",
        f"{a}.rollout.agent.default_agent_loop=single_turn_agent",
        f"{a}.rollout.calculate_log_probs=true",
        f"{a}.actor.ppo_mini_batch_size=2",
        f"{a}.actor.ppo_micro_batch_size_per_gpu=1",
        f"{a}.rollout.log_prob_micro_batch_size_per_gpu=1",
        f"{a}.ref.log_prob_micro_batch_size_per_gpu=1",
        f"{a}.actor.use_kl_loss=true",
        "algorithm.adv_estimator=grpo",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.total_training_steps=2",
        f"trainer.default_local_dir={tmp / 'checkpoints' / 'my-exp'}",
        "trainer.logger=[console]",
    ]


def test_their_command_line_is_read_as_main_ppos(tmp_path):
    path, name, overrides, notes = split_args(
        ["--config-path", "/cfg", "--config-name=my_ppo", "data.x=1", "+hydra.run.dir=out", "--verbose"]
    )
    assert (path, name, overrides) == ("/cfg", "my_ppo", ["data.x=1"])
    assert len(notes) == 2 and "hydra.run.dir" in notes[0]


def test_their_config_is_composed_with_the_recorder_and_passes_veRLs_checks(tmp_path, qwen_dir):
    args = their_args(tmp_path, qwen_dir, their_parquet(tmp_path / "my_train.parquet"))
    env = {
        "PYTHONPATH": str(TRAINER),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    p = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer.record.verl", *args, "--sas-dry-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    run = tmp_path / "checkpoints" / "my-exp-sas"
    assert report["run_dir"] == str(run), "beside their checkpoints"
    assert report["added"]["trainer.use_v1"] is False and report["added"]["trainer.rollout_data_dir"] == str(
        run / "rollouts"
    )
    assert report["added"]["sas"]["run_dir"] == str(run) and report["added"]["sas"]["keep_rollout_data_dir"] is False
    assert str(TRAINER) in report["added"]["ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH"]
    assert "trainer.use_v1=false" in p.stderr
    ours = json.loads((run / "sas-config.json").read_text())
    assert ours["model"]["path"] == str(qwen_dir) and ours["recorded_by"] == "search_agent_trainer.record.verl"

    # their own text dump stays theirs; V1 asked for by name is refused, named
    config, report = compose_user_config(
        args + [f"trainer.rollout_data_dir={tmp_path / 'dumps'}", f"+sas.run_dir={tmp_path / 'mine'}"]
    )
    assert (
        config.trainer.rollout_data_dir == str(tmp_path / "dumps")
        and config.sas.keep_rollout_data_dir is True
        and report["run_dir"] == str(tmp_path / "mine")
    )
    refused = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer.record.verl", *args, "trainer.use_v1=true", "--sas-dry-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode == 2 and "trainer.use_v1=true" in json.loads(refused.stdout)["message"]


def test_the_recorder_records_a_batch_of_their_own_agent_loop_that_audit_reads(tmp_path, qwen_dir):
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from search_agent_trainer.engines.verl.recorder import StepRecorder

    data = their_parquet(tmp_path / "my_train.parquet")
    config, report = compose_user_config(their_args(tmp_path, qwen_dir, data))
    tokenizer = AutoTokenizer.from_pretrained(str(qwen_dir))
    scripts = {q: [[f"{a} <|im_end|>"], ["I do not know.<|im_end|>"]] for q, a in QUESTIONS.items()}
    model = ScriptedModel(tokenizer, scripts, sorted(our_tokenizer(tokenizer).eos_ids))
    ds = RLHFDataset(str(data), tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([ds[0], ds[1]]))
    batch.non_tensor_batch["uid"] = np.array(["u0", "u1"], dtype=object)
    batch = batch.repeat(repeat_times=2, interleave=True)

    async def run():
        return await AgentLoopWorker(
            config, ScriptedLLMServer(model), reward_loop_worker_handles=None
        ).generate_sequences(batch)

    out = asyncio.run(run())
    # what RecordingTrainer does with the step's batch (its _log_rollout_data), from the config record.verl composed
    ours = json.loads(Path(config.sas.config).read_text())
    rec = StepRecorder(config.sas.run_dir, ours, total_steps=2, tokenizer=tokenizer)
    rec.rollouts(out, 1, "train")  # (built and written on the recorder's writer thread)
    rec.metrics(1, {"critic/score/mean": 0.5})
    rec.close()
    rec.writer.close()
    run = Path(report["run_dir"])
    records = lines(run / "rollouts" / "step-000001.jsonl")  # the token store's step-000001/ (the default format)
    assert len(records) == 4 and len({r["id"] for r in records}) == 4
    for r in records:
        jsonschema.validate(r, SCHEMAS["rollout"])
        tk = r["tokens"]
        assert (
            r["meta"]["roles"] == "engine loss mask (response_mask)"
            and r["meta"]["verl"]["roles"] == "from response_mask"
        )
        assert "dialect" not in r and "searches" not in r, "read from the text by the readers, not guessed"
        assert r["golden"] == [QUESTIONS[r["question"].removeprefix("Answer briefly. ")]], (
            "their ground truth, their prompt as the question"
        )
        assert any(m == 1 for m in tk["loss_mask"]) and tk["rollout_logprob"][tk["loss_mask"].index(1)] is not None
    run_json = json.loads((run / "run.json").read_text())
    jsonschema.validate(run_json, SCHEMAS["run"])
    assert run_json["config"]["model"]["path"] == str(qwen_dir) and run_json["engine"] == "verl"
    a = audit_json(run)
    assert a["issues"] == [] and a["summary"]["rollouts"] == 4 and a["summary"]["leaks"]["tokens"] == 0
    assert a["tokenizer"] == "tiny-qwen2/tokenizer.json" and a["summary"]["drift"]["checked"]
