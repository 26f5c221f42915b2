"""Log-probabilities (and entropies) of the trained tokens from the last hidden states, a chunk of positions at a time.

A window's logits are (positions × vocabulary): a micro-batch of 8 sequences of 4,097 positions over Qwen's 151,936
tokens is 10 GB in bf16, and the log-softmax, its fp32 copy and the entropy's softmax each as much again. Only the
positions in the loss are needed (`window_stats` selects their hidden states first), and per position only two
numbers: log π(target) = z_target − logsumexp(z) and H = logsumexp(z) − Σ softmax(z) z (with z the logits divided by
the sampling temperature). So the output layer runs on `chunk_positions(V)` positions at a time, each chunk is
reduced to those two numbers and dropped; with autograd each chunk is checkpointed (its logits are recomputed in the
backward pass), so the graph keeps (positions × hidden), never (positions × vocabulary). Same numbers as the whole
window at once, to fp32 round-off (tested, gradients too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

# Logits per chunk (positions × vocabulary): 64 M, ~1 GB of fp32 temporaries at most (the planner counts the same).
CHUNK_ELEMENTS = 1 << 26


def chunk_positions(vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, vocab))


def _chunk(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    temperature: float,
    want_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    from .losses import entropy_from_logits

    z = head(hidden).float()
    if temperature and temperature != 1.0:
        z = z / temperature
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    if not want_entropy:
        return logp, torch.zeros_like(logp)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):  # a statistic: no graph
        return logp, entropy_from_logits(z)


def token_logprobs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    vocab: int,
    temperature: float = 1.0,
    want_entropy: bool = False,
    entropy_grad: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log π(target), entropy or None) for hidden states (N, H) and their targets (N,); `head` maps hidden states
    to logits over `vocab` tokens (the output layer). The entropy carries a gradient only with `entropy_grad` (an
    entropy bonus). `chunk`: positions per chunk (default `chunk_positions(vocab)`)."""
    n = hidden.shape[0]
    size = chunk or chunk_positions(vocab)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    logps, ents = [], []
    for lo in range(0, n, size):
        h, t = hidden[lo : lo + size], targets[lo : lo + size]
        if grad:
            lp, ent = checkpoint(_chunk, h, t, head, temperature, want_entropy, entropy_grad, use_reentrant=False)
        else:
            lp, ent = _chunk(h, t, head, temperature, want_entropy, entropy_grad)
        logps.append(lp)
        ents.append(ent if entropy_grad else ent.detach())
    empty = hidden.new_zeros((0,), dtype=torch.float32)
    logp = torch.cat(logps) if logps else empty
    return logp, ((torch.cat(ents) if ents else empty) if want_entropy else None)
