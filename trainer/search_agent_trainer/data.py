"""The data: our JSONL question-answering datasets, the prompt, and a seeded, resumable sampler.

A dataset line is `{"id", "question", "golden": [..], "data_source", "meta"?}` (Search-R1's `golden_answers` is
accepted for `golden`; of `meta`, `hops` — the searches a question needs — is read, for the `val/*_by_hops/*`
metrics and `data.hops_mix`, `kind` — the question's type, e.g. HotpotQA's bridge/comparison — for `val/*_by_kind/*`,
and `bridge` — the entity (a string, or an array of its names) a multi-hop question's first search finds and a later
query must name, MuSiQue's intermediate answer — for `val/bridge_searched_by_hops/*`). A malformed line is reported
(file, line, field) and skipped; a file with no usable line is an error.
The prompt is the configured template with `{question}` replaced (Search-R1's base template by default), with the
tokenizer's chat template applied when it has one (policy.Tokenizer.prompt).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    golden: tuple[str, ...]
    data_source: str
    hops: int | None = None  # `meta.hops`: the searches a question needs (1, 2, …), where the dataset says it
    kind: str | None = None  # `meta.kind`: the question's type (a short name), where the dataset says it
    bridge: tuple[str, ...] | None = None  # `meta.bridge`: the entity a later search must name (its names), where said


class DatasetError(ValueError):
    pass


def _example(obj: Any) -> tuple[Example | None, str | None]:
    """An example, or the problem (naming the field)."""
    if not isinstance(obj, dict):
        return None, "expected a JSON object"
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        return None, "question: expected a non-empty string"
    golden = obj.get("golden", obj.get("golden_answers"))
    if isinstance(golden, str):
        golden = [golden]
    if not isinstance(golden, list) or not golden or not all(isinstance(g, str) for g in golden):
        return None, "golden: expected a non-empty array of strings"
    ident = obj.get("id")
    ds = obj.get("data_source", "")
    if not isinstance(ds, str):
        return None, "data_source: expected a string"
    hops, kind, bridge, problems = meta_fields(obj.get("meta"))
    if problems:
        return None, problems[0]
    return Example(
        id=str(ident) if ident is not None else "",
        question=q.strip(),
        golden=tuple(golden),
        data_source=ds,
        hops=hops,
        kind=kind,
        bridge=bridge,
    ), None


def meta_fields(meta: Any) -> tuple[int | None, str | None, tuple[str, ...] | None, list[str]]:
    """A dataset line's `meta.hops`, `meta.kind` and `meta.bridge` (stripped; a single bridge name as a one-name
    tuple), each None where absent or malformed, and the problems, naming the field: a JSONL line with one is skipped
    (`load_dataset`); a row of a user's own veRL parquet keeps the rest (`engines/verl/dataset.example_of`)."""
    if not isinstance(meta, dict):
        return None, None, None, []
    problems: list[str] = []
    hops, kind, bridge = meta.get("hops"), meta.get("kind"), meta.get("bridge")
    if hops is not None and (not isinstance(hops, int) or isinstance(hops, bool) or hops < 1):
        problems.append("meta.hops: expected a positive integer")
        hops = None
    if kind is not None and (not isinstance(kind, str) or not kind.strip()):
        problems.append("meta.kind: expected a non-empty string")
        kind = None
    if isinstance(bridge, str):
        bridge = [bridge]
    if bridge is not None and (
        not isinstance(bridge, (list, tuple))
        or not bridge
        or not all(isinstance(b, str) and normalize(b) for b in bridge)
    ):
        problems.append("meta.bridge: expected a name or a non-empty array of names (strings with a letter or digit)")
        bridge = None
    return hops, kind.strip() if kind else None, tuple(b.strip() for b in bridge) if bridge else None, problems


