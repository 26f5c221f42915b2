"""The trainer as a process (`python -m search_agent_trainer`), against the real env server over the demo corpus:
the run directory and events, the mask audit on its rollout records, failures, SIGTERM, and resume."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO, LOGPROB_AGREEMENT, LOGPROB_ROUNDOFF, ROOT, assert_same_metrics, tiny_config, trainer_env
from search_agent_trainer import token_store
from search_agent_trainer.data import normalize

jsonschema = pytest.importorskip("jsonschema")
SCHEMAS = {
    n: json.loads((ROOT / "docs" / "schema" / f"{n}.schema.json").read_text())
    for n in ("run", "event", "metrics", "rollout")
}


def run_trainer(
    tmp: Path, cfg: dict, env_url: str, *extra: str, name: str = "run", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cfg_path = tmp / f"{name}.run.json"
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(cfg_path),
            "--run-dir",
            str(tmp / name),
            "--env-url",
            env_url,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=timeout,
    )


def lines(path: Path) -> list[dict]:
    """A step's records: rollouts/step-N.jsonl, or the token store's rollouts/step-N/ (the default format)."""
    if not path.exists() and (path.parent / path.stem).is_dir():
        return token_store.read_step(path.parent / path.stem)
    return [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]


def audit_rollout(rec: dict, masking: bool = True) -> None:
    """The mask audit: every token array as long as the text; loss_mask 1 exactly on generated tokens; the roles in
    order (prompt first); the response text contains every retrieved block."""
    jsonschema.validate(rec, SCHEMAS["rollout"])
    t = rec["tokens"]
    n = len(t["text"])
    for k, v in t.items():
        assert len(v) == n, k
    for role, m in zip(t["role"], t["loss_mask"]):
        expected = 1 if role == "generated" or (not masking and role != "prompt") else 0
        assert m == expected, (role, m)
    P = t["role"].index("generated")
    assert set(t["role"][:P]) == {"prompt"} and "prompt" not in t["role"][P:]
    # Positions that were not scored are null (never a 0 that reads as "certain"): the prompt everywhere; log-probs,
    # reference log-probs and entropies exist exactly on the loss tokens.
    for key in ("logprob", "ref_logprob", "advantage", "value", "entropy"):
        if key in t:
            assert all(x is None for x in t[key][:P]), key
    for key in ("logprob", "ref_logprob", "entropy"):
        if key in t:
            assert [x is not None for x in t[key]] == [m == 1 for m in t["loss_mask"]], key


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, varied_env):
    tmp = tmp_path_factory.mktemp("train")
    proc = run_trainer(tmp, tiny_config(), varied_env.url)
    return tmp / "run", proc


def test_a_run_writes_the_run_directory_and_events(finished_run):
    run, proc = finished_run
    assert proc.returncode == 0, proc.stderr
    run_json = json.loads((run / "run.json").read_text())
    jsonschema.validate(run_json, SCHEMAS["run"])
    assert run_json["status"] == "finished" and run_json["step"] == 2 and run_json["total_steps"] == 2
    assert run_json["config"]["algorithm"]["clip_ratio_high"] == 0.2  # the resolved config, defaults filled in
    assert run_json["python"] == sys.executable  # a resume tries this Python first
    stdout_events = [json.loads(l) for l in proc.stdout.splitlines()]
    assert stdout_events == lines(run / "events.jsonl")
    for e in stdout_events:
        jsonschema.validate(e, SCHEMAS["event"])
    kinds = [e["event"] for e in stdout_events]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert kinds.count("checkpoint") == 2 and kinds.count("eval") == 3 and kinds.count("metrics") == 2
    phases = [(e["step"], e["phase"]) for e in stdout_events if e["event"] == "progress"]
    assert phases[:4] == [(0, "eval"), (1, "rollout"), (1, "reward"), (1, "update")]
    assert (run / "logs" / "trainer.log").read_text()


def test_metrics_have_vecrl_names_and_val_em_before_the_first_update(finished_run):
    run, _ = finished_run
    metrics = lines(run / "metrics.jsonl")
    for m in metrics:
        jsonschema.validate(m, SCHEMAS["metrics"])
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert "val/em" in metrics[0] and "actor/pg_loss" not in metrics[0]
    for key in (
        "critic/score/mean",
        "reward/em/mean",
        "response_length/mean",
        "env/number_of_valid_search",
        "env/ratio_of_valid_action",
        "actor/ppo_kl",
        "actor/entropy",
        "actor/pg_clipfrac",
        "actor/grad_norm",
        "actor/kl_loss",
        "reward/frac_zero_std_groups",
        "mask/generated_tokens",
        "mask/retrieved_tokens",
        "timing_s/rollout",
        "timing_s/update",
        "perf/rollout_tokens_per_s",
        "val/em",
    ):
        assert key in metrics[1], key
    assert metrics[1]["actor/grad_norm"] > 0 and metrics[1]["reward/frac_zero_std_groups"] < 1
    # trained on the module's reward; EM only logged
    assert metrics[1]["critic/score/mean"] > 0 and metrics[1]["reward/em/mean"] == 0
    assert metrics[1]["rollout/logprob_diff_max"] < LOGPROB_AGREEMENT  # the sampler's log-probs agree with the update's
    # one epoch over one mini-batch is on-policy: the old log-probs are the update's own (ρ = 1 exactly, as veRL), so
    # the separate old-log-prob pass is skipped, nothing is clipped and the step's policy KL is 0
    assert metrics[1]["timing_s/old_log_prob"] == 0.0 and metrics[1]["timing_s/ref"] > 0
    assert metrics[1]["actor/ppo_kl"] == 0.0 and metrics[1]["actor/pg_clipfrac"] == 0.0


def test_two_epochs_over_one_mini_batch_take_the_old_log_probs_from_the_first_epochs_forward(tmp_path, varied_env):
    """More than one epoch over one mini-batch: the first epoch's forward still runs before any optimizer step, so it
    gives the old log-probs (no separate pass); the second epoch reads them, after the first step moved the policy."""
    cfg = tiny_config(
        **{"train.steps": 1, "train.eval_every": 0, "data.eval_size": 2, "optim.ppo_epochs": 2, "optim.lr": 0.05}
    )
    proc = run_trainer(tmp_path, cfg, varied_env.url)
    assert proc.returncode == 0, proc.stderr
    m = lines(tmp_path / "run" / "metrics.jsonl")[-1]
    assert m["timing_s/old_log_prob"] == 0.0
    # the sampler's log-probs: taken before the first step (after it, lr 0.05 moves them by far more)
    assert m["rollout/logprob_diff_max"] < 1e-4
    assert m["actor/ppo_kl"] != 0.0 and m["actor/grad_norm"] > 0  # the second epoch's ratios are not 1
    for rec in lines(tmp_path / "run" / "rollouts" / "step-000001.jsonl"):
        audit_rollout(rec)  # log-probs and entropies on every loss token, from the first epoch


@pytest.fixture(scope="module")
def sparse_env():
    """The env server with a reward that is 1 for a third of responses: a random tiny policy's groups are a mix of
    groups with a signal and groups whose rewards are all equal."""
    from conftest import EnvServer

    s = EnvServer(
        "--corpus",
        str(DEMO / "corpus.jsonl"),
        "--reward",
        str(ROOT / "test" / "fixtures" / "rewards" / "modules" / "sparse.reward.ts"),
    )
    yield s
    s.close()


SKIP_CFG = {
    "train.steps": 3,
    "train.eval_every": 0,
    "data.eval_size": 2,
    "rollout.batch_size": 4,
    "optim.mini_batch_size": 12,
    "optim.micro_batch_size": 3,
}


@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_skip_zero_std_groups_leaves_the_flat_groups_out_of_the_passes_and_the_update(tmp_path, sparse_env, keep):
    """algorithm.skip_zero_std_groups: of the groups whose rewards are all equal (GRPO advantage 0), only
    max(rollout.n, ⌈zero_std_keep · F⌉) of their F sequences, drawn at random, get the reference pass and the update
    (they carry the KL term for all of them); the others keep their advantages (0) and have no trainer log-probs in
    their records. The trained ones pass the mask audit as always, and the log-prob agreement is measured on them."""
    n = 3
    cfg = tiny_config(**SKIP_CFG, **{"algorithm.skip_zero_std_groups": True, "algorithm.zero_std_keep": keep})
    proc = run_trainer(tmp_path, cfg, sparse_env.url)
    assert proc.returncode == 0, proc.stderr
    metrics = lines(tmp_path / "run" / "metrics.jsonl")[1:]
    mixed = 0
    widened = 0  # steps where zero_std_keep kept more than rollout.n
    for m in metrics:
        recs = lines(tmp_path / "run" / "rollouts" / f"step-{m['step']:06d}.jsonl")
        rewards: dict[str, set] = {}
        for r in recs:
            rewards.setdefault(r["group"], set()).add(r["reward"])
        flat = {g for g, v in rewards.items() if len(v) == 1}
        assert m["reward/frac_zero_std_groups"] == pytest.approx(len(flat) / len(rewards))
        flat_recs = [r for r in recs if r["group"] in flat]
        flat_trained = [r for r in flat_recs if "logprob" in r["tokens"]]
        kept = min(len(flat_recs), max(n, math.ceil(keep * len(flat_recs))))
        assert len(flat_trained) == kept
        widened += kept > min(len(flat_recs), n)
        assert m["actor/trained_fraction"] == pytest.approx(
            (len(recs) - len(flat_recs) + len(flat_trained)) / len(recs)
        )
        for r in recs:
            t = r["tokens"]
            if r["group"] in flat:
                assert all(x in (None, 0.0) for x in t["advantage"])
            if "logprob" in t:
                audit_rollout(r)
                assert "ref_logprob" in t and "entropy" in t
            else:
                assert r["group"] in flat and "ref_logprob" not in t and "entropy" not in t
        # a KL-only step has a gradient too
        assert m["rollout/logprob_diff_max"] < LOGPROB_AGREEMENT and m["actor/grad_norm"] > 0
        if len(flat_recs) > kept and len(flat) < len(rewards):
            mixed += 1
    assert mixed, "no step mixed groups with a signal and more flat sequences than it keeps: the test saw nothing"
    assert bool(widened) == (keep > 0), "zero_std_keep 0.5 should keep more than rollout.n flat sequences on some step"


def test_skip_zero_std_groups_leaves_the_policy_gradient_as_it_was(tmp_path, sparse_env):
    """Without a KL or entropy term, the update with the flat groups skipped is the whole batch's: the same seed's
    first step (same rollouts) has the same surrogate loss and gradient norm either way, while fewer tokens go
    through the update."""
    base = {**SKIP_CFG, "train.steps": 1, "algorithm.kl_coef": 0.0}
    steps = {}
    for name, skip in (("whole", False), ("skip", True)):
        proc = run_trainer(
            tmp_path, tiny_config(**base, **{"algorithm.skip_zero_std_groups": skip}), sparse_env.url, name=name
        )
        assert proc.returncode == 0, proc.stderr
        steps[name] = lines(tmp_path / name / "metrics.jsonl")[-1]
    whole, skip = steps["whole"], steps["skip"]
    assert 0 < whole["reward/frac_zero_std_groups"] < 1, (
        "seed 7's first batch should mix flat groups and groups with a signal"
    )
    assert skip["reward/frac_zero_std_groups"] == whole["reward/frac_zero_std_groups"]  # the same rollouts
    assert skip["actor/trained_fraction"] < 1 and "actor/trained_fraction" not in whole
    # a mean of advantages (ρ = 1 exactly, on-policy) summed over other micro-batches: equal to float32 round-off
    assert skip["actor/pg_loss"] == pytest.approx(whole["actor/pg_loss"], rel=1e-5, abs=LOGPROB_ROUNDOFF)
    assert skip["actor/grad_norm"] == pytest.approx(whole["actor/grad_norm"], rel=1e-5)

    def tokens(m: dict) -> float:
        return m["perf/update_tokens_per_s"] * m["timing_s/update"]

    assert tokens(skip) < tokens(whole)


def test_held_out_exact_match_and_searches_by_hops_at_every_evaluation(finished_run):
    """`val/em_by_hops/<h>`, `val/searches_by_hops/<h>` and `val/answer_retrieved_by_hops/<h>` group the held-out
    questions by their dataset line's `meta.hops` (the first 4 demo questions: three one-hop, one two-hop), and
    `val/bridge_searched_by_hops/2` asks whether a later query named the two-hop question's `meta.bridge`; all
    recomputed here from the val records."""
    run, _ = finished_run
    eval_hops = [
        json.loads(l)["meta"]["hops"] for l in (ROOT / "examples" / "demo" / "eval.jsonl").read_text().splitlines()[:4]
    ]
    assert sorted(set(eval_hops)) == [1, 2]
    for m in lines(run / "metrics.jsonl"):
        recs = lines(run / "rollouts" / f"val-step-{m['step']:06d}.jsonl")
        assert [r["meta"]["hops"] for r in sorted(recs, key=lambda r: r["group"])] == eval_hops
        for h in (1, 2):
            part = [r for r in recs if r["meta"]["hops"] == h]
            assert m[f"val/em_by_hops/{h}"] == pytest.approx(sum(r["meta"]["metrics"]["em"] for r in part) / len(part))
            assert m[f"val/searches_by_hops/{h}"] == pytest.approx(sum(r["searches"] for r in part) / len(part))
            assert m[f"val/answer_retrieved_by_hops/{h}"] == pytest.approx(
                sum(r["meta"]["metrics"]["answer_retrieved"] for r in part) / len(part)
            )
        # the two-hop questions' bridge entity (meta.bridge, kept in the records): named by a search after the first?
        two = [r for r in recs if r["meta"]["hops"] == 2]
        assert all(r["meta"]["bridge"] for r in two) and not any(
            "bridge" in r["meta"] for r in recs if r["meta"]["hops"] == 1
        )
        named = [
            any(
                f" {normalize(b)} " in f" {normalize(q['query'])} "
                for q in r["meta"].get("retrieval", [])[1:]
                for b in r["meta"]["bridge"]
            )
            for r in two
        ]
        assert m["val/bridge_searched_by_hops/2"] == pytest.approx(sum(named) / len(two))
        assert "val/bridge_searched_by_hops/1" not in m
        assert m["val/reward/answer_retrieved/mean"] == pytest.approx(
            sum(r["meta"]["metrics"]["answer_retrieved"] for r in recs) / len(recs)
        )
        assert not [k for k in m if k.startswith("val/") and "_by_hops/" in k and k[-1] not in "12"]


def test_held_out_metrics_by_question_kind(finished_run):
    """`val/em_by_kind/<kind>`, `val/searches_by_kind/<kind>` and `val/answer_retrieved_by_kind/<kind>` group the
    held-out questions by their dataset line's `meta.kind` (recorded in each val record's meta), recomputed here."""
    run, _ = finished_run
    eval_kinds = [
        json.loads(l)["meta"]["kind"] for l in (ROOT / "examples" / "demo" / "eval.jsonl").read_text().splitlines()[:4]
    ]
    assert len(set(eval_kinds)) >= 2
    for m in lines(run / "metrics.jsonl"):
        recs = lines(run / "rollouts" / f"val-step-{m['step']:06d}.jsonl")
        assert [r["meta"]["kind"] for r in sorted(recs, key=lambda r: r["group"])] == eval_kinds
        for k in set(eval_kinds):
            part = [r for r in recs if r["meta"]["kind"] == k]
            assert m[f"val/em_by_kind/{k}"] == pytest.approx(sum(r["meta"]["metrics"]["em"] for r in part) / len(part))
            assert m[f"val/searches_by_kind/{k}"] == pytest.approx(sum(r["searches"] for r in part) / len(part))
            assert m[f"val/answer_retrieved_by_kind/{k}"] == pytest.approx(
                sum(r["meta"]["metrics"]["answer_retrieved"] for r in part) / len(part)
            )
        assert sorted(k.rsplit("/", 1)[1] for k in m if k.startswith("val/em_by_kind/")) == sorted(set(eval_kinds))


def test_meta_kind_is_read_checked_and_made_a_metric_name(tmp_path):
    from search_agent_trainer.data import load_dataset
    from search_agent_trainer.metrics import metric_name

    f = tmp_path / "d.jsonl"
    f.write_text(
        json.dumps({"question": "q?", "golden": ["a"], "meta": {"kind": " bridge "}})
        + "\n"
        + json.dumps({"question": "q2?", "golden": ["a"], "meta": {"kind": 3}})
        + "\n"
    )
    warnings: list[str] = []
    [ex] = load_dataset(str(f), warn=warnings.append)
    assert ex.kind == "bridge"
    assert len(warnings) == 1 and "d.jsonl:2" in warnings[0] and "meta.kind" in warnings[0]
    assert (
        metric_name("birthplace-river") == "birthplace-river"
        and metric_name("yes/no question") == "yes_no_question"
        and metric_name("//") == "_"
    )


def test_rollout_records_pass_the_mask_audit(finished_run):
    run, _ = finished_run
    recs = lines(run / "rollouts" / "step-000001.jsonl")
    assert len(recs) == 6 and len({r["group"] for r in recs}) == 2
    for r in recs:
        audit_rollout(r)
        assert r["split"] == "train" and r["step"] == 1 and r["finish"] in ("answer", "max_turns", "length")
        assert set(r["tokens"]) >= {
            "text",
            "ids",
            "role",
            "loss_mask",
            "rollout_logprob",
            "logprob",
            "ref_logprob",
            "advantage",
        }
        # run format v2: the log-prob at sampling time beside the trainer's, equal here (fp32 on CPU, same weights)
        t = r["tokens"]
        assert r["v"] == 2
        for role, m, sampled, trained in zip(t["role"], t["loss_mask"], t["rollout_logprob"], t["logprob"]):
            # null where not sampled (prompt, observations) and where not scored (outside the loss)
            assert ((sampled is not None and sampled < 0) if role == "generated" else sampled is None) and (
                trained is not None
            ) == bool(m)
            if m:
                assert sampled == pytest.approx(trained, abs=1e-4)
        # Each search's query and its hits' retrieval scores, for the replay panel's document cards.
        retrieval = r["meta"].get("retrieval", [])
        assert len(retrieval) == r["searches"]
        for s in retrieval:
            assert isinstance(s["query"], str) and all(isinstance(h["score"], float) and h["id"] for h in s["hits"])
    val = lines(run / "rollouts" / "val-step-000000.jsonl")
    assert len(val) == 4 and all(r["split"] == "val" and r["v"] == 2 for r in val)
    for r in val:  # greedy: the log-prob of the argmax on generated tokens; null where nothing was sampled
        assert all(
            (lp is not None and lp < 0) if role == "generated" else lp is None
            for lp, role in zip(r["tokens"]["rollout_logprob"], r["tokens"]["role"])
        )
    # Group ids name the split: the held-out questions of step 1 are no members of step 1's training groups.
    val1 = lines(run / "rollouts" / "val-step-000001.jsonl")
    assert {r["group"] for r in recs} == {"train:1:0", "train:1:1"}
    assert all(r["group"].startswith("val:1:") for r in val1) and not {r["group"] for r in val1} & {
        r["group"] for r in recs
    }
    ckpt = run / "checkpoints" / "step-000002"
    assert {p.name for p in ckpt.iterdir()} >= {"trainable.pt", "optimizer.pt", "tokenizer.json", "trainer_state.json"}


def test_an_invalid_config_is_an_error_naming_the_key(tmp_path, demo_env):
    cfg = tiny_config()
    cfg["rollout"]["temprature"] = 0.7
    cfg["algorithm"] = {"clip_ratio_low": "0.2"}
    proc = run_trainer(tmp_path, cfg, demo_env.url)
    assert proc.returncode == 2
    event = json.loads(proc.stdout.splitlines()[0])
    assert event["event"] == "error"
    assert "rollout.temprature: is not a known key" in event["message"]
    assert "algorithm.clip_ratio_low: expected a number, got string" in event["message"]


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "ppo", "kl_in_reward": True, "gamma": 0.99, "lam": 0.95},
        {"name": "reinforce++", "mask_advantages": True, "kl_estimator": "k2", "loss_agg_mode": "seq-mean-token-sum"},
        {
            "name": "grpo",
            "norm_adv_by_std": False,
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "kl_coef": 0,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "loss_masking": False,
        },
        {"preset": "search-r1-ppo"},
    ],
    ids=["ppo", "reinforce++", "dr-grpo", "preset-search-r1-ppo"],
)
def test_each_algorithm_runs_a_step(tmp_path, varied_env, algorithm):
    cfg = tiny_config(
        **{
            "train.steps": 1,
            "data.eval_size": 2,
            "optim.ppo_epochs": 2,
            "optim.mini_batch_size": 3,
            "optim.micro_batch_size": 2,
        }
    )
    cfg["algorithm"] = algorithm
    proc = run_trainer(tmp_path, cfg, varied_env.url)
    assert proc.returncode == 0, proc.stderr
    m = lines(tmp_path / "run" / "metrics.jsonl")[-1]
    assert m["actor/grad_norm"] > 0
    recs = lines(tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    for r in recs:
        audit_rollout(r, masking=algorithm.get("loss_masking", True))
    if algorithm.get("name", "ppo") == "ppo":
        assert "critic/vf_loss" in m and "critic/values/mean" in m and "actor/reward_kl_penalty" in m
        assert "value" in recs[0]["tokens"]
        # the value head's gradient is clipped on its own, and reported apart from the policy's
        assert m["critic/grad_norm"] > 0 and m["actor/grad_norm"] > 0
    if "clip_ratio_c" in algorithm:
        assert 0.0 <= m["actor/pg_clipfrac_lower"] <= 1.0  # veRL's name, veRL's meaning: the dual-clip fraction
    else:
        assert "actor/pg_clipfrac_lower" not in m
    assert "actor/pg_clipfrac_low" in m and "actor/pg_clipfrac_high" in m
    if algorithm.get("kl_coef") == 0:
        assert "ref_logprob" not in recs[0]["tokens"] and "actor/kl_loss" not in m


@pytest.mark.parametrize("warm", [False, True], ids=["from-scratch", "warm-start+kl"])
def test_a_crash_is_reported_and_resume_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, varied_env, warm):
    demo_env = varied_env
    base = tiny_config(**{"train.steps": 3, "train.eval_every": 0, "data.eval_size": 2})
    if warm:
        # The KL reference must be the warm-started policy, also after a resume (it is re-read from step-000000).
        base["train"]["supervised_warmup"] = {"steps": 3, "batch_size": 2}
        base["algorithm"] = {"kl_coef": 0.05}
    straight = run_trainer(tmp_path, base, demo_env.url, name="straight")
    assert straight.returncode == 0, straight.stderr

    crashing = json.loads(json.dumps(base))
    crashing["test"] = {"crash_at_step": 3}
    crashed = run_trainer(tmp_path, crashing, demo_env.url, name="resumed")
    assert crashed.returncode == 1
    run = tmp_path / "resumed"
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["status"] == "failed" and "crash at step 3" in run_json["error"]["message"]
    assert "Traceback" in run_json["error"]["traceback"]
    errors = [e for e in lines(run / "events.jsonl") if e["event"] == "error"]
    assert len(errors) == 1 and "test.crash_at_step" in errors[0]["traceback"]
    assert [m["step"] for m in lines(run / "metrics.jsonl")] == [0, 1, 2]  # everything before the crash is readable

    resumed = run_trainer(tmp_path, base, demo_env.url, "--resume", name="resumed")
    assert resumed.returncode == 0, resumed.stderr
    started = [e for e in lines(run / "events.jsonl") if e["event"] == "started"]
    assert started[-1]["resumed"] is True and started[-1]["step"] == 2
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    a = lines(tmp_path / "straight" / "metrics.jsonl")
    b = lines(run / "metrics.jsonl")
    assert [m["step"] for m in b] == [0, 1, 2, 3]
    for ma, mb in zip(a, b):
        assert_same_metrics(ma, mb)  # to float32 round-off at its scale (conftest)
    if warm:
        # Step 1's first update starts at the reference itself: KL(π‖π_ref) = 0 (it was 4.7 when the reference was
        # the random initialisation instead of the warm-started policy, and the KL term dragged the policy back).
        assert a[1]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    ra = [r["response"] for r in lines(tmp_path / "straight" / "rollouts" / "step-000003.jsonl")]
    rb = [r["response"] for r in lines(run / "rollouts" / "step-000003.jsonl")]
    assert ra == rb


@pytest.mark.parametrize(
    "signum,reason", [(signal.SIGTERM, "signal"), (signal.SIGHUP, "host-gone")], ids=["SIGTERM", "SIGHUP"]
)
def test_sigterm_finishes_the_step_checkpoints_and_exits_0(tmp_path, demo_env, signum, reason):
    """SIGTERM is a user's Stop; SIGHUP is the host closing (a window reloading): both checkpoint and stop, and
    run.json says which, so a new window offers to resume only the second."""
    cfg = tiny_config(
        **{"train.steps": 50, "train.checkpoint_every": 0, "data.eval_size": 1, "test": {"step_delay_s": 1.0}}
    )
    path = tmp_path / "c.run.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(path),
            "--run-dir",
            str(tmp_path / "run"),
            "--env-url",
            demo_env.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=trainer_env(),
    )
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "progress" and events[-1]["phase"] == "update" and events[-1]["step"] == 2:
            proc.send_signal(signum)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    events += [json.loads(l) for l in rest.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[-2:] == ["checkpoint", "finished"]
    assert events[-1]["status"] == "stopped" and events[-1]["step"] == 2
    assert (tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.json").exists()
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "stopped" and run["stop_reason"] == reason
    assert [m["step"] for m in lines(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2]


def test_run_json_keeps_builtin_names_and_a_resume_resolves_them_in_the_install_that_resumes(tmp_path, demo_env):
    """run.json keeps the data a config names builtin:NAME as that name (resolved, it is a path into the install that
    started the run, which an extension update moves); a relative path is kept absolute (the run directory may be
    anywhere). A resume from the run directory alone resolves the names in this install. A run.json of an older
    version, holding them as paths into an install that is gone, resumes too (config.former_builtin_name), and is
    written back with the names."""
    shutil.copy(DEMO / "eval.jsonl", tmp_path / "mine.jsonl")
    cfg = tiny_config(**{"train.steps": 1, "train.eval_every": 0, "data.eval_size": 1})
    cfg["data"].update(train="builtin:demo/train", eval="mine.jsonl")
    cfg["model"]["tiny"]["vocab"] = ["builtin:demo/corpus"]
    first = run_trainer(tmp_path, cfg, demo_env.url)
    assert first.returncode == 0, first.stderr
    run_json = tmp_path / "run" / "run.json"
    stored = json.loads(run_json.read_text())["config"]
    assert stored["data"]["train"] == "builtin:demo/train" and stored["model"]["tiny"]["vocab"] == [
        "builtin:demo/corpus"
    ]
    assert stored["data"]["eval"] == str(tmp_path / "mine.jsonl")
    assert stored["algorithm"]["clip_ratio_high"] == 0.2  # still the completed config, defaults filled in

    def resume() -> dict:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "search_agent_trainer",
                "--resume",
                "--run-dir",
                str(tmp_path / "run"),
                "--env-url",
                demo_env.url,
            ],
            capture_output=True,
            text=True,
            env=trainer_env(),
            timeout=300,
        )
        assert p.returncode == 0, p.stderr
        assert f"resumed from {tmp_path / 'run' / 'checkpoints' / 'step-000001'}" in p.stderr
        return json.loads(run_json.read_text())

    run = resume()
    assert run["status"] == "finished" and run["config"] == stored

    # An older version's run.json: the built-in data as absolute paths into an install that no longer exists.
    old = json.loads(run_json.read_text())
    old["config"]["data"]["train"] = "/gone/search-agent-studio-0.0.9/examples/demo/train.jsonl"
    old["config"]["model"]["tiny"]["vocab"] = ["/gone/search-agent-studio-0.0.9/examples/demo/corpus.jsonl"]
    run_json.write_text(json.dumps(old))
    run = resume()
    assert run["status"] == "finished" and run["config"] == stored, "resumed in this install, the names written back"


def test_bf16_on_a_cpu_without_native_bf16_warns_and_bf16_where_native_falls_back_to_fp32(
    tmp_path, demo_env, monkeypatch
):
    """model.dtype bf16 on CPU runs anywhere (torch converts to fp32 and back where the CPU has no bf16 arithmetic), but
    there a step is several times slower than in fp32: the run says so in a warning event and its log. bf16_where_native
    (the two-hop demo's) computes in bf16 where the CPU has it natively and in fp32 elsewhere, and says which."""
    import io

    from search_agent_trainer import policy as policy_mod
    from search_agent_trainer import train as train_mod
    from search_agent_trainer.config import config_from_dict

    def started(name: str, dtype: str, native: bool | None) -> tuple[dict, list[str]]:
        monkeypatch.setattr(train_mod, "cpu_has_native_bf16", lambda: native)
        monkeypatch.setattr(policy_mod, "cpu_has_native_bf16", lambda: native)
        t = train_mod.Trainer(
            config_from_dict(tiny_config(**{"model.dtype": dtype})), tmp_path / name, demo_env.url, stdout=io.StringIO()
        )
        t.setup()
        t.writer.close()
        events = lines(tmp_path / name / "events.jsonl")
        return next(e for e in events if e["event"] == "started"), [
            e["message"] for e in events if e["event"] == "warning"
        ]

    ev, warned = started("emulated", "bf16", False)
    assert ev["precision"] == "bf16 autocast, fp32 master weights"
    assert (
        len(warned) == 1 and "no native bf16" in warned[0] and "model.dtype to fp32 or bf16_where_native" in warned[0]
    )
    assert "no native bf16" in (tmp_path / "emulated" / "logs" / "trainer.log").read_text(encoding="utf-8")
    assert started("native", "bf16", True)[1] == [] and started("unknown", "bf16", None)[1] == []

    ev, warned = started("fallback", "bf16_where_native", False)
    assert warned == [] and ev["precision"] == "fp32 (model.dtype bf16_where_native: no native bf16 on this cpu)"
    ev, warned = started("where-native", "bf16_where_native", True)
    assert (
        warned == []
        and ev["precision"]
        == "bf16 autocast, fp32 master weights (model.dtype bf16_where_native: native bf16 on this cpu)"
    )
    assert started("cannot-tell", "bf16_where_native", None)[0]["precision"].startswith("fp32 ")


def test_native_bf16_is_read_from_torch_then_from_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    import torch

    from search_agent_trainer.policy import cpu_has_native_bf16

    real_open = builtins.open
    cpuinfo = tmp_path / "cpuinfo"

    def fake_open(path, *a, **k):
        if path == "/proc/cpuinfo":
            if not cpuinfo.exists():
                raise FileNotFoundError(path)
            path = cpuinfo
        return real_open(path, *a, **k)

    def probe() -> bool | None:
        cpu_has_native_bf16.cache_clear()  # cached for the process: a CPU does not change under a run
        return cpu_has_native_bf16()

    monkeypatch.setattr(builtins, "open", fake_open)
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda: False, raising=False)
    try:
        assert probe() is None  # no probe says yes, no /proc/cpuinfo (macOS): cannot tell
        cpuinfo.write_text("flags\t\t: fpu sse2 avx2 fma\n", encoding="utf-8")
        assert probe() is False  # AVX2 only
        cpuinfo.write_text("Features\t: fp asimd bf16 i8mm\n", encoding="utf-8")
        assert probe() is True  # arm64 with the BF16 extension
        cpuinfo.write_text("flags\t\t: avx2 avx512f avx512_bf16\n", encoding="utf-8")
        assert probe() is True
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
        cpuinfo.unlink()
        assert probe() is True  # torch's cpuinfo first
    finally:
        cpu_has_native_bf16.cache_clear()


