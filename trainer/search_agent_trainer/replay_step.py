"""Replaying a recorded step through the trainer (issue 46, docs/replay-step.md): a step's recorded token ids go
through today's batch building (batch.make_batch) and log-prob pass (policy.window_stats) at a checkpoint, and the
loss (losses.objective) and its gradient are recomputed, as the update computed them. Bisecting a trainer change
(miles, ROLL and slime have this): does today's code, at the weights that trained the step, give the numbers the
run recorded?

    python -m search_agent_trainer.replay_step --run-dir runs/<id> --checkpoint runs/<id>/checkpoints/step-000001 \\
        [--records step.jsonl] [--device cpu|cuda] [--tolerance NATS]

reads the step's rollout records (JSON lines: from `--records`, else stdin — `search-agent-studio replay-step` sends
them, read by the run store's readers, whatever backend the run's records are in) and prints one JSON report:

    {"checkpoint", "checkpoint_step", "step", "rollouts", "step_rollouts", "device", "dtype", "tolerance",
     "ids_identical", "text_identical", "loss_mask_identical", "mismatches": [{"id", "what", "at"}],
     "logprob": {"compared", "max_abs_diff", "mean_abs_diff", "flagged"},           # recomputed − recorded logprob
     "rollout_logprob": {"compared", "max_abs_diff", "mean_abs_diff"} | null,        # recomputed − rollout_logprob
     "loss": {"actor/pg_loss", "actor/kl_loss"?, "total"}, "grad_norm": {"actor/grad_norm", "critic/grad_norm"?},
     "rollouts_detail": [{"id", "compared", "max_abs_diff", "mean_abs_diff", "flagged", "delta": [per token | null]}],
     "match": bool}

`delta` is per token of `tokens.ids` (prompt included): recomputed − recorded `logprob` on the tokens the record
scored (loss_mask 1 with a recorded log-prob), null elsewhere — the log-prob microscope's view of the replay.
The default checkpoint of step N is step N − 1's (the weights that sampled and trained step N); a step's loss and
gradient norm equal the recorded metrics when its update was one mini-batch of one epoch over every rollout of the
step (`comparable`): a step recorded in part (`train.record.groups`, `every`, the flagged groups a behind writer keeps;
`step_rollouts` > `rollouts`) has metrics over all its rollouts, so only its ids and log-probs compare.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import torch

from . import cpu_env
from .batch import SequenceBatch, by_length, make_batch
from .checkpoint import STATE
from .config import Section, config_from_run_json
from .data import Example
from .fork import ForkError, load_checkpoint_policy
from .losses import Aggregation, objective
from .policy import compute_dtype, window_stats
from .recorder import RecordSettings
from .rollout import Trajectory
from .watchdog import watch_parent

# A recorded log-prob is rounded to 6 decimals (run_writer); a recomputation in fp32 differs from the recording pass
# by float noise of another batch shape (~1e-5 nats); bf16 compute by ~1e-2. Default tolerances above those scales.
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2}


class ReplayError(ValueError):
    """A replay that cannot run (the message says why)."""


def trajectory_of(record: dict[str, Any]) -> Trajectory:
    """A recorded rollout as the trainer's Trajectory: the prompt's ids, the response's ids and roles, and its
    sampling-time log-probs, from the record's token arrays (never re-tokenised text)."""
    t = record.get("tokens") or {}
    ids, roles = t.get("ids"), t.get("role")
    if not isinstance(ids, list) or not isinstance(roles, list) or len(ids) != len(roles) or not ids:
        raise ReplayError(
            f"rollout {record.get('id')}: no token ids and roles recorded (tokens.ids, tokens.role): only rollouts recorded with tokens can be replayed"
        )
    P = next((i for i, r in enumerate(roles) if r != "prompt"), len(roles))
    ex = Example(
        str((record.get("meta") or {}).get("example_id", record.get("id", ""))),
        record.get("question") or "",
        tuple(record.get("golden") or []),
        record.get("data_source") or "",
    )
    group = record.get("group")
    traj = Trajectory(
        ex,
        group if isinstance(group, int) else 0,
        int(record.get("sample") or 0),
        record.get("prompt") or "",
        list(ids[:P]),
    )
    lp = t.get("rollout_logprob") or [None] * len(ids)
    traj.ids, traj.roles, traj.sample_logprobs = list(ids[P:]), list(roles[P:]), list(lp[P:])
    traj.reward = record.get("reward")
    return traj


