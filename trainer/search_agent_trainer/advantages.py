"""Advantage estimators, named as in the papers. Shapes: `scores` (B,) one outcome reward per trajectory;
token tensors (B, R) over the response window; `mask` (B, R) is where advantages (and values) are defined:
the generated tokens when `algorithm.mask_advantages` is on (veRL), every response token when off (Search-R1).

- GRPO (DeepSeekMath, Shao et al. 2024, §4.1.2 outcome supervision): Â_i = (r_i − mean(r_group)) / std(r_group),
  the same for every token of trajectory i. Dr. GRPO (Liu et al. 2025) drops the division by std
  (`norm_adv_by_std = false`): Â_i = r_i − mean(r_group).
- REINFORCE++ (Hu 2025): returns G_t = Σ_{k≥t} γ^{k−t} r_k over the token rewards, whitened across the whole batch
  (global batch normalisation instead of a per-group baseline).
- PPO (Schulman et al. 2017) with GAE (Schulman et al. 2016): δ_t = r_t + γ V(s_{t+1}) − V(s_t),
  Â_t = Σ_l (γλ)^l δ_{t+l}, returns = Â + V; advantages whitened. Masked positions are skipped by the recursion
  (their value is not used as a bootstrap), as veRL does for multi-turn.
Whitening (REINFORCE++, GAE) takes its mean and std over the loss mask — the tokens trained on —, whatever `mask`
is: over every response token, a trajectory with more searches would weigh more in the statistics (veRL whitens over
its response mask, which in multi-turn is the loss mask).

`token_rewards` puts each trajectory's score on its last generated token, minus β·KL per token when the KL penalty is
in the reward (`kl_in_reward`, PPO-style).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

EPS = 1e-6


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x − mean) / sqrt(var + 1e-8) with mean and (unbiased) variance over the masked entries (veRL's masked_whiten)."""
    mean = masked_mean(x, mask)
    n = mask.sum()
    var = ((x - mean) ** 2 * mask).sum() / (n - 1).clamp(min=1)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


def token_rewards(
    scores: torch.Tensor, last_index: torch.Tensor, R: int, kl: torch.Tensor | None = None, kl_coef: float = 0.0
) -> torch.Tensor:
    """(B, R): the score at `last_index[i]` (the last generated token), minus `kl_coef · kl` where kl is given."""
    r = torch.zeros(scores.shape[0], R, dtype=torch.float32, device=scores.device)
    r[torch.arange(scores.shape[0], device=scores.device), last_index] = scores.float()
    if kl is not None and kl_coef:
        r = r - kl_coef * kl
    return r


def grpo_outcome_advantage(
    scores: torch.Tensor, groups: Sequence[int | str], norm_adv_by_std: bool = True, eps: float = EPS
) -> torch.Tensor:
    """(B,) group-normalised advantages. A group of one sample gets mean 0 and std 1 (veRL's convention);
    std is the unbiased sample standard deviation (torch.std), as in veRL and TRL."""
    by_group: dict[int | str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    adv = torch.zeros_like(scores, dtype=torch.float32)
    for idx in by_group.values():
        r = scores[idx].float()
        if len(idx) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = r.mean(), r.std()
        adv[idx] = (r - mean) / (std + eps) if norm_adv_by_std else r - mean
    return adv


def zero_std_group_fraction(scores: torch.Tensor, groups: Sequence[int | str]) -> float:
    """Fraction of groups (of ≥ 2 samples) whose rewards are all equal: GRPO learns nothing from them."""
    by_group: dict[int | str, list[float]] = defaultdict(list)
    for s, g in zip(scores.tolist(), groups):
        by_group[g].append(s)
    sized = [v for v in by_group.values() if len(v) >= 2]
    return sum(1 for v in sized if max(v) == min(v)) / len(sized) if sized else 0.0


def reinforce_plus_plus_advantage(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, whiten_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (B, R). Returns are discounted sums of the token rewards. A position outside the
    mask passes the running return through: veRL's loop resets it there (its mask was meant as the padding after
    EOS), which in a multi-turn trajectory would zero the return of every turn before a retrieved block. Whitened
    with the statistics over `whiten_mask` (the loss mask; default `mask`)."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    adv = masked_whiten(returns, mask if whiten_mask is None else whiten_mask) * mask
    return adv, returns * mask


def gae_advantage(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages whitened, returns = Â + V), both (B, R), defined over `mask`. Positions with mask 0 are skipped: the
    recursion carries the next value and the running Â across them unchanged (veRL's multi-turn GAE). Whitened with
    the statistics over `whiten_mask` (the loss mask; default `mask`)."""
    B, R = rewards.shape
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    last_gae = torch.zeros(B, dtype=values.dtype, device=values.device)
    adv = torch.zeros_like(rewards)
    for t in reversed(range(R)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae_t = delta + gamma * lam * last_gae
        next_value = values[:, t] * m + (1 - m) * next_value
        last_gae = gae_t * m + (1 - m) * last_gae
        adv[:, t] = gae_t
    returns = (adv + values) * mask
    return masked_whiten(adv, mask if whiten_mask is None else whiten_mask) * mask, returns
