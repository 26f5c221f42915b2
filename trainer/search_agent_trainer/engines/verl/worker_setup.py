"""Run by Ray in every process of a veRL run before it gets work: the runtime env's `worker_process_setup_hook`
(overrides.py names `setup`); our package is on every worker's PYTHONPATH."""

from __future__ import annotations

import sys


def setup() -> None:
    hide_trl()


def hide_trl() -> None:
    """veRL 0.9.1 patches TRL's `AutoModelForCausalLMWithValueHead` whenever TRL can be imported (`apply_monkey_patch`,
    verl/models/transformers/monkey_patch.py, run on every FSDP model it loads), and TRL 1.16 has no such class any
    more: with the trl engine's TRL in the same Python (.venv-verl reads .venv's packages), veRL's workers would fail to
    load the actor. veRL's workers do not use TRL, so it is hidden from them: `find_spec("trl")` is None and
    `import trl` fails, as where TRL is not installed."""
    if "trl" not in sys.modules:
        sys.modules["trl"] = None  # type: ignore[assignment]
    utils = sys.modules.get("verl.utils.import_utils")
    if utils is not None:  # veRL caches the answer: forget one given before
        utils.is_trl_available.cache_clear()
