"""The software a run is trained with, as run.json records it (`versions`): each engine's list is the builtin's plus
its own libraries."""

from __future__ import annotations

import sys
from importlib import metadata

import torch

from . import __version__


def package_version(name: str) -> str | None:
    """An installed distribution's version (None: not installed)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def trainer_versions() -> dict[str, str | None]:
    """The trainer's and its libraries' (the builtin engine's list; the TRL engine adds its own)."""
    return {
        "trainer": __version__,
        "torch": torch.__version__,
        "transformers": package_version("transformers"),
        "peft": package_version("peft"),
        "python": ".".join(map(str, sys.version_info[:3])),
    }
