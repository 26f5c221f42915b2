"""The run config's cross-field rules, `algorithm.preset` (Search-R1's settings, from its train_ppo.sh /
train_grpo.sh): what a preset resolves to, that a key the config sets wins, and the GPU examples that use them; and
the demo data by its stable built-in names (what "New Training Run…" writes), resolved to the files that ship next to
the trainer, an unknown name being an error naming the known ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DEMO, ROOT
from search_agent_trainer.config import (
    config_from_dict,
    config_from_run_json,
    former_builtin_name,
    load_config,
    stored_config,
)
from search_agent_trainer.schema import ConfigError


def _cfg(**sections):
    return {"data": {"train": str(DEMO / "train.jsonl")}, "model": {"kind": "tiny"}, **sections}


def test_search_r1_grpo_preset():
    c = config_from_dict(_cfg(algorithm={"preset": "search-r1-grpo"}, train={"steps": 1005}))
    a, r, o = c.algorithm, c.rollout, c.optim
    assert (a.name, a.kl_estimator, a.kl_coef, a.kl_in_reward, a.entropy_coef, a.clip_ratio_low, a.clip_ratio_high) == (
        "grpo",
        "k3",
        0.001,
        False,
        0.001,
        0.2,
        0.2,
    )
    assert (r.n, r.temperature, r.top_p) == (5, 1.0, 0.95)
    # int(0.285 × 1005); mini-batches of 256 sequences: 2,560 a step make 10 optimizer steps, as Search-R1's
    # ppo_mini_batch_size=256 scaled by rollout.n=1 (not n_agent=5) does
    assert (o.lr, o.warmup_steps, o.mini_batch_size, o.grad_clip, o.ppo_epochs) == (1e-6, 286, 256, 1.0, 1)
    assert r.batch_size * r.n // o.mini_batch_size == 10
    assert a.loss_masking is True and a.mask_advantages is False and a.clip_ratio_c is None
    # the rollout's shape: 512 prompts, 4 turns of 500 tokens, 500-token observations, responses cut at 4,096 tokens,
    # prompts of at most 2,048
    assert (
        r.batch_size,
        r.max_turns,
        r.max_turn_tokens,
        r.max_obs_length,
        r.max_response_length,
        r.max_prompt_length,
    ) == (512, 4, 500, 500, 4096, 2048)


def test_search_r1_ppo_preset_and_explicit_keys_win():
    c = config_from_dict(
        _cfg(algorithm={"preset": "search-r1-ppo", "kl_coef": 0.01}, rollout={"n": 2}, train={"steps": 200})
    )
    a, o = c.algorithm, c.optim
    assert (a.name, a.kl_estimator, a.kl_in_reward, a.gamma, a.lam, a.value_clip) == ("ppo", "k1", True, 1.0, 1.0, 0.5)
    # int(0.285 × 200) is 56 in floating point, as in veRL
    assert (o.critic_lr, o.warmup_steps, o.critic_warmup_steps, o.mini_batch_size) == (
        1e-5,
        56,
        3,
        256,
    )
    assert a.kl_coef == 0.01 and c.rollout.n == 2  # set in the file: not the preset's


def test_the_gpu_examples_resolve_to_search_r1s_settings():
    grpo = load_config(ROOT / "examples" / "one-gpu" / "qwen2.5-3b-grpo.run.json")
    ppo = load_config(ROOT / "examples" / "one-gpu" / "qwen2.5-3b-ppo.run.json")
    assert (grpo.algorithm.name, grpo.rollout.n, grpo.algorithm.kl_estimator, grpo.optim.warmup_steps) == (
        "grpo",
        5,
        "k3",
        286,
    )
    assert (grpo.rollout.batch_size * grpo.rollout.n) // grpo.optim.mini_batch_size == 10
    assert (
        ppo.algorithm.name,
        ppo.rollout.n,
        ppo.algorithm.kl_estimator,
        ppo.algorithm.kl_in_reward,
        ppo.optim.critic_lr,
    ) == ("ppo", 1, "k1", True, 1e-5)
    # the resolved config (run.json keeps it) resolves to itself: resuming does not apply the preset twice differently
    again = config_from_dict(json.loads(json.dumps(dict(grpo))))
    assert dict(again) == dict(grpo)


def test_dropout_is_off_by_default_and_lora_dropout_needs_it():
    assert config_from_dict(_cfg()).model.dropout is False
    cfg = _cfg(model={"kind": "hf", "path": "/m", "lora": {"dropout": 0.05}})
    with pytest.raises(ConfigError, match=r"model\.lora\.dropout: 0\.05 needs model\.dropout: true"):
        config_from_dict(cfg)
    cfg["model"]["dropout"] = True
    assert config_from_dict(cfg).model.lora["dropout"] == 0.05


def test_dual_clip_needs_c_above_1():
    with pytest.raises(ConfigError, match=r"algorithm\.clip_ratio_c: must be greater than 1"):
        config_from_dict(_cfg(algorithm={"clip_ratio_c": 1.0}))


def test_skip_zero_std_groups_is_grpos_without_a_kl_reward_and_the_builtin_engines():
    assert (
        config_from_dict(_cfg(algorithm={"name": "grpo", "skip_zero_std_groups": True})).algorithm.skip_zero_std_groups
        is True
    )
    with pytest.raises(
        ConfigError, match=r'algorithm\.skip_zero_std_groups: applies to GRPO only .*algorithm\.name is "ppo"'
    ):
        config_from_dict(_cfg(algorithm={"name": "ppo", "skip_zero_std_groups": True}))
    with pytest.raises(
        ConfigError, match=r"algorithm\.skip_zero_std_groups: cannot be used with algorithm\.kl_in_reward"
    ):
        config_from_dict(_cfg(algorithm={"name": "grpo", "kl_in_reward": True, "skip_zero_std_groups": True}))
    with pytest.raises(ConfigError, match=r'algorithm\.skip_zero_std_groups: true is not supported by engine "verl"'):
        config_from_dict(_cfg(engine="verl", algorithm={"skip_zero_std_groups": True}))
    assert (
        config_from_dict(_cfg(algorithm={"skip_zero_std_groups": True, "zero_std_keep": 0.5})).algorithm.zero_std_keep
        == 0.5
    )
    with pytest.raises(
        ConfigError, match=r"algorithm\.zero_std_keep: 0\.5 has no effect without algorithm\.skip_zero_std_groups: true"
    ):
        config_from_dict(_cfg(algorithm={"zero_std_keep": 0.5}))


def test_builtin_demo_data_resolves_to_the_shipped_files(tmp_path):
    cfg = config_from_dict(
        {
            "data": {"train": "builtin:demo/train", "eval": "builtin:demo/eval"},
            "model": {"kind": "tiny", "tiny": {"vocab": ["builtin:demo/corpus"]}},
        },
        base=tmp_path,
    )
    assert cfg.data.train == str(ROOT / "examples" / "demo" / "train.jsonl")
    assert cfg.data.eval == str(ROOT / "examples" / "demo" / "eval.jsonl")
    assert cfg.model.tiny.vocab == [str(ROOT / "examples" / "demo" / "corpus.jsonl")]
    assert all(Path(p).is_file() for p in (cfg.data.train, cfg.data.eval, *cfg.model.tiny.vocab))


def test_an_unknown_builtin_name_is_an_error():
    with pytest.raises(
        ConfigError, match=r"unknown built-in data 'builtin:demo/nope'; the built-ins are builtin:demo/train"
    ):
        config_from_dict({"data": {"train": "builtin:demo/nope"}, "model": {"kind": "tiny"}})


def test_stored_config_keeps_builtin_names_and_config_from_run_json_resolves_them_here(tmp_path):
    """run.json's config (stored_config): the completed config, relative paths absolute, but builtin:NAME as written
    (resolved, it would be a path into the install that started the run); read back for a resume, the names resolve
    in this install."""
    raw = {
        "data": {"train": "builtin:demo/train", "eval": "mine.jsonl"},
        "model": {"kind": "tiny", "tiny": {"vocab": ["builtin:demo/corpus", "more.jsonl"]}},
    }
    cfg = config_from_dict(raw, base=tmp_path)
    assert cfg.data.train == str(ROOT / "examples" / "demo" / "train.jsonl")  # the trainer sees paths
    stored = json.loads(json.dumps(stored_config(cfg)))
    assert stored["data"] == {**cfg["data"], "train": "builtin:demo/train", "eval": str(tmp_path / "mine.jsonl")}
    assert stored["model"]["tiny"]["vocab"] == ["builtin:demo/corpus", str(tmp_path / "more.jsonl")]
    assert stored["algorithm"] == cfg["algorithm"] and stored["rollout"] == cfg["rollout"]  # defaults filled in
    assert cfg.data.train == str(ROOT / "examples" / "demo" / "train.jsonl"), "stored_config copies"
    again = config_from_run_json(stored, tmp_path / "run", source="run.json")
    assert again == cfg and stored_config(again) == stored


def test_an_older_run_json_with_paths_into_a_former_install_resolves_in_this_one(tmp_path):
    """Compatibility: run.json written before it kept builtin:NAME holds absolute paths into the install that started
    the run; one that no longer exists and ends in examples/<a built-in file> is read as that name (and written back
    so). Other paths are left as they are, a missing one to be reported as missing."""
    gone = "/gone/search-agent-studio-0.0.9/examples/"
    assert former_builtin_name(gone + "demo/train.jsonl") == "builtin:demo/train"
    assert former_builtin_name(gone + "trl-tiny/model/") == "builtin:trl-tiny/model"
    assert former_builtin_name(gone + "demo-multihop/eval.jsonl") == "builtin:demo-multihop/eval"
    assert former_builtin_name("/gone/data/train.jsonl") is None  # not built-in data: stays, reported missing
    assert former_builtin_name(gone + "demo/mine.jsonl") is None
    assert former_builtin_name("examples/demo/train.jsonl") is None  # relative: the config's own
    assert former_builtin_name(str(DEMO / "train.jsonl")) is None  # exists: left alone
    saved = {
        "data": {"train": gone + "demo/train.jsonl", "eval": "/gone/data/eval.jsonl"},
        "model": {"kind": "tiny", "tiny": {"vocab": [gone + "demo/corpus.jsonl"]}},
    }
    cfg = config_from_run_json(saved, tmp_path, source="run.json")
    assert cfg.data.train == str(DEMO / "train.jsonl") and cfg.model.tiny.vocab == [str(DEMO / "corpus.jsonl")]
    assert cfg.data.eval == "/gone/data/eval.jsonl"
    assert saved["data"]["train"] == gone + "demo/train.jsonl", "the caller's dict is not changed"
    stored = stored_config(cfg)
    assert (stored["data"]["train"], stored["data"]["eval"], stored["model"]["tiny"]["vocab"]) == (
        "builtin:demo/train",
        "/gone/data/eval.jsonl",
        ["builtin:demo/corpus"],
    )


def test_hops_mix_keys_are_hops_and_its_weights_numbers():
    assert config_from_dict(
        _cfg(data={"train": str(DEMO / "train.jsonl"), "hops_mix": {"1": 1, "2": 3}})
    ).data.hops_mix == {"1": 1, "2": 3}
    with pytest.raises(ConfigError, match=r"data.hops_mix: keys are the hops of a question \(1, 2, …\), got 'two'"):
        config_from_dict(_cfg(data={"train": str(DEMO / "train.jsonl"), "hops_mix": {"two": 1}}))
    with pytest.raises(ConfigError, match=r"data.hops_mix"):
        config_from_dict(_cfg(data={"train": str(DEMO / "train.jsonl"), "hops_mix": {"1": -1}}))


def test_a_vocabulary_file_must_be_the_runs_own_text(tmp_path):
    """model.tiny.vocab is read into the tokenizer every checkpoint carries: /etc/passwd (or a link to it beside the
    config) is refused naming the field; files beside the config or the data, and built-in data, are read."""
    from search_agent_trainer.config import load_config
    from search_agent_trainer.schema import ConfigError

    (tmp_path / "words.txt").write_text("alpha beta\n")
    (tmp_path / "passwd-link").symlink_to("/etc/passwd")
    for vocab, ok in [
        (["/etc/passwd"], False),
        (["passwd-link"], False),
        (["words.txt", "builtin:demo/corpus"], True),
        ([str(DEMO / "corpus.jsonl")], True),
    ]:
        path = tmp_path / "c.run.json"
        path.write_text(
            json.dumps({"data": {"train": "builtin:demo/train"}, "model": {"kind": "tiny", "tiny": {"vocab": vocab}}})
        )
        if ok:
            assert load_config(path).model.tiny.vocab
        else:
            with pytest.raises(ConfigError, match=r"model\.tiny\.vocab\[0\]: .* is outside the config's folder"):
                load_config(path)
