"""The loss terms, named as in the papers. Token tensors are (B, R) over the response window; `mask` is the loss
mask (DESIGN §6: 1 exactly on generated tokens, unless masking is off) and is applied to every term here.

- Clipped surrogate (PPO, Schulman et al. 2017), with DAPO's decoupled clip range (Yu et al. 2025, "clip-higher"):
  ρ_t = exp(log π_θ − log π_old);  L^CLIP = −min(ρ_t Â_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) Â_t);
  with dual-clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"; veRL's clip_ratio_c) for
  Â_t < 0 the loss is capped: min(L^CLIP, −c Â_t).
- KL to the reference (Schulman's estimators, http://joschu.net/blog/kl-approx.html), with
  log r = log π_ref − log π_θ:  k1 = −log r;  k2 = ½ (log r)²;  k3 = r − 1 − log r (veRL's "low_var_kl", clamped to
  [−10, 10] as veRL does).
- Every log-ratio is clamped to [−20, 20] before it is exponentiated (ρ_t and k3's r, as veRL does): exp of a
  log-ratio of ~100 overflows and its gradient is NaN.
- Entropy H = logsumexp(z) − Σ softmax(z) z.
- Clipped value loss (PPO): ½ max((V − G)², (V_old + clip(V − V_old, −c, c) − G)²).
- Aggregation (`loss_agg_mode`): token-mean (DAPO: every token counts once), seq-mean-token-mean (GRPO as
  published: mean per sequence, then over sequences), seq-mean-token-sum, seq-mean-token-sum-norm (Dr. GRPO: sums
  divided by a constant length, so long and short answers are not weighted differently).

Micro-batching: `Aggregation` holds the mini-batch's denominators, so the losses of the micro-batches of one
mini-batch sum to the loss of the whole mini-batch (gradient accumulation is exact for every mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

KL_CLAMP = 10.0
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class Aggregation:
    """How token losses become one number, with the denominators of the whole mini-batch.
    mode: the loss_agg_mode; tokens: Σ mask over the mini-batch; sequences: sequences in the mini-batch;
    norm_length: the constant length of seq-mean-token-sum-norm (rollout.max_response_length)."""

    mode: str
    tokens: float
    sequences: int
    norm_length: int = 1

    @staticmethod
    def of(mode: str, mask: torch.Tensor, norm_length: int = 1) -> Aggregation:
        return Aggregation(mode, float(mask.sum().item()), int(mask.shape[0]), norm_length)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, agg: Aggregation) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss."""
    masked = loss_mat * mask
    if agg.mode == "token-mean":
        return masked.sum() / max(agg.tokens, 1.0)
    if agg.mode == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / max(agg.sequences, 1)
    if agg.mode == "seq-mean-token-sum":
        return masked.sum(-1).sum() / max(agg.sequences, 1)
    if agg.mode == "seq-mean-token-sum-norm":
        return masked.sum() / (max(agg.sequences, 1) * agg.norm_length)
    raise ValueError(f"unknown loss_agg_mode {agg.mode!r}")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from samples of π_θ."""
    log_ratio = logprob - ref_logprob  # log π_θ − log π_ref = −log r
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        neg = (-log_ratio).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # log r
        return (torch.exp(neg) - neg - 1).clamp(min=-KL_CLAMP, max=KL_CLAMP)
    raise ValueError(f"unknown kl_estimator {estimator!r}")


@dataclass
class PolicyLoss:
    loss: torch.Tensor
    clipfrac: torch.Tensor  # fraction of masked tokens where the clipped term was chosen (veRL's pg_clipfrac)
    clipfrac_low: torch.Tensor  # … on the low side: ρ < 1 − ε_low with Â < 0 (TRL's clip_ratio/low_mean)
    clipfrac_high: torch.Tensor  # … on the high side: ρ > 1 + ε_high with Â > 0 (TRL's clip_ratio/high_mean)
    clipfrac_dual: torch.Tensor  # where dual-clip capped the loss: Â < 0 and ρ > c (veRL's pg_clipfrac_lower)
    ppo_kl: torch.Tensor  # mean(log π_old − log π_θ): how far the update moved the policy


def clipped_surrogate(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    agg: Aggregation,
    clip_ratio_c: float | None = None,
) -> PolicyLoss:
    log_ratio = (logprob - old_logprob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    clipped = (pg_losses2 > pg_losses1).float()
    dual = torch.zeros_like(clipped)
    if clip_ratio_c is not None:
        pg_losses3 = -advantages * clip_ratio_c
        negative = advantages < 0
        dual = ((pg_losses > pg_losses3) & negative).float()
        pg_losses = torch.where(negative, torch.minimum(pg_losses, pg_losses3), pg_losses)
    return PolicyLoss(
        loss=agg_loss(pg_losses, mask, agg),
        clipfrac=masked_mean(clipped, mask).detach(),
        clipfrac_low=masked_mean(((ratio < 1.0 - clip_ratio_low) & (advantages < 0)).float(), mask).detach(),
        clipfrac_high=masked_mean(((ratio > 1.0 + clip_ratio_high) & (advantages > 0)).float(), mask).detach(),
        clipfrac_dual=masked_mean(dual, mask).detach(),
        ppo_kl=masked_mean(-log_ratio, mask).detach(),
    )


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H(softmax(z)) per position, computed stably."""
    logits = logits.float()
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float,
    agg: Aggregation,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, clipfrac)."""
    clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    l1 = (values - returns).square()
    l2 = (clipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(l1, l2), mask, agg)
    return loss, masked_mean((l2 > l1).float(), mask).detach()


def weighted(x: torch.Tensor, mb: Any) -> torch.Tensor:
    """x (B, R) with each sequence's `mb.reg_weight`, if the mini-batch carries one."""
    w = getattr(mb, "reg_weight", None)
    return x if w is None else x * w[:, None].to(x.dtype)


