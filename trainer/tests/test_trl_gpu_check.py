"""scripts/gpu-check-trl.sh --cpu-smoke: the trl engine's GPU check at toy size on CPU (trl-tiny's model, two GRPO
steps through the real run path against the real env server), as the GPU machine runs it at Qwen2.5-0.5B's size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, trainer_env

pytest.importorskip("trl")


def test_the_gpu_check_runs_at_toy_size_on_cpu_and_reports_the_log_prob_gap(tmp_path, demo_env):
    env = {**trainer_env(), "SAS_ENV_URL": demo_env.url, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    p = subprocess.run(
        # --single: the run as shipped (test_benchmark.py runs its other arm, off cuDNN's attention, too)
        [
            "bash",
            str(ROOT / "scripts" / "gpu-check-trl.sh"),
            "--cpu-smoke",
            "--single",
            "--work",
            str(tmp_path / "work"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "out" / "gpu-check-trl.json").read_text())
    assert (result["mode"], result["device"], result["status"], result["steps"]) == ("cpu-smoke", "cpu", "finished", 2)
    assert result["records"] == 2 * 16 and result["compared_tokens"] > 0
    # the update ran out of memory once (the stand-in, update only) and trained in halves, the rollout as it was
    assert result["out_of_memory"] == {"update_retries": 1, "rollout_retries": 0, "micro_batch_size": 4}
    # fp32 on CPU: the sampler's log-probs are the update's (the update's forwards in halves: the same)
    assert result["mean_abs_diff"] < 1e-3 and result["goal_met"] is True
    assert (
        result["trl_settings"]["rollout_logprob_kind"] == "raw"
        and result["trl_settings"]["reference_dtype"] == "float32"
    )
    assert (tmp_path / "out" / "gpu-check-trl.log").stat().st_size > 0
    assert os.path.isdir(tmp_path / "work" / "run" / "rollouts")
    assert "without_cudnn" not in result and [t["step"] for t in result["steps_timing"]] == [1, 2]
