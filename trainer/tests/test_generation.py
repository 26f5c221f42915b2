"""The policy's batched, KV-cached sampler (rollout.LMGenerator): the same tokens as decoding each sequence alone
without a cache, stops at `</search>`, `</answer>`, EOS and the budget, and log-probs that match the ones the
update recomputes."""

from __future__ import annotations

import torch
from torch import nn

from search_agent_trainer.policy import Policy, Tokenizer, token_logprobs
from search_agent_trainer.rollout import LMGenerator, stops_turn
from search_agent_trainer.tiny import TinyCausalLM, TinyTokenizer

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
        if stops_turn(tok, out):
            break
    return out


def test_batched_kv_cached_greedy_equals_decoding_each_sequence_alone():
    tok, policy = _tiny()
    contexts = [tok.encode("Question: where is Paris?"), tok.encode("France"), tok.encode("<think> it is in France </think> <search> Paris")]
    budgets = [7, 12, 4]
    got = LMGenerator(policy, tok, temperature=0.0, top_p=1.0, device=torch.device("cpu")).generate(contexts, budgets)
    for c, b, g in zip(contexts, budgets, got):
        assert g.ids == _greedy_alone(policy, tok, c, b)
        assert len(g.ids) <= b


class Bigram(nn.Module):
    """A 'model' that always predicts table[last token] (for exact control of what is generated)."""

    def __init__(self, vocab: int, table: dict[int, int]):
        super().__init__()
        self.vocab = vocab
        self.table = table

    def forward(self, input_ids, attention_mask, position_ids, past=None, use_cache=False, want_hidden=False, logits_to_keep=0):
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
    gen = LMGenerator(Bigram(raw.vocab_size, table), tok, temperature=0.0, top_p=1.0, device=torch.device("cpu"))
    out = gen.generate([e("<search>"), e("<answer>"), e("Question"), e("<search>")], [50, 50, 50, 2])
    assert raw.decode(out[0].ids) == " Paris France</search>"
    assert raw.decode(out[1].ids) == " where</answer>"
    assert out[2].ids == [raw.eos_id]  # EOS ends the turn (and stays in it: it was generated)
    assert len(out[3].ids) == 2


def test_sampled_log_probs_match_the_recomputed_ones_at_the_same_temperature():
    tok, policy = _tiny(1)
    contexts = [tok.encode("Question: where is Paris?"), tok.encode("<think>")]
    g = torch.Generator().manual_seed(0)
    out = LMGenerator(policy, tok, temperature=0.7, top_p=1.0, device=torch.device("cpu"), generator=g).generate(contexts, [10, 10])
    for c, o in zip(contexts, out):
        seq = torch.tensor([c + o.ids])
        logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
        lp = token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :], temperature=0.7)
        torch.testing.assert_close(lp[0], torch.tensor(o.logprobs), atol=1e-5, rtol=1e-5)


def test_top_p_keeps_only_the_nucleus():
    tok, policy = _tiny(2)
    gen = LMGenerator(policy, tok, temperature=1.0, top_p=0.5, device=torch.device("cpu"), generator=torch.Generator().manual_seed(0))
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]])
    seen = {int(gen._sample(logits)[0]) for _ in range(200)}
    assert seen == {0}  # p(0) ≈ 0.72 ≥ 0.5: the nucleus is token 0 alone
    gen.top_p = 0.9
    seen = {int(gen._sample(logits)[0]) for _ in range(400)}
    assert seen == {0, 1}
