"""The run config: a JSON file validated against the schema the extension also uses (schema.py), with the
schema's defaults filled in and paths resolved relative to the file. Sections read as attributes:
`cfg.rollout.n`, `cfg.algorithm.clip_ratio_high`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .schema import ConfigError, engine_issues, load_schema, validate, with_defaults


class Section(dict):
    """A config section: a dict whose keys also read as attributes (missing optional keys read as None)."""

    def __getattr__(self, key: str) -> Any:
        value = self.get(key)
        return Section(value) if isinstance(value, dict) and not isinstance(value, Section) else value

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


# Data that ships with the package, by stable name (a run config written by "New Training Run…" says
# builtin:demo/train, not a path into the versioned extension directory). The same names as src/core/paths.ts; trl-tiny/model is the
# random Qwen2-style model (config and tokenizer only) of engine "trl" on CPU.
BUILTIN_DATA = {
    "demo/train": "demo/train.jsonl",
    "demo/eval": "demo/eval.jsonl",
    "demo/corpus": "demo/corpus.jsonl",
    "demo-multihop/train": "demo-multihop/train.jsonl",
    "demo-multihop/eval": "demo-multihop/eval.jsonl",
    "demo-multihop/corpus": "demo-multihop/corpus.jsonl",
    "trl-tiny/model": "trl-tiny/model",
}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def resolve_path(value: str, base: Path) -> str:
    """A config path: builtin:NAME (BUILTIN_DATA), absolute, or relative to the config file's directory."""
    if value.startswith("builtin:"):
        name = value[len("builtin:") :]
        if name not in BUILTIN_DATA:
            raise ConfigError(
                f"unknown built-in data {value!r}; the built-ins are " + ", ".join(f"builtin:{k}" for k in BUILTIN_DATA)
            )
        return str(EXAMPLES / BUILTIN_DATA[name])
    return value if os.path.isabs(value) else str((base / value).resolve())


PATH_KEYS = (
    ("data", "train"),
    ("data", "eval"),
    ("model", "path"),
    ("model", "init"),
    ("retriever", "corpus"),
    ("retriever", "index"),
    ("retriever", "model"),
    ("trl", "accelerate_config"),
)


def former_builtin_name(value: str) -> str | None:
    """Compatibility with run.json written before it kept builtin:NAME (it held such names resolved: absolute paths
    into the install that started the run, which an update of the extension moves): a path that no longer exists but
    ends in examples/<a BUILTIN_DATA file> is that built-in data, returned as its builtin:NAME when this install has
    it. Anything else: None (the path stays as it is, and a missing one is reported as missing). The host does the same
    (src/core/paths.ts: formerBuiltinName)."""
    if not os.path.isabs(value) or os.path.exists(value):
        return None
    tail = value.replace("\\", "/").rstrip("/")
    for name, file in BUILTIN_DATA.items():
        if tail.endswith("/examples/" + file):
            return f"builtin:{name}" if (EXAMPLES / file).exists() else None
    return None


def _plain(value: Any) -> Any:
    """A copy of a config (dicts and lists all the way down)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _path_places(raw: Any) -> list[tuple[Any, ...]]:
    """Where a config (as written) names files resolve_path resolves: PATH_KEYS and model.tiny.vocab's entries."""
    places: list[tuple[Any, ...]] = []
    if not isinstance(raw, dict):
        return places
    for section, key in PATH_KEYS:
        sec = raw.get(section)
        if isinstance(sec, dict) and isinstance(sec.get(key), str):
            places.append((section, key))
    model = raw.get("model")
    tiny = model.get("tiny") if isinstance(model, dict) else None
    if isinstance(tiny, dict) and isinstance(tiny.get("vocab"), list):
        places += [("model", "tiny", "vocab", i) for i, v in enumerate(tiny["vocab"]) if isinstance(v, str)]
    return places


def _get(tree: Any, place: tuple[Any, ...]) -> Any:
    for k in place:
        tree = tree[k]
    return tree


def _set(tree: Any, place: tuple[Any, ...], value: Any) -> None:
    _get(tree, place[:-1])[place[-1]] = value


def stored_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config as run.json keeps it: `cfg` as config_from_dict completed it (defaults filled in, relative paths made
    absolute against the config file, since the run directory may be anywhere), except that each path the config named
    builtin:NAME stays that name, so whoever resumes the run resolves it in the install that resumes (the resolved
    path lies inside the install that started the run, which an extension update moves)."""
    out = _plain(cfg)
    for place, name in (getattr(cfg, "builtin_names", None) or {}).items():
        _set(out, place, name)
    return out


def config_from_run_json(saved: Any, run_dir: Path, source: str) -> Section:
    """The config a run was started with (run.json's `config`, stored_config's form), for a resume or a fork: its
    builtin:NAME paths resolve in this install; a run.json of an older version gets former_builtin_name's step first."""
    saved = _plain(saved)
    for place in _path_places(saved):
        name = former_builtin_name(_get(saved, place))
        if name:
            _set(saved, place, name)
    return config_from_dict(saved, base=run_dir, source=source)


