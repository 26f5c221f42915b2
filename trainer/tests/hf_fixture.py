"""A tiny random-initialised Qwen2-style model and its tokenizer, built here (nothing can be downloaded): a byte-level
BPE tokenizer trained on the demo data with Qwen's ChatML special tokens and chat template, and a 2-layer Qwen2
config. The trainer loads it through the same code path as a real model directory.

    python trainer/tests/hf_fixture.py examples/trl-tiny/model   (re)writes the trl-tiny example's model directory."""

from __future__ import annotations

import json
from pathlib import Path

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_qwen2(out: Path, texts: list[str], vocab_size: int = 800, seed: int = 0, weights: bool = True) -> Path:
    """The model directory; without `weights`, config.json and the tokenizer only (examples/trl-tiny/model is made so,
    for `model.random_init`)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    tok.chat_template = CHATML
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    if weights:
        Qwen2ForCausalLM(config).save_pretrained(str(out))
    else:
        config.save_pretrained(str(out))
    return out


def demo_texts(demo: Path) -> list[str]:
    texts = []
    for name in ("corpus.jsonl", "train.jsonl", "eval.jsonl"):
        for line in (demo / name).read_text(encoding="utf-8").splitlines():
            o = json.loads(line)
            texts.append(o.get("contents") or o.get("question", "") + " " + " ".join(o.get("golden", [])))
    texts.append("<think> </think> <search> </search> <information> </information> <answer> </answer> Doc 1(Title: )")
    return texts


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parents[2]
    build_tiny_qwen2(Path(sys.argv[1]), demo_texts(root / "examples" / "demo"), weights=False)
