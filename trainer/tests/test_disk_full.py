"""A full disk during training (issue 40, item 7): the trainer says "disk full at <path>" first, marks run.json failed
with that error, leaves only whole lines in events.jsonl, metrics.jsonl and the rollout files, removes its
`step-NNNNNN.tmp`, and the run resumes once there is room again.

The full disk is simulated through the run config's `test.disk_full` (run_writer.set_disk_fault: every write of the
run directory goes through run_writer.write_bytes, which fills the last block and then fails with ENOSPC, as a file
system does), written into `/dev/full` where a path allows, and — opt-in, as root (SAS_TEST_REAL_DISK_FULL=1) — run on
a real 1 MB tmpfs that is grown afterwards for the resume.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_config, trainer_env
from search_agent_trainer import run_writer as rw
from search_agent_trainer import token_store as ts


def run_trainer(run_dir: Path, cfg: dict, env_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cfg_path = run_dir.parent / f"{run_dir.name}.run.json"
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(cfg_path),
            "--run-dir",
            str(run_dir),
            "--env-url",
            env_url,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=600,
    )


def whole_lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, each of which must parse, and the file must end with a newline."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends in part of a line: {data[-80:]!r}"
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def check_run_dir(run: Path) -> None:
    for f in [run / "events.jsonl", run / "metrics.jsonl", *sorted((run / "rollouts").glob("*.jsonl"))]:
        if f.exists():
            whole_lines(f)
    for d in ts.committed_steps(run / "rollouts"):
        ts.read_step(d)  # every committed store step reads whole
    assert not list((run / "checkpoints").glob("*.tmp")), "a temporary checkpoint was left behind"
    assert not list(run.glob(".*.tmp")), "a temporary run.json was left behind"
    assert not list((run / "rollouts").glob(".*.tmp-*")), "a temporary rollout step was left behind"


def recorded_steps(run: Path) -> list[str]:
    """The training steps whose rollouts were recorded, in either format."""
    store = [d.name for d in ts.committed_steps(run / "rollouts")]
    jsonl = [f.stem for f in (run / "rollouts").glob("step-*.jsonl")]
    return sorted(n for n in store + jsonl if n.startswith("step-"))


# -- the writer's pieces --------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_fault():
    yield
    rw.set_disk_fault(None)


def test_an_append_that_fills_the_disk_is_cut_back_to_the_last_whole_line(tmp_path):
    path = tmp_path / "events.jsonl"
    rw.set_disk_fault("events.jsonl", after_bytes=100)
    with open(path, "ab", buffering=0) as f:
        rw.append_whole(f, '{"a":1}\n' * 10, path)  # 80 bytes
        with pytest.raises(OSError) as e:
            rw.append_whole(f, '{"b":"' + "x" * 200 + '"}\n', path)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert path.read_bytes() == b'{"a":1}\n' * 10
    assert rw.disk_full_message(e.value).startswith(f"disk full at {path}: no space left on the device (ENOSPC)")


def test_a_runs_error_names_the_first_write_that_found_the_disk_full(tmp_path):
    """The rollout writer's thread and the training thread write at the same time: the run's error names the write
    that filled the disk, not the other thread's next one (test_a_full_disk_fails_…[rollouts] raced on this)."""
    (tmp_path / "rollouts").mkdir()
    first, later = tmp_path / "rollouts" / ".step-000002.jsonl.tmp-1", tmp_path / "metrics.jsonl"
    rw.set_disk_fault("rollouts/", after_bytes=100)
    with open(first, "wb", buffering=0) as f, pytest.raises(OSError):
        rw.write_bytes(f, b"x" * 200, first)
    with open(later, "ab", buffering=0) as f, pytest.raises(OSError) as e2:
        rw.append_whole(f, '{"step": 2}\n' * 1000, later)  # needs a block the full disk does not have
    assert rw.disk_full_message(e2.value).startswith(f"disk full at {later}:")
    assert rw.run_disk_full_message(e2.value).startswith(f"disk full at {first}:")
    assert rw.run_disk_full_message(ValueError("not a full disk")) is None
    rw.set_disk_fault(None)
    assert rw.run_disk_full_message(e2.value).startswith(f"disk full at {later}:")  # forgotten with the fault


