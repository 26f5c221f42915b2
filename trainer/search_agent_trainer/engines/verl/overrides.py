"""Our resolved run config → a veRL 0.9.1 run: Hydra overrides of `verl/trainer/config/ppo_trainer.yaml` and the files
they name (the datasets as parquet, our agent loop's and tool's config files, the resolved run config).

The shared keys map onto veRL's (docs/engines.md has the table); what veRL has and our config does not (the rollout
engine, parallelism, GPUs, nodes, FSDP) is the `verl` section, `VERL_DEFAULTS` below; what cannot be carried over is
refused (`VerlConfigError`, naming the key) or, when veRL simply does it its own way, reported in `notes`.
Every override names a key veRL's config has (Hydra refuses others) except the `+`-prefixed ones, which add ours:
`+sas.*` (read by recorder.py), `+reward.custom_reward_function.reward_kwargs.env_url`, and the Ray workers' env.

No veRL import here: the plan can be made (and exported) without veRL's environment; main.py composes it with
veRL's config, and the tests check every override against veRL's own config classes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ENV_URL_VAR, SEARCH_R1_AGENT, TOOL_AGENT, search_tool_schema

# The `verl` section of a run config: what veRL needs that the shared keys do not say.
VERL_DEFAULTS: dict[str, Any] = {
    "python": None,  # veRL's Python, for the host (not an override)
    "rollout": "vllm",  # the inference engine of the rollouts: vllm | sglang
    "tensor_parallel": 1,  # rollout tensor-parallel size (GPUs per vLLM/SGLang replica)
    "gpu_memory_utilization": 0.5,  # the rollout engine's share of GPU memory (colocated with FSDP)
    "gpus_per_node": 1,
    "nodes": 1,
    "strategy": "fsdp",  # veRL's FSDP version for actor, reference and critic: fsdp | fsdp2
    # FSDP parameter offload to CPU (actor, reference, critic) and optimizer-state offload (actor, critic); None: veRL's
    # own default (off). Like model.gradient_checkpointing (None: veRL's own, on), set only when the config (or the
    # memory planner, which writes these keys: PLANNER_KEYS) asks.
    "param_offload": None,
    "optimizer_offload": None,
    "attention": "auto",  # the FSDP models' attention: auto (flash_attention_2 when flash-attn is installed, else sdpa) | flash_attention_2 | sdpa
    "agent_workers": 8,  # veRL's agent-loop workers (Ray actors running the trajectories' coroutines)
    "reward_workers": 8,  # veRL's reward-loop workers (calling our /reward)
    "overrides": [],  # raw Hydra overrides, applied last (checked by veRL's config like ours)
}
ROLLOUT_ENGINES = ("vllm", "sglang")
STRATEGIES = ("fsdp", "fsdp2")
ATTENTION = ("auto", "flash_attention_2", "sdpa")
# The run-config keys that decide what veRL keeps on each GPU besides the shapes: veRL's defaults apply where they
# are unset, so a memory planner chooses by writing them into the config it launches (memory_inputs says what a
# config gives).
# the last has a value always (0.5, veRL's too)
PLANNER_KEYS = (
    "verl.param_offload",
    "verl.optimizer_offload",
    "model.gradient_checkpointing",
    "verl.gpu_memory_utilization",
)
# veRL 0.9.1's defaults (ppo_trainer.yaml)
VERL_OWN = {
    "param_offload": False,
    "optimizer_offload": False,
    "gradient_checkpointing": True,
}
ADV_ESTIMATOR = {"grpo": "grpo", "ppo": "gae", "reinforce++": "reinforce_plus_plus"}
TRAINER_DIR = Path(__file__).resolve().parents[3]  # the directory holding search_agent_trainer (PYTHONPATH)
REWARD_FN = "pkg://search_agent_trainer.engines.verl.reward"
WORKER_SETUP = "search_agent_trainer.engines.verl.worker_setup.setup"
TOOL_CLASS = "search_agent_trainer.engines.verl.tool.SearchTool"
AGENT_LOOP_CLASSES = {
    SEARCH_R1_AGENT: "search_agent_trainer.engines.verl.agent_loop.SearchR1AgentLoop",
    TOOL_AGENT: "search_agent_trainer.engines.verl.agent_loop.SearchToolAgentLoop",
}


class VerlConfigError(ValueError):
    pass


@dataclass
class VerlPlan:
    overrides: list[str]
    files: dict[str, str] = field(default_factory=dict)  # path → content (write_files writes them)
    notes: list[str] = field(default_factory=list)  # settings veRL handles its own way (warnings for the user)

    def write_files(self) -> None:
        for path, text in self.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")


def _get(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for k in dotted.split("."):
        if not isinstance(node, Mapping) or k not in node or node[k] is None:
            return default
        node = node[k]
    return node


def verl_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The `verl` section with its defaults; unknown keys and bad values are named."""
    given = dict(_get(cfg, "verl", {}) or {})
    problems = [f"verl.{k}: unknown key (known: {', '.join(VERL_DEFAULTS)})" for k in given if k not in VERL_DEFAULTS]
    s = {**VERL_DEFAULTS, **{k: v for k, v in given.items() if k in VERL_DEFAULTS}}
    if s["rollout"] not in ROLLOUT_ENGINES:
        problems.append(f"verl.rollout: {s['rollout']!r} is not one of {', '.join(ROLLOUT_ENGINES)}")
    if s["strategy"] not in STRATEGIES:
        problems.append(f"verl.strategy: {s['strategy']!r} is not one of {', '.join(STRATEGIES)}")
    if s["attention"] not in ATTENTION:
        problems.append(f"verl.attention: {s['attention']!r} is not one of {', '.join(ATTENTION)}")
    for k in ("param_offload", "optimizer_offload"):
        if s[k] is not None and not isinstance(s[k], bool):
            problems.append(f"verl.{k}: expected true or false, got {s[k]!r}")
    for k in ("tensor_parallel", "gpus_per_node", "nodes", "agent_workers", "reward_workers"):
        if not isinstance(s[k], int) or isinstance(s[k], bool) or s[k] < 1:
            problems.append(f"verl.{k}: expected an integer ≥ 1, got {s[k]!r}")
    if not isinstance(s["gpu_memory_utilization"], (int, float)) or not 0 < s["gpu_memory_utilization"] <= 1:
        problems.append(
            f"verl.gpu_memory_utilization: expected a number in (0, 1], got {s['gpu_memory_utilization']!r}"
        )
    if not isinstance(s["overrides"], list) or not all(isinstance(o, str) for o in s["overrides"]):
        problems.append("verl.overrides: expected a list of Hydra override strings")
    devices = _get(cfg, "devices", 1)
    if not problems and isinstance(devices, int) and devices > 1:
        # the shared `devices` (training processes, one per GPU) is veRL's world size: gpus_per_node × nodes.
        # Without verl.gpus_per_node it fills the nodes evenly; with it, the two must agree.
        if "gpus_per_node" not in given:
            if devices % s["nodes"]:
                problems.append(f"devices ({devices}) must be a multiple of verl.nodes ({s['nodes']})")
            else:
                s["gpus_per_node"] = devices // s["nodes"]
        elif s["gpus_per_node"] * s["nodes"] != devices:
            problems.append(
                f"devices ({devices}) disagrees with verl.gpus_per_node × verl.nodes ({s['gpus_per_node']} × {s['nodes']}); set one of them"
            )
    if not problems and s["gpus_per_node"] % s["tensor_parallel"]:
        problems.append(
            f"verl.tensor_parallel ({s['tensor_parallel']}) must divide verl.gpus_per_node ({s['gpus_per_node']})"
        )
    if problems:
        raise VerlConfigError("; ".join(problems))
    return s