def load_config(path: str | os.PathLike[str]) -> Section:
    """Reads, validates (every problem, naming its key) and completes a run config."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    cfg = config_from_dict(raw, base=p.parent, source=str(p))
    check_vocab_places(cfg, p.parent, str(p))
    return cfg


def check_vocab_places(cfg: Section, base: Path, source: str) -> None:
    """`model.tiny.vocab` files are read word by word into the tiny tokenizer, which every checkpoint carries
    (tokenizer.json): so they must be the run's own texts — inside the config's folder, beside the run's data
    (data.train, data.eval, retriever.corpus), or the install's built-in data — never any file a path can name
    (`/etc/passwd` would be copied into the checkpoint). Checked where a new run starts from a config file; a resume
    reads its tokenizer from the checkpoint."""
    if cfg.model.kind != "tiny" or not cfg.model.tiny or not cfg.model.tiny.vocab:
        return
    roots = {Path(base).resolve(), EXAMPLES.resolve()}
    for place in (("data", "train"), ("data", "eval"), ("retriever", "corpus")):
        value = _get(cfg, place[:-1]).get(place[-1])
        if isinstance(value, str) and value:
            roots.add(Path(value).resolve().parent)
    problems = []
    for i, value in enumerate(cfg.model.tiny.vocab):
        real = Path(value).resolve()
        if not any(real == r or r in real.parents for r in roots):
            problems.append(
                f"model.tiny.vocab[{i}]: {value} is outside the config's folder ({Path(base).resolve()}) and the folders of the run's data; "
                "a vocabulary file must be the run's own text (its words go into every checkpoint's tokenizer): put it beside the config or the data"
            )
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


# `algorithm.preset`: Search-R1's settings, declared once in src/core/run/presets.ts (where each value's source in
# PeterGriffinJin/Search-R1 is named; docs/trainer.md, "Presets") and read here from the schema copy's `x-presets`:
# the values a config gets unless it sets the key itself. A warm-up given as {"ratio": r} is int(r × train.steps), as
# veRL rounds its lr_warmup_steps_ratio. GRPO's mini-batches are 256 sequences: 2,560 a step make 10 optimizer steps.
PRESETS: dict[str, dict[str, Any]] = load_schema()["x-presets"]


# `data.prompt_template` when `rollout.dialect` is "toolcall" and the config sets none: Search-R1's base template's
# instructions, written for the search tool the chat template declares (veRL's Search-R1 tool recipe does the same).
TOOLCALL_BASE_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. "
    "After reasoning, if you find you lack some knowledge, you can call the search tool and it will return the top searched results between <tool_response> and </tool_response>. "
    "You can search as many times as you want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)


def apply_preset(raw: dict[str, Any], steps: int) -> dict[str, Any]:
    """`raw` with its `algorithm.preset`'s values under it (the keys `raw` sets win)."""
    name = (raw.get("algorithm") or {}).get("preset")
    if not name:
        return raw
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in PRESETS[name].items():
        section, key = dotted.split(".")
        sec = out.setdefault(section, {})
        if key not in sec:
            sec[key] = int(value["ratio"] * steps) if isinstance(value, dict) else value
    return out


def config_from_dict(raw: Any, base: Path | None = None, source: str = "config") -> Section:
    schema = load_schema()
    errors = validate(schema, raw)
    if errors:
        raise ConfigError(f"{source}: " + "; ".join(errors))
    train = raw.get("train") or {}
    steps = train.get("steps", schema["properties"]["train"]["properties"]["steps"]["default"])
    if train.get("stages"):
        # A curriculum's steps are its stages' sum; train.steps, if given, must say the same.
        total = sum(int(s["steps"]) for s in train["stages"])
        if "steps" in train and train["steps"] != total:
            raise ConfigError(
                f"{source}: train.steps: {train['steps']} is not the sum of train.stages' steps ({total}): leave train.steps out, or make it {total}"
            )
        raw = {**raw, "train": {**train, "steps": total}}
        steps = total
    cfg = Section(with_defaults(schema, apply_preset(raw, steps)))
    if cfg["rollout"]["dialect"] == "toolcall" and "prompt_template" not in (raw.get("data") or {}):
        cfg["data"]["prompt_template"] = TOOLCALL_BASE_TEMPLATE
    base = base or Path.cwd()
    builtin_names: dict[tuple[Any, ...], str] = {}
    for place in _path_places(cfg):
        value = _get(cfg, place)
        if value.startswith("builtin:"):
            builtin_names[place] = value
        _set(cfg, place, resolve_path(value, base))
    # What stored_config writes back: the paths named builtin:NAME (an attribute, not a key: the config stays the schema's).
    object.__setattr__(cfg, "builtin_names", builtin_names)
    reward = cfg.get("reward")
    if (
        isinstance(reward, dict)
        and isinstance(reward.get("module"), str)
        and not reward["module"].startswith("builtin:")
        and not os.path.isabs(reward["module"])
    ):
        reward["module"] = str((base / reward["module"]).resolve())
    _check(cfg, source, schema)
    return cfg


