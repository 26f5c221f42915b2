"""Recording a veRL run into our run directory (DESIGN §4.2–4.5), from veRL's own batch, each step.

Where veRL 0.9.1's trainer (`RayPPOTrainer.fit`, verl/trainer/ppo/ray_trainer.py; the "legacy" trainer that
`trainer.use_v1=false` selects) lets us see things, and what `RecordingTrainer` does there:
- `_log_rollout_data(batch, …)`: called once per step after the actor update when `trainer.rollout_data_dir` is set,
  with the whole step's DataProto: `prompts` (left-padded), `responses` (right-padded), `attention_mask`,
  `response_mask` (what the losses were masked with), `rollout_log_probs` (vLLM/SGLang's), `old_log_probs`,
  `ref_log_prob` (with a reference), `values` (PPO), `advantages`, `token_level_scores`/`token_level_rewards`, and
  per row `uid` (the GRPO group), `index`, `data_source`, `reward_model`, `extra_info`, our agent loop's `sas`
  fields and the reward function's extra keys (our `sas_reward`). → rollouts/step-N.jsonl, one record per
  trajectory, token arrays over prompt + response (replacing veRL's own text dump).
- `Tracking.log(metrics, step)`: veRL's metrics, already in the names our dashboard uses (critic/score/mean,
  actor/pg_clipfrac, response_length/mean, …) → metrics.jsonl with ours added (mask/…, env/…, and the held-out
  val/em, val/em_by_hops/…, val/bridge_searched_by_hops/… as every engine writes them), a `metrics` event, run.json's
  step.
- `_load_checkpoint` (resume: later records are dropped), `_save_checkpoint` (a `checkpoint` event),
  `_validate` and the rollout manager's validation batches (val-step-N.jsonl, an `eval` event), `_get_gen_batch` /
  `_compute_old_log_prob` (`progress` events).
Events go to events.jsonl only: this code runs in Ray's TaskRunner actor, whose stdout Ray prefixes; main.py (the
process the host started) relays events.jsonl to its stdout. A stop is asked for with the file `STOP_FILE` in the
run directory (main.py writes it on SIGTERM): the step finishes, a checkpoint is saved, the run ends `stopped`.

`records_from_batch` and `StepRecorder` need no Ray cluster (the tests drive them with a DataProto built from tensors).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from ... import __version__, token_store
from ...metrics import SUMMARY_KEYS, held_out_metrics, rollout_metrics
from ...record.tokens import token_record, trajectory_of
from ...recorder import Recorder, RecordSettings, StepData, StepJob, expected_window, role_codes_of, rollout_flags
from ...rollout import Trajectory, truncation_warning
from ...run_writer import RunWriter
from ...versions import package_version
from . import STOP_FILE
from .agent_loop import our_tokenizer
from .dataset import example_of
from .overrides import rollout_logprob_kind

TOKEN_ARRAYS = (
    ("rollout_logprob", "rollout_log_probs"),
    ("logprob", "old_log_probs"),
    ("ref_logprob", "ref_log_prob"),
    ("advantage", "advantages"),
    ("value", "values"),
)


def versions() -> dict[str, str | None]:
    return {
        "trainer": __version__,
        "verl": package_version("verl"),
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
        "ray": package_version("ray"),
        "vllm": package_version("vllm"),
        "sglang": package_version("sglang"),
        "python": platform.python_version(),
    }


def expected_mask(role: str, loss_masking: bool = True) -> int:
    """DESIGN §6: 1 exactly on generated tokens (with masking off, on every response token)."""
    return 1 if role == "generated" or (not loss_masking and role != "prompt") else 0


def _batch_rows(
    batch: Any, inputs: dict[str, Any] | None, max_per_group: int | None
) -> tuple[list[tuple[int, int, str, int]], dict[str, Any]]:
    """(group, sample, uid, batch row) of the rows recorded, by group and sample, and the non-tensor columns."""
    nt = dict(inputs or {}) | dict(batch.non_tensor_batch)
    uids = nt.get("uid", nt.get("index"))
    groups: dict[str, int] = {}
    seen: dict[str, int] = defaultdict(int)
    rows = []
    for i in range(len(batch)):
        uid = str(uids[i]) if uids is not None else str(i)
        if max_per_group is not None and seen[uid] >= max_per_group:
            continue
        rows.append((groups.setdefault(uid, len(groups)), seen[uid], uid, i))
        seen[uid] += 1
    return sorted(rows), nt


def trajectories_from_batch(
    batch: Any, tokenizer: Any, *, inputs: dict[str, Any] | None = None, max_per_group: int | None = None
) -> tuple[list[tuple[int, int, str, int]], list[Trajectory]]:
    """The trajectories of a veRL DataProto's rows (what the step's metrics read; no token arrays), and each one's
    (group, sample, uid, batch row). `inputs`, `max_per_group`: as records_from_batch."""
    td = batch.batch
    rows, nt = _batch_rows(batch, inputs, max_per_group)
    P = td["prompts"].shape[1]
    attn = td["attention_mask"]
    scores = td.get("token_level_scores", td.get("rm_scores")) if hasattr(td, "get") else None
    trajs = []
    for group, sample, _uid, i in rows:
        prompt_ids = td["prompts"][i][attn[i, :P].bool()].tolist()
        L = int(attn[i, P:].sum())
        ids = td["responses"][i, :L].tolist()
        row = {k: v[i] for k, v in nt.items()}
        sas = row.get("sas") or {}
        roles = list(sas.get("roles") or [])[:L]
        if len(roles) != L:  # not one of our agent loops: the mask is all there is
            roles = ["generated" if m else "retrieved" for m in td["response_mask"][i, :L].tolist()]
        detail = json.loads(row["sas_reward"]) if isinstance(row.get("sas_reward"), str) else {}
        trajs.append(
            trajectory_of(
                example_of(row),
                group,
                sample,
                sas.get("prompt") or tokenizer.decode(prompt_ids, skip_special_tokens=False),
                prompt_ids,
                ids,
                roles,
                sas.get("response")
                if sas.get("response") is not None
                else tokenizer.decode(ids, skip_special_tokens=True),
                finish=sas.get("finish"),
                turns=int(sas.get("turns", 0)),
                searches=int(sas.get("searches", 0)),
                valid_actions=int(sas.get("valid_actions", 0)),
                retrieval=list(sas.get("retrieval") or []),
                reward=float(scores[i].sum()) if scores is not None else detail.get("reward"),
                reward_parts=dict(detail.get("parts") or {}),
                metrics=dict(detail.get("metrics") or {}),
                reward_error=detail.get("error"),
                dialect=sas.get("dialect", "searchr1"),
                strict_actions=bool(sas.get("strict_actions")),
            )
        )
    return rows, trajs


def record_of_row(
    td: Any,
    nt: dict[str, Any],
    where: tuple[int, int, str, int],
    t: Trajectory,
    tok: Any,
    *,
    run_id: str,
    step: int,
    split: str,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row's rollout record with its token arrays over prompt + response (veRL's tensors, as it trained), built
    by the one record builder every engine's recorder uses (record/tokens.py). `meta`: added to the record's meta
    (the sampler's log-prob kind on training rows)."""
    _, _, uid, i = where
    L = len(t.ids)
    mask = [int(m) for m in td["response_mask"][i, :L].tolist()]
    row = {k: v[i] for k, v in nt.items()}
    sas = row.get("sas") or {}
    # Unscored positions are null (docs/run-format.md): the prompt; the sampler's log-probs off the generated
    # tokens; veRL's log-probs, values and advantages off the tokens it trained on (its response_mask).
    arrays = {ours: td[theirs][i, :L].tolist() for ours, theirs in TOKEN_ARRAYS if theirs in td.keys()}
    rec = token_record(
        t,
        tok.token_texts,
        run_id=run_id,
        step=step,
        split=split,
        mask=mask,
        arrays=arrays,
        known=sas.get("roles") is not None,
    )
    if sas:
        rec["dialect"] = sas.get("dialect", "searchr1")
    else:  # a loop of the user's own: its dialect is read from the text; its roles restate veRL's mask
        rec.pop("dialect", None)
        rec["meta"]["roles"] = "engine loss mask (response_mask)"
    if sas.get("strict_actions"):
        rec["strict_actions"] = True
    if sas.get("spans") and sas.get("response") is not None:
        rec["spans"] = sas["spans"]
    if sas.get("obs_truncated"):
        rec["meta"]["obs_truncated"], rec["meta"]["obs_longest"] = (
            int(sas["obs_truncated"]),
            int(sas.get("obs_longest", 0)),
        )
    rec["meta"]["verl"] = {
        "uid": uid,
        "index": str(row.get("index", "")),
        "roles": "agent loop" if sas.get("roles") is not None else "from response_mask",
    }
    if meta:
        rec["meta"].update(meta)
    return rec


