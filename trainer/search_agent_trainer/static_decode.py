"""A decode step at fixed addresses, replayed as one CUDA graph.

Measured on an H200 (2026-11-28, stop 53): our decode step took 27.7 ms at Qwen2.5-0.5B's shape, 33.3 ms at 1.5B and
38.4 ms at 3B (80 rows) — nearly the same at 6× the weights, so the step is the CPU's: about 25 kernels per layer,
each launched by Python (transformers' modules, the mask built anew, the cache grown by `torch.cat`), each waiting on
the one before it. Hugging Face's `generate` pays the same, and ours was 0.94–1.20× it.

A decode batch here keeps its KV cache in buffers wide enough for the whole turn (the context, the largest turn budget
and one read window more), its token, position and attention-mask columns in buffers too; a step writes the new
key/value column in place (`index_copy_` at a column held on the device) instead of growing the cache. Every tensor a
step reads or writes then stays where it is from step to step, so on CUDA the step is captured once as a CUDA graph
after one step run as it is (the warm-up) and replayed for the rest of the turn: one launch per token instead of
hundreds. On CPU the same step runs as it is (tested against the growing cache: the same tokens, log-probs within
round-off); what CUDA adds is only the capture.

Measured on the same H200 once this ran (2026-11-29): 7.8, 10.7 and 15.6 ms a step (3.6×, 3.1×, 2.5× faster), and
ours 3.06×, 2.59×, 2.75× a plain `generate` loop's tokens/s; at 0.5B the GPU is busy 95 % of the rollout's time.

The step runs the model's own modules — embeddings, rotary embedding, each decoder layer (its attention module calls
`update` on the cache it is given: here `_Columns`, which writes the column), the final norm, the output layer — so
LoRA adapters and forward hooks run as they would. Models it takes: a Hugging Face decoder (Qwen2/Qwen3/Llama-like:
`embed_tokens`, `rotary_emb`, `layers`, `norm`) with full attention in every layer, running SDPA (the grouped decode
path, attention.py, or transformers' own), in eval mode; anything else decodes as before.

The buffers hold one set of rows. Finished rows stay in their slots (fed padding, attention 0) rather than being parked:
a replayed step costs about the same with fewer rows while it is bound by launches and weight reads, and each change
of rows costs a copy of the cache and a new capture (a warm-up step and the capture: a few steps' time). Under
continuous batching, where rows must leave for waiting ones to come in — only at a read of the tokens, every 16 steps
on CUDA — the batch goes back to transformers' cache (views of the buffers), rows are dropped and merged as before,
and the next step makes new buffers for the rows that stay and captures anew. A capture that fails (a kernel that cannot be captured, …) leaves the step running as it is; a step that
fails goes back to the growing cache; either is reported once (`LMGenerator.on_fallback`, the stats' `graph_error` /
`static_error`) and the generator decodes as before from then on.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from . import attention
from .policy import hf_parts


def decoder_of(policy: Any) -> tuple[Any, Any] | None:
    """(decoder, output layer) of a policy whose decode step can be taken here, else None."""
    if getattr(policy, "kind", None) != "hf":
        return None
    decoder, head = hf_parts(policy.backbone)
    config = getattr(decoder, "config", None)
    if config is None or head is None or decoder.training:
        return None
    if not all(hasattr(decoder, a) for a in ("embed_tokens", "rotary_emb", "layers", "norm")):
        return None
    if getattr(config, "_attn_implementation", None) not in (attention.NAME, "sdpa"):
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and any(t != "full_attention" for t in types):
        return None
    if types is None and getattr(config, "use_sliding_window", False):
        return None
    if not all(hasattr(layer, "self_attn") and hasattr(layer.self_attn, "layer_idx") for layer in decoder.layers):
        return None
    return decoder, head


class _Columns:
    """The cache a decoder layer's attention is given: `update` writes this step's key/value column in place and
    returns the whole buffers (their unwritten columns masked)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], column: torch.Tensor):
        self.keys, self.values, self.column = keys, values, column

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        self.keys[layer_idx].index_copy_(2, self.column, key)
        self.values[layer_idx].index_copy_(2, self.column, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:  # pragma: no cover - not asked by the layers called
        return int(self.keys[layer_idx].shape[2])


class StaticDecode:
    """One decode batch's buffers and its step (see the module's docstring). `keys`/`values`: the batch's cache per
    layer, (B, kv_heads, W, head_dim); `attn`: its (B, W) mask; `columns`: the steps to make room for."""

    def __init__(
        self,
        decoder: Any,
        head: Any,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        attn: torch.Tensor,
        columns: int,
        graph: bool,
    ):
        self.decoder, self.head = decoder, head
        B, W = attn.shape
        cap = -(-(W + columns) // 16) * 16  # masks of a width SDPA's memory-efficient kernel takes without a copy
        self.width = W  # columns written so far (the next step writes column `width`)
        self.cap = cap

        def room(t: torch.Tensor) -> torch.Tensor:
            buf = t.new_zeros((*t.shape[:2], cap, t.shape[3]))
            buf[:, :, :W].copy_(t)
            return buf

        self.keys = [room(k) for k in keys]
        self.values = [room(v) for v in values]
        self.attn = attn.new_zeros((B, cap))
        self.attn[:, :W].copy_(attn)
        dev = attn.device
        self.ids = torch.zeros((B, 1), dtype=torch.long, device=dev)
        self.pos = torch.zeros((B, 1), dtype=torch.long, device=dev)
        self.live = torch.zeros((B, 1), dtype=attn.dtype, device=dev)
        self.column = torch.tensor([W], dtype=torch.long, device=dev)
        self.cache = _Columns(self.keys, self.values, self.column)
        self.logits: torch.Tensor | None = None
        self.graph_wanted = graph
        self.graph: Any = None
        self.error: str | None = None
        self.steps = 0
        self.capture_seconds = 0.0  # the host's time in the warm-up and capture (CUDA syncs and frees its cache)

    def _step(self) -> torch.Tensor:
        """The step itself: every input read from, every output written to, this object's buffers."""
        self.attn.index_copy_(1, self.column, self.live)
        mask = self.attn.bool()[:, None, None, :]
        x = self.decoder.embed_tokens(self.ids)
        rope = self.decoder.rotary_emb(x, self.pos)
        for layer in self.decoder.layers:
            out = layer(
                x,
                attention_mask=mask,
                position_ids=self.pos,
                past_key_values=self.cache,
                use_cache=True,
                position_embeddings=rope,
            )
            x = out[0] if isinstance(out, tuple) else out
        logits = self.head(self.decoder.norm(x))[:, -1]
        self.column.add_(1)
        return logits

    def step(self, feed: torch.Tensor, live: torch.Tensor, last_pos: torch.Tensor) -> torch.Tensor:
        """Feeds each row its token (`feed` (B, 1)) at position `last_pos` with attention `live`; the next-token logits
        (B, V) — on CUDA a graph's output buffer, overwritten by the next step: read it before."""
        if self.width >= self.cap:
            raise RuntimeError(f"a decode step past the {self.cap} columns made room for")
        self.ids.copy_(feed)
        self.pos.copy_(last_pos[:, None])
        self.live.copy_(live[:, None])
        if self.graph is not None:
            self.graph.replay()
            assert self.logits is not None
            logits = self.logits
        elif not self.graph_wanted or self.width + 1 >= self.cap:  # the captured step is the next one: room for it
            logits = self._step()
        else:
            logits = self._warm_up_and_capture()
        # counted once the step is done: a step that raised wrote no column the cache (`tensors`, `mask`) shows
        self.width += 1
        self.steps += 1
        return logits

    def _warm_up_and_capture(self) -> torch.Tensor:
        """This step run as it is (on a side stream, as CUDA graphs want their warm-up), then the next one captured
        (capturing records the step's kernels and runs none of them), to be replayed from then on. A capture that fails
        leaves the step running as it is (`error` says why)."""
        self.graph_wanted = False
        t0 = time.perf_counter()
        try:
            return self._capture()
        finally:
            self.capture_seconds += time.perf_counter() - t0

    def _capture(self) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            logits = self._step()
        torch.cuda.current_stream().wait_stream(side)
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads may use CUDA
                out = self._step()
            self.graph, self.logits = graph, out
        except torch.OutOfMemoryError:
            raise  # the generator's to handle: the call runs again with half the KV budget
        except Exception as e:  # noqa: BLE001 - any other failure to capture: the step runs as it is, and says so
            text = str(e).strip()
            self.error = f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
        return logits

    def set_attn(self, attn: torch.Tensor) -> None:
        """The mask of the columns written so far, after rows' last tokens were masked (a read found them past their
        end)."""
        self.attn[:, : attn.shape[1]].copy_(attn)

    def mask(self) -> torch.Tensor:
        """The (B, width) mask of the columns written so far (a view of the buffer)."""
        return self.attn[:, : self.width]

    def tensors(self) -> list[torch.Tensor]:
        """The cache of the columns written so far, per layer keys then values (views of the buffers): what the next
        turn extends, and rows are taken from."""
        return [t[:, :, : self.width] for k, v in zip(self.keys, self.values) for t in (k, v)]
