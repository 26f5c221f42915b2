import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

# Tests import the package from the source tree (the extension runs it the same way, via PYTHONPATH).
TRAINER = Path(__file__).resolve().parents[1]
ROOT = TRAINER.parent
sys.path.insert(0, str(TRAINER))

NODE = shutil.which("node")
DEMO = ROOT / "examples" / "demo"


class EnvServer:
    """The real env server (src/server/main.ts, run from source) on an ephemeral loopback port."""

    def __init__(self, *args: str):
        if NODE is None:
            pytest.skip("node is not on PATH")
        self.proc = subprocess.Popen(
            [
                NODE,
                "-r",
                str(ROOT / "test" / "register.cjs"),
                str(ROOT / "src" / "server" / "main.ts"),
                "--port",
                "0",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the env server did not start: {self.proc.stderr.read()}")
        self.port = json.loads(line)["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        # drain stderr so the server never blocks on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def demo_env():
    """The env server over the demo corpus, rewarding with builtin:em."""
    s = EnvServer("--corpus", str(DEMO / "corpus.jsonl"), "--reward", "builtin:em")
    yield s
    s.close()


@pytest.fixture(scope="session")
def varied_env():
    """The env server over the demo corpus with a reward that varies with any response (a random tiny policy gets a
    learning signal from it)."""
    s = EnvServer(
        "--corpus",
        str(DEMO / "corpus.jsonl"),
        "--reward",
        str(ROOT / "test" / "fixtures" / "rewards" / "modules" / "varied.reward.ts"),
    )
    yield s
    s.close()


# One seeded RL run is one trajectory of a chaotic process, and its float arithmetic depends on the CPU and the thread
# count: the last bit of a matrix product or a GELU decides which tokens are sampled a few steps later. The learning
# tests (test_demo.py, test_demo_multihop.py) run their trainers pinned to one code path on any x86-64 CPU with AVX2:
# - ATEN_CPU_CAPABILITY=avx2: torch's own vectorised kernels (softmax, attention, reductions) at AVX2;
# - MKL_CBWR=COMPATIBLE: MKL's matrix products on its conditional-numerical-reproducibility branch that every x86
#   vendor runs. The AVX2 branch (stops 31-39) is honoured on Intel only: on an AMD EPYC MKL_VERBOSE reports
#   `CNR:AUTO` for MKL_CBWR=AVX2, AVX512, AVX or SSE4_2 alike, which is why the shortened demo learned on the Xeons
#   (0.016 -> 0.217) and not on the EPYC (0.016 -> 0.079) under the old pin. COMPATIBLE costs: sgemm 2.3x slower, the
#   tests ~1.6x;
# - ONEDNN_MAX_CPU_ISA=AVX2: oneDNN's JIT GELU (torch sends nn.GELU there, whatever ATEN_CPU_CAPABILITY says) gives
#   other bits at AVX-512 than at AVX2;
# - two threads (MKL's promise holds for a fixed thread count).
# Measured on one machine (stop 40, an AMD EPYC): each setting above changes the bits it names; identity across
# vendors rests on MKL's and oneDNN's documented code paths, not on a second machine.
PINNED_NUMERICS = (
    {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    if platform.machine() in ("x86_64", "AMD64")
    else {}
)


# The bits PINNED_NUMERICS gives: a matrix product, nn.GELU forward and backward, softmax and log-softmax at the tiny
# policy's sizes, hashed. Measured on stop 40's AMD EPYC; the learning tests print it and name it in their failures,
# so a trajectory that differs on another CPU says whether that CPU ran other bits (the pin does not hold there) or
# the same bits (the code changed).
NUMERICS_FINGERPRINT_MEASURED = "975be1095c"
_FINGERPRINT = """
import hashlib, torch
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 210, 128, generator=g, requires_grad=True)
w = torch.randn(128, 512, generator=g) / 11.3
h = torch.nn.functional.gelu(x @ w)
(h.square().mean()).backward()
s = torch.randn(8, 4, 210, 210, generator=g)
parts = [h, x.grad, torch.softmax(s, -1), torch.log_softmax(h @ w.T, -1)]
print(hashlib.sha1(b"".join(t.detach().numpy().tobytes() for t in parts)).hexdigest()[:10])
"""


def numerics_fingerprint() -> str:
    """NUMERICS_FINGERPRINT_MEASURED's computation run here, in a trainer's environment with PINNED_NUMERICS."""
    proc = subprocess.run(
        [sys.executable, "-c", _FINGERPRINT],
        capture_output=True,
        text=True,
        env={**trainer_env(), **PINNED_NUMERICS},
        timeout=120,
    )
    return proc.stdout.strip() if proc.returncode == 0 else f"(failed: {proc.stderr.strip()[-200:]})"


def cpu_name() -> str:
    """This CPU's model name (/proc/cpuinfo; the platform's processor elsewhere): a learning test's output names the
    machine, since CI runs on Intel and on AMD."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pin_report() -> str:
    fp = numerics_fingerprint()
    same = (
        "the same bits"
        if fp == NUMERICS_FINGERPRINT_MEASURED
        else "OTHER bits: the pin does not hold on this CPU, so the trajectory is not the measured one"
    )
    return f"on {cpu_name()} ({os.cpu_count()} CPUs): numerics fingerprint {fp} ({same}; measured {NUMERICS_FINGERPRINT_MEASURED})"


# Round-off. Two computations of the same float32 log-probs agree to their last bits only where they take the same
# kernels on the same shapes, which a CPU's vendor, its ISA, the thread count or a batch's shape can change: issue 48's
# Xeon resumed a run whose sampler and trainer then differed by 1.9e-6 at most where the straight run gave 9.5e-7 (one
# and two float32 ulps of a log-prob between 8 and 16), and a test compared the two at 1e-7. So a test compares:
# - a quantity that IS round-off (`rollout/logprob_diff*`: the sampler's log-probs against the trainer's) against the
#   bound that says the two agree, LOGPROB_AGREEMENT, never against another run's value;
# - a quantity computed from log-probs (losses, KL, ratios, entropies, …) at their scale: LOGPROB_ROUNDOFF, a few
#   ulps of a log-prob of magnitude up to 32 (ulp 3.8e-6), the most the round-off of the log-probs moves a mean of
#   them or of their differences.
LOGPROB_AGREEMENT = 1e-3
LOGPROB_ROUNDOFF = 1e-5
ROUNDOFF_METRICS = ("rollout/logprob_diff",)
# measured times, not reproduced by a resume: the step's phases, throughput, the env server's latencies (env_client),
# and the rollout writer's queue (how many steps its thread had still to write when a step was submitted: its pace)
TIMING_METRICS = (
    "timing_s/",
    "perf/",
    "time",
    "env/retrieve_ms/",
    "env/retrieve_wait_ms/",
    "env/reward_ms/",
    "env/reward_wait_ms/",
    "record/queue",
    "val/record/queue",
)


def assert_same_metrics(a: dict, b: dict, skip: tuple[str, ...] = ()) -> None:
    """Two metrics lines that are the same numbers (a run and its resume, a curriculum and the chain of runs it
    replaces): the same keys, each equal to float32 round-off at its scale (above); the round-off metrics below
    LOGPROB_AGREEMENT in both."""
    ignore = TIMING_METRICS + tuple(skip)
    keys = {k for k in a if not k.startswith(ignore)} - {"step"}
    assert keys == {k for k in b if not k.startswith(ignore)} - {"step"}, (
        a.get("step"),
        b.get("step"),
        sorted(keys ^ set(b)),
    )
    for k in sorted(keys):
        if k.startswith(ROUNDOFF_METRICS):
            assert a[k] <= LOGPROB_AGREEMENT and b[k] <= LOGPROB_AGREEMENT, (a.get("step"), k, a[k], b[k])
        else:
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=LOGPROB_ROUNDOFF), (a.get("step"), b.get("step"), k)


def f32_roundoff(x: Any, ulps: int = 16) -> float:
    """`ulps` float32 ulps of the largest magnitude in `x`: the tolerance of two computations of `x` that round
    differently (a fast path and the general one, two batch shapes)."""
    import torch

    return ulps * float(torch.finfo(torch.float32).eps) * max(1.0, float(x.detach().abs().max()))


def audit_json(run: Path) -> dict:
    """`search-agent-studio audit RUN --json` (the TypeScript CLI, from source) on a run directory: its report. Exit
    1 (issues found) is a report too; 2 (input it could not read) fails the test."""
    if NODE is None:
        pytest.skip("node is not on PATH")
    p = subprocess.run(
        [
            NODE,
            "-r",
            str(ROOT / "test" / "register.cjs"),
            str(ROOT / "src" / "cli" / "main.ts"),
            "audit",
            str(run),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout)


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TRAINER) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_pinned(cfg: dict, run_dir: Path, env_url: str, timeout: int = 1800) -> list[dict]:
    """`cfg` written beside `run_dir` (as `<run_dir>.run.json`), run by the trainer with PINNED_NUMERICS to its end;
    returns the run's metrics lines."""
    config = run_dir.parent / f"{run_dir.name}.run.json"
    config.write_text(json.dumps(cfg), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
            "--env-url",
            env_url,
        ],
        capture_output=True,
        text=True,
        env={**trainer_env(), **PINNED_NUMERICS},
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]


def evaluate_without_retrieval(cfg: dict, checkpoint: Path, run_dir: Path) -> dict:
    """The demos' last check: `checkpoint` evaluated on `cfg`'s held-out data, with its model and rollout settings and
    `/retrieve` returning nothing (a real env server with `--retriever none`). Evaluation only: no stages, no warm
    start, no RL step. Returns the step-0 evaluation's metrics."""
    blind = json.loads(json.dumps(cfg))
    blind["model"]["init"] = str(checkpoint)
    blind["retriever"] = {"kind": "none", "topk": 3}
    blind["train"] = {"steps": 0}
    server = EnvServer("--retriever", "none", "--reward", "builtin:em")
    try:
        metrics = run_pinned(blind, run_dir, server.url, timeout=900)
    finally:
        server.close()
    return next(m for m in metrics if "val/em" in m)


def tiny_config(**overrides) -> dict:
    """A small, fast run config over the demo data (the built-in tiny model)."""
    cfg = {
        "seed": 7,
        "data": {"train": str(DEMO / "train.jsonl"), "eval": str(DEMO / "eval.jsonl"), "eval_size": 4},
        "model": {
            "kind": "tiny",
            "tiny": {"layers": 1, "d_model": 32, "heads": 2, "max_len": 1024, "vocab": [str(DEMO / "corpus.jsonl")]},
        },
        "rollout": {
            "batch_size": 2,
            "n": 3,
            "max_turns": 2,
            "max_turn_tokens": 12,
            "max_response_length": 160,
            "max_obs_length": 120,
        },
        "optim": {"lr": 1e-3, "mini_batch_size": 6, "micro_batch_size": 4},
        # A queue no loaded test machine fills: a writer 2 steps behind (the default) would record only a step's flagged
        # groups, so what a run records, and its record/* metrics, would depend on the machine's load.
        "train": {"steps": 2, "eval_every": 1, "checkpoint_every": 1, "record": {"queue": 64}},
    }
    for path, value in overrides.items():
        node = cfg
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return cfg
