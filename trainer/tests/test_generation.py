"""The policy's batched, KV-cached sampler (generation.LMGenerator): the same tokens as decoding each sequence alone
without a cache — with shared prompt prefills, rows parked out of the decode batch, several decode batches under a
small token budget, and the cache extended across turns —, stops at `</search>`, `</answer>`, EOS and the budget
(checked by token id first), and log-probs that match the ones the update recomputes."""

from __future__ import annotations

import torch
from torch import nn

from search_agent_trainer.generation import LMGenerator, Stops
from search_agent_trainer.policy import Policy, Tokenizer, token_logprobs
from search_agent_trainer.rollout import search_r1_stops
from search_agent_trainer.tiny import TinyCausalLM, TinyTokenizer

CPU = torch.device("cpu")

TEXT = "Question: where is Paris? <think> it is in France </think> <search> Paris France </search> <answer> France </answer>"


def _tiny(seed: int = 0):
    torch.manual_seed(seed)
    tok = TinyTokenizer.build([TEXT])
    policy = Policy(TinyCausalLM(tok.vocab_size, d_model=32, layers=2, heads=4, max_len=256), "tiny", False, 32).eval()
    return Tokenizer(tok, "tiny"), policy


@torch.no_grad()
def _greedy_alone(policy, tok, context, budget):
    ids = list(context)
    out = []
    while len(out) < budget:
        x = torch.tensor([ids])
        logits, _, _ = policy(x, torch.ones_like(x), torch.arange(len(ids))[None])
        nxt = int(logits[0, -1].argmax())
        out.append(nxt)
        ids.append(nxt)
        if search_r1_stops(tok).ended(out):
            break
    return out


def test_batched_kv_cached_greedy_equals_decoding_each_sequence_alone():
    tok, policy = _tiny()
    contexts = [
        tok.encode("Question: where is Paris?"),
        tok.encode("France"),
        tok.encode("<think> it is in France </think> <search> Paris"),
    ]
    budgets = [7, 12, 4]
    got = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok)).generate(contexts, budgets)
    for c, b, g in zip(contexts, budgets, got):
        assert g.ids == _greedy_alone(policy, tok, c, b)
        assert len(g.ids) <= b


def test_shared_prefills_parked_rows_and_small_token_budgets_give_the_same_tokens():
    tok, policy = _tiny(3)
    base = [
        tok.encode("Question: where is Paris?"),
        tok.encode("France"),
        tok.encode("<think> it is in France </think> <search> Paris"),
    ]
    contexts = [base[0]] * 3 + [base[1]] * 2 + [base[2]] * 3  # a group's samples share their prompt
    budgets = [2, 9, 30, 5, 17, 1, 24, 12]
    alone = [_greedy_alone(policy, tok, c, b) for c, b in zip(contexts, budgets)]
    gen = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok))
    assert [g.ids for g in gen.generate(contexts, budgets)] == alone
    assert gen.stats["prefill_tokens"] == sum(len(c) for c in base)  # each distinct context prefilled once
    assert gen.stats["rows_parked"] > 0  # rows whose turn stopped left the decode batch
    small = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok), max_batch_tokens=60)
    assert [g.ids for g in small.generate(contexts, budgets)] == alone  # rows admitted as others finish
    assert small.stats["rows_admitted"] > 0
    # … also when the sampled tokens are read every few steps (as on CUDA): rows decode past their stop, then drop it
    for every in (3, 8):
        late = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok), max_batch_tokens=60, sync_every=every)
        assert [g.ids for g in late.generate(contexts, budgets)] == alone
        assert late.stats["syncs"] < late.stats["decode_steps"]


