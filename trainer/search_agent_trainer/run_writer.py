"""The run directory (DESIGN §4.2) and the trainer's events (§4.5).

- run.json: the config (config.stored_config: defaults filled in, paths absolute but builtin:NAME kept, so a resume
  resolves it in its own install), versions, the trainer's Python (which a resume tries first), status
  (running|finished|failed|stopped), written atomically (temporary file + rename), so a reader never sees half of it.
- events.jsonl and stdout: one JSON object per line per event (started, progress, metrics, eval, checkpoint,
  warning, error, finished). Human logs go to stderr and logs/trainer.log.
- metrics.jsonl: one object per step, veRL's names where veRL has one.
- rollouts/step-NNNNNN.jsonl (training) and rollouts/val-step-NNNNNN.jsonl (held-out evaluation): rollout records
  (§4.3) with their token arrays.
Every append is one whole line written and flushed at once, so a reader following a live run sees whole lines (or a
partial last line it can wait on), and a crash leaves everything written so far readable.

A full disk (ENOSPC, EDQUOT) never leaves half a line: a failed append cuts its file back to where the line began,
a partial last line left by a killed process is cut when a writer opens the file again (so a resume never appends
after it), a temporary file that failed is removed, and the error names the file (`disk_full_message`: "disk full at
<path>: …", what the trainer reports first). `set_disk_fault` simulates a full disk for tests (the run config's
`test.disk_full`), with the accounting of a file system that allocates whole blocks.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

RUN_FORMAT_VERSION = 1  # run.json
# Rollout records: version 2 added tokens.rollout_logprob (the log-prob at sampling time) beside tokens.logprob (the
# trainer's old log-prob). Readers accept 1 and 2 (src/core/run/format.ts).
ROLLOUT_RECORD_VERSION = 2


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clean(v: Any) -> Any:
    """JSON-safe: NaN and infinities become null (JSON has neither)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


# -- writing, and a full disk ---------------------------------------------------------------------------------------
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_BLOCK = 4096


class _DiskFault:
    """A simulated full disk (tests): writes to a path containing `at` count, and once more than `after_bytes` of them
    were written the disk is full — every write that needs a new block fails with ENOSPC after filling the last one,
    until what the error path removes gives blocks back."""

    def __init__(self, at: str, after_bytes: int):
        self.at, self.after, self.seen = at, after_bytes, 0
        self.free: int | None = None  # bytes left on the "disk" (None: not full yet)

    def allow(self, path: str, size: int, pos: int, n: int) -> int:
        """How many of `n` bytes written at `pos` into a file of `size` bytes fit."""
        if self.free is None:
            if self.at not in path:
                return n
            if self.seen + n <= self.after:
                self.seen += n
                return n
            self.free = 0
            n_ok = self.after - self.seen
            self.seen = self.after
            return max(0, n_ok)
        blocks = lambda b: -(-b // _BLOCK)  # noqa: E731
        need = (blocks(max(size, pos + n)) - blocks(size)) * _BLOCK
        if need <= self.free:
            self.free -= need
            return n
        fits = (blocks(size) + self.free // _BLOCK) * _BLOCK - pos
        self.free -= self.free // _BLOCK * _BLOCK
        return max(0, min(n, fits))

    def freed(self, nbytes: int) -> None:
        if self.free is not None:
            self.free += -(-nbytes // _BLOCK) * _BLOCK


_fault: _DiskFault | None = None


def set_disk_fault(at: str | None, after_bytes: int = 0) -> None:
    """Simulates a full disk (see _DiskFault); None lifts it (and forgets the first full disk seen)."""
    global _fault, _first_full
    _fault = _DiskFault(at, after_bytes) if at is not None else None
    _first_full = None


# The first write of this process that found the disk full. The rollout writer's thread and the training thread
# write at the same time: once one fills the disk, the other's next write fails too, and a run's error names the
# first (`run_disk_full_message`), whichever thread raised what stopped the run.
_first_full: OSError | None = None
_first_lock = threading.Lock()


def _full(e: OSError) -> OSError:
    global _first_full
    if e.errno in DISK_FULL:
        with _first_lock:
            if _first_full is None:
                _first_full = e
    return e


def _named(e: OSError, path: str | os.PathLike[str]) -> OSError:
    """`e`, naming `path` when it names no file (a failed write(2) does not)."""
    if e.filename is None:
        named = OSError(e.errno, e.strerror or str(e), str(path))
        named.__cause__ = e
        return named
    return e


def write_bytes(f: Any, data: bytes | bytearray | memoryview, path: str | os.PathLike[str]) -> None:
    """All of `data` to the binary file `f` at its position (a short write is continued); an OSError names `path`."""
    view = memoryview(data).cast("B")
    off = 0
    while off < len(view):
        chunk = view[off:]
        if _fault is not None:
            size = os.fstat(f.fileno()).st_size
            fits = _fault.allow(str(path), size, f.tell(), len(chunk))
            if fits < len(chunk):
                if fits:
                    off += f.write(chunk[:fits]) or 0
                raise _full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)))
        try:
            n = f.write(chunk)
        except OSError as e:
            raise _full(_named(e, path)) from e
        off += n if n is not None else len(chunk)


