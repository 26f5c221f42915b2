"""`export verl` (export.py): the files a user launches on their own cluster, checked the way they will run — the
directory moved elsewhere, launch.sh's own expansion of the overrides (bash), and what it passes composed with veRL
0.9.1's Hydra config and validated by veRL's code (in .venv-verl; skipped elsewhere)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="the veRL engine's tests run in .venv-verl (npm run test:verl)")

from conftest import trainer_env  # noqa: E402
from hf_fixture import build_tiny_qwen2, demo_texts  # noqa: E402
from search_agent_trainer.config import config_from_dict  # noqa: E402
from search_agent_trainer.engines.verl.export import EXPORT_DIR, export  # noqa: E402
from search_agent_trainer.engines.verl.main import check_config, compose_config  # noqa: E402
from verl_harness import DEMO, run_config  # noqa: E402

# TEST DOUBLE for veRL's Python (a training run needs Ray over GPUs): records what launch.sh runs it with.
FAKE_PYTHON = """#!/bin/sh
exec "%s" -c 'import json, os, sys; json.dump({"argv": sys.argv[1:], "PYTHONPATH": os.environ.get("PYTHONPATH")}, open(os.environ["ARGS_OUT"], "w"))' "$@"
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    qwen = build_tiny_qwen2(tmp / "tiny-qwen2", demo_texts(DEMO))
    cfg = run_config(
        qwen, retriever={"kind": "demo", "topk": 2}, verl={"gpus_per_node": 2, "nodes": 2, "param_offload": True}
    )
    result = export(cfg, tmp / "out")
    moved = tmp / "elsewhere" / "my run"  # copied to the cluster's shared filesystem (a space in the path)
    shutil.copytree(tmp / "out", moved)
    shutil.rmtree(tmp / "out")
    return cfg, result, moved, tmp


def launch(
    moved: Path, tmp: Path, *extra: str, env_url: str | None = "http://127.0.0.1:8790"
) -> tuple[subprocess.CompletedProcess, dict]:
    fake = tmp / "fake-python"
    fake.write_text(FAKE_PYTHON % sys.executable)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("SAS_ENV_URL", "PYTHONPATH")}
    env.update(PYTHON=str(fake), ARGS_OUT=str(tmp / "args.json"), **({"SAS_ENV_URL": env_url} if env_url else {}))
    (tmp / "args.json").unlink(missing_ok=True)
    r = subprocess.run(["bash", str(moved / "launch.sh"), *extra], env=env, capture_output=True, text=True, cwd=tmp)
    return r, (json.loads((tmp / "args.json").read_text()) if r.returncode == 0 else {})


def test_the_export_is_portable_files(exported):
    cfg, result, moved, tmp = exported
    assert result["files"] == [
        "launch.sh",
        "overrides.txt",
        "run/verl/agent_loops.yaml",
        "run/verl/run-config.json",
        "run/verl/tools.yaml",
        "run/verl/train.parquet",
        "run/verl/val.parquet",
    ]
    text = (moved / "overrides.txt").read_text()
    # nothing of where it was made
    assert str(tmp / "out") not in text and f"data.train_files={EXPORT_DIR}/run/verl/train.parquet" in text
    # named at launch
    assert "SAS_ENV_URL" not in text and "env_url" not in (moved / "run" / "verl" / "agent_loops.yaml").read_text()
    assert (moved / "trainer" / "search_agent_trainer" / "engines" / "verl" / "agent_loop.py").exists()
    assert not list((moved / "trainer").rglob("__pycache__"))
    assert os.access(moved / "launch.sh", os.X_OK)


def test_launch_sh_runs_main_with_overrides_veRL_composes_and_validates(exported):
    cfg, result, moved, tmp = exported
    r, ran = launch(moved, tmp, "trainer.total_training_steps=7")
    assert r.returncode == 0, r.stderr
    argv = ran["argv"]
    assert argv[:2] == ["-m", "search_agent_trainer.engines.verl.main"]
    assert ran["PYTHONPATH"].split(os.pathsep)[0] == str(moved / "trainer")
    config = compose_config(argv[2:])
    check_config(config)  # veRL's validate_config and config classes (the model directory is loaded too)
    assert (
        config.data.train_files == str(moved / "run" / "verl" / "train.parquet")
        and Path(config.data.train_files).exists()
    )
    assert (
        Path(config.actor_rollout_ref.rollout.agent.agent_loop_config_path).exists()
        and Path(config.sas.config).exists()
    )
    assert config.sas.run_dir == str(moved / "run") and config.trainer.default_local_dir == str(
        moved / "run" / "checkpoints" / "verl"
    )
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.PYTHONPATH == str(moved / "trainer") and env_vars.SAS_ENV_URL == "http://127.0.0.1:8790"
    assert (
        config.trainer.nnodes == 2
        and config.trainer.n_gpus_per_node == 2
        and config.actor_rollout_ref.actor.fsdp_config.param_offload is True
    )
    assert config.trainer.total_training_steps == 7  # the user's override, last, wins
    # the copied package is what the workers import
    out = subprocess.run(
        [sys.executable, "-c", "import search_agent_trainer.engines.verl.agent_loop as m; print(m.__file__)"],
        env={**trainer_env(), "PYTHONPATH": str(moved / "trainer")},
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    assert out.stdout.strip().startswith(str(moved / "trainer")), out.stderr


def test_launch_sh_without_an_env_url_says_so(exported):
    _, _, moved, tmp = exported
    r, _ = launch(moved, tmp, env_url=None)
    assert r.returncode != 0 and "SAS_ENV_URL" in r.stderr


def test_the_export_command_refuses_a_config_veRL_cannot_train_naming_the_key(tmp_path):
    cfg = tmp_path / "c.run.json"
    cfg.write_text(json.dumps({"data": {"train": str(DEMO / "train.jsonl")}, "model": {"kind": "tiny"}}))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer.engines.verl.main",
            "export",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "out"),
        ],
        env=trainer_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "model.kind" in json.loads(r.stdout.strip().splitlines()[-1])["message"]
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_shipped_verl_example_in_search_r1s_gpu_settings_passes_veRLs_checks(tmp_path):
    """examples/*verl*.run.json with its data and model swapped for the demo's and the tiny model (the rest as
    shipped: 8 GPUs, batch 512 × 5, mini-batch 256 prompts, offload): veRL's own batch-size and config checks."""
    examples = sorted((DEMO.parent).rglob("*verl*.run.json"))  # the 8-GPU one and examples/one-gpu's
    assert examples
    qwen = build_tiny_qwen2(tmp_path / "tiny-qwen2", demo_texts(DEMO))
    for path in examples:
        raw = json.loads(path.read_text())
        raw["data"].update(train=str(DEMO / "train.jsonl"), eval=str(DEMO / "eval.jsonl"))
        raw["model"]["path"] = str(qwen)
        raw.pop("retriever")
        raw.pop("$schema", None)
        cfg = config_from_dict(raw, base=path.parent)  # its preset resolved, as the host resolves it
        result = export(cfg, tmp_path / path.stem)
        config = compose_config([o.replace(EXPORT_DIR, str(tmp_path / path.stem)) for o in result["overrides"]])
        check_config(config)
        assert (
            config.trainer.n_gpus_per_node == raw["verl"].get("gpus_per_node", raw.get("devices", 1))
            and config.data.train_batch_size == raw["rollout"]["batch_size"]
        )
        assert (
            config.actor_rollout_ref.rollout.n == cfg.rollout.n
            and config.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.rollout.n == cfg.optim.mini_batch_size
        )
