"""DESIGN §6: the loss mask is 1 exactly on generated tokens, and the policy loss, the entropy term and the KL term
all use it. Checked where it matters: the gradient of the loss with respect to the logits is exactly zero at every
prompt, retrieved and feedback position, and non-zero at every generated one; with `loss_masking: false` (the
ablation) retrieved and feedback positions get gradient too."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from search_agent_trainer.batch import make_batch
from search_agent_trainer.data import Example
from search_agent_trainer.losses import Aggregation, entropy_from_logits, objective
from search_agent_trainer.policy import Policy, token_logprobs
from search_agent_trainer.rollout import Trajectory
from search_agent_trainer.tiny import TinyCausalLM, TinyTokenizer

TEXTS = [
    "Question: who wrote it? <think> I should search </think> <search> author </search> <information> Doc 1(Title: A) text </information> <answer> Bob </answer> My previous action is invalid."
]


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    tok = TinyTokenizer.build(TEXTS)
    policy = Policy(
        TinyCausalLM(tok.vocab_size, d_model=32, layers=2, heads=2, max_len=256), "tiny", value_head=False, hidden=32
    )
    ex = Example("x", "who wrote it?", ("Bob",), "t")

    def traj(parts: list[tuple[str, str]], prompt: str = "Question: who wrote it?") -> Trajectory:
        t = Trajectory(ex, 0, 0, prompt, tok.encode(prompt))
        for role, text in parts:
            t.append(tok.encode(text), role, text)
        return t

    trajs = [
        traj(
            [
                ("generated", "<think> I should search </think> <search> author </search>"),
                ("retrieved", "\n\n<information> Doc 1(Title: A) text </information>\n\n"),
                ("generated", "<answer> Bob </answer>"),
            ]
        ),
        traj(
            [
                ("generated", "<think> it </think>"),
                ("feedback", "\nMy previous action is invalid.\n"),
                ("generated", "<answer> Bob </answer>"),
            ],
            prompt="Question: who?",
        ),
        traj([("generated", "<answer> Bob </answer>")]),
    ]
    return tok, policy, trajs


def _logit_grads(loss_masking: bool, algorithm: dict | None = None):
    tok, policy, trajs = _setup()
    batch = make_batch(trajs, tok.pad_id, loss_masking=loss_masking, mask_advantages=False)
    R = batch.window
    logits_full, _, _ = policy(batch.input_ids, batch.attention_mask, batch.position_ids)
    logits_full.retain_grad()
    logits = logits_full[:, -(R + 1) : -1]
    logp = token_logprobs(logits, batch.targets)
    batch.old_logprob = logp.detach() + 0.05 * torch.randn_like(logp)  # slightly off-policy: ratios ≠ 1
    batch.ref_logprob = logp.detach() - 0.3
    batch.advantages = torch.tensor([1.0, -0.7, 0.4])[:, None] * batch.response_mask  # non-zero on every response token
    a = SimpleNamespace(
        clip_ratio_low=10.0,
        clip_ratio_high=10.0,
        entropy_coef=0.01,
        kl_coef=0.1,
        kl_estimator="k3",
        kl_in_reward=False,
        vf_coef=0.0,
        value_clip=0.5,
        **(algorithm or {}),
    )
    agg = Aggregation.of("token-mean", batch.loss_mask)
    loss, _ = objective(logp, entropy_from_logits(logits), None, batch, a, agg, agg)
    loss.backward()
    # the logits at column c predict the token at c + 1: attribute each gradient row to the token it predicts
    grad = logits_full.grad.abs().sum(-1)[:, :-1]  # (B, T-1), column c → token c + 1
    roles = []
    for t in trajs:
        T = batch.input_ids.shape[1]
        seq_roles = ["pad"] * (T - len(t.prompt_ids) - len(t.ids)) + ["prompt"] * len(t.prompt_ids) + t.roles
        roles.append(seq_roles[1:])
    return grad, roles


def test_gradient_is_zero_exactly_at_prompt_retrieved_and_feedback_positions():
    grad, roles = _logit_grads(loss_masking=True)
    seen = set()
    for i, row in enumerate(roles):
        for c, role in enumerate(row):
            seen.add(role)
            g = float(grad[i, c])
            if role == "generated":
                assert g > 0, f"row {i} col {c}: a generated token got no gradient"
            else:
                assert g == 0.0, f"row {i} col {c}: a {role} token got gradient {g}"
    assert {"prompt", "generated", "retrieved", "feedback", "pad"} <= seen


def test_without_masking_retrieved_and_feedback_tokens_are_trained_on_too():
    grad, roles = _logit_grads(loss_masking=False)
    for i, row in enumerate(roles):
        for c, role in enumerate(row):
            g = float(grad[i, c])
            if role in ("generated", "retrieved", "feedback"):
                assert g > 0, f"row {i} col {c}: a {role} token got no gradient with masking off"
            else:
                assert g == 0.0


@pytest.mark.parametrize("term", ["entropy", "kl"])
def test_each_term_alone_respects_the_mask(term):
    # with the policy-gradient term silenced (zero advantages), only the entropy or only the KL term drives gradient
    tok, policy, trajs = _setup()
    batch = make_batch(trajs, tok.pad_id)
    R = batch.window
    logits_full, _, _ = policy(batch.input_ids, batch.attention_mask, batch.position_ids)
    logits_full.retain_grad()
    logits = logits_full[:, -(R + 1) : -1]
    logp = token_logprobs(logits, batch.targets)
    batch.old_logprob, batch.ref_logprob, batch.advantages = logp.detach(), logp.detach() - 0.5, torch.zeros_like(logp)
    a = SimpleNamespace(
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        entropy_coef=1.0 if term == "entropy" else 0.0,
        kl_coef=1.0 if term == "kl" else 0.0,
        kl_estimator="k3",
        kl_in_reward=False,
        vf_coef=0.0,
        value_clip=0.5,
    )
    agg = Aggregation.of("seq-mean-token-mean", batch.loss_mask)
    loss, _ = objective(logp, entropy_from_logits(logits), None, batch, a, agg, agg)
    loss.backward()
    g = logits_full.grad.abs().sum(-1)[:, -(R + 1) : -1]
    assert bool((g[batch.loss_mask == 0] == 0).all())
    assert bool((g[batch.loss_mask == 1] > 0).all())


def test_window_masks_and_micro_batch_selection():
    tok, _policy, trajs = _setup()
    b = make_batch(trajs, tok.pad_id, loss_masking=True, mask_advantages=True)
    R = b.window
    for i, t in enumerate(trajs):
        r = len(t.ids)
        assert b.response_mask[i].tolist() == [0.0] * (R - r) + [1.0] * r
        assert b.loss_mask[i, R - r :].tolist() == [1.0 if role == "generated" else 0.0 for role in t.roles]
        assert b.adv_mask[i].tolist() == b.generated_mask[i].tolist()
        assert b.targets[i, R - r :].tolist() == t.ids
        assert int(b.last_generated[i]) == R - r + max(k for k, role in enumerate(t.roles) if role == "generated")
    sub = b.select([2, 1])
    for j, i in enumerate([2, 1]):
        r = len(trajs[i].ids)
        assert sub.targets[j, sub.window - r :].tolist() == trajs[i].ids
        assert sub.input_ids[j, -len(trajs[i].prompt_ids) - r :].tolist() == trajs[i].prompt_ids + trajs[i].ids
        assert int(sub.last_generated[j]) - (sub.window - r) == int(b.last_generated[i]) - (R - r)
    assert sub.window == max(len(trajs[1].ids), len(trajs[2].ids))
