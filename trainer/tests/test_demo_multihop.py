"""The two-hop demo, shortened (issue 20): `examples/demo-multihop.run.json` itself (the two-hop world, the two-search
warm start, strict actions, GRPO, masking on, seed 1), stopped with SIGTERM once its step-100 evaluation is written —
the first 100 of its 520 RL steps, inside its first stage (three quarters of each batch two-hop), with the recipe's
own learning-rate schedule. It must learn the second hop's *search*, and begin to read:

- held-out two-hop questions whose answer came back in a passage (`val/answer_retrieved_by_hops/2`: the second query
  named the entity the first search found): up by at least TWO_HOP_RETRIEVED_MIN_GAIN over the warm start;
- at least TWO_HOP_MIN_SEARCHES searches per held-out two-hop question (the second search kept);
- held-out one-hop exact match up by at least ONE_HOP_MIN_GAIN.

Two-hop *exact match* at step 100 is 0.014–0.143 over the trajectories measured (one to ten of 70 questions): too
few questions for a threshold that means anything; it reaches 0.25 later (docs/demo.md, "The mix from step 1").

Stop 33, on a 2-core Xeon with AVX-512 (torch 2.15), step 0 -> 100 (answer retrieved / one-hop EM / searches per
two-hop question at step 100): this test's own trajectory (pinned, two threads) 0.071 -> 0.514 / 0.000 -> 0.112 /
1.97 (two-hop EM 0.143); seeds 1, 2, 3 with one torch thread each (AVX-512 kernels) 0.057 -> 0.300 / 0.000 -> 0.315 /
1.93, 0.043 -> 0.229 / 0.011 -> 0.112 / 2.03, 0.057 -> 0.571 / 0.011 -> 0.360 / 2.07. The thresholds sit under the
smallest of those gains (+0.186 answer retrieved, +0.101 one-hop). The recipe before stop 33 (its first 200 steps on
the data's own mix) kept a one-hop threshold of 0.25 and failed here: this trajectory's second search died by step 41
(0.99 searches per two-hop question at step 100); a two-hop-heavy mix from step 1 is what keeps it.

Stop 34 (the tiny model's target-only log-probs and growing KV cache: the same formulas, other last digits, so
another trajectory of this test): 0.043 -> 0.400 / 0.011 -> 0.079 / 1.97 (two-hop EM 0.029), passing; its one-hop
gain (+0.068) is the thinnest margin of the three thresholds.

It takes ~7 minutes on 2 cores alone since stop 34's faster step (a 300-step warm start, 100 RL steps of 64
two-search trajectories; 13 before), so it runs with the rest of the suite, in CI too; `npm run test:demo-multihop`
runs it alone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import PINNED_NUMERICS, ROOT, EnvServer, trainer_env

STOP_AT = 100
TWO_HOP_RETRIEVED_MIN_GAIN = 0.15
TWO_HOP_MIN_SEARCHES = 1.5
ONE_HOP_MIN_GAIN = 0.05

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
        config = tmp_path / "demo-multihop.run.json"
        config.write_text(json.dumps(cfg), encoding="utf-8")
        run_dir = tmp_path / "run"
        log = (tmp_path / "trainer.log").open("w", encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, "-m", "search_agent_trainer", "--config", str(config), "--run-dir", str(run_dir), "--env-url", env.url],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**trainer_env(), **PINNED_NUMERICS},
        )
        deadline = time.monotonic() + 3600
        try:
            while not any(m["step"] >= STOP_AT for m in evaluations(run_dir)):
                assert proc.poll() is None, f"the trainer exited early ({proc.returncode}): {(tmp_path / 'trainer.log').read_text()[-3000:]}"
                assert time.monotonic() < deadline, "no step-100 evaluation within an hour"
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
    gains = {k: after[k] - before[k] for k in ("val/answer_retrieved_by_hops/2", "val/em_by_hops/1", "val/em_by_hops/2")}
    print(
        f"step 0 -> {STOP_AT}: two-hop answer retrieved {before['val/answer_retrieved_by_hops/2']:.3f} -> {after['val/answer_retrieved_by_hops/2']:.3f}, "
        f"one-hop EM {before['val/em_by_hops/1']:.3f} -> {after['val/em_by_hops/1']:.3f}, two-hop EM {before['val/em_by_hops/2']:.3f} -> "
        f"{after['val/em_by_hops/2']:.3f}, searches per two-hop question {after['val/searches_by_hops/2']:.2f}"
    )
    assert gains["val/answer_retrieved_by_hops/2"] >= TWO_HOP_RETRIEVED_MIN_GAIN, (before, after)
    assert after["val/searches_by_hops/2"] >= TWO_HOP_MIN_SEARCHES, after
    assert gains["val/em_by_hops/1"] >= ONE_HOP_MIN_GAIN, (before, after)
