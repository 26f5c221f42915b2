"""Recording rollouts off the training step's critical path (`train.record`, docs/trainer.md#recording-rollouts).

Every engine (the builtin trainer, TRL's, veRL's recorder) records a step the same way:
1. on the training thread, cheap and vectorised: the in-run checks flag rollouts (`rollout_flags`: a leak — loss
   mask 1 where the role says no, or 0 on a generated token; a non-finite number; a trained token whose log-prob
   ratio exp(logprob − rollout_logprob) lies outside [0.5, 2], the audit's band), and `select` picks what is kept:
   every step or every k-th (`every`), all its GRPO groups or `groups` whole groups (never part of one), always the
   groups of flagged rollouts and every held-out evaluation;
2. `Recorder.submit` hands the step (references to its tensors and trajectories: the step never copies or
   serialises them) to a writer thread through a bounded queue, and returns the step's `record/*` metrics;
3. the writer thread builds the columns (the engine's `build`, tensor slicing), writes the step to the token store
   (token_store.py) or as v2 JSONL (`format: "jsonl"`), each committed by a rename.
When `queue` steps are already waiting, a training step keeps only its flagged groups (built right away, so the
step's tensors are let go) and says so: a `warning` event, `record/dropped_rollouts` in metrics.jsonl, and run.json's
`record`. The metrics of a step always cover every rollout; run.json's `record` says what was recorded.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from . import token_store as ts

# The audit's band (src/core/audit/logprob.ts LOGPROB_DEFAULTS): a trained token whose ratio lies outside is flagged.
RATIO_BAND = (0.5, 2.0)
FLAGS = ("leak", "non-finite", "logprob-gap")


@dataclass(frozen=True)
class RecordSettings:
    enabled: bool = True
    format: str = "store"  # store | jsonl
    every: int = 1  # record every k-th step's groups (flagged rollouts and held-out evaluations: every step)
    groups: int | None = None  # whole GRPO groups a recorded step keeps (None: all)
    queue: int = 2  # steps the writer may hold before a step keeps only its flagged groups

    @classmethod
    def of(cls, cfg: Any) -> RecordSettings:
        """From a run config (`train.save_rollouts`, `train.record`; defaults as the schema's)."""
        train = cfg.get("train") or {}
        rec = train.get("record") or {}
        groups = rec.get("groups")
        return cls(
            enabled=train.get("save_rollouts", True) is not False,
            format=rec.get("format") or "store",
            every=max(1, int(rec.get("every") or 1)),
            groups=None if groups is None else int(groups),
            queue=max(1, int(rec.get("queue") or 2)),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "every": self.every,
            "groups": self.groups,
            "queue": self.queue,
            "always": ["held-out evaluations", *(f"rollouts flagged: {f}" for f in FLAGS)],
        }


def rollout_flags(
    *,
    valid: Any,
    loss_mask: Any,
    expected: Any,
    logprob: Any = None,
    rollout_logprob: Any = None,
    numbers: Sequence[tuple[Any, Any]] = (),
    band: tuple[float, float] = RATIO_BAND,
    stats: dict[str, float] | None = None,
    generated: Any = None,
    logprob_scored: Any = None,
    rollout_scored: Any = None,
) -> list[list[str]]:
    """Per row of (B, L) torch tensors over the positions `valid` (bool): `leak` where loss_mask ≠ expected (the
    mask the roles give: 1 on generated tokens, or on every response token with masking off), `non-finite` where a
    scored number (`numbers`: (values, scored mask) pairs) is NaN or infinite, `logprob-gap` where a trained token
    has both log-probs (scored: `logprob_scored` / `rollout_scored`, else where finite) and its ratio lies outside
    `band`. Vectorised, a few passes over the step's tensors (a number tensor that is finite everywhere costs one).
    `stats`, when given, receives the sums of the audit's per-step series over these rows (`audit_metrics`): leaked
    tokens (against `generated`, the generated tokens, as the audit counts them: with masking off on purpose every
    trained observation token is one), compared tokens, Σ|Δ|, tokens outside the band, Σ exp(ΣΔ) over rows with a
    compared token."""
    import torch

    valid = valid.bool()
    B = int(valid.shape[0])
    loss = loss_mask.bool() & valid
    leaked = (loss_mask.float() != expected.float()) & valid
    leak = leaked.any(-1)
    bad = torch.zeros(B, dtype=torch.bool)
    for x, scored in numbers:
        # one reduction: a finite sum means every value is finite (NaN and infinities propagate); else look closer
        if x is not None and not math.isfinite(float(x.sum())):
            bad |= (~torch.isfinite(x.float()) & scored.bool() & valid).any(-1)
    gap = torch.zeros(B, dtype=torch.bool)
    if logprob is not None and rollout_logprob is not None:
        lo, hi = math.log(band[0]), math.log(band[1])
        a, b = logprob.float(), rollout_logprob.float()
        both = (
            loss
            & (logprob_scored.bool() if logprob_scored is not None else torch.isfinite(a))
            & (rollout_scored.bool() if rollout_scored is not None else torch.isfinite(b))
        )
        d = torch.where(both, a - b, 0.0)
        if not math.isfinite(float(d.sum())):  # a non-finite log-prob where scored (flagged above): not compared
            both &= torch.isfinite(d)
            d = torch.where(both, d, 0.0)
        outside = (d < lo) | (d > hi)
        gap = outside.any(-1)
        if stats is not None:
            n = both.sum(-1)
            stats["compared"] = stats.get("compared", 0.0) + float(n.sum())
            stats["abs"] = stats.get("abs", 0.0) + float(d.abs().sum(dtype=torch.float64))
            stats["outside"] = stats.get("outside", 0.0) + float(outside.sum())
            has = n > 0
            stats["seq"] = stats.get("seq", 0.0) + float(torch.exp(d.sum(-1, dtype=torch.float64))[has].sum())
            stats["seq_n"] = stats.get("seq_n", 0.0) + float(has.sum())
    if stats is not None:
        by_role = (
            leaked if generated is None or generated is expected else (loss_mask.float() != generated.float()) & valid
        )
        stats["leaks"] = stats.get("leaks", 0.0) + float(by_role.sum())
    out: list[list[str]] = []
    for lk, nf, gp in zip(leak.tolist(), bad.tolist(), gap.tolist()):
        out.append([f for f, on in zip(FLAGS, (lk, nf, gp)) if on])
    return out


def audit_metrics(stats: dict[str, float]) -> dict[str, float]:
    """The audit's per-step series (src/core/audit/series.ts AUDIT_METRICS) from `rollout_flags` sums, over every
    training rollout of the step (recorded or not): what the dashboard charts at once, for any number of steps."""
    m = {"audit/leaks": stats.get("leaks", 0.0)}
    if stats.get("compared"):
        m["audit/logprob/mean_abs_diff"] = stats["abs"] / stats["compared"]
        m["audit/logprob/ratio_outside"] = stats["outside"] / stats["compared"]
    if stats.get("seq_n"):
        m["audit/logprob/seq_ratio"] = stats["seq"] / stats["seq_n"]
    return m


def select(
    keys: Sequence[Any], flags: Sequence[Sequence[str]], step: int, s: RecordSettings, held_out: bool
) -> list[int]:
    """The rows a step keeps, whole groups at a time (`keys[i]`: row i's group). A held-out evaluation: all. A
    training step: the groups of flagged rows, and on a recorded step (every `every`-th) all groups or `groups` of
    them, drawn by the step (the same draw on every process of a multi-process engine)."""
    n = len(keys)
    if held_out:
        return list(range(n))
    chosen = {keys[i] for i in range(n) if flags[i]}
    if step % s.every == 0:
        distinct = sorted(set(keys), key=str)
        if s.groups is None or s.groups >= len(distinct):
            chosen.update(distinct)
        else:
            chosen.update(random.Random(f"record:{step}").sample(distinct, s.groups))
    return [i for i in range(n) if keys[i] in chosen]


RECORDING_SUFFIX = ".recording.json"  # beside a JSONL step file: {step, split, recorded, of} (the store's sas.store)


@dataclass
class StepData:
    """What the writer writes for one step: the kept rollouts' records (no `tokens`) and their token columns (the
    vocab left empty: the writer thread fills it)."""

    records: list[dict[str, Any]]
    cols: ts.StepColumns


@dataclass
class StepJob:
    name: str  # step-NNNNNN | val-step-NNNNNN
    step: int
    split: str
    total: int  # rollouts of the step (all of them, recorded or not)
    keys: list[Any]  # each row's group
    flags: list[list[str]]
    build: Callable[[list[int]], StepData]  # run on the writer thread: the kept rows' data
    keep: list[int] = field(default_factory=list)
    data: StepData | None = None  # built already (the queue-full path)
    stats: dict[str, float] | None = None  # rollout_flags' sums: the step's audit/* metrics


class Recorder:
    """The background writer: a thread, a bounded queue of steps, the counters run.json and metrics.jsonl show."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        settings: RecordSettings,
        texts: Callable[[list[int]], list[str]],
        warn: Callable[..., None],
        jsonl_line: Callable[[dict[str, Any]], str] | None = None,
    ):
        self.dir = Path(run_dir) / "rollouts"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.texts = texts
        self.warn = warn
        self.jsonl_line = jsonl_line
        self._pending: deque[StepJob] = deque()
        self._cv = threading.Condition()
        self._busy = False
        self._closed = False
        self.errors: list[str] = []
        self._failure: BaseException | None = None  # a full disk: raised on the training thread (`_raise_failure`)
        self.totals = {
            "steps": 0,
            "rollouts": 0,
            "of": 0,
            "flagged": 0,
            "dropped_rollouts": 0,
            "dropped_steps": 0,
            "tokens": 0,
            "bytes": 0,
            "write_seconds": 0.0,
            "write_cpu_seconds": 0.0,
        }
        ts.remove_partial(self.dir)  # what a killed writer left (a temporary step directory or JSONL file)
        if settings.enabled and settings.format == "store":
            try:
                import pyarrow  # noqa: F401
            except ImportError as e:
                raise RuntimeError(
                    'train.record.format "store" writes Parquet with pyarrow, which this Python lacks: pip install pyarrow==26.0.1 (trainer/requirements.txt), or set train.record.format to "jsonl"'
                ) from e
        self._thread = threading.Thread(target=self._run, name="rollout-writer", daemon=True)
        self._thread.start()

    # -- the training thread ---------------------------------------------------------------------------------------
    def submit(self, job: StepJob) -> dict[str, float]:
        """Hands a step to the writer; never waits for it. Returns the step's record/* metrics. Raises the error of
        an earlier step's write that found the disk full (the run fails saying so, and resumes once there is room)."""
        self._raise_failure()
        s = self.settings
        held_out = job.split != "train"
        if not s.enabled and not held_out:  # train.save_rollouts false: held-out evaluations are still recorded
            return {}
        job.keep = select(job.keys, job.flags, job.step, s, held_out)
        flagged = sum(1 for f in job.flags if f)
        m = {"record/rollouts": float(len(job.keep)), "record/flagged": float(flagged)}
        if job.stats is not None:
            m.update(audit_metrics(job.stats))
        for name in FLAGS:
            m[f"record/flagged/{name}"] = float(sum(1 for f in job.flags if name in f))
        with self._cv:
            behind = len(self._pending) + (1 if self._busy else 0)
            if behind >= s.queue and not held_out and job.keep:
                # The writer is behind: keep only the flagged groups, built now so the step's tensors can go.
                full = len(job.keep)
                job.keep = (
                    select(job.keys, job.flags, job.step, RecordSettings(every=1 << 62), held_out=False)
                    if flagged
                    else []
                )
                dropped = full - len(job.keep)
                self.totals["dropped_rollouts"] += dropped
                self.totals["dropped_steps"] += 1
                m["record/dropped_rollouts"] = float(dropped)
                m["record/rollouts"] = float(len(job.keep))
                self.warn(
                    f"step {job.step}: the rollout writer is {behind} steps behind (train.record.queue {s.queue}); this step records only its flagged groups: {len(job.keep)} of {job.total} rollouts ({dropped} not recorded). A slow disk, or a smaller train.record.groups, is the fix",
                    step=job.step,
                    dropped=dropped,
                )
                if job.keep:
                    job.data = job.build(job.keep)
                job.build = _built
            self.totals["of"] += job.total
            self.totals["flagged"] += flagged
            if job.keep:
                self._pending.append(job)
                self._cv.notify_all()
            m["record/queue"] = float(len(self._pending) + (1 if self._busy else 0))
        return m

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every submitted step is written (the end of a run, a checkpoint, a test). False on timeout.
        Raises a write's full disk (once)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._pending or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        self._raise_failure()
        return True

    def close(self, timeout: float | None = None) -> bool:
        try:
            done = self.flush(timeout)
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
        self._thread.join(1.0 if not done else None)
        return done

    def _raise_failure(self) -> None:
        with self._cv:
            e, self._failure = self._failure, None
        if e is not None:
            raise e

    def summary(self) -> dict[str, Any]:
        """run.json's `record`: the settings and what was recorded so far."""
        with self._cv:
            t = dict(self.totals)
        return {
            **self.settings.describe(),
            "recorded": {
                "steps": t["steps"],
                "rollouts": t["rollouts"],
                "of": t["of"],
                "tokens": t["tokens"],
                "bytes": t["bytes"],
            },
            "flagged": t["flagged"],
            "dropped": {"steps": t["dropped_steps"], "rollouts": t["dropped_rollouts"]},
            "errors": len(self.errors),
        }

    def truncate_after(self, step: int) -> None:
        """A resume from `step`: later recorded steps go (the resumed run records them again), and the totals start
        from what is left on disk (run.json's `record` counts the whole run, not this process's part of it)."""
        self.flush()
        ts.truncate_after(self.dir, step)  # (the JSONL format's later files: RunWriter.truncate_after, called first)
        on_disk = recorded_on_disk(self.dir)
        with self._cv:
            self.totals.update(on_disk)

    # -- the writer thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        if self.settings.enabled and self.settings.format == "store":
            try:  # pyarrow's first array imports pandas (seconds): here, not in the first step's write
                import pyarrow as pa

                pa.array(np.zeros(1, dtype=np.float32))
            except Exception:  # noqa: BLE001
                pass
        while True:
            with self._cv:
                while not self._pending and not self._closed:
                    self._cv.wait()
                if not self._pending:
                    return
                job = self._pending.popleft()
                self._busy = True
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                data = job.data if job.data is not None else job.build(job.keep)
                path = self._write(job, data)
                size = sum(f.stat().st_size for f in (path.iterdir() if path.is_dir() else [path]))
                with self._cv:
                    self.totals["steps"] += 1
                    self.totals["rollouts"] += len(data.records)
                    self.totals["tokens"] += int(data.cols.lengths.sum())
                    self.totals["bytes"] += size
                    self.totals["write_seconds"] += time.perf_counter() - t0
                    self.totals["write_cpu_seconds"] += time.thread_time() - c0
            except Exception as e:  # noqa: BLE001 - a failed write is reported, the run goes on (not on a full disk)
                from .run_writer import disk_full_message

                full = disk_full_message(e)
                self.errors.append(f"{job.name}: {full or f'{type(e).__name__}: {e}'}")
                if full:
                    # A full disk fails the run, saying so (issue 40): the training thread raises it at its next
                    # submit, checkpoint or the run's end; the steps waiting would meet the same disk.
                    with self._cv:
                        if self._failure is None:
                            self._failure = e
                        self.totals["dropped_steps"] += len(self._pending)
                        self.totals["dropped_rollouts"] += sum(len(j.keep) for j in self._pending)
                        self._pending.clear()
                else:
                    try:
                        self.warn(
                            f"recording {job.name} failed: {type(e).__name__}: {e} (the run goes on; this step's rollouts are not recorded, and nothing of it is left half-written)",
                            step=job.step,
                        )
                    except Exception:  # noqa: BLE001
                        pass
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _write(self, job: StepJob, data: StepData) -> Path:
        cols = data.cols
        if not cols.vocab and cols.text is None and len(cols.ids):
            cols.vocab = ts.vocab_of(cols.ids, self.texts)
        info = {"step": job.step, "split": job.split, "recorded": len(data.records), "of": job.total}
        if self.settings.format == "jsonl":
            return self._write_jsonl(job.name, records_of(data), info)
        return ts.write_step(self.dir, job.name, [ts._split_record(r) for r in data.records], cols, info)

    def _write_jsonl(self, name: str, records: list[dict[str, Any]], info: dict[str, Any]) -> Path:
        """A step as v2 JSONL, and beside it `NAME.recording.json`: the step's `info` (`recorded` of `of` rollouts —
        what the store keeps in its `sas.store` metadata), so that a reader can say the step is a sample. Written
        first: a recording without its JSONL is ignored; a JSONL without one (an older run) is read as before."""
        from .run_writer import dumps, remove_freeing, write_bytes, write_file_atomic

        line = self.jsonl_line or dumps
        path = self.dir / f"{name}.jsonl"
        tmp = self.dir / f".{name}.jsonl.tmp-{os.getpid()}"
        recording = self.dir / f"{name}{RECORDING_SUFFIX}"
        write_file_atomic(recording, json.dumps(info).encode("utf-8"))
        try:
            with open(tmp, "wb", buffering=0) as f:
                for i in range(0, len(records), 256):
                    # a failure names the file
                    write_bytes(f, "".join(line(r) + "\n" for r in records[i : i + 256]).encode("utf-8"), tmp)
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            remove_freeing(tmp)  # nothing half-written stays (a full disk gets its blocks back)
            recording.unlink(missing_ok=True)  # nor the recording of a step that is not there
            raise
        return path


def recorded_on_disk(rollouts_dir: Path) -> dict[str, int]:
    """What a run's rollouts/ holds, as the recorder's totals count it: committed steps (the store's directories and
    JSONL files), their rollouts, the rollouts of the steps they were recorded from (`of`; a JSONL file's own lines),
    tokens and bytes. What the store does not keep (flagged, dropped) is not counted."""
    out = {"steps": 0, "rollouts": 0, "of": 0, "tokens": 0, "bytes": 0}
    store_steps = ts.committed_steps(rollouts_dir)
    if store_steps:  # (a JSONL run, the format of a Python without pyarrow, resumes without importing it)
        import pyarrow.parquet as pq
    for d in store_steps:
        files = [f for f in d.iterdir() if f.is_file()]
        out["steps"] += 1
        out["bytes"] += sum(f.stat().st_size for f in files)
        try:
            schema = pq.read_schema(d / "tokens.parquet")
            info = json.loads((schema.metadata or {}).get(b"sas.store", b"{}"))
            out["tokens"] += pq.read_metadata(d / "tokens.parquet").num_rows
            n = int(info.get("recorded", pq.read_metadata(d / "rollouts.parquet").num_rows))
            out["rollouts"] += n
            out["of"] += int(info.get("of", n))
        except Exception:  # noqa: BLE001 - a step that cannot be read counts as a step, its bytes only
            continue
    for f in sorted(rollouts_dir.glob("*step-*.jsonl")):
        out["steps"] += 1
        out["bytes"] += f.stat().st_size
        n = 0
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            n += 1
            out["tokens"] += len((rec.get("tokens") or {}).get("ids") or [])
        out["rollouts"] += n
        try:  # the step's rollouts, recorded or not (its NAME.recording.json), else its own lines
            out["of"] += max(n, int(json.loads((f.parent / (f.stem + RECORDING_SUFFIX)).read_text())["of"]))
        except (OSError, ValueError, KeyError, TypeError):
            out["of"] += n
    return out


def _built(_keep: list[int]) -> StepData:
    raise AssertionError("a step built on submit is never built again")


def records_of(data: StepData) -> list[dict[str, Any]]:
    """The v2 records of a step's data (token numbers rounded to 6 decimals, as the JSONL always had them)."""
    cols = data.cols
    out = []
    lo = 0
    for rec, n, bits in zip(data.records, cols.lengths.tolist(), cols.arrays.tolist()):
        hi = lo + n
        rec = dict(rec)
        if bits & ts.HAS_TOKENS:
            ids = cols.ids[lo:hi].tolist()
            tk: dict[str, Any] = {
                "text": cols.text[lo:hi] if cols.text is not None else [cols.vocab[i] for i in ids],
                "ids": ids,
                "role": [ts.ROLES[c] for c in cols.role[lo:hi].tolist()],
                "loss_mask": cols.loss_mask[lo:hi].tolist(),
            }
            for k in ts.FLOAT_ARRAYS:
                if bits & ts.ARRAY_BIT[k]:
                    tk[k] = [None if x != x else round(x, 6) for x in cols.floats[k][lo:hi].tolist()]
            rec["tokens"] = tk
            if bits & ts.ARRAY_BIT["engine_mask"] and cols.engine_mask is not None:
                rec["meta"] = {**rec.get("meta", {}), "engine_loss_mask": cols.engine_mask[lo:hi].tolist()}
            # the key order of the records the trainer always wrote: tokens before meta
            if "meta" in rec:
                rec["meta"] = rec.pop("meta")
        out.append(rec)
        lo = hi
    return out


# -- building a step's columns from (B, L) tensors ---------------------------------------------------------------
def columns_from_window(
    *,
    rows: Sequence[int],
    seq_ids: Sequence[Sequence[int]],
    prompt_lengths: Sequence[int],
    role_codes: Sequence[np.ndarray],
    window: dict[str, tuple[Any, Any] | None],
    loss_mask: Any,
    engine_mask: Any = None,
    align: str = "right",
    nonfinite: dict[int, dict[str, list[int]]] | None = None,
) -> ts.StepColumns:
    """The token columns of rows `rows` (prompt + response each) from per-row token ids (prompt and response),
    prompt lengths and response role codes (`role_codes_of`), and (B, R) tensors over each row's response window:
    `window[name] = (values, scored)` (null where `scored` is 0), `loss_mask`, `engine_mask`. A response lies in the
    last len(role_codes[i]) columns of its window (`align` "right": the builtin trainer's batch) or the first ("left":
    TRL's, veRL's). The prompt's numbers are null, its mask 0. With `nonfinite`, where a scored number is NaN or
    infinite it is filled `{k: {name: [token indices]}}` (k: the place in `rows`): the store's NaN means null, so the
    record says so in `meta.nonfinite`."""
    import torch

    idx = torch.as_tensor(list(rows), dtype=torch.long)
    P = np.asarray([prompt_lengths[i] for i in rows], dtype=np.int64)
    r = np.asarray([len(role_codes[i]) for i in rows], dtype=np.int64)
    lengths = P + r
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(seq_ids[i] for i in rows), dtype=np.uint32, count=total)
    role = np.full(total, ts.ROLE_CODE["prompt"], dtype=np.uint8)
    resp = np.zeros(total, dtype=bool)
    at = 0
    for k, i in enumerate(rows):
        o = at + int(P[k])
        role[o : o + int(r[k])] = role_codes[i]
        resp[o : o + int(r[k])] = True
        at += int(lengths[k])
    R = int(loss_mask.shape[1])
    cols = np.arange(R)[None, :]
    in_resp = cols >= (R - r)[:, None] if align == "right" else cols < r[:, None]  # (K, R), row-major = token order
    rows_np = idx.numpy()

    def take(x: Any, dtype: Any) -> np.ndarray:
        # numpy, not torch: no intra-op thread pool on the writer thread (it would compete with the training's)
        a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        return a[rows_np][in_resp].astype(dtype, copy=False)

    lm = np.zeros(total, dtype=np.uint8)
    lm[resp] = take(loss_mask, np.uint8)
    floats: dict[str, np.ndarray] = {}
    bits = ts.HAS_TOKENS
    for name, pair in window.items():
        if pair is None:
            continue
        x, scored = pair
        out = np.full(total, np.nan, dtype=np.float32)
        values, where = take(x, np.float32), take(scored, bool)
        out[resp] = np.where(where, values, np.nan)
        if nonfinite is not None:
            bad = where & ~np.isfinite(values)
            if bad.any():
                starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
                for pos in np.flatnonzero(resp)[bad].tolist():
                    k = int(np.searchsorted(starts, pos, side="right")) - 1
                    nonfinite.setdefault(k, {}).setdefault(name, []).append(pos - int(starts[k]))
        floats[name] = out
        bits |= ts.ARRAY_BIT[name]
    em = None
    if engine_mask is not None:
        em = np.zeros(total, dtype=np.uint8)
        em[resp] = take(engine_mask, np.uint8)
        bits |= ts.ARRAY_BIT["engine_mask"]
    return ts.StepColumns(
        ids=ids,
        role=role,
        loss_mask=lm,
        floats=floats,
        lengths=lengths,
        arrays=np.full(len(rows), bits, dtype=np.int32),
        engine_mask=em,
    )


