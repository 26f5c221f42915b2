"""The transformers code path on CPU: a tiny random-initialised Qwen2 model (built from a config, with a byte-level BPE
tokenizer and a ChatML chat template made by the test) trained for a few GRPO steps end to end against the real env
server, with and without LoRA through peft, in fp32 and in bf16 autocast; its rollout records pass the same mask audit
as the tiny model's. Precision (fp32 master weights under bf16), the LoRA reference (the starting adapter, not the bare
base), dropout off by default, and the KV cache of a DynamicCache extended across turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import DEMO, f32_roundoff, logprob_agreement, tiny_config
from hf_fixture import build_tiny_qwen2, demo_texts
from test_train import audit_rollout, lines, run_trainer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("hf") / "tiny-qwen2", demo_texts(DEMO))


def hf_config(path: Path, **overrides) -> dict:
    cfg = tiny_config(**{"train.steps": 2, "train.eval_every": 2, "data.eval_size": 2, "optim.lr": 1e-3, **overrides})
    cfg["model"] = {"kind": "hf", "path": str(path)}
    return cfg


def test_the_hf_tokenizer_adapter_and_multi_token_stops(qwen_dir):
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops

    cfg = config_from_dict(hf_config(qwen_dir))
    policy, tok = build_policy(cfg, [], torch.device("cpu"))
    assert tok.kind == "hf"
    assert tok.impl.convert_tokens_to_ids("<|im_end|>") in tok.eos_ids
    prompt = tok.prompt("Question: who?", True)
    assert prompt == "<|im_start|>user\nQuestion: who?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.prompt("Question: who?", False) == "Question: who?"
    close = tok.encode(" Paris</search> and more")
    assert len(tok.encode("</search>")) > 1  # the stop string spans several BPE tokens
    assert "".join(tok.token_texts(close)) == " Paris</search> and more"

    class Chain(torch.nn.Module):
        def forward(
            self,
            input_ids,
            attention_mask,
            position_ids,
            past=None,
            use_cache=False,
            want_hidden=False,
            logits_to_keep=0,
        ):
            V = len(tok.impl)
            logits = torch.full((*input_ids.shape, V), -1e4)
            for b in range(input_ids.shape[0]):
                for t in range(input_ids.shape[1]):
                    nxt = {a: c for a, c in zip(close, close[1:])}.get(int(input_ids[b, t]), close[0])
                    logits[b, t, nxt] = 0.0
            return logits, None, None

    stops = search_r1_stops(tok)
    completes = next(close[k] for k in range(len(close)) if "</search>" in tok.decode(close[: k + 1]))
    assert completes in stops.candidates  # the BPE token that completes "</search>" is a stop candidate
    assert len(stops.candidates) < tok.vocab_size / 4  # few rows ever decode their tail
    out = LMGenerator(Chain(), tok, 0.0, 1.0, torch.device("cpu"), stops).generate([tok.encode("Q")], [50])
    text = tok.decode(out[0].ids)
    assert text.endswith("</search>") and text.count("</search>") == 1


def test_kv_cached_generation_matches_full_forward_for_qwen2(qwen_dir):
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy, token_logprobs
    from search_agent_trainer.rollout import search_r1_stops

    policy, tok = build_policy(config_from_dict(hf_config(qwen_dir)), [], torch.device("cpu"))
    policy.eval()
    contexts = [tok.encode("Question: in which town was Fidan born?"), tok.encode("<think>")]
    out = LMGenerator(
        policy, tok, 1.0, 1.0, torch.device("cpu"), search_r1_stops(tok), torch.Generator().manual_seed(0)
    ).generate(contexts, [12, 12])
    for c, o in zip(contexts, out):
        seq = torch.tensor([c + o.ids])
        with torch.no_grad():
            logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
        lp = token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :])
        torch.testing.assert_close(lp[0], torch.tensor(o.logprobs), atol=1e-4, rtol=1e-4)


def test_the_cache_of_a_dynamiccache_is_extended_across_turns_with_the_same_tokens(qwen_dir):
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops

    policy, tok = build_policy(config_from_dict(hf_config(qwen_dir)), [], torch.device("cpu"))
    policy.eval()

    def two_turns(extend: bool):
        gen = LMGenerator(
            policy,
            tok,
            1.0,
            1.0,
            torch.device("cpu"),
            search_r1_stops(tok),
            torch.Generator().manual_seed(3),
            extend_cache=extend,
        )
        q = tok.encode("Question: in which town was Fidan born?")
        contexts = [q, q, q, tok.encode("<think>")]  # a group of three shares its prompt's prefill
        first = gen.generate(contexts, [9, 4, 14, 6], keys=range(4))
        obs = [
            "\n\n<information>Doc 1(Title: Fidan) born in Ossel</information>\n\n",
            "\nMy previous action is invalid.\n",
            " x",
            "\n\n<information></information>\n\n",
        ]
        contexts = [c + o.ids + tok.encode(x) for c, o, x in zip(contexts, first, obs)]
        return gen, first, gen.generate(contexts, [7, 7, 7, 7], keys=range(4))

    gen, first, second = two_turns(True)
    ref, first_r, second_r = two_turns(False)
    assert [o.ids for o in first + second] == [o.ids for o in first_r + second_r]
    for o, r in zip(second, second_r):
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(r.logprobs), atol=1e-4, rtol=1e-4)
    assert gen.stats["extend_tokens"] > 0 and gen.stats["prefill_tokens"] < ref.stats["prefill_tokens"]


@pytest.mark.parametrize(
    "lora,dtype,budget",
    [(False, "auto", None), (True, "auto", None), (False, "bf16", None), (False, "auto", 60)],
    ids=["full", "lora", "bf16", "continuous"],
)
def test_decode_steps_in_static_buffers_sample_what_the_growing_cache_does(qwen_dir, lora, dtype, budget):
    """static_decode.py's step (what CUDA replays as a graph; on CPU it runs as it is) against the growing cache: two
    turns extended across calls, a read every 4 steps (rows that stopped in between are rewound), a shared prefill,
    and — with a KV budget of 60 tokens — rows dropped and admitted as others finish (continuous batching: the buffers
    made anew for the rows that stay). Greedy: the same tokens. Sampled: log-probs the full forward's of the sequence
    sampled, and under continuous batching the same tokens (the growing cache parks rows out of one batch, the static
    one does not: their rows draw their uniforms differently then). With a random LoRA adapter: the step runs the
    model's own modules, adapters included, or it would not agree."""
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import DEFAULT_MAX_BATCH_TOKENS, LMGenerator, Stops
    from search_agent_trainer.policy import build_policy, token_logprobs
    from search_agent_trainer.rollout import STOP_STRINGS, search_r1_stops
    from search_agent_trainer.static_decode import decoder_of

    cfg = hf_config(qwen_dir)
    cfg["model"]["dtype"] = dtype
    if lora:
        cfg["model"]["lora"] = {"r": 4, "alpha": 8}
    policy, tok = build_policy(config_from_dict(cfg), [], torch.device("cpu"))
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else None
    tol = 1e-4 if autocast is None else 5e-2  # bf16: its resolution at log-probs of about −6 (the recomputation: fp32)
    if lora:
        with torch.no_grad():
            for name, p in policy.backbone.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    policy.eval()
    assert decoder_of(policy) is not None

    def two_turns(static: bool, temperature: float, stops: Stops | None = None):
        gen = LMGenerator(
            policy,
            tok,
            temperature,
            1.0,
            torch.device("cpu"),
            stops or search_r1_stops(tok),
            torch.Generator().manual_seed(5),
            autocast=autocast,
            max_batch_tokens=budget or DEFAULT_MAX_BATCH_TOKENS,
            sync_every=4,
            static_decode=static,
        )
        q = tok.encode("Question: in which town was Fidan born?")
        contexts = [q, q, tok.encode("<think>"), tok.encode("Question: who?")]
        first = gen.generate(contexts, [11, 3, 16, 9], keys=range(4))
        obs = ["\n\n<information>Doc 1(Title: Fidan) born in Ossel</information>\n\n", " x", "\n", " y z"]
        second_contexts = [c + o.ids + tok.encode(x) for c, o, x in zip(contexts, first, obs)]
        second = gen.generate(second_contexts, [7, 12, 5, 7], keys=range(4))
        return gen, list(zip(contexts + second_contexts, first + second))

    # a stop string the greedy third row writes (by its 6th token): found at the read after 4 or 8, so rows fed tokens
    # past their end, which the read masks (the second turn extends those caches)
    row = two_turns(False, 0.0)[1][2][1].ids
    stops = Stops(tok, [*STOP_STRINGS, "".join(tok.token_texts(row[4:6]))])
    for temperature in (0.0, 1.0):
        static, got = two_turns(True, temperature, stops)
        grown, want = two_turns(False, temperature, stops)
        same = temperature == 0.0 or budget is not None
        if same:
            assert [o.ids for _c, o in got] == [o.ids for _c, o in want]
        for (c, o), (_r, r) in zip(got, want):
            if same:
                torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(r.logprobs), atol=tol, rtol=tol)
            seq = torch.tensor([c + o.ids])
            with torch.no_grad():
                logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
            lp = token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :])
            torch.testing.assert_close(lp[0], torch.tensor(o.logprobs), atol=tol, rtol=tol)
        assert static.stats["graph_steps"] == 0 and "graph_error" not in static.stats  # CPU: no graph
        assert "static_error" not in static.stats and static.static_decode  # no step fell back to the growing cache
        assert grown.stats["static_steps"] == 0 and static.stats["static_steps"] > 0
        # no capture on CPU; each decode batch in static buffers counted (a rebuild after rows dropped or admitted)
        assert static.stats["capture_seconds"] == 0.0 and grown.stats["static_batches"] == 0
        assert static.stats["static_batches"] >= (3 if budget else 2), static.stats["static_batches"]
        if same:
            for k in ("overshoot_tokens", "rows_admitted", "extend_tokens", "decode_steps"):
                assert static.stats[k] == grown.stats[k], k
        if budget is None:
            assert static.stats["static_steps"] == static.stats["decode_steps"] - 2  # a call's last sample: not fed
            assert static.stats["extend_tokens"] > 0 and static.stats["rows_parked"] == 0 < grown.stats["rows_parked"]
        else:
            assert static.stats["rows_admitted"] > 0 and static.stats["rows_parked"] == grown.stats["rows_parked"] == 0
        if temperature == 0.0:
            assert static.stats["overshoot_tokens"] > 0 and len(got[2][1].ids) < 16


