"""Other engines' binary per-token dumps as token samples (JSON lines), for the studio's readers.

  python -m search_agent_trainer.dumps PATH [--kind slime|miles|skyrl] [--trust-pickle]

The editor and the CLI never unpickle anything themselves: they run this module with the trainer's Python and read
its stdout, one JSON object per line:
  {"sample": {…}}  one sequence, in the fields of src/core/importers/foreign/sample.ts (`TokenSample`): engine, file,
                   line (the sample's row in its file, from 1), step, split, group, sample, ids, prompt_length,
                   loss_mask, arrays {rollout_logprob, logprob, ref_logprob, advantage, value, entropy} (over the whole
                   sequence, null where the dump has no value), reward, reward_parts, golden, prompt_text,
                   response_text, finish, engine_arrays, meta
  {"issue": {"file", "line", "field", "message"}}  a sample (or a whole file: line 0) that cannot be read, with the
                   field at fault (`loss_mask`, `tokens[3]`); the rest go on — one bad sample never costs its file's
                   others
  {"note": "…"}    something the user should know (a file loaded with full unpickling, fields that were not placed)
  {"file": PATH, "samples": N}  a file is done
Exit 0 (issues are data), 2 when PATH holds nothing this module reads.

What loading trusts. A pickle can name any Python callable and have it called while loading: unpickling a file is
running code its writer chose. So nothing here unpickles freely unless asked:
- `.pt` files (slime's `--save-debug-rollout-data`, miles' `--dump-details`) go through `torch.load(weights_only=True)`,
  torch's restricted unpickler (tensors, primitive containers, numbers, strings), with numpy's array and dtype
  reconstructors added to its allowed globals (miles keeps numpy arrays in a sample). A file that needs anything
  else (a sample holding an object of the engine's own classes) is refused naming the global it needs, unless
  `--trust-pickle`, which loads it with `weights_only=False`.
- SkyRL's `.pkl` (`trainer.dump_data_batch`: a pickled `TrainingInputBatch`) goes through a restricted
  `pickle.Unpickler` that resolves only SkyRL's batch classes (rebuilt here as plain dicts: SkyRL need not be
  installed), `torch.device`, numpy's reconstructors and dtypes, and builtin containers; SkyRL's own serialisation of
  each tensor (raw bytes + dtype + shape, or `torch.save` bytes read with `weights_only=True`) is decoded without
  unpickling. Anything else is refused by name unless `--trust-pickle` (plain `pickle.load`, SkyRL importable).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import pickle
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ENGINES = ("slime", "miles", "skyrl")


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _list(v: Any) -> list[Any] | None:
    """A tensor, numpy array or sequence as a flat Python list (None stays None)."""
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach().cpu()
    if hasattr(v, "reshape") and hasattr(v, "tolist"):
        return v.reshape(-1).tolist()
    if isinstance(v, (list, tuple)):
        return list(v)
    raise TypeError(f"expected a list or tensor, got {type(v).__name__}")


def _nums(v: Any) -> list[float | None] | None:
    xs = _list(v)
    return None if xs is None else [_num(x) for x in xs]


def _plain(v: Any, depth: int = 0) -> Any:
    """JSON-safe and small: tensors and arrays as lists when short, else a summary."""
    if depth > 6:
        return str(type(v).__name__)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if hasattr(v, "tolist") and hasattr(v, "shape"):
        n = 1
        for d in v.shape:
            n *= int(d)
        return v.tolist() if n <= 64 else {"shape": [int(d) for d in v.shape], "dtype": str(v.dtype)}
    if isinstance(v, dict):
        return {str(k): _plain(x, depth + 1) for k, x in list(v.items())[:64]}
    if isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1) for x in v[:256]]
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    return str(v)


class Refused(Exception):
    """A file that cannot be loaded without trusting it (or at all)."""


class Bad(ValueError):
    """A field of one sample that cannot be read: the sample is reported (its row, the field) and skipped."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.field = field
        self.message = message