def objective(
    logprob: torch.Tensor,
    entropy: torch.Tensor | None,
    values: torch.Tensor | None,
    mb: Any,
    a: Any,
    agg: Aggregation,
    vagg: Aggregation,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch's share of the mini-batch loss, and its statistics:

        L = L^CLIP(θ) − c_H · H  + β · KL(π_θ ‖ π_ref)  + c_V · L^V
                        (entropy_coef)  (kl_coef; unless kl_in_reward)  (vf_coef; PPO)

    every term over `mb.loss_mask` (the value loss over `mb.adv_mask`). `entropy` may be None when c_H = 0 (the
    statistic is then left out). `mb.reg_weight` (B,), when present, weighs each sequence in the entropy and KL
    terms (`algorithm.skip_zero_std_groups`: a random few of the sequences with Â = 0 are kept, weighted to stand for
    all of them — an unbiased estimate of the whole mini-batch's terms; the surrogate needs no weight, the sequences
    left out add exactly 0 to it). `mb` carries old_logprob, advantages,
    ref_logprob (or None), old_values and returns (PPO); `a` is the config's algorithm section."""
    mask = mb.loss_mask
    pl = clipped_surrogate(
        logprob,
        mb.old_logprob,
        mb.advantages,
        mask,
        a.clip_ratio_low,
        a.clip_ratio_high,
        agg,
        getattr(a, "clip_ratio_c", None),
    )
    loss = pl.loss
    stats = {
        "actor/pg_loss": float(pl.loss.detach()),
        "actor/pg_clipfrac": float(pl.clipfrac),
        "actor/pg_clipfrac_low": float(pl.clipfrac_low),
        "actor/pg_clipfrac_high": float(pl.clipfrac_high),
        "actor/ppo_kl": float(pl.ppo_kl),
    }
    if entropy is not None:
        stats["actor/entropy"] = float(masked_mean(entropy.detach(), mask))
    if getattr(a, "clip_ratio_c", None) is not None:
        stats["actor/pg_clipfrac_lower"] = float(pl.clipfrac_dual)  # veRL's name for the dual-clip fraction
    if a.entropy_coef > 0:
        loss = loss - a.entropy_coef * agg_loss(weighted(entropy, mb), mask, agg)
    if mb.ref_logprob is not None and a.kl_coef > 0 and not a.kl_in_reward:
        kl_loss = agg_loss(weighted(kl_penalty(logprob, mb.ref_logprob, a.kl_estimator), mb), mask, agg)
        loss = loss + a.kl_coef * kl_loss
        stats["actor/kl_loss"] = float(kl_loss.detach())
    if values is not None:
        vf_loss, vf_clipfrac = clipped_value_loss(values, mb.old_values, mb.returns, mb.adv_mask, a.value_clip, vagg)
        loss = loss + a.vf_coef * vf_loss
        stats["critic/vf_loss"] = float(vf_loss.detach())
        stats["critic/vf_clipfrac"] = float(vf_clipfrac)
    return loss, stats