def test_reading_the_tokens_every_few_steps_samples_what_reading_every_step_does():
    """No GPU→CPU read per decode step: the tokens come to the CPU every `sync_every` steps; a row that met its stop
    string in between decoded past it, and those tokens are dropped and masked out of its cache. Greedy: the same
    tokens over two turns (the cache extended across them, or prefilled again) as reading every step. Sampled: the
    first turn is the same (the steps decoded past the end draw random numbers after it, so later turns take other
    draws), and every sampled log-prob is the one the whole context gives without a cache — the masked cache is the
    context's."""
    tok, policy = _tiny(4)
    for extend in (True, False):
        ref = _two_turns(policy, tok, extend=extend, temperature=0.0)
        for every in (2, 5, 16):
            gen, first, second, _ = _two_turns(policy, tok, extend=extend, sync_every=every, temperature=0.0)
            assert [o.ids for o in first] == [o.ids for o in ref[1]]
            assert [o.ids for o in second] == [o.ids for o in ref[2]]
            assert gen.stats["syncs"] < gen.stats["decode_steps"]
    overshoot = 0
    ref = _two_turns(policy, tok, extend=True)
    for every in (3, 7):
        gen, first, second, contexts = _two_turns(policy, tok, extend=True, sync_every=every)
        overshoot += gen.stats["overshoot_tokens"]
        assert [o.ids for o in first] == [o.ids for o in ref[1]]
        assert gen.stats["extend_tokens"] > 0
        for c, o in zip(contexts, second):
            seq = torch.tensor([c + o.ids])
            logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
            torch.testing.assert_close(
                token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :])[0],
                torch.tensor(o.logprobs),
                atol=1e-5,
                rtol=1e-5,
            )
    assert overshoot > 0  # some row did decode past its stop


def _two_turns(policy, tok, extend: bool, seed: int = 0, sync_every: int = 1, temperature: float = 1.0):
    """Two sampled turns of three trajectories; between them, an observation is appended to each context."""
    gen = LMGenerator(
        policy,
        tok,
        temperature,
        1.0,
        CPU,
        search_r1_stops(tok),
        generator=torch.Generator().manual_seed(seed),
        extend_cache=extend,
        sync_every=sync_every,
    )
    prompt = tok.encode("Question: where is Paris?")
    contexts = [prompt, prompt, tok.encode("France")]
    keys = ["a", "b", "c"]
    first = gen.generate(contexts, [6, 9, 4], keys)
    obs = [
        tok.encode("<information> Paris is in France </information>"),
        tok.encode(" it is in"),
        tok.encode("<information> France </information>"),
    ]
    contexts = [c + o.ids + x for c, o, x in zip(contexts, first, obs)]
    second = gen.generate(contexts[:2] + [contexts[2]], [8, 5, 7], keys)
    return gen, first, second, contexts


def test_extending_the_cache_across_turns_samples_the_same_tokens_as_prefilling_again():
    tok, policy = _tiny(4)
    gen, first, second, contexts = _two_turns(policy, tok, extend=True)
    ref, first_r, second_r, _ = _two_turns(policy, tok, extend=False)
    assert [o.ids for o in first] == [o.ids for o in first_r]
    assert [o.ids for o in second] == [o.ids for o in second_r]
    for o, r in zip(second, second_r):
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(r.logprobs), atol=1e-5, rtol=1e-5)
    assert gen.stats["extend_tokens"] > 0 and ref.stats["extend_tokens"] == 0
    assert gen.stats["prefill_tokens"] < ref.stats["prefill_tokens"]  # the second turn fed only the new tokens
    # and the sampled log-probs are those of the full context, recomputed without a cache
    for c, o in zip(contexts, second):
        seq = torch.tensor([c + o.ids])
        logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
        torch.testing.assert_close(
            token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :])[0],
            torch.tensor(o.logprobs),
            atol=1e-5,
            rtol=1e-5,
        )


def test_a_context_that_does_not_extend_the_cached_one_is_prefilled():
    tok, policy = _tiny(5)
    gen = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok))
    c = tok.encode("Question: where is Paris?")
    gen.generate([c], [5], ["k"])
    edited = tok.encode("Question: where is Lyon? France")  # e.g. a forked rollout with an edited query
    before = gen.stats["prefill_tokens"]
    [o] = gen.generate([edited], [6], ["k"])
    assert gen.stats["prefill_tokens"] == before + len(edited)
    assert o.ids == _greedy_alone(policy, tok, edited, 6)


