"""Recording a user's own TRL GRPO script into our run directory, with one changed line:

    from search_agent_trainer.record.trl import RecordingGRPOTrainer as GRPOTrainer

(or, for a trainer built already — a subclass of GRPOTrainer of the user's own —, `record(trainer)` before
`trainer.train()`). The run directory goes beside the script's `output_dir` (`<output_dir>-sas/`; `sas_run_dir=` or
the `SAS_RUN_DIR` environment variable say otherwise): run.json, events.jsonl, metrics.jsonl and
rollouts/step-N.jsonl (val-step-N.jsonl for evaluation batches), as our engines write them (docs/run-format.md), so
`inspect`, `audit`, the inspector, the replay and the dashboard open it.

Where TRL 1.16 lets the tensors be seen (trl/trainer/grpo_trainer.py). Its callbacks get the state, the arguments and
the model, never the batch, so no callback can record tokens; the narrowest methods to wrap are:
- `_generate_and_score_completions(inputs)`: returns the batch the loss is computed on — `prompt_ids`/`prompt_mask`
  (left-padded), `completion_ids`/`completion_mask` (right-padded; the mask stops after the end of sequence and is 0
  on a truncated completion when `mask_truncated_completions`), `tool_mask` (0 on tool results, when tools run),
  `advantages` (one per sequence), `old_per_token_logps` (when the policy moved since sampling or vLLM sampled),
  `sampling_per_token_logps` (vLLM's), `ref_per_token_logps` (with a KL term);
- `_calculate_rewards(...)`: the rewards per function, gathered over processes (this process's rows are its slice);
- `log(logs)`: TRL's metrics (kept under `trl/…`, and under veRL's names where one exists, as our TRL engine does).
Records are built by record/tokens.py (the veRL recorder's way): the loss mask is TRL's (`completion_mask` ×
`tool_mask`); roles restate it (`generated` where trained, `retrieved` on tool results; `meta.roles` says so), so the
leak audit has nothing to compare here — open the run with the model's tokenizer (`audit --tokenizer`) for the chat
template's roles. A GRPO group is `num_generations` consecutive rows of the generation batch (TRL's sampler).
Processes: every process's records are gathered to rank 0, which writes the run directory.
"""

from __future__ import annotations

import math
import os
import platform
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer

from .. import __version__
from ..data import Example
from ..policy import Tokenizer
from ..run_writer import RunWriter, dumps
from .names import TRL_SCRIPT_NAMES as TRL_NAMES
from .tokens import token_record, trajectory_of

GOLDEN_COLUMNS = ("golden", "golden_answers", "answer", "answers", "ground_truth", "solution", "target")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def default_run_dir(output_dir: str) -> Path:
    return Path(os.environ.get("SAS_RUN_DIR") or f"{str(output_dir).rstrip('/')}-sas")


def _golden(row: dict[str, Any]) -> tuple[str, ...]:
    for k in GOLDEN_COLUMNS:
        v = row.get(k)
        if v is None:
            continue
        if isinstance(v, dict):
            v = v.get("target", v.get("ground_truth"))
        if isinstance(v, (list, tuple)):
            return tuple(str(x) for x in v)
        return (str(v),)
    return ()


def extract_question(prompt: str) -> str:
    """Search-R1's prompts end with `Question: …` (up to the line's end or a chat-template marker)."""
    at = prompt.rfind("Question:")
    if at < 0:
        return ""
    q = prompt[at + len("Question:") :].split("\n", 1)[0]
    return q.split("<|", 1)[0].strip()


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # conversational: the last user message holds the question
        for m in reversed(v):
            if isinstance(m, dict) and m.get("role") == "user":
                return str(m.get("content", ""))
    return ""