def test_a_new_run_does_not_inherit_the_step_of_an_old_run_json_in_its_directory(tmp_path):
    """A run.json some other run left in the directory: a new run starts at step 0 with its own `created`; a resume
    carries both over."""
    import io

    from search_agent_trainer.run_writer import RunWriter

    (tmp_path / "run.json").write_text(json.dumps({"step": 40, "created": "2001-01-01T00:00:00Z"}))
    fresh = RunWriter(tmp_path, {}, {}, 8, stdout=io.StringIO(), resume=False)
    fresh.close()
    assert fresh.run["step"] == 0 and fresh.run["created"] != "2001-01-01T00:00:00Z"
    (tmp_path / "run.json").write_text(json.dumps({"step": 40, "created": "2001-01-01T00:00:00Z"}))
    resumed = RunWriter(tmp_path, {}, {}, 8, stdout=io.StringIO(), resume=True)
    resumed.close()
    assert resumed.run["step"] == 40 and resumed.run["created"] == "2001-01-01T00:00:00Z"


@pytest.mark.parametrize("what", ["directory", "no-usable-example"])
def test_data_that_cannot_be_a_dataset_is_an_invalid_config_naming_the_key(tmp_path, demo_env, what):
    """data.train naming a directory (an IsADirectoryError traceback before), or a file without a usable line: exit 2
    (an invalid config, as __main__'s), the message naming data.train, no traceback in run.json."""
    cfg = tiny_config()
    if what == "directory":
        (tmp_path / "data").mkdir()
        cfg["data"]["train"] = str(tmp_path / "data")
    else:
        (tmp_path / "bad.jsonl").write_text("not json\n")
        cfg["data"]["train"] = str(tmp_path / "bad.jsonl")
    proc = run_trainer(tmp_path, cfg, demo_env.url)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [json.loads(l) for l in proc.stdout.splitlines() if json.loads(l)["event"] == "error"]
    assert len(errors) == 1 and errors[0]["message"].startswith("data.train: "), errors
    assert ("a directory" if what == "directory" else "no usable example") in errors[0]["message"]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "failed" and "traceback" not in run["error"]


