"""Recording a user's own veRL job into our run directory: swap the entry point, keep every argument.

    python -m verl.trainer.main_ppo            <their Hydra args…>      # before
    python -m search_agent_trainer.record.verl <their Hydra args…>      # after

Their config is composed as veRL's main_ppo composes it (veRL's `ppo_trainer`, or their `--config-path` /
`--config-name`, with their overrides), then our recorder is put in (the veRL engine's, engines/verl/recorder.py:
`RecordingTrainer`, a `RayPPOTrainer` writing the run directory from veRL's own batch each step) and the job runs as
veRL would run it (engines/verl/main.py `train`: checked by veRL's own validation, Ray started or joined). What is
added to their config, and why:
- `sas.run_dir`: where the run directory goes — `+sas.run_dir=DIR` (or `SAS_RUN_DIR`) if they say, else beside
  their checkpoints: `<trainer.default_local_dir>-sas`;
- `trainer.rollout_data_dir`: veRL calls the hook the recorder records in only when it is set; if they set it, veRL's
  own text dump is written there as before (`sas.keep_rollout_data_dir`), else it points into the run directory and
  the recorder's records replace the text dump;
- `trainer.use_v1=false`: the recorder extends veRL's RayPPOTrainer (0.9.1's V1 trainer passes batches through
  TransferQueue and has no such hook); a job that asks for `trainer.use_v1=true` itself is refused, named;
- the Ray workers' `PYTHONPATH` gains this package (the recorder runs in veRL's TaskRunner actor).
Whatever their agent loop, the records carry veRL's ids, `response_mask` (what it trained with), `rollout_log_probs`,
old and reference log-probs, advantages and values; roles restate the mask for a loop of their own (`meta.roles`
says so: open the run with the model's tokenizer — `audit --tokenizer` — to read roles from the chat template).

  --sas-dry-run   print the config's additions and checks as JSON and exit (nothing started)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

TRAINER_DIR = Path(__file__).resolve().parents[2]


def split_args(argv: list[str]) -> tuple[str | None, str | None, list[str], list[str]]:
    """(config dir, config name, overrides, notes) from main_ppo's command line."""
    path = name = None
    overrides: list[str] = []
    notes: list[str] = []
    it = iter(argv)
    for a in it:
        for flag, short in (("--config-path", "-cp"), ("--config-name", "-cn")):
            if a in (flag, short) or a.startswith(f"{flag}="):
                v = a.split("=", 1)[1] if "=" in a else next(it, None)
                if flag == "--config-path":
                    path = v
                else:
                    name = v
                break
        else:
            if a.lstrip("+").startswith("hydra."):
                notes.append(f"{a}: Hydra's own settings do not apply (the config is composed, not run by @hydra.main)")
            elif a.startswith("-"):
                notes.append(f"{a}: not a Hydra override; ignored")
            else:
                overrides.append(a)
    return path, name, overrides, notes


def compose_user_config(argv: list[str]) -> tuple[Any, dict[str, Any]]:
    """Their config with our additions; the additions (and notes) as a report. Raises ValueError naming what is refused."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    from ..engines.verl.main import verl_config_dir

    path, name, overrides, notes = split_args(argv)
    config_dir = verl_config_dir()
    if path:
        p = Path(path)
        config_dir = str(p if p.is_absolute() or p.exists() else Path(verl_config_dir()).parent / p)
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
        config = compose(config_name=name or "ppo_trainer", overrides=overrides)
    added: dict[str, Any] = {}
    asked = {o.lstrip("+").split("=", 1)[0]: o.split("=", 1)[1] if "=" in o else None for o in overrides}
    with open_dict(config):
        if config.trainer.get("use_v1", False):
            if "trainer.use_v1" in asked:
                raise ValueError(
                    "trainer.use_v1=true: the recorder records veRL's RayPPOTrainer (trainer.use_v1=false); 0.9.1's V1 trainer passes batches through TransferQueue and has no per-step hook to record in"
                )
            config.trainer.use_v1 = False
            added["trainer.use_v1"] = False
            notes.append(
                "trainer.use_v1=false: veRL 0.9.1's default V1 trainer has no hook the recorder can record in; the job runs veRL's RayPPOTrainer"
            )
        sas = config.get("sas") or {}
        run_dir = (
            sas.get("run_dir")
            or os.environ.get("SAS_RUN_DIR")
            or f"{str(config.trainer.default_local_dir).rstrip('/')}-sas"
        )
        run_dir = str(Path(run_dir).resolve())
        keep = bool(config.trainer.get("rollout_data_dir"))
        if not keep:
            config.trainer.rollout_data_dir = str(Path(run_dir) / "rollouts")
            added["trainer.rollout_data_dir"] = config.trainer.rollout_data_dir
        model = str(config.actor_rollout_ref.model.path)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        our_config = Path(run_dir) / "sas-config.json"
        our_config.write_text(
            json.dumps(
                {
                    "engine": "verl",
                    "recorded_by": "search_agent_trainer.record.verl",
                    "model": {"path": model},
                    "command": ["python", "-m", "search_agent_trainer.record.verl", *argv],
                },
                indent=2,
            ),
            encoding="utf-8",
        )
        config.sas = OmegaConf.create(
            {
                **OmegaConf.to_container(OmegaConf.create(dict(sas))),
                "run_dir": run_dir,
                "config": str(our_config),
                "keep_rollout_data_dir": keep,
                "driver_pid": os.getpid(),
            }
        )
        added["sas"] = OmegaConf.to_container(config.sas)
        env = (
            config.setdefault("ray_kwargs", {})
            .setdefault("ray_init", {})
            .setdefault("runtime_env", {})
            .setdefault("env_vars", {})
        )
        paths = [p for p in str(env.get("PYTHONPATH") or "").split(":") if p]
        if str(TRAINER_DIR) not in paths:
            env["PYTHONPATH"] = ":".join([str(TRAINER_DIR), *paths])
            added["ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH"] = env["PYTHONPATH"]
    return config, {"run_dir": run_dir, "added": added, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    dry = "--sas-dry-run" in argv
    argv = [a for a in argv if a != "--sas-dry-run"]
    try:
        config, report = compose_user_config(argv)
        if dry:
            from ..engines.verl.main import check_config

            check_config(config)
    except Exception as e:  # noqa: BLE001 - a refused config is reported, named
        print(json.dumps({"event": "error", "message": f"{type(e).__name__}: {e}"}), flush=True)
        return 2
    for n in report["notes"]:
        print(f"search_agent_trainer.record.verl: {n}", file=sys.stderr)
    print(f"search_agent_trainer.record.verl: recording into {report['run_dir']}", file=sys.stderr)
    if dry:
        print(json.dumps(report, default=str))
        return 0
    from ..engines.verl.main import train

    return train([], compose=lambda: config)


if __name__ == "__main__":
    sys.exit(main())