def records_from_batch(
    batch: Any,
    tokenizer: Any,
    *,
    run_id: str,
    step: int,
    split: str,
    inputs: dict[str, Any] | None = None,
    max_per_group: int | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[Trajectory]]:
    """Rollout records (and their trajectories, for metrics) from a veRL DataProto. `inputs`: non-tensor columns of
    the batch that was generated from, when `batch` lacks them (validation outputs); `max_per_group`: keep at most
    this many rows per uid (drops the copies veRL pads a validation batch with)."""
    rows, trajs = trajectories_from_batch(batch, tokenizer, inputs=inputs, max_per_group=max_per_group)
    _, nt = _batch_rows(batch, inputs, max_per_group)
    tok = our_tokenizer(tokenizer)
    return [
        record_of_row(batch.batch, nt, w, t, tok, run_id=run_id, step=step, split=split, meta=meta)
        for w, t in zip(rows, trajs)
    ], trajs


def batch_flags(
    td: Any,
    rows: list[tuple[int, int, str, int]],
    trajs: list[Trajectory],
    loss_masking: bool,
    stats: dict[str, float] | None = None,
) -> tuple[list[list[str]], list[int]]:
    """The in-run checks of the recorded rows (recorder.rollout_flags), vectorised over veRL's (B, R) tensors
    (responses left-aligned), and each row's leaked tokens (its response_mask against the roles)."""
    idx = torch.as_tensor([w[3] for w in rows], dtype=torch.long)
    R = int(td["responses"].shape[1])
    codes = [role_codes_of(t.roles) for t in trajs]
    valid = torch.arange(R)[None, :] < torch.as_tensor([len(c) for c in codes])[:, None]
    loss = td["response_mask"][idx].float() * valid
    expected = expected_window(codes, R, loss_masking, align="left")
    generated = expected_window(codes, R, True, align="left").bool()
    nan = torch.full((len(rows), R), math.nan)
    have = set(td.keys())
    sampled = torch.where(generated, td["rollout_log_probs"][idx].float(), nan) if "rollout_log_probs" in have else None
    old = torch.where(loss.bool(), td["old_log_probs"][idx].float(), nan) if "old_log_probs" in have else None
    numbers = [
        (td[theirs][idx].float(), generated if ours == "rollout_logprob" else loss)
        for ours, theirs in TOKEN_ARRAYS
        if theirs in have
    ]
    flags = rollout_flags(
        valid=valid,
        loss_mask=loss,
        expected=expected,
        logprob=old,
        rollout_logprob=sampled,
        numbers=numbers,
        stats=stats,
        generated=generated,
    )
    leaks = ((loss != expected) & valid).sum(-1).tolist()
    return flags, [int(x) for x in leaks]


