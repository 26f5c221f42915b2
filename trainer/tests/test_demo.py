"""The demo that learns, shortened (issue 7): the example config (examples/demo.run.json: tiny policy, BM25 over the
demo corpus, GRPO, masking on, its 300-step warm start) with half its RL steps, seeded. It must raise held-out exact
match over the warm start by at least DEMO_MIN_GAIN (smaller than the full demo's 0.3, stated here), search, and
score near zero when /retrieve returns nothing.

This is the slowest one-hop test in the suite (about seven minutes on 2 cores); it is the proof that the trainer
learns at all. Its verdict — a gain within 60 RL steps — is a draw over trajectories, so it runs the one trajectory
measured to pass on every x86 vendor (conftest.PORTABLE_NUMERICS: MKL's COMPATIBLE branch; the output and a failure
name the CPU, the seed and the bits this CPU gave). Stop 40 measured the trajectories around it (that pin, two
threads, an AMD EPYC; held-out EM after the warm start -> after 60 RL steps):
- with a 200-step warm start (this test until stop 40): seeds 1-5 0.016 -> 0.143, 0.011 -> 0.116, 0.005 -> 0.021,
  0.011 -> 0.026, 0.016 -> 0.053 — three of five found no reward in 60 steps, so a passing run was a lucky draw;
- with the demo's own 300 steps (this test since): seed 1 (this test's trajectory) 0.021 -> 0.333, searches 1.00,
  0.000 with retrieval off, 6m50s in the suite; seeds 3 and 4 0.005 -> 0.180 and 0.005 -> 0.333.

Why not each vendor's faster path (conftest.PINNED_NUMERICS, 1.7x faster: 245 s against 410 s, seed 1, stop 50's
EPYC), as the two-hop test does: under it, on that EPYC (`SAS_LEARNING_SEED=N`), seeds 1-4 learned — 0.026 -> 0.339,
0.011 -> 0.302, 0.005 -> 0.275, 0.000 -> 0.122, searches 1.00-1.11, 0.000 with retrieval off — and seed 5 did not:
0.011 -> 0.037, 1.80 searches (it still searched twice a question at step 60). An Intel CPU there runs a trajectory of
its own that nobody has measured, and one in five of them would fail on every run on that vendor. Run for the
demo's own 120 steps (its cosine schedule decays over 120 steps, not 60: another trajectory from step 21), the same
seed learned (0.106 at step 60, 0.164 at step 120), so a longer test would likely pass everywhere; it was not measured
over seeds.

The threshold is about half of the smallest gain measured over the seeds above (0.175, seed 3), above every gain of a
trajectory that found no reward (0.015-0.037); `test_the_threshold_holds_with_a_margin_on_any_trajectory_measured`
keeps it so.
"""

from __future__ import annotations

import json

from conftest import LEARNING_SEED, PORTABLE_NUMERICS, ROOT, evaluate_without_retrieval, pin_report, run_pinned

DEMO_MIN_GAIN = 0.09
SMALLEST_GAIN_MEASURED = 0.175  # PORTABLE_NUMERICS, seed 3 (docstring); seed 1, this test's trajectory, 0.312
NOT_LEARNING_MAX_GAIN = (
    0.037  # the largest gain of a trajectory that found no reward (200-step warm start, seed 5: 0.016 -> 0.053)
)
WARMUP_STEPS = 300
RL_STEPS = 60


def demo_config() -> dict:
    # The demo data is named builtin:demo/…, which the trainer resolves wherever the config is written.
    cfg = json.loads((ROOT / "examples" / "demo.run.json").read_text())
    cfg["seed"] = LEARNING_SEED
    return cfg


def test_the_threshold_holds_with_a_margin_on_any_trajectory_measured():
    """Not a learning run (milliseconds): the threshold sits at about half of the smallest gain of a learning
    trajectory, and above any gain of one that did not learn."""
    assert NOT_LEARNING_MAX_GAIN < DEMO_MIN_GAIN <= 0.55 * SMALLEST_GAIN_MEASURED


def test_the_shortened_demo_learns_to_search_and_answer(tmp_path, demo_env):
    cfg = demo_config()
    cfg["train"].update(steps=RL_STEPS, eval_every=0, checkpoint_every=0)
    cfg["train"]["supervised_warmup"]["steps"] = WARMUP_STEPS
    metrics = run_pinned(cfg, tmp_path / "demo", demo_env.url, numerics=PORTABLE_NUMERICS)
    evals = [m for m in metrics if "val/em" in m]
    before, after = evals[0], evals[-1]
    assert before["step"] == 0 and after["step"] == RL_STEPS
    gain = after["val/em"] - before["val/em"]
    pin = pin_report(PORTABLE_NUMERICS)
    print(pin)
    print(
        f"held-out EM {before['val/em']:.3f} -> {after['val/em']:.3f} (gain {gain:.3f}); searches {after['val/searches_mean']:.2f}"
    )
    assert gain >= DEMO_MIN_GAIN, (pin, before, after)
    assert after["val/searches_mean"] >= 1.0 - 0.05, f"the trained policy searches ({pin})"

    # The same policy with /retrieve returning nothing: it cannot know the invented answers.
    final = tmp_path / "demo" / "checkpoints" / f"step-{RL_STEPS:06d}"
    assert final.is_dir()
    m0 = evaluate_without_retrieval(demo_config(), final, tmp_path / "no-retrieval", PORTABLE_NUMERICS)
    print(f"with retrieval disabled: held-out EM {m0['val/em']:.3f}")
    assert m0["val/em"] <= 0.03, m0
