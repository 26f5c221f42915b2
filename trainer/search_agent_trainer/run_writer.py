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
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import sys
import time
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


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(_clean(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunWriter:
    def __init__(self, run_dir: str | os.PathLike[str], config: dict[str, Any], versions: dict[str, str | None], total_steps: int, stdout: TextIO | None = None, python: str | None = None):
        self.dir = Path(run_dir)
        self.stdout = stdout if stdout is not None else sys.stdout
        for sub in ("rollouts", "checkpoints", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        prior = self.read_run_json()
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
        self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        self._log = open(self.dir / "logs" / "trainer.log", "a", encoding="utf-8")

    def read_run_json(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / "run.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _write_run(self) -> None:
        self.run["updated"] = _now()
        write_json_atomic(self.dir / "run.json", self.run)

    # -- events ------------------------------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        line = dumps({"event": kind, "time": _now(), **fields})
        self._events.write(line + "\n")
        self._events.flush()
        try:
            self.stdout.write(line + "\n")
            self.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass  # the host went away; the run directory still has everything

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        self._log.write(line + "\n")
        self._log.flush()
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
        with open(self.dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(dumps(row) + "\n")

    def rollouts(self, name: str, records: list[dict[str, Any]]) -> Path:
        path = self.dir / "rollouts" / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(dumps(r) + "\n")
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
        self._write_run()

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
            tmp = mpath.with_suffix(".tmp")
            tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
            os.replace(tmp, mpath)
        for f in (self.dir / "rollouts").glob("*.jsonl"):
            digits = f.stem.rsplit("-", 1)[-1]
            if digits.isdigit() and int(digits) > step:
                f.unlink()
        for d in (self.dir / "checkpoints").glob("step-*"):
            digits = d.name.rsplit("-", 1)[-1]
            if digits.isdigit() and int(digits) > step:
                shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        self._events.close()
        self._log.close()


def rollout_record(traj: Any, *, run_id: str, step: int, split: str, tokens: dict[str, list[Any]] | None) -> dict[str, Any]:
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
