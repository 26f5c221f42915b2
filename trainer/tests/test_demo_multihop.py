"""The two-hop demo, shortened (issue 20): `examples/demo-multihop.run.json` itself (the two-hop world, a warm start
that searches twice on three trajectories in four, strict actions, GRPO skipping half the groups with no signal,
masking on, seed 1), stopped with SIGTERM once its step-200 evaluation is written — the whole first stage (three
quarters of each batch two-hop) of its 400 RL steps, with the recipe's own learning-rate schedule (a warm-up and cosine per
stage, so the first stage is the same whatever the second's length), in fp32 where the recipe computes in bf16 on a
CPU with native bf16 (stop 41: under the pinned AVX2 code path bf16 is converted to fp32 and back, 5.6x slower
than fp32 there, and no user's run follows that path; docs/testing.md). It must learn the second hop's *search* and
begin to read it:

- held-out two-hop questions where a search after the first named the entity the first search found
  (`val/bridge_searched_by_hops/2`, the dataset's `meta.bridge`; stop 42): up by at least BRIDGE_SEARCHED_MIN_GAIN
  over the warm start;
- held-out two-hop questions whose answer came back in a passage (`val/answer_retrieved_by_hops/2`): up by at least
  TWO_HOP_RETRIEVED_MIN_GAIN over the warm start;
- at least TWO_HOP_MIN_SEARCHES searches per held-out two-hop question (the second search kept);
- held-out one-hop exact match up by at least ONE_HOP_MIN_GAIN;
- held-out two-hop exact match up by at least TWO_HOP_EM_MIN_GAIN (3 of its 70 questions: small, stated).
- with `/retrieve` returning nothing, the step-200 policy's one-hop and two-hop exact match at most NO_RETRIEVAL_MAX
  (the demo's last check: the answers are invented; stop 38).

Stop 37 (the recipe's warm start searches twice three times in four, and it skips half the flat groups): in the
first 100 steps the second search comes and goes in every trajectory measured (1.07, 1.83, 1.44, 0.87 searches per
two-hop question at step 100 on this test's trajectory and seeds 2-4), so the test stops at the end of the first
stage, where it is back in all of them. Step 0 -> 200 (answer retrieved / one-hop EM / two-hop EM / searches per
two-hop question at step 200), 2-core Xeon with AVX-512 (torch 2.15): this test's own trajectory (pinned to AVX2,
two threads) 0.057 -> 0.486 / 0.000 -> 0.539 / 0.000 -> 0.143 / 1.93, in 10m07s alone; seeds 1-4 with one torch
thread each 0.057 -> 0.586 / 0.000 -> 0.573 / 0.000 -> 0.200 / 1.97, 0.086 -> 0.371 / 0.000 -> 0.337 / 0.114 / 1.86,
0.057 -> 0.543 / 0.022 -> 0.382 / 0.171 / 1.99, 0.100 -> 0.629 / 0.000 -> 0.719 / 0.329 / 1.84. The thresholds sit
at about half of the smallest gains (+0.285 answer retrieved, +0.337 one-hop, +0.114 two-hop EM). Stop 39, an AMD EPYC
(AVX-512; the same pinned settings give another trajectory there): 0.043 -> 0.657 / 0.000 -> 0.393 / 0.000 -> 0.200 /
1.81, in 8m40s alone; it passes. Stop 40 pinned the numerics to one code path on every x86 vendor (MKL's COMPATIBLE
branch, oneDNN at AVX2; conftest.PINNED_NUMERICS): on the same EPYC 0.057 -> 0.557 / 0.011 -> 0.539 / 0.000 -> 0.129 /
1.86, 0.000 / 0.000 with retrieval off, in 14m35s alone (MKL's portable branch is slower). Stop 42 (the bridge
entity, asserted since): the same trajectory, bridge entity searched 0.000 -> 0.471 at step 200;
stop 44, a person's surname alone naming them too (the data's `meta.bridge`), 0.000 -> 0.586 on the same trajectory.

What the thresholds rest on, by vendor (step 0 -> 200: two-hop answer retrieved / one-hop EM / two-hop EM /
searches per two-hop question; the smallest value on either vendor in brackets):

| machine | numerics | trajectories | smallest at step 200 |
| --- | --- | --- | --- |
| 2-core Intel Xeon, AVX-512 (stop 37) | old pin, two threads; unpinned, one thread | seed 1; seeds 1-4 | +0.285 / +0.337 / +0.114 / 1.84 |
| 2-core AMD EPYC, AVX512-BF16 (stops 39-44) | old pin; stop 40's PINNED_NUMERICS | seed 1 twice | +0.500 / +0.393 / +0.129 / 1.81; bridge entity +0.471 (+0.586 since stop 44) |
| 2-core Intel Xeon, AMX-BF16 (issue 48) | stop 40's PINNED_NUMERICS (MKL COMPATIBLE) | seed 1 | passed in the reporter's test command (its one failure was test_curriculum's); digits not reported |
| 2-core AMD EPYC, AVX512-BF16 (stop 50) | PINNED_NUMERICS since stop 50 (each vendor's fast MKL path) | seeds 1-3 | +0.300 / +0.472 / +0.086 / 1.91; bridge entity +0.357 |
| 2-core Intel Xeon, family 6 model 207, AVX512-BF16/FP16 (stop 55) | PINNED_NUMERICS (Intel's AVX2 branch; fingerprint 874e66778f) | seed 1 | +0.543 / +0.236 / +0.129 / 1.96; bridge entity +0.614 |

So every threshold below sits at about half of the smallest gain measured on either vendor or trajectory
(SMALLEST_MEASURED; `test_each_threshold_holds_with_a_margin_on_either_vendor` keeps it so), not at this
trajectory's digits. Since stop 50 each vendor runs its own trajectory (conftest.PINNED_NUMERICS: MKL's fast branch,
1.7x faster than the COMPATIBLE one every vendor runs: this test 526 s alone on the EPYC, seed 1, against 875 s); an
Intel CPU's was first measured at stop 55 (seed 1, 704 s in CI's learning phase: step 0 -> 200 bridge entity searched
0.000 -> 0.614, answer retrieved 0.057 -> 0.600, one-hop EM 0.000 -> 0.236, two-hop EM 0.000 -> 0.129, 1.96 searches,
0.000 with retrieval off). It passed, and set the smallest one-hop gain (+0.236 against the Xeon of stop 37's +0.337):
ONE_HOP_MIN_GAIN 0.15 -> 0.12 by the half-of-the-smallest rule. Stop
50's three EPYC seeds (step 0 -> 200, bridge entity searched / answer retrieved / one-hop EM / two-hop EM / searches
per two-hop question): seed 1 0.000 -> 0.500 / 0.043 -> 0.500 / 0.011 -> 0.539 / 0.000 -> 0.157 / 1.91; seed 2
0.000 -> 0.357 / 0.057 -> 0.357 / 0.000 -> 0.472 / 0.000 -> 0.086 / 1.94; seed 3 0.000 -> 0.743 / 0.057 -> 0.671 /
0.011 -> 0.584 / 0.000 -> 0.300 / 1.99; 0.000 with retrieval off in all three. Seed 2 lowered two thresholds' bases:
two-hop EM to +0.086 (6 of 70 questions; the threshold 0.05 -> 0.04, 3 questions) and the bridge entity to +0.357.

The issue-48 goals of the whole demo (one-hop >= 0.65, two-hop >= 0.25 with >= 1.8 searches, retrieval off <= 0.03) are
the full 400 steps' (docs/demo.md); this test asserts the first stage's share of them — the second search kept, the
bridge entity searched, both kinds of question learning — and the last goal itself, retrieval off.

Before stop 37 the test stopped at step 100 with a one-hop threshold of 0.05 (the recipe then warmed up on two
searches every time and learned one-hop later); its history is in docs/demo.md, "The test of the two-hop recipe".
It runs with the rest of the suite, in CI too; `npm run test:demo-multihop` runs it alone. Its output names the CPU.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import (
    LEARNING_SEED,
    PINNED_NUMERICS,
    ROOT,
    EnvServer,
    evaluate_without_retrieval,
    pin_report,
    trainer_env,
)

STOP_AT = 200
TWO_HOP_RETRIEVED_MIN_GAIN = 0.15
BRIDGE_SEARCHED_MIN_GAIN = 0.15
TWO_HOP_MIN_SEARCHES = 1.5
ONE_HOP_MIN_GAIN = 0.12
TWO_HOP_EM_MIN_GAIN = 0.04
NO_RETRIEVAL_MAX = 0.03  # the demo's goal itself (0.000 on every trajectory measured)

# The smallest step-200 value measured on either vendor (docstring's table): gains over step 0, and the searches per
# two-hop question. A threshold is at most MARGIN of it (searches: at least 0.3 below it).
SMALLEST_MEASURED = {
    "val/answer_retrieved_by_hops/2": 0.285,  # Xeon, seed 2
    "val/em_by_hops/1": 0.236,  # Intel Xeon (model 207), stop 55, seed 1 (the Xeon of stop 37, seed 2: 0.337)
    "val/em_by_hops/2": 0.086,  # EPYC, stop 50, seed 2 (Xeon, stop 37: 0.114)
    "val/bridge_searched_by_hops/2": 0.357,  # EPYC, stop 50, seed 2 (this trajectory: 0.471 at stop 42, 0.586 at 44)
    "val/searches_by_hops/2": 1.81,  # EPYC, stop 39
}
MARGIN = 0.55
THRESHOLDS = {
    "val/answer_retrieved_by_hops/2": TWO_HOP_RETRIEVED_MIN_GAIN,
    "val/em_by_hops/1": ONE_HOP_MIN_GAIN,
    "val/em_by_hops/2": TWO_HOP_EM_MIN_GAIN,
    "val/bridge_searched_by_hops/2": BRIDGE_SEARCHED_MIN_GAIN,
}


def test_each_threshold_holds_with_a_margin_on_either_vendor():
    """Not a learning run (milliseconds): a threshold moved towards one machine's digits fails here first."""
    for k, t in THRESHOLDS.items():
        assert 0 < t <= MARGIN * SMALLEST_MEASURED[k], (k, t, SMALLEST_MEASURED[k])
    assert TWO_HOP_MIN_SEARCHES <= SMALLEST_MEASURED["val/searches_by_hops/2"] - 0.3
    assert TWO_HOP_MIN_SEARCHES > 1.0  # the second search kept, not one search a question


