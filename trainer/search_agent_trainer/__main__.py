"""``python -m search_agent_trainer``: the trainer's command line (DESIGN §2).

  python -m search_agent_trainer --config run.json --run-dir runs/<id> --env-url http://127.0.0.1:<port> [--resume]
  python -m search_agent_trainer --version | --check

The config's `engine` picks what trains: builtin (train.py) or trl (engines/trl/: TRL's GRPOTrainer, several
processes through accelerate launch). Events go to stdout as JSON lines (DESIGN §4.5), human logs to stderr and
<run-dir>/logs/trainer.log.
Exit codes: 0 finished or stopped (SIGTERM), 1 the run failed (traceback in events and run.json), 2 bad usage or an
invalid config (the message names the key).
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__, cpu_env


def _error(message: str) -> int:
    print(json.dumps({"event": "error", "message": message}), flush=True)
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    cpu_env.apply()
    parser = argparse.ArgumentParser(
        prog="python -m search_agent_trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--check", action="store_true", help="print this interpreter's training environment as JSON")
    parser.add_argument(
        "--config",
        help="run config (*.run.json); with --resume, defaults to the config in the run directory's run.json",
    )
    parser.add_argument("--run-dir", help="run directory (created if missing)")
    parser.add_argument("--env-url", help="env server URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's last checkpoint")
    args = parser.parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    if args.check:
        from .environment import describe

        print(json.dumps(describe()))
        return 0
    if not args.run_dir or not args.env_url or not (args.config or args.resume):
        return _error("--config, --run-dir and --env-url are required (or --resume with --run-dir and --env-url)")

    from pathlib import Path

    from .config import config_from_run_json, load_config
    from .schema import ConfigError

    try:
        if args.config:
            cfg = load_config(args.config)
        else:
            run_json = Path(args.run_dir) / "run.json"
            try:
                saved = json.loads(run_json.read_text(encoding="utf-8"))["config"]
            except (FileNotFoundError, KeyError, json.JSONDecodeError) as e:
                return _error(f"{run_json}: cannot read the run's config to resume ({e}); pass --config")
            cfg = config_from_run_json(saved, Path(args.run_dir), source=str(run_json))
    except ConfigError as e:
        return _error(str(e))

    engine = cfg.engine or "builtin"
    if engine == "trl":
        from .engines.trl import run

        return run(cfg, args)
    if engine != "builtin":
        return _error(f"engine: {engine!r} is not available in this trainer (docs/engines.md)")
    from .run_writer import disk_full_message
    from .train import Trainer

    try:
        trainer = Trainer(cfg, args.run_dir, args.env_url, resume=args.resume)
    except OSError as e:  # the run directory cannot be written (a full disk: say so first)
        print(json.dumps({"event": "error", "message": disk_full_message(e) or f"{args.run_dir}: {e}"}), flush=True)
        print(f"error: {disk_full_message(e) or e}", file=sys.stderr, flush=True)
        return 1
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main())