def _check(cfg: Section, source: str, schema: dict[str, Any]) -> None:
    """Cross-field rules the schema cannot express, and what the config's engine cannot do."""
    problems = engine_issues(schema, cfg)
    if cfg.model.kind == "hf" and not cfg.model.path:
        problems.append('model.path: is required when model.kind is "hf"')
    if cfg.model.lora and cfg.model.kind != "hf":
        problems.append('model.lora: LoRA applies to model.kind "hf" only')
    if cfg.model.lora and cfg.model.lora.get("dropout", 0) > 0 and not cfg.model.dropout:
        problems.append(
            f"model.lora.dropout: {cfg.model.lora['dropout']} needs model.dropout: true (dropout is off by default, so on-policy log-probs match the sampler's)"
        )
    if cfg.algorithm.clip_ratio_c is not None and cfg.algorithm.clip_ratio_c <= 1:
        problems.append(
            f"algorithm.clip_ratio_c: must be greater than 1 (dual-clip's lower bound on the loss), got {cfg.algorithm.clip_ratio_c}"
        )
    if cfg.optim.micro_batch_size > cfg.optim.mini_batch_size:
        problems.append(
            f"optim.micro_batch_size ({cfg.optim.micro_batch_size}) is larger than optim.mini_batch_size ({cfg.optim.mini_batch_size})"
        )
    if cfg.algorithm.name == "grpo" and cfg.rollout.n < 2:
        problems.append("rollout.n: GRPO needs at least 2 samples per prompt (a group)")
    if cfg.algorithm.skip_zero_std_groups:
        if cfg.algorithm.name != "grpo":
            problems.append(
                f'algorithm.skip_zero_std_groups: applies to GRPO only (a group whose rewards are all equal has advantage 0 there); algorithm.name is "{cfg.algorithm.name}"'
            )
        elif cfg.algorithm.kl_in_reward:
            problems.append(
                "algorithm.skip_zero_std_groups: cannot be used with algorithm.kl_in_reward (the KL in the reward gives every group a signal)"
            )
    elif cfg.algorithm.zero_std_keep:
        problems.append(
            f"algorithm.zero_std_keep: {cfg.algorithm.zero_std_keep} has no effect without algorithm.skip_zero_std_groups: true (it is the share of the flat groups' sequences that skipping keeps)"
        )
    mixes = [("data.hops_mix", cfg.data.hops_mix)] + [
        (f"train.stages[{i}].hops_mix", st.get("hops_mix")) for i, st in enumerate(cfg.train.stages or [])
    ]
    for where, mix in mixes:
        bad_hops = [k for k in (mix or {}) if not k.isdigit() or int(k) < 1]
        if bad_hops:
            problems.append(f"{where}: keys are the hops of a question (1, 2, …), got {bad_hops[0]!r}")
    if cfg.rollout.dialect == "toolcall":
        if cfg.model.kind == "tiny":
            problems.append(
                'rollout.dialect: "toolcall" needs model.kind "hf": tool calls are written with the model\'s chat template, and the built-in tiny policy has none (it speaks "searchr1" only)'
            )
        if not cfg.data.chat_template:
            problems.append(
                'data.chat_template: rollout.dialect "toolcall" renders the prompt and the tool turns with the chat template; it cannot be false'
            )
        if cfg.train.supervised_warmup.steps:
            problems.append(
                'train.supervised_warmup: the warm start writes Search-R1\'s tags only; it cannot be used with rollout.dialect "toolcall"'
            )
        if cfg.rollout.strict_actions:
            problems.append(
                "rollout.strict_actions: reads Search-R1's <search>/<answer> tags; the tool-call dialect parses its calls as JSON already (an invalid call is answered as one)"
            )
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