@pytest.mark.parametrize("static", [True, False], ids=["static", "growing"])
def test_a_generation_call_casts_each_fp32_weight_to_bf16_once_not_at_every_decode_step(qwen_dir, static):
    """bf16 autocast over fp32 master weights: one autocast region around the call, outside inference mode (where
    autocast caches no cast), so each weight is cast once per call and every decode step after the first uses the
    cached bf16 copy. An H200 spent 14 % of a 0.5B rollout's GPU time re-casting them at every step when the call ran
    under inference_mode (2026-11-29). Counted here: float→bf16 copies of a Linear weight during a two-turn call."""
    from torch.profiler import ProfilerActivity, profile

    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops

    cfg = hf_config(qwen_dir)
    cfg["model"]["dtype"] = "bf16"
    policy, tok = build_policy(config_from_dict(cfg), [], torch.device("cpu"))
    policy.eval()
    # q, k, v, o, gate, up, down per layer and the output layer (tied: the embedding's); decode activations are 3-D
    linears = [m.weight for m in policy.backbone.modules() if isinstance(m, torch.nn.Linear)]
    assert all(w.dtype == torch.float32 for w in linears)
    shapes = {tuple(w.shape) for w in linears}
    gen = LMGenerator(
        policy,
        tok,
        1.0,
        1.0,
        torch.device("cpu"),
        search_r1_stops(tok),
        torch.Generator().manual_seed(0),
        autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        static_decode=static,
    )
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        out = gen.generate([tok.encode("Question: in which town was Fidan born?"), tok.encode("<think>")], [12, 12])
    casts = [
        e for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes and tuple(e.input_shapes[0]) in shapes
    ]
    assert gen.stats["decode_steps"] >= 10 and sum(len(o.ids) for o in out) >= 12
    assert 0 < len(casts) <= len(linears)  # each weight once, not once a step