def flash_attn_version() -> str | None:
    """flash-attn's version in this Python (prepare runs in veRL's), None when it cannot be imported. PyPI has no wheel of
    it (a source distribution built against the local CUDA toolkit); prebuilt wheels for a torch/CUDA/Python triple are
    on flash-attention's GitHub releases."""
    from importlib import metadata
    from importlib.util import find_spec

    if find_spec("flash_attn") is None:
        return None
    try:
        return metadata.version("flash-attn")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def attention_of(cfg: Mapping[str, Any], flash_attn: str | None) -> tuple[str, str]:
    """(attn_implementation of veRL's FSDP models — actor, reference, critic —, why). veRL 0.9.1 loads them with
    flash_attention_2 unless `model.override_config.attn_implementation` says otherwise (verl/workers/config/model.py),
    and neither veRL's nor vLLM's requirements install flash-attn, so without it the workers fail to start. SDPA needs
    no other setting: with veRL's remove-padding (use_remove_padding, on by default) the packed sequences reach the
    model with no attention mask and position ids restarting at each sequence, from which transformers builds the
    block-causal mask SDPA needs (masking_utils.find_packed_sequence_indices; test_verl_config checks it)."""
    want = verl_settings(cfg)["attention"]
    if want == "sdpa":
        return "sdpa", "verl.attention: sdpa"
    if flash_attn:
        return "flash_attention_2", f"flash-attn {flash_attn} is installed in veRL's Python"
    if want == "flash_attention_2":
        raise VerlConfigError(
            'verl.attention: flash_attention_2 needs flash-attn in veRL\'s Python, which cannot import it (PyPI has no wheel: install one built for this torch, CUDA and Python from flash-attention\'s GitHub releases, or set verl.attention to "sdpa" or "auto")'
        )
    return (
        "sdpa",
        "flash-attn is not installed in veRL's Python: PyTorch's scaled_dot_product_attention instead (verl.attention: auto)",
    )


