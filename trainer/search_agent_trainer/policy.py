"""The policy: a causal LM (the built-in tiny one, or a Hugging Face model from a local directory, optionally with
LoRA through peft), its tokenizer behind one small interface, a value head for PPO, and the frozen reference
policy for the KL term. Nothing is downloaded (`local_files_only`); `model.random_init` builds the model from the
directory's config.json with seeded random weights instead of loading any.

Precision (`model.dtype`), the standard mixed-precision recipe (FSDP's too): the weights the optimizer updates are
always fp32 (master weights: an AdamW step at lr 1e-6 is below bf16's resolution for most weights, so bf16 weights
updated in place barely move); `bf16` — and `auto` on CUDA — compute in bf16 autocast. Under LoRA the frozen base is
stored in bf16 then (it is never updated) and the adapter stays fp32. `fp32` (and `auto` on CPU): no autocast. What
else a Hugging Face policy stores in which dtype, to fit one GPU, is precision.py's.

Dropout is off unless `model.dropout` is true (every dropout of the model and of LoRA): with it on, the log-probs of
the update's forward differ from the sampler's and the old-log-prob pass's, and on-policy ratios are not 1."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import logprobs
from .precision import enable_checkpointing, gradient_checkpointing, reference_dtype, residual_in_compute_dtype
from .tiny import TinyCausalLM, TinyTokenizer

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>")


class Tokenizer:
    """What the trainer needs of a tokenizer."""

    def __init__(self, impl: Any, kind: str):
        self.impl = impl
        self.kind = kind
        if kind == "tiny":
            self.eos_ids = {impl.eos_id}
            self.pad_id = impl.pad_id
        else:
            ids = {impl.eos_token_id} if impl.eos_token_id is not None else set()
            vocab = impl.get_vocab()
            ids |= {vocab[t] for t in END_OF_TURN if t in vocab}
            self.eos_ids = ids
            self.pad_id = impl.pad_token_id if impl.pad_token_id is not None else min(ids) if ids else 0

    @property
    def vocab_size(self) -> int:
        return self.impl.vocab_size if self.kind == "tiny" else len(self.impl)

    def encode(self, text: str) -> list[int]:
        return self.impl.encode(text) if self.kind == "tiny" else self.impl.encode(text, add_special_tokens=False)

    def decode(self, ids: Iterable[int], keep_special: bool = False) -> str:
        """The text of `ids`; special tokens (chat-template markers) are dropped unless `keep_special`."""
        ids = list(ids)
        return (
            self.impl.decode(ids)
            if self.kind == "tiny"
            else self.impl.decode(ids, skip_special_tokens=not keep_special)
        )

    def encode_offsets(self, text: str) -> tuple[list[int], list[int]]:
        """`encode(text)` and the character offset where each token starts (a fast Hugging Face tokenizer's offset
        mapping), so roles can be given to the tokens of a text encoded once."""
        if self.kind == "tiny":
            raise RuntimeError("the built-in tiny tokenizer has no offset mapping")
        enc = self.impl(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [start for start, _end in enc["offset_mapping"]]

    def token_text(self, i: int) -> str:
        """One token's text, for the rollout records (special tokens included, as written)."""
        return self.token_texts([i])[0]

    def token_texts(self, ids: Iterable[int]) -> list[str]:
        """Each token decoded on its own (a byte-level BPE token that is part of a character decodes to U+FFFD)."""
        ids = list(ids)
        cache = self.__dict__.setdefault("_texts", {})
        missing = sorted({i for i in ids if i not in cache})
        if missing:
            if self.kind == "tiny":
                texts = [self.impl.token_text(i) for i in missing]
            else:
                texts = self.impl.batch_decode([[i] for i in missing], skip_special_tokens=False)
            cache.update(zip(missing, texts))
        return [cache[i] for i in ids]

    def prompt(self, user_text: str, use_chat_template: bool) -> str:
        """The prompt as fed: the chat template applied when the tokenizer has one (and it is wanted)."""
        if self.kind == "hf" and use_chat_template and getattr(self.impl, "chat_template", None):
            return self.impl.apply_chat_template(
                [{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False
            )
        return user_text


class Policy(nn.Module):
    """A causal LM with one forward signature for both backbones, and an optional value head (PPO)."""

    def __init__(self, backbone: nn.Module, kind: str, value_head: bool, hidden: int):
        super().__init__()
        self.backbone = backbone
        self.kind = kind
        self.value_head = nn.Linear(hidden, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: Any = None,
        use_cache: bool = False,
        want_hidden: bool = False,
        logits_to_keep: int = 0,
    ):
        """(logits, cache, hidden). logits_to_keep > 0: only the last that many positions' logits (a large vocabulary
        times the whole prompt is most of a forward pass's memory)."""
        if self.kind == "tiny":
            logits, new_past, hidden = self.backbone(input_ids, attention_mask, position_ids, past, logits_to_keep)
            return logits, (new_past if use_cache else None), (hidden if want_hidden else None)
        if use_cache and past is None:
            from transformers import DynamicCache

            past = DynamicCache()
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past,
            use_cache=use_cache,
            output_hidden_states=want_hidden,
            logits_to_keep=logits_to_keep,
        )
        return (
            out.logits,
            (out.past_key_values if use_cache else None),
            (out.hidden_states[-1] if want_hidden else None),
        )

    @property
    def vocab_size(self) -> int:
        """A Hugging Face model's output layer size (it may exceed its tokenizer's)."""
        return int(hf_parts(self.backbone)[1].weight.shape[0])

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """V(s_t) from the backbone's last hidden state, in fp32 (outside autocast)."""
        assert self.value_head is not None
        with torch.autocast(hidden.device.type, enabled=False):
            return self.value_head(hidden.float()).squeeze(-1)


class Reference(nn.Module):
    """The frozen reference policy of the KL term: the policy RL starts from. It is the policy's own backbone run with a
    frozen copy of the weights the optimizer updates, taken when the reference is made (the initial weights,
    `model.init`'s or the warm start's) — under LoRA that copy is the starting adapter's few tensors (the base is
    frozen anyway), so the reference is the starting policy, not the bare base model; without LoRA it is a copy of
    every weight (as a separate reference model would be). Under bf16 autocast (`dtype`) the copy of a Hugging Face
    model's Linear and Embedding weights is bf16 — what autocast computes with anyway, so the same log-probs at half
    the memory (precision.py)."""

    def __init__(self, policy: Policy, dtype: torch.dtype | None = None):
        super().__init__()
        self.policy = policy
        cast = reference_dtype(policy.backbone, dtype) if policy.kind == "hf" else {}
        self.frozen = {
            n: p.detach().to(cast.get(n, p.dtype), copy=True)
            for n, p in policy.backbone.named_parameters()
            if p.requires_grad
        }

    @torch.no_grad()
    def backbone(self, *args: Any, **kwargs: Any) -> Any:
        """The backbone's forward with the frozen weights."""
        return torch.func.functional_call(self.policy.backbone, self.frozen, args, kwargs, strict=False)

    @torch.no_grad()
    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, logits_to_keep: int = 0
    ) -> torch.Tensor:
        if self.policy.kind == "tiny":
            return self.backbone(input_ids, attention_mask, position_ids, None, logits_to_keep)[0]
        return self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=logits_to_keep,
        ).logits

    def parts_params(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """The frozen tensors of one of the backbone's modules, by the module's own parameter names (a tied weight found
        under any of its names)."""
        names: dict[int, list[str]] = {}
        for n, p in self.policy.backbone.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(n)
        out = {}
        for n, p in module.named_parameters(remove_duplicate=False):
            for full in names.get(id(p), []):
                if full in self.frozen:
                    out[n] = self.frozen[full]
                    break
        return out


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(target | context) per position, from the logits that predict the targets (veRL divides by the sampling
    temperature here too, so the log-probs are those of the distribution the tokens were sampled from)."""
    logits = logits.float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@dataclass
class WindowStats:
    """Per-token statistics over the response window (B, R); log-probs and entropies are computed only where asked
    (`where`) and are 0 elsewhere: the output layer over a large vocabulary is most of a step's cost, and only the
    tokens in the loss need it."""

    logprob: torch.Tensor
    entropy: torch.Tensor | None
    values: torch.Tensor | None


def window_stats(
    model: Any,
    batch: Any,
    where: torch.Tensor,
    temperature: float = 1.0,
    want_entropy: bool = False,
    want_values: bool = False,
    entropy_grad: bool = False,
    whole_distribution: bool = False,
) -> WindowStats:
    """log π(token | context) (and the entropy, and PPO's values) at the window positions `where` (B, R) bool, from
    the logits of the temperature-scaled distribution the tokens were sampled from (veRL divides by the sampling
    temperature too). `model` is the Policy or the Reference. The tiny model gives the target tokens' log-probs
    without the whole output distribution where that is the same computation (temperature 1, no entropy gradient);
    `whole_distribution` forces the general path (what the tests and the benchmark compare the fast one with)."""
    from .losses import entropy_from_logits

    R = batch.window
    policy = model.policy if isinstance(model, Reference) else model
    hidden_w = None
    if policy.kind == "tiny":
        backbone = model.backbone if isinstance(model, Reference) else policy.backbone
        T = batch.input_ids.shape[1]
        select = torch.zeros(batch.input_ids.shape, dtype=torch.bool, device=where.device)
        select[:, T - R - 1 : T - 1] = where  # the positions whose outputs predict the selected window tokens
        if (
            not whole_distribution
            and (not temperature or temperature == 1.0)
            and not (want_entropy and entropy_grad and torch.is_grad_enabled())
        ):
            # the target tokens' log-probs without the whole distribution (tiny.py; the same numbers, a fraction of
            # the cost); an entropy in the loss needs the whole distribution with its gradient: the path below
            (logp_t, ent_t), _, h = backbone(
                batch.input_ids,
                batch.attention_mask,
                batch.position_ids,
                None,
                0,
                select,
                batch.targets[where],
                want_entropy,
            )
            logp = torch.zeros(where.shape, dtype=torch.float32, device=logp_t.device)
            logp[where] = logp_t
            entropy = None
            if want_entropy:
                entropy = torch.zeros(where.shape, dtype=torch.float32, device=logp_t.device)
                entropy[where] = ent_t
            hidden_w = h[:, -(R + 1) : -1]
            values = policy.values(hidden_w) if want_values and policy.value_head is not None else None
            return WindowStats(logp, entropy, values)
        selected, _, h = backbone(batch.input_ids, batch.attention_mask, batch.position_ids, None, 0, select)
        hidden_w = h[:, -(R + 1) : -1]
    else:
        # a Hugging Face model: the last hidden states of the window, then the output layer a chunk of the loss
        # tokens at a time (logprobs.py): the window's logits are never held whole
        hidden_w = hf_hidden(model, batch)[:, -(R + 1) : -1]
        head = hf_head(model)
        logp_t, ent_t = logprobs.token_logprobs(
            hidden_w[where],
            batch.targets[where],
            head,
            policy.vocab_size,
            temperature,
            want_entropy,
            entropy_grad and torch.is_grad_enabled(),
        )
        logp = torch.zeros(where.shape, dtype=torch.float32, device=logp_t.device)
        logp[where] = logp_t
        entropy = None
        if want_entropy:
            entropy = torch.zeros(where.shape, dtype=torch.float32, device=logp_t.device)
            entropy[where] = ent_t
        values = policy.values(hidden_w) if want_values and policy.value_head is not None else None
        return WindowStats(logp, entropy, values)
    selected = selected.float()
    if temperature and temperature != 1.0:
        selected = selected / temperature
    targets = batch.targets[where]
    logp = torch.zeros(where.shape, dtype=torch.float32, device=selected.device)
    logp[where] = selected.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(selected, dim=-1)
    entropy = None
    if want_entropy:
        entropy = torch.zeros(where.shape, dtype=torch.float32, device=selected.device)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy[where] = entropy_from_logits(selected)
    values = policy.values(hidden_w) if want_values and policy.value_head is not None and hidden_w is not None else None
    return WindowStats(logp, entropy, values)


def hf_parts(backbone: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(decoder, output layer) of a Hugging Face causal LM, LoRA-wrapped or not: the decoder returns the last hidden
    states (after the final norm), the output layer maps them to logits."""
    base = backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone
    return base.get_decoder(), base.get_output_embeddings()


def hf_hidden(model: Any, batch: Any) -> torch.Tensor:
    """The last hidden states (B, T, H) of a batch, from the policy or the reference (its frozen weights)."""
    policy = model.policy if isinstance(model, Reference) else model
    decoder, _head = hf_parts(policy.backbone)
    kwargs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
        "use_cache": False,
    }
    if isinstance(model, Reference):
        with torch.no_grad():
            return torch.func.functional_call(
                decoder, model.parts_params(decoder), (), kwargs, strict=False
            ).last_hidden_state
    return decoder(**kwargs).last_hidden_state


def hf_head(model: Any) -> Any:
    """The output layer as a function of hidden states (the reference's with its frozen weights)."""
    policy = model.policy if isinstance(model, Reference) else model
    _decoder, head = hf_parts(policy.backbone)
    if isinstance(model, Reference):
        frozen = model.parts_params(head)
        if frozen:
            return lambda h: torch.func.functional_call(head, frozen, (h,), strict=False)
    return head


def vocabulary_texts(path: str) -> list[str]:
    """The texts of a file for the tiny tokenizer's vocabulary: a JSONL file's string values (a corpus's `contents`,
    a dataset's questions and answers), any other file as it is."""
    import json

    with open(path, encoding="utf-8") as f:
        if not path.endswith(".jsonl"):
            return [f.read()]
        out: list[str] = []

        def walk(v: Any) -> None:
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        for line in f:
            if line.strip():
                try:
                    walk(json.loads(line))
                except json.JSONDecodeError:
                    out.append(line)
        return out


def build_policy(
    cfg: Any, vocab_texts: Iterable[str], device: torch.device, tokenizer_file: str | None = None
) -> tuple[Policy, Tokenizer]:
    """The policy and tokenizer a run config asks for. The tiny tokenizer is read from `tokenizer_file` when given
    (a checkpoint's), else built from `vocab_texts` and the files in `model.tiny.vocab`."""
    with_value = cfg.algorithm.name == "ppo"
    if cfg.model.kind == "tiny":
        t = cfg.model.tiny
        if tokenizer_file:
            tok = TinyTokenizer.load(tokenizer_file)
        else:
            texts = list(vocab_texts)
            for extra in t.vocab or []:
                texts.extend(vocabulary_texts(extra))
            tok = TinyTokenizer.build(texts)
        backbone = TinyCausalLM(
            tok.vocab_size, d_model=t.d_model, layers=t.layers, heads=t.heads, max_len=t.max_len, shapes=tok.shapes()
        )
        policy = Policy(backbone, "tiny", with_value, t.d_model)
        return policy.to(device), Tokenizer(tok, "tiny")
    return _build_hf(cfg, device, with_value)


def compute_dtype(cfg: Any, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of a run (None: no autocast): bf16 when `model.dtype` is bf16, auto on CUDA, or
    bf16_where_native on a device that multiplies bf16 natively (`native_bf16`). `fastest`: on a GPU as
    bf16_where_native; on a CPU the builtin trainer measures (numerics.py: the policy is built in fp32 and the run
    records its choice), and without a measurement (the other engines) it is fp32."""
    want = cfg.model.dtype
    if (
        want == "bf16"
        or (want == "auto" and device.type == "cuda")
        or (want == "bf16_where_native" and native_bf16(device))
        or (want == "fastest" and device.type != "cpu" and native_bf16(device))
    ):
        return torch.bfloat16
    return None


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 natively: a CUDA GPU with bf16 (Ampere and later), or a CPU with AVX512-BF16,
    AMX or arm64's BF16 (`cpu_has_native_bf16`; a CPU that cannot be probed counts as without)."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        try:  # torch >= 2.3 counts an emulating GPU (pre-Ampere) as supporting bf16 unless told not to
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:
            return bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu" and cpu_has_native_bf16() is True


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU multiplies bf16 natively (x86: AVX512-BF16 or AMX; arm64: the BF16 extension), as torch's
    cpuinfo reports it; None where it cannot tell. Without it torch's CPU bf16 autocast still works, through
    conversions to fp32 and back, and a step is several times slower than in fp32 (docs/trainer.md, "Devices and
    precision"). It reads the hardware: kernels held below it (ONEDNN_MAX_CPU_ISA=AVX2, as the pinned tests run) convert."""
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):  # torch's cpuinfo (x86)
        probe = getattr(torch.cpu, name, None)
        try:
            if probe is not None and probe():
                return True
        except RuntimeError:
            pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            words = set(f.read().split())
    except OSError:
        return None
    if "avx512_bf16" in words or "amx_bf16" in words or "bf16" in words:
        return True
    return False if words else None


def _build_hf(cfg: Any, device: torch.device, with_value: bool) -> tuple[Policy, Tokenizer]:
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - exercised where transformers is absent
        raise RuntimeError(
            'model.kind "hf" needs the transformers package in the trainer\'s Python (pip install transformers)'
        ) from e
    path = cfg.model.path
    if not os.path.isdir(path):
        raise RuntimeError(
            f"model.path: {path} is not a directory (a local Hugging Face model directory; nothing is downloaded)"
        )
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    if not cfg.model.dropout:
        without_dropout(config)
    # fp32 master weights; only a LoRA run's frozen base is stored in bf16 when the run computes in bf16
    dtype = torch.bfloat16 if cfg.model.lora and compute_dtype(cfg, device) is not None else torch.float32
    # The weights are made where the run computes, not on the CPU and then moved: a 3B model's random init took most
    # of a minute on the CPU beside an H200 (docs/benchmarks.md), and a 7B checkpoint loaded on the CPU first holds
    # 28 GiB of host memory in fp32. One device: transformers places the weights, no dispatch hooks.
    if cfg.model.random_init:  # the same weights for the same seed and device, whatever the caller's random state
        with _seeded_on(device), torch.device(device):
            torch.manual_seed(cfg.seed)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, config=config, local_files_only=True, dtype=dtype, device_map=device
        )
    return hf_policy(model, cfg, with_value).to(device), Tokenizer(tok, "hf")


