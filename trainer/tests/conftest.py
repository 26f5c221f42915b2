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

# What every trainer process sets before it computes (MKL's strict reproducibility, oneDNN's cache sizes), set here
# too: the tests that train, resume, replay or fork in this process compute as the trainer does, with results that do
# not depend on where this process's allocator put the inputs (on an Intel CPU, MKL's default does: docs/trainer.md).
# The trainer processes a test starts set it themselves; a test that needs MKL's default deletes the variable.
from search_agent_trainer import cpu_env  # noqa: E402 - the path above first

cpu_env.apply()

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
# tests (test_demo.py, test_demo_multihop.py) run their trainers pinned to one code path, with
# - ATEN_CPU_CAPABILITY=avx2: torch's own vectorised kernels (softmax, attention, reductions) at AVX2;
# - ONEDNN_MAX_CPU_ISA=AVX2: oneDNN's JIT GELU (torch sends nn.GELU there, whatever ATEN_CPU_CAPABILITY says) gives
#   other bits at AVX-512 than at AVX2;
# - two threads (MKL's promise holds for a fixed thread count);
# - and MKL's matrix products on one of two conditional-numerical-reproducibility branches:
#   PINNED_NUMERICS: MKL_CBWR=AVX2, the same bits on every Intel CPU with AVX2 (MKL's documentation). MKL honours it on
#   Intel only: on an AMD EPYC MKL_VERBOSE reports `CNR:AUTO`, and every MKL_CBWR or MKL_ENABLE_INSTRUCTIONS setting
#   but COMPATIBLE gives the same bits as none. One trajectory per vendor, at the vendor's speed.
#   PORTABLE_NUMERICS: MKL_CBWR=COMPATIBLE (SSE2), the branch every x86 vendor runs: one trajectory on Intel and AMD,
#   1.7x slower (stop 50's EPYC: the one-hop test 410 s against 245 s, the two-hop one 875 s against 526 s).
# Which one a test takes is what its verdict rests on (issue 48). test_demo_multihop.py's held on every trajectory
# measured, on both vendors (its docstring), so it runs each vendor's own at that vendor's speed: its thresholds are
# what every trajectory held, not one's digits. test_demo.py's (a gain in 60 RL steps) is a draw over trajectories:
# under PINNED_NUMERICS one of five seeds found no reward in 60 steps (its docstring), so an Intel CPU's own
# trajectory, never measured, could fail there every time; it keeps the one trajectory measured to pass, everywhere.
PINNED_NUMERICS = (
    {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    if platform.machine() in ("x86_64", "AMD64")
    else {}
)
PORTABLE_NUMERICS = {**PINNED_NUMERICS, "MKL_CBWR": "COMPATIBLE"} if PINNED_NUMERICS else {}


# The bits each pin gives (a matrix product, nn.GELU forward and backward, softmax and log-softmax at the tiny policy's
# sizes, hashed): PINNED_NUMERICS's by CPU vendor (/proc/cpuinfo's vendor_id; measured on stop 50's AMD EPYC, family
# 26, and on stop 55's Intel Xeon, family 6 model 207, AVX512-BF16 and AVX512-FP16, no AMX exposed by its hypervisor),
# PORTABLE_NUMERICS's on every vendor (measured on stop 40's EPYC; the same on stop 55's Xeon). The learning tests print it and name it in their failures, so a trajectory that fails on a CPU says
# whether that CPU ran the measured bits (then the code changed what the run does) or other ones (another trajectory:
# not necessarily a regression).
NUMERICS_FINGERPRINT_MEASURED = {"AuthenticAMD": "efd121b298", "GenuineIntel": "874e66778f"}
PORTABLE_FINGERPRINT_MEASURED = "975be1095c"
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


def numerics_fingerprint(numerics: dict[str, str]) -> str:
    """NUMERICS_FINGERPRINT_MEASURED's computation run here, in a trainer's environment with `numerics`."""
    proc = subprocess.run(
        [sys.executable, "-c", _FINGERPRINT],
        capture_output=True,
        text=True,
        env={**trainer_env(), **numerics},
        timeout=120,
    )
    return proc.stdout.strip() if proc.returncode == 0 else f"(failed: {proc.stderr.strip()[-200:]})"


def _cpuinfo(field: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith(field):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """This CPU's model name (/proc/cpuinfo; the platform's processor elsewhere): a learning test's output names the
    machine, since CI runs on Intel and on AMD."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id (GenuineIntel, AuthenticAMD), or the platform's machine elsewhere."""
    return _cpuinfo("vendor_id") or platform.machine()


# The learning tests' seed (the recipes' own, 1, unless SAS_LEARNING_SEED says otherwise): another seed is another
# trajectory, which is how their thresholds' margins are measured (`SAS_LEARNING_SEED=3 npm run test:learning`).
LEARNING_SEED = int(os.environ.get("SAS_LEARNING_SEED") or 1)


def pin_report(numerics: dict[str, str]) -> str:
    """Where a learning test ran (the CPU's model and vendor, the seed) and whether it ran the measured bits of its
    pin (`numerics`: PINNED_NUMERICS or PORTABLE_NUMERICS)."""
    fp = numerics_fingerprint(numerics)
    vendor = cpu_vendor()
    portable = numerics.get("MKL_CBWR") == "COMPATIBLE"
    measured = PORTABLE_FINGERPRINT_MEASURED if portable else NUMERICS_FINGERPRINT_MEASURED.get(vendor)
    where = "every vendor" if portable else vendor
    if measured is None:
        same = f"none measured on {vendor} yet: this is its first trajectory"
    elif fp == measured:
        same = f"the bits measured for {where}"
    else:
        same = (
            f"OTHER bits than {measured}, measured for {where}: the pin does not hold on this CPU, another trajectory"
        )
    pin = "portable" if portable else "per-vendor"
    return f"on {cpu_name()} ({vendor}, {os.cpu_count()} CPUs), seed {LEARNING_SEED}, {pin} pin: numerics fingerprint {fp} ({same})"


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
# ... and under bf16 autocast, where the sampler's decode (a row at a time, against a KV cache) and the trainer's
# whole-sequence pass round their bf16 products differently: bf16 keeps 8 bits (eps 2^-7 = 0.0078). On a 2-core AMD
# EPYC of family 25 (Zen 4), whose numerics probe chose bf16 for the two-hop demo (issue 48, stop 63), the demo's
# first RL step measured 0.0089 and its 400 steps a median of 0.110 and at most 0.176: the bound is ~3x that, inside
# the ratio 0.5-2 (|d log p| 0.69) at which `audit` flags a token.
LOGPROB_AGREEMENT_BF16 = 0.5
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


def logprob_agreement(dtype: str) -> float:
    """The bound on `rollout/logprob_diff*` of a run that computed in `dtype` (run.json's numerics.dtype)."""
    return LOGPROB_AGREEMENT_BF16 if dtype == "bf16" else LOGPROB_AGREEMENT


def assert_same_metrics(a: dict, b: dict, skip: tuple[str, ...] = (), dtype: str = "fp32") -> None:
    """Two metrics lines that are the same numbers (a run and its resume, a curriculum and the chain of runs it
    replaces): the same keys, each equal to float32 round-off at its scale (above); the round-off metrics below the
    agreement bound of the dtype the runs computed in (`logprob_agreement`) in both."""
    ignore = TIMING_METRICS + tuple(skip)
    keys = {k for k in a if not k.startswith(ignore)} - {"step"}
    assert keys == {k for k in b if not k.startswith(ignore)} - {"step"}, (
        a.get("step"),
        b.get("step"),
        sorted(keys ^ set(b)),
    )
    bound = logprob_agreement(dtype)
    for k in sorted(keys):
        if k.startswith(ROUNDOFF_METRICS):
            assert a[k] <= bound and b[k] <= bound, (a.get("step"), k, a[k], b[k], dtype, bound)
        else:
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=LOGPROB_ROUNDOFF), (a.get("step"), b.get("step"), k)


def f32_roundoff(x: Any, ulps: int = 16) -> float:
    """`ulps` float32 ulps of the largest magnitude in `x`: the tolerance of two computations of `x` that round
    differently (a fast path and the general one, two batch shapes)."""
    import torch

    return ulps * float(torch.finfo(torch.float32).eps) * max(1.0, float(x.detach().abs().max()))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (a process group's MASTER_PORT)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_json(*args: str, ok: tuple[int, ...] = (0,)) -> dict:
    """`search-agent-studio ARGS` (the TypeScript CLI, run from source, as a user runs it) whose output is JSON; an
    exit code outside `ok` fails the test."""
    if NODE is None:
        pytest.skip("node is not on PATH")
    p = subprocess.run(
        [NODE, "-r", str(ROOT / "test" / "register.cjs"), str(ROOT / "src" / "cli" / "main.ts"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode in ok, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout)


def audit_json(run: Path) -> dict:
    """`search-agent-studio audit RUN --json` on a run directory: its report. Exit 1 (issues found) is a report too;
    2 (input it could not read) fails the test."""
    return cli_json("audit", str(run), "--json", ok=(0, 1))


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TRAINER) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_pinned(
    cfg: dict, run_dir: Path, env_url: str, timeout: int = 1800, numerics: dict[str, str] = PINNED_NUMERICS
) -> list[dict]:
    """`cfg` written beside `run_dir` (as `<run_dir>.run.json`), run by the trainer with `numerics` (PINNED_NUMERICS
    unless said) to its end; returns the run's metrics lines."""
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
        env={**trainer_env(), **numerics},
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]


def evaluate_without_retrieval(
    cfg: dict, checkpoint: Path, run_dir: Path, numerics: dict[str, str] = PINNED_NUMERICS
) -> dict:
    """The demos' last check: `checkpoint` evaluated on `cfg`'s held-out data, with its model and rollout settings and
    `/retrieve` returning nothing (a real env server with `--retriever none`). Evaluation only: no stages, no warm
    start, no RL step. Returns the step-0 evaluation's metrics."""
    blind = json.loads(json.dumps(cfg))
    blind["model"]["init"] = str(checkpoint)
    blind["retriever"] = {"kind": "none", "topk": 3}
    blind["train"] = {"steps": 0}
    server = EnvServer("--retriever", "none", "--reward", "builtin:em")
    try:
        metrics = run_pinned(blind, run_dir, server.url, timeout=900, numerics=numerics)
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
