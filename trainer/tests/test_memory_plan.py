"""The memory planner (`search-agent-studio plan`, src/core/plan) against the bytes torch really holds, on CPU.

Small Qwen2 models (random weights, a few widths and depths) are built through the trainer's own path (the Trainer's
setup: build_policy, the reference, the optimizer), and one real update step (`Trainer._update`, after one that
creates AdamW's moments) runs on two micro-batches of the planner's worst case: every sequence as long as
rollout.max_prompt_length + max_response_length (the second micro-batch runs beside the first one's gradients, as
every micro-batch but the first of a mini-batch does), left-padded as real rollouts are (SDPA's attention mask). Every tensor storage torch allocates during it is counted (a
TorchDispatchMode sees each op's outputs; a storage counts until it is freed) on top of what is live before it (the
weights, the moments, the reference); the peak is compared with the planner's update phase for the same config
(`plan --json --device cpu`), within 15 %, and the parts that are only sizes (weights, gradients, moments,
reference) exactly. docs/trainer.md ("Memory on one GPU") says how the planner was checked.

Engine trl the same way (TRL_CASES): the TRL engine's own setup and one TRL update step (GRPOTrainer.training_step
on two micro-batches, the model prepared by accelerate as TRL's loop does), against the planner's larger update
phase (TRL's has two: the forward's end and the backward); three small cases, well under a minute together.

The wide-head cases (stop 65): a tied output layer whose vocabulary × hidden outweighs the micro-batch, as a Qwen
model's does at few layers. Its fp32 gradient is held from the head's backward to the end of the pass, where autograd
sums it out of place with the embedding's: the planner counted none of that before and planned 0.72× (builtin) and
0.83× (trl) of these steps' peaks, 0.75× and 0.80× at Qwen2.5-3B's own width and vocabulary (one layer).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import DEMO, NODE, ROOT
from hf_fixture import build_tiny_qwen2, demo_texts
from search_agent_trainer.batch import make_batch
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.data import load_dataset
from search_agent_trainer.rollout import Trajectory
from search_agent_trainer.train import Trainer

pytestmark = pytest.mark.skipif(NODE is None, reason="the planner runs in Node")


def _tensors(out):
    """The tensors of an op's output (a tensor, or lists and tuples of them), without torch's tree_flatten: its
    recursive helper closure is a reference cycle that keeps what it flattened alive until the garbage collector
    runs, which shows as memory held here."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for x in out:
            yield from _tensors(x)


class LiveBytes(TorchDispatchMode):
    """The bytes of tensor storages allocated while it is active, live now and at the peak (a storage counted once,
    until it is freed). `before`: the storages that were there already (weights, moments, reference), whose views
    (a transposed weight) are no new bytes."""

    def __init__(self, before: set[int] = frozenset()) -> None:
        super().__init__()
        self.before = set(before)
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.now = 0
        self.peak = 0

    def _prune(self) -> None:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.now -= self.live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._prune()
        for t in _tensors(out):
            if t.device.type == "cpu":
                st = t.untyped_storage()
                key = st.data_ptr()
                if st.nbytes() and key not in self.live and key not in self.before:
                    self.live[key] = (StorageWeakRef(st), st.nbytes())
                    self.now += st.nbytes()
        self.peak = max(self.peak, self.now)
        return out


class StorageBytes(LiveBytes):
    """LiveBytes for FSDP: a storage counted by identity, not by data pointer, and re-read as it is resized. FSDP frees
    and re-makes a unit's low-precision parameters by resizing one storage (`resize_(0)` and back) rather than
    allocating a new one: counted by data pointer, each re-make is a new storage and none is ever freed. Tensors
    without a plain storage (a nested tensor's wrapper: its values are made by operations this sees) are passed over.
    `before`: storage identities (`untyped_storage()._cdata`). On every builtin and TRL case above, where nothing is
    resized, it counts the same peak as LiveBytes to the byte (checked at stop 67)."""

    def _prune(self) -> None:
        for key, (ref, size) in list(self.live.items()):
            if ref.expired():
                self.now -= self.live.pop(key)[1]
                continue
            now = torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes()
            if now != size:
                self.now += now - size
                self.live[key] = (ref, now)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._prune()
        for t in _tensors(out):
            if t.device.type != "cpu" or t.is_nested:
                continue
            try:
                st = t.untyped_storage()
            except RuntimeError:
                continue
            key = st._cdata
            if key not in self.live and key not in self.before:
                self.live[key] = (StorageWeakRef(st), st.nbytes())
                self.now += st.nbytes()
        self.peak = max(self.peak, self.now)
        return out