def mask_leaks(records: list[dict[str, Any]], loss_masking: bool = True) -> tuple[int, list[str]]:
    """Tokens whose loss mask disagrees with their role (the audit's leaks), and the records that have some."""
    total, where = 0, []
    for r in records:
        t = r["tokens"]
        n = sum(1 for role, m in zip(t["role"], t["loss_mask"]) if m != expected_mask(role, loss_masking))
        if n:
            total += n
            where.append(r["id"])
    return total, where


def _number(v: Any) -> float | None:
    try:
        x = float(v)  # python and numpy numbers, 0-d tensors
    except (TypeError, ValueError):
        return None
    return x


class StepRecorder:
    """The run directory of a veRL run: records, metrics, events, run.json."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        config: dict[str, Any],
        total_steps: int,
        tokenizer: Any,
        stdout: Any = None,
        pid: int | None = None,
        settings: dict[str, Any] | None = None,
    ):
        self.writer = RunWriter(
            run_dir, config, versions(), total_steps, stdout=stdout if stdout is not None else open(os.devnull, "w")
        )
        self.writer.run["engine"] = "verl"
        # what the training records' rollout_logprob are (overrides.rollout_logprob_kind; the audit reads it), and
        # run.json's `verl`: those and the settings prepare chose (the attention and why)
        kind, _mode = rollout_logprob_kind(config) if config else (None, None)
        top_p = float((config.get("rollout") or {}).get("top_p", 1.0)) if config else 1.0
        self.logprob_meta = (
            {"rollout_logprob_kind": kind, **({"rollout_top_p": top_p} if kind == "processed" else {})} if kind else {}
        )
        self.writer.run["verl"] = {**(settings or {}), **self.logprob_meta}
        if pid:
            self.writer.run["pid"] = pid
        self.writer._write_run()
        self.tokenizer = tokenizer
        # train.save_rollouts false does not stop this engine's recording (overrides.py says so): train.record does
        settings = dataclasses.replace(RecordSettings.of(config), enabled=True)
        self.recorder = Recorder(
            self.writer.dir,
            settings,
            texts=lambda ids: our_tokenizer(tokenizer).token_texts(ids),
            warn=self.writer.warning,
        )
        self.loss_masking = bool((config.get("algorithm") or {}).get("loss_masking", True))
        self.max_obs_length = int((config.get("rollout") or {}).get("max_obs_length", 0))
        self.pending: dict[int, dict[str, float]] = defaultdict(dict)

    @property
    def run_id(self) -> str:
        return self.writer.run["id"]

    def rollouts(
        self,
        batch: Any,
        step: int,
        split: str = "train",
        inputs: dict[str, Any] | None = None,
        max_per_group: int | None = None,
    ) -> None:
        """Hands the step's rollouts to the recorder (recorder.py: the checks and train.record's choice here,
        vectorised; the records built and written on its writer thread); our metrics for the step wait for veRL's
        (`metrics`)."""
        rows, trajs = trajectories_from_batch(batch, self.tokenizer, inputs=inputs, max_per_group=max_per_group)
        prefix = "val/" if split == "val" else ""
        # Validation: the held-out metrics every engine writes (EM, by hops, by kind, …); training: the rollouts'.
        m = (held_out_metrics(trajs) if split == "val" else rollout_metrics(trajs, prefix=prefix)) if trajs else {}
        td = batch.batch
        checks: dict[str, float] = {}
        flags, leaked = (
            batch_flags(td, rows, trajs, self.loss_masking, checks if split == "train" else None) if rows else ([], [])
        )
        m[f"{prefix}mask/leaked_tokens"] = float(sum(leaked))
        if sum(leaked):
            where = [
                f"{self.run_id}:{split}:{step}:{trajs[k].group}:{trajs[k].sample}" for k, n in enumerate(leaked) if n
            ]
            self.writer.warning(
                f"step {step} ({split}): {sum(leaked)} tokens in {len(where)} trajectories have a loss mask that disagrees with their role (first: {where[0]}); the mask veRL trained with is recorded as is",
                step=step,
                leaks=int(sum(leaked)),
            )
        nt = dict(inputs or {}) | dict(batch.non_tensor_batch)
        sas = nt.get("sas")
        cut = {"truncated": 0, "longest": 0}
        if sas is not None:
            for _, _, _, i in rows:
                x = sas[i] or {}
                cut["truncated"] += int(x.get("obs_truncated", 0) or 0)
                cut["longest"] = max(cut["longest"], int(x.get("obs_longest", 0) or 0))
        message = truncation_warning(cut, self.max_obs_length)
        if message:
            self.writer.warning(f"step {step} ({split}): {message}", step=step)
        failed = [t for t in trajs if t.reward_error]
        if failed:
            self.writer.warning(
                f"step {step}: the reward module failed on {len(failed)} of {len(trajs)} trajectories (scored 0 for training): {failed[0].reward_error}",
                failed=len(failed),
            )
        run_id, tokenizer = self.run_id, self.tokenizer
        meta = self.logprob_meta if split == "train" else None  # what kind of log-probs the sampler's are

        def build(keep: list[int]) -> StepData:
            tok = our_tokenizer(tokenizer)
            records = [
                record_of_row(td, nt, rows[k], trajs[k], tok, run_id=run_id, step=step, split=split, meta=meta)
                for k in keep
            ]
            _, cols = token_store.columns_from_records(records)
            return StepData([{k: v for k, v in r.items() if k != "tokens"} for r in records], cols)

        name = f"{'val-' if split == 'val' else ''}step-{step:06d}"
        m.update(
            {
                f"{prefix}{k}": v
                for k, v in self.recorder.submit(
                    StepJob(
                        name,
                        step,
                        split,
                        len(trajs),
                        [t.group for t in trajs],
                        flags,
                        build,
                        stats=checks if split == "train" else None,
                    )
                ).items()
            }
        )
        self.pending[step].update(m)
        if split == "val":
            self.writer.event(
                "eval",
                step=step,
                metrics={k: v for k, v in m.items() if k.startswith("val/") and not k.startswith("val/record/")},
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Waits for the writer to write what it was handed (tests; the end of a run)."""
        return self.recorder.flush(timeout)

    def close(self) -> None:
        """The end of a run: the writer writes what it holds; run.json says what was recorded."""
        if not self.recorder.close(timeout=600):
            self.writer.warning(
                "the rollout writer did not finish within 10 minutes; the last steps' rollouts may be missing"
            )
        self.writer.run["record"] = self.recorder.summary()

    def metrics(self, step: int, data: dict[str, Any]) -> None:
        """veRL's metrics for a step (its Tracking.log), with ours: metrics.jsonl, a `metrics` event, run.json's step."""
        row = {k: x for k, v in data.items() if (x := _number(v)) is not None}
        row.update(self.pending.pop(step, {}))
        self.writer.metrics(step, row)
        if step > 0:
            self.writer.event("metrics", step=step, metrics={k: row[k] for k in SUMMARY_KEYS if k in row})
            self.writer.run["record"] = self.recorder.summary()
            self.writer.set_step(step)


