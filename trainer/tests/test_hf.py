"""The transformers code path on CPU: a tiny random-initialised Qwen2 model (built from a config, with a byte-level BPE
tokenizer and a ChatML chat template made by the test) trained for a few GRPO steps end to end against the real env
server, with and without LoRA through peft; its rollout records pass the same mask audit as the tiny model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import DEMO, tiny_config
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
    from search_agent_trainer.policy import build_policy
    from search_agent_trainer.rollout import LMGenerator

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
        def forward(self, input_ids, attention_mask, position_ids, past=None, use_cache=False, want_hidden=False, logits_to_keep=0):
            V = len(tok.impl)
            logits = torch.full((*input_ids.shape, V), -1e4)
            for b in range(input_ids.shape[0]):
                for t in range(input_ids.shape[1]):
                    nxt = {a: c for a, c in zip(close, close[1:])}.get(int(input_ids[b, t]), close[0])
                    logits[b, t, nxt] = 0.0
            return logits, None, None

    out = LMGenerator(Chain(), tok, 0.0, 1.0, torch.device("cpu")).generate([tok.encode("Q")], [50])
    text = tok.decode(out[0].ids)
    assert text.endswith("</search>") and text.count("</search>") == 1


def test_kv_cached_generation_matches_full_forward_for_qwen2(qwen_dir):
    from search_agent_trainer.config import config_from_dict
    from search_agent_trainer.policy import build_policy, token_logprobs
    from search_agent_trainer.rollout import LMGenerator

    policy, tok = build_policy(config_from_dict(hf_config(qwen_dir)), [], torch.device("cpu"))
    policy.eval()
    contexts = [tok.encode("Question: in which town was Fidan born?"), tok.encode("<think>")]
    out = LMGenerator(policy, tok, 1.0, 1.0, torch.device("cpu"), torch.Generator().manual_seed(0)).generate(contexts, [12, 12])
    for c, o in zip(contexts, out):
        seq = torch.tensor([c + o.ids])
        with torch.no_grad():
            logits, _, _ = policy(seq, torch.ones_like(seq), torch.arange(seq.shape[1])[None])
        lp = token_logprobs(logits[:, len(c) - 1 : -1], seq[:, len(c) :])
        torch.testing.assert_close(lp[0], torch.tensor(o.logprobs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("lora", [False, True])
def test_grpo_steps_end_to_end_with_and_without_lora(tmp_path, varied_env, qwen_dir, lora):
    cfg = hf_config(qwen_dir)
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
    assert metrics[1]["rollout/logprob_diff_max"] < 1e-3
    for rec in lines(run / "rollouts" / "step-000001.jsonl") + lines(run / "rollouts" / "step-000002.jsonl"):
        audit_rollout(rec)
        assert rec["prompt"].startswith("<|im_start|>user\n") and rec["prompt"].endswith("<|im_start|>assistant\n")
    # the LoRA reference is the base model with the adapter off: after an update, KL is no longer zero
    assert metrics[2]["actor/kl_loss"] > 0