def _storage_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class NoEnvTrainer(Trainer):
    """The trainer without an env server (the data read directly): the update step needs none."""

    def _load_data(self) -> None:
        self.train_set = load_dataset(self.cfg.data.train)
        self.eval_set = []


def model_dir(tmp: Path, hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int) -> Path:
    d = build_tiny_qwen2(tmp / "tok", demo_texts(DEMO), weights=False)
    out = tmp / f"qwen2-{hidden}x{layers}-{vocab}"
    shutil.copytree(d, out)
    config = json.loads((out / "config.json").read_text())
    config.pop("layer_types", None)
    config.update(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
    )
    (out / "config.json").write_text(json.dumps(config))
    return out


def run_config(path: Path, dtype: str, checkpointing: bool, lora: bool, micro: int, prompt: int, response: int) -> dict:
    return {
        "seed": 3,
        "data": {"train": str(DEMO / "train.jsonl"), "chat_template": False, "prompt_template": "{question}"},
        "model": {
            "kind": "hf",
            "path": str(path),
            "random_init": True,
            "device": "cpu",
            "dtype": dtype,
            "gradient_checkpointing": checkpointing,
            **({"lora": {"r": 8, "alpha": 16}} if lora else {}),
        },
        "rollout": {
            "batch_size": 1,
            "n": 2 * micro,
            "max_prompt_length": prompt,
            "max_response_length": response,
            "max_turn_tokens": 16,
            "max_batch_tokens": 4096,
        },
        "algorithm": {"name": "grpo", "kl_coef": 0.001, "entropy_coef": 0.0},
        "optim": {"mini_batch_size": 2 * micro, "micro_batch_size": micro, "lr": 1e-5},
        "train": {"steps": 3, "eval_every": 0, "checkpoint_every": 0, "save_rollouts": False},
    }


def _left_padded(rows: int, length: int) -> torch.Tensor:
    """A prompt mask of `rows` × `length` with the first row's first position padding."""
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, 0] = 0
    return mask


def measure(tmp: Path, raw: dict) -> dict[str, int]:
    """What the update step holds: the static parts by size, and the peak during the second update step."""
    cfg = config_from_dict(raw)
    t = NoEnvTrainer(cfg, tmp / "run", "http://127.0.0.1:9", stdout=io.StringIO())
    t.setup()
    r = cfg.rollout
    vocab = len(t.tok.impl)
    gen = torch.Generator().manual_seed(0)
    trajs = []
    # the planner's worst case: every sequence at the longest; two micro-batches (the second runs with the gradients
    # of the first accumulated, as every micro-batch after the first of a mini-batch does), the second left-padded as
    # a micro-batch of real rollouts is (one row's prompt a token shorter: SDPA's attention mask is made)
    micro = cfg.optim.micro_batch_size
    for i in range(cfg.optim.mini_batch_size):
        prompt_length = r.max_prompt_length - (1 if i <= micro and micro > 1 else 0)
        prompt = torch.randint(0, vocab, (prompt_length,), generator=gen).tolist()
        ids = torch.randint(0, vocab, (r.max_response_length,), generator=gen).tolist()
        traj = Trajectory(t.train_set[0], 0, i, "", prompt, ids, ["generated"] * len(ids), [""], [-1.0] * len(ids))
        traj.reward = float(i % 2)
        trajs.append(traj)
    batch = make_batch(trajs, t.tok.pad_id)
    t._passes_and_advantages(batch, trajs, 1)
    t._update(batch, 1)  # creates AdamW's moments
    params = [p for p in t.policy.parameters()]
    static = {
        "weights": _storage_bytes(params),
        "optimizer": _storage_bytes(
            v for s in t.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
        ),
        "reference": _storage_bytes(t.reference.frozen.values()) if t.reference is not None else 0,
    }
    grads_bytes = sum(4 * p.numel() for p in params if p.requires_grad)
    existing = [
        *params,
        *t.policy.buffers(),
        *(v for s in t.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)),
        *(t.reference.frozen.values() if t.reference is not None else []),
    ]
    tracker = LiveBytes({x.untyped_storage().data_ptr() for x in existing})
    with tracker:
        t._update(batch, 2)
    t.writer.close()
    return {**static, "gradients": grads_bytes, "update_peak": sum(static.values()) + tracker.peak}


