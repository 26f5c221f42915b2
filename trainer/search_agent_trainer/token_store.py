"""The token store: a run's rollouts as typed, compressed columns (Apache Parquet), one directory per step.

    rollouts/step-000042/            a step, committed by renaming its temporary directory (.step-000042.tmp-<pid>)
        rollouts.parquet             one row per rollout: its fields (id, step, group, …, prompt, response, meta as
                                     JSON) and where its tokens are (tokens_offset, tokens_count, arrays)
        tokens.parquet               one row per token, the rollouts' tokens one after another: ids uint32, role and
                                     loss_mask uint8, the numbers float32 (NaN: not scored, the record's null)
        vocab.parquet                id → the token's text, for the ids of this step (`tokens.text` is the text of
                                     each id); a step whose texts are not a function of the id has a `text` column

Why this layout (docs/run-format.md, docs/benchmarks.md): Parquet is the field's columnar format (pandas, pyarrow,
DuckDB and hyparquet in the editor read it); brotli is the codec the editor's Node decompresses natively; flat,
required columns decode in Node without per-value work. Precision: ids, roles and masks exact; every number float32,
whose step (≤ 9.5e-7 below 16 nats) is under the 1e-6 the JSON records round to — bf16 or float16 would put 1e-3 to
1e-2 of quantisation noise into logprob − rollout_logprob, the microscope's Δ, whose healthy values are 1e-6 to 1e-3.

A reader sees a step whole or not at all: the directory is written under a temporary name and renamed; a killed
writer leaves a `.step-…tmp-…` directory every reader ignores and the next writer removes. The column layout is
the contract of `src/core/store/tokenStore.ts` (the editor's reader and writer).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .run_writer import _clean, remove_freeing, write_bytes

STORE_VERSION = 1
# uint8 codes of tokens.role, in the order of src/core/run/format.ts TOKEN_ROLES
ROLES = ("generated", "prompt", "retrieved", "feedback")
ROLE_CODE = {r: i for i, r in enumerate(ROLES)}
# the per-token numbers, float32, NaN where the record holds null
FLOAT_ARRAYS = ("rollout_logprob", "logprob", "ref_logprob", "advantage", "value", "entropy")
# bits of rollouts.parquet's `arrays`: which token arrays a record has
HAS_TOKENS = 1 << 7
ARRAY_BIT = {name: 1 << i for i, name in enumerate(FLOAT_ARRAYS)} | {"engine_mask": 1 << 6}
# the record's fields with a column of their own (the others, and any value of another type, go to `extra`)
STRING_FIELDS = ("id", "group", "split", "question", "data_source", "prompt", "response", "dialect", "finish")
INT_FIELDS = ("step", "sample", "turns", "searches")
JSON_FIELDS = ("golden", "reward_parts", "meta")
ROW_GROUP_TOKENS = 1 << 17  # a tokens row group holds whole rollouts, about this many tokens
ROW_GROUP_ROLLOUTS = 256
PARQUET = {"compression": "brotli", "compression_level": 1, "data_page_version": "2.0", "write_statistics": False}
STEP_DIR = re.compile(r"^(val-)?step-(\d+)$")


@dataclass
class StepColumns:
    """A step's tokens, every rollout's one after another. `lengths[i]` tokens belong to rollout i (0: no tokens);
    `arrays[i]` says which arrays rollout i has (bits: ARRAY_BIT, HAS_TOKENS). Floats are NaN where not scored."""

    ids: np.ndarray  # uint32
    role: np.ndarray  # uint8
    loss_mask: np.ndarray  # uint8
    floats: dict[str, np.ndarray]  # float32
    lengths: np.ndarray  # int64
    arrays: np.ndarray  # int32
    engine_mask: np.ndarray | None = None  # uint8
    text: list[str] | None = None  # only when the texts are not a function of the id
    vocab: dict[int, str] = field(default_factory=dict)


def _pa() -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def _json(v: Any) -> str:
    return json.dumps(_clean(v), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _split_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The per-rollout columns of a record (its tokens aside)."""
    row: dict[str, Any] = {k: None for k in (*STRING_FIELDS, *INT_FIELDS, *JSON_FIELDS, "reward", "extra")}
    extra: dict[str, Any] = {}
    for k, v in rec.items():
        if k == "tokens":
            continue
        if k in STRING_FIELDS and isinstance(v, str):
            row[k] = v
        elif k in INT_FIELDS and isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31:
            row[k] = v
        elif k == "reward" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            row[k] = float(v)
        elif k in JSON_FIELDS:
            row[k] = _json(v)
        elif k == "v" and v == 2:
            continue
        else:
            extra[k] = v
    if "v" not in rec:
        extra["v"] = None  # absent, kept absent
    row["extra"] = _json(extra) if extra else None
    return row


