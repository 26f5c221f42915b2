"""engine "trl" (TRL 1.16's GRPOTrainer from PyPI, on CPU) against the real env server: examples/trl-tiny.run.json for
a few steps (the run directory, our metric names, records that pass the mask audit and carry rollout_logprob);
env-masked positions get exactly zero gradient in TRL's own loss; the same scripted actions through the builtin and
the TRL rollout give identical ids, roles and masks; two processes through accelerate launch (gloo) record every
rollout once; SIGTERM stops after a checkpoint and --resume finishes; the config mapping and its refusals.

The only stand-ins: a scripted generator for the model's turns (as TRL's own tests patch `generate`), and, for the
vLLM turn generator, a stand-in for vLLM's LLM (no GPU or vLLM here)."""

from __future__ import annotations

import io
import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import LOGPROB_AGREEMENT, ROOT, trainer_env
from test_train import SCHEMAS, audit_rollout, jsonschema, lines, run_trainer

pytest.importorskip("trl")
import torch  # noqa: E402

from search_agent_trainer.config import config_from_dict  # noqa: E402
from search_agent_trainer.engines.trl import options  # noqa: E402
from search_agent_trainer.generation import GeneratedTurn  # noqa: E402
from search_agent_trainer.schema import ConfigError  # noqa: E402

EXAMPLES = ROOT / "examples"


def trl_tiny(**overrides) -> dict:
    """examples/trl-tiny.run.json with its paths made absolute and `overrides` (dotted keys) applied."""
    cfg = json.loads((EXAMPLES / "trl-tiny.run.json").read_text())
    for section, key in (("data", "train"), ("data", "eval"), ("model", "path")):
        cfg[section][key] = str(EXAMPLES / cfg[section][key])
    cfg.pop("$schema", None)
    for path, value in overrides.items():
        node = cfg
        *parents, last = path.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    return cfg


def records(run: Path, name: str) -> list[dict]:
    return lines(run / "rollouts" / f"{name}.jsonl")


# -- a few steps of the example -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory, varied_env):
    tmp = tmp_path_factory.mktemp("trl")
    cfg = trl_tiny(**{"train.steps": 3, "train.eval_every": 3, "train.checkpoint_every": 2, "data.eval_size": 4})
    proc = run_trainer(tmp, cfg, varied_env.url, timeout=600)
    return tmp / "run", proc


def test_a_trl_run_writes_the_run_directory_of_every_engine(trl_run):
    run, proc = trl_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_json = json.loads((run / "run.json").read_text())
    jsonschema.validate(run_json, SCHEMAS["run"])
    assert run_json["engine"] == "trl" and run_json["status"] == "finished" and run_json["step"] == 3
    assert run_json["versions"]["trl"].startswith("1.16.")
    events = [json.loads(l) for l in proc.stdout.splitlines()]
    assert events == lines(run / "events.jsonl")  # rank 0's events only, nothing else on stdout
    for e in events:
        jsonschema.validate(e, SCHEMAS["event"])
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and events[0]["engine"] == "trl" and kinds[-1] == "finished"
    assert [(e["step"], e["phase"]) for e in events if e["event"] == "progress"][:4] == [
        (0, "eval"),
        (1, "rollout"),
        (1, "reward"),
        (1, "update"),
    ]
    assert [e["step"] for e in events if e["event"] == "metrics"] == [1, 2, 3]
    assert [e["step"] for e in events if e["event"] == "eval"] == [0, 3]
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [2, 3]
    # TRL's own checkpoints (weights, optimizer, scheduler, RNG, trainer state) under our names
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    assert ckpts == ["step-000002", "step-000003"]
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in (run / "checkpoints" / "step-000003").iterdir()
    }
    assert (
        run / "initial-model" / "config.json"
    ).exists()  # the random initial weights, for the reference and a resume


def test_trl_metrics_have_our_names_and_trls_own_under_trl(trl_run):
    run, _ = trl_run
    metrics = lines(run / "metrics.jsonl")
    for m in metrics:
        jsonschema.validate(m, SCHEMAS["metrics"])
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    assert "val/em" in metrics[0] and "actor/entropy" not in metrics[0]
    # The held-out metrics are the builtin trainer's (the demo data says each question's hops)
    hops = {k.rsplit("/", 1)[1] for k in metrics[0] if k.startswith("val/em_by_hops/")}
    assert hops and all(
        f"val/searches_by_hops/{h}" in metrics[0] and f"val/em_by_hops/{h}" in metrics[-1] for h in hops
    )
    for key in (
        "critic/score/mean",
        "reward/frac_zero_std_groups",
        "response_length/mean",
        "env/number_of_valid_search",
        "env/ratio_of_valid_action",
        "mask/generated_tokens",
        "mask/feedback_tokens",
        "mask/loss_fraction",
        "actor/entropy",
        "actor/kl_loss",
        "actor/grad_norm",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/lr",
        "timing_s/rollout",
        "timing_s/step",
        "perf/throughput",
        "perf/rollout_tokens_per_s",
        "trl/loss",
        "trl/entropy",
        "trl/rewards/env_reward/mean",
        "trl/completions/mean_length",
    ):
        assert key in metrics[1], key
    assert any(m["actor/grad_norm"] > 0 for m in metrics[1:])  # the varied reward gives the groups a signal
    assert metrics[2]["actor/kl_loss"] > 0  # the policy moved away from the reference after the first update
    for m in metrics[1:]:
        assert m["actor/ppo_kl"] == 0.0  # one epoch over one mini-batch: TRL's old log-probs are the update's own
        assert m["rollout/logprob_diff_max"] < LOGPROB_AGREEMENT  # our sampler's log-probs agree with TRL's forward
        assert m["critic/score/mean"] == pytest.approx(m["trl/rewards/env_reward/mean"], abs=1e-6)  # one reward, ours


