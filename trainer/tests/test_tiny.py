"""The built-in tiny model's two fast paths (tiny.py): the target tokens' log-probs without the whole output
distribution (the same numbers and gradients as gathering from it), and the KV cache that grows into spare room
during generation (the same tensors as torch.cat, without copying the cache every decode step)."""

from __future__ import annotations

import torch

from conftest import f32_roundoff
from search_agent_trainer.policy import Policy, window_stats
from search_agent_trainer.tiny import CACHE_SLACK, TinyCausalLM, append


def _model(seed: int = 0) -> TinyCausalLM:
    torch.manual_seed(seed)
    m = TinyCausalLM(300, d_model=64, layers=2, heads=4, max_len=128)
    with torch.no_grad():
        for p in m.parameters():  # away from the initialisation, so the copy gate and the pointer carry real mass
            p.add_(0.3 * torch.randn_like(p))
    return m


def _inputs():
    g = torch.Generator().manual_seed(1)
    b, t = 3, 24
    ids = torch.randint(12, 300, (b, t), generator=g)
    ids[:, 2:6] = ids[:, 14:18]  # tokens that occur twice: the pointer's mass on a token sums over its positions
    attn = torch.ones(b, t, dtype=torch.long)
    attn[0, :5] = 0  # left padding
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    select = torch.zeros(b, t, dtype=torch.bool)
    select[:, 8:-1] = True
    select[1, 10] = False
    targets = ids[:, 1:][select[:, :-1]]
    return ids, attn, pos, select, targets


def test_target_log_probs_and_entropy_equal_the_whole_distributions():
    m = _model()
    ids, attn, pos, select, targets = _inputs()
    whole, _, h = m(ids, attn, pos, None, 0, select)
    (logp, entropy), _, _ = m(ids, attn, pos, None, 0, select, targets, True)
    expected = whole.gather(-1, targets[:, None]).squeeze(-1)
    assert logp.shape == targets.shape
    assert torch.allclose(logp, expected, atol=f32_roundoff(expected), rtol=0)  # two formulas: equal to round-off
    assert torch.allclose(entropy, -(whole.exp() * whole).sum(-1), atol=f32_roundoff(whole), rtol=0)
    assert not entropy.requires_grad  # a statistic: no graph through the whole distribution
    assert float((whole.detach().exp().sum(-1) - 1).abs().max()) < 1e-4  # the reference is a distribution
    # the copy head matters here (else this would test the vocabulary head alone): its gate is far from 0 and 1
    gate = torch.sigmoid(m.copy_gate(h[select])).detach()
    assert 0.1 < float(gate.mean()) < 0.9


def test_target_log_probs_have_the_same_gradients():
    m = _model()
    ids, attn, pos, select, targets = _inputs()
    (logp, _), _, _ = m(ids, attn, pos, None, 0, select, targets)
    (logp * torch.linspace(-1, 1, logp.numel())).sum().backward()
    fast = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    whole, _, _ = m(ids, attn, pos, None, 0, select)
    (whole.gather(-1, targets[:, None]).squeeze(-1) * torch.linspace(-1, 1, logp.numel())).sum().backward()
    assert fast.keys() == {n for n, p in m.named_parameters() if p.grad is not None}
    assert {"copy_q.weight", "copy_k.weight", "copy_gate.weight", "tok.weight"} <= fast.keys()
    for n, p in m.named_parameters():
        if p.grad is not None:
            assert torch.allclose(fast[n], p.grad, atol=1e-5, rtol=1e-4), n


def test_selected_positions_read_what_the_whole_forward_gives_there():
    """A forward that asks for some positions' distributions (`select`: rows with different counts, one with none;
    or the last position of each row) gives what the forward over every position gives there, values and gradients —
    the invariant any shortcut through the copy head's scores must keep (stop 39 measured one: docs/demo.md)."""
    m = _model()
    ids, attn, pos, _, _ = _inputs()
    select = torch.zeros(ids.shape, dtype=torch.bool)
    select[0, [6, 11, 20]] = True  # row 0: three positions (its first five are padding)
    select[2, 3:] = True  # row 2: most of it; row 1: none
    weights = torch.linspace(-1, 1, int(select.sum()))[:, None]
    part, _, _ = m(ids, attn, pos, None, 0, select)
    (part * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    whole, _, _ = m(ids, attn, pos)
    assert whole.shape == (*ids.shape, 300)
    (whole[select] * weights).sum().backward()
    assert torch.allclose(part, whole[select].detach(), atol=f32_roundoff(whole), rtol=0)
    assert {"copy_q.weight", "copy_k.weight"} <= grads.keys()
    scale = max(float(g.abs().max()) for g in grads.values())  # float error grows with the sums, ~1e-7 of it here
    for n, p in m.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grads[n], p.grad, atol=1e-6 * scale, rtol=0), n
    # and the last position of each row alone (what a decode step asks for)
    last, _, _ = m(ids, attn, pos, None, 1)
    assert torch.allclose(last[:, -1], whole[:, -1].detach(), atol=f32_roundoff(whole), rtol=0)


