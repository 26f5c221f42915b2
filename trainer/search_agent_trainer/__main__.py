"""``python -m search_agent_trainer``: the trainer's command line (DESIGN §2).

Training (``--config run.json --run-dir runs/<id> --env-url URL``) lands with the trainer issue; this build
answers ``--version`` and ``--check`` and says so for anything else, with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search_agent_trainer", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--check", action="store_true", help="print this interpreter's training environment as JSON")
    parser.add_argument("--config", help="run config (run.json)")
    parser.add_argument("--run-dir", help="run directory")
    parser.add_argument("--env-url", help="env server URL")
    args = parser.parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    if args.check:
        from .environment import describe

        print(json.dumps(describe()))
        return 0
    print(
        json.dumps({"event": "error", "message": "training is not in this build yet (it lands with the trainer issue)"}),
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
