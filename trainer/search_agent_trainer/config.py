"""The run config: a JSON file validated against the schema the extension also uses (schema.py), with the
schema's defaults filled in and paths resolved relative to the file. Sections read as attributes:
`cfg.rollout.n`, `cfg.algorithm.clip_ratio_high`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .schema import ConfigError, load_schema, validate, with_defaults


class Section(dict):
    """A config section: a dict whose keys also read as attributes (missing optional keys read as None)."""

    def __getattr__(self, key: str) -> Any:
        value = self.get(key)
        return Section(value) if isinstance(value, dict) and not isinstance(value, Section) else value

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


# Data that ships with the package, by stable name (a run config written by "New Training Run…" says
# builtin:demo/train, not a path into the versioned extension directory). The same names as src/core/paths.ts.
BUILTIN_DATA = {"demo/train": "demo/train.jsonl", "demo/eval": "demo/eval.jsonl", "demo/corpus": "demo/corpus.jsonl"}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def resolve_path(value: str, base: Path) -> str:
    """A config path: builtin:NAME (BUILTIN_DATA), absolute, or relative to the config file's directory."""
    if value.startswith("builtin:"):
        name = value[len("builtin:") :]
        if name not in BUILTIN_DATA:
            raise ConfigError(f"unknown built-in data {value!r}; the built-ins are " + ", ".join(f"builtin:{k}" for k in BUILTIN_DATA))
        return str(EXAMPLES / BUILTIN_DATA[name])
    return value if os.path.isabs(value) else str((base / value).resolve())


PATH_KEYS = (("data", "train"), ("data", "eval"), ("model", "path"), ("model", "init"), ("retriever", "corpus"), ("retriever", "index"), ("retriever", "model"))


def load_config(path: str | os.PathLike[str]) -> Section:
    """Reads, validates (every problem, naming its key) and completes a run config."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    return config_from_dict(raw, base=p.parent, source=str(p))


def config_from_dict(raw: Any, base: Path | None = None, source: str = "config") -> Section:
    schema = load_schema()
    errors = validate(schema, raw)
    if errors:
        raise ConfigError(f"{source}: " + "; ".join(errors))
    cfg = Section(with_defaults(schema, raw))
    base = base or Path.cwd()
    for section, key in PATH_KEYS:
        sec = cfg.get(section)
        if isinstance(sec, dict) and isinstance(sec.get(key), str):
            sec[key] = resolve_path(sec[key], base)
    tiny = cfg["model"].get("tiny")
    if isinstance(tiny, dict) and isinstance(tiny.get("vocab"), list):
        tiny["vocab"] = [resolve_path(v, base) for v in tiny["vocab"]]
    reward = cfg.get("reward")
    if isinstance(reward, dict) and isinstance(reward.get("module"), str) and not reward["module"].startswith("builtin:") and not os.path.isabs(reward["module"]):
        reward["module"] = str((base / reward["module"]).resolve())
    _check(cfg, source)
    return cfg


def _check(cfg: Section, source: str) -> None:
    """Cross-field rules the schema cannot express."""
    problems = []
    if cfg.model.kind == "hf" and not cfg.model.path:
        problems.append("model.path: is required when model.kind is \"hf\"")
    if cfg.model.lora and cfg.model.kind != "hf":
        problems.append("model.lora: LoRA applies to model.kind \"hf\" only")
    if cfg.optim.micro_batch_size > cfg.optim.mini_batch_size:
        problems.append(f"optim.micro_batch_size ({cfg.optim.micro_batch_size}) is larger than optim.mini_batch_size ({cfg.optim.mini_batch_size})")
    if cfg.algorithm.name == "grpo" and cfg.rollout.n < 2:
        problems.append("rollout.n: GRPO needs at least 2 samples per prompt (a group)")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
