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


def published_template(name: str) -> str:
    """A model's published chat template as TRL ships it (trl/chat_templates/<name>.jinja: `qwen2_5` is Qwen2.5's,
    `qwen3` Qwen3's), read from the installed package (a test dependency)."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")


def build_tiny_qwen2(
    out: Path,
    texts: list[str],
    vocab_size: int = 800,
    seed: int = 0,
    chat_template: str = CHATML,
    hidden: int = 32,
    weights: bool = True,
) -> Path:
    """The model directory; without `weights`, config.json and the tokenizer only (examples/trl-tiny/model is made so,
    for `model.random_init`)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tok.chat_template = chat_template
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
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


def teach(
    model_dir: Path, out: Path, examples: list[tuple[str, str]], steps: int = 80, lr: float = 4e-3, seed: int = 0
) -> Path:
    """The model of `model_dir`, trained to write each example's completion after its prompt (cross-entropy on the
    completion's tokens only), saved with its tokenizer to `out`: a random model that has learnt one behaviour (e.g. to call a tool), so a rollout exercises it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)
    seqs = [(tok.encode(p, add_special_tokens=False), tok.encode(c, add_special_tokens=False)) for p, c in examples]
    T = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), T), tok.pad_token_id)
    labels = torch.full((len(seqs), T), -100)
    attn = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, (p, c) in enumerate(seqs):  # left-padded
        ids[i, T - len(p) - len(c) :] = torch.tensor(p + c)
        labels[i, T - len(c) :] = torch.tensor(c)
        attn[i, T - len(p) - len(c) :] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
        torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
        ).backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parents[2]
    build_tiny_qwen2(Path(sys.argv[1]), demo_texts(root / "examples" / "demo"), weights=False)