def test_trl_records_pass_the_mask_audit_and_carry_rollout_logprob(trl_run):
    run, _ = trl_run
    cfg = trl_tiny()
    n, batch = cfg["rollout"]["n"], cfg["rollout"]["batch_size"]
    for step in (1, 2, 3):
        recs = records(run, f"step-{step:06d}")
        assert len(recs) == n * batch and len({r["id"] for r in recs}) == n * batch
        assert sorted((r["group"], r["sample"]) for r in recs) == [
            (f"train:{step}:{g}", k) for g in range(batch) for k in range(n)
        ]
        for r in recs:
            audit_rollout(r)
            t = r["tokens"]
            assert r["v"] == 2 and {
                "text",
                "ids",
                "role",
                "loss_mask",
                "rollout_logprob",
                "logprob",
                "ref_logprob",
                "advantage",
                "entropy",
            } <= set(t)
            assert "feedback" in t["role"]  # a random model's turns are invalid actions: environment tokens to mask
            P = t["role"].index("generated")
            # TRL's advantage: one per sequence, on its loss tokens
            assert len({a for a in t["advantage"][P:] if a is not None}) == 1
            assert [a is not None for a in t["advantage"]] == [bool(m) for m in t["loss_mask"]]
            for role, m, sampled, trained in zip(t["role"], t["loss_mask"], t["rollout_logprob"], t["logprob"]):
                assert (sampled is not None and sampled < 0) == (role == "generated") and (trained is not None) == bool(
                    m
                )
                if m:
                    assert sampled == pytest.approx(trained, abs=1e-4)
    val = records(run, "val-step-000000")
    assert len(val) == 4 and sorted(r["group"] for r in val) == [f"val:0:{g}" for g in range(4)]


# -- TRL's loss: env-masked positions get exactly zero gradient ---------------------------------------------------


def _engine(tmp: Path, env_url: str, **overrides):
    from search_agent_trainer.engines.trl import quiet_libraries
    from search_agent_trainer.engines.trl.engine import TRLEngine

    quiet_libraries()
    eng = TRLEngine(config_from_dict(trl_tiny(**overrides)), tmp, env_url, stdout=io.StringIO())
    eng.setup()
    return eng


def test_env_masked_positions_get_exactly_zero_gradient_in_trls_loss(tmp_path, varied_env):
    """TRL's `_compute_loss` (policy term, β·KL, entropy bonus) on a batch our rollout_func made: the gradient of the
    loss with respect to each position's log-prob and entropy is exactly 0 where env_mask is 0 (retrieved and feedback
    tokens) and where there is padding, and not 0 on generated tokens."""
    eng = _engine(tmp_path / "run", varied_env.url, **{"algorithm.entropy_coef": 0.01, "algorithm.kl_coef": 0.05})
    t = eng.trl
    batch = next(iter(t.get_train_dataloader()))
    t.model.train()
    out = t._generate_and_score_completions(batch)
    cmask, tmask = out["completion_mask"], out["tool_mask"]
    assert int(((tmask == 0) & (cmask == 1)).sum()) > 0, "the batch has environment tokens"
    B = cmask.shape[0]
    out["advantages"] = torch.tensor([(-1.0) ** i * (1 + i / B) for i in range(B)])  # a signal on every sequence
    leaves = {}
    real = t._get_per_token_logps_and_entropies

    def as_leaves(model, *a, **k):
        logps, entropies, aux = real(model, *a, **k)
        leaves["logps"] = logps.detach().requires_grad_(True)
        leaves["entropy"] = entropies.detach().requires_grad_(True)
        return leaves["logps"], leaves["entropy"], aux

    t._get_per_token_logps_and_entropies = as_leaves
    t.current_gradient_accumulation_steps = t.args.gradient_accumulation_steps  # what TRL's loop sets per window
    loss = t._compute_loss(t.model, out)
    loss.backward()
    trained = (cmask * tmask).bool()
    for name in ("logps", "entropy"):
        g = leaves[name].grad
        assert torch.equal(g[~trained], torch.zeros_like(g[~trained])), name
        assert bool((g[trained] != 0).all()), name


# -- one rollout implementation: the builtin and the TRL rollout give the same tokens -----------------------------


class ScriptedActions:
    """Stands in for the model (as TRL's tests patch `generate`): a turn's text from the context so far: an invalid
    action first, then a search for the question, then an answer."""

    def __init__(self, tok):
        self.tok = tok

    def generate(self, contexts, budgets, keys=None):
        out = []
        for ctx, budget in zip(contexts, budgets):
            text = self.tok.decode(ctx)
            q = re.search(r"Question: (.*?)\n", text).group(1)
            k = text.count("<information>") + text.count("My previous action is invalid")
            turn = ("let me think first", f"<think> search </think><search> {q} </search>", "<answer> Paris </answer>")[
                min(k, 2)
            ]
            ids = self.tok.encode(turn)[:budget]
            out.append(GeneratedTurn(ids, [-0.5] * len(ids)))
        return out

    def release(self):
        pass

    def wave_size(self, longest_context, response_length, n=1):
        return n * 64  # every trajectory in one wave, as LMGenerator with room enough