def normalize(text: str) -> str:
    """SQuAD's answer normalisation as Search-R1's exact match does it (veRL's qa_em `normalize_answer`; ours in
    src/core/rewards/normalize.ts): lower case, ASCII punctuation removed, the words a/an/the removed, whitespace
    collapsed."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def bridge_searched(example: Example, queries: Sequence[str]) -> float | None:
    """1.0 when a search after the first names the question's bridge entity (`meta.bridge`: any of its names, as whole
    normalised words of the query), else 0.0; None for a question without one. The behaviour a multi-hop question
    asks for: the second query names what the first search found (a policy that searches again with the question's
    words, or the first query again, scores 0)."""
    if not example.bridge:
        return None
    names = [f" {normalize(b)} " for b in example.bridge]
    return 1.0 if any(n in f" {normalize(q)} " for q in queries[1:] for n in names) else 0.0


def load_dataset(path: str, warn: Callable[[str], None] = lambda _m: None) -> list[Example]:
    """Every usable example of a JSONL file; each malformed line goes to `warn` as `file:line: field: message`."""
    out: list[Example] = []
    bad = 0
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: a directory, not a JSONL file") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot be read ({e.strerror or e})") from None
    with f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                bad += 1
                warn(f"{path}:{n}: not valid JSON ({e.msg}); line skipped")
                continue
            ex, problem = _example(obj)
            if ex is None:
                bad += 1
                warn(f"{path}:{n}: {problem}; line skipped")
                continue
            out.append(ex if ex.id else dataclasses.replace(ex, id=f"{n}"))
    if not out:
        raise DatasetError(f"{path}: no usable example ({bad} malformed lines)")
    return out


def render_prompt(template: str, question: str) -> str:
    """Search-R1's `make_prefix`: the template with the question in it (only `{question}` is replaced, so other
    braces in a template are kept as written)."""
    return template.replace("{question}", question)


class EpochSampler:
    """Batches of examples, each epoch a fresh seeded permutation; its state is a few integers, saved in checkpoints
    so a resumed run sees the same batches as an uninterrupted one."""

    def __init__(self, size: int, seed: int):
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.pos = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.pos >= self.size:
                self.epoch += 1
                self.pos = 0
                self._order = self._permutation(self.epoch)
            take = min(k - len(out), self.size - self.pos)
            out += self._order[self.pos : self.pos + take]
            self.pos += take
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed, "size": self.size}

    def load_state_dict(self, s: dict[str, int]) -> None:
        if s.get("size") != self.size:
            raise DatasetError(
                f"the checkpoint's dataset had {s.get('size')} examples, this one has {self.size}: resume with the same data"
            )
        self.seed, self.epoch, self.pos = s["seed"], s["epoch"], s["pos"]
        self._order = self._permutation(self.epoch)


class MixSampler:
    """Batches with a fixed share of each kind of question (`data.hops_mix`: hops → weight): each kind has its own
    seeded epoch permutation (an EpochSampler over its examples), and a batch of k takes round(k × share) of each, the
    rounding remainders going to the largest fractions (ties: fewer hops first). A kind with weight 0 is never
    sampled."""

    def __init__(self, hops: Sequence[int | None], mix: dict[int, float], seed: int):
        missing = sorted({i for i, h in enumerate(hops) if h is None})
        if missing:
            raise DatasetError(
                f"data.hops_mix needs meta.hops on every training example; example {missing[0] + 1} has none"
            )
        total = sum(mix.values())
        if total <= 0:
            raise DatasetError("data.hops_mix: the weights sum to 0")
        self.shares = {h: w / total for h, w in sorted(mix.items()) if w > 0}
        self.members = {h: [i for i, x in enumerate(hops) if x == h] for h in self.shares}
        empty = [h for h, m in self.members.items() if not m]
        if empty:
            raise DatasetError(f"data.hops_mix: no training example has meta.hops {empty[0]}")
        self.samplers = {h: EpochSampler(len(m), seed * 101 + h) for h, m in self.members.items()}

    def counts(self, k: int) -> dict[int, int]:
        exact = {h: k * s for h, s in self.shares.items()}
        out = {h: int(x) for h, x in exact.items()}
        for h in sorted(exact, key=lambda h: (-(exact[h] - out[h]), h))[: k - sum(out.values())]:
            out[h] += 1
        return out

    def next_batch(self, k: int) -> list[int]:
        return [self.members[h][j] for h, n in self.counts(k).items() for j in self.samplers[h].next_batch(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"hops_mix": {str(h): s.state_dict() for h, s in self.samplers.items()}}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        saved = s.get("hops_mix")
        if not isinstance(saved, dict) or set(saved) != {str(h) for h in self.samplers}:
            raise DatasetError(
                "the checkpoint was made with another data.hops_mix (or none): resume with the same config"
            )
        for h, sub in self.samplers.items():
            sub.load_state_dict(saved[str(h)])