def test_a_generation_call_inside_a_callers_autocast_region_leaves_no_stale_weight_casts(qwen_dir):
    """Autocast keeps its casts until the outermost region ends: a generation call made inside a caller's region (an
    engine's) must not leave its bf16 copies for the caller's later forwards, which would then compute with the
    weights as they were before an optimizer step changed them."""
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops

    cfg = hf_config(qwen_dir)
    cfg["model"]["dtype"] = "bf16"
    policy, tok = build_policy(config_from_dict(cfg), [], torch.device("cpu"))
    policy.eval()
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    gen = LMGenerator(policy, tok, 0.0, 1.0, torch.device("cpu"), search_r1_stops(tok), autocast=bf16)
    seq = torch.tensor([tok.encode("Question: in which town was Fidan born?")])
    args = (seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
    with bf16(), torch.no_grad():
        gen.generate([seq[0].tolist()], [4])
        for p in policy.parameters():  # an optimizer step's in-place update
            p.mul_(0.5)
        inside = policy(*args)[0]
    with bf16(), torch.no_grad():
        fresh = policy(*args)[0]
    torch.testing.assert_close(inside, fresh)


def test_a_static_decode_step_that_fails_goes_on_with_the_growing_cache_and_says_so_once(qwen_dir, monkeypatch):
    """A static step that raises (a model it cannot take after all, …) mid-turn: the turn goes on from the columns
    written before it with the cache growing, the same tokens as decoding that way throughout; the generator reports
    it once and decodes its later calls that way."""
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops
    from search_agent_trainer.static_decode import StaticDecode

    policy, tok = build_policy(config_from_dict(hf_config(qwen_dir)), [], torch.device("cpu"))
    policy.eval()
    contexts = [tok.encode("Question: in which town was Fidan born?"), tok.encode("<think>")]

    def turns(static: bool, reported: list[str]):
        gen = LMGenerator(
            policy,
            tok,
            0.0,
            1.0,
            torch.device("cpu"),
            search_r1_stops(tok),
            static_decode=static,
            on_fallback=reported.append,
        )
        first = gen.generate(contexts, [12, 12], keys=range(2))
        second = gen.generate([c + o.ids + tok.encode(" x") for c, o in zip(contexts, first)], [6, 6], keys=range(2))
        return gen, [o.ids for o in first + second]

    real_step = StaticDecode._step
    calls = []

    def failing(self):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("a kernel this model cannot run in place\nsecond line")
        return real_step(self)

    monkeypatch.setattr(StaticDecode, "_step", failing)
    reported: list[str] = []
    gen, got = turns(True, reported)
    _, want = turns(False, [])
    assert got == want
    assert reported == ["a static decode step failed (RuntimeError: a kernel this model cannot run in place)"]
    assert gen.stats["static_error"] == reported[0] and gen.stats["static_steps"] == 3
    assert not gen.static_decode and len(calls) == 4  # the second call decoded with the growing cache


def test_a_static_decode_step_out_of_memory_is_the_generators_to_recover_from_not_a_fallback(qwen_dir, monkeypatch):
    """Out of device memory in a static step (stand-in: a step of more than 2 rows raises it): the call runs again
    with half the KV budget, as for the growing cache, and static decoding stays on; the same greedy tokens."""
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.generation import LMGenerator
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import search_r1_stops
    from search_agent_trainer.static_decode import StaticDecode

    policy, tok = build_policy(config_from_dict(hf_config(qwen_dir)), [], torch.device("cpu"))
    policy.eval()
    contexts = [tok.encode("Question: in which town was Fidan born?"), tok.encode("<think>"), tok.encode("Who?")] * 2

    def generate(static: bool):
        gen = LMGenerator(policy, tok, 0.0, 1.0, torch.device("cpu"), search_r1_stops(tok), static_decode=static)
        gen.max_batch_tokens = 6 * (len(contexts[0]) + 8)
        return gen, [o.ids for o in gen.generate(contexts, [8] * 6)]

    real_step = StaticDecode._step

    def limited(self):
        if self.ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
        return real_step(self)

    monkeypatch.setattr(StaticDecode, "_step", limited)
    gen, got = generate(True)
    assert got == generate(False)[1]
    assert gen.stats["oom_retries"] == 2 and gen.static_decode and "static_error" not in gen.stats
    assert gen.stats["static_steps"] > 0


def test_a_run_whose_static_decode_failed_warns_once_and_decodes_with_the_growing_cache_from_then_on(tmp_path):
    from test_out_of_memory import _trainer, _warnings

    t = _trainer(tmp_path)
    assert t.cfg.rollout.cuda_graphs and t._static_decode  # the default (on CPU the generator decodes as before)
    assert not t._generator(1, False).static_decode
    t._static_decode_failed("a static decode step failed (RuntimeError: no)")
    t._static_decode_failed("a decode step could not be captured as a CUDA graph: again")
    t.writer.close()
    [warned] = _warnings(t, "static-decode-fallback")
    assert warned["message"].startswith("a static decode step failed (RuntimeError: no): the rollouts go on")
    assert not t._static_decode


def test_bf16_keeps_fp32_master_weights_so_small_updates_are_not_lost(qwen_dir):
    """At lr 1e-6 an AdamW step changes a weight of magnitude ~0.02 by far less than bf16's resolution (~1e-4 there):
    bf16 weights updated in place barely move. Under model.dtype bf16 the weights stay fp32 and only the compute is
    bf16 (autocast, on CPU too)."""
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.policy import build_policy, compute_dtype

    raw = hf_config(qwen_dir)
    raw["model"]["dtype"] = "bf16"
    cfg = config_from_dict(raw)
    policy, tok = build_policy(cfg, [], torch.device("cpu"))
    assert compute_dtype(cfg, torch.device("cpu")) == torch.bfloat16
    params = [p for p in policy.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in params)
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1e-6)
    ids = torch.tensor([tok.encode("Question: in which town was Fidan born? <answer> Ossel </answer>")])
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, _, _ = policy(ids, torch.ones_like(ids), torch.arange(ids.shape[1])[None])
        assert logits.dtype == torch.bfloat16  # computed in bf16
        torch.nn.functional.cross_entropy(logits[0, :-1].float(), ids[0, 1:]).backward()
        opt.step()
        opt.zero_grad()
    changed = sum(int((p != b).sum()) for p, b in zip(params, before)) / sum(p.numel() for p in params)
    assert changed > 0.99, changed