def test_stop_candidates_are_the_ids_that_can_complete_a_stop_string():
    tok, _policy = _tiny()
    stops = Stops(tok, ("</search>", "</answer>"))
    assert tok.encode("</search>")[0] in stops.candidates and tok.encode("</answer>")[0] in stops.candidates
    assert tok.encode(" Paris")[0] not in stops.candidates and tok.encode("<search>")[0] not in stops.candidates
    assert tok.impl.eos_id in stops.eos_ids and stops.mask(CPU, tok.vocab_size)[tok.impl.eos_id]
    multi = Stops(tok, ("is Paris",))  # a stop string over several tokens: the token that completes it is a candidate
    assert tok.encode(" Paris")[0] in multi.candidates and tok.encode(" where")[0] not in multi.candidates
    assert multi.ended(tok.encode("where is Paris")) and not multi.ended(tok.encode("where is"))


class Bigram(nn.Module):
    """A 'model' that always predicts table[last token] (for exact control of what is generated)."""

    def __init__(self, vocab: int, table: dict[int, int]):
        super().__init__()
        self.vocab = vocab
        self.table = table

    def forward(
        self, input_ids, attention_mask, position_ids, past=None, use_cache=False, want_hidden=False, logits_to_keep=0
    ):
        logits = torch.full((*input_ids.shape, self.vocab), -1e4)
        for b in range(input_ids.shape[0]):
            for t in range(input_ids.shape[1]):
                logits[b, t, self.table.get(int(input_ids[b, t]), 0)] = 0.0
        return logits, ("cache" if use_cache else None), None


def test_turns_stop_after_the_token_that_closes_search_or_answer_or_at_eos_or_the_budget():
    raw = TinyTokenizer.build([TEXT])
    tok = Tokenizer(raw, "tiny")
    e = raw.encode
    table = {}
    for chain in (e("<search> Paris France</search> is"), e("<answer> where</answer> is")):
        table.update(zip(chain, chain[1:]))
    eos_after = e("Question")[0]
    table[eos_after] = raw.eos_id
    table[raw.eos_id] = e(" is")[0]
    gen = LMGenerator(Bigram(raw.vocab_size, table), tok, 0.0, 1.0, CPU, search_r1_stops(tok))
    out = gen.generate([e("<search>"), e("<answer>"), e("Question"), e("<search>")], [50, 50, 50, 2])
    assert raw.decode(out[0].ids) == " Paris France</search>"
    assert raw.decode(out[1].ids) == " where</answer>"
    assert out[2].ids == [raw.eos_id]  # EOS ends the turn (and stays in it: it was generated)
    assert len(out[3].ids) == 2


def test_sampled_log_probs_match_the_recomputed_ones_at_the_same_temperature():
    tok, policy = _tiny(1)
    contexts = [tok.encode("Question: where is Paris?"), tok.encode("<think>")]
    g = torch.Generator().manual_seed(0)
    out = LMGenerator(policy, tok, 0.7, 1.0, CPU, search_r1_stops(tok), generator=g).generate(contexts, [10, 10])
    for c, o in zip(contexts, out):
        seq = torch.tensor([c + o.ids])
        logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
        lp = token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :], temperature=0.7)
        torch.testing.assert_close(lp[0], torch.tensor(o.logprobs), atol=1e-5, rtol=1e-5)


def test_top_p_keeps_only_the_nucleus():
    tok, policy = _tiny(2)
    gen = LMGenerator(policy, tok, 1.0, 0.5, CPU, search_r1_stops(tok), generator=torch.Generator().manual_seed(0))
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]])
    seen = {int(gen._sample(logits)[0]) for _ in range(200)}
    assert seen == {0}  # p(0) ≈ 0.72 ≥ 0.5: the nucleus is token 0 alone
    gen.top_p = 0.9
    seen = {int(gen._sample(logits)[0]) for _ in range(400)}
    assert seen == {0, 1}


def test_the_sampler_draws_from_the_temperature_scaled_distribution_and_its_nucleus(monkeypatch):
    import search_agent_trainer.generation as generation

    tok, policy = _tiny(2)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]]).repeat(4000, 1)
    gen = LMGenerator(policy, tok, 0.8, 1.0, CPU, search_r1_stops(tok), generator=torch.Generator().manual_seed(1))
    toks, lps = gen._sample(logits)
    p = torch.softmax(logits[0] / 0.8, -1)
    freq = torch.bincount(toks, minlength=4).float() / len(toks)
    torch.testing.assert_close(freq, p, atol=0.03, rtol=0)
    torch.testing.assert_close(lps, p.log()[toks])  # the log-prob of the full tempered distribution
    # top-p 0.9: the nucleus is {0, 1, 2} (p ≈ 0.68, 0.19, 0.10, 0.03: 0.87 < 0.9 ≤ 0.97), renormalised
    gen.top_p = 0.9
    for candidates in (1024, 2):  # found among the top candidates, or (2 are not enough) by the full sort
        monkeypatch.setattr(generation, "TOP_P_CANDIDATES", candidates)
        toks, _ = gen._sample(logits)
        freq = torch.bincount(toks, minlength=4).float() / len(toks)
        torch.testing.assert_close(freq, torch.cat([p[:3] / p[:3].sum(), torch.zeros(1)]), atol=0.03, rtol=0)