def columns_from_records(records: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], StepColumns]:
    """Rollout records (dicts with token lists, docs/run-format.md) → their per-rollout rows and the step's columns.
    For records already in memory (the JSONL path, converters, tests); engines hand columns directly (recorder.py)."""
    rows, lengths, arrays = [], [], []
    ids: list[int] = []
    role: list[int] = []
    mask: list[int] = []
    floats: dict[str, list[float]] = {k: [] for k in FLOAT_ARRAYS}
    engine: list[int] = []
    texts: list[str] = []
    vocab: dict[int, str] = {}
    consistent = True
    for rec in records:
        meta = rec.get("meta")
        tk = rec.get("tokens")
        em = meta.get("engine_loss_mask") if isinstance(meta, dict) else None
        n = len(tk["ids"]) if tk else 0
        bits = HAS_TOKENS if tk else 0
        if tk:
            ids += tk["ids"]
            role += [ROLE_CODE[r] for r in tk["role"]]
            mask += tk["loss_mask"]
            for k in FLOAT_ARRAYS:
                if tk.get(k) is not None:
                    bits |= ARRAY_BIT[k]
            for i, t in zip(tk["ids"], tk["text"]):
                if vocab.setdefault(i, t) != t:
                    consistent = False
            texts += tk["text"]
            if isinstance(em, list) and len(em) == n and all(x in (0, 1) for x in em):
                bits |= ARRAY_BIT["engine_mask"]
                meta = {k: v for k, v in meta.items() if k != "engine_loss_mask"}
                rec = {**rec, "meta": meta}
        rows.append(_split_record(rec))
        lengths.append(n)
        arrays.append(bits)
    # second pass for the optional arrays: only those some record has get a column
    wanted = [k for k in FLOAT_ARRAYS if any(a & ARRAY_BIT[k] for a in arrays)]
    want_engine = any(a & ARRAY_BIT["engine_mask"] for a in arrays)
    for rec, n, bits in zip(records, lengths, arrays):
        tk = rec.get("tokens")
        for k in wanted:
            floats[k] += [math.nan if x is None else x for x in tk[k]] if bits & ARRAY_BIT[k] else [math.nan] * n
        if want_engine:
            engine += rec["meta"]["engine_loss_mask"] if bits & ARRAY_BIT["engine_mask"] else [0] * n
    cols = StepColumns(
        ids=np.asarray(ids, dtype=np.uint32),
        role=np.asarray(role, dtype=np.uint8),
        loss_mask=np.asarray(mask, dtype=np.uint8),
        floats={k: np.asarray(floats[k], dtype=np.float32) for k in wanted},
        lengths=np.asarray(lengths, dtype=np.int64),
        arrays=np.asarray(arrays, dtype=np.int32),
        engine_mask=np.asarray(engine, dtype=np.uint8) if want_engine else None,
        text=None if consistent else texts,
        vocab=vocab if consistent else {},
    )
    return rows, cols


def vocab_of(ids: np.ndarray, texts: Callable[[Iterable[int]], list[str]]) -> dict[int, str]:
    """The text of every id a step uses, from a tokenizer's per-token texts (policy.Tokenizer.token_texts)."""
    uniq = np.unique(ids).tolist()
    return dict(zip(uniq, texts(uniq)))


def step_dirname(name: str) -> str:
    if not STEP_DIR.match(name):
        raise ValueError(f"a store step is named step-NNNNNN or val-step-NNNNNN, not {name!r}")
    return name


class _Sink:
    """A file of a step as pyarrow's output stream, written through run_writer.write_bytes: a failed write names its
    file (pyarrow's own errors name none), and the tests' simulated full disk (run_writer.set_disk_fault) reaches
    the store as it reaches the run's other files. The same bytes as pyarrow's own file, no slower (measured)."""

    closed = False

    def __init__(self, f: Any, path: Path):
        self.f, self.path = f, path

    def write(self, data: Any) -> int:
        write_bytes(self.f, data, self.path)
        return memoryview(data).nbytes

    def tell(self) -> int:
        return self.f.tell()

    def flush(self) -> None:
        pass


@contextlib.contextmanager
def _file(path: Path) -> Iterator[_Sink]:
    """`path` written through a _Sink, on disk (fsync) when the block ends."""
    with open(path, "wb", buffering=0) as f:
        yield _Sink(f, path)
        os.fsync(f.fileno())


