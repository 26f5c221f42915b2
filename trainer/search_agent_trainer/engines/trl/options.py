"""The run config as TRL's `GRPOConfig` (TRL 1.16): the shared keys mapped (the table in docs/engines.md), the `trl`
section passed through, checked against the installed GRPOConfig.

Steps. Our step is one rollout batch: `rollout.batch_size` prompts × `rollout.n` samples (S sequences, over every
process), then `optim.ppo_epochs` passes over it in optimizer steps of `optim.mini_batch_size` sequences (at most S),
each accumulated over micro-batches of `optim.micro_batch_size` sequences per process. In TRL's terms: one
generation batch (`generation_batch_size` S, `steps_per_generation` S / (P × micro)), `gradient_accumulation_steps`
mini / (P × micro), `num_iterations` ppo_epochs; TRL counts optimizer steps, so one of our steps is
K = S / mini × ppo_epochs of TRL's (`max_steps`, warm-up, logging and saving are scaled by K). K is 1 in the usual
on-policy setting (one epoch over one mini-batch)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# TRL's loss types for our aggregation modes (tests/test_trl_differential.py checks the loss they compute).
LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}

# GRPOConfig fields a shared key sets: naming them in `trl` is an error pointing at the key.
SHARED = {
    "beta": "algorithm.kl_coef",
    "epsilon": "algorithm.clip_ratio_low",
    "epsilon_high": "algorithm.clip_ratio_high",
    "loss_type": "algorithm.loss_agg_mode",
    "scale_rewards": "algorithm.norm_adv_by_std",
    "entropy_coef": "algorithm.entropy_coef",
    "learning_rate": "optim.lr",
    "weight_decay": "optim.weight_decay",
    "max_grad_norm": "optim.grad_clip",
    "warmup_steps": "optim.warmup_steps",
    "warmup_ratio": "optim.warmup_steps",
    "lr_scheduler_type": "optim.lr_schedule",
    "lr_scheduler_kwargs": "optim.min_lr_ratio",
    "num_iterations": "optim.ppo_epochs",
    "per_device_train_batch_size": "optim.micro_batch_size",
    "gradient_accumulation_steps": "optim.mini_batch_size",
    "steps_per_generation": "rollout.batch_size",
    "generation_batch_size": "rollout.batch_size",
    "num_generations": "rollout.n",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "max_completion_length": "rollout.max_response_length",
    "max_steps": "train.steps",
    "num_train_epochs": "train.steps",
    "save_steps": "train.checkpoint_every",
    "save_strategy": "train.checkpoint_every",
    "eval_strategy": "train.eval_every",
    "eval_steps": "train.eval_every",
    "logging_steps": "train.steps (one metrics line per step)",
    "seed": "seed",
    "output_dir": "the run directory (--run-dir)",
    "resume_from_checkpoint": "--resume",
    "bf16": "model.dtype",
    "fp16": "model.dtype",
    "use_cpu": "model.device",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "disable_dropout": "model.dropout",
}

# GRPOConfig fields that do not apply to a rollout of ours, or that this engine does not support (yet).
REFUSED = {
    "mask_truncated_completions": "TRL calls a completion truncated when it does not end on EOS, and a multi-turn trajectory may end on an observation",
    "top_k": "the rollout samples with rollout.temperature and rollout.top_p only",
    "min_p": "the rollout samples with rollout.temperature and rollout.top_p only",
    "repetition_penalty": "the rollout samples with rollout.temperature and rollout.top_p only",
    "generation_kwargs": "generation is the rollout's (rollout.*), not TRL's",
    "use_transformers_continuous_batching": "generation is the rollout's (rollout.*), not TRL's",
    "cache_implementation": "generation is the rollout's (rollout.*), not TRL's",
    "vllm_tensor_parallel_size": "every process calls its own colocated vLLM once per turn, on its own: tensor parallelism would need the processes of a group to call it together",
    "log_completions": "the run directory records every rollout with its tokens (rollouts/, train.record)",
}

# Ours, not GRPOConfig's: how many processes, and the user's accelerate config.
LAUNCH_KEYS = ("num_processes", "accelerate_config")


@dataclasses.dataclass(frozen=True)
class Plan:
    """One of our steps in TRL's units (see the module's docstring)."""

    processes: int
    sequences: int  # S = batch_size × n
    micro: int  # per process and forward
    mini: int  # per optimizer step, over every process
    trl_steps: int  # K: TRL optimizer steps per step of ours

    @property
    def accumulation(self) -> int:
        return self.mini // (self.processes * self.micro)

    @property
    def steps_per_generation(self) -> int:
        return self.sequences // (self.processes * self.micro)


def processes(cfg: Any) -> int:
    """Training processes: trl.num_processes, else `devices` (an accelerate config may set its own)."""
    return int((cfg.trl or {}).get("num_processes") or cfg.devices or 1)


def plan(cfg: Any, world: int) -> tuple[Plan, list[str]]:
    """The step plan for `world` processes, and what in the config makes it impossible (naming the keys)."""
    r, o = cfg.rollout, cfg.optim
    S = r.batch_size * r.n
    micro = min(o.micro_batch_size, max(1, S // world))
    mini = min(o.mini_batch_size, S)
    problems = []
    unit = world * micro
    if S % unit:
        problems.append(
            f"rollout.batch_size × rollout.n ({r.batch_size} × {r.n} = {S} sequences) must be a multiple of optim.micro_batch_size ({micro}) × processes ({world}) for the trl engine"
        )
    elif mini % unit or S % mini:
        problems.append(
            f"optim.mini_batch_size ({mini}) must be a multiple of optim.micro_batch_size ({micro}) × processes ({world}) and divide rollout.batch_size × rollout.n ({S}) for the trl engine"
        )
    return Plan(world, S, micro, mini, max(1, S // mini) * o.ppo_epochs), problems


def passthrough_problems(section: dict[str, Any], fields: set[str]) -> list[str]:
    """The `trl` keys that are not GRPOConfig's, that a shared key sets, or that this engine refuses."""
    out = []
    for key in section:
        if key in LAUNCH_KEYS:
            continue
        if key in SHARED:
            out.append(f"trl.{key}: set by {SHARED[key]} (the shared key), not in the trl section")
        elif key in REFUSED:
            out.append(f"trl.{key}: not supported by the trl engine ({REFUSED[key]})")
        elif key not in fields:
            out.append(f"trl.{key}: not an option of TRL's GRPOConfig (nor of the launch: {', '.join(LAUNCH_KEYS)})")
    if section.get("vllm_mode", "colocate") != "colocate":
        out.append(
            f"trl.vllm_mode: {section['vllm_mode']!r} is not supported: every process calls its own colocated vLLM once per turn, and a vLLM server would need every process to call it the same number of times"
        )
    return out


