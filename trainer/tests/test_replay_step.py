"""replay_step.py's pieces that need no run (the end-to-end replays of a real tiny run, matching and planted, are
test/unit/replay-step.test.ts through the CLI): a record becomes the trainer's Trajectory from its token arrays, the
batch the trainer builds from it feeds exactly the recorded ids, and a step's recorded loss is comparable only when
its update was one epoch of one mini-batch over every rollout of the step (not on a step recorded in part)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import tiny_config, trainer_env
from search_agent_trainer import token_store as ts
from search_agent_trainer.batch import make_batch
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.replay_step import ReplayError, _window, comparable, step_rollouts, trajectory_of


def record(rid: str, prompt: int, roles: list[str], **arrays) -> dict:
    n = prompt + len(roles)
    return {
        "id": rid,
        "step": 3,
        "prompt": "p",
        "response": "r",
        "tokens": {
            "ids": list(range(5, 5 + n)),
            "text": ["t"] * n,
            "role": ["prompt"] * prompt + roles,
            "loss_mask": [0] * prompt + [1 if r == "generated" else 0 for r in roles],
            **arrays,
        },
    }


def test_a_record_becomes_the_trainers_trajectory_and_batch_from_its_ids():
    a = record(
        "a",
        3,
        ["generated", "retrieved", "generated"],
        rollout_logprob=[None] * 3 + [-1.0, None, -2.0],
        logprob=[None] * 3 + [-1.1, None, -2.1],
    )
    b = record("b", 2, ["generated"], logprob=[None, None, -0.5])
    ta, tb = trajectory_of(a), trajectory_of(b)
    assert ta.prompt_ids == [5, 6, 7] and ta.ids == [8, 9, 10] and ta.roles == ["generated", "retrieved", "generated"]
    assert ta.sample_logprobs == [-1.0, None, -2.0]
    batch = make_batch([ta, tb], 0)
    for i, rec in enumerate((a, b)):
        assert batch.input_ids[i][batch.attention_mask[i].bool()].tolist() == rec["tokens"]["ids"]
    old, have = _window([a, b], "logprob", batch)
    assert have.tolist() == [[True, False, True], [False, False, True]]
    assert old[0].tolist() == pytest.approx([-1.1, 0.0, -2.1]) and old[1, 2].item() == pytest.approx(-0.5)


def test_a_record_without_tokens_cannot_be_replayed():
    with pytest.raises(ReplayError, match="only rollouts recorded with tokens"):
        trajectory_of({"id": "x", "prompt": "p", "response": "r"})


def test_the_recorded_loss_is_comparable_for_one_epoch_of_one_mini_batch():
    cfg = config_from_dict(tiny_config(**{"optim.mini_batch_size": 4}))
    assert comparable(cfg, 4) == {"loss": True, "why": None}
    assert "mini-batches of 4" in comparable(cfg, 8)["why"]
    cfg2 = config_from_dict(tiny_config(**{"optim.ppo_epochs": 2}))
    assert not comparable(cfg2, 2)["loss"]


def test_a_step_recorded_in_part_has_no_comparable_loss_but_a_whole_one_does(tmp_path):
    # the recorder's sampled step: 2 whole groups of 4 written by the project's writer, sas.store saying 4 of 8
    cfg = config_from_dict(tiny_config(**{"rollout.batch_size": 4, "rollout.n": 2, "optim.mini_batch_size": 8}))
    cfg_groups = config_from_dict(
        tiny_config(**{"rollout.batch_size": 4, "rollout.n": 2, "optim.mini_batch_size": 8, "train.record.groups": 2})
    )
    recs = [
        {**record(f"r{g}{k}", 2, ["generated"], logprob=[None, None, -0.5]), "group": f"train:3:{g}", "sample": k}
        for g in (0, 2)
        for k in range(2)
    ]
    ts.records_to_step(
        tmp_path / "rollouts", "step-000003", recs, {"step": 3, "split": "train", "recorded": 4, "of": 8}
    )
    assert step_rollouts(tmp_path, 3, cfg, 4) == 8
    c = comparable(cfg_groups, 4, 8, 3)
    assert (
        not c["loss"]
        and c["why"] == "step 3 recorded 4 of 8 rollouts (train.record.groups 2, and the groups of flagged rollouts)"
    )
    # every k-th step: a step between keeps only its flagged groups
    every = config_from_dict(tiny_config(**{"optim.mini_batch_size": 8, "train.record.every": 2}))
    assert "train.record.every 2: step 3 kept only its flagged groups" in comparable(every, 2, 6, 3)["why"]
    # the step's rollouts in mini-batches: judged by the step's 8, not the 4 recorded
    small = config_from_dict(tiny_config(**{"optim.mini_batch_size": 4}))
    assert "8 rollouts in mini-batches of 4" in comparable(small, 4, 8, 3)["why"]
    # a whole step (the store says 8 of 8; a JSONL step: the trainer's batch_size x n) compares as before
    ts.records_to_step(
        tmp_path / "rollouts", "step-000004", recs * 2, {"step": 4, "split": "train", "recorded": 8, "of": 8}
    )
    assert step_rollouts(tmp_path, 4, cfg, 8) == 8
    assert comparable(cfg_groups, 8, step_rollouts(tmp_path, 4, cfg, 8), 4) == {"loss": True, "why": None}
    assert step_rollouts(tmp_path, 5, cfg, 8) == 8  # no store step: 4 prompts x 2 samples
    assert step_rollouts(tmp_path, 5, cfg, 6) == 8 and not comparable(cfg, 6, 8, 5)["loss"]


def test_the_replay_ends_when_its_host_has_gone_even_while_it_waits_for_records(tmp_path):
    # a host (SAS_PARENT_PID) that starts the replay and is killed without closing the replay's stdin (a CLI killed
    # by Ctrl-C twice, a closed terminal): the replay, still waiting for its records, must not outlive it
    host = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'search_agent_trainer.replay_step', '--run-dir', sys.argv[1],"
        " '--checkpoint', 'step-000001'], env={**os.environ, 'SAS_PARENT_PID': str(os.getpid())})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", host, str(tmp_path)],
        stdin=subprocess.PIPE,  # inherited by the replay: held open here, so only the watchdog can end it
        stdout=subprocess.PIPE,
        env=trainer_env(),
        text=True,
    )
    pid = int(proc.stdout.readline())
    try:
        # the replay has started (torch imported, its watchdog running) once it blocks reading its records: read(0, …)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not reading_stdin(pid):
            time.sleep(0.2)
        assert reading_stdin(pid), "the replay never came to read its records"
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.2)
        assert not alive(pid), "the replay outlived its host"
    finally:
        proc.kill()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        proc.stdin.close()


def reading_stdin(pid: int) -> bool:
    """Blocked in read(0, …) (x86_64: syscall 0; aarch64: 63)."""
    try:
        with open(f"/proc/{pid}/syscall", encoding="utf-8") as f:
            nr, fd = (f.read().split() + ["", ""])[:2]
    except (FileNotFoundError, PermissionError):
        return False
    return nr in ("0", "63") and fd == "0x0"


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie left for a parent that does not reap)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
