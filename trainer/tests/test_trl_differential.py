"""Our GRPO loss checked by someone else's code: TRL's `GRPOTrainer._compute_loss` (TRL from PyPI) on the same
tensors — log-probs, old and reference log-probs, advantages, and a mask with holes where retrieved tokens are (TRL's
`tool_mask`) — must give the same loss, the same gradient with respect to the log-probs, and the same clip and KL
statistics, for each aggregation mode TRL shares with us:

    TRL loss_type    ours (algorithm.loss_agg_mode)
    grpo             seq-mean-token-mean
    bnpo, dapo       token-mean
    dr_grpo          seq-mean-token-sum-norm  (norm_length = max_completion_length)

TRL is called unbound on a stand-in for its trainer object that carries only the settings `_compute_loss` reads;
its log-prob function is replaced by one returning our tensor (the model is not what is being compared)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from conftest import f32_roundoff
from search_agent_trainer.losses import Aggregation, objective

trl = pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402

B, T, MAX_LEN = 4, 7, 16


def _tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3
    old = logp + 0.3 * torch.randn(B, T, generator=g)  # off-policy enough that some ratios leave [1 − ε, 1 + ε]
    ref = logp + 0.2 * torch.randn(B, T, generator=g)
    completion_mask = torch.ones(B, T)
    completion_mask[3, 5:] = 0  # padding after a short completion
    tool_mask = torch.ones(B, T)
    tool_mask[0, 2:4] = 0  # retrieved tokens inside the completion
    tool_mask[2, 1:5] = 0
    adv = torch.tensor([1.2, -0.7, 0.3, -1.5])
    return logp, old, ref, completion_mask, tool_mask, adv


def _loss_roundoff(logp, old, adv) -> float:
    """The scale of a loss's float32 round-off: that of its per-token terms (−Â·ρ, ρ = exp(logp − old)), which a mean
    with terms of both signs adds up to a smaller number, not its own magnitude (the result is ~0.2, the terms ~1.5;
    two summation orders, or exp's last bit on another CPU's vector path, move it by ulps of the terms)."""
    return f32_roundoff(adv[:, None] * (logp - old).exp())


def _trl_loss(
    loss_type: str,
    logp: torch.Tensor,
    old,
    ref,
    cmask,
    tmask,
    adv,
    beta: float,
    eps_low: float,
    eps_high: float,
    num_items=None,
    accumulation: int = 1,
):
    stub = SimpleNamespace(
        loss_type=loss_type,
        beta=beta,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        importance_sampling_level="token",
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        max_completion_length=MAX_LEN,
        current_gradient_accumulation_steps=accumulation,
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=accumulation),
        accelerator=SimpleNamespace(
            gather=lambda x: x,
            gather_for_metrics=lambda x: x,
            reduce=lambda x, reduction="sum": x,
            num_processes=1,
            sync_gradients=True,
        ),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(logp.shape[0], 2, dtype=torch.long),
        "prompt_mask": torch.ones(logp.shape[0], 2),
        "completion_ids": torch.zeros(logp.shape, dtype=torch.long),
        "completion_mask": cmask,
        "tool_mask": tmask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }
    if num_items is not None:
        inputs["num_items_in_batch"] = torch.tensor(float(num_items))
    loss = GRPOTrainer._compute_loss(stub, None, inputs)
    return loss, stub._metrics["train"]


def _ours(
    mode: str, logp, old, ref, mask, adv, beta: float, eps_low: float, eps_high: float, agg: Aggregation | None = None
):
    mb = SimpleNamespace(
        loss_mask=mask, adv_mask=mask, old_logprob=old, ref_logprob=ref, advantages=adv[:, None] * mask
    )
    a = SimpleNamespace(
        clip_ratio_low=eps_low,
        clip_ratio_high=eps_high,
        entropy_coef=0.0,
        kl_coef=beta,
        kl_estimator="k3",
        kl_in_reward=False,
        vf_coef=0.0,
        value_clip=0.0,
    )
    agg = agg or Aggregation.of(mode, mask, norm_length=MAX_LEN)
    return objective(logp, torch.zeros_like(logp), None, mb, a, agg, agg)


@pytest.mark.parametrize(
    "loss_type,mode",
    [
        ("grpo", "seq-mean-token-mean"),
        ("bnpo", "token-mean"),
        ("dr_grpo", "seq-mean-token-sum-norm"),
        ("dapo", "token-mean"),
    ],
)
@pytest.mark.parametrize("beta,eps_low,eps_high", [(0.0, 0.2, 0.2), (0.04, 0.2, 0.28)])
def test_same_loss_gradient_and_statistics_as_trl(loss_type, mode, beta, eps_low, eps_high):
    logp0, old, ref, cmask, tmask, adv = _tensors()
    mask = cmask * tmask
    lp_trl = logp0.clone().requires_grad_(True)
    loss_trl, metrics = _trl_loss(
        loss_type, lp_trl, old, ref, cmask, tmask, adv, beta, eps_low, eps_high, num_items=mask.sum()
    )
    loss_trl.backward()
    lp_ours = logp0.clone().requires_grad_(True)
    loss_ours, stats = _ours(mode, lp_ours, old, ref, mask, adv, beta, eps_low, eps_high)
    loss_ours.backward()
    assert float(loss_ours.detach()) == pytest.approx(
        float(loss_trl.detach()), rel=0, abs=_loss_roundoff(logp0, old, adv)
    )
    torch.testing.assert_close(lp_ours.grad, lp_trl.grad, rtol=1e-5, atol=1e-7)  # per token, ~1e-2: rtol is ~1e3 ulps
    assert bool((lp_ours.grad[mask == 0] == 0).all())  # the retrieved tokens get no gradient, in both
    assert 0 < stats["actor/pg_clipfrac"] < 1  # the case exercises clipping
    assert stats["actor/pg_clipfrac"] == pytest.approx(metrics["clip_ratio/region_mean"][0], rel=1e-6)
    assert stats["actor/pg_clipfrac_low"] == pytest.approx(metrics["clip_ratio/low_mean"][0], rel=1e-6, abs=1e-9)
    assert stats["actor/pg_clipfrac_high"] == pytest.approx(metrics["clip_ratio/high_mean"][0], rel=1e-6, abs=1e-9)
    assert "actor/pg_clipfrac_lower" not in stats  # veRL's dual-clip fraction: only with clip_ratio_c
    if beta and mode == "token-mean":
        assert stats["actor/kl_loss"] == pytest.approx(metrics["kl"][0], rel=1e-5)


def test_micro_batches_accumulate_to_trls_dapo_loss_over_the_whole_batch():
    # DAPO normalises by the number of loss tokens in the whole batch; accumulated over two micro-batches, our
    # token-mean with the mini-batch's denominators gives TRL's loss and gradient.
    logp0, old, ref, cmask, tmask, adv = _tensors(1)
    mask = cmask * tmask
    lp_trl = logp0.clone().requires_grad_(True)
    loss_trl, _ = _trl_loss("dapo", lp_trl, old, ref, cmask, tmask, adv, 0.04, 0.2, 0.28, num_items=mask.sum())
    loss_trl.backward()
    lp = logp0.clone().requires_grad_(True)
    agg = Aggregation.of("token-mean", mask)
    total = 0.0
    for rows in ([0, 1], [2, 3]):
        l, _ = _ours("token-mean", lp[rows], old[rows], ref[rows], mask[rows], adv[rows], 0.04, 0.2, 0.28, agg=agg)
        l.backward()
        total += float(l.detach())
    assert total == pytest.approx(float(loss_trl.detach()), rel=0, abs=_loss_roundoff(logp0, old, adv))
    torch.testing.assert_close(lp.grad, lp_trl.grad, rtol=1e-5, atol=1e-7)