def test_a_stop_during_the_warm_start_says_it_was_not_saved(tmp_path, demo_env):
    """SIGTERM during the supervised warm start: no checkpoint of a part of it (a resume takes step-000000 for a whole
    one), a warning saying so with the steps done, and no step-0 metrics claiming the configured steps."""
    cfg = tiny_config(**{"train.steps": 2, "data.eval_size": 1})
    cfg["train"]["supervised_warmup"] = {"steps": 100000, "batch_size": 2}
    path = tmp_path / "c.run.json"
    path.write_text(json.dumps(cfg))
    argv = [sys.executable, "-m", "search_agent_trainer", "--config", str(path), "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(
        [*argv, "--env-url", demo_env.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=trainer_env(),
    )
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "progress" and events[-1]["phase"] == "warmup":
            proc.send_signal(signal.SIGTERM)
            break
    events += [json.loads(l) for l in proc.stdout.read().splitlines()]
    assert proc.wait(timeout=60) == 0
    warnings = [e for e in events if e["event"] == "warning" and e.get("cause") == "warmup-not-saved"]
    assert len(warnings) == 1 and "/100000: it was not saved" in warnings[0]["message"], warnings
    assert not (tmp_path / "run" / "checkpoints" / "step-000000").exists()
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()
    assert events[-1] == {**events[-1], "event": "finished", "status": "stopped", "step": 0}


def test_a_non_finite_gradient_skips_its_step_and_names_where_it_came_from(tmp_path, varied_env):
    """A learning rate of 1e30 throws the weights past float32's range in one Adam step: the next step's forward
    overflows. The step is skipped (the weights are not moved by NaN), the run goes on, and the warning names the
    tensors whose gradients are not finite and that the loss already was — the clip must not have turned every
    gradient into NaN before they are counted."""
    cfg = tiny_config(**{"train.steps": 2, "train.eval_every": 0, "data.eval_size": 2, "optim.lr": 1e30})
    cfg["optim"]["warmup_steps"] = 0
    proc = run_trainer(tmp_path, cfg, varied_env.url)
    assert proc.returncode == 0, proc.stderr
    warnings = [e["message"] for e in lines(tmp_path / "run" / "events.jsonl") if e.get("event") == "warning"]
    nonfinite = [w for w in warnings if "gradient norm is not finite" in w]
    assert nonfinite, warnings
    w = nonfinite[0]
    assert w.startswith("step 2: ") and "this optimizer step was skipped" in w
    counted = w.split("non-finite gradients in ")[1]
    bad, total = int(counted.split(" of ")[0]), int(counted.split(" of ")[1].split(" ")[0])
    assert 0 < bad <= total and total > 3
    assert "(backbone.tok.weight, " in w  # the parameters by name, the policy's first
    assert "a micro-batch's loss was already not finite (the forward overflowed)" in w
    m = lines(tmp_path / "run" / "metrics.jsonl")[-1]
    assert m["step"] == 2 and m["actor/grad_norm"] is None and m["actor/skipped_updates"] == 1.0  # NaN is null