def test_the_same_scripted_actions_give_the_same_ids_roles_and_masks_through_both_engines(tmp_path, varied_env):
    from search_agent_trainer.batch import make_batch
    from search_agent_trainer.train import Trainer

    over = {"rollout.max_turns": 3, "rollout.max_turn_tokens": 40}
    eng = _engine(tmp_path / "trl", varied_env.url, **over)
    eng._generator = lambda step, greedy: ScriptedActions(eng.tok)
    batch = next(iter(eng.trl.get_train_dataloader()))
    eng.trl.model.train()
    out = eng.trl._generate_and_score_completions(batch)
    # the records the recorder would write of TRL's tensors (the engine's checks, slices and columns)
    from search_agent_trainer import token_store
    from search_agent_trainer.recorder import records_of

    B = len(eng.batch["trajs"])
    data = eng._piece_data(
        eng._piece(list(range(B)), 0, eng._local_rows()), set(range(B)), eng.batch["trajs"], "t", 1, eng._logprob_meta()
    )
    data.cols.vocab = token_store.vocab_of(data.cols.ids, eng.tok.token_texts)
    trl_rows = records_of(data)

    cfg = trl_tiny(**over)
    cfg["engine"] = "builtin"
    builtin = Trainer(config_from_dict(cfg), tmp_path / "builtin", varied_env.url, stdout=io.StringIO())
    builtin.setup()
    builtin._generator = lambda step, greedy: ScriptedActions(builtin.tok)
    n = cfg["rollout"]["n"]
    chosen = [x["sas_example"] for x in batch][::n]  # TRL's rows: each prompt's n copies side by side
    trajs = builtin._rollouts(
        [builtin.train_set[i] for i in chosen], [builtin.train_prompts[i] for i in chosen], n, 1, greedy=False
    )
    mb = make_batch(trajs, builtin.tok.pad_id, True, False)
    R = mb.window

    assert len(trl_rows) == len(trajs) == out["completion_ids"].shape[0]
    roles_seen = set()
    for i, (rec, t) in enumerate(zip(trl_rows, trajs)):
        tok = rec["tokens"]
        assert tok["ids"] == t.prompt_ids + t.ids, i
        assert tok["role"] == ["prompt"] * len(t.prompt_ids) + t.roles, i
        assert tok["loss_mask"] == [0] * len(t.prompt_ids) + [
            int(v) for v in mb.loss_mask[i, R - len(t.ids) :].tolist()
        ], i
        roles_seen |= set(t.roles)
    assert roles_seen == {"generated", "retrieved", "feedback"}


# -- two processes --------------------------------------------------------------------------------------------------


