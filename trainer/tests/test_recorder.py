"""Recording rollouts (recorder.py): the in-run checks, sampling by whole groups, the background writer and its full
queue, a writer killed mid-step, and a real tiny run recorded in the token store with `train.record`."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import TRAINER, tiny_config, trainer_env
from search_agent_trainer import token_store as ts
from search_agent_trainer.recorder import (
    Recorder,
    RecordSettings,
    StepData,
    StepJob,
    audit_metrics,
    columns_from_window,
    concat_data,
    recorded_on_disk,
    records_of,
    role_codes_of,
    rollout_flags,
    select,
    subset,
)


def test_flags_find_leaks_non_finite_numbers_and_log_prob_gaps() -> None:
    valid = torch.tensor([[1, 1, 1, 1]] * 4).bool()
    expected = torch.tensor([[0, 1, 1, 0]] * 4).float()
    loss = expected.clone()
    loss[0, 0] = 1  # row 0: a retrieved token trained on
    rollout = torch.tensor([[math.nan, -1.0, -2.0, math.nan]] * 4)
    logprob = rollout.clone()
    logprob[2, 1] = -1.0 + math.log(2.5)  # row 2: ratio 2.5, outside [0.5, 2]
    logprob[3, 1] = -1.0 + math.log(1.9)  # row 3: inside the band
    values = torch.zeros(4, 4)
    values[1, 2] = math.inf  # row 1: a non-finite value where scored
    values[3, 0] = math.nan  # row 3: not scored there: not a flag
    scored = expected.bool()
    stats: dict[str, float] = {}
    flags = rollout_flags(
        valid=valid,
        loss_mask=loss,
        expected=expected,
        logprob=logprob,
        rollout_logprob=rollout,
        numbers=[(values, scored)],
        stats=stats,
    )
    assert flags == [["leak"], ["non-finite"], ["logprob-gap"], []]
    # the audit's per-step series over these rows (audit/* metrics): 1 leaked token; 8 compared, 2 with a gap
    m = audit_metrics(stats)
    assert m["audit/leaks"] == 1 and stats["compared"] == 8
    assert m["audit/logprob/ratio_outside"] == pytest.approx(1 / 8) and m[
        "audit/logprob/mean_abs_diff"
    ] == pytest.approx((math.log(2.5) + math.log(1.9)) / 8)
    assert m["audit/logprob/seq_ratio"] == pytest.approx((1 + 1 + 2.5 + 1.9) / 4)


def test_select_keeps_whole_groups_evals_and_flagged_rollouts() -> None:
    keys = [g for g in range(10) for _ in range(4)]  # 10 groups of 4
    flags = [[] for _ in keys]
    flags[4 * 7 + 2] = ["leak"]  # one sample of group 7
    s = RecordSettings(every=2, groups=3)
    kept = select(keys, flags, step=4, s=s, held_out=False)
    groups = {keys[i] for i in kept}
    assert len(groups) == 4 and 7 in groups  # 3 drawn + the flagged one
    for g in groups:  # never part of a group
        assert sum(1 for i in kept if keys[i] == g) == 4
    assert kept == select(keys, flags, step=4, s=s, held_out=False)  # the same draw on every process
    # not a recorded step: the flagged group only
    assert select(keys, flags, step=3, s=s, held_out=False) == [
        28,
        29,
        30,
        31,
    ]
    assert select(keys, [[] for _ in keys], step=3, s=s, held_out=False) == []
    assert select(keys, flags, step=3, s=s, held_out=True) == list(range(40))  # held-out: always all
    assert len(select(keys, flags, step=4, s=RecordSettings(), held_out=False)) == 40


def _step_job(records: list[dict], data: StepData, step: int) -> StepJob:
    """A training step's job of `records` (groups of 4) whose rows carry `step`."""
    return StepJob(
        f"step-{step:06d}",
        step,
        "train",
        4,
        [r["group"] for r in records],
        [[] for _ in records],
        lambda keep: subset(StepData([{**r, "step": step} for r in records], data.cols), keep),
    )


