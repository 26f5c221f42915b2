"""The veRL engine's configuration, checked by veRL's own code (in .venv-verl; skipped elsewhere): our overrides
composed with veRL 0.9.1's Hydra config and validated by its validate_config and config classes, what we refuse,
the datasets read by veRL's RLHFDataset, the `prepare` command, and the environment setup-verl.sh promises."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="the veRL engine's tests run in .venv-verl (npm run test:verl)")

from conftest import trainer_env as python_env  # noqa: E402
from hf_fixture import build_tiny_qwen2, demo_texts  # noqa: E402
from search_agent_trainer.data import load_dataset  # noqa: E402
from search_agent_trainer.engines.verl import SEARCH_R1_AGENT, TOOL_AGENT  # noqa: E402
from search_agent_trainer.engines.verl.dataset import example_of, write_verl_parquet  # noqa: E402
from search_agent_trainer.engines.verl.main import check_config, compose_config  # noqa: E402
from search_agent_trainer.engines.verl.overrides import (  # noqa: E402
    VerlConfigError,
    VerlLaunch,
    hydra_value,
    memory_inputs,
    verl_overrides,
)
from search_agent_trainer.schema import ConfigError  # noqa: E402
from verl_harness import DEMO, ROOT, run_config  # noqa: E402

ENV_URL = "http://127.0.0.1:8123"


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("hf") / "tiny-qwen2", demo_texts(DEMO))


def overrides_for(cfg, tmp: Path, **kw) -> list[str]:
    args = dict(
        run_dir=tmp / "run",
        env_url=ENV_URL,
        train_files=str(tmp / "train.parquet"),
        val_files=str(tmp / "val.parquet"),
        config_file=str(tmp / "cfg.json"),
        agent_loop_file=str(tmp / "loops.yaml"),
        tool_file=str(tmp / "tools.yaml"),
    )
    args.update(kw)
    return verl_overrides(cfg, VerlLaunch(**args))[0]


CASES = {
    "grpo": {},
    "ppo": {
        "algorithm": {"name": "ppo", "kl_coef": 0.001, "kl_in_reward": True, "kl_estimator": "k1"},
        "optim": {"mini_batch_size": 4, "micro_batch_size": 2, "critic_lr": 1e-5},
    },
    "reinforce++": {"algorithm": {"name": "reinforce++", "kl_coef": 0.0}},
    "dr-grpo-lora-cosine": {
        "algorithm": {
            "norm_adv_by_std": False,
            "clip_ratio_high": 0.28,
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "entropy_coef": 0.001,
        },
        "model": {"lora": {"r": 16, "alpha": 32}},
        "optim": {
            "mini_batch_size": 8,
            "micro_batch_size": 2,
            "warmup_steps": 2,
            "lr_schedule": "cosine",
            "min_lr_ratio": 0.1,
        },
        "verl": {"rollout": "sglang"},
    },  # with vLLM, veRL checks the LoRA rank against vLLM's (needs vLLM: GPU env)
    "multi-node sglang fsdp2": {
        "verl": {
            "rollout": "sglang",
            "tensor_parallel": 2,
            "gpus_per_node": 4,
            "nodes": 2,
            "strategy": "fsdp2",
            "param_offload": True,
            "agent_workers": 4,
        }
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_our_overrides_compose_with_verls_config_and_pass_its_checks(tmp_path, qwen_dir, case):
    cfg = run_config(qwen_dir, **CASES[case])
    config = compose_config(overrides_for(cfg, tmp_path))
    check_config(config)  # veRL's validate_config + its config dataclasses (the model directory is loaded too)
    a, r = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    n, algo = cfg.rollout.n, cfg.algorithm
    assert config.trainer.use_v1 is False and config.trainer.total_training_steps == cfg.train.steps
    assert config.data.train_batch_size == cfg.rollout.batch_size and r.n == n
    assert (
        a.ppo_mini_batch_size * n == cfg.optim.mini_batch_size
        and a.ppo_micro_batch_size_per_gpu == cfg.optim.micro_batch_size
    )
    assert (
        config.algorithm.adv_estimator
        == {"grpo": "grpo", "ppo": "gae", "reinforce++": "reinforce_plus_plus"}[algo.name]
    )
    assert config.algorithm.norm_adv_by_std_in_grpo == algo.norm_adv_by_std
    assert (a.clip_ratio_low, a.clip_ratio_high) == (algo.clip_ratio_low, algo.clip_ratio_high)
    assert a.use_kl_loss == (algo.kl_coef > 0 and not algo.kl_in_reward) and config.algorithm.use_kl_in_reward == (
        algo.kl_coef > 0 and algo.kl_in_reward
    )
    assert a.kl_loss_coef == algo.kl_coef == config.algorithm.kl_ctrl.kl_coef and a.kl_loss_type == algo.kl_estimator
    assert (
        a.optim.lr == cfg.optim.lr
        and a.optim.lr_scheduler_type == cfg.optim.lr_schedule
        and a.optim.weight_decay == cfg.optim.weight_decay
    )
    assert a.entropy_coeff == algo.entropy_coef and a.loss_agg_mode == algo.loss_agg_mode
    assert (
        config.data.max_response_length == cfg.rollout.max_response_length
        and r.response_length == cfg.rollout.max_response_length
    )
    assert (
        r.agent.default_agent_loop == SEARCH_R1_AGENT
        and r.skip_tokenizer_init is False
        and r.calculate_log_probs is True
    )
    assert config.reward.custom_reward_function.path == "pkg://search_agent_trainer.engines.verl.reward"
    assert config.reward.custom_reward_function.reward_kwargs.env_url == ENV_URL
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.SAS_ENV_URL == ENV_URL
    assert config.sas.run_dir == str(tmp_path / "run")
    assert config.trainer.default_local_dir == str(tmp_path / "run" / "checkpoints" / "verl")
    if algo.name == "ppo":
        assert (
            config.critic.optim.lr == 1e-5
            and config.critic.model.path == str(qwen_dir)
            and config.algorithm.kl_penalty == "k1"
        )
    if cfg.model.lora:
        assert config.actor_rollout_ref.model.lora_rank == 16 and list(
            config.actor_rollout_ref.model.target_modules
        ) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    if CASES[case].get("verl", {}).get("nodes"):
        assert (
            r.name == "sglang"
            and r.tensor_model_parallel_size == 2
            and config.trainer.n_gpus_per_node == 4
            and config.trainer.nnodes == 2
        )
        assert a.strategy == "fsdp2" and a.fsdp_config.param_offload is True and r.agent.num_workers == 4


def test_veRLs_own_checkpointing_and_offload_defaults_stand_unless_the_config_asks(tmp_path, qwen_dir):
    """veRL's defaults (gradient checkpointing on, offload off) are not overridden by our defaults; what the config
    (or a memory plan writing the same keys) sets reaches actor, reference and critic."""
    plain = overrides_for(run_config(qwen_dir, algorithm={"name": "ppo"}), tmp_path)
    assert not [o for o in plain if "gradient_checkpointing" in o or "offload" in o]
    config = compose_config(plain)
    check_config(config)
    ar = config.actor_rollout_ref
    assert ar.model.enable_gradient_checkpointing is True and config.critic.model.enable_gradient_checkpointing is True
    assert (
        ar.actor.fsdp_config.param_offload,
        ar.actor.fsdp_config.optimizer_offload,
        ar.ref.fsdp_config.param_offload,
    ) == (False, False, False)
    asked = run_config(
        qwen_dir,
        algorithm={"name": "ppo"},
        model={"gradient_checkpointing": False},
        verl={"param_offload": True, "optimizer_offload": True},
    )
    config = compose_config(overrides_for(asked, tmp_path))
    check_config(config)
    ar = config.actor_rollout_ref
    assert (
        ar.model.enable_gradient_checkpointing is False and config.critic.model.enable_gradient_checkpointing is False
    )
    assert (
        ar.actor.fsdp_config.param_offload
        and ar.actor.fsdp_config.optimizer_offload
        and ar.ref.fsdp_config.param_offload
    )
    assert config.critic.fsdp.param_offload and config.critic.fsdp.optimizer_offload
    m = memory_inputs(asked)
    assert (m["gradient_checkpointing"], m["param_offload"], m["optimizer_offload"]) == (False, True, True)
    assert set(m["chosen"]) == {"model.gradient_checkpointing", "verl.param_offload", "verl.optimizer_offload"}
    m = memory_inputs(run_config(qwen_dir, devices=8, algorithm={"kl_coef": 0.001}))
    assert (
        m["gradient_checkpointing"],
        m["param_offload"],
        m["chosen"],
        m["world_size"],
        m["fsdp_shards"],
        m["reference_model"],
    ) == (True, False, [], 8, 8, True)


@pytest.mark.parametrize(
    "flash_attn, want, impl",
    [(None, "auto", "sdpa"), ("2.8.3", "auto", "flash_attention_2"), ("2.8.3", "sdpa", "sdpa"), (None, "sdpa", "sdpa")],
)
def test_the_attention_is_flash_attention_only_where_flash_attn_is_installed(
    tmp_path, qwen_dir, flash_attn, want, impl
):
    cfg = run_config(qwen_dir, algorithm={"name": "ppo"}, verl={"attention": want})
    o, notes = verl_overrides(
        cfg,
        VerlLaunch(
            run_dir=tmp_path,
            env_url=ENV_URL,
            train_files="t.parquet",
            val_files=None,
            config_file="c.json",
            agent_loop_file="a.yaml",
            tool_file=None,
            flash_attn=flash_attn,
        ),
    )
    config = compose_config(o)
    check_config(config)  # veRL's HFModelConfig loads the model's config with this attention
    assert (
        config.actor_rollout_ref.model.override_config.attn_implementation
        == impl
        == config.critic.model.override_config.attn_implementation
    )
    assert config.sas.attention == impl and config.sas.attention_why
    assert (
        config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook
        == "search_agent_trainer.engines.verl.worker_setup.setup"
    )
    assert any(n.startswith("attention: sdpa") for n in notes) == (impl == "sdpa" and want == "auto")


def test_flash_attention_asked_for_without_flash_attn_is_refused_naming_the_key(tmp_path, qwen_dir):
    with pytest.raises(VerlConfigError, match=r"verl\.attention: flash_attention_2 needs flash-attn"):
        overrides_for(run_config(qwen_dir, verl={"attention": "flash_attention_2"}), tmp_path, flash_attn=None)


def test_sdpa_with_veRLs_remove_padding_keeps_packed_sequences_apart(qwen_dir):
    """veRL's remove-padding (on by default) packs a micro-batch's sequences into one row with no attention mask and
    position ids restarting per sequence; under SDPA (what we fall back to without flash-attn) transformers must build
    the block-causal mask from those position ids: each sequence's log-probs packed = alone. veRL's model patches are
    applied as its FSDP engine applies them, in a process set up as our Ray workers are (worker_setup.py)."""
    from importlib.util import find_spec

    import torch
    from transformers import AutoModelForCausalLM
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    from search_agent_trainer.engines.verl import worker_setup

    model = AutoModelForCausalLM.from_pretrained(str(qwen_dir), attn_implementation="sdpa").eval()
    from verl.utils.import_utils import is_trl_available

    def forget_trl() -> dict:
        is_trl_available.cache_clear()
        return {k: sys.modules.pop(k) for k in [k for k in sys.modules if k == "trl" or k.startswith("trl.")]}

    saved = forget_trl()
    try:
        if find_spec("trl") is not None:  # TRL 1.16 visible (.venv's packages): veRL's patch fails without our setup
            with pytest.raises(ImportError, match="AutoModelForCausalLMWithValueHead"):
                apply_monkey_patch(model, use_remove_padding=True)
            forget_trl()  # a fresh worker process has not imported it
        worker_setup.setup()
        apply_monkey_patch(model, use_remove_padding=True)
    finally:
        forget_trl()
        sys.modules.update(saved)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(5, model.config.vocab_size, (n,), generator=g) for n in (7, 12, 5)]

    # as veRL's forward_step calls the model (no cache: with one, transformers looks for no packing)
    def logps(ids, pos):
        logits = (
            model(input_ids=ids[None], attention_mask=None, position_ids=pos[None], use_cache=False)
            .logits[0, :-1]
            .float()
        )
        return torch.log_softmax(logits, -1).gather(-1, ids[1:, None]).squeeze(-1)

    with torch.no_grad():
        alone = [logps(s, torch.arange(len(s))) for s in seqs]
        packed = logps(torch.cat(seqs), torch.cat([torch.arange(len(s)) for s in seqs]))
    at = 0
    for s, a in zip(seqs, alone):
        torch.testing.assert_close(packed[at : at + len(s) - 1], a, rtol=1e-4, atol=1e-5)
        at += len(s)


@pytest.mark.parametrize(
    "temperature, top_p, kind, mode",
    [
        (1.0, 1.0, "raw", None),
        (0.7, 1.0, "raw", None),
        (1.0, 0.9, "raw", "raw_logprobs"),
        (0.7, 0.9, "processed", None),
    ],
)
def test_vllms_log_probs_are_asked_for_so_they_compare_with_the_trainers(
    tmp_path, qwen_dir, temperature, top_p, kind, mode
):
    from search_agent_trainer.engines.verl.overrides import rollout_logprob_kind

    cfg = run_config(qwen_dir, rollout={"temperature": temperature, "top_p": top_p})
    assert rollout_logprob_kind(cfg) == (kind, mode)
    config = compose_config(overrides_for(cfg, tmp_path))
    check_config(config)
    # veRL's default unless asked
    assert config.actor_rollout_ref.rollout.logprobs_mode == (mode or "processed_logprobs")
    assert rollout_logprob_kind(run_config(qwen_dir, rollout={"top_p": 0.9}, verl={"rollout": "sglang"})) == (
        None,
        None,
    )


def test_the_tool_call_dialect_selects_our_tool_agent_loop_and_search_tool(tmp_path, qwen_dir):
    cfg = run_config(qwen_dir)
    cfg["rollout"]["dialect"] = "toolcall"
    config = compose_config(overrides_for(cfg, tmp_path))
    check_config(config)
    r = config.actor_rollout_ref.rollout
    assert r.agent.default_agent_loop == TOOL_AGENT and r.multi_turn.tool_config_path == str(tmp_path / "tools.yaml")
    assert r.multi_turn.max_assistant_turns == cfg.rollout.max_turns + 1


def test_a_key_veRL_does_not_have_or_a_value_it_refuses_fails(tmp_path, qwen_dir):
    """The guard the tests above rely on: Hydra refuses a key veRL's config lacks, veRL's checks refuse bad values."""
    overrides = overrides_for(run_config(qwen_dir), tmp_path)
    with pytest.raises(Exception, match="no_such_key"):
        compose_config(overrides + ["actor_rollout_ref.actor.no_such_key=1"])
    config = compose_config(overrides + ["actor_rollout_ref.actor.ppo_mini_batch_size=64"])
    with pytest.raises(Exception, match="ppo_mini_batch_size"):
        check_config(config)
    # the user's raw overrides (verl.overrides) go through the same composition
    with pytest.raises(Exception, match="no_such_key"):
        compose_config(overrides_for(run_config(qwen_dir, verl={"overrides": ["trainer.no_such_key=1"]}), tmp_path))


@pytest.mark.parametrize(
    "sections, named",
    [
        ({"model": {"kind": "tiny"}}, "model.kind"),
        ({"optim": {"mini_batch_size": 3, "micro_batch_size": 1}}, "optim.mini_batch_size"),
        ({"train": {"supervised_warmup": {"steps": 5}}}, "train.supervised_warmup"),
        ({"verl": {"rollout": "hf", "gpus": 2}}, "verl.gpus: is not a known key"),  # the run-config schema's check
        ({"verl": {"tensor_parallel": 3, "gpus_per_node": 4}}, "verl.tensor_parallel"),
    ],
)
def test_what_veRL_cannot_do_is_refused_naming_the_key(tmp_path, qwen_dir, sections, named):
    with pytest.raises((VerlConfigError, ConfigError), match=named.replace(".", r"\.")):
        overrides_for(run_config(qwen_dir, **sections), tmp_path)


@pytest.mark.parametrize(
    "sections, per_node, nodes",
    [
        ({}, 1, 1),
        ({"devices": 4}, 4, 1),
        ({"devices": 4, "verl": {"nodes": 2}}, 2, 2),
        ({"devices": 8, "verl": {"gpus_per_node": 4, "nodes": 2}}, 4, 2),
        ({"verl": {"gpus_per_node": 2}}, 2, 1),
    ],
)
def test_the_shared_devices_key_is_veRLs_world_size(tmp_path, qwen_dir, sections, per_node, nodes):
    o = overrides_for(run_config(qwen_dir, **sections), tmp_path)
    assert f"trainer.n_gpus_per_node={per_node}" in o and f"trainer.nnodes={nodes}" in o


@pytest.mark.parametrize(
    "sections", [{"devices": 4, "verl": {"gpus_per_node": 2}}, {"devices": 3, "verl": {"nodes": 2}}]
)
def test_devices_that_disagree_with_veRLs_nodes_are_refused(tmp_path, qwen_dir, sections):
    with pytest.raises(VerlConfigError, match=r"devices \("):
        overrides_for(run_config(qwen_dir, **sections), tmp_path)


def test_notes_say_what_veRL_does_its_own_way(tmp_path, qwen_dir):
    cfg = run_config(qwen_dir, algorithm={"name": "ppo"}, model={"dtype": "fp32"})
    _, notes = verl_overrides(
        cfg,
        VerlLaunch(
            run_dir=tmp_path,
            env_url=ENV_URL,
            train_files="t.parquet",
            val_files=None,
            config_file="c.json",
            agent_loop_file="a.yaml",
            tool_file=None,
        ),
    )
    assert (
        any(n.startswith("algorithm.vf_coef") for n in notes)
        and any(n.startswith("algorithm.mask_advantages") for n in notes)
        and any(n.startswith("model.dtype") for n in notes)
    )


def test_values_that_need_quoting_survive_hydra(tmp_path, qwen_dir):
    odd = str(tmp_path / "a b, it's=[x].parquet")
    assert hydra_value(odd).startswith("'")
    config = compose_config(overrides_for(run_config(qwen_dir), tmp_path, train_files=odd))
    assert config.data.train_files == odd


def test_the_datasets_are_read_by_veRLs_RLHFDataset(tmp_path, qwen_dir):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    examples = load_dataset(str(DEMO / "train.jsonl"))[:5]
    path = write_verl_parquet(examples, "Q: {question}\n", tmp_path / "train.parquet", "train", SEARCH_R1_AGENT)
    config = compose_config(overrides_for(run_config(qwen_dir), tmp_path, train_files=str(path)))
    ds = RLHFDataset(str(path), AutoTokenizer.from_pretrained(str(qwen_dir)), config.data)
    assert len(ds) == 5
    row = ds[1]
    assert row["raw_prompt"] == [{"role": "user", "content": f"Q: {examples[1].question}\n"}]
    assert row["agent_name"] == SEARCH_R1_AGENT and row["index"] == 1 and row["data_source"] == examples[1].data_source
    assert list(row["reward_model"]["ground_truth"]["target"]) == list(examples[1].golden)
    assert row["extra_info"]["id"] == examples[1].id and row["extra_info"]["question"] == examples[1].question
    # The dataset's meta comes back as our Example (the held-out metrics by hops, kind and bridge entity), also
    # beside an example that says none of it (the parquet's columns are typed: nulls there).
    plain = dataclasses.replace(examples[0], hops=None, kind=None, bridge=None)
    path = write_verl_parquet(
        [plain, *examples], "Q: {question}\n", tmp_path / "mixed.parquet", "train", SEARCH_R1_AGENT
    )
    ds = RLHFDataset(str(path), AutoTokenizer.from_pretrained(str(qwen_dir)), config.data)
    assert [example_of(ds[i]) for i in range(len(ds))] == [plain, *examples]
    assert (
        examples[0].hops == 2
        and examples[0].bridge == ("Krotous",)
        and examples[1].hops == 1
        and examples[1].bridge is None
    )
    # A user's own parquet saying them otherwise: read where they make sense, else left out (the run goes on)
    odd = {"extra_info": {"id": "u1", "question": "q?", "golden": ["a"], "hops": "two", "kind": 3, "bridge": "Krotous"}}
    assert (example_of(odd).hops, example_of(odd).kind, example_of(odd).bridge) == (None, None, ("Krotous",))
    assert example_of({"extra_info": {"id": "u2", "question": "q?", "golden": ["a"], "hops": 2.0}}).hops == 2


def test_prepare_writes_the_files_and_prints_the_command(tmp_path, qwen_dir):
    cfg_path = tmp_path / "x.run.json"
    raw = json.loads(json.dumps(run_config(qwen_dir)))
    raw["data"]["train"] = "builtin:demo/train"  # kept as named in run-config.json (a resume prepares again from it)
    cfg_path.write_text(json.dumps(raw), encoding="utf-8")
    env = python_env()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer.engines.verl.main",
            "prepare",
            "--config",
            str(cfg_path),
            "--run-dir",
            str(tmp_path / "run"),
            "--env-url",
            ENV_URL,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert (
        out["command"][:3] == [sys.executable, "-m", "search_agent_trainer.engines.verl.main"]
        and out["command"][3:] == out["overrides"]
    )
    d = tmp_path / "run" / "verl"
    assert {f.name for f in d.iterdir()} == {
        "train.parquet",
        "val.parquet",
        "run-config.json",
        "agent_loops.yaml",
        "tools.yaml",
    }
    prepared = json.loads((d / "run-config.json").read_text())
    assert prepared["data"]["train"] == "builtin:demo/train" and prepared["data"]["eval"] == str(DEMO / "eval.jsonl")
    loops = json.loads((d / "agent_loops.yaml").read_text())
    assert loops[0]["name"] == SEARCH_R1_AGENT and loops[0]["env_url"] == ENV_URL and loops[0]["max_turns"] == 2
    assert loops[0]["strict_actions"] is False  # Search-R1's reading unless rollout.strict_actions
    check_config(compose_config(out["overrides"]))
    # a config the engine cannot run is refused before anything is written, naming the key
    raw["model"] = {"kind": "tiny"}
    cfg_path.write_text(json.dumps(raw), encoding="utf-8")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "search_agent_trainer.engines.verl.main",
            "prepare",
            "--config",
            str(cfg_path),
            "--run-dir",
            str(tmp_path / "run2"),
            "--env-url",
            ENV_URL,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 2 and "model.kind" in json.loads(p.stdout)["message"] and not (tmp_path / "run2").exists()


def test_training_with_a_config_veRL_refuses_exits_2_with_an_error_event(tmp_path, qwen_dir):
    overrides = overrides_for(run_config(qwen_dir), tmp_path) + ["actor_rollout_ref.actor.ppo_mini_batch_size=64"]
    p = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer.engines.verl.main", *overrides],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=300,
    )
    assert p.returncode == 2
    events = [json.loads(line) for line in p.stdout.splitlines()]  # stdout holds events only
    assert events and events[0]["event"] == "error" and "ppo_mini_batch_size" in events[0]["message"]


def test_the_veRL_environment_is_the_pinned_one_reusing_the_main_venvs_torch():
    import torch
    import transformers
    import verl

    pins = dict(
        line.strip().split("==")
        for line in (ROOT / "trainer" / "requirements-verl.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert verl.__version__ == pins["verl"] and transformers.__version__ == pins["transformers"]
    # torch is .venv's, not a second copy
    assert ".venv-verl" in transformers.__file__ and ".venv-verl" not in torch.__file__
    p = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_the_search_tool_is_named_by_rollout_search_tool_in_veRLs_tool_registry(tmp_path, qwen_dir):
    """tools.yaml read by veRL's own registry: our SearchTool under the run config's tool name (default search)."""
    from verl.tools.tool_registry import initialize_tools_from_config

    from search_agent_trainer.engines.verl.overrides import tool_entries

    for name in (None, "wiki_search"):
        cfg = json.loads(json.dumps(run_config(qwen_dir)))
        if name:
            cfg["rollout"]["search_tool"] = name  # the tool-call dialect's key (the trainer's dialect issue)
        (tmp_path / "tools.yaml").write_text(json.dumps(tool_entries(cfg, ENV_URL)))
        [tool] = initialize_tools_from_config(str(tmp_path / "tools.yaml"))
        assert (
            type(tool).__name__ == "SearchTool"
            and tool.name == (name or "search")
            and tool.topk == cfg["retriever"]["topk"]
        )


def test_strict_actions_reach_the_agent_loop_its_records_and_the_reward(tmp_path):
    """rollout.strict_actions: the agent loop reads turns with strict_turn_action, and what it hands veRL's batch
    (extra_fields["sas"]) makes the reward item and the record say so."""
    from search_agent_trainer.data import Example
    from search_agent_trainer.engines.verl.agent_loop import rollout_fields
    from search_agent_trainer.engines.verl.overrides import agent_loop_entries
    from search_agent_trainer.engines.verl.reward import reward_item
    from search_agent_trainer.rollout import Trajectory

    assert agent_loop_entries({"rollout": {"strict_actions": True}}, None)[0]["strict_actions"] is True
    t = Trajectory(Example("e", "q?", ("x",), "demo"), 0, 0, "Q", [1], strict_actions=True)
    sas = rollout_fields(t, "searchr1")
    assert sas["strict_actions"] is True and "strict_actions" not in rollout_fields(
        Trajectory(Example("e", "q?", ("x",), "demo"), 0, 0, "Q", [1]), "searchr1"
    )
    assert reward_item("demo", "r", {"target": ["x"]}, {"sas": sas})["strict_actions"] is True
    assert "strict_actions" not in reward_item("demo", "r", {"target": ["x"]}, {"sas": {}})


def test_a_run_that_ran_out_of_device_memory_fails_saying_what_to_change():
    """veRL's workers do not retry with smaller sizes (engines builtin and trl do): the failure names the keys that
    size its memory, as a worker's error reaches the driver (Ray's text of it)."""
    from search_agent_trainer.engines.verl.main import failure_message

    worker = RuntimeError(
        "ray::WorkerDict.actor_rollout_update_actor() (pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.32 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free."
    )
    message = failure_message(worker)
    assert message.startswith("veRL ran out of device memory (veRL does not retry with smaller sizes)")
    for key in ("optim.micro_batch_size", "verl.gpu_memory_utilization", "verl.optimizer_offload", "plan"):
        assert key in message
    assert message.endswith(f"RuntimeError: {worker}")
    assert failure_message(ValueError("no such key")) == "ValueError: no such key"  # anything else, as it was
