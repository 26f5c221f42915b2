"""The built-in tiny policy: a small word-level tokenizer and a GPT-style causal transformer with a KV cache,
for CPU tests and the demo. No weights or vocabularies are downloaded: the vocabulary is built from the texts
the run will see (datasets, prompt template, corpus).

Tokenizer: the tags (`<think>`, `</search>`, …) are single tokens; text is split as GPT-2 does, into words, numbers
and punctuation marks, each with the space before it (" Paris"), and the remaining whitespace runs; a piece not in
the vocabulary falls back to its characters, so every text round-trips exactly (decode(encode(t)) == t).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
TAGS = ["<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>"]
_TAG = r"</?(?:think|search|information|answer)>"
PIECE_RE = re.compile(_TAG + r"| ?[^\W\d_]+| ?\d+| ?_| ?(?!" + _TAG + r")[^\w\s]|\s+(?!\S)|\s+", re.UNICODE)


class TinyTokenizer:
    """Word-level with a character fallback. Ids: specials, tags, then the learned pieces."""

    def __init__(self, pieces: list[str]):
        self.pieces = list(pieces)
        self.index = {p: i for i, p in enumerate(self.pieces)}
        self.pad_id, self.eos_id, self.bos_id, self.unk_id = (self.index[s] for s in SPECIALS)
        self.chat_template = None

    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 1, max_size: int = 50_000) -> TinyTokenizer:
        counts: Counter[str] = Counter()
        chars: set[str] = set()
        for t in texts:
            for piece in PIECE_RE.findall(t):
                counts[piece] += 1
                chars.update(piece)
        words = [p for p, c in counts.most_common() if c >= min_count and p not in TAGS]
        base = SPECIALS + TAGS
        chars |= set(string.printable)  # every ASCII character is always encodable
        chars_sorted = sorted(c for c in chars if c not in base)
        vocab = base + chars_sorted
        seen = set(vocab)
        for w in words:
            if len(vocab) >= max_size:
                break
            if w not in seen:
                vocab.append(w)
                seen.add(w)
        return cls(vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in PIECE_RE.findall(text):
            i = self.index.get(piece)
            if i is not None:
                ids.append(i)
            else:
                ids.extend(self.index.get(ch, self.unk_id) for ch in piece)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            if i in (self.pad_id, self.eos_id, self.bos_id):
                continue
            out.append(self.pieces[i] if 0 <= i < len(self.pieces) else "")
        return "".join(out)

    def token_text(self, i: int) -> str:
        return self.pieces[i]

    def shapes(self) -> list[int]:
        """Each token's surface shape (see SHAPES): what a character-level model would see and a word-level one
        does not, e.g. that " Zekrouv" is a capitalised word. The tiny model adds an embedding of it."""
        return [piece_shape(p) for p in self.pieces]

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"kind": "tiny-word", "pieces": self.pieces}, f)

    @classmethod
    def load(cls, path: str) -> TinyTokenizer:
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f)["pieces"])


SHAPES = ("special", "tag", "space", "punct", "digits", "lower", "capitalised", "upper", "other")


def piece_shape(piece: str) -> int:
    """An id in [0, 2·len(SHAPES)): the shape of the piece, and whether it starts with a space."""
    spaced = piece.startswith(" ") and len(piece) > 1
    core = piece[1:] if spaced else piece
    if piece in SPECIALS:
        kind = "special"
    elif piece in TAGS:
        kind = "tag"
    elif core.isspace():
        kind = "space"
    elif core.isdigit():
        kind = "digits"
    elif core.isalpha() and core.islower():
        kind = "lower"
    elif core.isalpha() and core[0].isupper() and (len(core) == 1 or core[1:].islower()):
        kind = "capitalised"
    elif core.isalpha() and core.isupper():
        kind = "upper"
    elif all(not c.isalnum() for c in core):
        kind = "punct"
    else:
        kind = "other"
    return SHAPES.index(kind) * 2 + (1 if spaced else 0)


# Room left after the cached tokens when a cache grows: decoding appends one token per step, and copying the whole
# cache every step (torch.cat) was most of a rollout's time on CPU.
CACHE_SLACK = 256


def append(cache: torch.Tensor, new: torch.Tensor, dim: int) -> torch.Tensor:
    """`cache` followed by `new` along `dim` (dim ≥ 1), as torch.cat gives it. Without autograd (generation), the
    result is the first part of a larger buffer along `dim`, and when `cache` is such a part with room for `new`,
    `new` is written into the room instead of copying the cache: O(new) per decode step rather than O(cache). (Read
    from the strides: inference-mode views do not record their base.)

    A cache is extended once (the generator replaces it by the result); the rows a generator selects or pads are
    copies (index_select, cat), which grow into buffers of their own."""
    if torch.is_grad_enabled() and (cache.requires_grad or new.requires_grad):
        return torch.cat([cache, new], dim=dim)
    n, m = cache.shape[dim], new.shape[dim]
    room = list(cache.shape)
    room[dim] = cache.stride(dim - 1) // max(cache.stride(dim), 1) if cache.numel() else n
    contiguous_strides = [1] * len(room)
    for d in range(len(room) - 2, -1, -1):
        contiguous_strides[d] = contiguous_strides[d + 1] * room[d + 1]
    if (
        room[dim] >= n + m
        and cache.storage_offset() == 0
        and list(cache.stride()) == contiguous_strides
        and cache.untyped_storage().nbytes()
        == math.prod(room) * cache.element_size()  # the whole buffer: not a slice of rows
        and cache.dtype == new.dtype
    ):
        out = cache.as_strided([n + m if d == dim else x for d, x in enumerate(cache.shape)], cache.stride())
        out.narrow(dim, n, m).copy_(new)
        return out
    shape = list(cache.shape)
    shape[dim] = n + m + CACHE_SLACK
    buf = cache.new_empty(shape)
    buf.narrow(dim, 0, n).copy_(cache)
    buf.narrow(dim, n, m).copy_(new)
    return buf.narrow(dim, 0, n + m)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k = append(cache[0], k, dim=2)
            v = append(cache[1], v, dim=2)
        # mask: (b, 1, t, total) booleans, True where attention is allowed
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class TinyCausalLM(nn.Module):
    """A GPT-style decoder with a copy head: token + shape + learned position embeddings, pre-LN blocks, and an output
    distribution that mixes the tied vocabulary head with a pointer over the context (a pointer-generator, See et al.
    2017, "Get To The Point"):

        p(w) = (1 − g) · softmax(h Eᵀ)_w + g · Σ_{j ≤ i, x_j = w} α_j,    α = softmax_j(q_i · k_j / √d),  g = σ(w_g · h_i)

    It is still a causal language model (forward returns log p as its logits, so temperature, log-probs and entropy
    work unchanged); the pointer only makes *copying a token from the context* — a name from the question into the
    query, a name from the retrieved passages into the answer — something a model this small learns in minutes rather
    than never. The shape embedding (a token's casing/digits/punctuation class, from the tokenizer) stands in for the
    characters a word-level vocabulary hides: without it a rare name is a random vector, indistinguishable from any
    other rare token."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        layers: int = 2,
        heads: int = 4,
        max_len: int = 1024,
        shapes: list[int] | None = None,
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"model.tiny.d_model ({d_model}) must be divisible by model.tiny.heads ({heads})")
        self.config = {
            "vocab_size": vocab_size,
            "d_model": d_model,
            "layers": layers,
            "heads": heads,
            "max_len": max_len,
        }
        self.tok = nn.Embedding(vocab_size, d_model)
        self.register_buffer(
            "shape",
            torch.tensor(shapes if shapes is not None else [0] * vocab_size, dtype=torch.long),
            persistent=False,
        )
        self.shape_emb = nn.Embedding(2 * len(SHAPES), d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.copy_q = nn.Linear(d_model, d_model)
        self.copy_k = nn.Linear(d_model, d_model)
        self.copy_gate = nn.Linear(d_model, 1)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    @property
    def max_len(self) -> int:
        return self.config["max_len"]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past=None,
        logits_to_keep: int = 0,
        select: torch.Tensor | None = None,
        targets: torch.Tensor | None = None,
        want_entropy: bool = False,
    ):
        """input_ids (b, t); attention_mask (b, past_len + t) with 0 on padding; position_ids (b, t).
        Returns (logits, cache, hidden): logits are log p(next token) — (b, t, vocab), or only the last
        `logits_to_keep` positions when > 0, or (n, vocab) for the positions where `select` (b, t) is true, in row-major
        order —, the cache for the next call, and the final hidden states (b, t, d).

        With `targets` (n,) (one token per selected position), `logits` is instead the pair (log p(target) (n,),
        entropy (n,) or None): the same numbers as gathering from the whole distribution, without building it —
        log p(w) needs only the vocabulary head's logit of w and its log-normaliser, and the pointer's mass on w (the
        attention on the context positions holding w); the whole (n, vocab) distribution and its backward are most of
        a training forward's cost otherwise. `want_entropy`: the entropy too, from the whole distribution, without
        gradient (a statistic)."""
        b, t = input_ids.shape
        past_len = 0 if past is None else past[0][0].shape[2]
        x = (
            self.tok(input_ids)
            + self.shape_emb(self.shape[input_ids])
            + self.pos(position_ids.clamp(min=0, max=self.max_len - 1))
        )
        total = past_len + t
        causal = torch.ones(t, total, dtype=torch.bool, device=input_ids.device).tril(diagonal=past_len)
        keys = attention_mask[:, None, None, :total].bool()
        mask = causal[None, None] & keys
        # A fully padded query row would attend to nothing (NaN); let it attend to itself.
        mask = mask | torch.eye(t, total, dtype=torch.bool, device=input_ids.device).roll(past_len, dims=1)[None, None]
        new_past = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, None if past is None else past[i])
            new_past.append(kv)
        h = self.ln(x)
        # the pointer's keys and the context's ids, cached like the attention's
        k = self.copy_k(h)
        ids = input_ids
        if past is not None:
            k = append(past[-1][0], k, dim=1)
            ids = append(past[-1][1], ids, dim=1)
        new_past.append((k, ids))
        if select is not None:
            rows, cols = select.nonzero(as_tuple=True)
        elif logits_to_keep:
            cols = torch.arange(t - logits_to_keep, t, device=h.device).repeat(b)
            rows = torch.arange(b, device=h.device).repeat_interleave(logits_to_keep)
        else:
            rows = torch.arange(b, device=h.device).repeat_interleave(t)
            cols = torch.arange(t, device=h.device).repeat(b)
        hq = h[rows, cols]  # (n, d)
        vocab_logits = (hq @ self.tok.weight.T).float()
        scores = (self.copy_q(h) @ k.transpose(1, 2))[rows, cols].float() / math.sqrt(k.shape[-1])  # (n, total)
        allowed = mask[rows, 0, cols]  # (n, total)
        alpha = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        g = torch.sigmoid(self.copy_gate(hq).float())

        def mixture(vocab_logits: torch.Tensor, alpha: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            copy_p = torch.zeros_like(vocab_logits).scatter_add_(1, ids[rows], alpha)
            return torch.logaddexp(
                torch.log1p(-g) + torch.log_softmax(vocab_logits, dim=-1),
                torch.log(g) + torch.log(copy_p.clamp_min(1e-30)),
            )

        if targets is None:
            logp = mixture(vocab_logits, alpha, g)
            if select is None:
                logp = logp.view(b, -1, logp.shape[-1])
            return logp, new_past, h
        g1 = g.squeeze(-1)
        vocab_t = vocab_logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(vocab_logits, dim=-1)
        copy_t = (alpha * (ids[rows] == targets[:, None])).sum(-1)
        logp_t = torch.logaddexp(torch.log1p(-g1) + vocab_t, torch.log(g1) + torch.log(copy_t.clamp_min(1e-30)))
        entropy = None
        if want_entropy:
            with torch.no_grad():
                full = mixture(vocab_logits.detach(), alpha.detach(), g.detach())
                entropy = -(full.exp() * full).sum(-1)
        return (logp_t, entropy), new_past, h