def use_vllm(cfg: Any) -> bool:
    return bool((cfg.trl or {}).get("use_vllm"))


def rollout_logprob_kind(cfg: Any) -> str:
    """What the records' rollout_logprob are (docs/run-format.md): "raw", log π_T (the temperature-scaled softmax over
    the vocabulary, what the trainer computes: our sampler's, and vLLM's processed_logprobs when nothing is cut), or
    "processed": TRL's vLLM asks for processed_logprobs (trl/generation/vllm_generation.py: `logprobs_mode`, fixed when
    TRL builds the LLM), which under a nucleus (top_p < 1) are renormalised over it: log π_T − log Z, Z ≥ top_p."""
    return "processed" if use_vllm(cfg) and cfg.rollout.top_p < 1.0 else "raw"


SEQUENCE_IS = ("sequence_mask", "sequence_truncate")


def importance_sampling(cfg: Any) -> dict[str, Any]:
    """TRL's correction of vLLM's sampling (`vllm_importance_sampling_*`) for this config. TRL 1.16 weights each
    sequence's loss by exp Σ_t (trainer − vLLM) by default (sequence_mask). With vLLM's processed log-probs of a
    nucleus, every token adds log Z_t ≤ log 1 — the nucleus's normaliser, not an engine mismatch —, so a 1,000-token
    trajectory's weight goes to ~0 and its gradient with it. At top_p < 1 the correction is made per token instead
    (token_mask: the weight of a token is Z_t ∈ [top_p, 1], still masked above TRL's cap); a sequence-level mode asked
    for in the trl section is refused (importance_sampling_problems)."""
    if not use_vllm(cfg) or cfg.rollout.top_p >= 1.0 or "vllm_importance_sampling_mode" in (cfg.trl or {}):
        return {}
    return {"vllm_importance_sampling_mode": "token_mask"}


