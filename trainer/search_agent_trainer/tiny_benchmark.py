"""The demo's training step on CPU (`npm run bench demo-step`; `python -m search_agent_trainer.tiny_benchmark`): the
built-in tiny model's fast paths against the general ones they replace, in the same process, on the same batches.

The run is the two-hop recipe (examples/demo-multihop.run.json; in fp32 unless `--dtype bf16`) after a short warm start (so rollouts search, read
and answer as in training, ~300 tokens each), against the env server at `--env-url`. Each round, interleaved:

1. rollout, ours: the KV cache grows into spare room (tiny.append) — peer: a new buffer every decode step (room 0,
   what torch.cat does). Same seed: the same tokens (checked);
2. the log-prob passes and the update (Trainer._passes_and_advantages + _update, from the same weights and optimizer state),
   ours: the target tokens' log-probs without the whole output distribution, and the old log-probs from the first
   epoch's forward (one mini-batch per epoch) — peer: the whole distribution everywhere and a separate old-log-prob
   pass. The largest difference between the two paths' old log-probs and their reference log-probs is reported;
3. the log-prob passes and the update with half the groups flat (rewards all equal; the recipe's training runs
   have 0.4–0.6 of them from step ~150, 0.9 before), ours with `algorithm.skip_zero_std_groups` — peer: the same
   batch and rewards trained whole. Rewards are set, not scored: groups 0…B/2−1 all 0, the others alternating 1/0.

Output: human lines on stderr, one JSON object on stdout (the last line).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from . import cpu_env, tiny
from . import train as train_module
from .batch import make_batch
from .config import load_config
from .policy import Reference, window_stats
from .rollout import Trajectory
from .train import Trainer

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "demo-multihop.run.json"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _trainer(env_url: str, run_dir: str, warmup_steps: int, dtype: str) -> Trainer:
    cfg = load_config(str(RECIPE))
    cfg["model"]["dtype"] = dtype
    cfg["train"]["supervised_warmup"]["steps"] = warmup_steps
    cfg["train"]["save_rollouts"] = False
    trainer = Trainer(cfg, run_dir, env_url, stdout=open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
    trainer.setup()
    from .warmup import run_warmup

    run_warmup(trainer.warm_start(), lambda _msg: None)
    if trainer.reference is not None:
        trainer.reference = Reference(trainer.policy)
    return trainer


def _rollout(trainer: Trainer, seed: int, slack: int) -> tuple[float, list[Trajectory]]:
    cfg = trainer.cfg
    saved = tiny.CACHE_SLACK
    tiny.CACHE_SLACK = slack
    try:
        idx = list(range(seed * cfg.rollout.batch_size, (seed + 1) * cfg.rollout.batch_size))
        examples = [trainer.train_set[i % len(trainer.train_set)] for i in idx]
        prompts = [trainer.train_prompts[i % len(trainer.train_set)] for i in idx]
        torch.manual_seed(seed)
        trainer.policy.eval()
        t0 = time.perf_counter()
        trajs = trainer._rollouts(examples, prompts, cfg.rollout.n, seed, greedy=False)
        return time.perf_counter() - t0, trajs
    finally:
        tiny.CACHE_SLACK = saved


def _update(
    trainer: Trainer, trajs: list[Any], state: dict[str, Any], peer: bool, skip: bool = False
) -> tuple[dict[str, float], Any]:
    """Old/ref log-probs and the update from `state`; the peer with the general paths; `skip`: the rows with no
    advantage left out (skip_zero_std_groups). Returns timings and the batch."""
    a = trainer.cfg.algorithm
    trainer.policy.load_state_dict(state["policy"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    saved_ws, saved_on = train_module.window_stats, Trainer.on_policy
    if peer:
        train_module.window_stats = functools.partial(window_stats, whole_distribution=True)
        Trainer.on_policy = lambda self, batch_size: False  # type: ignore[method-assign]
    try:
        batch = make_batch(trajs, trainer.tok.pad_id, a.loss_masking, a.mask_advantages)
        t0 = time.perf_counter()
        _, timing = trainer._passes_and_advantages(batch, trajs, 1, skip=skip)
        passes = time.perf_counter() - t0
        ref = batch.ref_logprob.clone()
        t0 = time.perf_counter()
        trainer._update(batch, 1)
        timing.update({"passes": passes, "update": time.perf_counter() - t0})
        timing["total"] = timing["passes"] + timing["update"]
        return timing, (batch.old_logprob.clone(), ref, batch.loss_mask.bool())
    finally:
        train_module.window_stats, Trainer.on_policy = saved_ws, saved_on


def main(argv: list[str] | None = None) -> int:
    cpu_env.apply()
    p = argparse.ArgumentParser(
        prog="python -m search_agent_trainer.tiny_benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--env-url", required=True, help="the env server over the two-hop demo corpus")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--warmup-steps", type=int, default=60, help="warm-start steps before measuring (rollouts that search)"
    )
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16"],
        default="fp32",
        help="model.dtype (default fp32, the numerics this benchmark's history was measured in; the recipe itself computes in bf16 since stop 41)",
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(args.env_url, str(Path(tmp) / "run"), args.warmup_steps, args.dtype)
        state = {
            "policy": copy.deepcopy(trainer.policy.state_dict()),
            "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        }
        rounds: dict[str, list[float]] = {
            k: []
            for k in (
                "rollout_ours",
                "rollout_peer",
                "step_ours",
                "step_peer",
                "passes_ours",
                "passes_peer",
                "update_ours",
                "update_peer",
                "flat_skip",
                "flat_whole",
            )
        }
        diffs = {"old_logprob": 0.0, "ref_logprob": 0.0}
        tokens = []
        for r in range(args.rounds + 1):  # round 0 warms up both
            t_ours, ours = _rollout(trainer, r + 1, tiny.CACHE_SLACK)
            t_peer, peer = _rollout(trainer, r + 1, 0)
            if [t.ids for t in ours] != [t.ids for t in peer]:
                raise RuntimeError("the growing cache sampled other tokens than the copying one")
            u_ours, (old_o, ref_o, mask) = _update(trainer, ours, state, peer=False)
            u_peer, (old_p, ref_p, _) = _update(trainer, ours, state, peer=True)
            n = trainer.cfg.rollout.n
            for t in ours:  # half the groups flat, the others alternating (the same rewards both ways)
                t.reward = 0.0 if t.group < trainer.cfg.rollout.batch_size // 2 else float(t.sample % 2)
            u_skip, _ = _update(trainer, ours, state, peer=False, skip=True)
            u_whole, _ = _update(trainer, ours, state, peer=False)
            trainer.policy.load_state_dict(state["policy"])
            diffs["old_logprob"] = max(diffs["old_logprob"], float((old_o - old_p)[mask].abs().max()))
            diffs["ref_logprob"] = max(diffs["ref_logprob"], float((ref_o - ref_p)[mask].abs().max()))
            if r == 0:
                continue
            tokens.append(sum(len(t.ids) for t in ours) / len(ours))
            rounds["rollout_ours"].append(t_ours)
            rounds["rollout_peer"].append(t_peer)
            for name, u in (("ours", u_ours), ("peer", u_peer)):
                rounds[f"passes_{name}"].append(u["passes"])
                rounds[f"update_{name}"].append(u["update"])
                rounds[f"step_{name}"].append(t_ours if name == "ours" else t_peer)
                rounds[f"step_{name}"][-1] += u["total"]
            rounds["flat_skip"].append(u_skip["total"])
            rounds["flat_whole"].append(u_whole["total"])
            _log(
                f"round {r}: half the groups flat: passes + update {u_skip['total']:.2f} s skipping them vs {u_whole['total']:.2f} s whole ({n} samples a group)"
            )
            _log(
                f"round {r}: rollout {t_ours:.2f} s vs {t_peer:.2f} s; log-prob passes + update {u_ours['total']:.2f} s vs {u_peer['total']:.2f} s"
            )
        med = {k: statistics.median(v) for k, v in rounds.items()}
        result = {
            "machine": {"torch": torch.__version__, "cpu_threads": torch.get_num_threads()},
            "warmup_steps": args.warmup_steps,
            "response_tokens_mean": statistics.mean(tokens),
            "seconds": med,
            "speedup": {
                "rollout": med["rollout_peer"] / med["rollout_ours"],
                "passes": med["passes_peer"] / med["passes_ours"],
                "update": med["update_peer"] / med["update_ours"],
                "step": med["step_peer"] / med["step_ours"],
                "flat_groups": med["flat_whole"] / med["flat_skip"],
            },
            "max_abs_diff": diffs,
        }
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