def evaluations(run_dir: Path) -> list[dict]:
    f = run_dir / "metrics.jsonl"
    if not f.exists():
        return []
    out = []
    for line in f.read_text(encoding="utf-8").splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if "val/em" in m:
            out.append(m)
    return out


def test_the_shortened_two_hop_demo_learns_the_second_search(tmp_path):
    env = EnvServer("--corpus", str(ROOT / "examples" / "demo-multihop" / "corpus.jsonl"), "--reward", "builtin:em")
    try:
        cfg = json.loads((ROOT / "examples" / "demo-multihop.run.json").read_text(encoding="utf-8"))
        cfg["seed"] = LEARNING_SEED
        cfg["model"]["dtype"] = "fp32"  # the recipe computes in bf16, which no pin makes one code path (docstring)
        config = tmp_path / "demo-multihop.run.json"
        config.write_text(json.dumps(cfg), encoding="utf-8")
        run_dir = tmp_path / "run"
        log = (tmp_path / "trainer.log").open("w", encoding="utf-8")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search_agent_trainer",
                "--config",
                str(config),
                "--run-dir",
                str(run_dir),
                "--env-url",
                env.url,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**trainer_env(), **PINNED_NUMERICS},
        )
        deadline = time.monotonic() + 3600
        try:
            while not any(m["step"] >= STOP_AT for m in evaluations(run_dir)):
                assert proc.poll() is None, (
                    f"the trainer exited early ({proc.returncode}): {(tmp_path / 'trainer.log').read_text()[-3000:]}"
                )
                assert time.monotonic() < deadline, f"no step-{STOP_AT} evaluation within an hour"
                time.sleep(2)
            proc.send_signal(signal.SIGTERM)  # the recipe's own stop: finish the step, checkpoint, status stopped
            assert proc.wait(timeout=300) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    finally:
        env.close()

    evals = {m["step"]: m for m in evaluations(run_dir)}
    before, after = evals[0], evals[STOP_AT]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    gains = {k: after[k] - before[k] for k in THRESHOLDS}
    pin = pin_report(PINNED_NUMERICS)
    print(pin)
    print(
        f"step 0 -> {STOP_AT}: two-hop bridge entity searched {before['val/bridge_searched_by_hops/2']:.3f} -> {after['val/bridge_searched_by_hops/2']:.3f}, "
        f"two-hop answer retrieved {before['val/answer_retrieved_by_hops/2']:.3f} -> {after['val/answer_retrieved_by_hops/2']:.3f}, "
        f"one-hop EM {before['val/em_by_hops/1']:.3f} -> {after['val/em_by_hops/1']:.3f}, two-hop EM {before['val/em_by_hops/2']:.3f} -> "
        f"{after['val/em_by_hops/2']:.3f}, searches per two-hop question {after['val/searches_by_hops/2']:.2f}"
    )
    assert gains["val/bridge_searched_by_hops/2"] >= BRIDGE_SEARCHED_MIN_GAIN, (pin, before, after)
    assert gains["val/answer_retrieved_by_hops/2"] >= TWO_HOP_RETRIEVED_MIN_GAIN, (pin, before, after)
    assert after["val/searches_by_hops/2"] >= TWO_HOP_MIN_SEARCHES, (pin, after)
    assert gains["val/em_by_hops/1"] >= ONE_HOP_MIN_GAIN, (pin, before, after)
    assert gains["val/em_by_hops/2"] >= TWO_HOP_EM_MIN_GAIN, (pin, before, after)

    # The same policy with /retrieve returning nothing (the demo's last check): the answers are invented, so it can
    # know none of them, one-hop or two-hop. Evaluation only: the checkpoint, no stages, no warm start.
    final = run_dir / "checkpoints" / f"step-{STOP_AT:06d}"
    assert final.is_dir()
    m0 = evaluate_without_retrieval(cfg, final, tmp_path / "no-retrieval")
    print(f"with retrieval disabled: one-hop EM {m0['val/em_by_hops/1']:.3f}, two-hop EM {m0['val/em_by_hops/2']:.3f}")
    assert m0["val/em_by_hops/1"] <= NO_RETRIEVAL_MAX and m0["val/em_by_hops/2"] <= NO_RETRIEVAL_MAX, m0