def test_lora_under_bf16_stores_the_frozen_base_in_bf16_and_the_adapter_in_fp32(qwen_dir):
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.policy import build_policy

    cfg = hf_config(qwen_dir)
    cfg["model"] = {"kind": "hf", "path": str(qwen_dir), "dtype": "bf16", "lora": {"r": 4, "alpha": 8}}
    policy, _tok = build_policy(config_from_dict(cfg), [], torch.device("cpu"))
    trained = {p.dtype for p in policy.parameters() if p.requires_grad}
    frozen = {p.dtype for p in policy.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}


@pytest.mark.parametrize("random_init", [True, False], ids=["random_init", "from_pretrained"])
def test_the_weights_are_made_on_the_runs_device_not_on_the_cpu_and_moved(monkeypatch, qwen_dir, random_init):
    """A 3B model's random init on the CPU took most of a minute beside an H200, and a checkpoint loaded on the CPU
    first holds all its fp32 weights in host memory: the model is made where the run computes. The device here is
    `meta` (what this CPU-only test can tell apart from the CPU): the model as transformers returns it, before the
    policy moves anything, is already there; and a random init draws the same weights for the same seed whatever the
    caller's random state, leaving that state as it was."""
    import transformers as tf

    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.policy import build_policy

    made: list[set[str]] = []
    name = "from_config" if random_init else "from_pretrained"
    original = getattr(tf.AutoModelForCausalLM, name)

    def spy(*args, **kwargs):
        model = original(*args, **kwargs)
        made.append({p.device.type for p in model.parameters()})
        return model

    monkeypatch.setattr(tf.AutoModelForCausalLM, name, spy)
    raw = hf_config(qwen_dir)
    raw["model"]["random_init"] = random_init
    cfg = config_from_dict(raw)
    if random_init:
        build_policy(cfg, [], torch.device("meta"))
        assert made == [{"meta"}]
    policy, _ = build_policy(cfg, [], torch.device("cpu"))
    assert made[-1] == {"cpu"}
    if not random_init:  # loaded with the device placed by transformers: the checkpoint's weights, exactly
        plain = original(str(qwen_dir), local_files_only=True)
        want = plain.state_dict()
        got = policy.backbone.state_dict()
        assert all(torch.equal(got[k], want[k]) for k in want)
        return
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    again, _ = build_policy(cfg, [], torch.device("cpu"))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), again.parameters()))


