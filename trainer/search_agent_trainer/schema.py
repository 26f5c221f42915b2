"""Validating a run config against the JSON Schema the extension also uses (run_config.schema.json, generated
from src/core/run/config.ts), and filling in its defaults. The subset of JSON Schema our schemas use: object
(properties, required, additionalProperties), array (items, minItems), string (enum, minLength), number/integer
(minimum, maximum), boolean, const, anyOf, default. Errors name the key path: `rollout.n: expected an integer`.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any


class ConfigError(ValueError):
    """A config that does not match the schema; the message names the key."""


def load_schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("run_config.schema.json").read_text(encoding="utf-8"))


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def validate(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every problem, as `path: message`."""
    errors: list[str] = []
    where = path or "(the config)"
    if "const" in schema and value != schema["const"]:
        return [f"{where}: expected {json.dumps(schema['const'])}, got {json.dumps(value)}"]
    if "anyOf" in schema:
        if any(not validate(s, value, path) for s in schema["anyOf"]):
            return []
        return [f"{where}: matches none of the allowed forms"]
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {_type_name(value)}"]
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errors.append(f"{_join(path, k)}: is required")
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                errors += validate(props[k], v, _join(path, k))
            elif extra is False:
                known = ", ".join(sorted(props)) or "none"
                errors.append(f"{_join(path, k)}: is not a known key (known: {known})")
            elif isinstance(extra, dict):
                errors += validate(extra, v, _join(path, k))
    elif t == "array":
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {_type_name(value)}"]
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: needs at least {schema['minItems']} items")
        for i, v in enumerate(value):
            errors += validate(schema.get("items", {}), v, f"{path}[{i}]")
    elif t == "string":
        if not isinstance(value, str):
            return [f"{where}: expected a string, got {_type_name(value)}"]
        if "enum" in schema and value not in schema["enum"]:
            errors.append(
                f"{where}: expected one of {', '.join(json.dumps(e) for e in schema['enum'])}, got {json.dumps(value)}"
            )
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: must not be empty")
    elif t in ("number", "integer"):
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (t == "number" or float(value).is_integer())
        )
        if not ok:
            return [
                f"{where}: expected {'an integer' if t == 'integer' else 'a number'}, got {_type_name(value)} {json.dumps(value)}"
            ]
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: must be ≥ {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: must be ≤ {schema['maximum']}, got {value}")
    elif t == "boolean":
        if not isinstance(value, bool):
            return [f"{where}: expected true or false, got {_type_name(value)}"]
    return errors


# Sections that switch a feature on by being present: never created from defaults (`trl`, `verl` configure one engine each).
OPT_IN_SECTIONS = frozenset({"lora", "test", "trl", "verl", "hops_mix", "disk_full"})


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """A copy of `value` with every absent key that has a schema default filled in (objects recursively;
    absent sections are created with their defaults, except the opt-in ones: `lora`, `test`, `trl`, `verl`, `hops_mix`, `disk_full`)."""
    if schema.get("type") != "object":
        return copy.deepcopy(value)
    out = dict(value) if isinstance(value, dict) else {}
    for k, sub in schema.get("properties", {}).items():
        if k in out:
            out[k] = with_defaults(sub, out[k])
        elif "default" in sub:
            out[k] = copy.deepcopy(sub["default"])
        elif sub.get("type") == "object" and k not in OPT_IN_SECTIONS:
            out[k] = with_defaults(sub, {})
    return out


def engine_issues(schema: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The limits of the config's engine it runs into (the schema's `x-engine-limits`, written from
    src/core/run/engines.ts, which the host checks too): `key: value is not supported by engine "trl" (why); engines
    that can: "builtin", "verl"`."""
    engine = cfg.get("engine") or "builtin"
    out = []
    for limit in schema.get("x-engine-limits", []):
        value: Any = cfg
        for k in limit["key"].split("."):
            value = value.get(k) if isinstance(value, dict) else None
        when = limit["when"]
        if engine in limit["engines"] or value is None:
            continue
        if when.get("present"):
            hit = True
        elif "equals" in when:
            hit = value in when["equals"]
        else:
            hit = isinstance(value, (int, float)) and not isinstance(value, bool) and value > when["above"]
        if hit:
            # as the host says it
            shown = "this section" if when.get("present") and isinstance(value, (dict, list)) else json.dumps(value)
            engines = ", ".join(f'"{e}"' for e in limit["engines"])
            out.append(
                f'{limit["key"]}: {shown} is not supported by engine "{engine}" ({limit["why"]}); engines that can: {engines}'
            )
    return out