def write_step(
    rollouts_dir: str | os.PathLike[str],
    name: str,
    rows: Sequence[dict[str, Any]],
    cols: StepColumns,
    info: dict[str, Any] | None = None,
) -> Path:
    """Writes one step (`name`: step-NNNNNN or val-step-NNNNNN) and commits it by renaming its directory: a reader
    sees all of it or none. An existing step of that name is replaced. Returns the step's directory."""
    pa, pq = _pa()
    root = Path(rollouts_dir)
    final = root / step_dirname(name)
    tmp = root / f".{name}.tmp-{os.getpid()}-{os.urandom(3).hex()}"
    tmp.mkdir(parents=True)
    try:
        n = len(rows)
        if len(cols.lengths) != n or len(cols.arrays) != n:
            raise ValueError(f"{name}: {n} rollouts but {len(cols.lengths)} lengths")
        offsets = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(cols.lengths[:-1], out=offsets[1:])
        total = int(cols.lengths.sum())
        token_fields = [
            ("ids", pa.uint32(), cols.ids),
            ("role", pa.uint8(), cols.role),
            ("loss_mask", pa.uint8(), cols.loss_mask),
        ]
        token_fields += [(k, pa.float32(), cols.floats[k]) for k in FLOAT_ARRAYS if k in cols.floats]
        if cols.engine_mask is not None:
            token_fields.append(("engine_mask", pa.uint8(), cols.engine_mask))
        for k, _, a in token_fields:
            if len(a) != total:
                raise ValueError(f"{name}: tokens.{k} has {len(a)} values, the rollouts {total} tokens")
        meta = {"sas.store": _json({"version": STORE_VERSION, **(info or {})})}
        schema = pa.schema(
            [pa.field(k, t, nullable=False) for k, t, _ in token_fields]
            + ([pa.field("text", pa.string(), nullable=False)] if cols.text is not None else []),
            metadata=meta,
        )
        arrays = [pa.array(np.ascontiguousarray(a), type=t) for _, t, a in token_fields] + (
            [pa.array(cols.text, type=pa.string())] if cols.text is not None else []
        )
        table = pa.Table.from_arrays(arrays, schema=schema)
        # roles and masks come in runs: delta-encoded they are a few bytes a page before compression, so a reader
        # decompresses next to nothing for them (PLAIN: 4 bytes a token of int32, mostly the same value)
        runs = {k: "DELTA_BINARY_PACKED" for k in ("role", "loss_mask", "engine_mask") if k in schema.names}
        with (
            _file(tmp / "tokens.parquet") as f,
            pq.ParquetWriter(f, schema, use_dictionary=False, column_encoding=runs, **PARQUET) as w,
        ):
            for lo, hi in _chunks(cols.lengths, ROW_GROUP_TOKENS):
                w.write_table(table.slice(lo, hi - lo), row_group_size=max(1, hi - lo))
        ids = sorted(cols.vocab)
        vocab = pa.table(
            {"id": pa.array(ids, type=pa.uint32()), "text": pa.array([cols.vocab[i] for i in ids], type=pa.string())},
            schema=pa.schema(
                [pa.field("id", pa.uint32(), nullable=False), pa.field("text", pa.string(), nullable=False)]
            ),
        )
        with _file(tmp / "vocab.parquet") as f:
            pq.write_table(vocab, f, use_dictionary=False, **PARQUET)
        rt = _rollouts_table(pa, rows, offsets, cols, meta)
        with _file(tmp / "rollouts.parquet") as f:
            pq.write_table(
                rt,
                f,
                row_group_size=ROW_GROUP_ROLLOUTS,
                use_dictionary=["split", "dialect", "finish", "data_source"],
                **PARQUET,
            )
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        remove_freeing(tmp)  # (a full disk gets its blocks back)
        raise
    return final


def _chunks(lengths: np.ndarray, target: int) -> list[tuple[int, int]]:
    """Token ranges of whole rollouts, about `target` tokens each (a rollout's tokens never span two row groups)."""
    out, lo, acc = [], 0, 0
    for n in lengths.tolist():
        acc += n
        if acc - lo >= target:
            out.append((lo, acc))
            lo = acc
    if acc > lo or not out:
        out.append((lo, acc))
    return out


