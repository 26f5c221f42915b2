"""`python -m search_agent_trainer.engines.trl.gpu_check [--cpu-smoke] [--env-url URL] [--out DIR]`: engine "trl" on
a GPU (scripts/gpu-check-trl.sh runs it): two GRPO steps of a random model with Qwen2.5-0.5B's layers (hidden 896,
24 layers, 14 heads, 2 KV heads, MLP 4864; trl-tiny's 800-token tokenizer and vocabulary: no weights or tokenizer
to download), bf16, through the real run path (`python -m search_agent_trainer`: TRL's GRPOTrainer, our multi-turn
rollout with our KV-cached sampler, the env server's /retrieve and /reward, a bf16 reference), then the
rollout-vs-trainer log-prob gap over the trained tokens of the records: mean and max |rollout_logprob − logprob|
(on-policy, the goal is a mean under 0.01). The update runs out of memory on purpose (`test.update_memory_rows`, a
stand-in refusing its forwards of more than 4 sequences): its micro-batches of 8 are trained again in halves, on the
device — `out_of_memory` says how many times (one) and the size kept. Then the same run once more with SDPA's cuDNN
attention off in the trainer's process (`without_cudnn`; the builtin trainer turns it off, engine trl keeps torch's
choice): each step's seconds (`steps_timing`: the step, our rollout, the rest — TRL's reference pass and update) and
the last step's `trl_passes_cudnn_off_speedup`. One JSON line on stdout (and, under --out, gpu-check-trl.json with the
trainer's log).

`--cpu-smoke`: the same at toy size on CPU (trl-tiny's own model, fp32): what a machine without a GPU can run, and
what the tests run. Without `--env-url` the env server is started from the package's build (`node dist/server.js`;
$SAS_NODE names node) over the demo corpus, builtin:em.

Not measured here: TRL's vLLM path (`trl.use_vllm`): the GPU machine has no vLLM (docs/engines.md)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"
# Qwen2.5-0.5B's config.json, less its vocabulary (the tokenizer's decides it)
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
}
GOAL_MEAN_ABS_DIFF = 0.01


def model_dir(out: Path, smoke: bool) -> Path:
    """The model directory (config.json and tokenizer; `model.random_init` makes the weights)."""
    src = EXAMPLES / "trl-tiny" / "model"
    if smoke:
        return src
    d = out / "qwen2.5-0.5b-shape"
    d.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "config.json":
            shutil.copy(f, d / f.name)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config.update(QWEN25_05B)
    config["layer_types"] = ["full_attention"] * QWEN25_05B["num_hidden_layers"]
    (d / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return d


def run_config(model: Path, smoke: bool) -> dict[str, Any]:
    cfg = json.loads((EXAMPLES / "trl-tiny.run.json").read_text(encoding="utf-8"))
    cfg.pop("$schema", None)
    cfg["name"] = "gpu-check-trl" + ("-cpu-smoke" if smoke else "")
    cfg["data"] = {**cfg["data"], "train": str(EXAMPLES / cfg["data"]["train"])}
    cfg["data"].pop("eval", None)
    cfg["data"].pop("eval_size", None)
    cfg["model"] = {
        "kind": "hf",
        "path": str(model),
        "random_init": True,
        "device": "cpu" if smoke else "cuda",
        "dtype": "fp32" if smoke else "bf16",
        "gradient_checkpointing": not smoke,
    }
    cfg["rollout"] = {
        **cfg["rollout"],
        "batch_size": 4 if smoke else 8,
        "n": 4,
        "max_turns": 2,
        "max_turn_tokens": 16 if smoke else 64,
        "max_response_length": 400 if smoke else 1024,
    }
    cfg["algorithm"] = {"name": "grpo", "kl_coef": 0.001}  # a reference model (bf16 under bf16 compute)
    # one optimizer step a step: on-policy
    cfg["optim"] = {
        "lr": 1e-6,
        "mini_batch_size": 16 if smoke else 32,
        "micro_batch_size": 8,
    }
    cfg["train"] = {"steps": 2, "eval_every": 0, "checkpoint_every": 0}
    # the update's recovery from running out of memory, on the device: a stand-in refuses its forwards of more than 4
    # sequences (the rollout and log-prob passes run as they are), so TRL's micro-batches of 8 run again in halves
    cfg["test"] = {"update_memory_rows": 4}
    return cfg


def out_of_memory(run_dir: Path) -> dict[str, Any]:
    """The run's halvings after running out of device memory (its warning events): how many of each, the last sizes."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines() if line]
    warned = [e for e in events if e.get("event") == "warning" and str(e.get("cause", "")).endswith("-out-of-memory")]
    out: dict[str, Any] = {
        "update_retries": sum(e["cause"] == "update-out-of-memory" for e in warned),
        "rollout_retries": sum(e["cause"] == "rollout-out-of-memory" for e in warned),
    }
    for e in warned:
        for k in ("micro_batch_size", "max_batch_tokens"):
            if k in e:
                out[k] = e[k]
    return out