def _data(n_rows: int, width: int = 6) -> tuple[list[dict], StepData]:
    """A step's data from (B, R) right-aligned windows, as the builtin trainer builds it."""
    lengths = [2 + i % 3 for i in range(n_rows)]
    roles = [["generated"] * (n - 1) + ["retrieved"] for n in lengths]
    prompt = [[7, 8, 9] for _ in range(n_rows)]
    ids = [[100 + j for j in range(n)] for n in lengths]
    lm = torch.zeros(n_rows, width)
    lp = torch.zeros(n_rows, width)
    for i, n in enumerate(lengths):
        lm[i, width - n : width - 1] = 1
        lp[i, width - n :] = torch.arange(n) * -0.25
    codes = {i: role_codes_of(roles[i]) for i in range(n_rows)}
    cols = columns_from_window(
        rows=list(range(n_rows)),
        seq_ids=[p + r for p, r in zip(prompt, ids)],
        prompt_lengths=[3] * n_rows,
        role_codes=codes,
        window={"logprob": (lp, lm)},
        loss_mask=lm,
    )
    records = [
        {"v": 2, "id": f"r{i}", "group": f"train:1:{i // 2}", "prompt": "p", "response": "r", "meta": {}}
        for i in range(n_rows)
    ]
    return records, StepData(records, cols)


def test_columns_from_a_window_and_back_to_records() -> None:
    _, data = _data(3)
    recs = records_of(
        StepData(data.records, ts.StepColumns(**{**data.cols.__dict__, "vocab": {i: f"t{i}" for i in range(200)}}))
    )
    t = recs[1]["tokens"]  # prompt 3 + response 3 (2 generated, 1 retrieved)
    assert t["ids"] == [7, 8, 9, 100, 101, 102] and t["role"] == ["prompt"] * 3 + [
        "generated",
        "generated",
        "retrieved",
    ]
    assert t["loss_mask"] == [0, 0, 0, 1, 1, 0]
    assert t["logprob"] == [None, None, None, 0.0, -0.25, None]
    both = concat_data([subset(data, [2]), subset(data, [0])])
    assert [r["id"] for r in both.records] == ["r2", "r0"] and both.cols.lengths.tolist() == [7, 5]


def test_a_non_finite_number_where_scored_is_listed_by_record_and_token() -> None:
    """The store's NaN means null: a NaN or ∞ the trainer computed on a scored token is listed (row, array, token
    index in prompt + response), for the record's meta.nonfinite (the audit's non-finite); one where nothing is scored
    is not."""
    width, lengths = 6, [3, 4]
    lm = torch.zeros(2, width)
    lp = torch.zeros(2, width)
    for i, n in enumerate(lengths):
        lm[i, width - n : width - 1] = 1
    lp[1, width - 4] = math.nan  # row 1's first response token (scored)
    lp[1, width - 1] = math.inf  # row 1's last response token: not scored (loss mask 0)
    lp[0, 0] = math.inf  # row 0's padding
    codes = {i: role_codes_of(["generated"] * (n - 1) + ["retrieved"]) for i, n in enumerate(lengths)}
    bad: dict = {}
    columns_from_window(
        rows=[0, 1],
        seq_ids=[[7, 8] + [100] * n for n in lengths],
        prompt_lengths=[2, 2],
        role_codes=codes,
        window={"logprob": (lp, lm)},
        loss_mask=lm,
        nonfinite=bad,
    )
    assert bad == {1: {"logprob": [2]}}


class SlowRecorder(Recorder):
    """A recorder whose writes wait for `gate` (a slow disk)."""

    def __init__(self, *a, **k):
        self.gate = threading.Event()
        super().__init__(*a, **k)

    def _write(self, job, data):
        self.gate.wait(30)
        return super()._write(job, data)


