"""A batch bigger than one env-server request may hold (Search-R1's trainer at its defaults searches 2,560 queries a
turn; our rollout sends a whole wave): the client reads the server's limits from /health and sends the batch as
several requests within them, one after another, the results in order (against the real env server, started with
small limits so the test stays fast)."""

from __future__ import annotations

import json

from conftest import DEMO, EnvServer
from search_agent_trainer.env_client import DEFAULT_LIMITS, EnvClient

QUERIES = [f"who founded the {w}" for w in ("observatory", "museum", "library", "academy", "school")] + [
    "river",
    "born in the town",
    "the capital of the province",
    "zzzz nothing matches",
    "a poem about the sea",
]


def test_retrieve_and_reward_are_split_within_the_servers_limits_in_order():
    s = EnvServer(
        "--corpus",
        str(DEMO / "corpus.jsonl"),
        "--workers",
        "1",
        "--max-queries",
        "3",
        "--max-reward-items",
        "2",
    )
    try:
        env = EnvClient(s.url)
        assert env.limits()["max_queries"] == 3 and env.limits()["max_reward_items"] == 2
        one_by_one = [env.retrieve([q], 4)[0] for q in QUERIES]
        env.take_stats()
        batched = env.retrieve(QUERIES, 4)
        assert batched == one_by_one, "the same hits, query for query, in order"
        assert env.take_stats()["env/retrieve_requests"] == 4.0, "10 queries, at most 3 a request"

        items = [{"response": f"<answer> {a} </answer>", "golden": ["Paris"]} for a in ("Paris", "Lyon") * 3]
        rewards = env.reward(items[:5])
        assert [r["reward"] for r in rewards] == [1.0, 0.0, 1.0, 0.0, 1.0]
        assert env.take_stats()["env/reward_requests"] == 3.0, "5 items, at most 2 a request"
    finally:
        s.close()


def test_bodies_stay_within_the_byte_limit():
    env = EnvClient("http://127.0.0.1:9")  # never called: the limits are given
    env._limits = {**DEFAULT_LIMITS, "max_body_bytes": 200}
    queries = [f"query {i} " + "x" * 40 for i in range(10)]
    batches = env._batches("queries", queries, 1000, topk=3, return_scores=True)
    bodies = [b for b, _ in batches]
    assert len(bodies) > 1 and all(len(b) <= 200 for b in bodies)
    sent = [json.loads(b) for b in bodies]
    assert [n for _, n in batches] == [len(body["queries"]) for body in sent]
    assert [q for body in sent for q in body["queries"]] == queries
    assert all(body["topk"] == 3 and body["return_scores"] is True for body in sent)
    # one value alone over the limit still goes (alone): the server's 413 then says why
    big = env._batches("items", [{"response": "y" * 500}, {"response": "z"}], 1000, metrics=True)
    assert [(len(json.loads(b)["items"]), n) for b, n in big] == [(1, 1), (1, 1)]