def rollout_logprob_kind(cfg: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(what the records' rollout_logprob are, the vLLM logprobs_mode to ask for; None: veRL's default).

    The trainer's log-prob of a token is log π_T: the softmax of the logits ÷ the rollout temperature over the whole
    vocabulary (veRL's actor divides by the rollout temperature). vLLM (its v1 sampler) returns, per `logprobs_mode`,
    `processed_logprobs` (veRL's default): the log-softmax after temperature, top-k and top-p — with a nucleus
    (top_p < 1) the renormalised nucleus, log π_T − log Z where Z ≥ top_p is the nucleus's mass —, or
    `raw_logprobs`: the log-softmax of the logits before temperature and nucleus. So:
    - top_p 1: processed is log π_T ("raw" in the records' sense: comparable to the trainer's as is);
    - top_p < 1 at temperature 1: vLLM's raw_logprobs are log π_T: asked for, "raw";
    - top_p < 1 at another temperature: neither mode is log π_T: processed, recorded as "processed" (the audit's
      microscope allows for the normaliser: Δ = trainer − rollout in [log top_p, 0] is the nucleus, not a mismatch).
    SGLang's kind is not checked here: (None, None), nothing recorded."""
    if verl_settings(cfg)["rollout"] != "vllm":
        return None, None
    top_p = float(_get(cfg, "rollout.top_p", 1.0))
    temperature = float(_get(cfg, "rollout.temperature", 1.0))
    if top_p >= 1.0:
        return "raw", None
    if temperature == 1.0:
        return "raw", "raw_logprobs"
    return "processed", None


def memory_inputs(cfg: Mapping[str, Any], flash_attn: str | None = None) -> dict[str, Any]:
    """What decides a veRL run's memory on each GPU besides the model's and batch's shapes, as a memory planner needs
    it: the effective value of each knob and whether the config chose it (`chosen`: the PLANNER_KEYS it sets) or
    veRL's default applies. veRL keeps fp32 FSDP master weights, gradients and AdamW state sharded over all
    `world_size` GPUs (÷ fsdp_shards; offload moves them to CPU), computes in bf16, holds the reference (KL > 0, not
    LoRA) as a second sharded copy, and colocates vLLM, which reserves `rollout_gpu_memory_utilization` × the GPU's
    memory (its weights ÷ tensor_parallel, then KV cache) and frees it while the actor trains (veRL's
    free_cache_engine)."""
    s = verl_settings(cfg)
    world = s["gpus_per_node"] * s["nodes"]
    ckpt = _get(cfg, "model.gradient_checkpointing")
    algo = _get(cfg, "algorithm.name", "grpo")
    kl = float(_get(cfg, "algorithm.kl_coef", 0.0))
    impl, _why = attention_of(cfg, flash_attn)
    return {
        "engine": "verl",
        "world_size": world,
        "fsdp_shards": world,
        "strategy": s["strategy"],
        "param_offload": VERL_OWN["param_offload"] if s["param_offload"] is None else s["param_offload"],
        "optimizer_offload": VERL_OWN["optimizer_offload"]
        if s["optimizer_offload"] is None
        else s["optimizer_offload"],
        "gradient_checkpointing": VERL_OWN["gradient_checkpointing"] if ckpt is None else bool(ckpt),
        "chosen": [
            k
            for k, v in (
                ("verl.param_offload", s["param_offload"]),
                ("verl.optimizer_offload", s["optimizer_offload"]),
                ("model.gradient_checkpointing", ckpt),
            )
            if v is not None
        ],
        "master_dtype": "float32",
        "compute_dtype": "bfloat16",
        "reference_model": kl > 0
        and not _get(cfg, "model.lora"),  # with LoRA the reference is the base without the adapter
        "critic_model": algo == "ppo",
        "lora": bool(_get(cfg, "model.lora")),
        "rollout_engine": s["rollout"],
        "rollout_tensor_parallel": s["tensor_parallel"],
        "rollout_gpu_memory_utilization": float(s["gpu_memory_utilization"]),
        "rollout_frees_memory_while_training": True,
        "attention": impl,
        "micro_batch_per_gpu": int(_get(cfg, "optim.micro_batch_size", 8)),
        "max_sequence_tokens": int(_get(cfg, "rollout.max_prompt_length", 1024))
        + int(_get(cfg, "rollout.max_response_length", 1024)),
    }


_BARE = re.compile(r"^[A-Za-z_/.~][A-Za-z0-9_./:@~+-]*$")


def hydra_value(v: Any) -> str:
    """A value in Hydra's override grammar: strings quoted unless plainly safe, lists in brackets."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    s = str(v)
    if _BARE.match(s) and s.lower() not in ("true", "false", "null", "nan", "inf"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def dialect_of(cfg: Mapping[str, Any]) -> str:
    """searchr1 (tags) or toolcall; the run config's `rollout.dialect` when it has one."""
    d = _get(cfg, "rollout.dialect", "searchr1")
    if d not in ("searchr1", "toolcall"):
        raise VerlConfigError(f"rollout.dialect: {d!r}: the veRL engine plays searchr1 (tags) or toolcall")
    return d


def agent_loop_entries(cfg: Mapping[str, Any], env_url: str | None) -> list[dict[str, Any]]:
    """veRL's agent-loop config file (`rollout.agent.agent_loop_config_path`): our loops and their settings (no
    env_url: the loops read $SAS_ENV_URL, which the Ray runtime env sets)."""
    common = {"env_url": env_url} if env_url else {}
    return [
        {
            "name": SEARCH_R1_AGENT,
            "_target_": AGENT_LOOP_CLASSES[SEARCH_R1_AGENT],
            **common,
            "max_turns": int(_get(cfg, "rollout.max_turns", 4)),
            "max_turn_tokens": int(_get(cfg, "rollout.max_turn_tokens", 500)),
            "max_obs_length": int(_get(cfg, "rollout.max_obs_length", 500)),
            "topk": int(_get(cfg, "retriever.topk", 3)),
            "chat_template": bool(_get(cfg, "data.chat_template", True)),
            "loss_masking": bool(_get(cfg, "algorithm.loss_masking", True)),
            "strict_actions": bool(_get(cfg, "rollout.strict_actions", False)),
        },
        {"name": TOOL_AGENT, "_target_": AGENT_LOOP_CLASSES[TOOL_AGENT]},
    ]


def tool_entries(cfg: Mapping[str, Any], env_url: str | None) -> dict[str, Any]:
    """veRL's tool config file (`rollout.multi_turn.tool_config_path`): our search tool, named by rollout.search_tool
    (the trainer's tool-call dialect's key; default `search`)."""
    url = {"env_url": env_url} if env_url else {}
    schema = search_tool_schema(str(_get(cfg, "rollout.search_tool", "search")))
    return {
        "tools": [
            {
                "class_name": TOOL_CLASS,
                "config": {"type": "native", **url, "topk": int(_get(cfg, "retriever.topk", 3))},
                "tool_schema": schema,
            }
        ]
    }


AR = "actor_rollout_ref"  # veRL's actor, rollout and reference group


@dataclass(frozen=True)
class VerlLaunch:
    """Where a prepared veRL run's pieces are and what its launch knows: the run directory, the files prepare writes
    (the datasets as parquet, the resolved config, the agent-loop and tool files; `val_files`, `tool_file` None: none),
    `env_url` (None: named at launch, $SAS_ENV_URL, export.py's launch script), the driver's pid, `trainer_dir` (where
    the Ray workers import our package from) and `flash_attn` (flash-attn's version in veRL's Python; None: absent,
    prepare looks)."""

    run_dir: str | os.PathLike[str]
    env_url: str | None
    train_files: str
    val_files: str | None
    config_file: str
    agent_loop_file: str
    tool_file: str | None
    driver_pid: int | None = None
    trainer_dir: str = str(TRAINER_DIR)
    flash_attn: str | None = None


@dataclass(frozen=True)
class Mapped:
    """Our config's values as several override groups read them: the `verl` section (verl_settings), the batch in
    veRL's counts, the KL term's place, the attention chosen."""

    cfg: Mapping[str, Any]
    verl: dict[str, Any]
    algo: str
    n: int  # samples per prompt (rollout.n)
    batch: int  # prompts per step (rollout.batch_size)
    mini: int  # sequences per optimizer step (optim.mini_batch_size; veRL counts prompts: mini // n)
    micro: int
    steps: int
    lr: float
    kl: float
    kl_in_reward: bool  # β·KL in the reward (algorithm.kl_in_reward with β > 0), else in the loss
    kl_type: str
    attention: str
    attention_why: str
    logprobs_mode: str | None
    dialect: str  # searchr1 | toolcall
    checkpointing: bool | None  # model.gradient_checkpointing (None: veRL's own)

    def get(self, dotted: str, default: Any = None) -> Any:
        return _get(self.cfg, dotted, default)


def refusals(cfg: Mapping[str, Any], algo: str, n: int, batch: int, mini: int) -> list[str]:
    """What of `cfg` a veRL run cannot carry over, each naming its key."""
    problems: list[str] = []
    if _get(cfg, "model.kind", "tiny") != "hf" or not _get(cfg, "model.path"):
        problems.append(
            'model.kind: veRL trains Hugging Face models: set model.kind "hf" and model.path (a model directory)'
        )
    if _get(cfg, "model.init"):
        problems.append(
            "model.init: a checkpoint of the builtin trainer cannot start a veRL run; point model.path at a Hugging Face model directory"
        )
    if int(_get(cfg, "train.supervised_warmup.steps", 0) or 0) > 0:
        problems.append(
            "train.supervised_warmup: the builtin trainer's format warm-up has no veRL counterpart (engine builtin has it)"
        )
    if algo not in ADV_ESTIMATOR:
        problems.append(f"algorithm.name: {algo!r} has no veRL estimator here")
    if mini % n:
        # e.g. the search-r1-grpo preset's 256 sequences with n = 5: Search-R1's old veRL counted mini-batches in rows
        # (its 5 samples were repeated prompts, n_agent), veRL 0.9 counts prompts of n samples each
        near = sorted((p * n for p in range(1, batch + 1) if batch % p == 0), key=lambda x: (abs(x - mini), x))[:2]
        problems.append(
            f"optim.mini_batch_size ({mini}) must be a multiple of rollout.n ({n}): veRL counts mini-batches in prompts of rollout.n sequences; the nearest that divide a step's {batch} prompts: {' or '.join(map(str, near))} sequences"
        )
    elif mini // n > batch:
        problems.append(
            f"optim.mini_batch_size ({mini}) is more than a step's {batch * n} sequences (rollout.batch_size × rollout.n)"
        )
    return problems


def objective_overrides(m: Mapped) -> dict[str, Any]:
    """The advantage estimator and the actor's loss: clipped surrogate (ε_low, ε_high), β·KL (in the loss or the
    reward, with its estimator k1/k2/k3 — veRL's core_algos.kl_penalty names), entropy bonus, aggregation."""
    return {
        "algorithm.adv_estimator": ADV_ESTIMATOR[m.algo],
        "algorithm.norm_adv_by_std_in_grpo": bool(m.get("algorithm.norm_adv_by_std", True)),
        "algorithm.gamma": float(m.get("algorithm.gamma", 1.0)),
        "algorithm.lam": float(m.get("algorithm.lam", 1.0)),
        "algorithm.use_kl_in_reward": m.kl_in_reward,
        "algorithm.kl_penalty": m.kl_type,
        "algorithm.kl_ctrl.kl_coef": m.kl,
        f"{AR}.actor.use_kl_loss": m.kl > 0 and not m.kl_in_reward,
        f"{AR}.actor.kl_loss_coef": m.kl,
        f"{AR}.actor.kl_loss_type": m.kl_type,
        f"{AR}.actor.clip_ratio_low": float(m.get("algorithm.clip_ratio_low", 0.2)),
        f"{AR}.actor.clip_ratio_high": float(m.get("algorithm.clip_ratio_high", 0.2)),
        f"{AR}.actor.entropy_coeff": float(m.get("algorithm.entropy_coef", 0.0)),
        f"{AR}.actor.loss_agg_mode": m.get("algorithm.loss_agg_mode", "token-mean"),
    }


def optimisation_overrides(m: Mapped) -> dict[str, Any]:
    """The actor's optimizer and LR schedule, its PPO epochs and (mini, micro) batches (mini in prompts), the
    reference's micro-batch, and whether there is a critic."""
    return {
        f"{AR}.actor.optim.lr": m.lr,
        f"{AR}.actor.optim.lr_warmup_steps": int(m.get("optim.warmup_steps", 0)) or -1,
        f"{AR}.actor.optim.lr_scheduler_type": m.get("optim.lr_schedule", "constant"),
        f"{AR}.actor.optim.min_lr_ratio": float(m.get("optim.min_lr_ratio", 0.0)),
        f"{AR}.actor.optim.weight_decay": float(m.get("optim.weight_decay", 0.0)),
        f"{AR}.actor.optim.clip_grad": float(m.get("optim.grad_clip", 1.0)),
        f"{AR}.actor.ppo_epochs": int(m.get("optim.ppo_epochs", 1)),
        f"{AR}.actor.ppo_mini_batch_size": m.mini // m.n,
        f"{AR}.actor.ppo_micro_batch_size_per_gpu": m.micro,
        f"{AR}.actor.strategy": m.verl["strategy"],
        f"{AR}.ref.log_prob_micro_batch_size_per_gpu": m.micro,
        "critic.enable": m.algo == "ppo",
    }


def model_overrides(m: Mapped) -> dict[str, Any]:
    """The model and its attention (offload and gradient checkpointing: memory_overrides, veRL's own defaults unless
    the config asks)."""
    return {f"{AR}.model.path": m.get("model.path"), f"+{AR}.model.override_config.attn_implementation": m.attention}


def rollout_overrides(m: Mapped, launch: VerlLaunch) -> dict[str, Any]:
    """The rollout engine, sampling, the sampler's log-probs, and our agent loop (Search-R1's tags or tool calls)."""
    return {
        f"{AR}.rollout.name": m.verl["rollout"],
        f"{AR}.rollout.n": m.n,
        f"{AR}.rollout.temperature": float(m.get("rollout.temperature", 1.0)),
        f"{AR}.rollout.top_p": float(m.get("rollout.top_p", 1.0)),
        f"{AR}.rollout.tensor_model_parallel_size": m.verl["tensor_parallel"],
        f"{AR}.rollout.gpu_memory_utilization": float(m.verl["gpu_memory_utilization"]),
        f"{AR}.rollout.log_prob_micro_batch_size_per_gpu": m.micro,
        f"{AR}.rollout.calculate_log_probs": True,  # the records' rollout_logprob
        f"{AR}.rollout.logprobs_mode": m.logprobs_mode,  # None: not overridden (rollout_logprob_kind)
        f"{AR}.rollout.skip_tokenizer_init": False,  # stop strings (`</search>`) need the engine's tokenizer
        f"{AR}.rollout.agent.default_agent_loop": SEARCH_R1_AGENT if m.dialect == "searchr1" else TOOL_AGENT,
        f"{AR}.rollout.agent.agent_loop_config_path": launch.agent_loop_file,
        f"{AR}.rollout.agent.num_workers": m.verl["agent_workers"],
        f"{AR}.rollout.multi_turn.max_assistant_turns": int(m.get("rollout.max_turns", 4)) + 1,
        f"{AR}.rollout.multi_turn.max_tool_response_length": 100_000,  # characters; our max_obs_length is in tokens
    }


def data_overrides(m: Mapped, launch: VerlLaunch) -> dict[str, Any]:
    """The datasets (prepare's parquet files) and their lengths."""
    return {
        "data.train_files": launch.train_files,
        "data.val_files": launch.val_files or launch.train_files,
        "data.val_max_samples": int(m.get("data.eval_size", -1) or -1) if launch.val_files else 0,
        "data.train_batch_size": m.batch,
        "data.max_prompt_length": int(m.get("rollout.max_prompt_length", 1024)),
        "data.max_response_length": int(m.get("rollout.max_response_length", 1024)),
        "data.filter_overlong_prompts": True,  # the builtin trainer skips them too
        "data.seed": int(m.get("seed", 1)),
    }


def reward_overrides(m: Mapped, launch: VerlLaunch) -> dict[str, Any]:
    """The reward: our /reward (reward.py's compute_score)."""
    return {
        "reward.custom_reward_function.path": REWARD_FN,
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs.env_url": launch.env_url,
        "reward.num_workers": m.verl["reward_workers"],
    }


def trainer_overrides(m: Mapped, launch: VerlLaunch) -> dict[str, Any]:
    """veRL's trainer: steps, evaluation and checkpoint cadence, where it writes, the cluster's shape."""
    eval_every = int(m.get("train.eval_every", 10))
    ckpt_every = int(m.get("train.checkpoint_every", 10))
    run_dir = launch.run_dir
    return {
        "trainer.use_v1": False,  # RayPPOTrainer, the trainer recorder.py extends (0.9.1's default V1 needs TransferQueue)
        "trainer.total_training_steps": m.steps,
        "trainer.total_epochs": 1_000_000,  # steps decide
        "trainer.test_freq": (eval_every if eval_every > 0 else m.steps) if launch.val_files else -1,
        "trainer.val_before_train": bool(launch.val_files),
        "trainer.save_freq": ckpt_every if ckpt_every > 0 else m.steps,
        "trainer.resume_mode": "auto",  # a resumed run directory continues from its last veRL checkpoint
        "trainer.default_local_dir": str(Path(run_dir) / "checkpoints" / "verl"),
        "trainer.rollout_data_dir": str(Path(run_dir) / "rollouts"),  # turns on the hook recorder.py records in
        "trainer.project_name": "search-agent-studio",
        "trainer.experiment_name": Path(run_dir).name,
        "trainer.logger": ["console"],
        "trainer.n_gpus_per_node": m.verl["gpus_per_node"],
        "trainer.nnodes": m.verl["nodes"],
    }


def our_overrides(m: Mapped, launch: VerlLaunch) -> dict[str, Any]:
    """Ours (`+`): what recorder.py reads in the TaskRunner, and the Ray workers' environment (every worker imports
    our package and finds the env server)."""
    return {
        "+sas.run_dir": str(launch.run_dir),
        "+sas.config": launch.config_file,
        "+sas.driver_pid": launch.driver_pid,
        "+sas.attention": m.attention,  # run.json says which attention and why
        "+sas.attention_why": m.attention_why,
        "+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH": launch.trainer_dir,
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{ENV_URL_VAR}": launch.env_url,
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook": WORKER_SETUP,  # worker_setup.py: TRL hidden from veRL
    }


def memory_overrides(m: Mapped) -> dict[str, Any]:
    """Gradient checkpointing and FSDP offload of the actor and reference, set only where the config (or the memory
    planner, PLANNER_KEYS) asks: veRL's own defaults otherwise."""
    o: dict[str, Any] = {}
    if m.checkpointing is not None:
        o[f"{AR}.model.enable_gradient_checkpointing"] = bool(m.checkpointing)
    if m.verl["param_offload"] is not None:
        o[f"{AR}.actor.fsdp_config.param_offload"] = o[f"{AR}.ref.fsdp_config.param_offload"] = m.verl["param_offload"]
    if m.verl["optimizer_offload"] is not None:
        o[f"{AR}.actor.fsdp_config.optimizer_offload"] = m.verl["optimizer_offload"]
    return o


def lora_overrides(m: Mapped, notes: list[str]) -> dict[str, Any]:
    """model.lora as veRL's FSDP LoRA (rank, alpha, target modules; it has no dropout)."""
    lora = m.get("model.lora")
    if not lora:
        return {}
    if float(lora.get("dropout", 0) or 0) > 0:
        notes.append("model.lora.dropout: veRL's FSDP LoRA has no dropout setting; trained without")
    return {
        f"{AR}.model.lora_rank": int(lora.get("r", 8)),
        f"{AR}.model.lora_alpha": float(lora.get("alpha", 16)),
        f"{AR}.model.target_modules": list(lora.get("target_modules") or ["q_proj", "k_proj", "v_proj", "o_proj"]),
    }


def critic_overrides(m: Mapped, notes: list[str]) -> dict[str, Any]:
    """PPO's critic: veRL's is a separate model with its own optimizer (our value head shares the policy's)."""
    if m.algo != "ppo":
        return {}
    o: dict[str, Any] = {
        "critic.model.path": m.get("model.path"),
        "critic.strategy": m.verl["strategy"],
        "critic.optim.lr": float(m.get("optim.critic_lr") or 10 * m.lr),
        "critic.optim.weight_decay": float(m.get("optim.weight_decay", 0.0)),
        "critic.optim.clip_grad": float(m.get("optim.grad_clip", 1.0)),
        "critic.optim.lr_warmup_steps": int(m.get("optim.critic_warmup_steps", m.get("optim.warmup_steps", 0)) or 0)
        or -1,
        "critic.ppo_micro_batch_size_per_gpu": m.micro,
        "critic.cliprange_value": float(m.get("algorithm.value_clip", 0.5)),
        "+critic.model.override_config.attn_implementation": m.attention,
    }
    if m.checkpointing is not None:
        o["critic.model.enable_gradient_checkpointing"] = bool(m.checkpointing)
    if m.verl["param_offload"] is not None:
        o["critic.fsdp.param_offload"] = m.verl["param_offload"]
    if m.verl["optimizer_offload"] is not None:
        o["critic.fsdp.optimizer_offload"] = m.verl["optimizer_offload"]
    notes.append(
        "algorithm.vf_coef: veRL's critic is a separate model with its own optimizer (critic.optim); vf_coef has no counterpart"
    )
    if not m.get("algorithm.mask_advantages", False):
        notes.append(
            "algorithm.mask_advantages: veRL computes GAE over the response mask (as mask_advantages: true); Search-R1's unmasked GAE is the builtin engine's"
        )
    return o


def verl_overrides(cfg: Mapping[str, Any], launch: VerlLaunch) -> tuple[list[str], list[str]]:
    """(overrides, notes) for veRL's `ppo_trainer` config from our resolved run config, group by group (the order
    is the overrides', kept as first written); `verl.overrides` come last."""
    s = verl_settings(cfg)
    dialect = dialect_of(cfg)
    algo = _get(cfg, "algorithm.name", "grpo")
    n, batch, mini = (
        int(_get(cfg, "rollout.n", 5)),
        int(_get(cfg, "rollout.batch_size", 8)),
        int(_get(cfg, "optim.mini_batch_size", 64)),
    )
    problems = refusals(cfg, algo, n, batch, mini)
    if problems:
        raise VerlConfigError("; ".join(problems))
    notes: list[str] = []
    attention, attention_why = attention_of(cfg, launch.flash_attn)
    if attention == "sdpa" and s["attention"] == "auto":
        notes.append(f"attention: sdpa ({attention_why})")
    kl = float(_get(cfg, "algorithm.kl_coef", 0.0))
    m = Mapped(
        cfg=cfg,
        verl=s,
        algo=algo,
        n=n,
        batch=batch,
        mini=mini,
        micro=int(_get(cfg, "optim.micro_batch_size", 8)),
        steps=int(_get(cfg, "train.steps", 100)),
        lr=float(_get(cfg, "optim.lr", 1e-6)),
        kl=kl,
        kl_in_reward=bool(_get(cfg, "algorithm.kl_in_reward", False)) and kl > 0,
        kl_type=_get(cfg, "algorithm.kl_estimator", "k3"),  # veRL accepts the k1/k2/k3 names (core_algos.kl_penalty)
        attention=attention,
        attention_why=attention_why,
        logprobs_mode=rollout_logprob_kind(cfg)[1],
        dialect=dialect,
        checkpointing=_get(cfg, "model.gradient_checkpointing"),
    )
    o = {
        **objective_overrides(m),
        **optimisation_overrides(m),
        **model_overrides(m),
        **rollout_overrides(m, launch),
        **data_overrides(m, launch),
        **reward_overrides(m, launch),
        **trainer_overrides(m, launch),
        **our_overrides(m, launch),
    }
    if launch.tool_file:
        o[f"{AR}.rollout.multi_turn.tool_config_path"] = launch.tool_file
    o.update(memory_overrides(m))
    if _get(cfg, "algorithm.clip_ratio_c") is not None:  # dual-clip PPO's lower bound c
        o[f"{AR}.actor.clip_ratio_c"] = float(_get(cfg, "algorithm.clip_ratio_c"))
    o.update(lora_overrides(m, notes))
    o.update(critic_overrides(m, notes))
    if _get(cfg, "model.dtype", "auto") == "fp32":
        notes.append(
            "model.dtype fp32: veRL's FSDP keeps fp32 master weights and computes in bf16 (its mixed precision); not mapped"
        )
    if _get(cfg, "train.save_rollouts", True) is False:
        notes.append(
            "train.save_rollouts false: the veRL engine always records rollouts (they are what the recorder is for); train.record says which"
        )
    out = [
        f"{k}={hydra_value(v)}"
        for k, v in o.items()
        if v is not None or not (k.startswith("+") or k.endswith(".logprobs_mode"))
    ]
    return out + list(s["overrides"]), notes


def prepare(
    cfg: Mapping[str, Any],
    run_dir: str | os.PathLike[str],
    env_url: str | None,
    driver_pid: int | None = None,
    trainer_dir: str = str(TRAINER_DIR),
) -> VerlPlan:
    """Everything a veRL run of `cfg` needs, under `<run_dir>/verl/`: the datasets as parquet (written now: they
    need our loader), the config (config.stored_config's form: builtin:NAME data named), the agent-loop and tool files (in the plan's `files`), the overrides."""
    from ...config import stored_config
    from ...data import load_dataset
    from .dataset import write_verl_parquet

    run_dir = Path(run_dir).resolve()
    d = run_dir / "verl"
    template = _get(cfg, "data.prompt_template", "{question}")
    dialect = dialect_of(cfg)
    agent = SEARCH_R1_AGENT if dialect == "searchr1" else TOOL_AGENT
    val = d / "val.parquet" if _get(cfg, "data.eval") else None
    launch = VerlLaunch(
        run_dir=run_dir,
        env_url=env_url,
        train_files=str(d / "train.parquet"),
        val_files=str(val) if val else None,
        config_file=str(d / "run-config.json"),
        agent_loop_file=str(d / "agent_loops.yaml"),
        tool_file=str(d / "tools.yaml"),
        driver_pid=driver_pid,
        trainer_dir=trainer_dir,
        flash_attn=flash_attn_version(),
    )
    overrides, notes = verl_overrides(cfg, launch)
    # refused configs raise above, before anything is written
    write_verl_parquet(
        load_dataset(_get(cfg, "data.train"), warn=notes.append), template, d / "train.parquet", "train", agent
    )
    if val:
        write_verl_parquet(load_dataset(_get(cfg, "data.eval"), warn=notes.append), template, val, "val", agent)
    files = {
        # builtin:NAME data stays named (as run.json keeps it): a resume prepares again from this file, maybe in another install
        str(d / "run-config.json"): json.dumps(stored_config(cfg), indent=2, ensure_ascii=False) + "\n",
        str(d / "agent_loops.yaml"): json.dumps(agent_loop_entries(cfg, env_url), indent=2) + "\n",  # JSON is YAML
        str(d / "tools.yaml"): json.dumps(tool_entries(cfg, env_url), indent=2) + "\n",
    }
    return VerlPlan(overrides, files, notes)


def launch_command(python: str, overrides: list[str]) -> list[str]:
    """The argument array that runs a prepared veRL run (Ray starts locally unless RAY_ADDRESS names a cluster)."""
    return [python, "-m", "search_agent_trainer.engines.verl.main", *overrides]
