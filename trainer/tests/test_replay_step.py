"""replay_step.py's pieces that need no run (the end-to-end replays of a real tiny run, matching and planted, are
test/unit/replay-step.test.ts through the CLI): a record becomes the trainer's Trajectory from its token arrays, the
batch the trainer builds from it feeds exactly the recorded ids, and a step's recorded loss is comparable only when
its update was one epoch of one mini-batch."""

from __future__ import annotations

import pytest

from conftest import tiny_config
from search_agent_trainer.batch import make_batch
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.replay_step import ReplayError, _window, comparable, trajectory_of


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
