"""What the trainer does when the device runs out of memory (a plan a few GiB short, fragmentation): the run goes on,
slower, and says so, instead of ending hours in. The GPU's memory limit is stood in for by a test double (no GPU
here): the policy's forward raising torch.OutOfMemoryError above a size, as CUDA's allocator does.

- the rollout: the generation call runs again with half the KV budget (`rollout.max_batch_tokens`), kept for later
  rollouts (the generator's own tests, test_generation.py, check the tokens are the same);
- the update: the mini-batch is trained again with half the micro-batch, kept for later steps — the same update, since
  the loss's denominators are the mini-batch's (checked: the same weights as a run configured with that micro-batch);
- each halving a `warning` event with its `cause` and the new size, kept by a checkpoint for a resume; one row, or
  one sequence, that does not fit is the error."""

from __future__ import annotations

import copy
import io
import json
import random

import pytest
import torch

from conftest import DEMO, tiny_config
from search_agent_trainer.batch import make_batch
from search_agent_trainer.benchmark import StandInEnv  # the in-process env (word-overlap retrieval): no server
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.data import load_dataset
from search_agent_trainer.train import Trainer


class NoEnvTrainer(Trainer):
    """The trainer over the demo data without an env server (the stand-in env answers searches)."""

    def _load_data(self) -> None:
        self.train_set, self.eval_set = load_dataset(self.cfg.data.train), []


def _trainer(tmp_path, **overrides) -> NoEnvTrainer:
    t = NoEnvTrainer(config_from_dict(tiny_config(**overrides)), tmp_path / "run", "http://127.0.0.1:9", io.StringIO())
    t.setup()
    t.env = StandInEnv(DEMO / "corpus.jsonl")
    return t


def _limit(monkeypatch, module, refuse) -> list[int]:
    """The test double: `module`'s forward (ids, attention mask, …) raises torch.OutOfMemoryError when
    `refuse(ids, attn)`; returns the batch sizes refused. The rollout calls the policy; the update's log-prob pass
    calls its backbone."""
    forward, refused = module.forward, []

    def limited(ids, attn, *args, **kwargs):
        if refuse(ids, attn):
            refused.append(ids.shape[0])
            raise torch.OutOfMemoryError(f"CUDA out of memory (stand-in): {tuple(ids.shape)}")
        return forward(ids, attn, *args, **kwargs)

    monkeypatch.setattr(module, "forward", limited)
    return refused


