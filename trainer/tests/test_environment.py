"""The trainer's Python environment: the pinned stack is importable and the transformers path runs on CPU
with a tiny random-initialised model built from a config (nothing is downloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TRAINER = Path(__file__).resolve().parents[1]


def pinned() -> dict[str, str]:
    pins = {}
    for line in (TRAINER / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name] = version
    return pins


def test_pinned_versions_are_installed():
    from importlib import metadata

    for name, version in pinned().items():
        assert metadata.version(name) == version, name


def test_module_cli_reports_environment():
    env = {**os.environ, "PYTHONPATH": str(TRAINER)}
    out = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer", "--check"], env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(out.stdout)
    assert report["torch"] == torch.__version__
    assert report["device"] in ("cpu", "cuda")
    assert report["transformers"] == pinned()["transformers"]


def test_training_is_refused_honestly_until_it_exists():
    env = {**os.environ, "PYTHONPATH": str(TRAINER)}
    out = subprocess.run(
        [sys.executable, "-m", "search_agent_trainer", "--config", "x.json"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 2
    assert json.loads(out.stdout)["event"] == "error"


def test_tiny_qwen2_from_config_trains_a_step_on_cpu():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.Qwen2ForCausalLM(config)
    ids = torch.randint(0, 128, (2, 12))
    out = model(input_ids=ids, labels=ids)
    assert out.logits.shape == (2, 12, 128)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_peft_lora_wraps_the_tiny_model():
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = peft.get_peft_model(
        transformers.Qwen2ForCausalLM(config),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert 0 < trainable < total / 5
