"""`search-agent-studio export verl`: a veRL run of a run config as files, for launching on one's own cluster (a Ray
job, SLURM; docs/engines.md). The same plan the host launches (overrides.prepare), with the paths made relative to
the exported directory so it can be copied or sit on a shared filesystem:

  DIR/launch.sh         runs veRL's main_ppo with our recorder: `SAS_ENV_URL=… ./launch.sh [OVERRIDE…]` (extra
                        Hydra overrides win; RAY_ADDRESS joins a running Ray cluster; PYTHON names veRL's Python)
  DIR/overrides.txt     the Hydra overrides, one per line, `@EXPORT_DIR@` standing for DIR
  DIR/trainer/          our package (agent loops, tool, reward bridge, recorder), on the Ray workers' PYTHONPATH
  DIR/run/verl/         the datasets as veRL parquet, the agent-loop and tool files, the resolved run config
  DIR/run/              the run directory the recorder writes (inspect it, open it in the editor)

The env server's URL is named at launch: the agent loops, the tool and compute_score read $SAS_ENV_URL, which the
launch script passes to every Ray worker.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import ENV_URL_VAR
from .overrides import TRAINER_DIR, hydra_value, prepare

EXPORT_DIR = "@EXPORT_DIR@"  # in overrides.txt and the files under run/verl: the exported directory, set by launch.sh
PACKAGE = "search_agent_trainer"

LAUNCH = """#!/usr/bin/env bash
# A veRL 0.9.1 run exported by Search Agent Studio (search-agent-studio export verl; docs/engines.md).
#   SAS_ENV_URL=http://127.0.0.1:8790 ./launch.sh [HYDRA_OVERRIDE…]
# SAS_ENV_URL: our env server (/retrieve, /reward) as every Ray worker reaches it (one per node on 127.0.0.1: the
# same URL everywhere). PYTHON: veRL's Python (default python3). RAY_ADDRESS: a running Ray cluster to join
# (default: Ray starts on this machine). Arguments: more Hydra overrides, applied last (the last of a key wins).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${SAS_ENV_URL:?set SAS_ENV_URL to the URL of the env server (search-agent-studio serve; docs/engines.md)}"
OVERRIDES=()
while IFS= read -r line || [[ -n $line ]]; do
  [[ -z $line || $line == \\#* ]] || OVERRIDES+=("${line//@EXPORT_DIR@/$HERE}")
done < "$HERE/overrides.txt"
export PYTHONPATH="$HERE/trainer${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m search_agent_trainer.engines.verl.main "${OVERRIDES[@]}" \\
  "+ray_kwargs.ray_init.runtime_env.env_vars.%(env_var)s=$SAS_ENV_URL" "$@"
"""


def _copy_package(dest: Path) -> None:
    """Our package, without caches: what the driver and every Ray worker import."""
    src = TRAINER_DIR / PACKAGE
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def export(cfg: Mapping[str, Any], out: str | os.PathLike[str]) -> dict[str, Any]:
    """Writes the export of `cfg` to `out`; returns {"dir", "files", "overrides", "notes"} (overrides with
    @EXPORT_DIR@). Refused configs raise before anything is written (overrides.VerlConfigError)."""
    out = Path(out).resolve()
    here = str(out)
    plan = prepare(cfg, out / "run", None, trainer_dir=f"{EXPORT_DIR}/trainer")
    portable = lambda s: s.replace(here, EXPORT_DIR)  # noqa: E731
    plan.overrides = [portable(o) for o in plan.overrides]
    plan.files = {path: portable(text) for path, text in plan.files.items()}
    plan.write_files()
    _copy_package(out / "trainer" / PACKAGE)
    header = "# Hydra overrides of veRL 0.9.1's ppo_trainer config (search-agent-studio export verl); @EXPORT_DIR@ is this directory\n"
    (out / "overrides.txt").write_text(header + "\n".join(plan.overrides) + "\n", encoding="utf-8")
    launch = out / "launch.sh"
    launch.write_text(LAUNCH % {"env_var": ENV_URL_VAR}, encoding="utf-8")
    launch.chmod(launch.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and PACKAGE not in p.parts)
    return {"dir": here, "files": files, "overrides": plan.overrides, "notes": plan.notes}


def expand(overrides: list[str], directory: str | os.PathLike[str], env_url: str) -> list[str]:
    """What launch.sh passes to main.py (for tests and for checking an export against veRL's config)."""
    return [o.replace(EXPORT_DIR, str(directory)) for o in overrides] + [
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{ENV_URL_VAR}={hydra_value(env_url)}"
    ]