def test_dev_full_is_a_full_disk_named_in_the_error():
    with open("/dev/full", "ab", buffering=0) as f, pytest.raises(OSError) as e:
        rw.append_whole(f, "x\n", "/dev/full")
    assert e.value.errno == errno.ENOSPC
    assert rw.disk_full_message(e.value).startswith("disk full at /dev/full:")


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"status": "running"}\n')
    rw.set_disk_fault("run.json", after_bytes=5)
    with pytest.raises(OSError):
        rw.write_json_atomic(path, {"status": "failed", "error": {"message": "x" * 5000}})
    assert json.loads(path.read_text()) == {"status": "running"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    # A rewrite within the old file's block still fits: the last resort that records the failure.
    rw.overwrite_in_place(path, b'{"status": "failed"}\n')
    assert json.loads(path.read_text()) == {"status": "failed"}


def test_a_cut_last_line_is_cut_off_when_a_writer_opens_the_file_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step":1}\n{"step":2}\n{"ste')
    assert rw.trim_partial_line(path) == 5
    assert path.read_bytes() == b'{"step":1}\n{"step":2}\n'
    assert rw.trim_partial_line(path) == 0
    path.write_bytes(b"no newline at all")
    rw.trim_partial_line(path)
    assert path.read_bytes() == b""


def test_a_checkpoint_that_fills_the_disk_removes_its_temporary_directory(tmp_path):
    import torch

    from search_agent_trainer.checkpoint import latest_checkpoint, save_checkpoint

    class Tok:
        kind = "hf"

    policy = torch.nn.Linear(64, 64)
    policy.backbone = object()
    opt = torch.optim.AdamW(policy.parameters())
    (tmp_path / "checkpoints").mkdir()
    save_checkpoint(tmp_path, 1, policy, Tok(), opt, {})
    rw.set_disk_fault("checkpoints/step-000002", after_bytes=3000)
    with pytest.raises(OSError) as e:
        save_checkpoint(tmp_path, 2, policy, Tok(), opt, {})
    assert e.value.filename.endswith("checkpoints/step-000002.tmp/trainable.pt")
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000001"]
    assert latest_checkpoint(tmp_path).name == "step-000001"


# -- the trainer, end to end ----------------------------------------------------------------------------------------

CFG = {"train.steps": 3, "train.eval_every": 0, "train.checkpoint_every": 1, "data.eval_size": 2}


@pytest.mark.parametrize(
    "at,after,record",
    [
        ("checkpoints/step-000002", 20_000, "store"),
        ("rollouts/.step-000002.jsonl", 3_000, "jsonl"),  # the step's temporary file, renamed into place when whole
        (
            "rollouts/.step-000002",
            3_000,
            "store",
        ),  # the token store step's temporary directory (pyarrow writes through run_writer)
        ("events.jsonl", 2_500, "store"),
    ],
    ids=["checkpoint", "rollouts", "rollouts-store", "events"],
)
def test_a_full_disk_fails_the_run_clearly_leaves_whole_lines_and_resumes(tmp_path, demo_env, at, after, record):
    run = tmp_path / "run"
    record = {"train.record": {"format": record, "queue": 64}}
    full = run_trainer(
        run, tiny_config(**CFG, **record, test={"disk_full": {"at": at, "after_bytes": after}}), demo_env.url
    )
    assert full.returncode == 1, full.stderr[-2000:]
    errors = [
        json.loads(line)
        for line in full.stdout.splitlines()
        if line.startswith("{") and json.loads(line)["event"] == "error"
    ]
    assert len(errors) == 1 and errors[0]["message"].startswith("disk full at "), errors
    assert at in errors[0]["message"].split(":")[0], errors[0]["message"]
    assert "no space left on the device (ENOSPC)" in errors[0]["message"]
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "failed" and state["error"]["message"] == errors[0]["message"]
    check_run_dir(run)

    # Room again: the run resumes from its last whole checkpoint and finishes; nothing cut stays in the middle.
    resumed = run_trainer(run, tiny_config(**CFG, **record), demo_env.url, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    check_run_dir(run)
    assert [m["step"] for m in whole_lines(run / "metrics.jsonl")] == [0, 1, 2, 3]
    events = whole_lines(run / "events.jsonl")
    assert [e["event"] for e in events].count("started") == 2
    # the failed step's rollouts recorded on resume
    assert recorded_steps(run) == [
        "step-000001",
        "step-000002",
        "step-000003",
    ]


@pytest.mark.skipif(
    os.environ.get("SAS_TEST_REAL_DISK_FULL") != "1",
    reason="opt-in (SAS_TEST_REAL_DISK_FULL=1, as root): mounts a 1 MB tmpfs",
)
def test_on_a_real_full_file_system(tmp_path, demo_env):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        run = mnt / "run"
        full = run_trainer(run, tiny_config(**{**CFG, "train.steps": 20}), demo_env.url)
        assert full.returncode == 1, full.stderr[-2000:]
        errors = [
            json.loads(line)
            for line in full.stdout.splitlines()
            if line.startswith("{") and json.loads(line)["event"] == "error"
        ]
        assert errors and errors[0]["message"].startswith(f"disk full at {mnt}"), errors
        assert json.loads((run / "run.json").read_text())["status"] == "failed"
        check_run_dir(run)
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
        resumed = run_trainer(run, tiny_config(**{**CFG, "train.steps": 20}), demo_env.url, "--resume")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        check_run_dir(run)
        assert [m["step"] for m in whole_lines(run / "metrics.jsonl")] == list(range(21))
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_fault_is_opt_in_a_runs_stored_config_has_none_unless_asked():
    """run.json keeps the completed config, which a resume validates again: an empty test.disk_full would be invalid."""
    from search_agent_trainer.config import config_from_dict, stored_config

    stored = stored_config(config_from_dict(tiny_config(test={"step_delay_s": 1})))
    assert stored["test"] == {"step_delay_s": 1}