def test_two_processes_through_accelerate_launch_record_every_rollout_once(tmp_path, varied_env):
    """`devices: 2` on CPU: accelerate launch, gloo. 3 prompts × 4 samples over 2 processes: a group straddles them.
    At step 3 rank 1 alone crashes (`test.crash_rank`) while rank 0 waits for it in a collective: the run's error is
    rank 1's, not the collective's that rank 0 failed with after it."""
    cfg = trl_tiny(
        **{
            "devices": 2,
            "rollout.batch_size": 3,
            "train.steps": 3,
            "train.eval_every": 2,
            "train.checkpoint_every": 2,
            "data.eval_size": 5,
            "test": {"crash_at_step": 3, "crash_rank": 1},
        }
    )
    proc = run_trainer(tmp_path, cfg, varied_env.url, timeout=900)
    assert proc.returncode == 1, proc.stderr[-4000:]
    run = tmp_path / "run"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["step"] == 2, info
    assert info["error"]["message"].startswith("rank 1: RuntimeError: test.crash_at_step: a crash at step 3"), info
    assert info["error"]["rank"] == 1 and "on purpose" in info["error"]["traceback"]
    assert "accelerate.commands.launch" in proc.stderr and "[rank 1]" in proc.stderr  # both processes trained
    assert "has no attribute" not in proc.stderr  # rank 1 reported its error, nothing failed while reporting it
    events = lines(run / "events.jsonl")
    assert [json.loads(l) for l in proc.stdout.splitlines()] == events
    assert events[-1]["event"] == "error" and events[-1]["message"] == info["error"]["message"]
    assert [e["event"] for e in events].count("started") == 1 and events[0]["processes"] == 2
    assert [e["step"] for e in events if e["event"] == "metrics"] == [1, 2]  # from rank 0 only
    assert [m["step"] for m in lines(run / "metrics.jsonl")] == [0, 1, 2]
    for step in (1, 2):
        recs = records(run, f"step-{step:06d}")
        assert sorted((r["group"], r["sample"]) for r in recs) == [
            (f"train:{step}:{g}", k) for g in range(3) for k in range(4)
        ]
        for r in recs:
            audit_rollout(r)
    val = records(run, "val-step-000002")
    assert sorted(r["group"] for r in val) == [f"val:2:{g}" for g in range(5)]
    assert (run / "checkpoints" / "step-000002" / "trainer_state.json").exists()

    # resumed on two processes without the crash, the run finishes: exit 0, one more step recorded once, the final
    # checkpoint and evaluation, run.json finished (a two-process run had only ever failed or stopped in the tests)
    del cfg["test"]
    resumed = run_trainer(tmp_path, cfg, varied_env.url, "--resume", timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["step"] == 3 and "error" not in info, info
    started = [e for e in lines(run / "events.jsonl") if e["event"] == "started"]
    assert started[-1]["resumed"] is True and started[-1]["step"] == 2 and started[-1]["processes"] == 2
    assert [m["step"] for m in lines(run / "metrics.jsonl")] == [0, 1, 2, 3]
    recs = records(run, "step-000003")
    assert sorted((r["group"], r["sample"]) for r in recs) == [(f"train:3:{g}", k) for g in range(3) for k in range(4)]
    assert sorted(r["group"] for r in records(run, "val-step-000003")) == [f"val:3:{g}" for g in range(5)]
    state = json.loads((run / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["global_step"] == 3 * started[-1]["trl_steps_per_step"]  # TRL's own trainer state, continued


# -- stop and resume ------------------------------------------------------------------------------------------------


def test_sigterm_stops_after_a_checkpoint_and_resume_finishes_the_run(tmp_path, varied_env):
    cfg = trl_tiny(
        **{
            "train.steps": 3,
            "train.eval_every": 0,
            "train.checkpoint_every": 0,
            "data.eval_size": 1,
            "test": {"step_delay_s": 1.0},
        }
    )
    path = tmp_path / "c.run.json"
    path.write_text(json.dumps(cfg))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search_agent_trainer",
            "--config",
            str(path),
            "--run-dir",
            str(run),
            "--env-url",
            varied_env.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=trainer_env(),
    )
    for line in proc.stdout:
        e = json.loads(line)
        if e["event"] == "progress" and e["phase"] == "update" and e["step"] == 1:
            proc.send_signal(signal.SIGTERM)
            break
    proc.stdout.read()
    assert proc.wait(timeout=300) == 0
    stopped = json.loads((run / "run.json").read_text())
    assert stopped["status"] == "stopped" and stopped["stop_reason"] == "signal" and stopped["step"] == 1
    assert (run / "checkpoints" / "step-000001" / "trainer_state.json").exists()

    resumed = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer", "--resume", "--run-dir", str(run), "--env-url", varied_env.url],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    started = [e for e in lines(run / "events.jsonl") if e["event"] == "started"]
    assert started[-1]["resumed"] is True and started[-1]["step"] == 1
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert [m["step"] for m in lines(run / "metrics.jsonl")] == [0, 1, 2, 3]
    # the token store's steps
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == [
        "step-000001",
        "step-000002",
        "step-000003",
        "val-step-000000",
        "val-step-000003",
    ]
    state = json.loads((run / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["global_step"] == 3  # TRL's own trainer state, continued


# -- the config: the mapping onto GRPOConfig, the trl section, the refusals -----------------------------------------


def test_what_trl_cannot_do_is_refused_naming_the_key_and_the_engines_that_can():
    def problems(**o) -> str:
        with pytest.raises(ConfigError) as e:
            config_from_dict(trl_tiny(**o))
        return str(e.value)

    assert 'algorithm.name: "ppo" is not supported by engine "trl"' in problems(**{"algorithm.name": "ppo"})
    assert 'engines that can: "builtin", "verl"' in problems(**{"algorithm.name": "reinforce++"})
    assert "algorithm.kl_in_reward: true" in problems(**{"algorithm.kl_in_reward": True})
    assert "algorithm.mask_advantages: true" in problems(**{"algorithm.mask_advantages": True})
    assert "algorithm.clip_ratio_c: 3.0" in problems(**{"algorithm.clip_ratio_c": 3.0})
    assert 'model.kind: "tiny" is not supported by engine "trl"' in problems(**{"model.kind": "tiny"})
    assert 'data.hops_mix: this section is not supported by engine "trl"' in problems(
        **{"data.hops_mix": {"1": 1, "2": 3}}
    )
    assert "hops_mix" not in config_from_dict(trl_tiny()).data, (
        "absent, it stays absent (no defaulted empty mix to refuse)"
    )
    cfg = trl_tiny(**{"trl": {"use_vllm": False}})
    cfg["engine"] = "builtin"
    with pytest.raises(
        ConfigError, match='trl: this section is not supported by engine "builtin".*engines that can: "trl"'
    ):
        config_from_dict(cfg)
    cfg = trl_tiny(devices=2)
    cfg["engine"] = "builtin"
    with pytest.raises(ConfigError, match='devices: 2 is not supported by engine "builtin".*"trl", "verl"'):
        config_from_dict(cfg)


def test_the_trl_section_passes_grpo_config_options_and_names_the_wrong_ones():
    fields = options.grpo_fields()
    assert (
        options.passthrough_problems(
            {"use_vllm": True, "vllm_gpu_memory_utilization": 0.4, "num_processes": 2, "log_level": "info"}, fields
        )
        == []
    )
    got = options.passthrough_problems(
        {"bta": 0.1, "beta": 0.1, "mask_truncated_completions": True, "vllm_mode": "server"}, fields
    )
    assert got[0] == "trl.bta: not an option of TRL's GRPOConfig (nor of the launch: num_processes, accelerate_config)"
    assert got[1] == "trl.beta: set by algorithm.kl_coef (the shared key), not in the trl section"
    assert got[2].startswith("trl.mask_truncated_completions: not supported by the trl engine")
    assert got[3].startswith("trl.vllm_mode: 'server' is not supported")


def test_vllm_with_a_nucleus_corrects_per_token_and_refuses_a_sequence_level_correction():
    """TRL weights a sequence by exp Σ (trainer − vLLM) by default; vLLM's processed log-probs of a nucleus exceed the
    trainer's by log Z at every token, so at top_p < 1 the engine asks for TRL's token-level correction, and refuses a
    sequence-level one named in the trl section (vLLM itself is only needed at run time)."""

    def kw(**o):
        cfg = config_from_dict(trl_tiny(**o))
        return cfg, options.grpo_kwargs(cfg, Path("/tmp/run"), options.plan(cfg, 1)[0], bf16=True, cpu=False)

    cfg, k = kw(**{"rollout.top_p": 0.9, "trl": {"use_vllm": True}})
    assert k["vllm_importance_sampling_mode"] == "token_mask" and options.rollout_logprob_kind(cfg) == "processed"
    assert options.importance_sampling_problems(cfg) == []
    for top_p, trl in ((1.0, {"use_vllm": True}), (0.9, {"use_vllm": False})):
        cfg, k = kw(**{"rollout.top_p": top_p, "trl": trl})
        assert "vllm_importance_sampling_mode" not in k and options.rollout_logprob_kind(cfg) == "raw"  # TRL's default
    cfg, k = kw(**{"rollout.top_p": 0.9, "trl": {"use_vllm": True, "vllm_importance_sampling_mode": "sequence_mask"}})
    [problem] = options.importance_sampling_problems(cfg)
    assert (
        problem.startswith("trl.vllm_importance_sampling_mode: 'sequence_mask' with trl.use_vllm and rollout.top_p 0.9")
        and "token_mask" in problem
    )
    cfg, _ = kw(
        **{
            "rollout.top_p": 0.9,
            "trl": {
                "use_vllm": True,
                "vllm_importance_sampling_mode": "sequence_mask",
                "vllm_importance_sampling_correction": False,
            },
        }
    )
    assert options.importance_sampling_problems(cfg) == []  # no correction, nothing to collapse
    cfg, _ = kw(**{"rollout.top_p": 0.9, "trl": {"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"}})
    assert options.importance_sampling_problems(cfg) == []


def test_the_reference_is_built_in_bf16_under_bf16_compute_and_vllm_sleep_mode_is_allowed():
    from trl import GRPOConfig

    def config(bf16: bool, **o):
        cfg = config_from_dict(trl_tiny(**o))
        return GRPOConfig(
            **options.grpo_kwargs(cfg, Path("/tmp/run"), options.plan(cfg, 1)[0], bf16=bf16, cpu=not bf16)
        )

    assert config(False).model_init_kwargs is None  # fp32 compute: the policy's dtype
    assert config(False).gradient_checkpointing is True  # unset: TRL's own default
    assert config(False, **{"model.gradient_checkpointing": False}).gradient_checkpointing is False
    assert options.reference_dtype(config_from_dict(trl_tiny()), bf16=True) == "bfloat16"
    # no reference
    assert options.reference_dtype(config_from_dict(trl_tiny(**{"algorithm.kl_coef": 0.0})), bf16=True) is None
    # the adapter off
    assert options.reference_dtype(config_from_dict(trl_tiny(**{"model.lora": {"r": 4}})), bf16=True) is None
    assert options.passthrough_problems({"vllm_enable_sleep_mode": True}, options.grpo_fields()) == []


def test_the_one_gpu_trl_recipe_maps_onto_trl_with_sleep_mode_and_a_bf16_reference():
    cfg = config_from_dict(
        json.loads((EXAMPLES / "one-gpu" / "qwen2.5-3b-grpo-trl.run.json").read_text()), base=EXAMPLES / "one-gpu"
    )
    p, problems = options.plan(cfg, 1)
    assert (
        problems == []
        and options.passthrough_problems(dict(cfg.trl), options.grpo_fields()) == []
        and options.importance_sampling_problems(cfg) == []
    )
    k = options.grpo_kwargs(cfg, Path("/tmp/run"), p, bf16=True, cpu=False)
    assert (
        k["vllm_enable_sleep_mode"] is True
        and k["model_init_kwargs"] == {"dtype": "bfloat16"}
        and k["gradient_checkpointing"] is True
    )
    # Search-R1's 512 × 5 in mini-batches of 256, on one process
    assert (p.micro, p.accumulation, p.steps_per_generation, p.trl_steps) == (
        4,
        64,
        640,
        10,
    )
    m = options.memory_inputs(cfg, 1, bf16=True)  # what the memory planner reads
    assert (
        m["reference_dtype"],
        m["gradient_checkpointing"],
        m["generation"],
        m["vllm_gpu_memory_utilization"],
        m["vllm_sleep_mode"],
        m["vllm_max_num_seqs"],
    ) == ("bfloat16", True, "vllm", 0.2, True, 2560)


def test_the_trl_defaults_the_memory_planner_reads_are_the_installed_grpoconfigs():
    import dataclasses

    from trl import GRPOConfig

    fields = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert {
        k: fields[k] for k in options.TRL_DEFAULTS
    } == options.TRL_DEFAULTS  # src/core/plan/trl.ts's TRL_DEFAULTS: the same (plan-engines.test.ts)
    cfg = config_from_dict(trl_tiny(**{"trl.model_init_kwargs": {"dtype": "float16"}}))
    # the trl section's own, as TRL builds it
    assert options.memory_inputs(cfg, 1, bf16=True)["reference_dtype"] == "float16"


class NucleusLLM:
    """TEST DOUBLE for vllm.LLM (no GPU or vLLM here): samples each request's tokens from the policy itself at the
    request's temperature within its top_p nucleus, and returns what vLLM's processed_logprobs are: each sampled
    token's log-prob renormalised over its nucleus. It refuses to generate while its KV cache sleeps."""

    def __init__(self, model):
        self.model = model
        self.asleep = {"weights", "kv_cache"}  # TRL puts a sleep-mode LLM to sleep as soon as it is built
        self.calls: list[str] = []

    def wake_up(self, tags):
        self.calls.append(f"wake {','.join(tags)}")
        self.asleep -= set(tags)

    def sleep(self, level):
        self.calls.append(f"sleep {level}")
        self.asleep = {"weights", "kv_cache"}

    def generate(self, prompts, sampling_params, use_tqdm):
        assert not self.asleep, f"generate while asleep: {self.asleep}"
        self.calls.append("generate")
        outs = []
        for p, sp in zip(prompts, sampling_params):
            kw = sp.kw
            g = torch.Generator().manual_seed(kw["seed"])
            ids, lps = list(p["prompt_token_ids"]), []
            with torch.no_grad():
                for _ in range(kw["max_tokens"]):
                    probs = torch.softmax(
                        self.model(torch.tensor([ids])).logits[0, -1].double() / kw["temperature"], -1
                    )
                    top, idx = probs.sort(descending=True)
                    top = top * ((top.cumsum(-1) - top) < kw["top_p"])  # the nucleus: mass reaching top_p
                    j = int(torch.multinomial(top / top.sum(), 1, generator=g))
                    tok = int(idx[j])
                    ids.append(tok)
                    lps.append({tok: SimpleNamespace(logprob=float(torch.log(top[j] / top.sum())))})
                    if tok in kw["stop_token_ids"]:
                        break
            outs.append(
                SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids[len(p["prompt_token_ids"]) :], logprobs=lps)])
            )
        return outs


def test_vllm_nucleus_log_probs_leave_the_weights_the_run_uses_near_one(tmp_path, varied_env, monkeypatch):
    """Our rollout feeds TRL vLLM's renormalised nucleus log-probs (top_p 0.95, Search-R1's, from a stand-in LLM
    sampling from the policy itself: the only mismatch is the nucleus's). TRL's own `_generate_and_score_completions`
    computes the importance weights with the correction this engine configures (token_mask): each weight is its
    token's nucleus mass, in [top_p, 1] (a random model's distribution is flat: its nuclei hold ≈ top_p); the
    sequence-level weight TRL's default gives a 1,000-token trajectory collapses. The records say what their
    rollout_logprob are; sleep mode wakes the LLM for the turns and puts it back to sleep."""
    top_p = 0.95
    eng = _engine(tmp_path / "run", varied_env.url, **{"rollout.top_p": top_p, "trl": {"vllm_enable_sleep_mode": True}})
    # TEST DOUBLE: vLLM's SamplingParams (after TRL's imports, which look for vLLM)
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(kw=kw)))
    t = eng.trl
    # What GRPOTrainer sets up with use_vllm (it would import vLLM): the flags, and a stand-in for its vLLM backend.
    eng.cfg["trl"]["use_vllm"] = True
    mode = options.importance_sampling(eng.cfg)["vllm_importance_sampling_mode"]
    t.use_vllm, t.vllm_importance_sampling_correction, t.vllm_importance_sampling_mode = True, True, mode
    llm = NucleusLLM(eng.policy.backbone)
    synced = []

    def sync_weights():
        synced.append(t.state.global_step)
        llm.wake_up(["weights"])
        backend._llm_weights_sleeping = False

    backend = SimpleNamespace(llm=llm, enable_sleep_mode=True, _llm_weights_sleeping=True, sync_weights=sync_weights)
    t.vllm_generation, t._last_loaded_step = backend, -1
    eng.settings["rollout_logprob_kind"] = options.rollout_logprob_kind(eng.cfg)
    batch = next(iter(t.get_train_dataloader()))
    t.model.train()
    out = t._generate_and_score_completions(batch)
    assert (
        synced == [0]
        and llm.calls[:2] == ["wake weights", "wake kv_cache"]
        and llm.calls[-1] == "sleep 2"
        and backend._llm_weights_sleeping
    )
    mask = (out["completion_mask"] * out["tool_mask"]).bool()
    weights = out["importance_sampling_ratio"][mask]
    assert mask.sum() > 50 and out["importance_sampling_ratio"].shape == mask.shape  # one weight per token
    # near 1: never below the nucleus's mass
    assert float(weights.min()) >= top_p - 1e-4 and float(weights.max()) <= 1 + 1e-4
    per_token = float(((out["old_per_token_logps"] - out["sampling_per_token_logps"]) * mask).sum() / mask.sum())
    assert per_token < 0 and math.exp(1000 * per_token) < 1e-6, (
        "TRL's default, exp Σ(trainer − vLLM) over a 1,000-token trajectory, collapses"
    )
    # the records the recorder would write of this step (the engine's slices and columns, with its log-prob meta)
    from search_agent_trainer import token_store
    from search_agent_trainer.recorder import records_of

    B = len(eng.batch["trajs"])
    data = eng._piece_data(
        eng._piece(list(range(B)), 0, eng._local_rows()), set(range(B)), eng.batch["trajs"], "t", 1, eng._logprob_meta()
    )
    data.cols.vocab = token_store.vocab_of(data.cols.ids, eng.tok.token_texts)
    recs = records_of(data)
    assert len(recs) == B and all(
        r["meta"]["rollout_logprob_kind"] == "processed" and r["meta"]["rollout_top_p"] == top_p for r in recs
    )
    # the nucleus's log-probs recorded
    assert all(any(x is not None for x in r["tokens"]["rollout_logprob"]) for r in recs)