def append_whole(f: Any, text: str, path: str | os.PathLike[str]) -> None:
    """Appends `text` (whole lines) to `f`, a binary unbuffered file opened for appending: if the write fails the file
    is cut back to where it was, so it never ends in part of a line."""
    start = f.seek(0, os.SEEK_END)
    try:
        write_bytes(f, text.encode("utf-8"), path)
    except OSError:
        cut_back(f, start)
        raise


def cut_back(f: Any, size: int) -> None:
    """Truncates `f` to `size` bytes (what a failed write added), giving the space back."""
    try:
        added = os.fstat(f.fileno()).st_size - size
        f.truncate(size)
        if _fault is not None and added > 0:
            _fault.freed(added)
    except OSError:
        pass


def remove_freeing(path: Path) -> None:
    """Removes a file or directory tree (a failed temporary one), giving its space back."""
    try:
        if path.is_dir():
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path, ignore_errors=True)
        else:
            size = path.stat().st_size
            path.unlink()
    except OSError:
        return
    if _fault is not None:
        _fault.freed(size)


def trim_partial_line(path: Path) -> int:
    """Cuts a file that does not end with a newline back to its last whole line (what a killed writer left: a reader
    tolerates a cut last line, but an append after it would bury it mid-file). Returns the bytes cut."""
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return 0
            pos = size
            while pos > 0:
                step = min(1 << 16, pos)
                f.seek(pos - step)
                block = f.read(step)
                nl = block.rfind(b"\n")
                if nl >= 0:
                    pos = pos - step + nl + 1
                    break
                pos -= step
            f.truncate(pos)
            return size - pos
    except FileNotFoundError:
        return 0


def write_file_atomic(path: Path, data: bytes) -> None:
    """`path` replaced by `data` at once (a temporary file beside it, renamed); a failure leaves `path` as it was and
    no temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb", buffering=0) as f:
            write_bytes(f, data, tmp)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        remove_freeing(tmp)
        raise _named(e, path) from e


def overwrite_in_place(path: Path, data: bytes) -> None:
    """`path` rewritten where it is: a last resort on a full disk, where a new file has no room but the old one's
    blocks do (a reader may see it half written; used only to record a failure)."""
    with open(path, "r+b", buffering=0) as f:
        write_bytes(f, data, path)
        f.truncate(len(data))


def write_json_atomic(path: Path, obj: Any) -> None:
    write_file_atomic(
        path, (json.dumps(_clean(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n").encode("utf-8")
    )


def failure_message(e: BaseException) -> str:
    """What a run that failed with `e` says it failed with (every process's, every engine's): a full disk named by the
    first write that found it full, else the exception's type and message."""
    return run_disk_full_message(e) or f"{type(e).__name__}: {e}"


def run_disk_full_message(e: BaseException) -> str | None:
    """A run that failed with `e`: None if not for a full disk, else the message naming the first write of this
    process that found the disk full (`e`'s own file when none went through write_bytes)."""
    return disk_full_message(_first_full or e) if disk_full_message(e) else None