def training_records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every training record of the run, step by step: the token store's committed steps (`rollouts/step-N/`, the
    default `train.record.format`) and v2 JSONL files (`rollouts/step-N.jsonl`, `format: "jsonl"`)."""
    from ...token_store import committed_steps, read_step

    rollouts = run_dir / "rollouts"
    for d in committed_steps(rollouts):
        if d.name.startswith("step-"):
            yield from read_step(d)
    for f in sorted(rollouts.glob("step-*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def gap(run_dir: Path) -> dict[str, Any]:
    """|rollout_logprob − logprob| over the trained tokens (loss_mask 1, both recorded) of every training record."""
    diffs: list[float] = []
    records = 0
    for rec in training_records(run_dir):
        t = rec["tokens"]
        records += 1
        diffs += [
            abs(a - b)
            for a, b, m in zip(t["rollout_logprob"], t["logprob"], t["loss_mask"])
            if m == 1 and a is not None and b is not None
        ]
    return {
        "records": records,
        "compared_tokens": len(diffs),
        "mean_abs_diff": sum(diffs) / len(diffs) if diffs else None,
        "max_abs_diff": max(diffs) if diffs else None,
    }


class EnvServer:
    """node dist/server.js over the demo corpus with builtin:em, on an ephemeral loopback port."""

    def __init__(self) -> None:
        node = os.environ.get("SAS_NODE") or shutil.which("node")
        server = ROOT / "dist" / "server.js"
        if not node or not server.exists():
            raise SystemExit(
                f"gpu_check: the env server needs node ({node or 'not found: set SAS_NODE'}) and the package's build ({server}{'' if server.exists() else ': not built, npm run build'}); or pass --env-url"
            )
        self.proc = subprocess.Popen(
            [
                node,
                str(server),
                "--port",
                "0",
                "--corpus",
                str(EXAMPLES / "demo" / "corpus.jsonl"),
                "--reward",
                "builtin:em",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        try:
            self.url = f"http://127.0.0.1:{json.loads(line)['port']}"
        except (ValueError, KeyError):
            self.proc.kill()
            raise SystemExit(f"gpu_check: the env server did not start (its first line: {line!r})") from None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# The trainer's own entry point with SDPA's cuDNN attention turned off for the whole process (torch ≥ 2.2 has the
# switch): the benchmark's other arm, not a setting of the product (its TRL passes keep torch's choice)
WITHOUT_CUDNN = (
    "import runpy, torch\n"
    "if hasattr(torch.backends.cuda, 'enable_cudnn_sdp'):\n"
    "    torch.backends.cuda.enable_cudnn_sdp(False)\n"
    "runpy.run_module('search_agent_trainer', run_name='__main__', alter_sys=True)\n"
)


def step_timings(run_dir: Path) -> list[dict[str, float]]:
    """Each step's seconds from metrics.jsonl: the whole step, our rollout, and the rest — TRL's reference pass and
    update, which is what SDPA's backend changes (the reward and retrieval wait on the env server)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        m = json.loads(line) if line.strip() else {}
        if "timing_s/step" in m:
            step, rollout = m["timing_s/step"], m.get("timing_s/rollout", 0.0)
            rows.append(
                {
                    "step": m["step"],
                    "step_s": round(step, 3),
                    "rollout_s": round(rollout, 3),
                    "trl_passes_s": round(step - rollout - m.get("timing_s/reward", 0.0), 3),
                }
            )
    return rows