def test_window_stats_takes_the_fast_path_only_where_it_gives_the_same_numbers():
    """Temperature 1 without an entropy gradient: the targets' log-probs; a temperature or an entropy bonus in the
    loss: the whole distribution. Both give the same log-probs and entropies."""

    class Batch:  # the window view window_stats reads (batch.SequenceBatch's fields)
        def __init__(self, ids, attn, pos, R):
            self.input_ids, self.attention_mask, self.position_ids, self.window = ids, attn, pos, R
            self.targets = ids[:, -R:]

    m = _model()
    policy = Policy(m, "tiny", value_head=False, hidden=64)
    ids, attn, pos, _, _ = _inputs()
    R = 12
    where = torch.ones(ids.shape[0], R, dtype=torch.bool)
    where[2, :3] = False
    batch = Batch(ids, attn, pos, R)
    calls = []
    forward = m.forward
    m.forward = lambda *a, **k: calls.append(len(a) > 6 or "targets" in k) or forward(*a, **k)
    fast = window_stats(policy, batch, where, 1.0, want_entropy=True)
    whole = window_stats(policy, batch, where, 1.0, want_entropy=True, entropy_grad=True)
    assert calls == [True, False]
    assert torch.allclose(fast.logprob, whole.logprob, atol=f32_roundoff(whole.logprob), rtol=0)
    assert torch.allclose(fast.entropy, whole.entropy, atol=f32_roundoff(whole.logprob), rtol=0)
    assert bool((fast.logprob[~where] == 0).all()) and bool((fast.logprob[where] < 0).all())
    window_stats(policy, batch, where, 0.7)
    assert calls[-1] is False  # another temperature: the whole distribution, rescaled


def test_a_generation_cache_grows_into_its_room_and_reads_as_torch_cat():
    with torch.inference_mode():
        first = torch.randn(2, 4, 5, 8)  # (b, heads, time, head_dim), as a block's keys
        steps = [torch.randn(2, 4, 1, 8) for _ in range(3)]
        grown = append(first, steps[0], dim=2)
        assert grown.shape == (2, 4, 6, 8) and grown.untyped_storage().nbytes() == 2 * 4 * (6 + CACHE_SLACK) * 8 * 4
        ptr = grown.data_ptr()
        expected = torch.cat([first, steps[0]], dim=2)
        for s in steps[1:]:
            grown = append(grown, s, dim=2)
            expected = torch.cat([expected, s], dim=2)
            assert grown.data_ptr() == ptr  # written into the room, not copied
        assert torch.equal(grown, expected)
        # a row selection is a copy: growing it never writes into the original's room
        rows = grown.index_select(0, torch.tensor([1]))
        before = grown.clone()
        rows = append(rows, torch.full((1, 4, 1, 8), 7.0), dim=2)
        assert torch.equal(grown, before) and rows.data_ptr() != ptr and float(rows[0, 0, -1, 0]) == 7.0
        # a slice of rows shares the buffer: it is copied too, never grown into the others' room
        first_row = grown[:1]
        assert append(first_row, torch.zeros(1, 4, 1, 8), dim=2).data_ptr() != ptr and torch.equal(grown, before)
        # the copy head's (b, time, d) keys and (b, time) ids grow along dim 1
        ids = append(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[5], [6]]), dim=1)
        ids = append(ids, torch.tensor([[7], [8]]), dim=1)
        assert ids.tolist() == [[1, 2, 5, 7], [3, 4, 6, 8]]
        # what does not fit the room is copied into a new buffer, with room again
        small = append(torch.zeros(1, 3), torch.ones(1, 1), dim=1)
        more = append(small, torch.ones(1, CACHE_SLACK + 1), dim=1)
        assert more.shape == (1, CACHE_SLACK + 5) and more.data_ptr() != small.data_ptr()
        assert more.tolist() == [[0.0] * 3 + [1.0] * (CACHE_SLACK + 2)]
        assert append(more, torch.ones(1, 1), dim=1).data_ptr() == more.data_ptr()


def test_with_autograd_the_cache_is_concatenated():
    a = torch.randn(2, 3, requires_grad=True)
    out = append(a, torch.randn(2, 1), dim=1)
    assert out.requires_grad and out.untyped_storage().nbytes() == 2 * 4 * 4
    out.sum().backward()
    assert torch.equal(a.grad, torch.ones(2, 3))
