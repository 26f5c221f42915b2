"""What this interpreter can train with: torch, the device, the optional Hugging Face stack, and the engines."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def describe() -> dict[str, Any]:
    """A JSON-able report: python, torch, the device the trainer would use, transformers/peft versions, and what each
    engine lacks here (None: it can run)."""
    import torch

    from .engines.trl import missing

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch.__version__,
        "device": "cuda" if cuda else "cpu",
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "trl": _version("trl"),
        "accelerate": _version("accelerate"),
        "engines": {"builtin": None, "trl": missing()},
    }