def _window(records: list[dict[str, Any]], key: str, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """A recorded per-token array over the batch's response window (0 where null), and where it was recorded."""
    B, R = batch.size, batch.window
    out, have = torch.zeros(B, R), torch.zeros(B, R, dtype=torch.bool)
    for i, rec in enumerate(records):
        t = rec["tokens"]
        a = t.get(key)
        if not isinstance(a, list):
            continue
        r = int(batch.response_length[i])
        tail = a[len(a) - r :] if r else []
        for j, x in enumerate(tail):
            if isinstance(x, (int, float)) and math.isfinite(x):
                out[i, R - r + j] = float(x)
                have[i, R - r + j] = True
    return out, have


class StepReplay:
    """A run's policy at one checkpoint, replaying recorded steps through today's trainer code."""

    def __init__(self, run_dir: str | Path, checkpoint: str | Path, device: str | None = None):
        self.run_dir = Path(run_dir)
        run_json = self.run_dir / "run.json"
        try:
            saved = json.loads(run_json.read_text(encoding="utf-8"))["config"]
        except (FileNotFoundError, KeyError, json.JSONDecodeError) as e:
            raise ReplayError(f"{run_json}: cannot read the run's config ({e})") from None
        self.cfg: Section = config_from_run_json(saved, self.run_dir, source=str(run_json))
        ckpt = Path(checkpoint)
        if not ckpt.exists():
            ckpt = self.run_dir / "checkpoints" / str(checkpoint)
        if not ckpt.exists():
            raise ReplayError(
                f"{checkpoint}: no such checkpoint (neither a directory nor one under {self.run_dir / 'checkpoints'})"
            )
        self.checkpoint = ckpt
        want = device or self.cfg.model.device
        self.device = torch.device(
            "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"
        )
        try:
            self.policy, self.tok = load_checkpoint_policy(self.cfg, ckpt, self.device)
        except ForkError as e:
            raise ReplayError(str(e)) from None
        self.dtype = compute_dtype(self.cfg, self.device)
        self.checkpoint_step = (
            int(json.loads((ckpt / STATE).read_text(encoding="utf-8")).get("step", 0))
            if (ckpt / STATE).exists()
            else None
        )

    def _ctx(self):
        return (
            torch.autocast(self.device.type, dtype=self.dtype)
            if self.dtype is not None
            else torch.autocast(self.device.type, enabled=False)
        )

    def replay(self, records: list[dict[str, Any]], tolerance: float | None = None) -> dict[str, Any]:
        if not records:
            raise ReplayError(
                "no rollout records to replay (is --step a training step whose rollouts were saved with tokens?)"
            )
        cfg, a = self.cfg, self.cfg.algorithm
        tol = tolerance if tolerance is not None else TOLERANCE["fp32" if self.dtype is None else "bf16"]
        trajs = [trajectory_of(r) for r in records]
        vocab = self.tok.vocab_size
        batch = make_batch(trajs, self.tok.pad_id, a.loss_masking, a.mask_advantages)
        mismatches: list[dict[str, Any]] = []
        ids_identical = text_identical = mask_identical = True
        for i, rec in enumerate(records):
            t = rec["tokens"]
            fed = batch.input_ids[i][batch.attention_mask[i].bool()].tolist()
            if fed != list(t["ids"]):
                ids_identical = False
                mismatches.append(
                    {
                        "id": rec.get("id"),
                        "what": "ids",
                        "at": next(
                            (k for k, (x, y) in enumerate(zip(fed, t["ids"])) if x != y), min(len(fed), len(t["ids"]))
                        ),
                    }
                )
            big = next((k for k, x in enumerate(t["ids"]) if x >= vocab), None)
            if big is not None:
                raise ReplayError(
                    f"rollout {rec.get('id')}: token {big} has id {t['ids'][big]}, outside this checkpoint's vocabulary ({vocab}): was it recorded with another tokenizer?"
                )
            if isinstance(t.get("text"), list):
                texts = self.tok.token_texts(t["ids"])
                if texts != t["text"]:
                    text_identical = False
                    mismatches.append(
                        {
                            "id": rec.get("id"),
                            "what": "text",
                            "at": next(
                                (k for k, (x, y) in enumerate(zip(texts, t["text"])) if x != y),
                                min(len(texts), len(t["text"])),
                            ),
                        }
                    )
            r = int(batch.response_length[i])
            built = batch.loss_mask[i, batch.window - r :].tolist() if r else []
            recorded = [float(x) for x in t["loss_mask"][len(t["loss_mask"]) - r :]] if r else []
            if built != recorded:
                mask_identical = False
                mismatches.append(
                    {
                        "id": rec.get("id"),
                        "what": "loss_mask",
                        "at": len(t["ids"]) - r + next(k for k, (x, y) in enumerate(zip(built, recorded)) if x != y),
                    }
                )

        # What the update read: the recorded old log-probs, advantages, reference log-probs and values (PPO).
        old, have_old = _window(records, "logprob", batch)
        adv, have_adv = _window(records, "advantage", batch)
        ref, have_ref = _window(records, "ref_logprob", batch)
        vals, have_vals = _window(records, "value", batch)
        rollout_lp, have_rollout = _window(records, "rollout_logprob", batch)
        scored = have_old & batch.loss_mask.bool()
        # rows without a recorded trainer log-prob were not trained (algorithm.skip_zero_std_groups)
        batch.trained = scored.any(-1) if not bool(scored.any(-1).all()) else None
        batch.old_logprob = old
        batch.advantages = adv
        batch.ref_logprob = ref if bool(have_ref.any()) and a.kl_coef > 0 else None
        batch.old_values = vals if self.policy.value_head is not None and bool(have_vals.any()) else None
        batch.returns = (adv + vals) if batch.old_values is not None else adv.clone()

        temp = cfg.rollout.temperature or 1.0
        B, R = batch.size, batch.window
        new = torch.zeros(B, R)
        rows = batch.trained_rows()
        # the whole mini-batch's denominators, as _update
        agg = Aggregation.of(a.loss_agg_mode, batch.loss_mask, cfg.rollout.max_response_length)
        vagg = Aggregation.of(a.loss_agg_mode, batch.adv_mask, cfg.rollout.max_response_length)
        self.policy.eval()  # no dropout: the recorded pass's log-probs are those of the weights, not of a dropout mask
        self.policy.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        total = 0.0
        for micro in by_length(batch, rows, cfg.optim.micro_batch_size):
            mb = batch.select(micro).to(self.device)
            with self._ctx():
                st = window_stats(
                    self.policy,
                    mb,
                    mb.loss_mask.bool(),
                    temp,
                    want_entropy=True,
                    want_values=self.policy.value_head is not None,
                    entropy_grad=a.entropy_coef > 0,
                )
                loss, stats = objective(st.logprob, st.entropy, st.values, mb, a, agg, vagg)
            loss.backward()
            total += float(loss.detach())
            for k in ("actor/pg_loss", "actor/kl_loss"):
                if k in stats:
                    sums[k] = sums.get(k, 0.0) + stats[k]
            r = mb.window
            new[micro, R - r :] = st.logprob.detach().float().cpu()
        groups = [[p for n, p in self.policy.named_parameters() if p.requires_grad and not n.startswith("value_head.")]]
        if self.policy.value_head is not None:
            groups.append(list(self.policy.value_head.parameters()))
        norms = [float(torch.nn.utils.clip_grad_norm_(g, float("inf"))) for g in groups]
        self.policy.zero_grad(set_to_none=True)

        delta = (new - old) * scored
        d = delta[scored].abs()
        flagged_total = int((d > tol).sum())
        versus_rollout = None
        sr = scored & have_rollout & batch.generated_mask.bool()
        if bool(sr.any()):
            dr = (new - rollout_lp)[sr].abs()
            versus_rollout = {
                "compared": int(sr.sum()),
                "max_abs_diff": float(dr.max()),
                "mean_abs_diff": float(dr.mean()),
            }
        detail = []
        for i, rec in enumerate(records):
            n = len(rec["tokens"]["ids"])
            r = int(batch.response_length[i])
            row: list[float | None] = [None] * n
            for j in range(r):
                if bool(scored[i, R - r + j]):
                    row[n - r + j] = round(float(delta[i, R - r + j]), 7)
            xs = [abs(x) for x in row if x is not None]
            detail.append(
                {
                    "id": rec.get("id"),
                    "compared": len(xs),
                    "max_abs_diff": max(xs, default=0.0),
                    "mean_abs_diff": sum(xs) / len(xs) if xs else 0.0,
                    "flagged": [k for k, x in enumerate(row) if x is not None and abs(x) > tol],
                    "delta": row,
                }
            )
        steps = {rec.get("step") for rec in records}
        out_step = steps.pop() if len(steps) == 1 else None
        of = step_rollouts(self.run_dir, out_step, cfg, len(records))
        out = {
            "checkpoint": str(self.checkpoint),
            "checkpoint_step": self.checkpoint_step,
            "step": out_step,
            "rollouts": len(records),
            "device": str(self.device),
            "dtype": "fp32" if self.dtype is None else str(self.dtype).removeprefix("torch."),
            "tolerance": tol,
            "ids_identical": ids_identical,
            "text_identical": text_identical,
            "loss_mask_identical": mask_identical,
            "mismatches": mismatches,
            "logprob": {
                "compared": int(scored.sum()),
                "max_abs_diff": float(d.max()) if d.numel() else 0.0,
                "mean_abs_diff": float(d.mean()) if d.numel() else 0.0,
                "flagged": flagged_total,
            },
            "rollout_logprob": versus_rollout,
            "loss": {**sums, "total": total},
            "grad_norm": {"actor/grad_norm": norms[0], **({"critic/grad_norm": norms[1]} if len(norms) > 1 else {})},
            "step_rollouts": of,
            "comparable": comparable(cfg, len(records), of, out_step),
            "rollouts_detail": detail,
        }
        out["match"] = (
            ids_identical and text_identical and mask_identical and flagged_total == 0 and int(scored.sum()) > 0
        )
        return out


def step_rollouts(run_dir: Path, step: Any, cfg: Section, replayed: int) -> int:
    """How many rollouts step `step`'s update trained on (its metrics cover all of them, recorded or not): the token
    store's `sas.store` metadata of the step (`of`, written by the recorder), else the trainer's step,
    `rollout.batch_size` prompts × `rollout.n` samples (a JSONL run: every k-th step, `groups` whole groups and the
    flagged ones leave no count beside the records). Never fewer than the records replayed."""
    of = None
    if isinstance(step, int):
        meta_of = _store_of(run_dir / "rollouts" / f"step-{step:06d}" / "rollouts.parquet")
        if meta_of is not None:
            of = meta_of
        else:
            r = cfg.rollout
            of = int(r.batch_size) * int(r.n) if r.batch_size and r.n else None
    return max(replayed, of or 0)


def _store_of(path: Path) -> int | None:
    """The `of` (the step's rollouts, recorded or not) of a token store step's `sas.store` metadata, if it says."""
    if not path.is_file():
        return None
    try:
        import pyarrow.parquet as pq

        meta = pq.read_schema(path).metadata or {}
        of = json.loads(meta.get(b"sas.store", b"{}")).get("of")
    except Exception:  # noqa: BLE001 - no pyarrow, or metadata it cannot read: the config's count
        return None
    return of if isinstance(of, int) and of > 0 else None


def comparable(cfg: Section, batch_size: int, of: int | None = None, step: Any = None) -> dict[str, Any]:
    """Whether the step's recorded loss and gradient norm are those of this replay: one epoch of one mini-batch over
    every row (later mini-batches run on weights the first one already changed), and every row of the step replayed:
    a step recorded in part (`train.record.groups`, `every`, the flagged groups a behind writer keeps) has metrics over
    all `of` rollouts, a replay only the recorded ones (their ids and log-probs still compare, row by row)."""
    o, a = cfg.optim, cfg.algorithm
    of = max(batch_size, of or 0)
    why = []
    if batch_size < of:
        why.append(f"step {step} recorded {batch_size} of {of} rollouts ({_sampling(cfg, step)})")
    if o.ppo_epochs != 1:
        why.append(f"optim.ppo_epochs is {o.ppo_epochs}")
    if of > o.mini_batch_size:
        why.append(f"{of} rollouts in mini-batches of {o.mini_batch_size}")
    if a.skip_zero_std_groups:
        why.append("algorithm.skip_zero_std_groups weighs the kept rows (weights not recorded)")
    if cfg.model.dropout:
        why.append("model.dropout is on (the update's forward drew a dropout mask)")
    return {"loss": not why, "why": "; ".join(why) or None}


def _sampling(cfg: Section, step: Any) -> str:
    """Why a training step recorded part of its rollouts, from the run's `train.record` (recorder.select)."""
    s = RecordSettings.of(cfg)
    if isinstance(step, int) and step % s.every:
        return f"train.record.every {s.every}: step {step} kept only its flagged groups"
    if s.groups is not None:
        return f"train.record.groups {s.groups}, and the groups of flagged rollouts"
    return "record sampling: the writer fell behind (train.record.queue) and kept only the flagged groups, or rollouts were recorded without tokens"


def read_records(stream: TextIO, source: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ReplayError(f"{source}:{n}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise ReplayError(f"{source}:{n}: expected a rollout record (an object)")
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    cpu_env.apply()
    parser = argparse.ArgumentParser(
        prog="python -m search_agent_trainer.replay_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (its run.json holds the config)")
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a checkpoint directory, or its name under <run-dir>/checkpoints (step-NNNNNN)",
    )
    parser.add_argument("--records", help="the step's rollout records (JSON lines); default: stdin")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the run's model.device")
    parser.add_argument(
        "--tolerance", type=float, help="|Δ| above this many nats is a mismatch (default 1e-3 in fp32, 5e-2 under bf16)"
    )
    args = parser.parse_args(argv)
    # the host has gone (Ctrl-C, a closed window; even while the checkpoint loads): nobody is left to read the report
    watch_parent(lambda _pid: os._exit(0))
    try:
        if args.records:
            with open(args.records, encoding="utf-8") as f:
                records = read_records(f, args.records)
        else:
            records = read_records(sys.stdin, "stdin")
        report = StepReplay(args.run_dir, args.checkpoint, args.device).replay(records, args.tolerance)
    except ReplayError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 2
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