class Recorder:
    """The run directory of a TRL GRPOTrainer: built with the trainer, written by rank 0."""

    def __init__(self, trainer: GRPOTrainer, run_dir: str | os.PathLike[str] | None = None):
        self.trainer = trainer
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(trainer.args.output_dir)
        self.rank = trainer.accelerator.process_index
        processing = trainer.processing_class
        self.tok = Tokenizer(getattr(processing, "tokenizer", processing), "hf")
        self.writer: RunWriter | None = None
        self.rewards: torch.Tensor | None = None
        self.written: set[str] = set()
        self.trajs: list[Any] = []

    # -- run.json and events ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self.rank != 0 or self.writer is not None:
            return
        t, a = self.trainer, self.trainer.args
        model = getattr(getattr(t.model, "config", None), "_name_or_path", "") or ""
        if model and Path(model).is_dir():
            model = str(Path(model).resolve())  # a local directory: readers find its tokenizer (run.json's model.path)
        config = {
            "engine": "trl",
            "recorded_by": "search_agent_trainer.record.trl",
            "model": {"path": model},
            "output_dir": str(a.output_dir),
            "trl": {
                k: getattr(a, k, None)
                for k in (
                    "learning_rate",
                    "num_generations",
                    "per_device_train_batch_size",
                    "gradient_accumulation_steps",
                    "max_completion_length",
                    "beta",
                    "loss_type",
                    "temperature",
                    "max_steps",
                    "num_iterations",
                    "use_vllm",
                )
            },
        }
        versions = {
            "trainer": __version__,
            "trl": _version("trl"),
            "torch": _version("torch"),
            "transformers": _version("transformers"),
            "accelerate": _version("accelerate"),
            "python": platform.python_version(),
        }
        self.writer = RunWriter(
            self.run_dir, config, versions, int(getattr(a, "max_steps", 0) or 0), stdout=open(os.devnull, "w")
        )
        self.writer.event("started", step=0, total=int(getattr(a, "max_steps", 0) or 0), engine="trl", model=model)

    def finish(self, status: str, error: BaseException | None = None) -> None:
        if self.writer is None:
            return
        w = self.writer
        if error is not None:
            tb = "".join(traceback.format_exception(error))
            w.event("error", message=f"{type(error).__name__}: {error}", traceback=tb)
            w.finish("failed", {"message": f"{type(error).__name__}: {error}", "traceback": tb})
        else:
            w.finish(status)
        w.event("finished", status=status, step=int(w.run.get("step", 0)))
        w.close()
        self.writer = None

    # -- records ----------------------------------------------------------------------------------------------
    def record(self, out: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
        """The records of a generation batch (every process calls this: the gather is a collective)."""
        from accelerate.utils import gather_object

        t = self.trainer
        mode = "train" if t.model.training else "eval"
        split = "train" if mode == "train" else "val"
        step = int(t.state.global_step) + (1 if mode == "train" else 0)
        n_gen = t.num_generations if mode == "train" else getattr(t, "num_generations_eval", t.num_generations)
        B = int(out["prompt_ids"].shape[0])
        offset = t.accelerator.process_index * B
        rewards = None
        if self.rewards is not None:
            w = t.reward_weights.to(self.rewards.device)
            rewards = self.rewards[offset : offset + B]
            names = list(t.reward_func_names)
        mine = []
        run_id = self.run_dir.name
        for i in range(B):
            pm = out["prompt_mask"][i].bool()
            prompt_ids = out["prompt_ids"][i][pm].tolist()
            cm = out["completion_mask"][i]
            L = (
                int(cm.nonzero().max()) + 1
                if bool(cm.any())
                else int((out["completion_ids"][i] != self.tok.pad_id).sum())
            )
            ids = out["completion_ids"][i, :L].tolist()
            tool = out["tool_mask"][i, :L].tolist() if out.get("tool_mask") is not None else [1] * L
            mask = [int(c) * int(k) for c, k in zip(cm[:L].tolist(), tool)]
            roles = ["generated" if k else "retrieved" for k in tool]
            row = inputs[i] if i < len(inputs) else {}
            g = offset + i
            prompt_text = self.tok.decode(prompt_ids, keep_special=True)
            question = str(row.get("question") or extract_question(prompt_text) or _text(row.get("prompt")))
            example = Example(
                id=str(row.get("id", g // max(n_gen, 1))),
                question=question,
                golden=_golden(row),
                data_source=str(row.get("data_source", "")),
            )
            reward, parts = None, {}
            if rewards is not None:
                r = rewards[i]
                reward = float(torch.nansum(r * w))
                parts = {n: float(x) for n, x in zip(names, r.tolist()) if not math.isnan(x)}
            traj = trajectory_of(
                example,
                g // max(n_gen, 1),
                g % max(n_gen, 1),
                prompt_text,
                prompt_ids,
                ids,
                roles,
                self.tok.decode(ids, keep_special=True),
                reward=reward,
                reward_parts=parts,
            )
            adv = float(out["advantages"][i])
            arrays = {
                "rollout_logprob": out["sampling_per_token_logps"][i, :L].tolist()
                if out.get("sampling_per_token_logps") is not None
                else None,
                "logprob": out["old_per_token_logps"][i, :L].tolist()
                if out.get("old_per_token_logps") is not None
                else None,
                "ref_logprob": out["ref_per_token_logps"][i, :L].tolist()
                if out.get("ref_per_token_logps") is not None
                else None,
                "advantage": [adv] * L,
            }
            rec = token_record(
                traj, self.tok.token_texts, run_id=run_id, step=step, split=split, mask=mask, arrays=arrays, known=False
            )
            rec.pop("dialect", None)
            rec["meta"]["roles"] = "engine loss mask (TRL completion_mask × tool_mask)"
            rec["meta"]["trl"] = {"row": g, "mode": mode}
            mine.append((rec, traj))
        everyone = gather_object([mine]) if t.accelerator.num_processes > 1 else [mine]
        if self.rank != 0 or self.writer is None:
            return
        pairs = [p for part in everyone for p in part]
        name = f"{'val-' if split == 'val' else ''}step-{step:06d}"
        path = self.run_dir / "rollouts" / f"{name}.jsonl"
        # an evaluation runs several batches at one step: they append to its file; a training step writes it anew
        with open(path, "a" if name in self.written else "w", encoding="utf-8") as f:
            for rec, _ in pairs:
                f.write(dumps(rec) + "\n")
        self.written.add(name)
        if split == "train":
            self.trajs.extend(tr for _, tr in pairs)
            self.writer.progress(step, int(t.state.max_steps or 0), "update")

    def log(self, logs: dict[str, float]) -> None:
        """TRL's logs of the steps since the last: a metrics line (veRL's names where they exist, TRL's under trl/)."""
        if self.rank != 0 or self.writer is None:
            return
        from ..metrics import SUMMARY_KEYS, rollout_metrics

        step = int(self.trainer.state.global_step)
        m: dict[str, float] = rollout_metrics(self.trajs) if self.trajs else {}
        self.trajs = []
        for k, v in logs.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                m[f"trl/{k}"] = float(v)
                if k in TRL_NAMES:
                    m[TRL_NAMES[k]] = float(v)
        self.writer.metrics(step, m)
        self.writer.event("metrics", step=step, metrics={k: m[k] for k in SUMMARY_KEYS if k in m})
        self.writer.set_step(step)


def record(trainer: GRPOTrainer, run_dir: str | os.PathLike[str] | None = None) -> Recorder:
    """Makes a GRPOTrainer (or a subclass of the user's own) record: its methods wrapped on the instance."""
    rec = Recorder(trainer, run_dir)
    generate, rewards, log, train = (
        trainer._generate_and_score_completions,
        trainer._calculate_rewards,
        trainer.log,
        trainer.train,
    )

    def _calculate_rewards(inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        r = rewards(inputs, prompts, completions, completion_ids_list)
        rec.rewards = r.detach().float().cpu()
        return r

    def _generate_and_score_completions(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        rec.rewards = None
        out = generate(inputs)
        rec.record(out, inputs)
        return out

    def log_(logs: dict[str, float], start_time: float | None = None) -> None:
        log(logs, start_time)
        if "train_runtime" not in logs:  # the summary TRL logs once training ends
            rec.log(logs)

    def train_(*args: Any, **kwargs: Any) -> Any:
        rec.start()
        try:
            out = train(*args, **kwargs)
        except BaseException as e:
            rec.finish("failed", e)
            raise
        rec.finish("finished")
        return out

    trainer._calculate_rewards = _calculate_rewards  # type: ignore[method-assign]
    trainer._generate_and_score_completions = _generate_and_score_completions  # type: ignore[method-assign]
    trainer.log = log_  # type: ignore[method-assign]
    trainer.train = train_  # type: ignore[method-assign]
    trainer.sas_recorder = rec  # type: ignore[attr-defined]
    return rec


class RecordingGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer, unchanged, that also writes our run directory (`sas_run_dir`: where; default
    `<output_dir>-sas`)."""

    def __init__(self, *args: Any, sas_run_dir: str | os.PathLike[str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        record(self, sas_run_dir)
