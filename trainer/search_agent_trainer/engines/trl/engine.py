"""engine "trl": TRL's GRPOTrainer trains; everything around it is ours, the same as the builtin engine's.

- The rollout is TRL's `rollout_func`: our multi-turn protocol (rollout.py `run_rollouts`, through run.py's
  `Run._rollouts`, as the builtin engine's, so the two engines share every setting) with our generator (generation.py) over the model
  TRL trains, or TRL's colocated vLLM (`trl.use_vllm`, vllm.py). It returns the token ids as generated (prompt and
  response, never re-tokenised), the sampling log-probs (0 on environment tokens), `env_mask` (1 on generated tokens,
  0 on retrieved and feedback ones; all 1 with `algorithm.loss_masking: false`), and extra fields TRL passes on to
  reward functions: `searches`, `turns`, `finish`, `retrieval`.
- The reward is one TRL reward function that scores the step's trajectories with our `/reward` (the user's module).
- The hook: `_generate_and_score_completions` keeps the tensors TRL trains on (ids, masks, advantages, old,
  sampling and reference log-probs), `_get_per_token_logps_and_entropies` the log-probs of the update's own forward
  (the old ones when TRL skips the old-log-prob pass: on-policy, ρ = 1). The records are made from those tensors.
- At the end of each of our steps (a TrainerCallback) every process's records go to rank 0, which writes
  `rollouts/step-NNNNNN.jsonl`, then `metrics.jsonl` in our/veRL names with TRL's own logs kept under `trl/…`.
- Checkpoints are TRL's (Trainer's) own, written as `checkpoints/step-NNNNNN/`; `--resume` continues from the last.
- SIGTERM (SIGINT; SIGHUP = host-gone) finishes the step; the processes agree on it, checkpoint and stop.
- Held-out evaluation is ours, greedy, before the first update and every `train.eval_every` steps, split over the
  processes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ...advantages import zero_std_group_fraction
from ...config import Section
from ...data import Example
from ...generation import TurnGenerator, out_of_memory_message
from ...metrics import SUMMARY_KEYS, mean, rollout_metrics
from ...policy import build_policy, compute_dtype
from ...record.names import TRL_NAMES
from ...recorder import (
    RecordSettings,
    StepData,
    StepJob,
    columns_from_window,
    concat_data,
    expected_window,
    role_codes_of,
    rollout_flags,
    select,
)
from ...rollout import Trajectory, make_dialect
from ...run import Run
from ...run_writer import failure_message, rollout_record
from ...versions import package_version
from . import options
from .launch import launched, write_rank_error

# a checkpoint's file of ours beside TRL's: the sizes the run ran out of device memory down to
STATE_FILE = "search_agent_state.json"

# How TRL's _compute_loss averages a micro-batch (its loss_type): a piece of it weighs its share of the rows, of the
# loss tokens, or nothing (a sum over a denominator of the whole generation batch's tokens).
ROWS_MEAN = {"grpo", "sapo", "dr_grpo", "luspo"}
TOKENS_MEAN = {"bnpo"}
GLOBAL_SUM = {"dapo", "cispo", "vespo"}


class FollowerWriter:
    """The run writer of the processes other than rank 0: rank 0 writes the run directory and the events; the others
    only log, to stderr."""

    def __init__(self, run_dir: Path, rank: int):
        self.dir = run_dir
        self.rank = rank
        self.run: dict[str, Any] = {"id": run_dir.name, "step": 0}

    def log(self, message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} [rank {self.rank}] {message}", file=sys.stderr, flush=True)

    def warning(self, message: str, **_fields: Any) -> None:
        self.log(f"warning: {message}")

    def event(self, *_a: Any, **_k: Any) -> None:
        pass

    progress = metrics = set_step = finish = truncate_after = event

    def rollouts(self, *_a: Any, **_k: Any) -> None:
        return None

    def fail(self, e: BaseException, tb: str, close_recorder: Callable[[], None], invalid: bool = False) -> None:
        """This process failed: its traceback to stderr, and its error where the launch's supervisor reads it
        (launch.py: rank 0, which waited for this process in a collective, fails after it with another error).
        `invalid` (RunWriter.fail's: a config refused before set-up): the message alone."""
        self.log(tb)
        try:
            write_rank_error(self.dir, self.rank, str(e) if invalid else failure_message(e), tb)
        except OSError as e2:
            self.log(f"could not write this process's error for the run: {e2}")
        try:
            close_recorder()
        except Exception as e2:  # noqa: BLE001 - the error being reported is the one above
            self.log(f"could not close the recorder: {e2}")

    def close(self) -> None:
        pass


class TRLEngine(Run):
    """The run every engine shares (run.py: lifecycle, data, prompts, rollouts, scoring, evaluation) with TRL training."""

    def __init__(
        self, cfg: Section, run_dir: str | os.PathLike[str], env_url: str, resume: bool = False, stdout: Any = None
    ):
        self.rank = int(os.environ.get("RANK", "0"))
        super().__init__(cfg, run_dir, env_url, resume=resume, stdout=stdout)
        self.trl: Any = None
        self.batch: dict[str, Any] = {}  # this process's share of the current step (see _keep)
        self.pending: tuple[int, dict[str, float]] | None = None  # a step's metrics, waiting for TRL's logs
        self.step = 0

    def versions(self) -> dict[str, str | None]:
        return {
            **super().versions(),
            "trl": package_version("trl"),
            "accelerate": package_version("accelerate"),
            "datasets": package_version("datasets"),
            "vllm": package_version("vllm") if (self.cfg.trl or {}).get("use_vllm") else None,
        }

    def _run_writer(self, stdout: Any) -> Any:
        return super()._run_writer(stdout) if self.rank == 0 else FollowerWriter(Path(self.run_dir), self.rank)

    def _parent_to_watch(self) -> int | None:
        return os.getppid() if launched() else None  # the launcher (launch.py)

    # -- setup ----------------------------------------------------------------------------------------------------
    def setup(self) -> int:
        from datasets import Dataset
        from transformers import PrinterCallback, ProgressCallback
        from trl import GRPOConfig

        cfg, w = self.cfg, self.writer
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.plan, problems = options.plan(cfg, world)
        if problems:  # checked before the run started (engines/trl/__init__.py); a launch's world may differ
            raise ValueError("; ".join(problems))
        want = cfg.model.device
        cuda = torch.cuda.is_available() and want != "cpu"
        if want == "cuda" and not cuda:
            raise RuntimeError(
                'model.device is "cuda" but torch sees no CUDA device (torch.cuda.is_available() is False)'
            )
        bf16 = compute_dtype(cfg, torch.device("cuda" if cuda else "cpu")) is not None
        try:
            self.args = GRPOConfig(**options.grpo_kwargs(cfg, self.run_dir, self.plan, bf16=bf16, cpu=not cuda))
        except (TypeError, ValueError) as e:
            raise ValueError(f"TRL's GRPOConfig refused the options this config maps to: {e}") from None
        self.device = self.args.device
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        self._load_data()
        ckpt = self._resume_checkpoint()
        self.policy, self.tok = self._build_model()
        self.reference = None  # TRL's (a reference model, or the starting adapter under LoRA)
        self.dialect = make_dialect(cfg.rollout.dialect, self.tok, cfg.rollout.search_tool, cfg.rollout.strict_actions)
        self.stops = self.dialect.stops(self.tok)
        self._encode_prompts()
        dataset = Dataset.from_dict(
            {"prompt": [p[0] for p in self.train_prompts], "sas_example": list(range(len(self.train_set)))}
        )

        def env_reward(
            prompts: list[Any], completions: list[Any], completion_ids: list[Any], **_kw: Any
        ) -> list[float]:
            """The user's reward module, through the env server's /reward."""
            return self._reward()

        # ours name the reference's dtype: TRL's warning that they are ignored is the policy's
        if self.args.model_init_kwargs:
            import logging

            logging.getLogger("trl.trainer.grpo_trainer").addFilter(lambda r: "model_init_kwargs" not in r.getMessage())
        self.trl = SearchAgentGRPOTrainer(
            engine=self,
            model=self.policy.backbone,
            reward_funcs=[env_reward],
            args=self.args,
            train_dataset=dataset,
            processing_class=self.tok.impl,
            rollout_func=self._rollout_func,
            callbacks=[StepCallback(self)],
        )
        for cb in (PrinterCallback, ProgressCallback):  # they print TRL's logs on stdout, our events' channel
            self.trl.remove_callback(cb)
        from ...generation import auto_max_batch_tokens

        # The generation's KV budget from the memory free now: TRL has built the reference (and put it on the device)
        # and vLLM; AdamW's moments, made at the first optimizer step, are set aside by auto_max_batch_tokens.
        self.max_batch_tokens = cfg.rollout.max_batch_tokens or auto_max_batch_tokens(
            self.policy, self.device, compute_dtype(cfg, self.device)
        )
        # the rows one forward of the log-prob passes and the update takes: TRL's micro-batch, halved for the rest of
        # the run when either runs out of device memory (SearchAgentGRPOTrainer); a checkpoint keeps both sizes
        self.micro_batch_size = self.plan.micro
        self.resumed = ckpt is not None
        start = 0
        self.checkpoint = ckpt
        if ckpt is not None:
            start = (
                int(json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])
                // self.plan.trl_steps
            )
            self._truncate_after(start)
            w.log(f"resuming from {ckpt}")
            self._resume_sizes(self._kept_sizes(ckpt))
        n_params = sum(p.numel() for p in self.policy.parameters())
        n_train = sum(p.numel() for p in self.policy.parameters() if p.requires_grad)
        precision = "bf16 autocast, fp32 master weights" if bf16 else "fp32"
        ref = getattr(self.trl, "ref_model", None)
        self.settings = {
            "reference_dtype": str(next(ref.parameters()).dtype).removeprefix("torch.") if ref is not None else None,
            "rollout_logprob_kind": options.rollout_logprob_kind(cfg),
            "gradient_checkpointing": bool(self.args.gradient_checkpointing),
            **(
                {
                    "vllm_importance_sampling": self.args.vllm_importance_sampling_mode
                    if self.args.vllm_importance_sampling_correction
                    else "off",
                    "vllm_sleep_mode": bool(self.args.vllm_enable_sleep_mode),
                }
                if options.use_vllm(cfg)
                else {}
            ),
        }
        if self.rank == 0:
            w.run["trl"] = self.settings  # run.json (written with the next status change)
        self._started(
            start,
            ckpt is not None,
            n_params,
            n_train,
            precision,
            engine="trl",
            processes=world,
            trl_steps_per_step=self.plan.trl_steps,
            **self.settings,
        )
        w.log(
            f"trl engine: TRL {package_version('trl')}, {world} process(es), {n_params:,} parameters ({n_train:,} trained) on {self.device}, {precision}; one step = {self.plan.trl_steps} TRL optimizer step(s) of {self.plan.mini} sequences, micro-batches of {self.plan.micro} per process; {', '.join(f'{k} {v}' for k, v in self.settings.items())}"
        )
        return start

    def _build_model(self) -> tuple[Any, Any]:
        """The policy (hf_policy: LoRA, dropout, gradient checkpointing as configured) and tokenizer. A random model
        (`model.random_init`) is made once and written to <run>/initial-model, so TRL's reference model, every process
        and a resumed run start from the same weights."""
        cfg = self.cfg
        if not cfg.model.random_init:
            return build_policy(cfg, [], self.device)
        init = self.run_dir / "initial-model"
        with self.args.main_process_first(local=False, desc="the initial random model"):
            if self.rank == 0 and not (init / "config.json").exists():
                base = Section({**cfg, "model": {**cfg.model, "lora": None}})
                policy, tok = build_policy(base, [], self.device)  # drawn on the GPU: a 3B's CPU init takes ~a minute
                policy.backbone.save_pretrained(str(init))
                tok.impl.save_pretrained(str(init))
                del policy
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        loaded = Section({**cfg, "model": {**cfg.model, "path": str(init), "random_init": False}})
        return build_policy(loaded, [], self.device)

    # -- generation -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _generating(self) -> Iterator[None]:
        """The model TRL trains, ready to generate: unwrapped (DDP; DeepSpeed ZeRO-3's parameters gathered, FSDP's
        summoned), gradient checkpointing off, eval mode, no autograd."""
        from trl.models.utils import unwrap_model_for_generation

        t = self.trl
        with (
            unwrap_model_for_generation(
                t.model_wrapped,
                t.accelerator,
                gather_deepspeed3_params=t.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=t.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            t._dist.summon_full_params(t.model_wrapped, recurse=False),
        ):
            if model is not self.policy.backbone:
                raise RuntimeError(
                    f"the model TRL trains ({type(model).__name__}) is not the policy's backbone: the rollout would sample from another model"
                )
            was_training = model.training
            model.eval()
            try:
                yield
            finally:
                model.train(was_training)

    @contextlib.contextmanager
    def _vllm_awake(self) -> Iterator[None]:
        """TRL's colocated vLLM in sleep mode (`trl.vllm_enable_sleep_mode`), awake for the rollout's turns: TRL wakes
        its weights when it syncs them before calling the rollout (re-pushing them when a level-2 sleep discarded
        them), our turns call the LLM directly, so its KV cache is woken here, and both are put back to sleep after
        (level 2, as TRL's own generation does), leaving the memory to the update."""
        vg = getattr(self.trl, "vllm_generation", None) if getattr(self.trl, "use_vllm", False) else None
        if vg is None or not getattr(vg, "enable_sleep_mode", False):
            yield
            return
        if getattr(vg, "_llm_weights_sleeping", False):
            vg.sync_weights()
        vg.llm.wake_up(tags=["kv_cache"])
        try:
            yield
        finally:
            vg.llm.sleep(level=2)
            vg._llm_weights_sleeping = True

    def _generator(self, step: int, greedy: bool) -> TurnGenerator:
        if greedy or not (self.cfg.trl or {}).get("use_vllm"):
            return super()._generator(step, greedy)
        from .vllm import VLLMTurnGenerator

        r = self.cfg.rollout
        return VLLMTurnGenerator(
            self.trl.vllm_generation.llm,
            self.stops,
            r.temperature,
            r.top_p,
            seed=self.cfg.seed * 1_000_003 + step + 7_919 * self.rank,
        )

    def _settings(self, generator: Any, prompts: Any, n: int) -> Any:
        if hasattr(generator, "wave_size"):
            return super()._settings(generator, prompts, n)
        from ...rollout import RolloutSettings

        return RolloutSettings.of(self.cfg)  # vLLM schedules its own batches: one wave

    # -- TRL's hooks ----------------------------------------------------------------------------------------------
    def _rollout_func(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's rollout_func: this process's rows of the generation batch, one trajectory each. Row r of the whole
        batch (over every process) is sample r mod n of group r div n (TRL's RepeatSampler puts a prompt's n
        copies next to each other)."""
        cfg, w = self.cfg, self.writer
        step = trainer.state.global_step // self.plan.trl_steps + 1
        inputs = self.batch["inputs"]
        examples: list[Example] = [self.train_set[x["sas_example"]] for x in inputs]
        encoded = [self.train_prompts[x["sas_example"]] for x in inputs]
        if [p[0] for p in encoded] != list(prompts):
            raise RuntimeError("rollout_func: the prompts TRL passed are not the batch's rows")
        w.progress(step, self.total, "rollout")
        if cfg.test and cfg.test.crash_at_step == step and cfg.test.crash_rank in (None, self.rank):
            raise RuntimeError(f"test.crash_at_step: a crash at step {step}, on purpose")
        t0 = time.perf_counter()
        retrieve0 = self.env.seconds["retrieve"]
        with self._generating(), self._vllm_awake():
            trajs = self._rollouts(examples, encoded, 1, step, greedy=False)
        first = trainer.accelerator.process_index * len(inputs)
        for i, t in enumerate(trajs):
            t.group, t.sample = divmod(first + i, cfg.rollout.n)
        self.batch.update(
            step=step,
            trajs=trajs,
            timing={"rollout": time.perf_counter() - t0, "retrieve": self.env.seconds["retrieve"] - retrieve0},
        )
        masking = cfg.algorithm.loss_masking
        return {
            "prompt_ids": [list(t.prompt_ids) for t in trajs],
            "completion_ids": [list(t.ids) for t in trajs],
            "logprobs": [[0.0 if x is None else float(x) for x in t.sample_logprobs] for t in trajs],
            "env_mask": [[1 if role == "generated" or not masking else 0 for role in t.roles] for t in trajs],
            "searches": [t.searches for t in trajs],
            "turns": [t.turns for t in trajs],
            "finish": [t.finish for t in trajs],
            "retrieval": [t.retrieval for t in trajs],
        }

    def _reward(self) -> list[float]:
        trajs = self.batch["trajs"]
        self.writer.progress(self.batch["step"], self.total, "reward")
        t0 = time.perf_counter()
        self.batch["failed"] = self._score(trajs)
        self.batch["timing"]["reward"] = time.perf_counter() - t0
        return [float(t.reward or 0.0) for t in trajs]

    def _keep(self, inputs: list[dict[str, Any]], out: dict[str, Any]) -> None:
        """The tensors TRL will train this batch with (on the CPU), and a row index that follows TRL's shuffle."""
        keep = (
            "prompt_ids",
            "prompt_mask",
            "completion_ids",
            "completion_mask",
            "tool_mask",
            "advantages",
            "old_per_token_logps",
            "sampling_per_token_logps",
            "ref_per_token_logps",
        )
        self.batch["tensors"] = {k: out[k].detach().cpu() for k in keep if isinstance(out.get(k), torch.Tensor)}
        B, C = out["completion_ids"].shape
        self.batch["current"] = torch.zeros(B, C)
        self.batch["entropy"] = torch.zeros(B, C)
        self.batch["seen"] = torch.zeros(B, dtype=torch.bool)
        self.batch["ppo_kl"] = [0.0, 0.0]
        out["sas_row"] = torch.arange(B, device=out["completion_ids"].device)
        self.writer.progress(self.batch["step"], self.total, "update")

    def _forward_seen(
        self,
        rows: torch.Tensor,
        logps: torch.Tensor,
        entropies: torch.Tensor | None,
        mask: torch.Tensor,
        old: torch.Tensor | None,
    ) -> None:
        """The update's forward over `rows`: their first log-probs (and entropies) are kept; the policy KL against the
        sampling policy (veRL's ppo_kl, mean of old − current over the loss tokens) is summed."""
        rows = rows.cpu()
        b = self.batch
        first = ~b["seen"][rows]
        if first.any():
            r = rows[first]
            b["current"][r, : logps.shape[1]] = logps.detach().float().cpu()[first]
            if entropies is not None:
                b["entropy"][r, : entropies.shape[1]] = entropies.detach().float().cpu()[first]
            b["seen"][r] = True
        if old is not None:
            m = mask.float()
            b["ppo_kl"][0] += float(((old - logps.detach()) * m).sum())
            b["ppo_kl"][1] += float(m.sum())

    # -- the end of a step ----------------------------------------------------------------------------------------
    def _recorder(self) -> Any:
        return super()._recorder() if self.rank == 0 else None

    def _local_rows(self) -> dict[str, Any]:
        """This process's rows, vectorised over TRL's tensors (left-aligned completions): the in-run checks' flags
        (recorder.rollout_flags), the numbers of the records and where each is scored, and per-row sums for the
        step's metrics."""
        b = self.batch
        T = b["tensors"]
        cm = T["completion_mask"]
        loss = _loss_mask(T)
        C = int(cm.shape[1])
        trained = T.get("old_per_token_logps")
        # on-policy: TRL's old log-probs are the update's own
        trained = trained if trained is not None else b["current"]
        codes = [role_codes_of(t.roles) for t in b["trajs"]]
        generated = expected_window(codes, C, True, align="left")
        expected = expected_window(codes, C, bool(self.cfg.algorithm.loss_masking), align="left")
        adv = T["advantages"].float()[:, None].expand(-1, C)
        window = {
            "rollout_logprob": (T.get("sampling_per_token_logps"), generated),
            "logprob": (trained, loss),
            "ref_logprob": (T.get("ref_per_token_logps"), loss),
            "advantage": (adv, loss),
            "entropy": (b["entropy"], loss),
        }
        window = {k: (x.float(), m) if x is not None else None for k, (x, m) in window.items()}
        nan = torch.full_like(loss, math.nan, dtype=torch.float32)
        sampled = (
            torch.where(generated.bool(), window["rollout_logprob"][0], nan) if window["rollout_logprob"] else None
        )
        stats: dict[str, float] = {}
        flags = rollout_flags(
            valid=cm,
            loss_mask=loss,
            expected=expected,
            logprob=torch.where(loss.bool(), trained.float(), nan),
            rollout_logprob=sampled,
            numbers=[p for p in window.values() if p is not None],
            stats=stats,
            generated=generated,
        )
        gap = torch.zeros(len(codes))
        if sampled is not None:
            d = (trained.float() - sampled).abs()
            d = torch.where(loss.bool() & torch.isfinite(d), d, torch.zeros_like(d))
            gap = d.max(-1).values
        P = T["prompt_mask"].sum(-1)
        summary = {
            "advantage": T["advantages"].float().tolist(),
            "loss_tokens": loss.sum(-1).tolist(),
            "gap": gap.tolist(),
            "tokens": (P + cm.sum(-1)).tolist(),
        }
        return {"codes": codes, "window": window, "loss": loss, "flags": flags, "summary": summary, "stats": stats}

    def _piece(self, rows: list[int], first: int, local: dict[str, Any]) -> dict[str, Any]:
        """The recorded rows of this process (row indices local), as slices of its tensors: sent to rank 0, whose
        writer thread builds their columns (`_piece_data`)."""
        T = self.batch["tensors"]
        idx = torch.as_tensor(rows, dtype=torch.long)
        return {
            "rows": [first + i for i in rows],
            "prompt_ids": T["prompt_ids"][idx],
            "prompt_mask": T["prompt_mask"][idx],
            "completion_ids": T["completion_ids"][idx],
            "completion_mask": T["completion_mask"][idx],
            "loss": local["loss"][idx],
            "codes": [local["codes"][i] for i in rows],
            "window": {k: (p[0][idx], p[1][idx]) if p is not None else None for k, p in local["window"].items()},
        }

    def _logprob_meta(self) -> dict[str, Any]:
        """What every record's `meta` says of its rollout_logprob: which log-probs the sampler's are (raw, or a
        nucleus's renormalised ones with its top_p); the audit's microscope reads it."""
        kind = self.settings["rollout_logprob_kind"]
        return {
            "rollout_logprob_kind": kind,
            **({"rollout_top_p": self.cfg.rollout.top_p} if kind == "processed" else {}),
        }

    @staticmethod
    def _piece_data(
        piece: dict[str, Any],
        keep: set[int],
        trajs: list[Trajectory],
        run_id: str,
        step: int,
        logprob_meta: dict[str, Any],
    ) -> StepData:
        """A piece's kept rows as a step's data (the rollouts' ids checked against TRL's: never re-tokenised)."""
        rows = [k for k, g in enumerate(piece["rows"]) if g in keep]
        seq: dict[int, list[int]] = {}
        plen: dict[int, int] = {}
        for k in rows:
            t = trajs[piece["rows"][k]]
            prompt = piece["prompt_ids"][k][piece["prompt_mask"][k].bool()].tolist()
            L = int(piece["completion_mask"][k].sum())
            ids = prompt + piece["completion_ids"][k][:L].tolist()
            if ids != t.prompt_ids + t.ids:
                raise RuntimeError(
                    f"step {step}: TRL's token ids for trajectory {t.group}:{t.sample} are not the rollout's"
                )
            seq[k], plen[k] = ids, len(prompt)
        codes = {k: piece["codes"][k] for k in rows}
        window = {k: p for k, p in piece["window"].items() if p is not None and p[0] is not None}
        cols = columns_from_window(
            rows=rows,
            seq_ids=seq,
            prompt_lengths=plen,
            role_codes=codes,
            window=window,
            loss_mask=piece["loss"],
            align="left",
        )
        records = [
            rollout_record(trajs[piece["rows"][k]], run_id=run_id, step=step, split="train", tokens=None) for k in rows
        ]
        for rec in records:  # the audit's microscope reads which log-probs the sampler's are
            rec["meta"].update(logprob_meta)
        return StepData(records, cols)

    def end_step(self, step: int, control: Any) -> None:
        """Every process, after the last optimizer step of our step `step`: the in-run checks and per-row sums to rank
        0 (one gather), the rows train.record keeps (the same choice on every process) to rank 0 (a second gather:
        only what is recorded), rank 0's metrics and recorder; evaluation, the stop decision, the checkpoint."""
        from accelerate.utils import gather_object

        cfg, b = self.cfg, self.batch
        trajs = b["trajs"]
        local = self._local_rows()
        stats = {"failed": b.get("failed", 0), "ppo_kl": b["ppo_kl"], "timing": b["timing"], "checks": local["stats"]}
        gathered = gather_object([([t.group for t in trajs], local["flags"], local["summary"], trajs, stats)])
        keys = [k for part in gathered for k in part[0]]
        flags = [f for part in gathered for f in part[1]]
        first = sum(len(part[0]) for part in gathered[: self.trl.accelerator.process_index])
        settings = RecordSettings.of(cfg)
        keep = select(keys, flags, step, settings, held_out=False) if settings.enabled else []
        mine = [g - first for g in keep if first <= g < first + len(trajs)]
        pieces = gather_object([self._piece(mine, first, local)])
        self.step = step
        m: dict[str, float] = {}
        if self.rank == 0:
            all_trajs = [t for part in gathered for t in part[3]]
            summary = {
                k: [x for part in gathered for x in part[2][k]] for k in ("advantage", "loss_tokens", "gap", "tokens")
            }
            m = self._step_metrics(summary, all_trajs, [part[4] for part in gathered])
            run_id = self.writer.run["id"]
            logprob_meta = self._logprob_meta()

            def build(kept: list[int]) -> StepData:
                wanted = set(kept)
                return concat_data(
                    [self._piece_data(p, wanted, all_trajs, run_id, step, logprob_meta) for p in pieces if p["rows"]]
                )

            checks: dict[str, float] = {}
            for part in gathered:
                for k, v in part[4]["checks"].items():
                    checks[k] = checks.get(k, 0.0) + v
            m.update(
                self.recorder.submit(
                    StepJob(f"step-{step:06d}", step, "train", len(keys), keys, flags, build, stats=checks)
                )
            )
        last = step == self.total
        if self.eval_set and ((cfg.train.eval_every and step % cfg.train.eval_every == 0) or last):
            m.update(self.evaluate(step))
        if self.rank == 0:
            m["timing_s/step"] = time.perf_counter() - b.get("t_step", time.perf_counter())
            m["perf/throughput"] = m.pop("_tokens", 0.0) / max(m["timing_s/step"], 1e-9)
            self.pending = (step, m)
        if cfg.test and cfg.test.step_delay_s:
            time.sleep(cfg.test.step_delay_s)
        stop = self._agree_stop()
        if last or stop or (cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0):
            if self.recorder is not None:
                self.recorder.flush()  # the checkpoint never runs ahead of the recorded rollouts (as train.py's Trainer._checkpoint)
            control.should_save = True
        if stop:
            control.should_training_stop = True

    def _step_metrics(
        self, rows: dict[str, list[float]], trajs: list[Trajectory], stats: list[dict[str, Any]]
    ) -> dict[str, float]:
        """The step's metrics in our/veRL names, from every process's per-row sums (of the tensors TRL trained on)."""
        m = rollout_metrics(trajs)
        scores = torch.tensor([t.reward or 0.0 for t in trajs])
        adv = torch.tensor(rows["advantage"])  # one per sequence
        loss_tokens = sum(rows["loss_tokens"])
        response_tokens = sum(len(t.ids) for t in trajs)
        m.update(
            {
                "critic/score/mean": float(scores.mean()),
                "critic/score/max": float(scores.max()),
                "critic/score/min": float(scores.min()),
                "critic/rewards/mean": float(scores.mean()),
                "critic/advantages/mean": float(adv.mean()),
                "critic/advantages/max": float(adv.max()),
                "critic/advantages/min": float(adv.min()),
                "reward/frac_zero_std_groups": zero_std_group_fraction(scores, [t.group for t in trajs]),
                "reward/errors": float(sum(s["failed"] for s in stats)),
                "mask/loss_tokens": loss_tokens / len(trajs),
                "mask/loss_fraction": loss_tokens / max(response_tokens, 1),
            }
        )
        kl_sum, kl_n = (sum(s["ppo_kl"][k] for s in stats) for k in (0, 1))
        m["actor/ppo_kl"] = kl_sum / kl_n if kl_n else 0.0  # on-policy: the old log-probs are the update's own
        parts = sorted({k for t in trajs for k in t.reward_parts})
        for k in parts:
            m[f"reward/parts/{k}/mean"] = mean([t.reward_parts[k] for t in trajs if k in t.reward_parts])
        if self.cfg.rollout.top_p >= 1.0 and any(x > 0 for x in rows["gap"]):
            m["rollout/logprob_diff_max"] = max(rows["gap"])
        elif self.cfg.rollout.top_p >= 1.0 and rows["gap"]:
            m["rollout/logprob_diff_max"] = 0.0
        for key in ("rollout", "reward", "retrieve"):
            m[f"timing_s/{key}"] = max(s["timing"].get(key, 0.0) for s in stats)  # the processes run side by side
        generated = sum(t.roles.count("generated") for t in trajs)
        m["perf/rollout_tokens_per_s"] = generated / max(m["timing_s/rollout"], 1e-9)
        m["_tokens"] = float(sum(rows["tokens"]))
        return m

    def log_trl(self, logs: dict[str, Any]) -> None:
        """Rank 0, TRL's logs of the step just ended: kept under trl/…, the ones veRL names under those too; the
        step's metrics line and event are written."""
        if self.pending is None:
            return
        step, m = self.pending
        for k, v in logs.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                m[f"trl/{k}"] = float(v)
                if k in TRL_NAMES:
                    m[TRL_NAMES[k]] = float(v)
        self.flush_metrics()

    def flush_metrics(self) -> None:
        if self.pending is None:
            return
        step, m = self.pending
        self.pending = None
        self.writer.metrics(step, m)
        self.writer.event("metrics", step=step, metrics={k: m[k] for k in SUMMARY_KEYS if k in m})
        self.writer.set_step(step)

    def _agree_stop(self) -> bool:
        """The processes stop together: a stop asked of any is a stop for all."""
        acc = self.trl.accelerator
        if acc.num_processes > 1:
            flag = acc.reduce(torch.tensor([1.0 if self.stop_requested else 0.0], device=acc.device), reduction="sum")
            if float(flag.item()) > 0 and not self.stop_requested:
                self.stop_requested, self.stop_reason = True, self.stop_reason or "signal"
        return self.stop_requested

    # -- evaluation, split over the processes --------------------------------------------------------------------
    def _eval_trajectories(self, step: int, which: range) -> list[Trajectory]:
        from accelerate.utils import gather_object

        acc = self.trl.accelerator
        n, k = len(which), acc.num_processes
        lo, hi = which.start + n * acc.process_index // k, which.start + n * (acc.process_index + 1) // k
        with self._generating():
            mine = super()._eval_trajectories(step, range(lo, hi)) if hi > lo else []
        everyone = gather_object([mine])  # a collective: every process calls it
        return [t for part in everyone for t in part] if self.rank == 0 else []

    # -- the run ----------------------------------------------------------------------------------------------------
    def train(self) -> int:
        start = self.setup()
        self._stand_ins()
        if start == 0 and self.eval_set and not self.stop_requested:
            m0 = self.evaluate(0)
            if m0:
                self.writer.metrics(0, m0)
        self.step = start
        if start < self.total and not self.stop_requested:
            self.trl.train(resume_from_checkpoint=str(self.checkpoint) if self.checkpoint is not None else None)
        self.flush_metrics()
        return self.step

    def on_checkpoint(self, global_step: int) -> None:
        """After TRL wrote checkpoints/checkpoint-<global step>: every process has written its share; rank 0 renames it
        checkpoints/step-NNNNNN (our run directory's name) and says so."""
        acc = self.trl.accelerator
        acc.wait_for_everyone()
        step = global_step // self.plan.trl_steps
        final = self.run_dir / "checkpoints" / f"step-{step:06d}"
        from accelerate.utils import gather_object

        sizes = gather_object([self._out_of_memory_sizes])  # every process's: the smallest of each is kept
        if self.rank == 0:
            import shutil

            shutil.rmtree(final, ignore_errors=True)
            written = self.run_dir / "checkpoints" / f"checkpoint-{global_step}"
            kept: dict[str, int] = {}
            for part in sizes:
                for k, v in part.items():
                    kept[k] = min(kept.get(k, v), v)
            if kept:  # before the rename: a checkpoint is complete with all its files or not there
                (written / STATE_FILE).write_text(json.dumps({"out_of_memory": kept}) + "\n", encoding="utf-8")
            os.replace(written, final)
            self.writer.event("checkpoint", step=step, path=str(final))
        acc.wait_for_everyone()

    # -- running out of device memory -------------------------------------------------------------------------------
    def _kept_sizes(self, ckpt: Path) -> dict[str, Any]:
        """The sizes this run ran out of device memory down to, as the checkpoint kept them (none: {})."""
        path = ckpt / STATE_FILE
        if not path.exists():
            return {}
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))["out_of_memory"]
            return {k: int(v) for k, v in kept.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise RuntimeError(
                f"{path}: cannot read the sizes this run ran out of device memory down to ({e})"
            ) from None


def _grpo_trainer() -> type:
    from trl import GRPOTrainer

    class SearchAgentGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer with the hooks the recording needs (see the module's docstring), and what it does when
        the device runs out of memory (the builtin trainer's rule, train.py `_fitting`): the log-prob passes and the
        update run again in forwards of half as many sequences, kept for the rest of the run — the same numbers, since
        each piece of a micro-batch weighs what it weighs in TRL's average. One process only: several would split
        alone while the others wait in a collective (they stop with the error, naming the size to configure)."""

        def __init__(self, *args: Any, engine: TRLEngine, **kwargs: Any):
            self.engine = engine
            self._rows: torch.Tensor | None = None
            # the current optimizer step's first micro-batch (TRL's _step), its metrics' lengths and ppo_kl sums
            # before it: what an update that ran out of memory is trained again from; None after each optimizer step
            # (StepCallback.on_step_end), so the next micro-batch to compute a loss starts the next one — however
            # many micro-batches an optimizer step has (Trainer's last one of an epoch may have fewer)
            self._window: tuple[int, dict[str, int], list[float]] | None = None
            self._in_loss = False
            super().__init__(*args, **kwargs)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            training = self.model.training
            if training:
                self.engine.batch["inputs"] = inputs
            out = super()._generate_and_score_completions(inputs)
            if training:
                self.engine._keep(inputs, out)
            return out

        # -- the update, in pieces when a micro-batch does not fit -----------------------------------------------
        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
            self._in_loss = False
            try:
                return super().training_step(model, inputs, num_items_in_batch)
            except torch.OutOfMemoryError as e:
                if not self._in_loss or self._window is None:
                    raise  # the rollout's and the passes' own recovery is theirs
                failed = out_of_memory_message(e)
            # outside the handler: its traceback, and the tensors its frames held, are gone
            return self._again(model, failed)

        def _again(self, model: Any, error: str) -> torch.Tensor:
            """The optimizer step's micro-batches so far, trained again from zero gradients in pieces of half as many
            sequences (a backward that ran out of memory has added part of its gradients), until they fit."""
            start, lengths, ppo_kl = self._window
            spg = self.args.steps_per_generation
            while True:
                cannot = self._cannot_split(retry=True)
                if cannot is None and start // spg != self._step // spg:
                    cannot = "the optimizer step spans two generation batches"
                self.engine._smaller_micro_batch(self.engine.batch.get("step", 0), "the update", error, cannot)
                model.zero_grad(set_to_none=True)
                for k, v in self._metrics["train"].items():
                    del v[lengths.get(k, 0) :]
                self.engine.batch["ppo_kl"] = list(ppo_kl)
                try:
                    for s in range(start, self._step + 1):
                        with self.compute_loss_context_manager():
                            loss = self.compute_loss(model, self._buffered_inputs[s % spg])
                        self.accelerator.backward(loss)
                        loss = loss.detach()
                    break
                except torch.OutOfMemoryError as e:
                    error = out_of_memory_message(e)
                loss = None
            self._step += 1  # GRPOTrainer.training_step's count, which the failed call did not reach
            return loss

        def _cannot_split(self, retry: bool) -> str | None:
            """Why a micro-batch's loss cannot be summed exactly from pieces here (`retry`: in this process alone,
            after running out of memory), or None."""
            if retry and self.accelerator.num_processes > 1:
                return f"{self.accelerator.num_processes} processes"
            if self._entropy_bonus_enabled:
                return "algorithm.entropy_coef: TRL's entropy bonus is a mean over the micro-batch's tokens"
            if self.top_entropy_quantile < 1.0:
                return "trl.top_entropy_quantile: the quantile is the micro-batch's"
            if self.aux_loss_enabled:
                return "a router's auxiliary loss"
            if self.loss_type not in ROWS_MEAN | TOKENS_MEAN | GLOBAL_SUM:
                return f"TRL's loss_type {self.loss_type!r}"
            return None

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
            if not self._in_loss and self._window is None:
                metrics = {k: len(v) for k, v in self._metrics["train"].items()}
                self._window = (self._step, metrics, list(self.engine.batch.get("ppo_kl", [0.0, 0.0])))
            self._in_loss = True
            rows, size = int(inputs["completion_ids"].shape[0]), self.engine.micro_batch_size
            halved = size < self.args.per_device_train_batch_size  # TRL's micro-batch, as it is, until then
            # several processes resumed with one size split alike; a loss that cannot be split (the passes were halved)
            # is TRL's whole micro-batch — if that does not fit, _again stops with the size to configure
            if (
                not halved
                or size >= rows
                or not (model.training and torch.is_grad_enabled())
                or self._cannot_split(retry=False)
            ):
                return self._loss_of(model, inputs)
            mask = _loss_mask(inputs)
            tokens = mask.sum().clamp(min=1.0)
            pieces = [(lo, min(lo + size, rows)) for lo in range(0, rows, size)]
            done = None
            for lo, hi in pieces:
                if self.loss_type in ROWS_MEAN:
                    weight = (hi - lo) / rows
                elif self.loss_type in TOKENS_MEAN:
                    weight = mask[lo:hi].sum() / tokens
                else:
                    weight = 1.0
                loss = self._loss_of(model, _rows_of(inputs, lo, hi, rows)) * weight
                if hi == rows:
                    return loss if done is None else loss + done  # its backward is TRL's (Trainer.training_step)
                sync = (
                    self.accelerator.no_sync(model) if self.accelerator.num_processes > 1 else contextlib.nullcontext()
                )
                with sync:
                    self.accelerator.backward(loss)
                done = loss.detach() if done is None else done + loss.detach()
                del loss
            raise AssertionError("unreachable: the last piece returns")

        def _loss_of(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
            self._rows = inputs.get("sas_row")
            self._inputs = inputs
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._rows = None

        def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():  # the old and reference log-prob passes: a loop over forwards
                while True:
                    ids = args[0] if args else kwargs["input_ids"]
                    asked = kwargs.get("batch_size") or int(ids.shape[0])
                    try:
                        return super()._get_per_token_logps_and_entropies(
                            model, *args, **{**kwargs, "batch_size": min(asked, self.engine.micro_batch_size)}
                        )
                    except torch.OutOfMemoryError as e:
                        failed = out_of_memory_message(e)
                    cannot = (
                        f"{self.accelerator.num_processes} processes" if self.accelerator.num_processes > 1 else None
                    )
                    self.engine._smaller_micro_batch(
                        self.engine.batch.get("step", 0), "the log-prob passes", failed, cannot
                    )
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            rows, self._rows = self._rows, None  # the first call of a _compute_loss is the policy's forward
            if rows is not None:
                i = self._inputs
                self.engine._forward_seen(rows, logps, entropies, _loss_mask(i), i.get("old_per_token_logps"))
            return logps, entropies, aux

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            super()._save_checkpoint(model, trial)
            self.engine.on_checkpoint(self.state.global_step)

    return SearchAgentGRPOTrainer


def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss trains (its `mask`): completion tokens, less the environment's (`tool_mask`, our env_mask)."""
    cm = inputs["completion_mask"]
    return cm * inputs["tool_mask"] if "tool_mask" in inputs else cm


def _rows_of(inputs: dict[str, Any], lo: int, hi: int, rows: int) -> dict[str, Any]:
    """Rows lo..hi of a micro-batch's inputs (tensors and lists over its rows; the rest, e.g. num_items_in_batch, as
    they are). The columns stay: each row is computed at the width the whole micro-batch has."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == rows or isinstance(v, list) and len(v) == rows:
            out[k] = v[lo:hi]
        else:
            out[k] = v
    return out


def SearchAgentGRPOTrainer(**kwargs: Any) -> Any:  # noqa: N802 - builds the subclass once TRL is imported
    return _grpo_trainer()(**kwargs)


def StepCallback(engine: TRLEngine) -> Any:  # noqa: N802
    from transformers import TrainerCallback

    class _StepCallback(TrainerCallback):
        """Our step's boundaries in TRL's loop (K optimizer steps each)."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step % engine.plan.trl_steps == 0:
                engine.batch["t_step"] = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            engine.trl._window = None  # an optimizer step ended: the next micro-batch starts the next one
            if state.global_step % engine.plan.trl_steps == 0:
                engine.flush_metrics()  # a step whose TRL log never came
                engine.end_step(state.global_step // engine.plan.trl_steps, control)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if engine.rank == 0 and logs:
                engine.log_trl(logs)

    return _StepCallback()