def disk_full_message(e: BaseException) -> str | None:
    """The message "disk full at <path>: …" when `e` is (or was caused by) a full disk or quota; None otherwise."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            what = "disk quota exceeded" if e.errno == errno.EDQUOT else "no space left on the device"
            where = e.filename or "the run directory"
            return f"disk full at {where}: {what} ({errno.errorcode.get(e.errno, e.errno)}). Free space on that file system, then resume the run (--resume): its last checkpoint is whole"
        # libraries that wrap it (safetensors)
        if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            return f"disk full: {e}. Free space, then resume the run (--resume): its last checkpoint is whole"
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
        seen += 1
    return None


class RunWriter:
    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        config: dict[str, Any],
        versions: dict[str, str | None],
        total_steps: int,
        stdout: TextIO | None = None,
        python: str | None = None,
        resume: bool | None = None,
    ):
        """`resume`: whether this process continues the run in `run_dir` (its run.json's `created` and `step` carry
        over) or starts a new one there (False: an old run.json's are not inherited: a new run in a directory some
        other run left must not start at that run's step). None (the engines that resume on their own, veRL's
        recorder): carried over when there is one."""
        self.dir = Path(run_dir)
        self.stdout = stdout if stdout is not None else sys.stdout
        for sub in ("rollouts", "checkpoints", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        prior = self.read_run_json() if resume is not False else None
        self.run = {
            "v": RUN_FORMAT_VERSION,
            "id": self.dir.name,
            "status": "running",
            "created": prior.get("created", _now()) if prior else _now(),
            "updated": _now(),
            "engine": config.get("engine") or "builtin",
            "config": config,
            "versions": {k: v for k, v in versions.items() if v is not None},
            "step": prior.get("step", 0) if prior else 0,
            "total_steps": total_steps,
            "pid": os.getpid(),
        }
        if python:
            # The interpreter the trainer runs in: a resume tries it first (the same torch and transformers).
            self.run["python"] = python
        self._write_run()
        # A line a killed or full-disk run left cut is cut off, so appends start on a line of their own.
        for name in ("events.jsonl", "metrics.jsonl", "logs/trainer.log"):
            trim_partial_line(self.dir / name)
        self._events = open(self.dir / "events.jsonl", "ab", buffering=0)
        self._log = open(self.dir / "logs" / "trainer.log", "ab", buffering=0)

    def read_run_json(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / "run.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _write_run(self) -> None:
        self.run["updated"] = _now()
        write_json_atomic(self.dir / "run.json", self.run)

    # -- events ------------------------------------------------------------------------------------------------
    def event(self, kind: str, best_effort: bool = False, **fields: Any) -> None:
        """Appends an event to events.jsonl and stdout. The host reads stdout, so it gets the event even when the
        file cannot take it (a full disk: the error is raised after, or swallowed with `best_effort`)."""
        line = dumps({"event": kind, "time": _now(), **fields})
        failed: OSError | None = None
        try:
            append_whole(self._events, line + "\n", self.dir / "events.jsonl")
        except OSError as e:
            failed = e
        try:
            self.stdout.write(line + "\n")
            self.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass  # the host went away; the run directory still has everything
        if failed is not None and not best_effort:
            raise failed

    def log(self, message: str) -> None:
        """A line of the human log (logs/trainer.log and stderr); a log that cannot be written is not an error."""
        line = f"{time.strftime('%H:%M:%S')} {message}"
        try:
            append_whole(self._log, line + "\n", self.dir / "logs" / "trainer.log")
        except OSError:
            pass
        try:
            print(line, file=sys.stderr, flush=True)
        except (BrokenPipeError, ValueError):
            pass

    def warning(self, message: str, **fields: Any) -> None:
        self.log(f"warning: {message}")
        self.event("warning", message=message, **fields)

    def progress(self, step: int, total: int, phase: str, **fields: Any) -> None:
        self.event("progress", step=step, total=total, phase=phase, **fields)

    # -- data --------------------------------------------------------------------------------------------------
    def metrics(self, step: int, values: dict[str, float]) -> None:
        row = {"step": step, "time": time.time(), **values}
        path = self.dir / "metrics.jsonl"
        with open(path, "ab", buffering=0) as f:
            append_whole(f, dumps(row) + "\n", path)

    def rollouts(self, name: str, records: list[dict[str, Any]]) -> Path:
        """The records as rollouts/NAME.jsonl, appended a few MB of whole lines at a time (a failure leaves whole
        lines only)."""
        path = self.dir / "rollouts" / f"{name}.jsonl"
        with open(path, "wb", buffering=0) as f:
            pending: list[str] = []
            size = 0
            for r in records:
                line = dumps(r) + "\n"
                pending.append(line)
                size += len(line)
                if size >= 1 << 22:
                    append_whole(f, "".join(pending), path)
                    pending, size = [], 0
            if pending:
                append_whole(f, "".join(pending), path)
        return path

    def annotate(self, **fields: Any) -> None:
        """Adds `fields` to run.json now (the run's numerics, …)."""
        self.run.update(fields)
        self._write_run()

    def set_step(self, step: int) -> None:
        self.run["step"] = step
        self._write_run()

    def finish(self, status: str, error: dict[str, str] | None = None, stop_reason: str | None = None) -> None:
        """``stop_reason`` (status ``stopped``): ``signal`` (asked to stop) or ``host-gone`` (the window or terminal
        that started the run went away: a reload, a crash), which a new window offers to resume."""
        self.run["status"] = status
        if error:
            self.run["error"] = error
        else:
            self.run.pop("error", None)
        if stop_reason:
            self.run["stop_reason"] = stop_reason
        else:
            self.run.pop("stop_reason", None)
        try:
            self._write_run()
        except OSError as e:
            if e.errno not in DISK_FULL:
                raise
            # No room for a new run.json: the old one's blocks take the final status, unindented — a quarter shorter
            # than the indented file it replaces, so it fits those blocks with the error message added (indented, a
            # failure record a few bytes over the old file's last block was cut there: test_disk_full's rollouts case).
            overwrite_in_place(self.dir / "run.json", (dumps(self.run) + "\n").encode("utf-8"))

    def fail(self, e: BaseException, tb: str, close_recorder: Callable[[], None], invalid: bool = False) -> None:
        """A run that failed with `e` (its traceback `tb`), every engine's way: a full disk is said first, naming the
        first file that found it full (its traceback would end in ENOSPC, which is all it says); the `error` event
        reaches stdout even when the run directory cannot take it (the host reads stdout); the recorder closed, what
        it wrote staying readable if its last steps hit the same full disk; run.json `failed` (on a full disk a
        short one: its old blocks may be all the room there is); a last `finished` event. `invalid`: an invalid
        config found before anything was trained (the message names the key): the message alone, no traceback."""
        full = run_disk_full_message(e)
        message = str(e) if invalid else failure_message(e)
        self.log(f"error: {full or message}" if full or invalid else tb)
        self.event("error", best_effort=True, message=message, **({} if invalid else {"traceback": tb}))
        try:
            close_recorder()
        except OSError as e2:
            self.log(f"could not finish writing the rollouts: {disk_full_message(e2) or e2}")
        try:
            self.finish("failed", {"message": message} if full or invalid else {"message": message, "traceback": tb})
        except OSError as e2:
            self.log(f"could not record the failure in run.json: {disk_full_message(e2) or e2}")
        self.event("finished", best_effort=True, status="failed", step=int(self.run.get("step", 0)))

    # -- resume ------------------------------------------------------------------------------------------------
    def truncate_after(self, step: int) -> None:
        """Forget what was written after `step` (the checkpoint a resume starts from): later metrics lines and
        rollout files go, so the resumed run writes them again."""
        mpath = self.dir / "metrics.jsonl"
        if mpath.exists():
            kept = []
            for line in mpath.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line).get("step", 0) <= step:
                        kept.append(line)
                except json.JSONDecodeError:
                    continue  # a partial last line from the crash
            write_file_atomic(mpath, "".join(k + "\n" for k in kept).encode("utf-8"))
        for f in [*(self.dir / "rollouts").glob("*.jsonl"), *(self.dir / "rollouts").glob("*.recording.json")]:
            # step-000012.jsonl, val-step-000012.jsonl and their step-000012.recording.json
            digits = f.name.split(".", 1)[0].rsplit("-", 1)[-1]
            if digits.isdigit() and int(digits) > step:
                f.unlink()
        for d in (self.dir / "checkpoints").glob("step-*"):
            digits = d.name.rsplit("-", 1)[-1]
            if digits.isdigit() and int(digits) > step:
                shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        self._events.close()
        self._log.close()


