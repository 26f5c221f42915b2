"""Several training processes: the trainer the host started runs `accelerate launch` with its own command line and
stays as the launch's supervisor (DESIGN §2: every process has a lifetime owner).

    host ─► python -m search_agent_trainer (this supervisor: the host's watchdog, the run's final status)
              └─► accelerate launch (torch.distributed.run) ─► N × python -m search_agent_trainer (rank 0 writes)

accelerate launch starts its processes in sessions of their own; a signal to the host's process group (Stop, Ctrl-C,
a window closing) reaches the supervisor and the launcher, which passes it on to every process (they finish the
step, checkpoint and stop together) and kills them after TORCH_ELASTIC_SHUTDOWN_TIMEOUT (50 s unless set, under the
host's 60 s grace). Each process watches the launcher, so none outlives it. When the host goes without a signal,
the supervisor sends the launcher SIGHUP (`stop_reason: host-gone`). When the processes end without having written
a final status (killed, or a process other than rank 0 failed), the supervisor writes it.

A process other than rank 0 that fails writes its error to `logs/rank-<N>.error.json` (it writes nothing else of the
run). Rank 0, waiting for it in a collective, then fails with what the collective says (gloo: "Connection closed by
peer"; NCCL: a timeout) or is ended by the launcher, and its error is not the cause: the supervisor makes the first
error of the launch, by time, the run's (`rank N: …`, with its traceback), and names rank 0's beside it.

Without an accelerate config: `--multi_gpu --num_processes N` on one machine (gloo on CPU, NCCL on GPUs), on a free
port. With `trl.accelerate_config`: that file (multi-GPU, DeepSpeed, FSDP, several machines); the same command runs
on each machine of a multi-node launch, with SAS_MACHINE_RANK naming the machine (docs/engines.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...run_writer import _now, dumps, write_json_atomic
from ...watchdog import watch_parent
from .options import processes


def launched() -> bool:
    """Whether this process is one of a launch's (torch.distributed.run sets LOCAL_RANK)."""
    return "LOCAL_RANK" in os.environ


def needs_launch(cfg: Any) -> bool:
    return not launched() and (processes(cfg) > 1 or bool((cfg.trl or {}).get("accelerate_config")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_command(cfg: Any, trainer_args: list[str], bf16: bool) -> list[str]:
    """`accelerate launch … -m search_agent_trainer <trainer_args>` for a run config."""
    t = cfg.trl or {}
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if t.get("accelerate_config"):
        cmd += ["--config_file", str(t["accelerate_config"])]
        if t.get("num_processes"):
            cmd += ["--num_processes", str(t["num_processes"])]
        if os.environ.get("SAS_MACHINE_RANK"):  # this machine's rank in a multi-node launch (the file has one)
            cmd += ["--machine_rank", os.environ["SAS_MACHINE_RANK"]]
    else:
        cmd += [
            "--multi_gpu",
            "--num_processes",
            str(processes(cfg)),
            "--num_machines",
            "1",
            "--main_process_port",
            str(_free_port()),
        ]
        cmd += ["--mixed_precision", "bf16" if bf16 else "no", "--dynamo_backend", "no"]
    return cmd + ["-m", "search_agent_trainer", *trainer_args]


def supervise(cfg: Any, run_dir: str, trainer_args: list[str], bf16: bool) -> int:
    """Runs the launch to its end; returns the trainer's exit code for the run's final status (0 finished or stopped,
    1 failed), whatever the launcher's (it exits 1 after passing a signal on)."""
    cmd = launch_command(cfg, trainer_args, bf16)
    env = dict(os.environ)
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "50")
    print(f"launch: {' '.join(cmd)}", file=sys.stderr, flush=True)
    asked: list[tuple[str, str]] = []  # (stop_reason, when)

    def on_signal(signum: int, _frame: Any) -> None:
        # The host signals our process group: the launcher has the signal too and passes it on. Only remember it.
        asked.append(("host-gone" if signum == signal.SIGHUP else "signal", _now()))

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    before = _run_json(Path(run_dir))
    began = _now()
    proc = subprocess.Popen(cmd, env=env)

    def on_host_gone(_pid: int) -> None:
        asked.append(("host-gone", _now()))
        try:
            proc.send_signal(signal.SIGHUP)
        except ProcessLookupError:
            pass

    watch_parent(on_host_gone)
    try:
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
                continue
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if os.environ.get("SAS_MACHINE_RANK", "0") != "0":
        return code  # another machine of a multi-node launch: machine 0's rank 0 owns run.json and its final status
    run = _run_json(Path(run_dir))
    if run is None or (before is not None and run.get("pid") == before.get("pid")):
        return code or 1  # no training process wrote the run (the launch failed early: its message is on stderr)
    return _settle(Path(run_dir), run, code, asked, rank_errors(Path(run_dir), since=began))


def rank_error_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"rank-{rank}.error.json"


def write_rank_error(run_dir: Path, rank: int, message: str, tb: str) -> None:
    """A process other than rank 0 failed: its error, for the supervisor (below)."""
    path = rank_error_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"rank": rank, "time": _now(), "message": message, "traceback": tb})


