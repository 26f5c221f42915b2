"""Checkpoints (`checkpoints/step-NNNNNN/`): everything a resumed run needs to continue as if never stopped.

- trainable.pt: the parameters the optimizer updates (all of the tiny model; a LoRA adapter; the value head);
- optimizer.pt: the optimizer's state;
- tokenizer.json: the tiny model's tokenizer (its vocabulary was built from this run's data);
- model/: for a Hugging Face policy, the weights in Hugging Face format (a peft adapter directory with LoRA), so the
  checkpoint is usable outside the trainer;
- trainer_state.json: step, the data sampler's position, the LR schedule; written last, so a directory without it
  is an interrupted write and is ignored.
The directory is written under a temporary name and renamed into place. The random state needs no saving: every step
seeds its own generators from (seed, step).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

STATE = "trainer_state.json"


def trainable_state(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in policy.named_parameters() if p.requires_grad}


def load_trainable(policy: torch.nn.Module, path: Path) -> None:
    state = torch.load(path, map_location="cpu", weights_only=True)
    names = {n for n, p in policy.named_parameters() if p.requires_grad}
    missing = names - state.keys()
    unknown = state.keys() - {n for n, _ in policy.named_parameters()}
    if missing or unknown:
        raise RuntimeError(f"{path}: does not match this policy (missing {sorted(missing)[:5]}, unknown {sorted(unknown)[:5]}): was it written with another model config?")
    with torch.no_grad():
        params = dict(policy.named_parameters())
        for n, v in state.items():
            params[n].copy_(v.to(params[n].device, params[n].dtype))


def save_checkpoint(run_dir: Path, step: int, policy: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> Path:
    final = run_dir / "checkpoints" / f"step-{step:06d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(trainable_state(policy), tmp / "trainable.pt")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if tokenizer.kind == "tiny":
        tokenizer.impl.save(str(tmp / "tokenizer.json"))
        (tmp / "tiny_config.json").write_text(json.dumps(policy.backbone.config), encoding="utf-8")
    elif hasattr(policy.backbone, "peft_config"):
        policy.backbone.save_pretrained(str(tmp / "model"))
    (tmp / STATE).write_text(json.dumps({"step": step, **state}), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    best: tuple[int, Path] | None = None
    for d in (run_dir / "checkpoints").glob("step-*"):
        digits = d.name.removeprefix("step-")
        if digits.isdigit() and (d / STATE).exists() and (best is None or int(digits) > best[0]):
            best = (int(digits), d)
    return best[1] if best else None


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / STATE).read_text(encoding="utf-8"))