def role_codes_of(roles: Sequence[str]) -> np.ndarray:
    """Role names → uint8 codes (token_store.ROLES)."""
    return np.fromiter(map(ts.ROLE_CODE.__getitem__, roles), dtype=np.uint8, count=len(roles))


def expected_window(codes: Sequence[np.ndarray], width: int, loss_masking: bool, align: str = "right") -> Any:
    """(B, width) the loss mask the roles give (DESIGN §6): 1 on generated tokens, or with masking off on every
    response token that is not a template marker (role prompt)."""
    import torch

    out = np.zeros((len(codes), width), dtype=np.float32)
    for i, c in enumerate(codes):
        want = (c == ts.ROLE_CODE["generated"]) if loss_masking else (c != ts.ROLE_CODE["prompt"])
        if len(c):
            if align == "right":
                out[i, width - len(c) :] = want
            else:
                out[i, : len(c)] = want
    return torch.from_numpy(out)


def concat_data(parts: Sequence[StepData]) -> StepData:
    """Several processes' data of one step, in order, as one."""
    parts = [p for p in parts if p.records]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return StepData(
            [],
            ts.StepColumns(
                ids=np.zeros(0, np.uint32),
                role=np.zeros(0, np.uint8),
                loss_mask=np.zeros(0, np.uint8),
                floats={},
                lengths=np.zeros(0, np.int64),
                arrays=np.zeros(0, np.int32),
            ),
        )
    cols = [p.cols for p in parts]
    names = [k for k in ts.FLOAT_ARRAYS if any(k in c.floats for c in cols)]
    floats = {
        k: np.concatenate([c.floats[k] if k in c.floats else np.full(len(c.ids), np.nan, np.float32) for c in cols])
        for k in names
    }
    arrays = np.concatenate([c.arrays for c in cols])
    engine = None
    if any(c.engine_mask is not None for c in cols):
        engine = np.concatenate(
            [c.engine_mask if c.engine_mask is not None else np.zeros(len(c.ids), np.uint8) for c in cols]
        )
    return StepData(
        [r for p in parts for r in p.records],
        ts.StepColumns(
            ids=np.concatenate([c.ids for c in cols]),
            role=np.concatenate([c.role for c in cols]),
            loss_mask=np.concatenate([c.loss_mask for c in cols]),
            floats=floats,
            lengths=np.concatenate([c.lengths for c in cols]),
            arrays=arrays,
            engine_mask=engine,
        ),
    )


def subset(data: StepData, rows: Sequence[int]) -> StepData:
    """Rows `rows` (indices into data.records) of a step's data."""
    c = data.cols
    off = np.zeros(len(c.lengths) + 1, dtype=np.int64)
    np.cumsum(c.lengths, out=off[1:])
    sel = np.concatenate([np.arange(off[i], off[i + 1]) for i in rows]) if len(rows) else np.zeros(0, np.int64)
    return StepData(
        [data.records[i] for i in rows],
        ts.StepColumns(
            ids=c.ids[sel],
            role=c.role[sel],
            loss_mask=c.loss_mask[sel],
            floats={k: v[sel] for k, v in c.floats.items()},
            lengths=c.lengths[list(rows)],
            arrays=c.arrays[list(rows)],
            engine_mask=None if c.engine_mask is None else c.engine_mask[sel],
            text=None if c.text is None else [c.text[j] for j in sel.tolist()],
            vocab=c.vocab,
        ),
    )
