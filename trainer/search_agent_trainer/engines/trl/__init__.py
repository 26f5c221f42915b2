"""engine "trl": Hugging Face TRL's GRPOTrainer (TRL 1.16, trainer/requirements-trl.txt) trains, through accelerate
on one or many processes; our rollout, reward and run directory around it (docs/engines.md).

  options.py   the run config as GRPOConfig (the shared keys mapped, the `trl` section passed through and checked)
  launch.py    several processes: `accelerate launch`, supervised by the trainer the host started
  engine.py    the run: TRL's rollout_func (our multi-turn rollout), reward (our /reward) and a subclass hook that
               records every rollout with the tensors TRL trains on
  vllm.py      the rollout's turns sampled by TRL's colocated vLLM (`trl.use_vllm`)

`python -m search_agent_trainer` runs this engine for a config with `engine: "trl"`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

REQUIREMENTS = "trainer/requirements-trl.txt"


TRL_RELEASE = "1.16."  # the engine hooks into GRPOTrainer's methods of this release


def missing() -> str | None:
    """What this Python lacks for the engine (None: nothing)."""
    from importlib import metadata
    from importlib.util import find_spec

    absent = [name for name in ("trl", "accelerate", "datasets") if find_spec(name) is None]
    if absent:
        return (
            f'engine "trl" needs {", ".join(absent)} in this Python ({sys.executable}): pip install -r {REQUIREMENTS}'
        )
    if not metadata.version("trl").startswith(TRL_RELEASE):
        return f'engine "trl" is written for TRL {TRL_RELEASE}x; this Python ({sys.executable}) has TRL {metadata.version("trl")}: pip install -r {REQUIREMENTS}'
    return None


def run(cfg: Any, args: argparse.Namespace) -> int:
    """The engine's process: the supervisor of a launch (several processes), or a training process."""
    problem = missing()
    if problem:
        return _error(problem)
    import os

    from . import options

    _plan, problems = options.plan(cfg, int(os.environ.get("WORLD_SIZE") or options.processes(cfg)))
    problems += options.passthrough_problems(
        dict(cfg.trl or {}), options.grpo_fields()
    ) + options.importance_sampling_problems(cfg)
    if problems:
        return _error(f"{args.config or os.path.join(args.run_dir, 'run.json')}: " + "; ".join(problems))
    from .launch import needs_launch, supervise

    if needs_launch(cfg):
        import torch

        from ...policy import compute_dtype

        cuda = torch.cuda.is_available() and cfg.model.device != "cpu"
        trainer_args = [
            "--run-dir",
            args.run_dir,
            "--env-url",
            args.env_url,
            *(["--config", args.config] if args.config else []),
            *(["--resume"] if args.resume else []),
        ]
        return supervise(
            cfg,
            args.run_dir,
            trainer_args,
            bf16=compute_dtype(cfg, torch.device("cuda" if cuda else "cpu")) is not None,
        )
    quiet_libraries()
    from .engine import TRLEngine

    return TRLEngine(cfg, args.run_dir, args.env_url, resume=args.resume).run()


def _error(message: str) -> int:
    """A config or environment this engine cannot run: the error event, exit code 2 (nothing written)."""
    print(json.dumps({"event": "error", "message": message}), flush=True)
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 2


def quiet_libraries() -> None:
    """No progress bars (checkpoint shards, weights) or deprecation notices of the libraries in the trainer's log."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl|accelerate)(\.|$)")
    from transformers.utils import logging

    logging.disable_progress_bar()
