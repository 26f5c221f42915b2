"""The run's compute precision, chosen by measurement (`model.dtype: "fastest"`, the demo's).

Whether bf16 autocast is faster than fp32 on a CPU is not written in its flags. On a 2-core AMD EPYC with
AVX512-BF16 the demo's step is 1.19× faster in bf16; on a 2-core Xeon with AVX512-BF16 and AMX the same warm start
was 1.4× *slower* in bf16 (issue 48). So `fastest` times the run's own model, at the run's own shapes, in both:

- one micro-batch's forward and backward through `window_stats` (the log-probs every loss is built from):
  `optim.micro_batch_size` sequences of the longest prompt plus half the response budget;
- a decode burst through `LMGenerator` (the rollout's own code): one wave of `rollout.batch_size × n` rows at that
  context length, DECODE_TOKENS tokens each;

interleaved (fp32, bf16, bf16, fp32, …) after a round that warms both up, keeping each one's fastest round. It
measures on one thread, in the CPU time of that thread: what a kernel costs in each dtype, which other work on the
machine does not change — wall time does, and with torch's threads spinning while they wait for each other, by far
(on the EPYC with other work running, a two-thread decode burst measured 0.58 s in fp32 and 1.68 s in bf16, where
the same kernels single-threaded cost 0.14 s and 0.20 s of CPU; the two-thread probe chose fp32 there, the
single-threaded one bf16). The two are weighed into an RL step's model time (its forward+backward passes:
`optim.ppo_epochs` × its micro-batches; its decode steps: `rollout.max_turns` × `rollout.max_turn_tokens` per
wave). bf16 is kept unless it is more than MARGIN slower than fp32: inside the margin the two count as a tie, and a
tie goes to bf16, the numerics the demo's recipe was tuned in (docs/demo.md, stop 41). A CPU without native bf16
computes in fp32 without measuring (bf16 is converted there, several times slower); a GPU follows
`bf16_where_native`'s rule.

The same machine must give the same run every time, and a measurement moves with the machine's load: the first
decision for a (machine, torch, thread count, ISA settings, model, shapes) is kept in a cache file,
`$XDG_CACHE_HOME/search-agent-studio/numerics.json` (`~/.cache/…`), and every later run with the same key uses it
without measuring (delete the file to measure again); a resumed run keeps the choice its checkpoint records.
run.json's `numerics` says what was chosen, from where, why, and the seconds measured.

The probe leaves no state the run reads: it runs under a forked RNG, its gradients are dropped, and nothing it touches
is read later: a `fastest` run that measured is, to the bit, the run that read its cached choice (tested on the demo's
model), and the run that asked for that dtype (to round-off, tested on a small config; test_numerics.py). To the bit
needs MKL's strict reproducibility mode, which every trainer process sets (cpu_env.py): on stop 55's Intel Xeon
without it, the demo that measured in its own process and the runs that read the cache were two trajectories from
the warm start on — MKL's results depended on where the probe's allocations left the run's tensors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .policy import compute_dtype, cpu_has_native_bf16, window_stats

# bf16 stays unless it measured more than this much slower than fp32 (a tie goes to bf16).
MARGIN = 0.10
DECODE_TOKENS = 9  # a decode burst: the prefill's token and 8 decode forwards
ROUNDS = 2  # measured rounds after the warm-up round…
BUDGET_S = 10.0  # … fewer once the probe has run this long (a large model on CPU)
CACHE_VERSION = 1
# What the kernels a run takes depend on, besides the hardware: recorded with every measurement and in its key.
ISA_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


@dataclass
class Numerics:
    """What a run computes in: `dtype` "bf16" (autocast, fp32 master weights) or "fp32"."""

    requested: str  # model.dtype as configured
    dtype: str
    source: str  # config | device | no-native-bf16 | measured | cached | checkpoint
    reason: str
    seconds: dict[str, dict[str, float]] | None = None  # per dtype: train, decode, step (the estimate compared)
    machine: dict[str, Any] | None = None

    @property
    def autocast(self) -> torch.dtype | None:
        return torch.bfloat16 if self.dtype == "bf16" else None

    def record(self) -> dict[str, Any]:
        """run.json's `numerics`."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        what = "bf16 autocast, fp32 master weights" if self.dtype == "bf16" else "fp32"
        return (
            what
            if self.source == "config" and self.requested != "bf16_where_native"
            else f"{what} (model.dtype {self.requested}: {self.reason})"
        )