# -- the trainer -------------------------------------------------------------------------------------------------
class StopRequested(Exception):
    pass


class _ValidationTap:
    """The rollout manager, forwarding everything; validation batches are also recorded."""

    def __init__(self, inner: Any, on_validation: Any):
        self._inner = inner
        self._on_validation = on_validation

    def generate_sequences(self, batch: Any) -> Any:
        out = self._inner.generate_sequences(batch)
        if batch.meta_info.get("validate"):
            self._on_validation(batch, out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingTrainer(RayPPOTrainer):
    """veRL's PPO trainer, unchanged, writing our run directory (config: `sas.run_dir`, `sas.config` — the prepared
    run config's JSON file, kept as run.json's config: paths absolute, builtin:NAME data named —, `sas.driver_pid`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        sas = self.config.get("sas") or {}
        if not sas.get("run_dir"):
            raise ValueError(
                "RecordingTrainer needs +sas.run_dir=<run directory> in the veRL config (overrides.py writes it)"
            )
        config = json.loads(Path(sas["config"]).read_text(encoding="utf-8")) if sas.get("config") else {}
        self.run_dir = Path(sas["run_dir"])
        settings = {k: sas[k] for k in ("attention", "attention_why") if sas.get(k)}
        self.recorder = StepRecorder(
            self.run_dir,
            config,
            self.total_training_steps,
            self.tokenizer,
            pid=sas.get("driver_pid"),
            settings=settings,
        )
        self._validating = False
        self._saved_step = -1

    @property
    def writer(self) -> RunWriter:
        return self.recorder.writer

    def init_workers(self) -> None:
        super().init_workers()
        self.async_rollout_manager = _ValidationTap(self.async_rollout_manager, self._record_validation)

    def _record_validation(self, batch: Any, out: Any) -> None:
        n = self.config.actor_rollout_ref.rollout.val_kwargs.n
        self.recorder.rollouts(out, self.global_steps, "val", inputs=batch.non_tensor_batch, max_per_group=n)

    def _load_checkpoint(self) -> Any:
        out = super()._load_checkpoint()
        if self.global_steps:
            self.writer.truncate_after(self.global_steps)
            self.recorder.recorder.truncate_after(self.global_steps)
            self.writer.log(f"resumed from veRL's checkpoint at step {self.global_steps}")
        self.writer.event(
            "started",
            step=self.global_steps,
            total=self.total_training_steps,
            resumed=bool(self.global_steps),
            engine="verl",
            model=self.config.actor_rollout_ref.model.path,
            train_examples=len(self.train_dataset),
            eval_examples=len(self.val_dataset) if self.val_dataset is not None else 0,
        )
        return out

    def _get_gen_batch(self, batch: Any) -> Any:
        if not self._validating:
            self.writer.progress(self.global_steps, self.total_training_steps, "rollout")
        return super()._get_gen_batch(batch)

    def _validate(self, merged: bool = False) -> Any:
        self.writer.progress(self.global_steps, self.total_training_steps, "eval")
        self._validating = True
        try:
            return super()._validate(merged)
        finally:
            self._validating = False

    def _compute_old_log_prob(self, batch: Any) -> Any:
        self.writer.progress(self.global_steps, self.total_training_steps, "update")
        return super()._compute_old_log_prob(batch)

    def _save_checkpoint(self) -> None:
        self.recorder.flush()  # the checkpoint never runs ahead of the recorded rollouts (a full disk fails the run here)
        super()._save_checkpoint()
        self._saved_step = self.global_steps
        self.writer.event(
            "checkpoint",
            step=self.global_steps,
            path=os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"),
        )

    def _log_rollout_data(
        self, batch: Any, reward_extra_infos_dict: dict, timing_raw: dict, rollout_data_dir: str
    ) -> None:
        # a user's own job asked for veRL's text dump too
        if (self.config.get("sas") or {}).get("keep_rollout_data_dir"):
            super()._log_rollout_data(batch, reward_extra_infos_dict, timing_raw, rollout_data_dir)
        self.recorder.rollouts(batch, self.global_steps, "train")
        if (self.run_dir / STOP_FILE).exists() and self.global_steps < self.total_training_steps:
            if self._saved_step != self.global_steps:
                self._save_checkpoint()
            raise StopRequested()

    def fit(self) -> None:
        import verl.utils.tracking as tracking

        original = tracking.Tracking
        recorder = self.recorder

        class RecordingTracking(original):  # type: ignore[misc, valid-type]
            def log(self, data: dict[str, Any], step: int, backend: Any = None) -> None:
                super().log(data=data, step=step, backend=backend)
                recorder.metrics(step, data)

        tracking.Tracking = RecordingTracking
        w = self.writer
        try:
            super().fit()
            recorder.close()
            w.finish("finished")
            w.event("finished", status="finished", step=int(w.run.get("step", 0)))
        except StopRequested:
            recorder.metrics(self.global_steps, {})  # the stopped step's own metrics never reach Tracking.log
            recorder.close()
            reason = (
                (self.run_dir / STOP_FILE).read_text(encoding="utf-8").strip()
                if (self.run_dir / STOP_FILE).exists()
                else ""
            )
            w.finish("stopped", stop_reason=reason if reason in ("signal", "host-gone") else "signal")
            w.event("finished", status="stopped", step=self.global_steps)
        except BaseException as e:
            w.fail(e, traceback.format_exc(), recorder.close)
            raise
        finally:
            tracking.Tracking = original
            w.close()