def plan(config_file: Path) -> dict:
    proc = subprocess.run(
        [
            NODE,
            "-r",
            str(ROOT / "test" / "register.cjs"),
            str(ROOT / "src" / "cli" / "main.ts"),
            "plan",
            "--json",
            "--device",
            "cpu",
            "--gpu-memory",
            "64GiB",
            str(config_file),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


CASES = {
    # (hidden, intermediate, layers, heads, kv heads, vocab), dtype, checkpointing, LoRA, micro-batch, prompt, response
    "bf16-checkpointed": ((128, 384, 2, 4, 2, 4096), "bf16", True, False, 4, 96, 160),
    "fp32-no-checkpointing": ((128, 384, 2, 4, 2, 4096), "fp32", False, False, 4, 96, 160),
    "bf16-lora-wider": ((256, 704, 3, 8, 2, 8192), "bf16", True, True, 4, 64, 192),
    "bf16-deeper-large-vocab": ((96, 256, 4, 4, 1, 16384), "bf16", True, False, 2, 64, 128),
    # a tied output layer whose vocabulary × hidden outweighs the micro-batch's logits and activations (as a Qwen
    # model's does at few layers): its fp32 gradient held to the pass's end and summed there with the embedding's
    "bf16-tied-wide-head": ((1536, 1024, 1, 4, 1, 32768), "bf16", True, False, 2, 24, 24),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_planner_counts_what_an_update_step_holds_within_15_percent(tmp_path, case):
    shape, dtype, checkpointing, lora, micro, prompt, response = CASES[case]
    path = model_dir(tmp_path, *shape)
    raw = run_config(path, dtype, checkpointing, lora, micro, prompt, response)
    (tmp_path / "c.run.json").write_text(json.dumps(raw))
    planned = plan(tmp_path / "c.run.json")
    [device] = planned["devices"]
    parts = device["parts"]
    torch.manual_seed(0)
    got = measure(tmp_path, raw)
    # the parts that are sizes: exactly (a byte per norm weight of difference at most)
    for name in ("weights", "optimizer", "reference", "gradients"):
        assert abs(parts.get(name, 0) - got[name]) <= 0.01 * got[name], (name, parts.get(name), got[name])
    update = device["phases"]["update"]
    print(
        f"{case}: planned update phase {update:,} B, measured peak {got['update_peak']:,} B ({update / got['update_peak']:.3f}×); parts {parts}"
    )
    assert abs(update - got["update_peak"]) <= 0.15 * got["update_peak"], (update, got)


# -- engine trl: one real TRL update step (GRPOTrainer.training_step: accelerate's autocast, TRL's fused log-prob head) --


def trl_run_config(
    path: Path, dtype: str, checkpointing: bool, lora: bool, micro: int, prompt: int, response: int
) -> dict:
    return {**run_config(path, dtype, checkpointing, lora, micro, prompt, response), "engine": "trl"}


def measure_trl(tmp: Path, raw: dict) -> dict[str, int]:
    """What a TRL update step holds, as `measure` for the builtin engine: the engine's own setup (TRL's reference
    model, or its "ref" adapter under LoRA), the model prepared by accelerate as TRL's loop does (autocast), TRL's
    optimizer; one optimizer step over two micro-batches of the longest sequences to make AdamW's moments, then two
    micro-batches counted (TRL's `training_step`: forward, loss, backward; the gradients of the first accumulated)."""
    from search_agent_trainer.engines.trl import quiet_libraries
    from search_agent_trainer.engines.trl.engine import TRLEngine

    class NoEnvTRL(TRLEngine):
        def _load_data(self) -> None:
            self.train_set = load_dataset(self.cfg.data.train)
            self.eval_set = []

    quiet_libraries()
    cfg = config_from_dict(raw)
    eng = NoEnvTRL(cfg, tmp / "run", "http://127.0.0.1:9", stdout=io.StringIO())
    eng.setup()
    t = eng.trl
    model = t.accelerator.prepare(t.model)  # as TRL's training loop: the forward under autocast
    t.model_wrapped = model
    t.create_optimizer()
    t.optimizer = t.accelerator.prepare(t.optimizer)
    t._prepare_inputs = lambda batch: batch  # the micro-batch as given (no generation)
    t.current_gradient_accumulation_steps = t.args.gradient_accumulation_steps
    r, B = cfg.rollout, cfg.optim.micro_batch_size
    vocab = len(eng.tok.impl)
    gen = torch.Generator().manual_seed(0)

    def micro_batch() -> dict:
        x = {
            "prompt_ids": torch.randint(0, vocab, (B, r.max_prompt_length), generator=gen),
            # left padding in one row, as TRL's batches have (SDPA's attention mask is made)
            "prompt_mask": _left_padded(B, r.max_prompt_length),
            "completion_ids": torch.randint(0, vocab, (B, r.max_response_length), generator=gen),
            "completion_mask": torch.ones(B, r.max_response_length, dtype=torch.long),
            "advantages": torch.randn(B, generator=gen),
            "num_items_in_batch": torch.tensor(float(2 * B * r.max_response_length)),
        }
        if t.beta != 0.0:
            x["ref_per_token_logps"] = -torch.rand(B, r.max_response_length, generator=gen)
        return x

    for x in (micro_batch(), micro_batch()):
        t.training_step(model, x, None)
    t.optimizer.step()  # creates AdamW's moments
    model.zero_grad(set_to_none=True)
    params = list(t.model.parameters())
    ref = getattr(t, "ref_model", None)
    ref_params = list(ref.parameters()) if ref is not None else []
    moments = [v for s in t.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    static = {
        "weights": _storage_bytes(params),
        "optimizer": _storage_bytes(moments),
        "reference": _storage_bytes(ref_params),
    }
    grads_bytes = sum(4 * p.numel() for p in params if p.requires_grad)
    existing = [*params, *t.model.buffers(), *moments, *ref_params, *(ref.buffers() if ref is not None else [])]
    batches = (micro_batch(), micro_batch())
    tracker = LiveBytes({x.untyped_storage().data_ptr() for x in existing})
    with tracker:
        for x in batches:
            t.training_step(model, x, None)
    eng.writer.close()
    return {**static, "gradients": grads_bytes, "update_peak": sum(static.values()) + tracker.peak}


TRL_CASES = {
    # as CASES; the fused head's torch fallback on CPU (no Triton) scores every position in 4,096-token tiles
    "trl-bf16-checkpointed": ((128, 384, 2, 4, 2, 4096), "bf16", True, False, 4, 96, 160),
    "trl-fp32-no-checkpointing": ((128, 384, 2, 4, 2, 4096), "fp32", False, False, 4, 96, 160),
    "trl-bf16-tied-wide-head": ((1536, 1024, 1, 4, 1, 32768), "bf16", True, False, 2, 24, 24),
}


@pytest.mark.parametrize("case", list(TRL_CASES))
def test_the_planner_counts_what_a_trl_update_step_holds_within_15_percent(tmp_path, case):
    pytest.importorskip("trl")
    shape, dtype, checkpointing, lora, micro, prompt, response = TRL_CASES[case]
    path = model_dir(tmp_path, *shape)
    raw = trl_run_config(path, dtype, checkpointing, lora, micro, prompt, response)
    (tmp_path / "c.run.json").write_text(json.dumps(raw))
    [device] = plan(tmp_path / "c.run.json")["devices"]
    parts = device["parts"]
    torch.manual_seed(0)
    got = measure_trl(tmp_path, raw)
    for name in ("weights", "optimizer", "reference", "gradients"):
        assert abs(parts.get(name, 0) - got[name]) <= 0.01 * got[name], (name, parts.get(name), got[name])
    # TRL's update has two peaks: the forward's end (autocast's cache of every layer's casts) and the backward
    update = max(device["phases"]["update"], device["phases"]["update_forward"])
    print(
        f"{case}: planned update phase {update:,} B, measured peak {got['update_peak']:,} B ({update / got['update_peak']:.3f}×); parts {parts}"
    )
    assert abs(update - got["update_peak"]) <= 0.15 * got["update_peak"], (update, got)


# -- the rollout: the KV cache within the planner's two caches (the GPU check found it held more) --------------------


class KVBytes(LiveBytes):
    """LiveBytes, and apart the bytes of KV-cache tensors (B, kv_heads, T, head_dim): live now and at the peak."""

    def __init__(self, before: set[int], kv_heads: int, head_dim: int) -> None:
        super().__init__(before)
        self.shape = (kv_heads, head_dim)
        self.kv: dict[int, tuple[StorageWeakRef, int]] = {}
        self.kv_now = self.kv_peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        for key in [k for k, (ref, _) in self.kv.items() if ref.expired()]:
            self.kv_now -= self.kv.pop(key)[1]
        for t in _tensors(out):
            st = t.untyped_storage()
            key = st.data_ptr()
            if t.dim() == 4 and (t.shape[1], t.shape[3]) == self.shape and t.shape[2] > 1 and key in self.live:
                if key not in self.kv:
                    self.kv[key] = (StorageWeakRef(st), st.nbytes())
                    self.kv_now += st.nbytes()
        self.kv_peak = max(self.kv_peak, self.kv_now)
        return out


def test_a_rollout_holds_at_most_the_planners_two_caches_of_kv(tmp_path):
    """A multi-turn rollout of 40 trajectories (4 turns of up to 64 tokens, the demo's retrieval in between) through
    the trainer's own `_rollouts`, with `rollout.max_batch_tokens` small enough that the first turn is one decode batch
    (its cache kept and extended in the second) and later turns are admitted as rows finish (continuous batching).
    The planner counts the KV cache twice (the cache and one copy while rows are selected or merged): the KV tensors
    live at once stay within that. They did not: on an H200 held to 80 GiB, the 3B recipe's rollout ran out of memory
    (the GPU check, 2026-11-28), and here the peak was 3.46× the budget — the last turn's cache held through the next
    turn, the batch a decode started from kept by its caller, and the batch before a copy kept by the decode's own
    `past` variable until the next step."""
    from search_agent_trainer.benchmark import StandInEnv  # the in-process env (word-overlap retrieval): no server
    from search_agent_trainer.generation import kv_bytes_per_token

    path = model_dir(tmp_path, 128, 384, 2, 4, 2, 4096)
    raw = run_config(path, "bf16", False, False, 4, 512, 600)
    raw["data"] = {"train": str(DEMO / "train.jsonl"), "chat_template": False}
    raw["rollout"] = {
        "batch_size": 8,
        "n": 5,
        "max_turns": 4,
        "max_turn_tokens": 64,
        "max_obs_length": 128,
        "max_prompt_length": 512,
        "max_response_length": 600,
        "max_batch_tokens": 8192,
    }
    raw["optim"] = {"mini_batch_size": 40, "micro_batch_size": 4, "lr": 1e-5}
    (tmp_path / "c.run.json").write_text(json.dumps(raw))
    [device] = plan(tmp_path / "c.run.json")["devices"]
    cfg = config_from_dict(raw)
    t = NoEnvTrainer(cfg, tmp_path / "run", "http://127.0.0.1:9", stdout=io.StringIO())
    t.setup()
    t.env = StandInEnv(DEMO / "corpus.jsonl")
    t.policy.eval()
    kv = kv_bytes_per_token(t.policy, t._compute_dtype())
    assert device["parts"]["kv_cache"] == 2 * 8192 * kv  # the planner's two caches of the budget
    existing = [*t.policy.parameters(), *t.policy.buffers()]
    tracker = KVBytes({x.untyped_storage().data_ptr() for x in existing}, 2, 32)
    torch.manual_seed(0)
    with tracker:
        trajs = t._rollouts(t.train_set[:8], t.train_prompts[:8], 5, 1, greedy=False)
    t.writer.close()
    turns = sum(x.turns for x in trajs)
    print(
        f"KV peak {tracker.kv_peak:,} B = {tracker.kv_peak / (8192 * kv):.2f}× the budget (the plan: 2×); {turns} turns"
    )
    assert turns > 2 * len(trajs)  # several turns: the cache was kept, extended and admitted into
    assert tracker.kv_peak <= device["parts"]["kv_cache"], tracker.kv_peak / (8192 * kv)
    # and everything the rollout allocated within the plan's rollout parts (besides what is loaded)
    rollout = sum(device["parts"].get(k, 0) for k in ("kv_cache", "prefill", "sampling", "weight_casts"))
    assert tracker.peak <= rollout, (tracker.peak, rollout)