@dataclass
class ProbeShapes:
    """The shapes the probe times, and how many of each an RL step runs."""

    rows: int  # a micro-batch's sequences
    length: int  # their length
    window: int  # their response window (the positions in the loss)
    wave: int  # a decode batch's rows
    context: int  # the context a decode burst starts from
    micro_batches: int  # forward+backward passes per RL step
    decode_steps: int  # decode forwards per RL step

    @staticmethod
    def of(cfg: Any, longest_prompt: int, max_len: int, max_batch_tokens: int) -> ProbeShapes:
        r, o = cfg.rollout, cfg.optim
        window = max(1, r.max_response_length // 2)
        length = max(2, min(max_len, longest_prompt + window))
        window = min(window, length - 1)
        batch_rows = max(1, r.batch_size * r.n)
        fits = max(1, max_batch_tokens // max(1, longest_prompt + r.max_response_length))
        wave = max(1, min(batch_rows, max(r.n, fits // max(1, r.n) * r.n)))
        turn_tokens = r.max_turn_tokens or r.max_response_length
        return ProbeShapes(
            rows=max(1, min(o.micro_batch_size, batch_rows)),
            length=length,
            window=window,
            wave=wave,
            context=max(1, min(length, max_len - DECODE_TOKENS - 1)),
            micro_batches=o.ppo_epochs * math.ceil(batch_rows / max(1, o.micro_batch_size)),
            decode_steps=math.ceil(batch_rows / wave) * r.max_turns * turn_tokens,
        )


def decide(seconds: dict[str, dict[str, float]], margin: float = MARGIN) -> tuple[str, str]:
    """The dtype and why, from the probe's seconds: bf16 unless its step estimate is more than `margin` above fp32's."""
    ratio = seconds["bf16"]["step"] / seconds["fp32"]["step"]
    if ratio > 1 + margin:
        return "fp32", f"bf16 measured {ratio:.2f}× fp32's time on this CPU (fp32 is chosen above {1 + margin:.2f}×)"
    if ratio < 1:
        return "bf16", f"bf16 measured {1 / ratio:.2f}× faster than fp32 on this CPU"
    return "bf16", f"bf16 measured {ratio:.2f}× fp32's time on this CPU, within {margin:.0%}: a tie, which goes to bf16"


def resolve(
    cfg: Any,
    device: torch.device,
    policy: Any = None,
    tokenizer: Any = None,
    shapes: ProbeShapes | None = None,
    recorded: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> Numerics:
    """The numerics of a run: `model.dtype` as configured, or for `fastest` the choice its checkpoint recorded
    (`recorded`: a resume, whatever the machine now), the cached one for this machine, or a new measurement of
    `policy` at `shapes`."""
    want = cfg.model.dtype
    if want != "fastest":
        dtype = "bf16" if compute_dtype(cfg, device) is not None else "fp32"
        reason = (
            f"{'native' if dtype == 'bf16' else 'no native'} bf16 on this {device.type}"
            if want == "bf16_where_native"
            else "as configured"
        )
        return Numerics(want, dtype, "config", reason)
    if recorded is not None and recorded.get("dtype") in ("bf16", "fp32"):
        kept = " (the run's choice, kept by its checkpoint)"
        reason = str(recorded.get("reason", ""))
        return Numerics(
            **{
                **recorded,
                "requested": want,
                "source": "checkpoint",
                "reason": reason if reason.endswith(kept) else reason + kept,
            }
        )
    if device.type != "cpu":
        dtype = "bf16" if compute_dtype(cfg, device) is not None else "fp32"
        return Numerics(
            want,
            dtype,
            "device",
            f"{'native' if dtype == 'bf16' else 'no native'} bf16 on this {device.type}; nothing measured",
        )
    here = machine()
    if cpu_has_native_bf16() is not True:
        return Numerics(
            want,
            "fp32",
            "no-native-bf16",
            "this CPU has no native bf16 (torch would convert to fp32 and back); nothing measured",
            machine=here,
        )
    if policy is None or tokenizer is None or shapes is None:
        raise ValueError("model.dtype fastest: the policy, its tokenizer and the probe's shapes are needed to measure")
    key = cache_key(here, policy, shapes)
    cached = read_cache().get(key)
    if cached is not None:
        return Numerics(
            want,
            cached["dtype"],
            "cached",
            f"{cached['reason']} (measured {cached['measured']}; kept in {cache_file()})",
            cached["seconds"],
            here,
        )
    t0 = time.perf_counter()
    seconds = probe(policy, tokenizer, device, shapes)
    dtype, reason = decide(seconds)
    if log:
        log(f"model.dtype fastest: measured fp32 and bf16 in {time.perf_counter() - t0:.1f} s: {reason}")
    entry = {
        "dtype": dtype,
        "reason": reason,
        "seconds": seconds,
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "loadavg": _loadavg(),
        "key": {k: v for k, v in here.items() if k != "loadavg"},
    }
    kept = write_cache(key, entry)  # the first measurement for a key is the one every run uses
    if kept["dtype"] != dtype and log:
        log(f"model.dtype fastest: another run measured first on this machine ({kept['measured']}): {kept['dtype']}")
    source = "measured" if kept is entry else "cached"
    return Numerics(want, kept["dtype"], source, kept["reason"], kept["seconds"], here)


# -- the probe ----------------------------------------------------------------------------------------------------


class _NeverStops:
    """Stops for the decode burst: none, so both dtypes decode the same number of tokens."""

    def mask(self, device: torch.device, vocab: int) -> torch.Tensor:
        return torch.zeros(vocab, dtype=torch.bool, device=device)

    def eos_mask(self, device: torch.device, vocab: int) -> torch.Tensor:
        return torch.zeros(vocab, dtype=torch.bool, device=device)

    def ended(self, turn_ids: Sequence[int]) -> bool:
        return False


def probe(policy: Any, tokenizer: Any, device: torch.device, shapes: ProbeShapes) -> dict[str, dict[str, float]]:
    """CPU seconds per candidate, on one thread: `train` (one micro-batch's forward+backward), `decode` (one burst),
    and `step` (an RL step's model time estimated from them). Leaves the policy's weights, gradients, mode, the RNGs
    and torch's thread count as they were."""
    from .generation import LMGenerator

    was_training = policy.training
    grads = {p: p.grad for p in policy.parameters()}
    g = torch.Generator().manual_seed(0)
    vocab = int(tokenizer.vocab_size)
    low = min(16, vocab - 1)  # past the special tokens of the tiny vocabulary
    ids = torch.randint(low, vocab, (shapes.rows, shapes.length), generator=g).to(device)
    attn = torch.ones_like(ids)
    batch = SimpleNamespace(
        input_ids=ids,
        attention_mask=attn,
        position_ids=(attn.cumsum(-1) - 1),
        window=shapes.window,
        targets=ids[:, -shapes.window :],
    )
    where = torch.ones(shapes.rows, shapes.window, dtype=torch.bool, device=device)
    context = torch.randint(low, vocab, (shapes.context,), generator=g).tolist()

    def autocast(dtype: str) -> Callable[[], Any] | None:
        return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if dtype == "bf16" else None

    def train(dtype: str) -> float:
        ctx = autocast(dtype)
        policy.train()
        t0 = time.thread_time()
        with ctx() if ctx else contextlib.nullcontext():
            logp = window_stats(policy, batch, where).logprob
            loss = -logp.sum() / where.sum()
        loss.backward()
        seconds = time.thread_time() - t0
        for p in policy.parameters():
            p.grad = None
        return seconds

    def decode(dtype: str) -> float:
        policy.eval()
        gen = LMGenerator(
            policy,
            tokenizer,
            0.0,
            1.0,
            device,
            _NeverStops(),
            None,
            autocast(dtype),
            max_batch_tokens=shapes.wave * (shapes.context + DECODE_TOKENS),
            extend_cache=False,
        )
        t0 = time.thread_time()
        gen.generate([context] * shapes.wave, [DECODE_TOKENS] * shapes.wave)
        return time.thread_time() - t0

    best: dict[str, dict[str, float]] = {d: {"train": math.inf, "decode": math.inf} for d in ("fp32", "bf16")}
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            for r in range(ROUNDS + 1):
                for dtype in ("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32"):
                    t, d = train(dtype), decode(dtype)
                    if r > 0:  # round 0 warms both up (kernels built, memory touched)
                        best[dtype]["train"] = min(best[dtype]["train"], t)
                        best[dtype]["decode"] = min(best[dtype]["decode"], d)
                if r > 0 and time.perf_counter() - started > BUDGET_S:
                    break
    finally:
        torch.set_num_threads(threads)
        for p, grad in grads.items():
            p.grad = grad
        policy.train(was_training)
    forwards = DECODE_TOKENS - 1
    for s in best.values():
        s["step"] = shapes.micro_batches * s["train"] + shapes.decode_steps * s["decode"] / forwards
    return {d: {k: round(v, 5) for k, v in s.items()} for d, s in best.items()}


# -- the machine and the cache ------------------------------------------------------------------------------------


def _cpuinfo() -> list[dict[str, str]]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
        out.append(fields)
    return out


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def machine() -> dict[str, Any]:
    """The CPU as the numerics see it: model, logical CPUs and physical cores, torch's threads, the bf16 and AMX flags,
    torch's version and the settings that hold kernels below the hardware's ISA."""
    info = _cpuinfo()
    flags = set(info[0].get("flags", "").split()) if info else set()
    cores = {(c.get("physical id"), c.get("core id")) for c in info if "core id" in c}
    return {
        "cpu": (info[0].get("model name") if info else None) or platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": len(cores) or None,
        "torch_threads": torch.get_num_threads(),
        "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"}),
        "torch": torch.__version__,
        "env": {k: os.environ[k] for k in ISA_ENV if k in os.environ},
        "loadavg": _loadavg(),
    }


def cache_key(here: dict[str, Any], policy: Any, shapes: ProbeShapes) -> str:
    model = [(n, list(p.shape), bool(p.requires_grad)) for n, p in policy.named_parameters()]
    stable = {k: v for k, v in here.items() if k != "loadavg"}
    blob = json.dumps({"v": CACHE_VERSION, "machine": stable, "model": model, "shapes": asdict(shapes)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "search-agent-studio" / "numerics.json"


def read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(key: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Keeps `entry` under `key` unless an entry is there already (another run measured first): returns the one kept.
    An unwritable cache keeps nothing (the run still uses its own measurement)."""
    path = cache_file()
    data = read_cache()
    if key in data:
        return data[key]
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
    return entry