def _field_list(s: dict[str, Any], key: str) -> list[Any] | None:
    """A sample's per-token field as a flat list (None when absent); anything else is Bad, naming the field."""
    try:
        return _list(s.get(key))
    except TypeError as e:
        raise Bad(key, str(e)) from None


def _token_ids(v: Any, key: str) -> list[int]:
    xs = _list(v) if not isinstance(v, (str, bytes)) else None
    if xs is None and v is not None:
        raise Bad(key, f"expected a list or tensor of token ids, got {type(v).__name__}")
    ids: list[int] = []
    for i, x in enumerate(xs or []):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x) or x < 0:
            raise Bad(f"{key}[{i}]", f"expected a token id (an integer >= 0), got {x!r}")
        ids.append(int(x))
    return ids


def _int_field(s: dict[str, Any], key: str) -> int | None:
    v = s.get(key)
    if v is None:
        return None
    try:
        x = float(getattr(v, "item", lambda: v)())
    except (TypeError, ValueError):
        raise Bad(key, f"expected an integer, got {v!r}") from None
    if not math.isfinite(x) or x != int(x):
        raise Bad(key, f"expected an integer, got {v!r}")
    return int(x)


def _issue(file: Path, row: int, e: Exception) -> dict[str, Any]:
    """A sample that cannot be read, as the reader reports it: its file and row (from 1), the field, why."""
    if isinstance(e, Bad):
        field, message = e.field, e.message
    elif isinstance(e, ValueError) and len(e.args) == 2 and all(isinstance(a, str) for a in e.args):
        field, message = e.args
    else:
        field, message = "", f"{type(e).__name__}: {e}"
    return {"issue": {"file": str(file), "line": row, "field": field, "message": message}}


