"""The supervised warm start, on format only (`train.supervised_warmup`): a few hundred steps of next-token
cross-entropy on synthetic trajectories that have Search-R1's format and *random content*, so that a model trained
from scratch (the built-in tiny policy) can emit the tags before RL starts. It is never shown a golden answer and
never rewarded; whatever the policy knows about *which* query to send and *which* answer to give, it learns in RL.

A synthetic trajectory, for a training question:

    <think> let me search </think> <search> Q1 </search>  <information>…real results for Q1…</information>
    [<think> let me search again </think> <search> Q2 </search>  <information>…real results for Q2…</information>]
    <think> I can answer </think> <answer> A </answer>

- one or two searches (at random);
- Q1: a random span of 1–2 consecutive names in the question (e.g. "Quorhil", "Botanical" or "Quorhil Botanical"
  for "who founded the Quorhil Botanical Garden?"); Q2: a random span of 1–2 consecutive names in the first
  observation (`second_query: "any_name"`, the default — often Q1's own name again, since the passages found are
  about it), or one sharing no word with Q1 (`"new_name"`: what a second hop looks like, a new name found by the
  first search; which one is uniformly random among the observation's other names, so it is the second-hop entity
  only by chance);
- A: a random span of 1–2 consecutive names in the last observation (a "name": a capitalised word not seen in lower
  case, so not "The" or "Part"; which one is uniformly random, so it is the golden answer only by chance);
- the observations are the env server's real `/retrieve` results for those random queries, in Search-R1's format,
  and are masked out of the loss exactly as in RL (only the "generated" parts are trained on).

So the warm start teaches the tags and the mechanics of copying words from the question into a query and from the
passages into an answer, at random; the RL phase has to find out which words, and when to search twice. The demo's
held-out exact match is measured after the warm start (step 0) and the gain claimed is over it.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from .batch import by_length, make_batch
from .config import Section
from .data import Example
from .env_client import EnvClient
from .losses import Aggregation, agg_loss
from .pace import AT_STEP, FROM_STEP
from .pace import announce as announce_pace
from .policy import Policy, window_stats
from .rollout import Trajectory, answer_action, observation, search_action
from .run_writer import RunWriter

THINK_SEARCH = "<think> let me search </think>"
THINK_AGAIN = "<think> let me search again </think>"
THINK_ANSWER = "<think> I can answer </think>"


def _span(words: Sequence[str], rng: random.Random, max_len: int) -> str:
    n = rng.randint(1, min(max_len, len(words)))
    i = rng.randint(0, len(words) - n)
    return " ".join(words[i : i + n])


# Capitalised words that are not names: sentence starts, pronouns, the observation's own markup.
NOT_NAMES = {
    "Doc",
    "Title",
    "The",
    "A",
    "An",
    "It",
    "Its",
    "He",
    "She",
    "His",
    "Her",
    "They",
    "In",
    "On",
    "At",
    "Of",
    "By",
    "For",
    "This",
    "That",
}


class NameSpans:
    """Random spans of 1–2 consecutive names in a text. A 'name' is a capitalised word never seen in lower case in
    the texts seen so far (sentence-initial common words such as "Part" or "Visitors" are seen lower case
    elsewhere); which name is picked is uniformly random."""

    def __init__(self) -> None:
        self.lower: set[str] = set()

    def see(self, text: str) -> None:
        self.lower.update(w for w in re.findall(r"[a-z][a-z']*", text))

    def span(self, text: str, rng: random.Random, avoid: str = "") -> str | None:
        """A random name span of `text`; with `avoid`, one sharing no word with it where there is one."""
        words = re.findall(r"[A-Za-z][A-Za-z']*|[^A-Za-z\s]", text)
        runs: list[list[str]] = [[]]
        for w in words:
            if w[0].isupper() and w not in NOT_NAMES and w.lower() not in self.lower:
                runs[-1].append(w)
            elif runs[-1]:
                runs.append([])
        spans = [" ".join(run[i : i + n]) for run in runs for n in (1, 2) for i in range(len(run) - n + 1)]
        other = [sp for sp in spans if not set(sp.split()) & set(avoid.split())]
        return rng.choice(other or spans) if spans else None


def synthetic_trajectories(
    prompts: Sequence[tuple[str, list[int]]],
    questions: Sequence[str],
    tokenizer: Any,
    env: EnvClient,
    topk: int,
    rng: random.Random,
    names: NameSpans | None = None,
    new_name: bool = False,
    two_searches: float = 0.5,
    answer_from: str = "last",
) -> list[Trajectory]:
    """One synthetic trajectory per prompt (roles as in a rollout: generated, retrieved)."""
    names = names or NameSpans()
    for q in questions:
        names.see(q)
    # An even share draws as it always did (the demo's documented numbers are reproduced bit for bit).
    hops = (
        [rng.choice((1, 2)) for _ in prompts]
        if two_searches == 0.5
        else [2 if rng.random() < two_searches else 1 for _ in prompts]
    )
    q1 = [names.span(q, rng) or _span(re.findall(r"[\w']+", q), rng, 3) for q in questions]
    first = env.retrieve(q1, topk)
    obs1 = [observation(h) for h in first]
    for o in obs1:
        names.see(o)
    second_idx = [i for i, h in enumerate(hops) if h == 2]
    q2 = {i: names.span(obs1[i], rng, avoid=q1[i] if new_name else "") or q1[i] for i in second_idx}
    second = dict(zip(second_idx, env.retrieve([q2[i] for i in second_idx], topk))) if second_idx else {}
    out = []
    for i, (text, ids) in enumerate(prompts):
        t = Trajectory(Example(f"warmup-{i}", questions[i], ("",), "warmup"), i, 0, text, list(ids))

        def gen(s: str) -> None:
            t.append(tokenizer.encode(s), "generated", s)  # noqa: B023 - called in this iteration only

        def obs(s: str) -> None:
            t.append(tokenizer.encode(s), "retrieved", s)  # noqa: B023 - called in this iteration only

        gen(f"{THINK_SEARCH} {search_action(q1[i])}")
        obs(obs1[i])
        seen = [obs1[i]]
        if i in second:
            gen(f"{THINK_AGAIN} {search_action(q2[i])}")
            seen.append(observation(second[i]))
            obs(seen[-1])
        answer = names.span(seen[-1] if answer_from == "last" else rng.choice(seen), rng) or q1[i]
        gen(f"{THINK_ANSWER} {answer_action(answer)}")
        out.append(t)
    return out


@dataclass
class WarmStart:
    """What the warm start trains and reads: the policy (trained in place) and its tokenizer on `device`, the
    training questions with their prompts as fed, the env server (the observations are its real /retrieve results),
    the forward's autocast region (the builtin engine's `_ctx`), and the run's writer (progress and pace: the progress
    events count `total` steps) and stop flag."""

    cfg: Section
    policy: Policy
    tok: Any
    device: torch.device
    examples: Sequence[Example]
    prompts: Sequence[tuple[str, list[int]]]
    env: EnvClient
    autocast: Callable[[], AbstractContextManager[Any]]
    dtype: str  # what the run computes in, "bf16" (autocast) or "fp32": the pace's reference is of the same
    writer: RunWriter
    total: int
    stopped: Callable[[], bool]


def run_warmup(trainer: WarmStart, log: Callable[[str], None]) -> dict[str, float]:
    """Trains the policy for `train.supervised_warmup.steps` steps, or until a stop; returns `warmup/*` metrics
    (`warmup/steps`: the steps done)."""
    cfg = trainer.cfg
    w = cfg.train.supervised_warmup
    rng = random.Random(cfg.seed * 31 + 7)
    names = NameSpans()
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=w.lr)
    # Cosine decay to a tenth of the learning rate: the last steps settle the format tokens (a policy whose tags
    # break at temperature 1 wastes RL's first steps on format instead of content).
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: 0.1 + 0.45 * (1 + math.cos(math.pi * min(i, w.steps) / max(1, w.steps)))
    )
    losses: list[float] = []
    tokens = 0
    paced_from = None  # the clock at warm-start step FROM_STEP: the pace is measured from there (pace.py)
    trainer.policy.train()
    for step in range(1, w.steps + 1):
        if trainer.stopped():
            log(f"warm start stopped at step {step - 1}/{w.steps}")
            break
        idx = [rng.randrange(len(trainer.examples)) for _ in range(w.batch_size)]
        trajs = synthetic_trajectories(
            [trainer.prompts[i] for i in idx],
            [trainer.examples[i].question for i in idx],
            trainer.tok,
            trainer.env,
            cfg.retriever.topk,
            rng,
            names,
            new_name=w.second_query == "new_name",
            two_searches=w.two_searches,
            answer_from=w.answer_from,
        )
        batch = make_batch(trajs, trainer.tok.pad_id, loss_masking=True)
        agg = Aggregation.of("token-mean", batch.loss_mask)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for rows in by_length(batch, range(batch.size), cfg.optim.micro_batch_size):
            mb = batch.select(rows).to(trainer.device)
            with trainer.autocast():
                logp = window_stats(trainer.policy, mb, mb.loss_mask.bool()).logprob
                loss = agg_loss(-logp, mb.loss_mask, agg)
            loss.backward()
            total += float(loss.detach())
            tokens += int(mb.attention_mask.sum())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(total)
        pace = None
        if step == FROM_STEP:
            paced_from = time.perf_counter()
        elif step == AT_STEP and paced_from is not None:
            s_per_step = (time.perf_counter() - paced_from) / (AT_STEP - FROM_STEP)
            pace = announce_pace(trainer.writer, cfg, s_per_step, trainer.dtype)
        if step % 25 == 0 or step == w.steps or pace:
            trainer.writer.progress(
                0,
                trainer.total,
                "warmup",
                warmup_step=step,
                warmup_steps=w.steps,
                loss=round(total, 4),
                **({"pace": pace} if pace else {}),
            )
            log(f"warm start {step}/{w.steps}: loss {total:.3f}")
    trainer.policy.eval()
    tail = losses[-10:]
    # warmup/steps: the steps done (fewer than configured when a stop came first: the caller says it was not saved)
    return {
        **({"warmup/loss": sum(tail) / len(tail)} if tail else {}),
        "warmup/steps": float(len(losses)),
        "warmup/tokens": float(tokens),
    }
