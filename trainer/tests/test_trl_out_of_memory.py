"""engine "trl" when the device runs out of memory (TRL 1.16 on CPU, the real env server): the builtin trainer's rule
(test_out_of_memory.py) in TRL's loop — the log-prob passes and the update run again in forwards of half as many
sequences, kept for the rest of the run and by the checkpoint (with the rollout's halved KV budget), each halving a
`warning` event. The GPU's memory limit is stood in for by a test double (no GPU here): the policy's forward raising
torch.OutOfMemoryError above a number of sequences (`test.device_memory_rows`, or the same double set by a test).

The same numbers: a micro-batch's loss summed from pieces, each weighted by what it weighs in TRL's average (rows,
tokens, or a denominator of the whole batch), gives the gradients of the micro-batch in one forward — checked for
each loss aggregation this project maps onto TRL."""

from __future__ import annotations

import json

import pytest

from test_train import lines, run_trainer
from test_trl_engine import _engine, trl_tiny

pytest.importorskip("trl")
import torch  # noqa: E402


def _batch(eng):
    """One generation batch as TRL trains it (our rollout_func, the reward, advantages), with a signal on every
    sequence."""
    t = eng.trl
    t.model.train()
    out = t._generate_and_score_completions(next(iter(t.get_train_dataloader())))
    B = out["completion_ids"].shape[0]
    out["advantages"] = torch.tensor([(-1.0) ** i * (1 + i / B) for i in range(B)])
    t.current_gradient_accumulation_steps = t.args.gradient_accumulation_steps  # what TRL's loop sets per window
    return out