# -- .pt: torch's restricted loader ---------------------------------------------------------------------------------
def _numpy_globals() -> list[Any]:
    import numpy as np

    allowed: list[Any] = [np.ndarray, np.dtype]
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        try:
            m = __import__(mod, fromlist=["_reconstruct", "scalar"])
            allowed += [m._reconstruct, m.scalar]
        except (ImportError, AttributeError):
            pass
    allowed += [type(np.dtype(t)) for t in ("b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "?")]
    return allowed


def load_pt(path: Path, trust: bool) -> Any:
    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "GLOBAL" not in str(e):
            why = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
            raise Refused(
                f"cannot be read: not a file torch.load reads ({why.group(1).strip() if why else str(e).splitlines()[0][:200]})"
            ) from None
        if not trust:
            need = re.search(r"GLOBAL ([\w.]+)", str(e))
            raise Refused(
                f"torch.load(weights_only=True) refuses it{f' (it needs {need.group(1)})' if need else ''}: loading it would run code the file names; "
                "pass --trust-pickle (the editor: searchAgent.import.trustPickles) only for a dump you trust"
            ) from None
        out({"note": f"{path}: loaded with weights_only=False (--trust-pickle): {str(e).splitlines()[0]}"})
        return torch.load(path, map_location="cpu", weights_only=False)


# -- .pkl: SkyRL's batch through a restricted unpickler -------------------------------------------------------------
class _Batch(dict):
    """SkyRL's TensorBatch as a dict of its state (`batch_dict`, `batch_size`, `metadata`), whatever its class."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.update(state)


def _rebuild_batch(_cls: Any, state: Any) -> _Batch:
    b = _Batch()
    b.__setstate__(state)
    return b


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        import builtins
        import collections
        import copyreg

        if module.endswith("training_batch") and name in ("TrainingInputBatch", "TrainingOutputBatch", "TensorBatch"):
            return _Batch
        if module.endswith("training_batch") and name == "_rebuild_tensor_batch":
            return _rebuild_batch
        if module == "builtins" and name in (
            "dict",
            "list",
            "tuple",
            "set",
            "frozenset",
            "slice",
            "complex",
            "bytearray",
            "object",
            "int",
            "float",
            "str",
            "bool",
        ):
            return getattr(builtins, name)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "copyreg" and name == "_reconstructor":
            return copyreg._reconstructor
        if module == "torch" and name == "device":
            import torch

            return torch.device
        for g in _numpy_globals():
            if getattr(g, "__module__", None) == module and getattr(g, "__name__", None) == name:
                return g
        if module == "numpy" and name == "dtype":
            import numpy as np

            return np.dtype
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name} is not one this reader resolves")


def load_pkl(path: Path, trust: bool) -> Any:
    with open(path, "rb") as f:
        try:
            return _SafeUnpickler(f).load()
        except pickle.UnpicklingError as e:
            if not trust:
                raise Refused(
                    f"{e}: loading it would run code the file names; pass --trust-pickle (the editor: searchAgent.import.trustPickles) only for a dump you trust"
                ) from None
    out({"note": f"{path}: loaded with pickle.load (--trust-pickle)"})
    with open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 - the user said they trust this file


def _skyrl_tensor(v: Any) -> Any:
    """One field of SkyRL's serialised batch: {"format": "numpy", data, shape, dtype} / {"format": "torch", data} / a tensor."""
    import numpy as np

    if v is None or hasattr(v, "shape"):
        return v
    if isinstance(v, dict) and v.get("format") == "tensor_list":
        return None  # images (pixel_values, image_grid_thw): nothing per token
    if isinstance(v, dict) and v.get("format") == "torch":
        import torch

        return torch.load(io.BytesIO(v["data"]), map_location="cpu", weights_only=True).float().numpy()
    if isinstance(v, dict) and "data" in v and "dtype" in v:
        return np.frombuffer(v["data"], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
    raise TypeError(f"unknown serialised tensor {type(v).__name__}")


# -- samples ----------------------------------------------------------------------------------------------------------
def _resp_aligned(values: Any, prompt_length: int) -> list[float | None] | None:
    """A response-length array as one over the whole sequence (null on the prompt)."""
    xs = _nums(values)
    return None if xs is None else [None] * prompt_length + xs


def _finish_of(status: Any) -> str | None:
    s = getattr(status, "value", status)
    return {"truncated": "length", "aborted": "invalid", "failed": "invalid"}.get(str(s)) if s is not None else None


def slime_samples(
    pack: dict[str, Any],
    file: Path,
    engine: str,
    step: int | None,
    split: str,
    train: dict[int, dict[str, Any]] | None,
    messages: dict[int, Any],
) -> Iterator[dict[str, Any]]:
    """slime/miles rollout dumps: {"rollout_id", "samples": [Sample.to_dict()…]} (miles adds "metadata")."""
    samples = pack.get("samples")
    if not isinstance(samples, list):
        raise Refused("expected a dict with a list of samples (slime/miles' save_debug_rollout_data)")
    if step is None:
        step = int(pack["rollout_id"]) if _num(pack.get("rollout_id")) is not None else None
    for row, s in enumerate(samples, 1):
        # One sample that cannot be read is reported (its row, the field) and skipped; the others are read.
        try:
            if not isinstance(s, dict):
                raise Bad("", f"expected a sample dict, got {type(s).__name__}")
            ids = _token_ids(s.get("tokens"), "tokens")
            if not ids:
                raise Bad("tokens", "missing or empty")
            rlen = _int_field(s, "response_length") or 0
            if not 0 <= rlen <= len(ids):
                raise Bad("response_length", f"{rlen} is not within the {len(ids)} tokens")
            plen = len(ids) - rlen
            mask = _field_list(s, "loss_mask")
            if mask is None:
                mask = [1] * rlen  # slime trains on the whole response when a sample has no mask
            if len(mask) != rlen:
                raise Bad("loss_mask", f"has {len(mask)} entries but response_length is {rlen}")
            if s.get("remove_sample"):
                mask = [0] * rlen
            arrays: dict[str, Any] = {}
            lp = _field_list(s, "rollout_log_probs")
            if lp is not None:
                if len(lp) != rlen:
                    raise Bad("rollout_log_probs", f"has {len(lp)} entries but response_length is {rlen}")
                arrays["rollout_logprob"] = _resp_aligned(lp, plen)
            index = _int_field(s, "index")
            t = (train or {}).get(index) if index is not None else None
            engine_arrays = [
                k for k in ("tokens", "loss_mask", "rollout_log_probs", "teacher_log_probs") if s.get(k) is not None
            ]
            if t is not None:
                if t.get("loss_mask") is not None and len(t["loss_mask"]) == rlen:
                    mask = [int(x) for x in t["loss_mask"]]  # what the trainer used
                for ours, theirs in (
                    ("logprob", "log_probs"),
                    ("ref_logprob", "ref_log_probs"),
                    ("advantage", "advantages"),
                    ("entropy", "entropy"),
                ):
                    v = t.get(theirs)
                    if v is not None and len(v) == rlen:
                        arrays[ours] = _resp_aligned(v, plen)
                        engine_arrays.append(f"train:{theirs}")
            reward = s.get("reward")
            parts = (
                {k: x for k, v in reward.items() if (x := _num(v)) is not None} if isinstance(reward, dict) else None
            )
            meta: dict[str, Any] = {
                engine: {
                    k: _plain(s.get(k))
                    for k in ("index", "group_index", "status", "remove_sample", "weight_versions", "rollout_id")
                    if s.get(k) is not None
                }
            }
            if s.get("remove_sample"):
                meta["sample_excluded"] = (
                    f"remove_sample ({engine})"  # left out of the loss: the audit sees no leak in it
                )
            if isinstance(s.get("metadata"), dict):
                meta[engine]["metadata"] = _plain({k: v for k, v in s["metadata"].items() if k != "messages"})
            msgs = messages.get(index) if index is not None else None
            if msgs is None and isinstance(s.get("metadata"), dict):
                msgs = s["metadata"].get("messages")
            if isinstance(msgs, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs):
                meta["messages"] = _plain(msgs)
            if t is not None and t.get("raw_reward") is not None:
                meta[engine]["raw_reward"] = _plain(t["raw_reward"])
            sample: dict[str, Any] = {
                "engine": engine,
                "file": str(file),
                "line": row,
                "split": split,
                "ids": ids,
                "prompt_length": plen,
                "loss_mask": [0] * plen + [1 if x else 0 for x in mask],
                "arrays": arrays,
                "engine_arrays": engine_arrays,
                "meta": meta,
            }
            if step is not None:
                sample["step"] = step
            if s.get("group_index") is not None:
                sample["group"] = f"{split}:{step}:{s['group_index']}"
            if isinstance(reward, (int, float)) and _num(reward) is not None:
                sample["reward"] = float(reward)
            elif parts:
                sample["reward_parts"] = parts
            if s.get("label") is not None:
                sample["golden"] = _plain(s["label"])
            fin = _finish_of(s.get("status"))
            if fin:
                sample["finish"] = fin
            yield {"sample": sample}
        except Exception as e:  # noqa: BLE001 - a sample we cannot read is reported, the others go on
            yield _issue(file, row, e)


def miles_train_rows(files: Sequence[Path], trust: bool) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """miles' train_data/{rid}_{rank}.pt: per sample index, the per-token columns (response-aligned). A sample split
    over context-parallel ranks is not reassembled (its per-token train columns are left out, with a note)."""
    rows: dict[int, dict[str, Any]] = {}
    notes: list[str] = []
    for f in files:
        pack = load_pt(f, trust)
        cols = pack.get("rollout_data") or {}
        if int(pack.get("cp_size", 1) or 1) > 1:
            notes.append(
                f"{f}: context-parallel slices (cp_size {pack.get('cp_size')}) are not reassembled; its log-probs and advantages are left out"
            )
            continue
        for r, si in enumerate(_list(cols.get("sample_indices")) or []):
            si = int(si)
            if si in rows:
                continue  # tensor-parallel copies
            row: dict[str, Any] = {}
            for k in ("log_probs", "ref_log_probs", "advantages", "entropy", "returns", "loss_masks", "raw_reward"):
                v = cols.get(k)
                if v is None:
                    continue
                if k == "raw_reward":
                    continue
                try:
                    row["loss_mask" if k == "loss_masks" else k] = _list(v[r])
                except (IndexError, TypeError):
                    continue
            rows[si] = row
    return rows, notes


def _skyrl_samples(batch: dict[str, Any], file: Path) -> Iterator[dict[str, Any]]:
    fields = batch.get("batch_dict") if "batch_dict" in batch else dict(batch)
    if not isinstance(fields, dict) or "sequences" not in fields:
        raise Refused("expected SkyRL's TrainingInputBatch (sequences, attention_mask, response_mask, loss_mask, …)")
    t = {k: _skyrl_tensor(v) for k, v in fields.items()}
    metadata = batch.get("metadata") or {}
    m = re.search(r"global_step_(\d+)", file.name)
    step = int(m.group(1)) if m else _num(metadata.get("global_step"))
    seqs, attn, resp, loss = t["sequences"], t.get("attention_mask"), t.get("response_mask"), t.get("loss_mask")
    if attn is None or resp is None or loss is None:
        raise Refused("a SkyRL batch without attention_mask, response_mask or loss_mask")
    n = int(seqs.shape[0]) - int(metadata.get("pad_size") or 0)
    width = int(resp.shape[1])
    group_of: dict[int, int] = {}
    for g, (a, b) in enumerate(metadata.get("policy_prompt_boundaries") or []):
        for i in range(int(a), int(b)):
            group_of[i] = g
    present = [k for k, v in t.items() if v is not None]
    for i in range(n):
        try:
            real = [int(x) for x, a in zip(seqs[i].tolist(), attn[i].tolist()) if a]
            r = int(sum(resp[i].tolist()))
            if r > len(real) or r > width:
                raise ValueError("response_mask", f"{r} response tokens but the sequence has {len(real)}")
            plen = len(real) - r
            cut = lambda a: None if a is None else a[i][width - r :]  # noqa: E731, B023 - right-aligned response columns; used in this iteration
            sample: dict[str, Any] = {
                "engine": "skyrl",
                "file": str(file),
                "line": i + 1,
                "split": "train",
                "ids": real,
                "prompt_length": plen,
                "loss_mask": [0] * plen + [1 if x else 0 for x in cut(loss).tolist()],
                "engine_arrays": present,
                "arrays": {
                    ours: _resp_aligned(cut(t.get(theirs)), plen)
                    for ours, theirs in (
                        ("rollout_logprob", "rollout_logprobs"),
                        ("logprob", "action_log_probs"),
                        ("ref_logprob", "base_action_log_probs"),
                        ("advantage", "advantages"),
                        ("value", "values"),
                    )
                    if t.get(theirs) is not None
                },
                "meta": {"skyrl": {"row": i}},
            }
            if step is not None:
                sample["step"] = int(step)
            if i in group_of:
                sample["group"] = f"train:{sample.get('step', 'x')}:{group_of[i]}"
            yield {"sample": sample}
        except Exception as e:  # noqa: BLE001 - a sample we cannot read is reported, the others go on
            yield _issue(file, i + 1, e)


# -- layouts ------------------------------------------------------------------------------------------------------------
def _rid(p: Path) -> tuple[bool, int] | None:
    m = re.fullmatch(r"(eval_)?(\d+)", p.stem) or re.search(r"(eval_)?(\d+)$", p.stem)
    return (bool(m.group(1)), int(m.group(2))) if m else None


def plan(path: Path, kind: str | None) -> tuple[str, list[tuple[str, Path]]]:
    """What to read: (engine, [(how, file)…]); how is `rollout` (a slime/miles sample dump) or `skyrl`."""
    if path.is_file():
        if path.suffix == ".pkl":
            return kind or "skyrl", [("skyrl", path)]
        return kind or "slime", [("rollout", path)]
    if not path.is_dir():
        raise Refused("no such file or directory")
    for d in (path / "dumped_data", path):
        pkls = sorted(
            d.glob("*.pkl"), key=lambda p: (int(m.group(1)) if (m := re.search(r"(\d+)", p.name)) else 0, p.name)
        )
        if pkls:
            return kind or "skyrl", [("skyrl", p) for p in pkls]
    rollout_dir = path / "rollout_data" if (path / "rollout_data").is_dir() else path
    pts = [p for p in rollout_dir.glob("*.pt") if _rid(p) is not None]
    if pts:
        pts.sort(key=lambda p: (_rid(p)[1], _rid(p)[0]))  # type: ignore[index]
        miles = (
            (path / "train_data").is_dir() or (path / "trajectory").is_dir() or (path / "dashboard_columns").is_dir()
        )
        return kind or ("miles" if miles else "slime"), [("rollout", p) for p in pts]
    raise Refused(
        "no slime/miles rollout dumps (*.pt, rollout_data/*.pt) or SkyRL batches (*.pkl, dumped_data/*.pkl) here"
    )


def read(path: Path, kind: str | None, trust: bool) -> int:
    try:
        engine, files = plan(path, kind)
    except Refused as e:
        out({"issue": {"file": str(path), "line": 0, "field": "", "message": str(e)}})
        return 2
    for how, f in files:
        # the --dump-details directory: train_data/ and trajectory/ sit beside rollout_data/
        base = f.parent.parent if f.parent.name == "rollout_data" else f.parent
        count = 0
        try:
            if how == "skyrl":
                stream: Iterator[dict[str, Any]] = _skyrl_samples(load_pkl(f, trust), f)
            else:
                pack = load_pt(f, trust)
                if not isinstance(pack, dict):
                    raise Refused(f"expected a dict, got {type(pack).__name__}")
                if "rollout_data" in pack and "samples" not in pack:
                    raise Refused(
                        "a miles train_data shard: open the --dump-details directory (its rollout_data/ holds the samples)"
                    )
                rid = _rid(f)
                split = "val" if rid and rid[0] else "train"
                train: dict[int, dict[str, Any]] | None = None
                messages: dict[int, Any] = {}
                if rid is not None and (base / "train_data").is_dir() and not rid[0]:
                    shards = sorted(
                        (base / "train_data").glob(f"{rid[1]}_*.pt"),
                        key=lambda p: int(p.stem.rsplit("_", 1)[1]) if p.stem.rsplit("_", 1)[1].isdigit() else 0,
                    )
                    train, notes = miles_train_rows(shards, trust)
                    for n in notes:
                        out({"note": n})
                traj = base / "trajectory" / f"{'eval_' if rid and rid[0] else ''}{rid[1] if rid else ''}.jsonl"
                if rid is not None and traj.is_file():
                    for line in traj.read_text(encoding="utf-8").splitlines():
                        try:
                            o = json.loads(line)
                            messages[int(o["sample_index"])] = o.get("messages")
                        except (ValueError, KeyError, TypeError):
                            continue
                stream = slime_samples(pack, f, engine, rid[1] if rid else None, split, train, messages)
            for item in stream:
                out(item)
                count += "sample" in item
        except Refused as e:
            out({"issue": {"file": str(f), "line": 0, "field": "", "message": str(e)}})
        except Exception as e:  # noqa: BLE001 - a file we cannot read is reported, the others go on
            out(
                {
                    "issue": {
                        "file": str(f),
                        "line": 0,
                        "field": "",
                        "message": f"cannot be read: {type(e).__name__}: {e}",
                    }
                }
            )
        out({"file": str(f), "samples": count})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m search_agent_trainer.dumps", description=__doc__.split("\n\n")[0])
    p.add_argument("path")
    p.add_argument("--kind", choices=ENGINES)
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load files the restricted loaders refuse (runs code the file names)",
    )
    a = p.parse_args(argv)
    return read(Path(a.path), a.kind, a.trust_pickle)


if __name__ == "__main__":
    sys.exit(main())