def test_a_full_queue_keeps_only_flagged_groups_and_says_so(tmp_path: Path) -> None:
    warnings: list[tuple[str, dict]] = []
    rec = SlowRecorder(
        tmp_path,
        RecordSettings(queue=1),
        texts=lambda ids: [f"t{i}" for i in ids],
        warn=lambda msg, **f: warnings.append((msg, f)),
    )
    built: list[int] = []

    def job(step: int, flagged: int | None) -> StepJob:
        records, data = _data(6)
        flags = [["leak"] if flagged is not None and i // 2 == flagged else [] for i in range(6)]

        def build(keep: list[int]) -> StepData:
            built.append(step)
            return subset(StepData([{**r, "step": step} for r in records], data.cols), keep)

        return StepJob(f"step-{step:06d}", step, "train", 6, [r["group"] for r in records], flags, build)

    m1 = rec.submit(job(1, None))  # the writer takes it and waits at the gate
    deadline = time.time() + 10
    while not rec._busy and time.time() < deadline:
        time.sleep(0.01)
    m2 = rec.submit(job(2, flagged=1))  # the writer is 1 step behind: only the flagged group
    m3 = rec.submit(job(3, None))  # nothing flagged: nothing recorded
    assert m1["record/rollouts"] == 6 and "record/dropped_rollouts" not in m1
    assert m2["record/rollouts"] == 2 and m2["record/dropped_rollouts"] == 4 and m2["record/flagged"] == 2
    assert m3["record/rollouts"] == 0 and m3["record/dropped_rollouts"] == 6
    assert [w[1]["step"] for w in warnings] == [2, 3] and "behind" in warnings[0][0]
    assert 2 in built  # built right away on the full-queue path, so the step's tensors can go
    rec.gate.set()
    assert rec.close(timeout=60)
    assert [d.name for d in ts.committed_steps(tmp_path / "rollouts")] == ["step-000001", "step-000002"]
    assert [r["group"] for r in ts.read_step(tmp_path / "rollouts" / "step-000002")] == ["train:1:1", "train:1:1"]
    s = rec.summary()
    assert s["dropped"] == {"steps": 2, "rollouts": 10} and s["recorded"]["rollouts"] == 8 and s["recorded"]["of"] == 18


def test_jsonl_format_writes_the_v2_records(tmp_path: Path) -> None:
    rec = Recorder(
        tmp_path, RecordSettings(format="jsonl"), texts=lambda ids: [f"t{i}" for i in ids], warn=lambda *a, **k: None
    )
    records, data = _data(4)
    rec.submit(
        StepJob(
            "step-000001",
            1,
            "train",
            16,  # the step had 16 rollouts; these 4 were kept (as train.record.groups keeps whole groups)
            [r["group"] for r in records],
            [[] for _ in records],
            lambda keep: subset(data, keep),
        )
    )
    assert rec.close(timeout=60)
    lines = [json.loads(l) for l in (tmp_path / "rollouts" / "step-000001.jsonl").read_text().splitlines()]
    assert [l["id"] for l in lines] == ["r0", "r1", "r2", "r3"] and lines[0]["tokens"]["text"][:3] == ["t7", "t8", "t9"]
    assert not [p for p in (tmp_path / "rollouts").iterdir() if p.name.startswith(".")]
    # beside it, what the store keeps in its metadata: the step is a sample of 4 of 16 (readers label it so)
    recording = json.loads((tmp_path / "rollouts" / "step-000001.recording.json").read_text())
    assert recording == {"step": 1, "split": "train", "recorded": 4, "of": 16}
    assert rec.summary()["recorded"]["of"] == 16


@pytest.mark.parametrize("fmt,at", [("store", "rollouts/.step-000002"), ("jsonl", "rollouts/.step-000002.jsonl")])
def test_a_full_disk_fails_the_next_submit_naming_the_file_and_leaves_nothing_half_written(
    tmp_path: Path, fmt: str, at: str
) -> None:
    """A write that finds the disk full is not a warning (the run could not go on): the training thread's next submit
    (or flush: a checkpoint, the run's end) raises it, once, naming the file; its temporary step is gone; the steps
    before stay whole."""
    from search_agent_trainer import run_writer as rw

    warnings: list[str] = []
    rec = Recorder(
        tmp_path,
        RecordSettings(format=fmt),
        texts=lambda ids: [f"t{i}" for i in ids],
        warn=lambda msg, **f: warnings.append(msg),
    )
    records, data = _data(4)

    def job(step: int) -> StepJob:
        return _step_job(records, data, step)

    try:
        rw.set_disk_fault(at, after_bytes=200)  # (step 1's files do not match `at`)
        rec.submit(job(1))
        rec.submit(job(2))
        deadline = time.time() + 60
        while not rec.errors and time.time() < deadline:  # the writer meets the full disk
            time.sleep(0.01)
        with pytest.raises(OSError) as e:
            rec.submit(job(3))
    finally:
        rw.set_disk_fault(None)
    message = rw.disk_full_message(e.value)
    assert message and message.startswith(f"disk full at {tmp_path / at}"), message
    assert rec.flush(timeout=60) and rec.close(timeout=60)  # raised once: the end of the failed run closes it
    assert rec.summary()["recorded"]["steps"] == 1
    root = tmp_path / "rollouts"
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "the failed step's temporary file was removed"
    assert sorted(p.name for p in root.iterdir()) == (
        ["step-000001"] if fmt == "store" else ["step-000001.jsonl", "step-000001.recording.json"]
    ), "the failed step left no recording either"
    assert not warnings and rec.summary()["errors"] == 1


KILLED_WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from search_agent_trainer import token_store as ts
from tests_writer_records import make
root = sys.argv[1]
step = 1
while True:
    recs = make(step)
    ts.records_to_step(root, f"step-{step:06d}", recs)
    print(step, flush=True)
    step += 1
"""


def test_a_killed_writer_leaves_the_last_complete_step_readable(tmp_path: Path) -> None:
    """kill -9 while steps are being written (big ones, so a write is under way): every committed step reads whole,
    no partial step is visible, and the next writer removes what was left."""
    (tmp_path / "tests_writer_records.py").write_text(
        "def make(step):\n"
        "    n = 3000\n"
        "    return [{'v': 2, 'id': f's{step}:{i}', 'step': step, 'prompt': 'p' * 50, 'response': 'r' * 400, 'tokens': {'text': [f'w{j % 97}' for j in range(n)], 'ids': [j % 97 for j in range(n)], 'role': ['prompt'] * 10 + ['generated'] * (n - 10), 'loss_mask': [0] * 10 + [1] * (n - 10), 'logprob': [None] * 10 + [-0.5] * (n - 10)}} for i in range(40)]\n",
        encoding="utf-8",
    )
    root = tmp_path / "rollouts"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root), str(TRAINER)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**trainer_env(), "PYTHONPATH": f"{TRAINER}{os.pathsep}{tmp_path}"},
    )
    try:
        assert proc.stdout.readline().strip() == "1"  # one step committed
        seen_partial = False
        deadline = time.time() + 120
        while time.time() < deadline:  # kill it while a temporary step directory exists
            if any(p.name.startswith(".step-") for p in root.iterdir()):
                seen_partial = True
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    steps = ts.committed_steps(root)
    assert steps, "the first step was committed"
    for d in steps:  # every visible step is whole
        recs = ts.read_step(d)
        assert len(recs) == 40 and all(len(r["tokens"]["ids"]) == 3000 for r in recs)
    assert seen_partial, "the writer was killed while a step was being written"
    assert [p for p in root.iterdir() if p.name.startswith(".")], "the killed write left its temporary directory"
    Recorder(tmp_path, RecordSettings(), texts=lambda ids: [str(i) for i in ids], warn=lambda *a, **k: None).close()
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "the next writer removed it"
    assert ts.committed_steps(root) == steps


def test_a_tiny_run_records_sampled_groups_in_the_store(tmp_path: Path, varied_env) -> None:
    """The builtin trainer, 3 steps, `train.record` {every: 2, groups: 1}: step 2 keeps one whole group, steps 1 and 3
    only flagged groups (none: nothing), every held-out evaluation whole; metrics cover every rollout; run.json says
    what was recorded."""
    cfg = tiny_config(
        **{"train.steps": 3, "train.eval_every": 2, "train.record": {"every": 2, "groups": 1, "queue": 64}}
    )
    path = tmp_path / "tiny.run.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(path),
            "--run-dir",
            str(tmp_path / "run"),
            "--env-url",
            varied_env.url,
        ],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "run"
    names = [d.name for d in ts.committed_steps(run / "rollouts")]
    assert names == ["val-step-000000", "step-000002", "val-step-000002", "val-step-000003"], names
    assert not list((run / "rollouts").glob("*.jsonl"))
    s2 = ts.read_step(run / "rollouts" / "step-000002")
    assert len(s2) == cfg["rollout"]["n"] and len({r["group"] for r in s2}) == 1  # one whole group
    assert len(ts.read_step(run / "rollouts" / "val-step-000002")) == 4  # every held-out question
    metrics = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    by_step = {m["step"]: m for m in metrics}
    assert (
        by_step[2]["record/rollouts"] == 3 and by_step[1]["record/rollouts"] == 0 and by_step[3]["record/rollouts"] == 0
    )
    assert by_step[1]["response_length/mean"] > 0  # metrics of every rollout, recorded or not
    for s in (1, 2, 3):  # the audit's token series over every training rollout: no leak, ratio 1 up to float noise
        assert (
            by_step[s]["audit/leaks"] == 0
            and by_step[s]["audit/logprob/mean_abs_diff"] < 1e-4
            and by_step[s]["audit/logprob/seq_ratio"] == pytest.approx(1, abs=1e-2)
        )
    record = json.loads((run / "run.json").read_text())["record"]
    assert record["format"] == "store" and record["every"] == 2 and record["groups"] == 1
    assert (
        record["recorded"]["steps"] == 4
        and record["recorded"]["of"] == 3 * 6 + 3 * 4
        and record["dropped"]["rollouts"] == 0
    )
    for r in s2:  # the token arrays as the JSONL had them
        t = r["tokens"]
        assert len(t["ids"]) == len(t["text"]) == len(t["role"]) == len(t["loss_mask"])
        assert [m for m in t["loss_mask"]] == [1 if x == "generated" else 0 for x in t["role"]]
        assert [x is not None for x in t["logprob"]] == [m == 1 for m in t["loss_mask"]]


@pytest.mark.parametrize("fmt", ["store", "jsonl"])
def test_a_resume_counts_the_recorded_steps_left_on_disk_not_only_its_own(tmp_path: Path, fmt: str) -> None:
    """run.json's `record.recorded` is the whole run's: a resumed process's totals start from what the truncated
    rollouts/ holds (they counted only its own steps, so a resume at step 2 of a 3-step run said 1 step recorded)."""
    records, data = _data(4)

    def job(step: int) -> StepJob:
        return _step_job(records, data, step)

    def recorder() -> Recorder:
        return Recorder(
            tmp_path,
            RecordSettings(format=fmt, queue=10),
            texts=lambda ids: [f"t{i}" for i in ids],
            warn=lambda msg, **f: None,
        )

    first = recorder()
    for step in (1, 2, 3):
        first.submit(job(step))
    assert first.close(timeout=60)
    whole = first.summary()["recorded"]
    assert whole["steps"] == 3 and whole["rollouts"] == 12

    if fmt == "jsonl":  # RunWriter.truncate_after removes the JSONL format's later files and their recordings
        from search_agent_trainer.run_writer import RunWriter

        RunWriter.truncate_after(SimpleNamespace(dir=tmp_path), 2)  # type: ignore[arg-type]
        assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == [
            "step-000001.jsonl",
            "step-000001.recording.json",
            "step-000002.jsonl",
            "step-000002.recording.json",
        ]
    resumed = recorder()
    if fmt == "jsonl":  # the JSONL format is the one of a Python without pyarrow: its resume counts without it
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(sys.modules, "pyarrow", None)
            mp.setitem(sys.modules, "pyarrow.parquet", None)
            assert recorded_on_disk(tmp_path / "rollouts")["steps"] == 2
    resumed.truncate_after(2)
    resumed.submit(job(3))
    assert resumed.close(timeout=60)
    again = resumed.summary()["recorded"]
    assert again["steps"] == 3 and again["rollouts"] == 12 and again["of"] == 12
    assert again["tokens"] == whole["tokens"]