def test_an_unknown_trl_option_stops_the_trainer_with_exit_code_2(tmp_path, capsys):
    from search_agent_trainer.__main__ import main

    path = tmp_path / "c.run.json"
    path.write_text(json.dumps(trl_tiny(**{"trl": {"num_generation": 4}})))
    assert main(["--config", str(path), "--run-dir", str(tmp_path / "run"), "--env-url", "http://127.0.0.1:9"]) == 2
    event = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (
        event["event"] == "error"
        and "trl.num_generation: not an option of TRL's GRPOConfig" in event["message"]
        and str(path) in event["message"]
    )
    assert not (tmp_path / "run").exists()


def test_the_shared_keys_map_onto_grpo_config():
    from trl import GRPOConfig

    cfg = config_from_dict(
        trl_tiny(
            **{
                "rollout.batch_size": 4,
                "rollout.n": 4,
                "rollout.temperature": 0.9,
                "rollout.max_response_length": 300,
                "optim.mini_batch_size": 8,
                "optim.micro_batch_size": 4,
                "optim.ppo_epochs": 2,
                "optim.warmup_steps": 3,
                "optim.lr_schedule": "cosine",
                "optim.min_lr_ratio": 0.1,
                "algorithm.norm_adv_by_std": False,
                "algorithm.loss_agg_mode": "seq-mean-token-sum-norm",
                "algorithm.clip_ratio_high": 0.28,
                "algorithm.kl_coef": 0.001,
                "train.steps": 5,
                "trl": {"vllm_gpu_memory_utilization": 0.5},
            }
        )
    )
    p, problems = options.plan(cfg, 1)
    # 16 sequences, 2 optimizer steps × 2 epochs
    assert problems == [] and (p.accumulation, p.steps_per_generation, p.trl_steps) == (
        2,
        4,
        4,
    )
    g = GRPOConfig(**options.grpo_kwargs(cfg, Path("/tmp/run"), p, bf16=False, cpu=True))
    assert (
        g.num_generations,
        g.per_device_train_batch_size,
        g.gradient_accumulation_steps,
        g.steps_per_generation,
        g.generation_batch_size,
    ) == (4, 4, 2, 4, 16)
    assert (g.num_iterations, g.max_steps, g.warmup_steps, g.logging_steps) == (2, 20, 12, 4)
    assert (
        g.loss_type,
        g.scale_rewards,
        g.beta,
        g.epsilon,
        g.epsilon_high,
        g.temperature,
        g.max_completion_length,
    ) == ("dr_grpo", "none", 0.001, 0.2, 0.28, 0.9, 300)
    assert g.lr_scheduler_type == "cosine_with_min_lr" and g.lr_scheduler_kwargs == {"min_lr_rate": 0.1}
    assert (
        g.use_bias_correction_kl is False
        and g.vllm_gpu_memory_utilization == 0.5
        and g.output_dir == "/tmp/run/checkpoints"
    )
    _, problems = options.plan(config_from_dict(trl_tiny(**{"rollout.batch_size": 3, "rollout.n": 3})), 2)
    assert problems and "rollout.batch_size × rollout.n (3 × 3 = 9 sequences) must be a multiple of" in problems[0]


