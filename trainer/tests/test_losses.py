"""Advantages and losses on small hand-computed cases, the KL estimators against their closed forms, PPO clipping at
its boundaries, and gradient accumulation that is exact for every aggregation mode."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from search_agent_trainer.advantages import (
    gae_advantage,
    grpo_outcome_advantage,
    masked_whiten,
    reinforce_plus_plus_advantage,
    token_rewards,
    zero_std_group_fraction,
)
from search_agent_trainer.losses import (
    Aggregation,
    agg_loss,
    clipped_surrogate,
    clipped_value_loss,
    entropy_from_logits,
    kl_penalty,
    objective,
)

T = torch.tensor


def close(x: torch.Tensor, expected, **kw) -> None:
    torch.testing.assert_close(x.float(), torch.tensor(expected, dtype=torch.float32), **kw)


# -- advantages ------------------------------------------------------------------------------------------------
def test_grpo_advantage_is_group_normalised_with_the_unbiased_std():
    scores = T([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = [0, 0, 0, 1, 1, 1]
    adv = grpo_outcome_advantage(scores, groups)
    # group 0: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert adv[:3].tolist() == pytest.approx(
        [(2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6)], rel=1e-6
    )
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]  # all equal: no signal
    assert zero_std_group_fraction(scores, groups) == 0.5


def test_dr_grpo_drops_the_std_division():
    adv = grpo_outcome_advantage(T([1.0, 0.0, 0.0, 0.0]), ["a", "a", "a", "a"], norm_adv_by_std=False)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_grpo_group_of_one_keeps_its_reward():
    assert grpo_outcome_advantage(T([0.5]), [0]).tolist() == pytest.approx([0.5 / (1 + 1e-6)])


def test_token_rewards_put_the_score_on_the_last_generated_token_minus_the_kl_penalty():
    r = token_rewards(T([1.0, 2.0]), T([2, 0]), 3)
    assert r.tolist() == [[0, 0, 1], [2, 0, 0]]
    kl = T([[0.1, 0.2, 0.3], [0.0, 0.5, 0.0]])
    close(token_rewards(T([1.0, 2.0]), T([2, 0]), 3, kl, 0.5), [[-0.05, -0.1, 0.85], [2.0, -0.25, 0.0]])


def test_masked_whiten_uses_only_the_masked_entries():
    x = T([[1.0, 2.0, 3.0, 100.0]])
    m = T([[1.0, 1.0, 1.0, 0.0]])
    w = masked_whiten(x, m)
    # mean 2, unbiased var 1
    close(w * m, [[-1.0, 0.0, 1.0, 0.0]], atol=1e-6, rtol=0)


def test_reinforce_plus_plus_returns_pass_through_retrieved_tokens_then_are_whitened_over_the_batch():
    # one trajectory: gen gen [retrieved retrieved] gen, reward 1 on the last token, γ = 0.5
    rewards = T([[0.0, 0.0, 0.0, 0.0, 1.0]])
    mask = T([[1.0, 1.0, 0.0, 0.0, 1.0]])
    adv, ret = reinforce_plus_plus_advantage(rewards, mask, gamma=0.5)
    close(ret, [[1 / 16, 1 / 8, 0.0, 0.0, 1.0]])  # γ applies per position, masked ones too
    raw = torch.tensor([1 / 16, 1 / 8, 1.0])
    expected = (raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)
    assert adv[0, [0, 1, 4]].tolist() == pytest.approx(expected.tolist(), rel=1e-5)
    assert adv[0, [2, 3]].tolist() == [0.0, 0.0]


def test_whitening_statistics_come_from_the_loss_mask_only():
    # advantages defined over the whole response (Search-R1), but the mean and std are over the trained tokens: two
    # trajectories with the same generated returns get the same advantages however many retrieved tokens they have
    rewards = T([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.5]])
    response = torch.ones(2, 5)
    loss = T([[1.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 1.0]])
    adv, _ = reinforce_plus_plus_advantage(rewards, response, 1.0, whiten_mask=loss)
    raw = torch.tensor([1.0, 1.0, 0.5, 0.5])
    expected = (raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)
    assert adv[loss.bool()].tolist() == pytest.approx(expected.tolist(), rel=1e-5)
    assert adv[0, 1:4].tolist() == pytest.approx([float(expected[0])] * 3, rel=1e-5)  # defined on retrieved tokens too
    values = torch.zeros(2, 5)
    gadv, _ = gae_advantage(rewards, values, response, 1.0, 1.0, whiten_mask=loss)
    assert gadv[loss.bool()].tolist() == pytest.approx(expected.tolist(), rel=1e-5)


def test_gae_by_hand_and_skipping_masked_positions():
    # γ = 0.9, λ = 0.8; tokens a, b with values 0.5, 0.6; reward 1 at b.
    rewards = T([[0.0, 1.0]])
    values = T([[0.5, 0.6]])
    mask = T([[1.0, 1.0]])
    adv, ret = gae_advantage(rewards, values, mask, 0.9, 0.8)
    d1 = 1.0 + 0 - 0.6  # δ_b
    d0 = 0.0 + 0.9 * 0.6 - 0.5  # δ_a
    a_b, a_a = d1, d0 + 0.9 * 0.8 * d1
    close(ret, [[a_a + 0.5, a_b + 0.6]])
    raw = torch.tensor([a_a, a_b])
    close(adv, [((raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)).tolist()])
    # the same trajectory with a retrieved block (mask 0, arbitrary values) between a and b: identical returns at a, b
    rewards2 = T([[0.0, 0.0, 0.0, 1.0]])
    values2 = T([[0.5, 9.0, -9.0, 0.6]])
    mask2 = T([[1.0, 0.0, 0.0, 1.0]])
    adv2, ret2 = gae_advantage(rewards2, values2, mask2, 0.9, 0.8)
    assert ret2[0, [0, 3]].tolist() == pytest.approx([a_a + 0.5, a_b + 0.6])
    assert adv2[0, [1, 2]].tolist() == [0.0, 0.0]


# -- KL estimators ---------------------------------------------------------------------------------------------
def test_kl_estimators_against_their_closed_forms():
    # two categorical distributions; KL(p‖q) exactly, and each estimator's expectation under p
    p = T([0.5, 0.3, 0.2])
    q = T([0.2, 0.5, 0.3])
    exact = float((p * (p / q).log()).sum())
    lp, lq = p.log(), q.log()
    k1 = kl_penalty(lp, lq, "k1")
    k2 = kl_penalty(lp, lq, "k2")
    k3 = kl_penalty(lp, lq, "k3")
    assert float((p * k1).sum()) == pytest.approx(exact, rel=1e-6)  # k1 = log p/q: unbiased
    assert float((p * k3).sum()) == pytest.approx(exact, rel=1e-6)  # k3 = r − 1 − log r: unbiased, ≥ 0
    assert bool((k3 >= 0).all())
    r = q / p
    assert k2.tolist() == pytest.approx((0.5 * r.log() ** 2).tolist(), rel=1e-6)
    assert k3.tolist() == pytest.approx((r - 1 - r.log()).tolist(), rel=1e-6)
    # k3 is clamped at 10 as in veRL
    assert float(kl_penalty(T([0.0]), T([20.0]), "k3")) == 10.0


def test_entropy_matches_its_definition():
    logits = T([[2.0, 0.5, -1.0]])
    p = torch.softmax(logits, -1)
    assert float(entropy_from_logits(logits)) == pytest.approx(float(-(p * p.log()).sum()), rel=1e-6)


# -- the clipped surrogate -------------------------------------------------------------------------------------
def _pg(ratio: float, adv: float, low: float = 0.2, high: float = 0.28):
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    out = clipped_surrogate(
        lp, torch.zeros(1, 1), T([[adv]]), torch.ones(1, 1), low, high, Aggregation("token-mean", 1, 1)
    )
    out.loss.backward()
    return float(out.loss.detach()), float(lp.grad), float(out.clipfrac), float(out.clipfrac_low)


@pytest.mark.parametrize(
    "ratio,adv,loss,grad_zero,clipped",
    [
        (1.0, 1.0, -1.0, False, 0.0),
        (1.27, 1.0, -1.27, False, 0.0),  # inside 1 + ε_high (0.28)
        (1.5, 1.0, -1.28, True, 1.0),  # A > 0: capped at 1 + ε_high, no gradient
        (1.5, -1.0, 1.5, False, 0.0),  # A < 0: the unclipped (worse) term is kept
        (0.5, -1.0, 0.8, True, 1.0),  # A < 0: floored at 1 − ε_low
        (0.5, 1.0, -0.5, False, 0.0),  # A > 0, ratio low: keep improving
        (0.81, -1.0, 0.81, False, 0.0),  # just inside 1 − ε_low
    ],
)
def test_clipping_at_the_boundaries(ratio, adv, loss, grad_zero, clipped):
    l, g, cf, cf_low = _pg(ratio, adv)
    assert l == pytest.approx(loss, rel=1e-6)
    assert (g == 0.0) == grad_zero
    assert cf == clipped
    assert cf_low == (1.0 if clipped and adv < 0 else 0.0)


def test_dual_clip_caps_the_loss_of_negative_advantages_at_c():
    def dual(ratio: float, adv: float, c: float | None = 3.0):
        lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
        out = clipped_surrogate(
            lp, torch.zeros(1, 1), T([[adv]]), torch.ones(1, 1), 0.2, 0.2, Aggregation("token-mean", 1, 1), c
        )
        out.loss.backward()
        return float(out.loss.detach()), float(lp.grad), float(out.clipfrac_dual)

    assert dual(5.0, -1.0) == (pytest.approx(3.0), 0.0, 1.0)  # −Â·ρ = 5 capped at −Â·c = 3, no gradient
    assert dual(5.0, -1.0, None)[0] == pytest.approx(5.0)  # without dual-clip: the unclipped term
    l, g, d = dual(2.0, -1.0)  # under c: untouched
    assert (l, d) == (pytest.approx(2.0), 0.0) and g != 0.0
    assert dual(5.0, 1.0)[2] == 0.0 and dual(5.0, 1.0)[0] == pytest.approx(-1.2)  # Â > 0: the ordinary clip


def test_huge_log_ratios_are_clamped_before_exp_so_gradients_stay_finite():
    # a log-ratio of 100 (e.g. a token the old policy gave ~e^-100): exp overflows; clamped at ±20 as veRL does
    for estimator in ("k1", "k2", "k3"):
        lp = torch.tensor([[0.0, -0.5]], requires_grad=True)
        kl = kl_penalty(lp, T([[-100.0, -0.5]]), estimator).sum() + kl_penalty(lp, T([[100.0, -0.5]]), estimator).sum()
        kl.backward()
        assert torch.isfinite(kl) and torch.isfinite(lp.grad).all(), estimator
    lp = torch.tensor([[0.0]], requires_grad=True)
    out = clipped_surrogate(lp, T([[-100.0]]), T([[-1.0]]), torch.ones(1, 1), 0.2, 0.2, Aggregation("token-mean", 1, 1))
    out.loss.backward()
    assert float(out.loss.detach()) == pytest.approx(math.exp(20.0), rel=1e-5) and torch.isfinite(lp.grad).all()


# -- aggregation ---------------------------------------------------------------------------------------------
LOSS = T([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
MASK = T([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", (6 + 4 + 4) / 8),
        ("seq-mean-token-mean", (2 + 4 + 1) / 3),
        ("seq-mean-token-sum", (6 + 4 + 4) / 3),
        ("seq-mean-token-sum-norm", (6 + 4 + 4) / (3 * 10)),
    ],
)
def test_aggregation_modes_by_hand_and_exact_under_micro_batching(mode, expected):
    agg = Aggregation.of(mode, MASK, norm_length=10)
    assert float(agg_loss(LOSS, MASK, agg)) == pytest.approx(expected)
    # micro-batches of 2 and 1 rows, with the mini-batch's denominators, sum to the same loss
    parts = float(agg_loss(LOSS[:2], MASK[:2], agg)) + float(agg_loss(LOSS[2:], MASK[2:], agg))
    assert parts == pytest.approx(expected)


def test_value_loss_is_clipped_around_the_old_value():
    v = torch.tensor([[2.0]], requires_grad=True)
    loss, cf = clipped_value_loss(v, T([[0.0]]), T([[3.0]]), torch.ones(1, 1), 0.5, Aggregation("token-mean", 1, 1))
    # unclipped (2 − 3)² = 1; clipped (0.5 − 3)² = 6.25 → the max, 0.5 · 6.25, and no gradient through the clip
    assert float(loss.detach()) == pytest.approx(3.125)
    assert float(cf) == 1.0
    loss.backward()
    assert float(v.grad) == 0.0


def test_objective_with_flat_rows_left_out_keeps_the_surrogate_and_an_unbiased_kl():
    """skip_zero_std_groups' loss: rows with Â = 0 leave the micro-batches, every term keeps the whole mini-batch's
    denominators. The surrogate (and its gradient) is then exactly the whole batch's; the KL term, with the k flat
    rows kept weighted F / k, averages to the whole batch's over every choice of k rows (enumerated here)."""
    from itertools import combinations

    a = SimpleNamespace(
        clip_ratio_low=0.2, clip_ratio_high=0.2, entropy_coef=0.0, kl_coef=0.2, kl_estimator="k1", kl_in_reward=False
    )
    mask = T([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    # rows 1, 3, 4 flat
    adv = T([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    old = T([[-1.0, -2.0, -1.0], [-0.5, -1.5, -2.5], [-2.0, -1.0, -0.5], [-0.7, -0.1, -0.2], [-3.0, -0.2, -1.0]])
    ref = old - T([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [1.0, 1.1, 1.2], [1.3, 1.4, 1.5]])
    for mode in ("token-mean", "seq-mean-token-mean"):
        agg = Aggregation.of(mode, mask)
        beta0 = SimpleNamespace(**{**vars(a), "kl_coef": 0.0})
        whole_lp = old.clone().requires_grad_(True)
        mb = SimpleNamespace(loss_mask=mask, adv_mask=mask, old_logprob=old, advantages=adv, ref_logprob=ref)
        whole, _ = objective(whole_lp * 1.1, None, None, mb, beta0, agg, agg)
        whole.backward()
        kept = [0, 2]
        lp = old[kept].clone().requires_grad_(True)
        mb = SimpleNamespace(
            loss_mask=mask[kept],
            adv_mask=mask[kept],
            old_logprob=old[kept],
            advantages=adv[kept],
            ref_logprob=ref[kept],
        )
        part, _ = objective(lp * 1.1, None, None, mb, beta0, agg, agg)
        part.backward()
        assert float(part.detach()) == pytest.approx(float(whole.detach()))
        assert torch.allclose(lp.grad, whole_lp.grad[kept]) and float(whole_lp.grad[[1, 3, 4]].abs().sum()) == 0.0
        # the KL term: the flat rows' share estimated from k of F = 3, weighted 3 / k
        mb = SimpleNamespace(loss_mask=mask, adv_mask=mask, old_logprob=old, advantages=adv, ref_logprob=ref)
        _, full = objective(old, None, None, mb, a, agg, agg)
        for k in (1, 2, 3):
            estimates = []
            for pick in combinations([1, 3, 4], k):
                rows = [0, 2, *pick]
                w = T([1.0, 1.0] + [3 / k] * k)
                mb = SimpleNamespace(
                    loss_mask=mask[rows],
                    adv_mask=mask[rows],
                    old_logprob=old[rows],
                    advantages=adv[rows],
                    ref_logprob=ref[rows],
                    reg_weight=w,
                )
                estimates.append(objective(old[rows], None, None, mb, a, agg, agg)[1]["actor/kl_loss"])
            assert sum(estimates) / len(estimates) == pytest.approx(full["actor/kl_loss"]), (mode, k)
            assert k < 3 or estimates[0] == pytest.approx(full["actor/kl_loss"])  # all of them: the whole batch's
            assert k == 3 or len(set(round(e, 9) for e in estimates)) > 1  # an estimate, not the same number


def test_objective_adds_entropy_kl_and_value_terms_with_their_coefficients():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ent = T([[0.5, 1.5]])
    mb = SimpleNamespace(
        loss_mask=T([[1.0, 1.0]]),
        adv_mask=T([[1.0, 1.0]]),
        old_logprob=T([[-1.0, -2.0]]),
        advantages=T([[1.0, -1.0]]),
        ref_logprob=T([[-1.5, -2.0]]),
        old_values=T([[0.0, 0.0]]),
        returns=T([[1.0, 1.0]]),
    )
    a = SimpleNamespace(
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        entropy_coef=0.1,
        kl_coef=0.2,
        kl_estimator="k1",
        kl_in_reward=False,
        vf_coef=0.5,
        value_clip=10.0,
    )
    agg = Aggregation.of("token-mean", mb.loss_mask)
    loss, stats = objective(lp, ent, T([[0.0, 2.0]]), mb, a, agg, agg)
    pg = (-1.0 + 1.0) / 2
    kl = (0.5 + 0.0) / 2
    vf = 0.5 * (1.0 + 1.0) / 2
    assert float(loss.detach()) == pytest.approx(pg - 0.1 * 1.0 + 0.2 * kl + 0.5 * vf)
    assert stats["actor/kl_loss"] == pytest.approx(kl)
    assert stats["critic/vf_loss"] == pytest.approx(vf)
    a.kl_in_reward = True
    loss2, stats2 = objective(lp, ent, None, mb, a, agg, agg)
    assert "actor/kl_loss" not in stats2 and float(loss2.detach()) == pytest.approx(pg - 0.1)
