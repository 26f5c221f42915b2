"""The training batch: trajectories as padded token tensors, with the masks of DESIGN §6.

Sequences (prompt + response) are left-padded to a common length T, so every response ends at column T − 1 and all
responses lie in the last R columns (R = the longest response): the "response window". Every token tensor of the
algorithm — log-probs, values, advantages, masks — is (B, R) over that window; column j holds the token at sequence
column T − R + j, predicted from the logits at column T − R + j − 1. A shorter response is right-aligned in the window;
the columns before it hold its prompt (or padding) and are 0 in every mask.

Masks, over the window:
- response_mask: 1 on every response token (generated, retrieved, feedback, and in the tool-call dialect the chat
  template's markers of a tool turn, role prompt);
- generated_mask: 1 on the tokens the policy generated;
- loss_mask: generated_mask (DESIGN §6), or response_mask when `algorithm.loss_masking` is false (the ablation);
- adv_mask: where advantages and values are defined: generated_mask when `algorithm.mask_advantages` (veRL),
  response_mask otherwise (Search-R1).
And `rollout_logprob`: the sampler's log-prob of each generated token (0 elsewhere), kept beside the trainer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from .rollout import Trajectory


@dataclass
class SequenceBatch:
    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    position_ids: torch.Tensor  # (B, T)
    response_length: torch.Tensor  # (B,)
    response_mask: torch.Tensor  # (B, R) float
    generated_mask: torch.Tensor  # (B, R)
    loss_mask: torch.Tensor  # (B, R)
    adv_mask: torch.Tensor  # (B, R)
    last_generated: torch.Tensor  # (B,) window column of the last generated token
    rollout_logprob: torch.Tensor  # (B, R) log-prob at sampling time (generated tokens; 0 elsewhere)
    # Filled in by the train loop:
    old_logprob: torch.Tensor | None = None
    ref_logprob: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    token_rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    # (B,) bool: the rows the trainer scored and trained (its log-prob passes, the update); None: every row.
    # `algorithm.skip_zero_std_groups` leaves out most rows whose advantages are all 0 …
    trained: torch.Tensor | None = None
    # … and (B,) the weight of each row in the KL and entropy terms: the flat rows kept stand for those left out.
    reg_weight: torch.Tensor | None = None

    def trained_rows(self) -> list[int]:
        return list(range(self.size)) if self.trained is None else self.trained.nonzero().flatten().tolist()

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def window(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def targets(self) -> torch.Tensor:
        return self.input_ids[:, -self.window :]

    def select(self, index: Sequence[int] | torch.Tensor) -> SequenceBatch:
        """The rows `index`, trimmed to their own T and R."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.input_ids.device)
        R = int(self.response_length[idx].max().item())
        T = int(self.attention_mask[idx].sum(-1).max().item())
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif f.name in ("input_ids", "attention_mask", "position_ids"):
                out[f.name] = v[idx][:, -T:]
            elif v.dim() == 2:
                out[f.name] = v[idx][:, -R:]
            else:
                out[f.name] = v[idx]
        out["last_generated"] = out["last_generated"] - (self.window - R)
        return replace(self, **out)

    def to(self, device: torch.device) -> SequenceBatch:
        return replace(
            self,
            **{
                f.name: (getattr(self, f.name).to(device) if getattr(self, f.name) is not None else None)
                for f in fields(self)
            },
        )


def by_length(batch: SequenceBatch, rows: Sequence[int], size: int) -> list[list[int]]:
    """`rows` in micro-batches of `size`, sorted by sequence length so each micro-batch pads little (the loss of a
    mini-batch does not depend on how it is cut: Aggregation carries the mini-batch's denominators)."""
    lengths = batch.attention_mask.sum(-1)
    ordered = sorted(rows, key=lambda i: int(lengths[i]))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def make_batch(
    trajs: Sequence[Trajectory], pad_id: int, loss_masking: bool = True, mask_advantages: bool = False
) -> SequenceBatch:
    B = len(trajs)
    T = max(len(t.prompt_ids) + len(t.ids) for t in trajs)
    R = max(len(t.ids) for t in trajs)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    response_mask = torch.zeros((B, R))
    generated_mask = torch.zeros((B, R))
    last_generated = torch.zeros(B, dtype=torch.long)
    rollout_logprob = torch.zeros((B, R))
    for i, t in enumerate(trajs):
        seq = t.prompt_ids + t.ids
        input_ids[i, T - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        attention_mask[i, T - len(seq) :] = 1
        r = len(t.ids)
        if r:
            response_mask[i, R - r :] = 1
            gen = torch.tensor([1.0 if role == "generated" else 0.0 for role in t.roles])
            generated_mask[i, R - r :] = gen
            nz = gen.nonzero()
            last_generated[i] = R - r + (int(nz[-1]) if len(nz) else r - 1)
            rollout_logprob[i, R - r :] = torch.tensor([0.0 if x is None else float(x) for x in t.sample_logprobs])
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return SequenceBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_length=torch.tensor([len(t.ids) for t in trajs], dtype=torch.long),
        response_mask=response_mask,
        generated_mask=generated_mask,
        loss_mask=generated_mask.clone() if loss_masking else response_mask.clone(),
        adv_mask=generated_mask.clone() if mask_advantages else response_mask.clone(),
        last_generated=last_generated,
        rollout_logprob=rollout_logprob,
    )
