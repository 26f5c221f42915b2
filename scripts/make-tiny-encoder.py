"""Writes the tiny E5-style encoder the dense-retrieval tests use (committed under test/fixtures/, so the
TypeScript tests need no Python): a WordPiece tokenizer trained on the demo corpus (BERT normalisation and
[CLS] … [SEP], as E5's), a random-initialised 2-layer BERT exported to ONNX (with and without a token_type_ids
input), and reference embeddings computed by PyTorch (mean pooling over the attention mask, L2 normalisation)
for an independent check. Nothing is downloaded.

    .venv/bin/pip install onnx==1.23.2   # the ONNX exporter needs it; not a project dependency
    .venv/bin/python scripts/make-tiny-encoder.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "test" / "fixtures" / "tiny-e5"
OUT_NO_TT = ROOT / "test" / "fixtures" / "tiny-e5-no-token-types"
MAX_LENGTH = 256


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    texts = [
        json.loads(line)["contents"] for line in (ROOT / "examples" / "demo" / "corpus.jsonl").read_text().splitlines()
    ]
    tok.train_from_iterator(texts + ["query: ", "passage: "], trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.enable_truncation(MAX_LENGTH)
    return tok


class WithTokenTypes(torch.nn.Module):
    def __init__(self, bert: BertModel):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, use_cache=False
        ).last_hidden_state


class WithoutTokenTypes(torch.nn.Module):
    def __init__(self, bert: BertModel):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def main() -> None:
    torch.manual_seed(5)
    OUT.mkdir(parents=True, exist_ok=True)
    OUT_NO_TT.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.save(str(OUT / "tokenizer.json"))
    config_json = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "model_max_length": MAX_LENGTH,
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
    }
    for d in (OUT, OUT_NO_TT):
        (d / "tokenizer_config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    tok.save(str(OUT_NO_TT / "tokenizer.json"))

    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH + 2,
    )
    bert = BertModel(config, add_pooling_layer=False).eval()
    ids = torch.tensor([[2, 10, 11, 3], [2, 12, 3, 0]])
    mask = (ids != 0).long()
    axes = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "last_hidden_state": {0: "batch", 1: "sequence"},
    }
    # Wrappers in eval mode: the exporter restores each module's training flag afterwards, recursively.
    torch.onnx.export(
        WithTokenTypes(bert).eval(),
        (ids, mask, torch.zeros_like(ids)),
        str(OUT / "model.onnx"),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        dynamic_axes={**axes, "token_type_ids": {0: "batch", 1: "sequence"}},
        opset_version=17,
        dynamo=False,
    )
    torch.onnx.export(
        WithoutTokenTypes(bert).eval(),
        (ids, mask),
        str(OUT_NO_TT / "model.onnx"),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )

    # Reference embeddings by PyTorch: E5's recipe (prefix, mean pooling over the mask, L2 normalisation).
    texts = [
        "query: who founded the Varnholt Observatory?",
        'passage: "Varnholt Observatory"\nIt was founded in 1871 by Ilse Marrow.',
        "query: a",
        "passage: " + "long text " * 200,
    ]
    enc = tok.encode_batch(texts)
    width = max(len(e.ids) for e in enc)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in enc])
    mask = torch.tensor([e.attention_mask + [0] * (width - len(e.ids)) for e in enc])
    bert.eval()
    assert not bert.training
    with torch.no_grad():
        hidden = bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    normed = torch.nn.functional.normalize(pooled, dim=-1)
    ref = {
        "texts": texts,
        "lengths": [len(e.ids) for e in enc],
        "embeddings": [[round(float(x), 7) for x in row] for row in normed],
    }
    (OUT / "reference.json").write_text(json.dumps(ref) + "\n")
    for d in (OUT, OUT_NO_TT):
        print(d, sorted((p.name, p.stat().st_size) for p in d.iterdir()))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
