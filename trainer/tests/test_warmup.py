"""The format-only warm start's synthetic trajectories (warmup.py), against the real env server over the demo corpus:
one or two searches at random, and the second query's kind (`train.supervised_warmup.second_query`)."""

from __future__ import annotations

import json
import random
import re

from conftest import DEMO
from search_agent_trainer.env_client import EnvClient
from search_agent_trainer.tiny import TinyTokenizer
from search_agent_trainer.warmup import NameSpans, synthetic_trajectories


def _queries(new_name: bool, env_url: str) -> list[list[str]]:
    rows = [json.loads(l) for l in (DEMO / "train.jsonl").read_text(encoding="utf-8").splitlines()[:120]]
    questions = [r["question"] for r in rows]
    tok = TinyTokenizer.build(questions)
    prompts = [(q, tok.encode(q)) for q in questions]
    trajs = synthetic_trajectories(prompts, questions, tok, EnvClient(env_url), 3, random.Random(3), NameSpans(), new_name=new_name)
    return [re.findall(r"<search> (.*?) </search>", t.response) for t in trajs]


def test_the_second_query_is_a_name_the_first_search_found_and_with_new_name_never_the_first_query_again(demo_env):
    for new_name in (False, True):
        queries = _queries(new_name, demo_env.url)
        two = [q for q in queries if len(q) == 2]
        assert 0.35 < len(two) / len(queries) < 0.65, "one or two searches at random"
        repeats = sum(bool(set(q1.split()) & set(q2.split())) for q1, q2 in two) / len(two)
        if new_name:
            assert repeats == 0, two
        else:
            assert repeats > 0.2, "any_name: the passages found are about Q1's name, so Q2 often repeats it"
