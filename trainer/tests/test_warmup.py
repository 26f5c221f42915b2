"""The format-only warm start's synthetic trajectories (warmup.py), against the real env server over the demo corpus:
one or two searches at random (or always two: `two_searches`), the second query's kind (`second_query`) and where the
random answer is read (`answer_from`), all `train.supervised_warmup` options."""

from __future__ import annotations

import json
import random
import re

from conftest import DEMO
from search_agent_trainer.env_client import EnvClient
from search_agent_trainer.tiny import TinyTokenizer
from search_agent_trainer.warmup import NameSpans, synthetic_trajectories


def _trajectories(env_url: str, **options):
    rows = [json.loads(l) for l in (DEMO / "train.jsonl").read_text(encoding="utf-8").splitlines()[:120]]
    questions = [r["question"] for r in rows]
    tok = TinyTokenizer.build(questions)
    prompts = [(q, tok.encode(q)) for q in questions]
    return synthetic_trajectories(
        prompts, questions, tok, EnvClient(env_url), 3, random.Random(3), NameSpans(), **options
    )


def _queries(new_name: bool, env_url: str) -> list[list[str]]:
    return [re.findall(r"<search> (.*?) </search>", t.response) for t in _trajectories(env_url, new_name=new_name)]


def test_two_searches_always_and_the_answer_read_from_either_search(demo_env):
    trajs = _trajectories(demo_env.url, new_name=True, two_searches=1.0, answer_from="any")
    assert all(len(re.findall(r"<search>", t.response)) == 2 for t in trajs), (
        "every synthetic trajectory searches twice"
    )
    # The answer is a name of one of the two observations; with "any", some answers come from the first only.
    where = []
    for t in trajs:
        obs = re.findall(r"<information>(.*?)</information>", t.response, re.S)
        answer = re.search(r"<answer> (.*?) </answer>", t.response).group(1)
        where.append((answer in obs[0], answer in obs[1]))
    assert all(a or b for a, b in where)
    assert sum(a and not b for a, b in where) > 10, "answers read from the first search's results"
    last = _trajectories(demo_env.url, new_name=True, two_searches=1.0)
    assert all(
        re.search(r"<answer> (.*?) </answer>", t.response).group(1)
        in re.findall(r"<information>(.*?)</information>", t.response, re.S)[-1]
        for t in last
    ), "answer_from last (the default)"


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
