"""The memory recipe of a Hugging Face policy: which tensor is stored in which dtype, so that Qwen2.5-3B is fine-tuned
in full and Qwen2.5-7B with LoRA on one 80 GB GPU (docs/trainer.md, "Memory on one GPU", has the arithmetic). The
planner (`search-agent-studio plan`, src/core/plan) counts exactly these parts; the built-in tiny policy is not
concerned (it stays as it is, fp32 or bf16 autocast as `model.dtype` says).

Under bf16 compute (`model.dtype` bf16, or auto on CUDA) — FSDP's mixed precision on one device:
- the weights the optimizer updates are fp32 master weights (4 B/param), their gradients fp32 (4 B) and AdamW's two
  moments fp32 (8 B): 16 B per trained parameter; AdamW is fused (`optimizer`: no temporaries the size of the
  weights at the step);
- every matmul computes in bf16 (autocast casts a layer's weights as it runs them; with gradient checkpointing only
  the layer being run or recomputed holds its bf16 copy);
- the residual stream is bf16 too (`residual_in_compute_dtype`): the input embeddings are cast to bf16, so the layer
  outputs, the activations checkpointing keeps and the KV cache — whose keys come out of the rotary embedding in the
  residual stream's dtype — are bf16, as in a bf16 model (fp32 there would double them);
- the KL reference is a bf16 copy of the weights autocast casts anyway (`reference_dtype`: Linear and Embedding
  weights and biases; the norms' 1-D weights stay fp32), so the reference and the starting policy give the same
  log-probs (2 B/param instead of 4); under LoRA it is the starting adapter only (the frozen base is shared; the
  adapter's A and B are Linear layers too, so bf16 as well);
- under LoRA the frozen base is stored in bf16 (2 B/param) and the adapter in fp32;
- gradient checkpointing is on unless `model.gradient_checkpointing` is false (`gradient_checkpointing`), in the
  non-reentrant form (gradients reach a LoRA adapter through the frozen embedding without hooks).
Without bf16 compute (fp32) everything is fp32 and the reference a fp32 copy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def gradient_checkpointing(cfg: Any) -> bool:
    """Whether a Hugging Face policy checkpoints its layers: `model.gradient_checkpointing`, and when the config leaves it
    out, on for the builtin engine (TRL and veRL keep their own defaults, both on: TRL 1.16's GRPOConfig, veRL 0.9.1's
    actor; engines/trl/options.py and engines/verl/overrides.py set it only when the config does)."""
    want = cfg.model.gradient_checkpointing
    if want is not None:
        return bool(want)
    return (cfg.get("engine") or "builtin") == "builtin"


def enable_checkpointing(model: nn.Module) -> None:
    """Per-layer activation checkpointing of a Hugging Face model, non-reentrant (torch's recommended form: no input
    that requires grad is needed, so a LoRA adapter behind a frozen embedding gets its gradients)."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x; the older name otherwise
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # in training; generation passes use_cache=True in eval mode


def residual_in_compute_dtype(model: nn.Module) -> None:
    """Under autocast, the input embeddings (and so the residual stream, the checkpointed activations and the KV cache)
    in the autocast dtype: autocast casts matmul inputs, not an fp32 embedding's output, and the residual stream of a
    model with fp32 master weights would stay fp32 through every layer."""

    def cast(_module: nn.Module, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        kind = out.device.type
        if out.is_floating_point() and torch.is_autocast_enabled(kind):
            return out.to(torch.get_autocast_dtype(kind))
        return out

    model.get_input_embeddings().register_forward_hook(cast)


def reference_dtype(module: nn.Module, dtype: torch.dtype | None) -> dict[str, torch.dtype]:
    """The dtype each of `module`'s parameters has in a frozen reference copy computing under `dtype` autocast: the
    weights and biases of Linear and Embedding layers (what autocast casts to `dtype` before using them, or what the
    residual stream is cast to) in `dtype`; the rest (norm weights) as they are. Empty without autocast."""
    if dtype is None:
        return {}
    out: dict[str, torch.dtype] = {}
    for prefix, m in module.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            for name, p in m.named_parameters(recurse=False):
                if p.is_floating_point():
                    out[f"{prefix}.{name}" if prefix else name] = dtype
    return out


def optimizer(
    groups: list[dict[str, Any]], weight_decay: float, device: torch.device, fused: bool
) -> torch.optim.Optimizer:
    """AdamW over the master weights; fused (`fused`: a Hugging Face policy, on CUDA or CPU): one kernel per step and
    no temporaries the size of the weights (the multi-tensor AdamW allocates several at the step: 3 × 4 B/param more,
    measured on CPU). The tiny policy keeps torch's default (its pinned CPU numbers)."""
    if fused and device.type in ("cuda", "cpu"):
        return torch.optim.AdamW(groups, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(groups, weight_decay=weight_decay)