def test_dropout_is_off_unless_asked(tmp_path, qwen_dir):
    import shutil

    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.policy import build_policy

    d = tmp_path / "dropout-qwen"
    shutil.copytree(qwen_dir, d)
    config = json.loads((d / "config.json").read_text())
    config["attention_dropout"] = 0.1
    (d / "config.json").write_text(json.dumps(config))
    off, _ = build_policy(
        config_from_dict({**hf_config(d), "model": {"kind": "hf", "path": str(d)}}), [], torch.device("cpu")
    )
    assert off.backbone.config.attention_dropout == 0.0
    on, _ = build_policy(
        config_from_dict(
            {**hf_config(d), "model": {"kind": "hf", "path": str(d), "dropout": True, "lora": {"dropout": 0.2}}}
        ),
        [],
        torch.device("cpu"),
    )
    assert on.backbone.config.attention_dropout == 0.1
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.2 for m in on.backbone.modules())


def test_the_lora_reference_is_the_starting_adapter_so_kl_starts_at_0_after_a_warm_start(
    tmp_path, varied_env, qwen_dir
):
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    first = hf_config(qwen_dir, **{"train.steps": 1, "train.eval_every": 0, "optim.lr": 5e-2})
    first["model"]["lora"] = lora
    proc = run_trainer(tmp_path, first, varied_env.url, name="warm")
    assert proc.returncode == 0, proc.stderr[-3000:]
    adapter = torch.load(tmp_path / "warm" / "checkpoints" / "step-000001" / "trainable.pt")
    assert any(float(v.abs().max()) > 0 for k, v in adapter.items() if "lora_B" in k)  # the start is not the bare base
    second = hf_config(qwen_dir, **{"train.steps": 1, "train.eval_every": 0})
    second["model"]["lora"] = lora
    second["model"]["init"] = str(tmp_path / "warm" / "checkpoints" / "step-000001")
    proc = run_trainer(tmp_path, second, varied_env.url, name="from-warm")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = lines(tmp_path / "from-warm" / "metrics.jsonl")[-1]
    assert m["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # one on-policy mini-batch: π_θ = π_ref at the step
    for rec in lines(tmp_path / "from-warm" / "rollouts" / "step-000001.jsonl"):
        t = rec["tokens"]
        pairs = [(lp, ref) for lp, ref, m in zip(t["logprob"], t["ref_logprob"], t["loss_mask"]) if m]
        # float32 round-off, and the records' 6 decimals
        tol = f32_roundoff(torch.tensor([ref for _, ref in pairs])) + 1e-6
        assert all(abs(lp - ref) <= tol for lp, ref in pairs)


@pytest.mark.parametrize(
    "lora,dtype", [(False, "auto"), (True, "auto"), (True, "bf16")], ids=["full-fp32", "lora-fp32", "lora-bf16"]
)
def test_grpo_steps_end_to_end_with_and_without_lora(tmp_path, varied_env, qwen_dir, lora, dtype):
    cfg = hf_config(qwen_dir)
    cfg["model"]["dtype"] = dtype
    cfg["train"]["checkpoint_keep"] = 1
    if lora:
        cfg["model"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    proc = run_trainer(tmp_path, cfg, varied_env.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    started = lines(run / "events.jsonl")[0]
    assert started["event"] == "started" and started["model"] == "hf"
    if lora:
        assert started["trainable"] < started["parameters"] / 3
        assert (run / "checkpoints" / "step-000002" / "model" / "adapter_config.json").exists()
    else:
        assert started["trainable"] == started["parameters"]
    metrics = lines(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert metrics[1]["actor/grad_norm"] > 0 and "actor/kl_loss" in metrics[1]
    # bf16 on both sides, but different batch shapes: agreement to bf16's precision only
    assert metrics[1]["rollout/logprob_diff_max"] < logprob_agreement(dtype)
    assert started["precision"] == ("bf16 autocast, fp32 master weights" if dtype == "bf16" else "fp32")
    for rec in lines(run / "rollouts" / "step-000001.jsonl") + lines(run / "rollouts" / "step-000002.jsonl"):
        audit_rollout(rec)
        assert rec["prompt"].startswith("<|im_start|>user\n") and rec["prompt"].endswith("<|im_start|>assistant\n")
    # the reference is the starting policy: after an update, KL is no longer zero
    assert metrics[2]["actor/kl_loss"] > 0
    # train.checkpoint_keep: 1 kept the last checkpoint only; the finished run wrote model/ in Hugging Face format,
    # which transformers loads as it is (LoRA merged into the base; the adapter beside it)
    assert sorted(d.name for d in (run / "checkpoints").iterdir()) == ["step-000002"]
    exported = transformers.AutoModelForCausalLM.from_pretrained(str(run / "model"), local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(str(run / "model"), local_files_only=True)
    ids = torch.tensor([tok.encode("Question: where is Paris?")])
    with torch.no_grad():
        got = exported(input_ids=ids).logits
    if lora:
        import peft

        base = transformers.AutoModelForCausalLM.from_pretrained(str(qwen_dir), local_files_only=True)
        want_model = peft.PeftModel.from_pretrained(base, str(run / "model" / "adapter"))
    else:
        want_model = transformers.AutoModelForCausalLM.from_pretrained(str(qwen_dir), local_files_only=True)
        state = torch.load(run / "checkpoints" / "step-000002" / "trainable.pt", weights_only=True)
        want_model.load_state_dict({k.removeprefix("backbone."): v for k, v in state.items()}, strict=False)
    with torch.no_grad():
        want = want_model(input_ids=ids).logits
        untrained = transformers.AutoModelForCausalLM.from_pretrained(str(qwen_dir), local_files_only=True)(
            input_ids=ids
        ).logits
    # (under bf16 the base was held, and the adapter merged into it, in bf16: its rounding)
    tol = 5e-3 if dtype == "bf16" else 1e-4
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    assert not torch.allclose(got.float(), untrained.float(), atol=tol)  # the trained policy, not the base
