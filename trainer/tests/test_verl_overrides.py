"""The veRL overrides pinned: `verl_overrides`' output (the Hydra override list, in order, and the notes) for three
configs that take most of its branches (PPO with its critic, LoRA, offload, dual clip, fp32 and raw overrides; the
tool-call dialect at launch without an env URL; Dr. GRPO with LoRA dropout on SGLang), as written by the function
before it was split into its groups (verl_overrides_pinned.json; the bare launch's default trainer_dir, this checkout's
trainer/, written as <trainer_dir>). overrides.py imports no veRL: this runs anywhere."""

import json
from pathlib import Path

import pytest

from search_agent_trainer.engines.verl.overrides import TRAINER_DIR, VerlLaunch, verl_overrides
from verl_engine.verl_harness import run_config  # the veRL tests' run config (it imports no veRL)

MODEL = Path("/models/q")
PINNED = json.loads((Path(__file__).parent / "verl_overrides_pinned.json").read_text(encoding="utf-8"))
CASES = {
    "ppo-everything": {
        "algorithm": {"name": "ppo", "kl_coef": 0.01, "clip_ratio_c": 3.0, "value_clip": 0.2},
        "model": {"gradient_checkpointing": False, "dtype": "fp32", "lora": {"r": 8}},
        "verl": {
            "param_offload": True,
            "optimizer_offload": True,
            "attention": "sdpa",
            "overrides": ["trainer.val_before_train=False"],
        },
        "optim": {"critic_warmup_steps": 3, "warmup_steps": 1},
        "train": {"save_rollouts": False, "eval_every": 0, "checkpoint_every": 0},
    },
    "toolcall": {
        "rollout": {"dialect": "toolcall", "search_tool": "lookup", "top_p": 0.9},
        "model": {"gradient_checkpointing": True},
        "verl": {"optimizer_offload": False},
    },
    "dr-grpo-lora-cosine": {
        "algorithm": {
            "norm_adv_by_std": False,
            "clip_ratio_high": 0.28,
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "entropy_coef": 0.001,
        },
        "model": {"lora": {"r": 16, "alpha": 32, "dropout": 0.05}, "dropout": True},
        "optim": {
            "mini_batch_size": 8,
            "micro_batch_size": 2,
            "warmup_steps": 2,
            "lr_schedule": "cosine",
            "min_lr_ratio": 0.1,
        },
        "verl": {"rollout": "sglang"},
    },
}
LAUNCHES = {
    "full": VerlLaunch(
        run_dir="/runs/r1",
        env_url="http://127.0.0.1:8123",
        train_files="/runs/r1/verl/train.parquet",
        val_files="/runs/r1/verl/val.parquet",
        config_file="/runs/r1/verl/run-config.json",
        agent_loop_file="/runs/r1/verl/agent_loops.yaml",
        tool_file="/runs/r1/verl/tools.yaml",
        driver_pid=4242,
        trainer_dir="/src/trainer",
        flash_attn="2.8.3",
    ),
    "bare": VerlLaunch(
        run_dir="/runs/r2",
        env_url=None,
        train_files="t.parquet",
        val_files=None,
        config_file="c.json",
        agent_loop_file="a.yaml",
        tool_file=None,
    ),
}


@pytest.mark.parametrize("key", sorted(PINNED))
def test_the_override_list_and_notes_are_the_pinned_ones(key):
    case, launch = key.split("/")
    overrides, notes = verl_overrides(run_config(MODEL, **CASES[case]), LAUNCHES[launch])
    overrides = [o.replace(str(TRAINER_DIR), "<trainer_dir>") for o in overrides]
    assert [overrides, notes] == PINNED[key]