def test_the_launch_command_for_several_processes(monkeypatch, tmp_path):
    from search_agent_trainer.engines.trl.launch import launch_command, supervise

    cfg = config_from_dict(trl_tiny(devices=2))
    cmd = launch_command(cfg, ["--run-dir", "r", "--env-url", "u", "--config", "c"], bf16=False)
    assert (
        cmd[1:3] == ["-m", "accelerate.commands.launch"]
        and cmd[cmd.index("--num_processes") + 1] == "2"
        and "--multi_gpu" in cmd
    )
    assert cmd[-8:] == ["-m", "search_agent_trainer", "--run-dir", "r", "--env-url", "u", "--config", "c"]
    cfg = config_from_dict(trl_tiny(**{"trl": {"accelerate_config": "two-nodes.yaml"}}), base=Path("/cfg"))
    cmd = launch_command(cfg, [], bf16=True)
    assert (
        cmd[cmd.index("--config_file") + 1] == "/cfg/two-nodes.yaml"
        and "--num_processes" not in cmd
        and "--multi_gpu" not in cmd
    )
    assert "--machine_rank" not in cmd
    # A multi-node launch: each machine's rank; only machine 0 settles run.json (the others pass the launcher's code on).
    monkeypatch.setenv("SAS_MACHINE_RANK", "1")
    cmd = launch_command(cfg, [], bf16=True)
    assert cmd[cmd.index("--machine_rank") + 1] == "1"
    (tmp_path / "run.json").write_text(json.dumps({"status": "running", "pid": 1}))
    monkeypatch.setattr(
        "search_agent_trainer.engines.trl.launch.launch_command",
        lambda *_a: [sys.executable, "-c", "raise SystemExit(3)"],
    )
    assert supervise(cfg, str(tmp_path), [], bf16=False) == 3
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "running", "machine 0's to write"