def importance_sampling_problems(cfg: Any) -> list[str]:
    mode = (cfg.trl or {}).get("vllm_importance_sampling_mode")
    if (
        use_vllm(cfg)
        and cfg.rollout.top_p < 1.0
        and (cfg.trl or {}).get("vllm_importance_sampling_correction", True)
        and mode in SEQUENCE_IS
    ):
        return [
            f"trl.vllm_importance_sampling_mode: {mode!r} with trl.use_vllm and rollout.top_p {cfg.rollout.top_p} would weight each trajectory by exp Σ (trainer − vLLM) over its tokens, and vLLM's log-probs of a nucleus exceed the trainer's by the nucleus's log-mass at every token (the weight of a long trajectory goes to 0): use token_mask or token_truncate (the default at top_p < 1), rollout.top_p 1, or trl.vllm_importance_sampling_correction false"
        ]
    return []


def reference_dtype(cfg: Any, bf16: bool) -> str | None:
    """The dtype TRL builds the reference model in (`model_init_kwargs`), None: TRL's, the policy's (fp32 master
    weights here). With bf16 compute the reference is only ever run under bf16 autocast: bf16 weights halve it."""
    if not bf16 or cfg.algorithm.kl_coef == 0 or cfg.model.lora or "model_init_kwargs" in (cfg.trl or {}):
        return None
    return "bfloat16"


# TRL 1.16's GRPOConfig defaults the memory planner relies on where the config leaves them to TRL (src/core/plan/trl.ts
# has the same; test_trl_engine.py checks them against the installed GRPOConfig).
TRL_DEFAULTS = {"gradient_checkpointing": True, "vllm_gpu_memory_utilization": 0.3, "vllm_enable_sleep_mode": False}


def memory_inputs(cfg: Any, world: int, bf16: bool) -> dict[str, Any]:
    """What decides a trl run's memory on each GPU besides the model's and batch's shapes, as a memory planner needs
    it. Without DeepSpeed/FSDP (an accelerate config) every process holds the whole policy: fp32 master weights,
    gradients and AdamW's two moments (made at the first optimizer step), the reference (without KL none; under LoRA
    TRL's "ref" adapter, a frozen copy of the starting one; else a second model in reference_dtype), our generator's KV cache (`rollout.max_batch_tokens`, or half the memory free once TRL has
    built the reference and vLLM, less AdamW's moments: generation.auto_max_batch_tokens) — or, with use_vllm, vLLM
    colocated at `vllm_gpu_memory_utilization` of the GPU's memory (its bf16 weights, then KV cache), given back during
    the update in sleep mode. `zero`: the accelerate config shards them (the planner reads it; unknown here)."""
    p, _ = plan(cfg, world)
    section = dict(cfg.trl or {})
    vllm = use_vllm(cfg)
    ckpt = cfg.model.gradient_checkpointing
    has_ref = cfg.algorithm.kl_coef > 0 and not cfg.model.lora
    named = (section.get("model_init_kwargs") or {}).get("dtype")  # the trl section's own reference dtype
    ref_dtype = (str(named) if named else reference_dtype(cfg, bf16) or "float32") if has_ref else None
    return {
        "engine": "trl",
        "processes": world,
        "sharded_by": section.get("accelerate_config"),  # a DeepSpeed/FSDP config shards states over the processes
        "master_dtype": "float32",
        "compute_dtype": "bfloat16" if bf16 else "float32",
        "reference_model": has_ref,
        "reference_dtype": ref_dtype,
        "reference_adapter": cfg.algorithm.kl_coef > 0
        and bool(cfg.model.lora),  # TRL's "ref" adapter: a frozen copy of the starting adapter
        "lora": bool(cfg.model.lora),
        "gradient_checkpointing": TRL_DEFAULTS["gradient_checkpointing"]
        if ckpt is None
        else bool(ckpt),  # unset: TRL's default
        "micro_batch_per_process": p.micro,
        "max_sequence_tokens": cfg.rollout.max_prompt_length + cfg.rollout.max_response_length,
        "generation": "vllm" if vllm else "ours",
        "generation_kv_tokens": None
        if vllm
        else cfg.rollout.max_batch_tokens,  # None: auto, after the reference is placed
        "vllm_gpu_memory_utilization": float(
            section.get("vllm_gpu_memory_utilization", TRL_DEFAULTS["vllm_gpu_memory_utilization"])
        )
        if vllm
        else None,
        "vllm_sleep_mode": bool(section.get("vllm_enable_sleep_mode", TRL_DEFAULTS["vllm_enable_sleep_mode"]))
        if vllm
        else None,
        "vllm_max_num_seqs": p.micro * p.steps_per_generation
        if vllm
        else None,  # TRL's: per_device_train_batch_size × steps_per_generation (tp 1)
    }


