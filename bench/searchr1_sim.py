"""A Search-R1-scale run directory, written through the trainer's real recorder (recorder.Recorder → token_store).

Shaped like Search-R1's GRPO run (arXiv 2503.09516, its 3B/7B recipe): 512 questions × 5 samples = 2,560 trajectories
a step, each a prompt (~150-300 tokens) then two to four turns (a generated think + search, ~40-200 tokens; the
retrieved documents, three passages of ~100 words each, ~350-600 tokens), then the answer; 500-4,000 tokens a
trajectory (mean ~1,500); token ids drawn Zipf-like over Qwen2.5's vocabulary (151,936 ids); sampling-time,
trainer and reference log-probs on the generated tokens as a bf16 trainer against a vLLM sampler leaves them (Δ of
~1e-3, a few tokens a step beyond the band), entropies, GRPO advantages (one per sequence); a few planted leaks.
Each step is handed to the recorder exactly as the builtin trainer hands a step: (B, R) right-aligned window
tensors and per-row token ids and roles (recorder.columns_from_window), so the writer thread does the real work.

    python bench/searchr1_sim.py OUT_DIR [--steps 20] [--rollouts 2560] [--group 5] [--seed 0] [--compare-dumps]
                                         [--metrics-steps 1005] [--step-seconds 60]

Prints one JSON object: sizes, the recorder's cost on the (simulated) training thread per step (`submit`), the writer
thread's throughput, and with --compare-dumps the same step through today's JSONL path (`_records`-shaped records
and `run_writer.dumps`, single-threaded) for the ratio. Also writes metrics.jsonl for --metrics-steps steps (the
dashboard's series) and run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))

from search_agent_trainer import token_store as ts  # noqa: E402
from search_agent_trainer.recorder import (  # noqa: E402
    Recorder,
    RecordSettings,
    StepData,
    StepJob,
    columns_from_window,
    role_codes_of,
    rollout_flags,
)
from search_agent_trainer.run_writer import dumps, write_json_atomic  # noqa: E402

VOCAB = 151_936
WORDS = "the of and in a to was is for on as by with from his at an which that be first were city river film album born".split()


class Traj:
    """What the recorder reads of a trajectory (rollout.Trajectory's fields)."""

    __slots__ = (
        "example",
        "group",
        "sample",
        "prompt",
        "prompt_ids",
        "ids",
        "roles",
        "response",
        "finish",
        "turns",
        "searches",
        "dialect",
        "strict_actions",
        "reward",
        "reward_parts",
        "metrics",
        "reward_error",
        "retrieval",
    )

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class Example:
    __slots__ = ("id", "question", "golden", "data_source", "hops", "kind", "bridge")

    def __init__(self, i: int, rng: np.random.Generator):
        self.id = str(i)
        self.question = f"who was the {' '.join(rng.choice(WORDS, 6))} of question {i}?"
        self.golden = [f"answer {i}"]
        self.data_source = ["nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "musique"][i % 5]
        self.hops, self.kind, self.bridge = None, None, None


def words(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(WORDS, n))


def make_step(
    step: int, n: int, group: int, rng: np.random.Generator, zipf: np.ndarray
) -> tuple[list[Traj], dict[str, torch.Tensor]]:
    trajs: list[Traj] = []
    lengths = []
    for i in range(n):
        L = int(min(4000, 500 + rng.exponential(1000.0)))
        P = int(rng.integers(150, 300))
        turns = int(rng.integers(2, 5))
        budget = L - P
        # turns: generated then retrieved (not after the last), sizes proportional to Search-R1's
        gen = rng.integers(40, 200, turns).astype(float)
        ret = rng.integers(350, 600, turns - 1).astype(float)
        scale = budget / (gen.sum() + ret.sum())
        gen = np.maximum(4, (gen * scale).astype(int))
        ret = np.maximum(4, (ret * scale).astype(int))
        roles: list[str] = []
        pieces: list[str] = []
        for k in range(turns):
            roles += ["generated"] * int(gen[k])
            q = words(rng, 4)
            if k < turns - 1:
                pieces.append(f"<think> {words(rng, 12)} </think>\n<search> {q} </search>")
                roles += ["retrieved"] * int(ret[k])
                docs = "\n".join(f"Doc {d + 1}(Title: {words(rng, 2)}) {words(rng, 100)}" for d in range(3))
                pieces.append(f"\n\n<information>{docs}</information>\n\n")
            else:
                pieces.append(
                    f"<think> {words(rng, 10)} </think>\n<answer> {'answer ' + str(i // group) if rng.random() < 0.4 else words(rng, 2)} </answer>"
                )
        if rng.random() < 0.02:  # an invalid action and its feedback
            roles[P // 2 if False else len(roles) // 2] = "feedback"
        ex = Example(step * 100_000 + i // group, rng)
        reward = 1.0 if "answer " + str(i // group) in pieces[-1] else 0.0
        trajs.append(
            Traj(
                example=ex,
                group=i // group,
                sample=i % group,
                prompt=f"<|im_start|>user\nAnswer the given question. {words(rng, 150)} Question: {ex.question}<|im_end|>\n<|im_start|>assistant\n",
                prompt_ids=zipf[rng.integers(0, len(zipf), P)].tolist(),
                ids=zipf[rng.integers(0, len(zipf), len(roles))].tolist(),
                roles=roles,
                response="".join(pieces),
                finish="answer",
                turns=turns,
                searches=turns - 1,
                dialect="searchr1",
                strict_actions=False,
                reward=reward,
                reward_parts={"em": reward},
                metrics={"em": reward, "f1": reward, "format": 1.0},
                reward_error=None,
                retrieval=[],
            )
        )
        lengths.append(len(roles))
    B, R = n, max(lengths)
    r = torch.as_tensor(lengths)
    cols = torch.arange(R)[None, :] >= (R - r)[:, None]
    gen = torch.zeros(B, R)
    for i, t in enumerate(trajs):
        gen[i, R - len(t.roles) :] = torch.as_tensor([1.0 if x == "generated" else 0.0 for x in t.roles])
    g = torch.Generator().manual_seed(step)
    rollout = -torch.distributions.Exponential(torch.tensor(3.0)).sample((B, R)) * gen
    rollout = torch.where(gen.bool(), rollout, torch.zeros(B, R))
    old = rollout + torch.randn(B, R, generator=g) * 1e-3 * gen
    far = (torch.rand(B, R, generator=g) < 2e-6) & gen.bool()  # a few tokens beyond the band
    old = torch.where(far, rollout + 1.0, old)
    ref = old + torch.randn(B, R, generator=g) * 0.02 * gen
    ent = torch.distributions.Gamma(torch.tensor(1.5), torch.tensor(2.0)).sample((B, R)) * gen
    scores = torch.tensor([t.reward for t in trajs])
    grouped = scores.view(-1, group)
    adv = ((grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + 1e-6)).view(-1)
    loss = gen.clone()
    leak_rows = rng.choice(n, 2, replace=False)
    for i in leak_rows:  # planted: a retrieved token trained on
        t = trajs[i]
        k = t.roles.index("retrieved")
        loss[i, R - len(t.roles) + k] = 1.0
    return trajs, {
        "response_mask": cols.float(),
        "generated": gen,
        "loss": loss,
        "rollout": rollout,
        "old": old,
        "ref": ref,
        "entropy": ent,
        "adv": adv[:, None] * gen,
    }


def handoff(trajs: list[Traj], w: dict[str, torch.Tensor], step: int, run_id: str) -> StepJob:
    """What train.py's _record does: flags and the builder over the step's tensors (the same code paths)."""
    from search_agent_trainer.run_writer import rollout_record

    scored = {
        "rollout_logprob": (w["rollout"], w["generated"]),
        "logprob": (w["old"], w["loss"]),
        "ref_logprob": (w["ref"], w["loss"]),
        "advantage": (w["adv"], w["generated"]),
        "entropy": (w["entropy"], w["loss"]),
    }
    stats: dict[str, float] = {}
    flags = rollout_flags(
        valid=w["response_mask"],
        loss_mask=w["loss"],
        expected=w["generated"],
        logprob=w["old"],
        logprob_scored=w["loss"],
        rollout_logprob=w["rollout"],
        rollout_scored=w["generated"],
        numbers=list(scored.values()),
        stats=stats,
        generated=w["generated"],
    )

    def build(keep: list[int]) -> StepData:
        records = [rollout_record(trajs[i], run_id=run_id, step=step, split="train", tokens=None) for i in keep]
        codes = {i: role_codes_of(trajs[i].roles) for i in keep}
        cols = columns_from_window(
            rows=keep,
            seq_ids={i: trajs[i].prompt_ids + trajs[i].ids for i in keep},
            prompt_lengths=[len(t.prompt_ids) for t in trajs],
            role_codes=codes,
            window=scored,
            loss_mask=w["loss"],
        )
        return StepData(records, cols)

    return StepJob(f"step-{step:06d}", step, "train", len(trajs), [t.group for t in trajs], flags, build, stats=stats)


def dumps_path(
    trajs: list[Traj], w: dict[str, torch.Tensor], step: int, run_id: str, out: Path
) -> tuple[float, int, int]:
    """Today's path for the same step (train.py `_records` before the store, then RunWriter.rollouts): per-token
    lists (texts, ids, roles, masks, numbers rounded to 6 decimals, null where not scored) and one `dumps` a line."""
    from search_agent_trainer.run_writer import rollout_record

    t0 = time.perf_counter()
    R = w["old"].shape[1]
    texts = {}
    nbytes = 0
    tokens_total = 0
    with open(out, "w", encoding="utf-8") as f:
        for i, t in enumerate(trajs):
            P, r = len(t.prompt_ids), len(t.ids)
            ids = t.prompt_ids + t.ids
            for x in ids:
                if x not in texts:
                    texts[x] = f"w{x}"
            tokens = {
                "text": [texts[x] for x in ids],
                "ids": ids,
                "role": ["prompt"] * P + t.roles,
                "loss_mask": [0] * P + [int(v) for v in w["loss"][i, R - r :].tolist()],
            }

            def row(x: torch.Tensor, scored: torch.Tensor) -> list[float | None]:
                # called in this iteration only: i, r and P are this trajectory's
                xs, ss = x[i, R - r :].tolist(), scored[i, R - r :].tolist()  # noqa: B023
                return [None] * P + [round(float(v), 6) if s else None for v, s in zip(xs, ss)]  # noqa: B023

            tokens["rollout_logprob"] = row(w["rollout"], w["generated"])
            for key, x, s in (
                ("logprob", w["old"], w["loss"]),
                ("ref_logprob", w["ref"], w["loss"]),
                ("advantage", w["adv"], w["generated"]),
                ("entropy", w["entropy"], w["loss"]),
            ):
                tokens[key] = row(x, s)
            line = dumps(rollout_record(t, run_id=run_id, step=step, split="train", tokens=tokens)) + "\n"
            f.write(line)
            nbytes += len(line.encode("utf-8"))
            tokens_total += P + r
    return time.perf_counter() - t0, nbytes, tokens_total


METRIC_KEYS = [
    "audit/leaks",
    "audit/logprob/mean_abs_diff",
    "audit/logprob/ratio_outside",
    "audit/logprob/seq_ratio",
    "critic/score/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "reward/frac_zero_std_groups",
    "reward/errors",
    "mask/loss_tokens",
    "mask/loss_fraction",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "env/number_of_actions/mean",
    "env/finish_ratio",
    "env/number_of_valid_action",
    "env/ratio_of_valid_action",
    "env/number_of_valid_search",
    "mask/generated_tokens",
    "mask/retrieved_tokens",
    "mask/feedback_tokens",
    "reward/em/mean",
    "reward/f1/mean",
    "reward/format/mean",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/kl_loss",
    "actor/grad_norm",
    "actor/lr",
    "actor/skipped_updates",
    "timing_s/rollout",
    "timing_s/retrieve",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/update",
    "timing_s/step",
    "perf/rollout_tokens_per_s",
    "perf/update_tokens_per_s",
    "perf/throughput",
    "record/rollouts",
    "record/flagged",
    "record/queue",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rollouts", type=int, default=2560)
    ap.add_argument("--group", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare-dumps", action="store_true")
    ap.add_argument("--metrics-steps", type=int, default=1005)
    ap.add_argument(
        "--step-seconds", type=float, default=60.0, help="the training step the recording cost is a share of"
    )
    ap.add_argument("--queue", type=int, default=2)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: on a shared CPU, spinning OpenMP threads slow everything)",
    )
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    (out / "rollouts").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
    zipf = rng.choice(VOCAB, 1 << 20, p=p / p.sum()).astype(np.int64)  # a pool of ids drawn Zipf-like
    zipf = rng.permutation(VOCAB)[zipf]
    run_id = out.name
    cfg = {
        "engine": "builtin",
        "rollout": {"dialect": "searchr1", "batch_size": a.rollouts // a.group, "n": a.group},
        "train": {"steps": a.metrics_steps, "record": {"format": "store"}},
        "model": {"path": "Qwen/Qwen2.5-3B (simulated)"},
    }
    write_json_atomic(
        out / "run.json",
        {
            "v": 1,
            "id": run_id,
            "status": "running",
            "created": "2026-01-01T00:00:00.000Z",
            "engine": "builtin",
            "config": cfg,
            "step": 0,
            "total_steps": a.metrics_steps,
        },
    )
    rec = Recorder(
        out,
        RecordSettings(queue=a.queue),
        texts=lambda ids: [f"w{i}" for i in ids],
        warn=lambda msg, **k: print(f"warning: {msg}", file=sys.stderr),
    )
    submit_s, submit_cpu, tokens, gen_s = [], [], 0, 0.0
    t_all = time.perf_counter()
    first = None
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        trajs, w = make_step(step, a.rollouts, a.group, rng, zipf)
        gen_s += time.perf_counter() - t0
        tokens += sum(len(t.prompt_ids) + len(t.ids) for t in trajs)
        if a.compare_dumps and first is None:
            first = (trajs, w)
        t0, c0 = time.perf_counter(), time.thread_time()
        rec.submit(handoff(trajs, w, step, run_id))
        submit_s.append(time.perf_counter() - t0)
        submit_cpu.append(time.thread_time() - c0)
        # the training step goes on meanwhile (here: the next step's generation)
    t0 = time.perf_counter()
    rec.close()
    drain = time.perf_counter() - t0
    wall = time.perf_counter() - t_all
    summary = rec.summary()
    writer_s = rec.totals["write_seconds"]
    result = {
        "steps": a.steps,
        "rollouts": a.rollouts * a.steps,
        "tokens": tokens,
        "store_bytes": summary["recorded"]["bytes"],
        "bytes_per_token": summary["recorded"]["bytes"] / max(tokens, 1),
        "submit_s": {"median": float(np.median(submit_s)), "max": max(submit_s)},
        "submit_cpu_s": {"median": float(np.median(submit_cpu)), "max": max(submit_cpu)},
        "writer_s_per_step": writer_s / a.steps,
        "writer_cpu_s_per_step": rec.totals["write_cpu_seconds"] / a.steps,
        "load_average": list(os.getloadavg()),
        "writer_tokens_per_s": tokens / max(writer_s, 1e-9),
        "drain_s": drain,
        "wall_s": wall,
        "generate_s": gen_s,
        "record": summary,
        "step_seconds_assumed": a.step_seconds,
        "submit_share_of_step": float(np.median(submit_s)) / a.step_seconds,
        "submit_cpu_share_of_step": float(np.median(submit_cpu)) / a.step_seconds,
        "errors": rec.errors,
    }
    tok_bytes = 0
    for d in ts.committed_steps(out / "rollouts"):
        tok_bytes += (d / "tokens.parquet").stat().st_size + (d / "vocab.parquet").stat().st_size
    result["token_arrays_bytes_per_token"] = tok_bytes / max(tokens, 1)
    if a.compare_dumps and first is not None:
        trajs, w = first
        # the writer alone on the same step, on this thread (build + write), against dumps
        job = handoff(trajs, w, 1, run_id)
        t0, c0 = time.perf_counter(), time.thread_time()
        data = job.build(list(range(len(trajs))))
        data.cols.vocab = ts.vocab_of(data.cols.ids, lambda ids: [f"w{i}" for i in ids])
        ts.write_step(out / "compare", "step-000001", [ts._split_record(r) for r in data.records], data.cols)
        store_s, store_cpu = time.perf_counter() - t0, time.thread_time() - c0
        c0 = time.thread_time()
        dumps_s, dumps_bytes, dumps_tokens = dumps_path(trajs, w, 1, run_id, out / "compare" / "step-000001.jsonl")
        dumps_cpu = time.thread_time() - c0
        result["compare"] = {
            "tokens": dumps_tokens,
            "store_s": store_s,
            "dumps_s": dumps_s,
            "ratio": dumps_s / store_s,
            "store_cpu_s": store_cpu,
            "dumps_cpu_s": dumps_cpu,
            "cpu_ratio": dumps_cpu / store_cpu,
            "store_tokens_per_s": dumps_tokens / store_s,
            "dumps_tokens_per_s": dumps_tokens / dumps_s,
            "dumps_bytes_per_token": dumps_bytes / dumps_tokens,
        }
    # metrics.jsonl of a long run: what the dashboard charts
    mrng = np.random.default_rng(a.seed + 1)
    with open(out / "metrics.jsonl", "w", encoding="utf-8") as f:
        for s in range(a.metrics_steps + 1):
            row = {"step": s, "time": 1.7e9 + 60 * s, **{k: round(float(mrng.random()), 6) for k in METRIC_KEYS}}
            if s % 10 == 0:
                row.update(
                    {
                        f"val/{k}": round(float(mrng.random()), 6)
                        for k in ("em", "score", "searches_mean", "response_length/mean")
                    }
                )
            f.write(dumps(row) + "\n")
    write_json_atomic(
        out / "run.json",
        {
            "v": 1,
            "id": run_id,
            "status": "finished",
            "created": "2026-01-01T00:00:00.000Z",
            "engine": "builtin",
            "config": cfg,
            "step": a.steps,
            "total_steps": a.metrics_steps,
            "record": summary,
        },
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