def rollout_record(
    traj: Any, *, run_id: str, step: int, split: str, tokens: dict[str, list[Any]] | None
) -> dict[str, Any]:
    """A rollout record (DESIGN §4.3) for one trajectory. The GRPO group id names the split as well as the step: a
    held-out evaluation at step k numbers its questions from 0 too, and they are no members of step k's groups."""
    rec: dict[str, Any] = {
        "v": ROLLOUT_RECORD_VERSION,
        "id": f"{run_id}:{split}:{step}:{traj.group}:{traj.sample}",
        "step": step,
        "group": f"{split}:{step}:{traj.group}",
        "sample": traj.sample,
        "split": split,
        "question": traj.example.question,
        "golden": list(traj.example.golden),
        "data_source": traj.example.data_source,
        "prompt": traj.prompt,
        "response": traj.response,
        "finish": traj.finish,
        "turns": traj.turns,
        "searches": traj.searches,
        "dialect": getattr(traj, "dialect", "searchr1"),
    }
    if getattr(traj, "strict_actions", False):
        rec["strict_actions"] = True
    spans = getattr(traj, "spans", None)
    if spans:
        rec["spans"] = spans
    if traj.reward is not None:
        rec["reward"] = traj.reward
    rec["reward_parts"] = dict(traj.reward_parts)
    meta: dict[str, Any] = {"example_id": traj.example.id, "metrics": dict(traj.metrics)}
    if getattr(traj.example, "hops", None) is not None:
        meta["hops"] = traj.example.hops
    if getattr(traj.example, "kind", None) is not None:
        meta["kind"] = traj.example.kind
    if getattr(traj.example, "bridge", None):
        meta["bridge"] = list(traj.example.bridge)
    if traj.reward_error:
        meta["reward_error"] = traj.reward_error
    if getattr(traj, "retrieval", None):
        meta["retrieval"] = traj.retrieval
    if tokens is not None:
        rec["tokens"] = tokens
    rec["meta"] = meta
    return rec