def test_the_kv_budget_on_cuda_keeps_within_a_per_process_memory_fraction(monkeypatch):
    """A GPU shared with another process, or an 80 GB recipe checked on a larger GPU: the trainer sizes its KV cache
    from its share (`torch.cuda.set_per_process_memory_fraction`), not from what the driver says is free. No GPU here:
    torch.cuda's four answers are stood in for (TEST DOUBLES), the arithmetic is the trainer's."""
    from search_agent_trainer import generation

    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _d=None: (120 * gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda _d=None: 10 * gib)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    share = {"f": 1.0}
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda _d=None: share["f"])
    cuda = torch.device("cuda")
    assert generation.gpu_memory(cuda) == (120 * gib, 140 * gib)  # no fraction: the driver's numbers
    share["f"] = 80 / 140
    free, total = generation.gpu_memory(cuda)
    assert total == 80 * gib and free == 70 * gib  # the share less what this process reserved
    share["f"] = 5 / 140
    assert generation.gpu_memory(cuda) == (0, 5 * gib)  # already past its share: nothing free

    class StandInPolicy:  # what auto_max_batch_tokens reads of a policy: no trained parameters, no Linear layers
        kind = "tiny"

        class backbone:  # noqa: N801 - the attribute the code reads
            config = {"layers": 1, "d_model": 8}

        def parameters(self):
            return iter(())

        def modules(self):
            return iter(())

    per_token = generation.kv_bytes_per_token(StandInPolicy(), None)
    share["f"] = 80 / 140
    expected = int((70 * gib - generation.AUTO_RESERVE * 80 * gib) / (2 * per_token))
    assert generation.auto_max_batch_tokens(StandInPolicy(), cuda, None) == expected
    share["f"] = 1.0
    assert generation.auto_max_batch_tokens(StandInPolicy(), cuda, None) > expected  # the whole GPU: a larger cache


def test_the_last_turns_cache_is_let_go_before_the_next_turn_decodes():
    """A turn holds its own cache (and a copy while rows are selected or merged), never the last turn's too: the
    memory planner counts two caches, and a 3B rollout on an 80 GiB GPU ran out of memory holding three (the GPU
    check, 2026-11-28). Two trajectories of three continue (a strict subset: their rows are copied out of the last
    cache); by the time the next turn decodes, every tensor of the last turn's cache is freed."""
    import weakref

    tok, policy = _tiny(6)
    gen = LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok))
    contexts = [tok.encode(t) for t in ("Question: where is Paris?", "Question: where is Lyon?", "Question: Nice?")]
    keys = ["a", "b", "c"]
    first = gen.generate(contexts, [6, 6, 6], keys)
    old = gen._session.rows.cache()
    assert old is not None and len(old.tensors) > 0
    dead = [weakref.ref(t) for t in old.tensors]
    del old
    alive_at_decode: list[int] = []
    decode = gen._decode

    def checking_decode(*args, **kwargs):
        alive_at_decode.append(sum(r() is not None for r in dead))
        return decode(*args, **kwargs)

    gen._decode = checking_decode
    nxt = [contexts[i] + first[i].ids + tok.encode(" France") for i in (0, 2)]
    gen.generate(nxt, [5, 5], [keys[0], keys[2]])
    assert gen.stats["extend_tokens"] > 0  # the two rows were extended from the last cache, not prefilled
    assert alive_at_decode == [0], f"{alive_at_decode[0]} of the last turn's {len(dead)} cache tensors still held"


