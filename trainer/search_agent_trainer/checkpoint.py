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

from .run_writer import remove_freeing, write_bytes

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


class _Writer:
    """A binary file as torch.save writes to it, through run_writer.write_bytes (errors name the file; a simulated
    full disk reaches it)."""

    def __init__(self, f: Any, path: Path):
        self.f, self.path = f, path

    def write(self, data: Any) -> int:
        write_bytes(self.f, data, self.path)
        return len(memoryview(data).cast("B"))

    def flush(self) -> None:
        pass


def _save(obj: Any, path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        torch.save(obj, _Writer(f, path))


def save_checkpoint(run_dir: Path, step: int, policy: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> Path:
    """Writes the checkpoint under a temporary name and renames it into place. A write that fails (a full disk)
    removes the temporary directory, so nothing half written is left, and the error names the file."""
    final = run_dir / "checkpoints" / f"step-{step:06d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    at = tmp
    try:
        _save(trainable_state(policy), at := tmp / "trainable.pt")
        _save(optimizer.state_dict(), at := tmp / "optimizer.pt")
        if tokenizer.kind == "tiny":
            tokenizer.impl.save(str(at := tmp / "tokenizer.json"))
            (at := tmp / "tiny_config.json").write_text(json.dumps(policy.backbone.config), encoding="utf-8")
        elif hasattr(policy.backbone, "peft_config"):
            policy.backbone.save_pretrained(str(at := tmp / "model"))
        with open(at := tmp / STATE, "wb", buffering=0) as f:
            write_bytes(f, json.dumps({"step": step, **state}).encode("utf-8"), at)
    except BaseException as e:
        remove_freeing(tmp)
        # The write's own error (torch.save's cleanup raises a RuntimeError over it), naming the file.
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, OSError):
            raise (cause if cause.filename else OSError(cause.errno, cause.strerror or str(cause), str(at))) from e
        raise
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