def _warnings(t: Trainer, cause: str) -> list[dict]:
    events = [json.loads(x) for x in (t.run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "warning" and e.get("cause") == cause]


def test_a_rollout_out_of_memory_goes_on_with_half_the_kv_budget_and_says_so(tmp_path, monkeypatch):
    t = _trainer(tmp_path, **{"rollout.max_batch_tokens": 4096, "rollout.batch_size": 4})
    refused = _limit(monkeypatch, t.policy, lambda ids, attn: attn.numel() > 700)
    trajs = t._rollouts(t.train_set[:4], t.train_prompts[:4], 3, 1, greedy=False)
    assert len(trajs) == 12 and all(len(x.ids) > 0 for x in trajs)
    assert refused and t.max_batch_tokens < 4096
    warned = _warnings(t, "rollout-out-of-memory")
    assert "rollout.max_batch_tokens 4,096" in warned[0]["message"] and "stand-in" in warned[0]["message"]
    assert warned[-1]["max_batch_tokens"] == t.max_batch_tokens
    # the next rollout starts at the smaller budget: nothing refused, nothing more said
    before = len(refused)
    t._rollouts(t.train_set[4:8], t.train_prompts[4:8], 3, 2, greedy=False)
    t.writer.close()
    assert len(refused) == before and len(_warnings(t, "rollout-out-of-memory")) == len(warned)


def _batch(t: Trainer):
    trajs = t._rollouts(t.train_set[:2], t.train_prompts[:2], 3, 1, greedy=False)
    rng = random.Random(0)
    for x in trajs:
        x.reward = float(rng.random() < 0.5)
    trajs[0].reward, trajs[1].reward = 1.0, 0.0  # a group with a signal
    batch = make_batch(trajs, t.tok.pad_id)
    t._passes_and_advantages(batch, trajs, 1)
    return batch


def test_an_update_out_of_memory_trains_the_mini_batch_again_with_half_the_micro_batch_the_same_update(
    tmp_path, monkeypatch
):
    t = _trainer(tmp_path, **{"optim.micro_batch_size": 4, "optim.mini_batch_size": 6})
    batch = _batch(t)
    start = copy.deepcopy((t.policy.state_dict(), t.optimizer.state_dict()))

    # the peer: the same update configured with micro-batches of 2 from the start
    t.micro_batch_size = 2
    peer_metrics = t._update(copy.deepcopy(batch), 1)
    peer = {k: v.clone() for k, v in t.policy.state_dict().items()}

    t.policy.load_state_dict(start[0])
    t.optimizer.load_state_dict(start[1])
    t.micro_batch_size = 4
    refused = _limit(monkeypatch, t.policy.backbone, lambda ids, attn: torch.is_grad_enabled() and ids.shape[0] > 2)
    metrics = t._update(copy.deepcopy(batch), 1)
    t.writer.close()
    assert refused == [4] and t.micro_batch_size == 2
    got = t.policy.state_dict()
    assert all(torch.equal(got[k], peer[k]) for k in peer)  # the same update, bit for bit
    assert metrics["_tokens"] == peer_metrics["_tokens"]  # the failed attempt's tokens are not counted
    assert {k: metrics[k] for k in metrics if k.startswith("actor/")} == {
        k: peer_metrics[k] for k in peer_metrics if k.startswith("actor/")
    }
    [warned] = _warnings(t, "update-out-of-memory")
    assert warned["micro_batch_size"] == 2 and "micro-batches of 4 sequences" in warned["message"]


def test_the_update_only_stand_in_refuses_forwards_that_keep_gradients_alone(tmp_path):
    """`test.update_memory_rows` (the GPU check runs the update's recovery on a GPU with it): the rollout's and the
    log-prob passes' forwards (no gradients) run as they are."""
    t = _trainer(tmp_path, **{"test.update_memory_rows": 2})
    t._stand_ins()
    ids = torch.ones((3, 4), dtype=torch.long)
    attn, pos = torch.ones_like(ids), torch.arange(4).expand(3, 4)
    with torch.no_grad():
        t.policy.backbone(ids, attn, pos)
    with pytest.raises(torch.OutOfMemoryError, match=r"test.update_memory_rows: a batch of 3 sequences, more than 2"):
        t.policy.backbone(ids, attn, pos)
    t.policy.backbone(ids[:2], attn[:2], pos[:2])


def test_an_update_where_one_sequence_does_not_fit_is_the_error(tmp_path, monkeypatch):
    t = _trainer(tmp_path, **{"optim.micro_batch_size": 4, "optim.mini_batch_size": 6})
    batch = _batch(t)
    _limit(monkeypatch, t.policy.backbone, lambda ids, attn: torch.is_grad_enabled())
    with pytest.raises(torch.OutOfMemoryError, match="micro-batch of one sequence: CUDA out of memory"):
        t._update(batch, 1)
    t.writer.close()
    assert [w["micro_batch_size"] for w in _warnings(t, "update-out-of-memory")] == [2, 1]


def test_a_resumed_run_starts_at_the_sizes_it_ran_out_of_memory_down_to(tmp_path, monkeypatch):
    t = _trainer(tmp_path, **{"rollout.max_batch_tokens": 4096, "rollout.batch_size": 4})
    _limit(monkeypatch, t.policy, lambda ids, attn: attn.numel() > 700)
    t._rollouts(t.train_set[:4], t.train_prompts[:4], 3, 1, greedy=False)
    t.micro_batch_size = 2
    t._out_of_memory_sizes["micro_batch_size"] = 2  # as _smaller_micro_batch leaves it
    t._checkpoint(1)
    t.writer.close()
    raw = tiny_config(**{"rollout.max_batch_tokens": 4096, "rollout.batch_size": 4})
    again = NoEnvTrainer(
        config_from_dict(raw), tmp_path / "run", "http://127.0.0.1:9", resume=True, stdout=io.StringIO()
    )
    again.setup()
    again.writer.close()
    assert (again.max_batch_tokens, again.micro_batch_size) == (t.max_batch_tokens, 2) and t.max_batch_tokens < 4096
    assert again._out_of_memory_sizes == {"max_batch_tokens": t.max_batch_tokens, "micro_batch_size": 2}


def test_log_prob_passes_out_of_memory_run_again_with_half_the_micro_batch_the_same_numbers(tmp_path, monkeypatch):
    t = _trainer(tmp_path, **{"optim.micro_batch_size": 4, "optim.mini_batch_size": 6, "algorithm.kl_coef": 0.01})
    assert t.reference is not None
    trajs = t._rollouts(t.train_set[:2], t.train_prompts[:2], 3, 1, greedy=False)
    for i, x in enumerate(trajs):
        x.reward = float(i % 2)
    peer = make_batch(trajs, t.tok.pad_id)
    t.micro_batch_size = 2
    t._passes_and_advantages(peer, trajs, 1, skip=False)
    t.micro_batch_size = 4
    refused = _limit(monkeypatch, t.policy.backbone, lambda ids, attn: not torch.is_grad_enabled() and ids.shape[0] > 2)
    batch = make_batch(trajs, t.tok.pad_id)
    t._passes_and_advantages(batch, trajs, 1, skip=False)
    t.writer.close()
    assert refused == [4] and t.micro_batch_size == 2
    assert torch.equal(batch.ref_logprob, peer.ref_logprob) and torch.equal(batch.advantages, peer.advantages)
    [warned] = _warnings(t, "update-out-of-memory")
    assert warned["message"].startswith("step 1: the log-prob passes ran out of device memory with micro-batches of 4")


def test_a_training_process_out_of_memory_finishes_says_so_and_checkpoints_the_sizes(tmp_path, demo_env):
    """The trainer's own process, against the real env server, with `test.device_memory_rows` (the same stand-in,
    set by the config: the process has no GPU): the run finishes, both kinds of halving are warning events, and the
    checkpoint keeps the sizes."""
    from test_train import lines, run_trainer

    cfg = tiny_config(
        **{
            "train.steps": 2,
            "train.eval_every": 0,
            "optim.micro_batch_size": 4,
            "optim.mini_batch_size": 6,
            "test.device_memory_rows": 2,
        }
    )
    proc = run_trainer(tmp_path, cfg, demo_env.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    causes = [e.get("cause") for e in lines(run / "events.jsonl") if e["event"] == "warning"]
    assert "rollout-out-of-memory" in causes and causes.count("update-out-of-memory") == 1, causes
    assert [m["step"] for m in lines(run / "metrics.jsonl")][-2:] == [1, 2]
    state = json.loads((run / "checkpoints" / "step-000002" / "trainer_state.json").read_text())
    assert state["out_of_memory"]["micro_batch_size"] == 2
    assert state["out_of_memory"]["max_batch_tokens"] < 65536
