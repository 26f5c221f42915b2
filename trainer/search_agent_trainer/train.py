"""The train loop: rollout → reward → log-probs → advantages → update, one step at a time (veRL's RayPPOTrainer.fit,
single process).

A step:
1. rollout: `rollout.batch_size` prompts × `rollout.n` samples, multi-turn against the env server (rollout.py);
2. reward: the env server's `/reward` scores every trajectory with the user's reward module (the trainer computes
   none itself; it also asks for the built-in EM/F1/format measures, for the metrics only);
3. old log-probs (and values for PPO, reference log-probs when β > 0) over the response window (batch.py). On an
   on-policy step (one epoch, one mini-batch) the update's own forward gives them, detached (ρ = 1 exactly, as
   veRL does), and the separate pass runs only for what is needed before the update (PPO's values, a KL reward);
4. advantages (advantages.py): GRPO / Dr. GRPO per group, REINFORCE++ over the batch, GAE for PPO;
5. update: `optim.ppo_epochs` passes over shuffled mini-batches of `optim.mini_batch_size` sequences, each an optimizer
   step accumulated over micro-batches of `optim.micro_batch_size`; loss = policy loss − entropy_coef·H + β·KL
   (+ vf_coef · value loss); gradient clipping per parameter group (the policy, and PPO's value head on its own);
   linear LR warmup;
6. metrics, rollout records with their token arrays, checkpoint, evaluation.
Held-out evaluation (greedy, one sample per question) runs before the first update and every `train.eval_every`
steps; its metrics are `val/*` (val/em is the exact match of the final answer).

`--resume` continues from the last checkpoint. What every engine shares around the update (the run directory, data
and prompts, rollouts and their scores, held-out evaluation, signals and failures) is run.py's `Run`; the metrics
are metrics.py's, the records record/'s.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from . import precision
from .advantages import (
    gae_advantage,
    grpo_outcome_advantage,
    reinforce_plus_plus_advantage,
    token_rewards,
    zero_std_group_fraction,
)
from .batch import SequenceBatch, by_length, make_batch
from .checkpoint import checkpoint_keep, export_model, load_trainable, prune_checkpoints, read_state, save_checkpoint
from .curriculum import Stage, describe, stage_of
from .data import EpochSampler, MixSampler
from .generation import auto_max_batch_tokens, out_of_memory_message, without_cudnn_attention
from .losses import Aggregation, kl_penalty, masked_mean, objective
from .metrics import SUMMARY_KEYS, mean, rollout_metrics
from .numerics import Numerics, ProbeShapes
from .numerics import resolve as resolve_numerics
from .policy import Reference, build_policy, cpu_has_native_bf16, window_stats
from .record.batch import batch_data, batch_flags
from .rollout import VOCABULARY_TEXTS, Trajectory, make_dialect
from .run import Run
from .warmup import WarmStart, run_warmup


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


class Trainer(Run):
    """The builtin engine: our own update (PPO / GRPO / REINFORCE++ in one process) on the run every engine shares
    (run.py)."""

    # -- setup ----------------------------------------------------------------------------------------------------
    def _device(self) -> torch.device:
        want = self.cfg.model.device
        if want == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                'model.device is "cuda" but torch sees no CUDA device (torch.cuda.is_available() is False)'
            )
        return torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")

    def _build_policy(self, vocab_texts: list[str], tokenizer_file: str | None) -> tuple[Any, Any]:
        """The policy and its tokenizer (the GPU benchmark builds a random model from a config instead)."""
        return build_policy(self.cfg, vocab_texts, self.device, tokenizer_file=tokenizer_file)

    def _ctx(self):
        """The autocast region of a log-prob pass or an update's forward. For a Hugging Face policy without autocast's
        cache of bf16 weight copies: with checkpointing only the layer being run needs its copy, and the cache would
        keep every layer's until the region ends (2 B/param; precision.py). Generation keeps the cache (the same
        weights at every decode step)."""
        dtype = self._compute_dtype()
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype, cache_enabled=self.policy.kind != "hf")

    def setup(self) -> int:
        cfg, w = self.cfg, self.writer
        self.device = self._device()
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        self._load_data()
        ckpt = self._resume_checkpoint()
        state = read_state(ckpt) if ckpt is not None else {}
        start = int(state.get("step", 0))
        self.stage = stage_of(self.stages, start + 1)
        init = Path(cfg.model.init) if cfg.model.init else None
        tok_file = next(
            (str(p / "tokenizer.json") for p in (ckpt, init) if p is not None and (p / "tokenizer.json").exists()), None
        )
        vocab_texts = [cfg.data.prompt_template, *VOCABULARY_TEXTS]
        vocab_texts += [f"{e.question} {' '.join(e.golden)}" for e in self.train_set + self.eval_set]
        self.policy, self.tok = self._build_policy(vocab_texts, tok_file)
        if init is not None:  # also on resume: the reference below is model.init's policy
            load_trainable(self.policy, init / "trainable.pt")
            w.log(f"initial weights from {init}")
        # The reference policy of the KL term is the policy RL starts from: the initial weights, or the warm start's
        # (step-000000, on resume; run() re-takes it right after a fresh warm start); in a later stage of a
        # curriculum, the policy its stage started from (the checkpoint of the previous stage's last step).
        warm0 = self.run_dir / "checkpoints" / "step-000000" / "trainable.pt"
        if self.stage.index > 0:
            first = self.run_dir / "checkpoints" / f"step-{self.stage.start:06d}" / "trainable.pt"
            if not first.exists():
                raise RuntimeError(
                    f"{first}: the policy stage {self.stage.index + 1} started from (its KL reference) is missing; a stage's last step is always checkpointed, so this run directory was changed by hand"
                )
            load_trainable(self.policy, first)
        elif ckpt is not None and self.warmup_applies() and warm0.exists():
            load_trainable(self.policy, warm0)
        self.dialect = make_dialect(cfg.rollout.dialect, self.tok, cfg.rollout.search_tool, cfg.rollout.strict_actions)
        self.stops = self.dialect.stops(self.tok)

        self._encode_prompts()
        if self.policy.kind == "tiny":
            longest = max(len(p[1]) for p in self.train_prompts + self.eval_prompts) + cfg.rollout.max_response_length
            if longest > self.policy.backbone.max_len:
                raise RuntimeError(
                    f"model.tiny.max_len ({self.policy.backbone.max_len}) is shorter than the longest prompt plus rollout.max_response_length ({longest} tokens)"
                )
        self.numerics = self._numerics(state.get("numerics"))
        # in the run's compute dtype (precision.py)
        self.reference = self._reference() if cfg.algorithm.kl_coef > 0 else None
        self.max_batch_tokens = cfg.rollout.max_batch_tokens or auto_max_batch_tokens(
            self.policy, self.device, self.numerics.autocast
        )
        # the micro-batch of the log-prob passes and the update: optim.micro_batch_size, halved for the rest of the run
        # when either runs out of device memory (_fitting); both sizes as a checkpoint kept them (a resume starts there)
        self.micro_batch_size = cfg.optim.micro_batch_size
        self._resume_sizes(state.get("out_of_memory") or {})

        # Parameter groups, each with its own lr, warm-up and gradient clip: the policy, and PPO's value head (a shared
        # backbone's early value-loss gradients would otherwise dominate one global norm and shrink the policy's step).
        params = [p for n, p in self.policy.named_parameters() if p.requires_grad and not n.startswith("value_head.")]
        groups = [{"params": params, "lr": cfg.optim.lr}]
        self.warmups = [cfg.optim.warmup_steps]
        if self.policy.value_head is not None:
            groups.append(
                {
                    "params": list(self.policy.value_head.parameters()),
                    "lr": cfg.optim.critic_lr if cfg.optim.critic_lr is not None else 10 * cfg.optim.lr,
                }
            )
            self.warmups.append(
                cfg.optim.critic_warmup_steps if cfg.optim.critic_warmup_steps is not None else cfg.optim.warmup_steps
            )
        self.base_lrs = [g["lr"] for g in groups]
        self.param_groups = [g["params"] for g in groups]
        self.optimizer = self._new_optimizer()
        self.sampler = self._sampler(self.stage)
        self.resumed = ckpt is not None
        if ckpt is not None:
            load_trainable(self.policy, ckpt / "trainable.pt")
            if start > self.stage.start or self.stage.index == 0:
                self.optimizer.load_state_dict(
                    torch.load(ckpt / "optimizer.pt", map_location=self.device, weights_only=True)
                )
                self.sampler.load_state_dict(state["sampler"])
            # else: the checkpoint is the previous stage's last step, and this stage starts with a fresh optimizer and sampler
            self._truncate_after(start)
            w.log(f"resumed from {ckpt}")
        if len(self.stages) > 1 or self.stage.hops_mix:
            w.log(
                describe(self.stage, len(self.stages), self._per_step())
                + ("" if start == self.stage.start else f" (resumed at step {start})")
            )
        self.trainable_params = [p for g in groups for p in g["params"]]
        n_params = sum(p.numel() for p in self.policy.parameters())
        n_train = sum(p.numel() for p in self.trainable_params)
        precision = self.numerics.describe()
        self._started(start, ckpt is not None, n_params, n_train, precision)
        if cfg.model.dtype == "bf16" and self.device.type == "cpu" and cpu_has_native_bf16() is False:
            w.warning(
                'model.dtype is bf16 but this CPU has no native bf16 arithmetic (no AVX512-BF16, AMX or arm64 BF16): torch converts to fp32 and back, and a step is several times slower than in fp32; set model.dtype to fp32 or bf16_where_native (docs/trainer.md, "Devices and precision")'
            )
        w.log(
            f"{cfg.model.kind} policy: {n_params:,} parameters ({n_train:,} trained) on {self.device}, {precision}, dropout {'on' if cfg.model.dropout else 'off'}; {len(self.train_set)} train / {len(self.eval_set)} eval examples"
        )
        return start

    def _numerics(self, recorded: dict[str, Any] | None) -> Numerics:
        """The run's numerics (numerics.py): `model.dtype`, or for `fastest` what the checkpoint recorded, else this
        machine's choice, measured on the run's own model and shapes; recorded in run.json."""
        cfg = self.cfg
        longest = max(len(p[1]) for p in self.train_prompts + self.eval_prompts)
        max_len = (
            self.policy.backbone.max_len if self.policy.kind == "tiny" else longest + cfg.rollout.max_response_length
        )
        shapes = ProbeShapes.of(
            cfg, longest, max_len, cfg.rollout.max_batch_tokens or auto_max_batch_tokens(self.policy, self.device, None)
        )
        numerics = resolve_numerics(
            cfg, self.device, self.policy, self.tok, shapes, recorded=recorded, log=self.writer.log
        )
        self.writer.annotate(numerics=numerics.record())
        return numerics

    def _new_optimizer(self) -> torch.optim.Optimizer:
        groups = [{"params": ps, "lr": lr} for ps, lr in zip(self.param_groups, self.base_lrs)]
        return precision.optimizer(groups, self.cfg.optim.weight_decay, self.device, fused=self.policy.kind == "hf")

    def _reference(self) -> Reference:
        """The KL reference: the current policy, frozen (in the compute dtype where that saves memory, precision.py)."""
        return Reference(self.policy, self._compute_dtype())

    def _sampler(self, stage: Stage) -> EpochSampler | MixSampler:
        """The batch sampler of a stage: its hops_mix, or one shuffled epoch after another (seeded by the run's seed,
        restarting with each stage, as a new run's would)."""
        mix = stage.hops_mix
        return (
            MixSampler([e.hops for e in self.train_set], {int(h): float(x) for h, x in mix.items()}, self.cfg.seed)
            if mix
            else EpochSampler(len(self.train_set), self.cfg.seed)
        )

    def _per_step(self) -> dict[int, int] | None:
        """The questions a step takes of each number of hops under the stage's mix (None without one)."""
        return self.sampler.counts(self.cfg.rollout.batch_size) if isinstance(self.sampler, MixSampler) else None

    def _begin_stage(self, stage: Stage) -> None:
        """The next stage of a curriculum starts as a new run from the current policy would (curriculum.py)."""
        self.stage = stage
        if self.reference is not None:
            self.reference = self._reference()
        self.optimizer = self._new_optimizer()
        self.sampler = self._sampler(stage)
        self.writer.log(
            describe(stage, len(self.stages), self._per_step())
            + f": the KL reference is now the step-{stage.start} policy; the optimizer, LR schedule, sampler and seeds restart"
        )

    def warm_start(self) -> WarmStart:
        """What the supervised warm start (warmup.py) trains and reads of this run."""
        return WarmStart(
            self.cfg,
            self.policy,
            self.tok,
            self.device,
            self.train_set,
            self.train_prompts,
            self.env,
            self._ctx,
            self.numerics.dtype,
            self.writer,
            self.total,
            lambda: self.stop_requested,
        )

    def warmup_applies(self) -> bool:
        """A supervised warm start runs at step 0 of a new run from scratch (not with model.init)."""
        return bool(self.cfg.train.supervised_warmup.steps) and not self.cfg.model.init

    # -- phases ---------------------------------------------------------------------------------------------------
    def on_policy(self, batch_size: int) -> bool:
        """One mini-batch per epoch: the first epoch's forward runs before any optimizer step, on the policy that
        sampled, so its own forward (detached) gives the old log-probs (veRL's shortcut for one epoch; the first epoch's
        ratio is exactly 1 and the separate pass is saved). Later epochs read them from the batch, as from the pass."""
        return batch_size <= self.cfg.optim.mini_batch_size

    @torch.no_grad()
    def _old_logprobs(self, batch: SequenceBatch) -> dict[str, float]:
        """Old log-probs and entropies (on the loss tokens), values (PPO, every window position) and reference
        log-probs, over the response window, in micro-batches, for the batch's trained rows (all of them unless
        `algorithm.skip_zero_std_groups`; the others stay 0 and their records null). On an on-policy step the
        policy's pass runs only when something before the update needs it (values for GAE, old log-probs for a KL
        reward); the update fills in the rest from its own forward."""
        B, R = batch.size, batch.window
        temp = self.cfg.rollout.temperature or 1.0
        old = torch.zeros(B, R)
        ent = torch.zeros(B, R)
        vals = torch.zeros(B, R) if self.policy.value_head is not None else None
        ref = torch.zeros(B, R) if self.reference is not None else None
        timing = {"old_log_prob": 0.0, "ref": 0.0}
        policy_pass = not self.on_policy(B) or vals is not None or (self.cfg.algorithm.kl_in_reward and ref is not None)
        self.policy.eval()
        for idx in by_length(batch, batch.trained_rows(), self.micro_batch_size):
            mb = batch.select(idx).to(self.device)
            r = mb.window
            where = mb.loss_mask.bool()
            if policy_pass:
                t0 = time.perf_counter()
                with self._ctx():
                    s = window_stats(self.policy, mb, where, temp, want_entropy=True, want_values=vals is not None)
                old[idx, R - r :] = s.logprob.cpu()
                ent[idx, R - r :] = s.entropy.cpu()
                if vals is not None:
                    vals[idx, R - r :] = s.values.float().cpu()
                timing["old_log_prob"] += time.perf_counter() - t0
            if ref is not None:
                t0 = time.perf_counter()
                with self._ctx():
                    ref[idx, R - r :] = window_stats(self.reference, mb, where, temp).logprob.cpu()
                timing["ref"] += time.perf_counter() - t0
        batch.old_logprob, batch.ref_logprob, batch.old_values = old, ref, vals
        self._entropy_window = ent
        return timing

    def _advantages(self, batch: SequenceBatch, trajs: list[Trajectory]) -> dict[str, float]:
        a = self.cfg.algorithm
        scores = torch.tensor([t.reward or 0.0 for t in trajs], dtype=torch.float32)
        kl = None
        m: dict[str, float] = {}
        if a.kl_in_reward and batch.ref_logprob is not None:
            kl = kl_penalty(batch.old_logprob, batch.ref_logprob, a.kl_estimator) * batch.loss_mask
            m["actor/reward_kl_penalty"] = float(masked_mean(kl, batch.loss_mask))
        rewards = token_rewards(scores, batch.last_generated, batch.window, kl, a.kl_coef)
        batch.token_rewards = rewards
        mask = batch.adv_mask
        if a.name == "grpo":
            seq_scores = rewards.sum(-1)
            adv = grpo_outcome_advantage(seq_scores, [t.group for t in trajs], a.norm_adv_by_std)
            batch.advantages = adv[:, None] * mask
            batch.returns = batch.advantages.clone()
        elif a.name == "reinforce++":
            batch.advantages, batch.returns = reinforce_plus_plus_advantage(
                rewards, mask, a.gamma, whiten_mask=batch.loss_mask
            )
        else:
            batch.advantages, batch.returns = gae_advantage(
                rewards, batch.old_values, mask, a.gamma, a.lam, whiten_mask=batch.loss_mask
            )
        return m

    def _passes_and_advantages(
        self, batch: SequenceBatch, trajs: list[Trajectory], step: int, skip: bool | None = None
    ) -> tuple[dict[str, float], dict[str, float]]:
        """The log-prob passes and the advantages, in the order the step needs: the passes first (GAE's values and a
        KL reward need them), unless `skip` (default: `algorithm.skip_zero_std_groups`) — then the advantages come
        first (GRPO's need no log-probs; the config refuses a KL in the reward), so the rows they leave at 0 skip the
        passes too. Returns the advantage metrics and the timings."""
        skip = self.cfg.algorithm.skip_zero_std_groups if skip is None else skip
        timing: dict[str, float] = {}
        if not skip:
            timing.update(self._fitting(step, "the log-prob passes", self._old_logprobs, batch))
        t0 = time.perf_counter()
        m = self._advantages(batch, trajs)
        if skip:
            self._skip_zero_advantage(batch, step)
        timing["adv"] = time.perf_counter() - t0
        if skip:
            timing.update(self._fitting(step, "the log-prob passes", self._old_logprobs, batch))
        return m, timing

    def _skip_zero_advantage(self, batch: SequenceBatch, step: int) -> None:
        """`algorithm.skip_zero_std_groups`: the rows whose advantages are 0 on every token (GRPO: a group whose
        rewards are all equal) add exactly 0 to the surrogate's gradient; all they add is their KL (and entropy)
        term. Keep every row with a signal and k of the F flat rows — k = max(`rollout.n`, ⌈`zero_std_keep` · F⌉),
        at most F —, drawn uniformly (seeded by the step), weighted F / k in those terms: each flat row is kept with
        probability k / F, so the weighted terms are an unbiased estimate of the whole batch's, and every step keeps
        an anchor to the reference even when no group has a signal. The rest are marked untrained: no log-prob pass,
        no forward or backward."""
        signal = batch.advantages.ne(0).any(-1)
        flat = (~signal).nonzero().flatten()
        k = min(len(flat), max(self.cfg.rollout.n, math.ceil(self.cfg.algorithm.zero_std_keep * len(flat))))
        gen = torch.Generator().manual_seed(self.cfg.seed * 104_729 + self.stage.local(step))
        pick = flat[torch.randperm(len(flat), generator=gen)[:k]]
        batch.trained = signal.clone()
        batch.trained[pick] = True
        batch.reg_weight = torch.ones(batch.size)
        if k:
            batch.reg_weight[pick] = len(flat) / k

    def _update(self, batch: SequenceBatch, step: int) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches of the whole batch, each an optimizer step over its micro-batches.
        Rows the batch marks untrained (skip_zero_std_groups) are left out of the micro-batches; every term keeps the
        whole mini-batch's denominators (the surrogate loses nothing, the KL and entropy terms are weighted by
        `batch.reg_weight`). A mini-batch with no trained row is no optimizer step."""
        cfg, a, o = self.cfg, self.cfg.algorithm, self.cfg.optim
        for g, base, warmup in zip(self.optimizer.param_groups, self.base_lrs, self.warmups):
            g["lr"] = base * lr_multiplier(
                self.stage.local(step), self.stage.steps, warmup, o.lr_schedule, o.min_lr_ratio
            )
        temp = cfg.rollout.temperature or 1.0
        on_policy = self.on_policy(batch.size)
        R = batch.window
        gen = torch.Generator().manual_seed(cfg.seed * 7_919 + self.stage.local(step))
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}

        def add(key: str, value: float, weight: float = 1.0) -> None:
            sums[key] = sums.get(key, 0.0) + value * weight
            counts[key] = counts.get(key, 0.0) + weight

        def accumulate(mini: list[int], epoch: int, agg: Aggregation, vagg: Aggregation) -> tuple[int, list[Any]]:
            """The mini-batch's gradients, accumulated over its micro-batches from zero (the loss's denominators are
            the mini-batch's, so the micro-batch size changes only the memory); its tokens and (stat, value, weight)."""
            self.optimizer.zero_grad(set_to_none=True)
            n, seen = 0, []
            for micro in by_length(batch, mini, self.micro_batch_size):
                mb = batch.select(micro).to(self.device)
                n += int(mb.attention_mask.sum())
                # the entropy is the sampling policy's (the first epoch's) unless it is in the loss
                want_entropy = epoch == 0 or a.entropy_coef > 0
                with self._ctx():
                    st = window_stats(
                        self.policy,
                        mb,
                        mb.loss_mask.bool(),
                        temp,
                        want_entropy=want_entropy,
                        want_values=self.policy.value_head is not None,
                        entropy_grad=a.entropy_coef > 0,
                    )
                    if on_policy and epoch == 0:  # π_old = π_θ before this step, the first: ρ = 1 exactly
                        mb.old_logprob = st.logprob.detach()
                        r = mb.window
                        batch.old_logprob[micro, R - r :] = mb.old_logprob.cpu()
                        self._entropy_window[micro, R - r :] = st.entropy.detach().cpu()
                    loss, stats = objective(st.logprob, st.entropy, st.values, mb, a, agg, vagg)
                w_tokens, w_values = float(mb.loss_mask.sum()), float(mb.adv_mask.sum())
                for k, v in stats.items():
                    # losses are micro-batch shares of the mini-batch loss (summed); ratios are token-weighted
                    seen.append((k, v, 1.0 if k in LOSS_KEYS else w_values if k == "critic/vf_clipfrac" else w_tokens))
                loss.backward()
            return n, seen

        grad_norms: dict[str, list[float]] = {"actor/grad_norm": [], "critic/grad_norm": []}
        skipped = 0
        empty = 0  # mini-batches with no trained row
        tokens = 0
        self.policy.train()
        for epoch in range(o.ppo_epochs):
            order = torch.randperm(batch.size, generator=gen).tolist()
            for mini in chunks(order, o.mini_batch_size):
                agg = Aggregation.of(a.loss_agg_mode, batch.loss_mask[mini], cfg.rollout.max_response_length)
                vagg = Aggregation.of(a.loss_agg_mode, batch.adv_mask[mini], cfg.rollout.max_response_length)
                if batch.trained is not None:
                    mini = [i for i in mini if batch.trained[i]]
                    if not mini:
                        skipped += 1
                        empty += 1
                        continue
                # its gradients (again with half the micro-batch when the device runs out of memory: the same update)
                fed, seen = self._fitting(step, "the update", accumulate, mini, epoch, agg, vagg)
                tokens += fed
                for k, v, weight in seen:
                    add(k, v, weight)
                clip = o.grad_clip if o.grad_clip > 0 else float("inf")
                norms = [clip_gradients(g["params"], clip) for g in self.optimizer.param_groups]
                for key, norm in zip(grad_norms, norms):
                    grad_norms[key].append(norm)
                if not all(math.isfinite(n) for n in norms):
                    self.writer.warning(
                        f"step {step}: a gradient norm is not finite ({', '.join(f'{n:g}' for n in norms)}); this optimizer step was skipped"
                        f" — {nonfinite_gradients(self.policy, seen)}"
                    )
                    skipped += 1
                elif all(n == 0.0 for n in norms):
                    # No learning signal (e.g. every GRPO group's rewards equal, no KL/entropy term): no update.
                    # Stepping anyway would let Adam's momentum keep moving the weights on zero gradients.
                    skipped += 1
                else:
                    self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        self.policy.eval()
        n_minis = o.ppo_epochs * math.ceil(batch.size / o.mini_batch_size) - empty
        out = {}
        for k, v in sums.items():
            # losses are summed over micro-batches into one value per mini-batch, then averaged over mini-batches
            out[k] = v / max(n_minis, 1) if k in LOSS_KEYS else v / max(counts[k], 1e-9)
        for key, norms in grad_norms.items():
            if norms:
                out[key] = mean(norms)
        out["actor/skipped_updates"] = float(skipped)
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        if self.reference is not None:
            out["actor/kl_coef"] = a.kl_coef
        out["_tokens"] = tokens
        return out

    def _fitting(self, step: int, what: str, run: Any, *args: Any) -> Any:
        """`run(*args)` — the log-prob passes, or one mini-batch's gradients: each starts from nothing and writes all
        it makes — again with half the micro-batch each time the device runs out of memory
        (_smaller_micro_batch), until it fits or one sequence does not. Under SDPA without cuDNN's attention, as
        generation runs: cuDNN's builds a graph for every new shape, and each micro-batch of rollouts is padded to its
        own longest sequence (an H200, 2026-11-30: the update 4.1× faster without it at 0.5B, 4.3× at 3B, the
        reference pass 7–9×); the backward, and the layers checkpointing recomputes in it, run inside too."""
        while True:
            try:
                with without_cudnn_attention():
                    return run(*args)
            except torch.OutOfMemoryError as e:
                failed = out_of_memory_message(e)
            # outside the handler: its traceback, and the tensors its frames held, are gone
            self._smaller_micro_batch(step, what, failed)

    def _smaller_micro_batch(self, step: int, what: str, error: str, cannot: str | None = None) -> None:
        """Run's, from zeroed gradients: the mini-batch's micro-batches so far are trained again."""
        self.optimizer.zero_grad(set_to_none=True)
        super()._smaller_micro_batch(step, what, error, cannot)

    # -- records --------------------------------------------------------------------------------------------------
    def _record_step(self, trajs: list[Trajectory], step: int, batch: SequenceBatch) -> dict[str, float]:
        """A training step's rollouts to the recorder: the in-run checks here, vectorised over the batch; the records
        and columns (record/batch.py) built on the writer thread. Returns the step's record/* metrics."""
        if self.recorder is None:
            return {}
        stats: dict[str, float] = {}
        flags = batch_flags(batch, self._entropy_window, bool(self.cfg.algorithm.loss_masking), stats)
        build = batch_data(trajs, batch, self._entropy_window, run_id=self.writer.run["id"], step=step, split="train")
        return self._record(trajs, step, "train", flags, build, stats=stats)

    # -- the loop -------------------------------------------------------------------------------------------------
    def train(self) -> int:
        """Setup, then steps until train.steps or a stop; returns the last completed step."""
        w = self.writer
        start = self.setup()
        if start == 0:
            m0: dict[str, float] = {}
            if self.warmup_applies() and not self.resumed:
                m0.update(run_warmup(self.warm_start(), w.log))
                if self.reference is not None:
                    self.reference = self._reference()  # KL towards the warm-started policy, not the random init
                if not self.stop_requested:
                    self._checkpoint(0)
                else:
                    # A part of a warm start is not checkpointed: a resume takes step-000000 for a whole one (its
                    # policy is the KL reference), so it starts the warm start again from its beginning.
                    done, wanted = int(m0["warmup/steps"]), self.cfg.train.supervised_warmup.steps
                    w.warning(
                        f"stopped during the supervised warm start, at step {done}/{wanted}: it was not saved (no checkpoint); a resume starts it again from its beginning",
                        cause="warmup-not-saved",
                    )
                    m0 = {}  # nor are its metrics: the warm start a resume runs writes step 0's
            if self.eval_set and not self.stop_requested:
                m0.update(self.evaluate(0))
            if m0:
                w.metrics(0, m0)
        self._stand_ins()
        step = start
        while step < self.total and not self.stop_requested:
            step += 1
            m = self.train_step(step)
            cfg = self.cfg.train
            last = step == self.total
            stage_ends = step == self.stage.end  # evaluated and checkpointed, as the last step of a run would be
            if self.eval_set and ((cfg.eval_every and step % cfg.eval_every == 0) or stage_ends):
                m.update(self.evaluate(step))
            w.metrics(step, m)
            w.event("metrics", step=step, metrics={k: m[k] for k in SUMMARY_KEYS if k in m})
            if self.recorder is not None:
                w.run["record"] = self.recorder.summary()
            w.set_step(step)
            if last or self.stop_requested or stage_ends or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                self._checkpoint(step)
            if stage_ends and not last and not self.stop_requested:
                self._begin_stage(stage_of(self.stages, step + 1))
        if step == self.total and self.total > 0:
            self._export()
        return step

    def train_step(self, step: int) -> dict[str, float]:
        cfg, w = self.cfg, self.writer
        local = self.stage.local(step)  # seeds are keyed by the step within the curriculum's stage (curriculum.py)
        torch.manual_seed(cfg.seed * 1_000_003 + local)
        t_step = time.perf_counter()
        timing: dict[str, float] = {}
        idx = self.sampler.next_batch(cfg.rollout.batch_size)
        examples = [self.train_set[i] for i in idx]
        prompts = [self.train_prompts[i] for i in idx]

        w.progress(step, self.total, "rollout")
        t0 = time.perf_counter()
        self.policy.eval()
        self.env.take_stats()  # the step's env-server latencies start here (an evaluation's calls are not the step's)
        retrieve0 = self.env.seconds["retrieve"]
        trajs = self._rollouts(examples, prompts, cfg.rollout.n, local, greedy=False)
        timing["rollout"] = time.perf_counter() - t0
        timing["retrieve"] = self.env.seconds["retrieve"] - retrieve0
        if cfg.test and cfg.test.crash_at_step == step:
            raise RuntimeError(f"test.crash_at_step: a crash at step {step}, on purpose")

        w.progress(step, self.total, "reward")
        t0 = time.perf_counter()
        failed = self._score(trajs)
        timing["reward"] = time.perf_counter() - t0
        env_stats = self.env.take_stats()  # /retrieve and /reward latencies (the server's and the round trip), timeouts

        w.progress(step, self.total, "update")
        a = cfg.algorithm
        batch = make_batch(trajs, self.tok.pad_id, a.loss_masking, a.mask_advantages)
        m, t = self._passes_and_advantages(batch, trajs, step)
        timing.update(t)
        t0 = time.perf_counter()
        upd = self._update(batch, step)
        timing["update"] = time.perf_counter() - t0
        update_tokens = upd.pop("_tokens")
        m.update(upd)

        scores = torch.tensor([t.reward or 0.0 for t in trajs])
        groups = [t.group for t in trajs]
        am = batch.adv_mask.bool()
        m.update(
            {
                "critic/score/mean": float(scores.mean()),
                "critic/score/max": float(scores.max()),
                "critic/score/min": float(scores.min()),
                "critic/rewards/mean": float(batch.token_rewards.sum(-1).mean()),
                "critic/advantages/mean": float(batch.advantages[am].mean()) if am.any() else 0.0,
                "critic/advantages/max": float(batch.advantages[am].max()) if am.any() else 0.0,
                "critic/advantages/min": float(batch.advantages[am].min()) if am.any() else 0.0,
                "reward/frac_zero_std_groups": zero_std_group_fraction(scores, groups),
                "reward/errors": float(failed),
                "mask/loss_tokens": float(batch.loss_mask.sum()) / len(trajs),
                "mask/loss_fraction": float(batch.loss_mask.sum() / batch.response_mask.sum().clamp(min=1)),
            }
        )
        if a.name == "ppo":
            v, ret = batch.old_values[am], batch.returns[am]
            m["critic/values/mean"] = float(v.mean())
            m["critic/returns/mean"] = float(ret.mean())
            m["critic/vf_explained_var"] = float(1 - (ret - v).var() / (ret.var() + 1e-5))
        m.update(rollout_metrics(trajs))
        m.update(env_stats)
        gen_mask = batch.generated_mask.bool() & batch.loss_mask.bool()  # old log-probs exist on the loss tokens only
        if batch.trained is not None:  # … of the trained rows
            gen_mask &= batch.trained[:, None]
            m["actor/trained_fraction"] = float(batch.trained.float().mean())
        if cfg.rollout.top_p >= 1.0 and gen_mask.any():
            m["rollout/logprob_diff_max"] = float((batch.rollout_logprob - batch.old_logprob)[gen_mask].abs().max())
        generated = sum(t.roles.count("generated") for t in trajs)
        timing["step"] = time.perf_counter() - t_step
        for k, v in timing.items():
            m[f"timing_s/{k}"] = v
        m["perf/rollout_tokens_per_s"] = generated / max(timing["rollout"], 1e-9)
        m["perf/update_tokens_per_s"] = update_tokens / max(timing["update"], 1e-9)
        m["perf/throughput"] = float(batch.attention_mask.sum()) / max(timing["step"], 1e-9)
        m.update(self._record_step(trajs, step, batch))
        if cfg.test and cfg.test.step_delay_s:
            time.sleep(cfg.test.step_delay_s)
        return m

    def _checkpoint(self, step: int) -> None:
        if self.recorder is not None:
            # The recorded rollouts up to here are written first: a resume from this checkpoint never lacks one of
            # its steps (a full disk fails the run here, before the checkpoint, and the resume records the step again).
            self.recorder.flush()
        extra: dict[str, Any] = {"numerics": self.numerics.record()} if self.numerics is not None else {}
        if self._out_of_memory_sizes:
            extra["out_of_memory"] = self._out_of_memory_sizes
        path = save_checkpoint(
            self.run_dir, step, self.policy, self.tok, self.optimizer, {"sampler": self.sampler.state_dict(), **extra}
        )
        self.writer.event("checkpoint", step=step, path=str(path))
        # the last train.checkpoint_keep; never the warm start's or a stage's last step (a resume reads them)
        for gone in prune_checkpoints(self.run_dir, checkpoint_keep(self.cfg), {0} | {s.end for s in self.stages}):
            self.writer.log(f"deleted {gone} (train.checkpoint_keep)")

    def _export(self) -> None:
        """A finished run's Hugging Face policy as a model directory (`model/`, checkpoint.export_model)."""
        if self.policy.kind != "hf":
            return
        self.optimizer.state.clear()  # the run is over: the moments' memory is the export's
        path = export_model(self.run_dir / "model", self.policy, self.tok, self.cfg.model.path)
        self.writer.log(f"wrote the trained model (Hugging Face format) to {path}")