def _seeded_on(device: torch.device) -> Any:
    """The random state of the CPU and, on CUDA, of `device` forked: what is drawn inside leaves the caller's alone."""
    if device.type != "cuda":
        return torch.random.fork_rng(devices=[])
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.random.fork_rng(devices=[index], device_type="cuda")


def without_dropout(config: Any) -> None:
    """Sets every dropout probability of a Hugging Face config to 0 (attention_dropout, hidden_dropout, resid_pdrop, …:
    some models read them as floats, not through nn.Dropout modules)."""
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
            setattr(config, key, 0.0)


def hf_policy(model: nn.Module, cfg: Any, with_value: bool) -> Policy:
    """A loaded Hugging Face causal LM as the policy: gradient checkpointing (on unless the config says false, builtin
    engine), the residual stream in the compute dtype and grouped-query attention kept grouped in decoding
    (precision.py, attention.py), LoRA (its adapter in fp32 over a base of any dtype) and the value head as the config
    asks, dropout off unless `model.dropout`."""
    if gradient_checkpointing(cfg):
        enable_checkpointing(model)
    residual_in_compute_dtype(model)
    from . import attention

    attention.use(model)
    if cfg.model.lora:
        try:
            import peft
        except ImportError as e:
            raise RuntimeError("model.lora needs the peft package in the trainer's Python (pip install peft)") from e
        lora = cfg.model.lora
        targets = lora.target_modules or ["q_proj", "k_proj", "v_proj", "o_proj"]
        for p in model.parameters():
            p.requires_grad_(False)
        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=targets,
                task_type="CAUSAL_LM",
            ),
            autocast_adapter_dtype=True,
        )
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    if not cfg.model.dropout:
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    hidden = (
        model.config.hidden_size if hasattr(model.config, "hidden_size") else model.get_input_embeddings().embedding_dim
    )
    return Policy(model, "hf", with_value, hidden)
