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

Without an accelerate config: `--multi_gpu --num_processes N` on one machine (gloo on CPU, NCCL on GPUs), on a free
port. With `trl.accelerate_config`: that file (multi-GPU, DeepSpeed, FSDP, several machines); the same command runs
on each machine of a multi-node launch (docs/engines.md)."""

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
    else:
        cmd += ["--multi_gpu", "--num_processes", str(processes(cfg)), "--num_machines", "1", "--main_process_port", str(_free_port())]
        cmd += ["--mixed_precision", "bf16" if bf16 else "no", "--dynamo_backend", "no"]
    return cmd + ["-m", "search_agent_trainer", *trainer_args]


def supervise(cfg: Any, run_dir: str, trainer_args: list[str], bf16: bool) -> int:
    """Runs the launch to its end; returns its exit code."""
    cmd = launch_command(cfg, trainer_args, bf16)
    env = dict(os.environ)
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "50")
    print(f"launch: {' '.join(cmd)}", file=sys.stderr, flush=True)
    asked: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        # The host signals our process group: the launcher has the signal too and passes it on. Only remember it.
        asked.append("host-gone" if signum == signal.SIGHUP else "signal")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    proc = subprocess.Popen(cmd, env=env)

    def on_host_gone(_pid: int) -> None:
        asked.append("host-gone")
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
    _settle(Path(run_dir), code, asked)
    return code


def _settle(run_dir: Path, code: int, asked: list[str]) -> None:
    """A final status when the processes ended without writing one (run.json still `running`)."""
    path = run_dir / "run.json"
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return
    if run.get("status") != "running":
        return
    events = []
    if asked:
        run["status"], run["stop_reason"] = "stopped", asked[0]
    else:
        message = f"a training process exited with code {code} before the run ended (its traceback is in the trainer's log)"
        run["status"], run["error"] = "failed", {"message": message}
        events.append({"event": "error", "time": _now(), "message": message})
    events.append({"event": "finished", "time": _now(), "status": run["status"], "step": run.get("step", 0)})
    run["updated"] = _now()
    write_json_atomic(path, run)
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        for e in events:
            f.write(dumps(e) + "\n")
            print(dumps(e), flush=True)
