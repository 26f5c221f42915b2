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

Only the last `train.checkpoint_keep` checkpoints are kept (`prune_checkpoints`; by default all of the tiny policy's,
3 of a Hugging Face model's: a 3B full fine-tune's is ~37 GB); the ones a resume needs besides the last (the warm
start's step-000000, each curriculum stage's last step) always stay. At the end of a finished run a Hugging Face
policy is written as a Hugging Face model directory, `model/` (`export_model`): the weights in the model's own dtype
(config.json's, bf16 for Qwen2.5), with LoRA merged into the base (and the adapter alone in `model/adapter/`), and the
tokenizer — what `AutoModelForCausalLM.from_pretrained` and vLLM load.
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
        raise RuntimeError(
            f"{path}: does not match this policy (missing {sorted(missing)[:5]}, unknown {sorted(unknown)[:5]}): was it written with another model config?"
        )
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


def save_checkpoint(
    run_dir: Path, step: int, policy: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> Path:
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


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints of a run, by step."""
    out = []
    for d in (run_dir / "checkpoints").glob("step-*"):
        digits = d.name.removeprefix("step-")
        if digits.isdigit() and (d / STATE).exists():
            out.append((int(digits), d))
    return sorted(out)


def checkpoint_keep(cfg: Any) -> int | None:
    """How many checkpoints a run keeps (None: all): `train.checkpoint_keep`, by default all of the tiny policy's and
    3 of a Hugging Face model's."""
    keep = cfg.train.checkpoint_keep
    return int(keep) if keep is not None else (None if cfg.model.kind == "tiny" else 3)


def prune_checkpoints(run_dir: Path, keep: int | None, protect: set[int]) -> list[Path]:
    """Deletes all but the last `keep` checkpoints, never those of the steps in `protect`; returns what it deleted."""
    if keep is None:
        return []
    found = checkpoints(run_dir)
    gone = [d for step, d in found[: max(0, len(found) - keep)] if step not in protect]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def export_model(out: Path, policy: Any, tokenizer: Any, source_dir: str | None) -> Path:
    """A Hugging Face model directory of the policy (see the module's docstring); `source_dir` is the model directory
    the run started from (its config.json says the dtype the weights are released in)."""
    backbone = policy.backbone
    dtype = _release_dtype(source_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if hasattr(backbone, "peft_config"):
        backbone.save_pretrained(str(tmp / "adapter"))
        backbone = backbone.merge_and_unload()  # the run is over: the adapter goes into the base weights in place
    state = {
        k: v.detach().to("cpu", dtype) if v.is_floating_point() and dtype is not None else v.detach().cpu()
        for k, v in backbone.state_dict().items()
    }
    backbone.save_pretrained(str(tmp), state_dict=state)
    if dtype is not None:
        config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
        for key in ("torch_dtype", "dtype"):
            if key in config:
                config[key] = str(dtype).removeprefix("torch.")
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    if tokenizer.kind == "hf":
        tokenizer.impl.save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def _release_dtype(source_dir: str | None) -> torch.dtype | None:
    """config.json's dtype of the model a run started from (None: keep the weights as they are)."""
    try:
        config = json.loads((Path(source_dir) / "config.json").read_text(encoding="utf-8")) if source_dir else {}
    except (OSError, json.JSONDecodeError):
        return None
    name = config.get("torch_dtype") or config.get("dtype")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(str(name))


def latest_checkpoint(run_dir: Path) -> Path | None:
    best: tuple[int, Path] | None = None
    for d in (run_dir / "checkpoints").glob("step-*"):
        digits = d.name.removeprefix("step-")
        if digits.isdigit() and (d / STATE).exists() and (best is None or int(digits) > best[0]):
            best = (int(digits), d)
    return best[1] if best else None


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / STATE).read_text(encoding="utf-8"))