def _gradients(eng, inputs, size: int) -> tuple[float, dict[str, torch.Tensor]]:
    t = eng.trl
    eng.micro_batch_size = size
    t.model.zero_grad(set_to_none=True)
    loss = t._compute_loss(t.model, inputs)
    loss.backward()  # the last piece's: TRL's Trainer.training_step does this
    grads = {n: p.grad.detach().clone() for n, p in t.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_a_micro_batch_in_pieces_gives_its_gradients_and_its_loss(tmp_path, varied_env, mode):
    eng = _engine(tmp_path / "run", varied_env.url, **{"algorithm.loss_agg_mode": mode, "algorithm.kl_coef": 0.05})
    inputs = _batch(eng)
    rows = int(inputs["completion_ids"].shape[0])
    assert rows == 16  # the generation batch, as one micro-batch here
    whole_loss, whole = _gradients(eng, inputs, rows)
    seen = eng.batch["seen"].clone()
    assert bool(seen.all())
    for size in (5, 1):  # pieces of 5, 5, 5, 1; and of one sequence each
        loss, grads = _gradients(eng, inputs, size)
        assert loss == pytest.approx(whole_loss, rel=1e-5, abs=1e-7), size
        assert grads.keys() == whole.keys()
        for name, g in whole.items():
            scale = float(g.abs().max()) + 1e-12  # compared at the round-off of the gradient's own size
            assert float((grads[name] - g).abs().max()) <= 1e-4 * scale, (size, name)


def test_an_update_out_of_memory_mid_backward_trains_its_optimizer_step_again_from_zero_gradients(tmp_path, varied_env):
    """The optimizer step's second micro-batch ran out of memory after part of its backward (gradients added to some
    parameters): its first and second micro-batches are trained again, from zero gradients, in forwards of half as
    many sequences — the gradients of the step done whole, not those plus the partial backward's."""
    from search_agent_trainer.engines.trl.engine import _rows_of

    eng = _engine(tmp_path / "run", varied_env.url)
    inputs = _batch(eng)
    t = eng.trl
    micro = [_rows_of(inputs, 0, 8, 16), _rows_of(inputs, 8, 16, 16)]
    params = [p for p in t.model.parameters() if p.requires_grad]
    t.model.zero_grad(set_to_none=True)
    for m in micro:
        t._compute_loss(t.model, m).backward()
    peer = [p.grad.clone() for p in params]
    # the run: TRL's loop at the second micro-batch of the optimizer step, the first one's gradients in
    t._buffered_inputs, t._step, t._in_loss, t._window = micro, 0, False, None  # an optimizer step begins
    t.model.zero_grad(set_to_none=True)
    t._compute_loss(t.model, micro[0]).backward()  # the window starts here: _step 0 of 2
    t._step, t._in_loss = 1, False  # the next micro-batch of the same optimizer step (its window stays)
    t._compute_loss(t.model, micro[1])  # the second forward …
    for p in params[len(params) // 2 :]:
        p.grad += 1.0  # … and the part of its backward that ran before the device ran out of memory
    loss = t._again(t.model, "CUDA out of memory (stand-in)")
    assert t._step == 2 and eng.micro_batch_size == 4 and torch.isfinite(loss)
    for p, g in zip(params, peer, strict=True):
        scale = float(g.abs().max()) + 1e-12
        assert float((p.grad - g).abs().max()) <= 1e-4 * scale


def test_the_log_prob_passes_run_again_in_halves_until_they_fit(tmp_path, varied_env):
    """The old/reference log-prob passes (no gradient): a forward of more sequences than the device takes runs again
    in halves, kept (the update's forwards too) and said once per halving; the log-probs are those of one pass."""
    eng = _engine(tmp_path / "run", varied_env.url)
    inputs = _batch(eng)
    t = eng.trl
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        peer, _, _ = t._get_per_token_logps_and_entropies(t.model, ids, attn, keep, batch_size=8)
        eng._stand_in_device_memory(3)
        got, _, _ = t._get_per_token_logps_and_entropies(t.model, ids, attn, keep, batch_size=8)
    assert eng.micro_batch_size == 2 and eng._out_of_memory_sizes["micro_batch_size"] == 2
    torch.testing.assert_close(got, peer, rtol=1e-5, atol=1e-6)
    eng.writer.close()
    warned = [e for e in lines(eng.run_dir / "events.jsonl") if e.get("cause") == "update-out-of-memory"]
    assert [w["micro_batch_size"] for w in warned] == [4, 2]
    assert warned[0]["message"].startswith(
        "step 1: the log-prob passes ran out of device memory with micro-batches of 8"
    )


def test_what_cannot_be_split_exactly_stops_with_the_size_to_configure(tmp_path, varied_env):
    eng = _engine(tmp_path / "run", varied_env.url, **{"algorithm.entropy_coef": 0.01})
    t = eng.trl
    assert "algorithm.entropy_coef" in t._cannot_split(retry=True)
    with pytest.raises(torch.OutOfMemoryError, match=r"optim.micro_batch_size 4 or less would"):
        eng._smaller_micro_batch(1, "the update", "CUDA out of memory (stand-in)", t._cannot_split(retry=True))
    assert eng.micro_batch_size == 8
    # the log-prob passes halved (exact for them): the update stays TRL's whole micro-batch, which it cannot split
    inputs = _batch(eng)
    whole, whole_grads = _gradients(eng, inputs, 8)
    halved, halved_grads = _gradients(eng, inputs, 4)
    assert halved == whole and all(torch.equal(halved_grads[k], g) for k, g in whole_grads.items())
    eng.micro_batch_size = 1
    with pytest.raises(torch.OutOfMemoryError, match="a micro-batch of one sequence"):
        eng._smaller_micro_batch(1, "the update", "CUDA out of memory (stand-in)", None)


def test_a_trl_run_out_of_memory_trains_again_in_smaller_forwards_and_a_resume_starts_there(tmp_path, varied_env):
    """The trainer's own process with `test.device_memory_rows` 4 (micro-batches of 8): the rollout's KV budget is
    halved, the update's first micro-batch runs out of memory and its optimizer step is trained again in forwards of
    4; the run goes on, the checkpoint keeps both sizes, and a resume (after a crash) starts there and warns no more."""
    base = trl_tiny(
        **{
            "train.steps": 3,
            "train.eval_every": 0,
            "train.checkpoint_every": 1,
            "data.eval_size": 1,
            "test.device_memory_rows": 4,
        }
    )
    proc = run_trainer(tmp_path, {**base, "test": {**base["test"], "crash_at_step": 3}}, varied_env.url, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    run = tmp_path / "run"
    events = lines(run / "events.jsonl")
    causes = [e.get("cause") for e in events if e["event"] == "warning"]
    assert "rollout-out-of-memory" in causes and causes.count("update-out-of-memory") == 1, causes
    [update] = [e for e in events if e.get("cause") == "update-out-of-memory"]
    assert update["micro_batch_size"] == 4 and update["message"].startswith(
        "step 1: the update ran out of device memory"
    )
    metrics = lines(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]  # the held-out evaluation at 0, two steps trained
    assert all(0 < m["actor/grad_norm"] < float("inf") for m in metrics[1:])
    kept = json.loads((run / "checkpoints" / "step-000002" / "search_agent_state.json").read_text())["out_of_memory"]
    assert kept["micro_batch_size"] == 4 and 0 < kept["max_batch_tokens"] < 1 << 20

    resumed = run_trainer(tmp_path, base, varied_env.url, "--resume", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = lines(run / "events.jsonl")
    after = events[max(i for i, e in enumerate(events) if e["event"] == "started") :]
    assert after[0]["resumed"] is True and after[0]["step"] == 2
    assert after[0]["max_batch_tokens"] == kept["max_batch_tokens"]
    assert not [e for e in after if e["event"] == "warning" and "out-of-memory" in (e.get("cause") or "")]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert json.loads((run / "checkpoints" / "step-000003" / "search_agent_state.json").read_text()) == {
        "out_of_memory": kept
    }