def _rollouts_table(
    pa: Any, rows: Sequence[dict[str, Any]], offsets: np.ndarray, cols: StepColumns, meta: dict[str, str]
) -> Any:
    fields, arrays = [], []
    for k in STRING_FIELDS:
        fields.append(pa.field(k, pa.string(), nullable=k != "id"))
        arrays.append(pa.array([r[k] for r in rows], type=pa.string()))
    for k in INT_FIELDS:
        fields.append(pa.field(k, pa.int32()))
        arrays.append(pa.array([r[k] for r in rows], type=pa.int32()))
    fields.append(pa.field("reward", pa.float64()))
    arrays.append(pa.array([r["reward"] for r in rows], type=pa.float64()))
    for k in (*JSON_FIELDS, "extra"):
        fields.append(pa.field(k, pa.string()))
        arrays.append(pa.array([r[k] for r in rows], type=pa.string()))
    for k, t, a in (
        ("tokens_offset", pa.int64(), offsets),
        ("tokens_count", pa.int32(), cols.lengths),
        ("arrays", pa.int32(), cols.arrays),
    ):
        fields.append(pa.field(k, t, nullable=False))
        arrays.append(pa.array(np.asarray(a), type=t))
    if any(r["id"] is None for r in rows):
        raise ValueError("every rollout record needs an id")
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))


def records_to_step(
    rollouts_dir: str | os.PathLike[str],
    name: str,
    records: Sequence[dict[str, Any]],
    info: dict[str, Any] | None = None,
) -> Path:
    """Rollout records (dicts) written as one step of the store."""
    rows, cols = columns_from_records(records)
    return write_step(rollouts_dir, name, rows, cols, info)


# -- reading (tests, conversions; the editor reads with src/core/store/tokenStore.ts) ------------------------------
def committed_steps(rollouts_dir: str | os.PathLike[str]) -> list[Path]:
    """The committed steps of a run's rollouts/, by step (a held-out evaluation after its step's training rollouts)."""
    root = Path(rollouts_dir)
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        m = STEP_DIR.match(d.name)
        if m and (d / "rollouts.parquet").exists():
            out.append((int(m.group(2)), bool(m.group(1)), d))
    return [d for *_, d in sorted(out)]


def read_step(step_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of one step, as the JSONL has them (token numbers as Python floats of the float32 values)."""
    _, pq = _pa()
    d = Path(step_dir)
    rt = pq.read_table(d / "rollouts.parquet").to_pylist()
    tt = pq.read_table(d / "tokens.parquet")
    tok = {k: tt.column(k).to_numpy(zero_copy_only=False) for k in tt.column_names}
    vt = pq.read_table(d / "vocab.parquet").to_pydict()
    vocab = dict(zip(vt["id"], vt["text"]))
    out = []
    for r in rt:
        rec: dict[str, Any] = {"v": 2}
        extra = json.loads(r["extra"]) if r["extra"] else {}
        for k in (*STRING_FIELDS, *INT_FIELDS, "reward"):
            if r[k] is not None:
                rec[k] = r[k]
        for k in JSON_FIELDS:
            if r[k] is not None:
                rec[k] = json.loads(r[k])
        for k, v in extra.items():
            if k == "v" and v is None:
                rec.pop("v", None)
            else:
                rec[k] = v
        bits, lo, n = r["arrays"], r["tokens_offset"], r["tokens_count"]
        if bits & HAS_TOKENS:
            ids = tok["ids"][lo : lo + n].tolist()
            tk: dict[str, Any] = {
                "text": tok["text"][lo : lo + n].tolist() if "text" in tok else [vocab[i] for i in ids],
                "ids": ids,
                "role": [ROLES[c] for c in tok["role"][lo : lo + n].tolist()],
                "loss_mask": tok["loss_mask"][lo : lo + n].tolist(),
            }
            for k in FLOAT_ARRAYS:
                if bits & ARRAY_BIT[k]:
                    tk[k] = [None if math.isnan(x) else x for x in tok[k][lo : lo + n].tolist()]
            rec["tokens"] = tk
            if bits & ARRAY_BIT["engine_mask"]:
                rec.setdefault("meta", {})["engine_loss_mask"] = tok["engine_mask"][lo : lo + n].tolist()
        out.append(rec)
    return out


def remove_partial(rollouts_dir: str | os.PathLike[str]) -> list[Path]:
    """Removes what a killed writer left (temporary step directories, and the JSONL format's temporary files);
    returns them."""
    root = Path(rollouts_dir)
    gone = sorted(root.glob(".*.tmp-*")) if root.is_dir() else []
    for d in gone:
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)
        else:
            d.unlink(missing_ok=True)
    return gone


def truncate_after(rollouts_dir: str | os.PathLike[str], step: int) -> None:
    """Removes the committed steps after `step` (a resume writes them again) and any partial one."""
    remove_partial(rollouts_dir)
    for d in committed_steps(rollouts_dir):
        m = STEP_DIR.match(d.name)
        if m and int(m.group(2)) > step:
            shutil.rmtree(d, ignore_errors=True)