def lr_multiplier(step: int, total: int, warmup: int, schedule: str, min_ratio: float) -> float:
    """veRL's schedule: linear warm-up over `warmup` steps, then constant, or a cosine from 1 down to `min_ratio` at
    the last step (`warmup_style: cosine`, `min_lr_ratio`)."""
    if warmup and step <= warmup:
        return step / warmup
    if schedule != "cosine" or total <= warmup:
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "critic/vf_loss")


def clip_gradients(params: list[torch.Tensor], max_norm: float) -> float:
    """Global-norm clipping (Pascanu et al., 2013): torch's clip_grad_norm_ in its two halves (torch ≥ 2.6, the same
    arithmetic), so that a non-finite norm leaves the gradients as they were — the whole clip would multiply each of
    them by NaN and leave nothing for the warning to name; that optimizer step is skipped anyway. The global norm."""
    u = torch.nn.utils
    if not hasattr(u, "get_total_norm"):  # torch < 2.6: the warning then finds every gradient NaN
        return float(u.clip_grad_norm_(params, max_norm))
    total = u.get_total_norm([p.grad for p in params if p.grad is not None])
    norm = float(total)
    if math.isfinite(norm):
        u.clip_grads_with_norm_(params, max_norm, total)
    return norm


def nonfinite_gradients(model: torch.nn.Module, seen: Sequence[tuple[str, float, float]], first: int = 3) -> str:
    """Where a non-finite gradient norm came from, for its warning: how many of the trained tensors' gradients hold a
    NaN or an infinity and the first few by name, and whether a micro-batch's loss was already not finite (the
    forward overflowed: a weight, an activation or a log-prob) or every loss was finite (the backward did)."""
    bad, total = [], 0
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        total += 1
        if not bool(torch.isfinite(p.grad).all()):
            bad.append(name)
    losses = [v for k, v, _ in seen if k in LOSS_KEYS]
    where = (
        "a micro-batch's loss was already not finite (the forward overflowed)"
        if not all(math.isfinite(v) for v in losses)
        else "every loss was finite (the backward overflowed)"
    )
    names = ", ".join(bad[:first]) + (f" and {len(bad) - first} more" if len(bad) > first else "")
    return f"non-finite gradients in {len(bad)} of {total} tensors ({names}); {where}"
