"""The veRL engine's command line (the process our host starts; DESIGN §2, §4.5).

  python -m search_agent_trainer.engines.verl.main prepare --config run.json --run-dir runs/<id> --env-url URL
      writes <run-dir>/verl/ (parquet, agent-loop and tool files, the resolved config) and prints one JSON object:
      {"overrides": […], "notes": […], "command": […]} (command: the argument array that trains)
  python -m search_agent_trainer.engines.verl.main export --config run.json --out DIR
      the same as files for one's own cluster (export.py); prints {"dir", "files", "overrides", "notes", "checked"}
      (checked: composed with veRL's config, when veRL is importable)
  python -m search_agent_trainer.engines.verl.main OVERRIDE…
      veRL's main_ppo (0.9.1) with the overrides, its RayPPOTrainer replaced by recorder.RecordingTrainer

Training: veRL's config is composed (`compose_config`) and checked by veRL's own code (`check_config`: its
validate_config and config dataclasses), then `run_ppo` starts Ray and a TaskRunner actor whose trainer is ours.
Events: the recorder writes them to <run-dir>/events.jsonl (its stdout is a Ray actor's, prefixed by Ray); this
process relays that file to its stdout, the JSON-lines channel, and sends everything else printed here (Ray, veRL)
to stderr. SIGTERM/SIGINT (SIGHUP: host-gone) write <run-dir>/.stop: the recorder finishes the step, checkpoints
and ends the run `stopped`. Exit code: 0 finished or stopped, 1 failed, 2 bad usage or a config veRL refuses.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from . import STOP_FILE


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose_config(overrides: list[str]) -> Any:
    """veRL's `ppo_trainer` config with the overrides, as `main_ppo`'s @hydra.main composes it (Hydra refuses a key
    the config does not have unless it is added with `+`)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def check_config(config: Any) -> None:
    """What veRL does with the config before its workers start: its main's validate_config (the actor, critic and
    batch-size rules, through their config dataclasses), and the dataclasses its agent-loop workers and trainer build
    (rollout, model — which loads the tokenizer and model config from model.path —, checkpoint engine)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = config.actor_rollout_ref.rollout
    for section in (rollout, config.actor_rollout_ref.model, rollout.checkpoint_engine):
        omega_conf_to_dataclass(section)


def _recording_task_runner() -> Any:
    import ray
    from verl.trainer import main_ppo_v0

    from .recorder import RecordingTrainer

    plain = main_ppo_v0.TaskRunner.__ray_metadata__.modified_class  # the class under veRL's @ray.remote (Ray 2.60)

    class RecordingTaskRunner(plain):  # type: ignore[misc, valid-type]
        def run(self, config: Any) -> Any:
            main_ppo_v0.RayPPOTrainer = RecordingTrainer  # the name TaskRunner.run builds its trainer from
            return super().run(config)

    return ray.remote(RecordingTaskRunner)


def relay_events(path: Path, out: TextIO, stop: threading.Event) -> None:
    """Copies the lines appended to events.jsonl (from its current end) to `out` until `stop`, then drains it."""
    while not path.exists() and not stop.is_set():
        time.sleep(0.2)
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        f.seek(0, os.SEEK_END)
        buf = ""
        while True:
            chunk = f.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split("\n")
                for line in lines:
                    out.write(line + "\n")
                out.flush()
            elif stop.is_set():
                return
            else:
                time.sleep(0.2)


# what CUDA's allocator, torch and Ray say of a worker that ran out of device memory
OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory", "OUT_OF_MEMORY")


def failure_message(e: BaseException) -> str:
    """What ended a veRL run, for run.json and the error event; out of device memory (in a worker: Ray passes its
    error on as text), what to change — veRL's workers do not run again in smaller pieces, as engines builtin and trl
    do."""
    message = f"{type(e).__name__}: {e}"
    if not any(s in message for s in OUT_OF_MEMORY):
        return message
    return (
        "veRL ran out of device memory (veRL does not retry with smaller sizes): lower optim.micro_batch_size (veRL's "
        "ppo/log-prob micro-batches per GPU), verl.gpu_memory_utilization (vLLM's share while it rolls out), or set "
        "verl.optimizer_offload / verl.param_offload — `search-agent-studio plan` sizes them for the GPU — and launch "
        f"again on this run directory (it resumes from veRL's last checkpoint). {message}"
    )


def _fail(run_dir: Path, message: str, out: TextIO) -> None:
    """The TaskRunner died before it could say so: run.json `failed` and the events the host waits for."""
    from ...run_writer import _now, dumps, write_json_atomic

    run_json = run_dir / "run.json"
    try:
        run = json.loads(run_json.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        run = None
    if run is not None and run.get("status") != "running":
        return
    if run is not None:
        run.update(status="failed", error={"message": message}, updated=_now())
        write_json_atomic(run_json, run)
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as events:
        for e in (
            {"event": "error", "message": message},
            {"event": "finished", "status": "failed", "step": int((run or {}).get("step", 0))},
        ):
            line = dumps({**e, "time": _now()})
            events.write(line + "\n")
            out.write(line + "\n")
    out.flush()


def train(overrides: list[str], compose: Any = None) -> int:
    """veRL's main_ppo with the recorder. `compose()`: the config, when it is not veRL's own config with `overrides`
    (record/verl.py: a user's own config, with our keys added)."""
    events_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stdout is the events channel: Ray's and veRL's prints go to stderr
    try:
        config = compose() if compose is not None else compose_config(overrides)
        from verl.utils.device import auto_set_device

        auto_set_device(config)
        check_config(config)
    except Exception as e:  # noqa: BLE001 - a refused config is reported, named
        events_out.write(
            json.dumps({"event": "error", "message": f"veRL refused the config: {type(e).__name__}: {e}"}) + "\n"
        )
        return 2
    run_dir = Path(config.sas.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / STOP_FILE).unlink(missing_ok=True)

    def on_signal(signum: int, _frame: Any) -> None:
        (run_dir / STOP_FILE).write_text("host-gone" if signum == signal.SIGHUP else "signal", encoding="utf-8")

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    stop = threading.Event()
    relay = threading.Thread(target=relay_events, args=(run_dir / "events.jsonl", events_out, stop), daemon=True)
    relay.start()
    code = 0
    try:
        from verl.trainer.main_ppo import run_ppo

        run_ppo(config, task_runner_class=_recording_task_runner())
    except BaseException as e:  # noqa: BLE001 - whatever ended the run, the run directory says so
        code = 1
        stop.set()
        relay.join()
        _fail(run_dir, failure_message(e), events_out)
    finally:
        stop.set()
        relay.join()
    try:
        status = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("status")
    except (FileNotFoundError, json.JSONDecodeError):
        status = None
    if status == "running":
        _fail(run_dir, "the veRL run ended without finishing its run directory", events_out)
        status = "failed"
    return 0 if code == 0 and status in ("finished", "stopped") else 1


def prepare_command(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m search_agent_trainer.engines.verl.main prepare")
    p.add_argument("--config", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--env-url", required=True)
    p.add_argument("--python", default=sys.executable, help="the veRL environment's Python, for the command")
    args = p.parse_args(argv)
    from ...config import load_config
    from ...schema import ConfigError
    from .overrides import VerlConfigError, launch_command, prepare

    try:
        cfg = load_config(args.config)
        plan = prepare(cfg, args.run_dir, args.env_url)
    except (ConfigError, VerlConfigError, ValueError) as e:
        print(json.dumps({"event": "error", "message": str(e)}), flush=True)
        return 2
    plan.write_files()
    print(
        json.dumps(
            {"overrides": plan.overrides, "notes": plan.notes, "command": launch_command(args.python, plan.overrides)}
        )
    )
    return 0


def export_command(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m search_agent_trainer.engines.verl.main export")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import importlib.util

    from ...config import load_config
    from ...schema import ConfigError
    from .export import expand, export
    from .overrides import VerlConfigError

    try:
        result = export(load_config(args.config), args.out)
    except (ConfigError, VerlConfigError, ValueError) as e:
        print(json.dumps({"event": "error", "message": str(e)}), flush=True)
        return 2
    result["checked"] = importlib.util.find_spec("verl") is not None
    if result["checked"]:  # in veRL's environment: every key composed with veRL's own config (Hydra names the bad one)
        try:
            compose_config(expand(result["overrides"], result["dir"], "http://127.0.0.1:0"))
        except Exception as e:  # noqa: BLE001 - a refused override is reported, named
            print(
                json.dumps({"event": "error", "message": f"veRL refused the config: {type(e).__name__}: {e}"}),
                flush=True,
            )
            return 2
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "prepare":
        return prepare_command(argv[1:])
    if argv and argv[0] == "export":
        return export_command(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    return train(argv)


if __name__ == "__main__":
    sys.exit(main())