def rank_errors(run_dir: Path, since: str) -> list[dict[str, Any]]:
    """The errors processes other than rank 0 wrote during this launch (at or after `since`), the first first; a file
    that cannot be read is left out (its process's traceback is in the trainer's log anyway)."""
    out = []
    for f in (run_dir / "logs").glob("rank-*.error.json"):
        try:
            e = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(e, dict) and isinstance(e.get("time"), str) and e["time"] >= since and e.get("message"):
            out.append(e)
    return sorted(out, key=lambda e: e["time"])


def _run_json(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _settle(
    run_dir: Path,
    run: dict[str, Any],
    code: int,
    asked: list[tuple[str, str]],
    errors: list[dict[str, Any]] = (),
) -> int:
    """The exit code for the run's final status, written first when the processes ended without one (run.json still
    `running`: killed, or a process other than rank 0 failed). `asked`: the stops asked of the launch (reason, time),
    the first first; `errors`: what processes other than rank 0 failed with, the first first. The first error is the
    run's when rank 0 wrote none or failed after it; a stop asked after a process had failed does not hide the
    failure (the run failed, whatever ended it), one asked before it makes the run stopped (a process that fails while
    the others stop is the stop's doing)."""
    status = run.get("status")
    first = errors[0] if errors else None
    if status == "failed" and first is not None and first["time"] <= _failed_at(run_dir, run):
        # rank 0 failed waiting for a process that had failed first (or was ended by the launcher): the cause is that
        # process's error
        run["error"] = _error_of(first, (run.get("error") or {}).get("message"))
        _write(run_dir, run, [{"event": "error", "time": _now(), **run["error"]}])
        return 1
    if status != "running":
        return 0 if status in ("finished", "stopped") else 1
    events = []
    if asked and (first is None or asked[0][1] < first["time"]):
        run["status"], run["stop_reason"] = "stopped", asked[0][0]
    else:
        if first is not None:
            run["status"], run["error"] = "failed", _error_of(first, None)
        else:
            message = f"a training process exited with code {code} before the run ended (its traceback is in the trainer's log)"
            run["status"], run["error"] = "failed", {"message": message}
        events.append({"event": "error", "time": _now(), **run["error"]})
    events.append({"event": "finished", "time": _now(), "status": run["status"], "step": run.get("step", 0)})
    _write(run_dir, run, events)
    return 0 if run["status"] == "stopped" else 1


def _error_of(first: dict[str, Any], rank0: str | None) -> dict[str, Any]:
    """run.json's `error` for the first error of a launch, a process other than rank 0's (`rank0`: the error rank 0
    failed with after it, if any)."""
    line = rank0.splitlines()[0] if rank0 else ""
    line = line if len(line) <= 200 else f"{line[:199]}…"
    then = f" (the first error of the launch; rank 0 failed after it: {line})" if line else ""
    out = {"message": f"rank {first['rank']}: {first['message']}{then}", "rank": first["rank"]}
    if first.get("traceback"):
        out["traceback"] = first["traceback"]
    return out


def _failed_at(run_dir: Path, run: dict[str, Any]) -> str:
    """When rank 0 failed: its last `error` event's time, else run.json's last update."""
    at = run.get("updated") or ""
    try:
        lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return at
    for line in reversed(lines):
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(e, dict) and e.get("event") == "error" and isinstance(e.get("time"), str):
            return e["time"]
    return at


def _write(run_dir: Path, run: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """run.json as `run` says, and `events` appended to events.jsonl and printed (the host reads stdout)."""
    run["updated"] = _now()
    write_json_atomic(run_dir / "run.json", run)
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        for e in events:
            f.write(dumps(e) + "\n")
            print(dumps(e), flush=True)