def test_generation_runs_sdpa_without_cudnns_backend_and_restores_torchs_choice():
    """cuDNN's attention builds a graph for every new shape, and each decode step is one (docs/benchmarks.md, the H200
    profile): generation turns that backend off for its forwards and leaves torch's flags as they were."""
    tok, policy = _tiny(7)
    seen = []
    forward = policy.forward

    def recording(*args, **kwargs):
        seen.append(
            (
                torch.backends.cuda.cudnn_sdp_enabled(),
                torch.backends.cuda.flash_sdp_enabled(),
                torch.backends.cuda.math_sdp_enabled(),
            )
        )
        return forward(*args, **kwargs)

    policy.forward = recording
    before = torch.backends.cuda.cudnn_sdp_enabled()
    LMGenerator(policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok)).generate([tok.encode("Question: Paris?")], [4])
    assert seen and all(s == (False, True, True) for s in seen), seen
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


class _DeviceMemory(nn.Module):
    """A test double for a GPU's memory limit (no GPU here): the policy, whose forward raises torch.OutOfMemoryError
    when the batch it is given holds more than `limit` tokens (rows × the attention mask's width: the KV cache)."""

    def __init__(self, policy: Policy, limit: int):
        super().__init__()
        self.inner, self.limit, self.refused = policy, limit, 0

    def forward(self, ids, attn, pos, past=None, **kw):
        if attn.numel() > self.limit:
            self.refused += 1
            raise torch.OutOfMemoryError(f"CUDA out of memory (stand-in): {attn.numel()} tokens > {self.limit}")
        return self.inner(ids, attn, pos, past, **kw)


def test_out_of_device_memory_the_call_runs_again_with_half_the_kv_budget_and_keeps_it():
    """A plan a few GiB short (the H200's first 3B rollout) ends the run no more: the call runs again from its start
    with half the KV budget, kept for later calls and reported; greedy, the same tokens as decoding each row alone."""
    tok, policy = _tiny(3)
    contexts = [tok.encode("Question: where is Paris?")] * 4 + [tok.encode("France")] * 4
    budgets = [30, 5, 17, 24, 12, 30, 3, 28]
    alone = [_greedy_alone(policy, tok, c, b) for c, b in zip(contexts, budgets)]
    seen: list[tuple[int, int, str]] = []
    limited = _DeviceMemory(policy, limit=150)
    gen = LMGenerator(
        limited,
        tok,
        0.0,
        1.0,
        CPU,
        search_r1_stops(tok),
        max_batch_tokens=1024,
        on_out_of_memory=lambda old, new, error: seen.append((old, new, error)),
    )
    assert [g.ids for g in gen.generate(contexts, budgets)] == alone
    assert limited.refused >= 1 and gen.stats["oom_retries"] == len(seen) >= 1
    assert [(old, new) for old, new, _ in seen] == [(1024 >> k, 1024 >> (k + 1)) for k in range(len(seen))]
    assert "stand-in" in seen[0][2]
    assert gen.max_batch_tokens == seen[-1][1] < 1024
    # the next call starts at the smaller budget: nothing more refused
    refused = limited.refused
    assert [g.ids for g in gen.generate(contexts, budgets)] == alone
    assert limited.refused == refused and gen.stats["oom_retries"] == len(seen)


def test_out_of_device_memory_with_one_row_a_batch_is_the_error_named():
    tok, policy = _tiny(3)
    contexts = [tok.encode("Question: where is Paris?")] * 2
    seen = []
    gen = LMGenerator(
        _DeviceMemory(policy, limit=4),  # not even one row's prompt fits
        tok,
        0.0,
        1.0,
        CPU,
        search_r1_stops(tok),
        max_batch_tokens=4096,
        on_out_of_memory=lambda *a: seen.append(a),
    )
    try:
        gen.generate(contexts, [20, 20])
    except torch.OutOfMemoryError as e:
        message = str(e)
    else:
        raise AssertionError("expected torch.OutOfMemoryError")
    widest = len(contexts[0]) + 20
    assert f"rollout.max_batch_tokens {widest:,}" in message and "one row" in message and "stand-in" in message
    # halved down to one row's tokens, each retry reported, then the error (no endless loop)
    halvings = [4096 >> k for k in range(1, 13) if 4096 >> k > widest]
    assert [new for _, new, _ in seen] == [*halvings, widest]