def grpo_kwargs(cfg: Any, run_dir: Path, p: Plan, bf16: bool, cpu: bool) -> dict[str, Any]:
    """GRPOConfig's keyword arguments for a run config (the `trl` section last: the keys no shared key sets)."""
    a, o, r, t = cfg.algorithm, cfg.optim, cfg.rollout, cfg.train
    K = p.trl_steps
    cosine = o.lr_schedule == "cosine"
    kwargs: dict[str, Any] = {
        "output_dir": str(run_dir / "checkpoints"),
        "seed": cfg.seed,
        "max_steps": t.steps * K,
        "per_device_train_batch_size": p.micro,
        "gradient_accumulation_steps": p.accumulation,
        "steps_per_generation": p.steps_per_generation,
        "num_generations": r.n,
        "num_iterations": o.ppo_epochs,
        "max_completion_length": r.max_response_length,
        "temperature": r.temperature if r.temperature > 0 else 1.0,
        "top_p": r.top_p,
        "learning_rate": o.lr,
        "lr_scheduler_type": "cosine_with_min_lr" if cosine else "constant_with_warmup",
        **({"lr_scheduler_kwargs": {"min_lr_rate": o.min_lr_ratio}} if cosine else {}),
        "warmup_steps": o.warmup_steps * K,
        "weight_decay": o.weight_decay,
        "max_grad_norm": o.grad_clip,
        "beta": a.kl_coef,
        "epsilon": a.clip_ratio_low,
        "epsilon_high": a.clip_ratio_high,
        "loss_type": LOSS_TYPES[a.loss_agg_mode],
        "scale_rewards": "group" if a.norm_adv_by_std else "none",
        "entropy_coef": a.entropy_coef,
        # our KL term is k3 of the current policy against the reference, as veRL's low_var_kl (not × the ratio)
        "use_bias_correction_kl": False,
        "bf16": bf16,
        "use_cpu": cpu,
        # unset: TRL's own (on)
        **(
            {"gradient_checkpointing": bool(cfg.model.gradient_checkpointing)}
            if cfg.model.gradient_checkpointing is not None
            else {}
        ),
        **({"model_init_kwargs": {"dtype": ref}} if (ref := reference_dtype(cfg, bf16)) else {}),  # the reference's
        **importance_sampling(cfg),
        "disable_dropout": not cfg.model.dropout,
        "logging_strategy": "steps",
        "logging_steps": K,
        "save_strategy": "no",  # the engine asks for each checkpoint (train.checkpoint_every, the last step, a stop)
        "eval_strategy": "no",  # held-out evaluation is ours (train.eval_every)
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "ddp_find_unused_parameters": False,  # a causal LM uses every parameter
    }
    section = {k: v for k, v in (cfg.trl or {}).items() if k not in LAUNCH_KEYS}
    return {**kwargs, **section}


def grpo_fields() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig)}