def test_the_writer_of_the_other_processes_answers_whatever_the_shared_run_asks_of_a_writer():
    """Every attribute the shared run (run.py) and this engine use on their writer (`w.…`, `self.writer.…`), read from
    their source, exists on FollowerWriter: rank 1's writer once lacked `fail`, so a failing rank crashed again while
    reporting, with an AttributeError in place of its error."""
    import ast

    from search_agent_trainer.engines.trl.engine import FollowerWriter

    used = set()
    for module in ("run.py", "engines/trl/engine.py"):
        tree = ast.parse((ROOT / "trainer" / "search_agent_trainer" / module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "w") or (
                isinstance(v, ast.Attribute)
                and v.attr == "writer"
                and isinstance(v.value, ast.Name)
                and v.value.id == "self"
            ):
                used.add(node.attr)
    assert {"fail", "event", "warning", "finish"} <= used  # the reading finds what it is for
    follower = FollowerWriter(Path("/nonexistent"), 1)
    assert not [a for a in sorted(used) if not hasattr(follower, a)]


def test_the_first_error_of_a_launch_is_the_runs_whoever_failed_after_it(tmp_path):
    """The supervisor's reading (milliseconds, no processes): a process other than rank 0 that failed first is the
    run's error, whether rank 0 then wrote nothing (ended by the launcher) or failed waiting for it; an error rank 0
    failed with first stays the run's; a rank's error from an earlier launch (before a resume) is not this one's, and
    a file that cannot be read is left out. A stop asked after a process failed leaves the run failed with that
    process's error; one asked before it, stopped (the process failed because the others stopped)."""
    from search_agent_trainer.engines.trl.launch import _settle, rank_error_path, rank_errors, write_rank_error

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    write_rank_error(run, 1, "RuntimeError: boom", "Traceback …\nRuntimeError: boom")
    first = json.loads(rank_error_path(run, 1).read_text())
    rank_error_path(run, 2).write_text("{not json")
    assert rank_errors(run, since=first["time"]) == [first]
    assert rank_errors(run, since="9999-01-01T00:00:00.000Z") == []  # an earlier launch's

    def settle(status: str, rank0_at: str | None, asked: tuple = ()) -> dict:
        (run / "run.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "step": 4,
                    "error": {"message": "RuntimeError: [gloo] Connection closed by peer\nmore"},
                }
                if status == "failed"
                else {"status": status, "step": 4}
            )
        )
        (run / "events.jsonl").write_text(
            json.dumps({"event": "error", "time": rank0_at, "message": "gloo"}) + "\n" if rank0_at else ""
        )
        code = _settle(run, json.loads((run / "run.json").read_text()), 1, list(asked), [first])
        return {"code": code, **json.loads((run / "run.json").read_text())}

    ended = settle("running", None)  # rank 0 ended by the launcher, nothing written
    assert ended["code"] == 1 and ended["status"] == "failed" and ended["step"] == 4
    assert ended["error"] == {"message": "rank 1: RuntimeError: boom", "rank": 1, "traceback": first["traceback"]}
    after = settle("failed", "9999-01-01T00:00:00.000Z")  # rank 0 failed after rank 1
    assert after["code"] == 1 and after["error"]["message"] == (
        "rank 1: RuntimeError: boom (the first error of the launch; rank 0 failed after it: RuntimeError: [gloo] "
        "Connection closed by peer)"
    )
    assert lines(run / "events.jsonl")[-1]["message"] == after["error"]["message"]
    before = settle("failed", "2000-01-01T00:00:00.000Z")  # rank 0's own error came first
    assert before["code"] == 1 and before["error"]["message"].startswith("RuntimeError: [gloo]")
    # Stop pressed while rank 0 waited for a process that had already failed: the launcher ended them all
    late = settle("running", None, [("signal", "9999-01-01T00:00:00.000Z")])
    assert late["code"] == 1 and late["status"] == "failed" and "stop_reason" not in late
    assert late["error"]["message"] == "rank 1: RuntimeError: boom"
    assert [e["event"] for e in lines(run / "events.jsonl")] == ["error", "finished"]
    # a stop asked first: a process failing while the others stop does not make the run failed
    early = settle("running", None, [("host-gone", "2000-01-01T00:00:00.000Z")])
    assert early["code"] == 0 and early["status"] == "stopped" and early["stop_reason"] == "host-gone"
    assert "error" not in early