def check(work: Path, smoke: bool, env_url: str | None, without_cudnn: bool = False) -> dict[str, Any]:
    """The run in `work` (the config, the model directory, the run directory, trainer.log), and its result;
    `without_cudnn`: the trainer's process with SDPA's cuDNN attention off (WITHOUT_CUDNN)."""
    import torch

    if not smoke and not torch.cuda.is_available():
        raise SystemExit(
            "gpu_check: no CUDA device (torch.cuda.is_available() is False); --cpu-smoke runs the toy size on CPU"
        )
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "gpu-check-trl.run.json"
    cfg_path.write_text(json.dumps(run_config(model_dir(work, smoke), smoke), indent=2), encoding="utf-8")
    run_dir = work / "run"
    server = None if env_url else EnvServer()
    try:
        t0 = time.perf_counter()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "trainer"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
        p = subprocess.run(
            [
                sys.executable,
                *(["-c", WITHOUT_CUDNN] if without_cudnn else ["-m", "search_agent_trainer"]),
                "--config",
                str(cfg_path),
                "--run-dir",
                str(run_dir),
                "--env-url",
                env_url or server.url,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
    finally:
        if server:
            server.close()
    (work / "trainer.log").write_text(p.stderr, encoding="utf-8")
    if p.returncode != 0:
        raise SystemExit(
            f"gpu_check: the trainer exited {p.returncode}; the end of its log:\n"
            + "\n".join(p.stderr.splitlines()[-30:])
        )
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    g = gap(run_dir)
    from importlib import metadata

    return {
        "check": "trl",
        "mode": "cpu-smoke" if smoke else "gpu",
        "device": torch.cuda.get_device_name(0) if not smoke else "cpu",
        "torch": torch.__version__,
        "trl": metadata.version("trl"),
        "model": "trl-tiny" if smoke else "Qwen2.5-0.5B layers (random), 800-token vocabulary",
        "status": run.get("status"),
        "steps": run.get("step"),
        "trl_settings": run.get("trl"),
        "seconds": round(seconds, 1),
        "steps_timing": step_timings(run_dir),
        "out_of_memory": out_of_memory(run_dir),
        **g,
        "goal_mean_abs_diff": GOAL_MEAN_ABS_DIFF,
        "goal_met": g["mean_abs_diff"] is not None and g["mean_abs_diff"] < GOAL_MEAN_ABS_DIFF,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="toy size on CPU (trl-tiny's model, fp32)")
    ap.add_argument("--env-url", help="an env server already running (else node dist/server.js is started)")
    ap.add_argument("--out", help="a folder for the result (gpu-check-trl.json) and the trainer's log")
    ap.add_argument("--work", help="where the run goes (default: a temporary directory)")
    ap.add_argument("--single", action="store_true", help="only the run as shipped, not its arm off cuDNN's attention")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="gpu-check-trl-"))
    result = check(work, a.cpu_smoke, a.env_url)
    # the same run with TRL's passes off cuDNN's attention, which the builtin trainer turns off (on an H200 its update
    # was 4.1× faster at 0.5B without it): the step after the first, whose update ran out of memory on purpose
    if not a.single:
        other = check(work / "without-cudnn", a.cpu_smoke, a.env_url, without_cudnn=True)
        result["without_cudnn"] = {
            k: other[k] for k in ("status", "seconds", "steps_timing", "mean_abs_diff", "max_abs_diff")
        }
        last, off = result["steps_timing"][-1:], other["steps_timing"][-1:]
        if last and off and off[0]["trl_passes_s"] > 0:
            result["trl_passes_cudnn_off_speedup"] = round(last[0]["trl_passes_s"] / off[0]["trl_passes_s"], 3)
    result["work"] = str(work)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu-check-trl.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        shutil.copy(work / "trainer.log", out / "gpu-check-trl.log")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
