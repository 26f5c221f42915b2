"""A training run, whichever engine trains it: what the builtin engine (train.py) and the TRL engine
(engines/trl/engine.py) share around their update, so a run reads and behaves the same whatever trains it.

- the run directory (run_writer.py: run.json, events, metrics) and the rollout recorder (recorder.py);
- the data (malformed lines reported and skipped) and the prompts as fed (too long: skipped), the env server's health;
- rollouts through the one protocol (rollout.py `run_rollouts`) with generation.py's `LMGenerator` over the policy,
  scored by the env server's `/reward` (reward.py);
- held-out evaluation: greedy, one sample per question, its `val/*` metrics (metrics.py) and records;
- the lifecycle: SIGTERM (or SIGINT) finishes the current step, checkpoints and exits 0 with status `stopped`
  (`stop_reason` `signal`; SIGHUP or the host process dying: `host-gone`); an exception writes its traceback to
  events and `run.json` (status `failed`) and exits 1.

An engine subclasses `Run` for its `setup` and `train` (the base's `run()` calls `train()`; the hooks an engine may
replace: `_run_writer`, `_recorder`, `_parent_to_watch`, `_generator`, `_settings`, `_eval_trajectories`). Its
setup sets what the rollouts use: `device`, `policy`, `tok`, `dialect`, `stops`, `max_batch_tokens`.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint import latest_checkpoint
from .config import Section, stored_config
from .curriculum import stages
from .data import DatasetError, Example, load_dataset, render_prompt
from .env_client import EnvClient
from .generation import LMGenerator
from .metrics import held_out_metrics
from .numerics import Numerics
from .policy import compute_dtype
from .record.tokens import trajectory_data
from .recorder import Recorder, RecordSettings, StepJob
from .reward import score
from .rollout import RolloutSettings, Trajectory, run_rollouts
from .run_writer import RunWriter, set_disk_fault
from .schema import ConfigError
from .versions import trainer_versions
from .watchdog import watch_parent


def _dataset(key: str, path: str, warn: Any) -> list[Example]:
    """The dataset of config key `key` (data.train, data.eval); a file that cannot be one is a DatasetError naming the
    key (a directory, a missing file, no usable line)."""
    try:
        return load_dataset(path, warn=warn)
    except DatasetError as e:
        raise DatasetError(f"{key}: {e}") from None


class Run:
    # This process's rank among the engine's training processes (the builtin engine is one process).
    rank = 0

    # What the run computes in (setup: model.dtype, measured for `fastest`; numerics.py). None: compute_dtype's rule.
    numerics: Numerics | None = None

    # Set up (the `started` event written): a config or data error after it is a failed run, not an invalid config.
    _set_up = False

    def __init__(
        self, cfg: Section, run_dir: str | os.PathLike[str], env_url: str, resume: bool = False, stdout: Any = None
    ):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.stop_requested = False
        self.stop_reason: str | None = None
        # sizes halved after running out of device memory (the rollout's KV budget, the update's micro-batch): a
        # checkpoint keeps them, so a resumed run starts there
        self._out_of_memory_sizes: dict[str, int] = {}
        # rollout.cuda_graphs, until a static decode step or its capture fails (then the cache grows, as before)
        self._static_decode = bool(cfg.rollout.cuda_graphs)
        self.total = int(cfg.train.steps)
        self.stages = stages(cfg)
        self.stage = self.stages[0]
        self.writer = self._run_writer(stdout)
        if cfg.test and cfg.test.disk_full:  # tests: a full disk from a given write on (run_writer.set_disk_fault)
            set_disk_fault(cfg.test.disk_full.at, int(cfg.test.disk_full.after_bytes))
        self.recorder = self._recorder()
        self.env = EnvClient(env_url)

    def _started(
        self, start: int, resumed: bool, parameters: int, trainable: int, precision: str, **engine: Any
    ) -> None:
        """The `started` event every engine writes (events.jsonl): where the run starts, on what, with how much; an
        engine's own fields after it."""
        self._set_up = True
        self.writer.event(
            "started",
            step=start,
            total=self.total,
            resumed=resumed,
            device=str(self.device),
            model=self.cfg.model.kind,
            parameters=parameters,
            trainable=trainable,
            train_examples=len(self.train_set),
            eval_examples=len(self.eval_set),
            precision=precision,
            max_batch_tokens=self.max_batch_tokens,
            **engine,
        )

    def versions(self) -> dict[str, str | None]:
        """What run.json records of the software that trains."""
        return trainer_versions()

    def _run_writer(self, stdout: Any) -> RunWriter:
        return RunWriter(
            self.run_dir,
            stored_config(self.cfg),
            self.versions(),
            self.total,
            stdout=stdout,
            python=sys.executable,
            resume=self.resume,
        )

    def _recorder(self) -> Recorder | None:
        """The background writer of the run's rollouts (recorder.py); None on the processes that do not write."""
        return Recorder(
            self.run_dir,
            RecordSettings.of(self.cfg),
            texts=lambda ids: self.tok.token_texts(ids),
            warn=self.writer.warning,
        )

    def _truncate_after(self, step: int) -> None:
        """A resume from `step` (-1: from scratch): later metrics, rollouts and checkpoints go."""
        self.writer.truncate_after(step)
        if self.recorder is not None:  # (the processes that do not write have none)
            self.recorder.truncate_after(step)

    # -- data and prompts -----------------------------------------------------------------------------------------
    def _load_data(self) -> None:
        """The datasets (malformed lines reported and skipped), and the env server's health."""
        cfg, w = self.cfg, self.writer
        self.train_set = _dataset("data.train", cfg.data.train, w.warning)
        self.eval_set = _dataset("data.eval", cfg.data.eval, w.warning) if cfg.data.eval else []
        if cfg.data.eval_size:
            self.eval_set = self.eval_set[: cfg.data.eval_size]
        health = self.env.health()
        w.log(f"env server {self.env.url}: retriever {health.get('retriever')}, reward {health.get('reward')}")
        if not health.get("reward"):
            raise RuntimeError(f"the env server at {self.env.url} has no reward module (start it with --reward)")

    def _resume_checkpoint(self) -> Path | None:
        """With --resume, the last complete checkpoint (None, with a warning, when there is none)."""
        ckpt = latest_checkpoint(self.run_dir) if self.resume else None
        if self.resume and ckpt is None:
            self.writer.warning("--resume: no complete checkpoint in this run directory; starting from step 0")
            self._truncate_after(-1)
        return ckpt

    def _encode_prompts(self) -> None:
        """Every example's prompt as fed (text, token ids); examples whose prompt is too long are skipped."""
        cfg = self.cfg
        self.train_prompts = self._prompts(self.train_set, "data.train")
        self.eval_prompts = self._prompts(self.eval_set, "data.eval") if self.eval_set else []
        self.train_set = [e for e, p in zip(self.train_set, self.train_prompts) if p is not None]
        self.train_prompts = [p for p in self.train_prompts if p is not None]
        keep = [i for i, p in enumerate(self.eval_prompts) if p is not None]
        self.eval_set = [self.eval_set[i] for i in keep]
        self.eval_prompts = [self.eval_prompts[i] for i in keep]
        if not self.train_set:
            raise RuntimeError(
                f"{cfg.data.train}: every prompt is longer than rollout.max_prompt_length ({cfg.rollout.max_prompt_length} tokens)"
            )

    def _prompts(self, examples: list[Example], key: str) -> list[tuple[str, list[int]] | None]:
        out: list[tuple[str, list[int]] | None] = []
        too_long = []
        for e in examples:
            text = self.dialect.prompt(
                self.tok, render_prompt(self.cfg.data.prompt_template, e.question), self.cfg.data.chat_template
            )
            ids = self.tok.encode(text)
            if len(ids) > self.cfg.rollout.max_prompt_length:
                too_long.append(e.id)
                out.append(None)
            else:
                out.append((text, ids))
        if too_long:
            self.writer.warning(
                f"{key}: {len(too_long)} prompts are longer than rollout.max_prompt_length ({self.cfg.rollout.max_prompt_length} tokens) and are skipped (first: {', '.join(too_long[:5])})"
            )
        return out

    # -- rollouts and scores --------------------------------------------------------------------------------------
    def _compute_dtype(self) -> torch.dtype | None:
        """The run's autocast dtype (None: fp32): what its numerics chose (model.dtype, measured for `fastest`), or
        compute_dtype's rule before they are resolved."""
        return self.numerics.autocast if self.numerics is not None else compute_dtype(self.cfg, self.device)

    def _autocast(self):
        """One autocast context factory for the run (None: fp32): bf16 when the run's numerics say so."""
        dtype = self._compute_dtype()
        return (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype is not None else None

    def _settings(self, generator: LMGenerator, prompts: Sequence[tuple[str, list[int]]], n: int) -> RolloutSettings:
        return RolloutSettings.of(
            self.cfg, generator.wave_size(max(len(p[1]) for p in prompts), self.cfg.rollout.max_response_length, n)
        )

    def _generator(self, step: int, greedy: bool) -> LMGenerator:
        g = torch.Generator(device=self.device)
        g.manual_seed(self.cfg.seed * 1_000_003 + step + 7_919 * self.rank)  # each process samples its own
        r = self.cfg.rollout
        return LMGenerator(
            self.policy,
            self.tok,
            0.0 if greedy else r.temperature,
            r.top_p,
            self.device,
            self.stops,
            g,
            self._autocast(),
            self.max_batch_tokens,
            on_out_of_memory=self._rollout_out_of_memory,
            static_decode=self._static_decode and self.device.type == "cuda",
            on_fallback=self._static_decode_failed,
        )

    def _static_decode_failed(self, error: str) -> None:
        """A static decode step, or its CUDA graph, failed (static_decode.py): the rest of the run decodes with a
        growing cache, as before; a warning says so once."""
        if not self._static_decode:
            return
        self._static_decode = False
        self.writer.warning(
            f"{error}: the rollouts go on with the KV cache grown a column a step (slower on a GPU; rollout.cuda_graphs "
            f"false starts there)",
            cause="static-decode-fallback",
        )

    def _stand_in_device_memory(self, rows: int, update_only: bool = False) -> None:
        """`test.device_memory_rows` (tests of running out of memory, in a process a test starts, where no GPU is): the
        policy's forward — generation's, the passes' and the update's, on every engine that trains in this process —
        raises torch.OutOfMemoryError on a batch of more than `rows` sequences, as CUDA's allocator would on a batch
        too large for the GPU. `update_only` (`test.update_memory_rows`): only forwards that keep gradients."""
        backbone = self.policy.backbone
        forward = backbone.forward
        key = "update_memory_rows" if update_only else "device_memory_rows"

        def limited(*args: Any, **kwargs: Any) -> Any:
            ids = args[0] if args else kwargs.get("input_ids")
            if ids is not None and ids.shape[0] > rows and (torch.is_grad_enabled() or not update_only):
                raise torch.OutOfMemoryError(
                    f"out of memory (test.{key}: a batch of {ids.shape[0]} sequences, more than {rows})"
                )
            return forward(*args, **kwargs)

        backbone.forward = limited

    def _stand_ins(self) -> None:
        """The test section's stand-ins for a GPU's memory limit, installed once the run has trained nothing yet."""
        t = self.cfg.test
        if t and t.device_memory_rows:
            self._stand_in_device_memory(int(t.device_memory_rows))
        if t and t.update_memory_rows:
            self._stand_in_device_memory(int(t.update_memory_rows), update_only=True)

    def _rollout_out_of_memory(self, old: int, new: int, error: str) -> None:
        """A generation call ran out of device memory and runs again with half the KV budget: every later rollout
        keeps the smaller one (the plan was short; the run goes on, slower)."""
        self._keep_smaller(
            "max_batch_tokens",
            min(self.max_batch_tokens, new),
            f"the rollout ran out of device memory with rollout.max_batch_tokens {old:,}: running again with {new:,}",
            "rollout.max_batch_tokens",
            error,
            "rollout-out-of-memory",
        )

    def _smaller_micro_batch(self, step: int, what: str, error: str, cannot: str | None = None) -> None:
        """`what` (the log-prob passes, the update) ran out of device memory: it runs again in micro-batches of half
        as many sequences, kept for the rest of the run (the passes' and the update's), and a warning says so; a
        micro-batch of one sequence that does not fit, or `cannot` (why it cannot run in smaller ones here), is the
        error, naming the size that would fit."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        old = self.micro_batch_size
        if old <= 1:
            raise torch.OutOfMemoryError(
                f"step {step}: {what} ran out of device memory with a micro-batch of one sequence: {error}"
            )
        if cannot:
            raise torch.OutOfMemoryError(
                f"step {step}: {what} ran out of device memory with micro-batches of {old} sequences and cannot run "
                f"again in smaller ones here ({cannot}): a run configured with optim.micro_batch_size {old // 2} or "
                f"less would (`search-agent-studio plan` sizes it) — {error}"
            )
        self._keep_smaller(
            "micro_batch_size",
            old // 2,
            f"step {step}: {what} ran out of device memory with micro-batches of {old} sequences: running again with "
            f"{old // 2} (the same numbers, slower)",
            "optim.micro_batch_size",
            error,
            "update-out-of-memory",
        )

    def _resume_sizes(self, fitted: dict[str, Any]) -> None:
        """The sizes this run ran out of device memory down to, as a checkpoint kept them (`max_batch_tokens`,
        `micro_batch_size`): a resume starts there, and says so."""
        if not fitted:
            return
        self._out_of_memory_sizes = {k: int(v) for k, v in fitted.items()}
        for size, value in self._out_of_memory_sizes.items():
            setattr(self, size, min(getattr(self, size), value))
        self.writer.log(
            f"resumed with the sizes this run ran out of device memory down to: rollout.max_batch_tokens "
            f"{self.max_batch_tokens:,}, micro-batches of {self.micro_batch_size}"
        )

    def _keep_smaller(self, size: str, value: int, what: str, key: str, error: str, cause: str) -> None:
        """A size halved after running out of device memory (`max_batch_tokens`, `micro_batch_size`): kept for the
        rest of the run and by its checkpoints (a resume starts there), and a `warning` event with its cause."""
        setattr(self, size, value)
        self._out_of_memory_sizes[size] = value
        self.writer.warning(
            f"{what}, kept for the rest of the run (set {key}, or check `search-agent-studio plan`, to start there) "
            f"— {error}",
            cause=cause,
            **{size: value},
        )

    def _rollouts(
        self, examples: Sequence[Example], prompts: Sequence[tuple[str, list[int]]], n: int, step: int, greedy: bool
    ) -> list[Trajectory]:
        gen = self._generator(step, greedy)
        return run_rollouts(
            examples,
            prompts,
            n,
            gen,
            self.tok,
            self.env,
            self._settings(gen, prompts, n),
            warn=self.writer.warning,
            dialect=self.dialect,
        )

    def _score(self, trajs: list[Trajectory]) -> int:
        """Rewards from /reward (reward.py); a failed item is reported, kept with reward 0 for training."""
        return score(self.env, trajs, self.cfg.rollout.search_tool, self.writer.warning)

    # -- held-out evaluation --------------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, step: int) -> dict[str, float]:
        self.writer.progress(step, self.total, "eval")
        t0 = time.perf_counter()
        trajs = self._eval_trajectories(step, range(len(self.eval_set)))
        return self._eval_report(trajs, step, t0) if trajs else {}

    def _eval_trajectories(self, step: int, which: range) -> list[Trajectory]:
        """Greedy rollouts of the held-out examples `which` (one each, `group` = the example's index), scored."""
        cfg = self.cfg
        self.policy.eval()
        trajs: list[Trajectory] = []
        size = max(1, cfg.rollout.batch_size * cfg.rollout.n)
        for lo in range(which.start, which.stop, size):
            hi = min(lo + size, which.stop)
            part = self._rollouts(self.eval_set[lo:hi], self.eval_prompts[lo:hi], 1, step, greedy=True)
            for t in part:
                t.group += lo
            trajs += part
        self._score(trajs)
        return trajs

    def _eval_report(self, trajs: list[Trajectory], step: int, t0: float) -> dict[str, float]:
        """The held-out metrics (`val/*`), records and `eval` event of an evaluation."""
        w = self.writer
        m = held_out_metrics(trajs)
        m["timing_s/eval"] = time.perf_counter() - t0
        held_out = trajectory_data(trajs, self.tok, run_id=w.run["id"], step=step, split="val")
        m.update(
            {
                k.replace("record/", "val/record/"): v
                for k, v in self._record(trajs, step, "val", [[] for _ in trajs], held_out).items()
            }
        )
        w.event("eval", step=step, metrics={k: v for k, v in m.items() if k.startswith("val/")})
        return m

    # -- the lifecycle --------------------------------------------------------------------------------------------
    def run(self) -> int:
        """The run's lifecycle around `train()`: signals, the parent watchdog, the final status, failures."""
        w = self.writer
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        watch_parent(self._on_parent_gone, self._parent_to_watch())
        try:
            step = self.train()
            self._close_recorder()
            status = "stopped" if self.stop_requested and step < self.total else "finished"
            w.finish(status, stop_reason=self.stop_reason if status == "stopped" else None)
            w.event("finished", status=status, step=step)
            return 0
        except Exception as e:  # noqa: BLE001 - every failure is reported, with its traceback
            # A config (its data, named by key) that cannot be trained on, found in setup (before the `started`
            # event): an invalid config, exit 2 as the ones __main__ finds (the host says so, with no resume hint).
            invalid = isinstance(e, (ConfigError, DatasetError)) and not self._set_up
            w.fail(e, traceback.format_exc(), self._close_recorder, invalid=invalid)
            return 2 if invalid else 1
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            w.close()

    def train(self) -> int:
        """The engine's training: setup, then steps until train.steps or a stop; returns the last completed step."""
        raise NotImplementedError

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if not self.stop_requested:
            self.writer.log(
                f"{signal.Signals(signum).name}: finishing the current step, then checkpointing and stopping"
            )
        self.stop_requested = True
        # SIGHUP: the host is closing (a window reloading), not a user's Stop; a new window offers to resume.
        self.stop_reason = "host-gone" if signum == signal.SIGHUP else (self.stop_reason or "signal")

    def _on_parent_gone(self, pid: int) -> None:
        self.writer.log(f"the host process {pid} has gone: finishing the current step, then checkpointing and stopping")
        self.stop_requested = True
        self.stop_reason = "host-gone"

    def _close_recorder(self) -> None:
        """The end of a run: the writer writes what it holds (the last steps), and run.json says what was recorded."""
        if self.recorder is None:
            return
        if not self.recorder.close(timeout=600):
            self.writer.warning(
                "the rollout writer did not finish within 10 minutes; the last steps' rollouts may be missing"
            )
        self.writer.run["record"] = self.recorder.summary()

    def _record(
        self,
        trajs: list[Trajectory],
        step: int,
        split: str,
        flags: list[list[str]],
        build: Any,
        stats: dict[str, float] | None = None,
    ) -> dict[str, float]:
        """Hands a step's rollouts to the recorder (recorder.py): the checks' `flags` and the choice here, the
        records and columns built (`build`) and written on the writer thread. Returns the step's record/* metrics."""
        if self.recorder is None:
            return {}
        name = f"{'val-' if split == 'val' else ''}step-{step:06d}"
        return self.recorder.submit(
            StepJob(name, step, split, len(trajs), [t.group for t in trajs], flags, build, stats=stats)
        )

    def _parent_to_watch(self) -> int | None:
        """The process whose end stops the run (None: the host's, SAS_PARENT_PID)."""
        return None