# -- vLLM's turns (a stand-in for vLLM: there is no GPU or vLLM here) -------------------------------------------------


def test_the_vllm_turn_generator_asks_for_each_turns_budget_and_stops_and_keeps_vllms_logprobs():
    from search_agent_trainer.engines.trl.vllm import VLLMTurnGenerator
    from search_agent_trainer.generation import Stops

    class Tok:
        eos_ids = {2}
        vocab_size = 4

        def token_texts(self, ids):
            return ["a", "b", "</s>", "c"][: len(list(ids))]

    class FakeLLM:
        """Stands in for vllm.LLM: answers each request with its budget of token 1, log-prob -0.25 each."""

        def __init__(self):
            self.calls = []

        def generate(self, prompts, sampling_params, use_tqdm):
            self.calls.append((prompts, sampling_params))
            outs = []
            for p in sampling_params:
                ids = [1] * p.kw["max_tokens"]
                outs.append(
                    SimpleNamespace(
                        outputs=[
                            SimpleNamespace(token_ids=ids, logprobs=[{1: SimpleNamespace(logprob=-0.25)} for _ in ids])
                        ]
                    )
                )
            return outs

    class Params:
        def __init__(self, **kw):
            self.kw = kw

    llm = FakeLLM()
    gen = VLLMTurnGenerator(
        llm, Stops(Tok(), ("</search>", "</answer>")), temperature=1.0, top_p=0.95, seed=7, sampling_params=Params
    )
    out = gen.generate([[5, 6], [7], [8]], [3, 0, 2])
    assert [o.ids for o in out] == [[1, 1, 1], [], [1, 1]] and out[0].logprobs == [-0.25] * 3
    prompts, params = llm.calls[0]
    assert prompts == [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [8]}]  # token ids, never text
    kw = params[0].kw
    assert (
        kw["stop"] == ["</search>", "</answer>"]
        and kw["stop_token_ids"] == [2]
        and kw["include_stop_str_in_output"] is True
    )
    assert (kw["max_tokens"], kw["top_p"], kw["logprobs"], params[1].kw["max_tokens"]) == (3, 0.95, 0, 2)
