"""`python -m search_agent_trainer.engines.verl.retrieve_benchmark --env-url URL`: an agent-loop worker's searches
against the real env server, one `/retrieve` request per query (the agent loop before batching.py) vs coalesced
(batching.py), in the same process on the same queries. Prints one JSON line: queries/s for each, their ratio, the
requests each sent, and whether every query got the same hits both ways.

The worker is modelled as veRL runs it: `--trajectories` coroutines on one event loop (Search-R1's 2,560 trajectories
a turn over 8 agent-loop workers is 320 each), each making `--turns` searches of one query. `burst`: every
trajectory's turn ends at once (the searches all arrive together); `staggered`: the turns end spread over
`--spread-ms` (vLLM finishing sequences one by one). No veRL import: this runs in the trainer's own Python.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

from ...env_client import EnvClient
from .batching import env_batchers

WORDS = "who founded the observatory museum river town born province author wrote library academy guild harbour bridge".split()


def query(t: int, turn: int) -> str:
    return " ".join(WORDS[(t * k + turn * 5 + k) % len(WORDS)] for k in (1, 3, 7))


async def worker(
    env_url: str, trajectories: int, turns: int, topk: int, spread_s: float, batched: bool, seed: int
) -> tuple[float, dict[str, list[Any]], int]:
    """(seconds, hits per query, /retrieve requests sent) for one worker's trajectories."""
    loop = asyncio.get_running_loop()
    client = EnvClient(env_url)
    rng = random.Random(seed)
    delays = [[rng.uniform(0, spread_s) for _ in range(turns)] for _ in range(trajectories)]
    hits: dict[str, list[Any]] = {}
    sent = 0

    async def one(t: int) -> None:
        nonlocal sent
        for turn in range(turns):
            if spread_s:
                await asyncio.sleep(delays[t][turn])  # the turn's generation ends
            q = query(t, turn)
            if batched:
                got = (await env_batchers(env_url).retrieve([q], topk))[0]
            else:
                got = (await loop.run_in_executor(None, client.retrieve, [q], topk))[0]
                sent += 1
            hits[f"{t}:{turn}"] = [h["document"]["id"] for h in got]

    t0 = time.perf_counter()
    await asyncio.gather(*(one(t) for t in range(trajectories)))
    seconds = time.perf_counter() - t0
    if batched:
        sent = env_batchers(env_url).retriever(topk).requests
    return seconds, hits, sent


def measure(env_url: str, trajectories: int, turns: int, topk: int, spread_s: float, rounds: int) -> dict[str, Any]:
    best = {"one_per_query": float("inf"), "coalesced": float("inf")}
    requests: dict[str, int] = {}
    same = True
    for r in range(rounds):  # alternated, best of each: the machine's load changes between rounds
        out = {}
        for name, batched in (("one_per_query", False), ("coalesced", True)):
            s, hits, sent = asyncio.run(worker(env_url, trajectories, turns, topk, spread_s, batched, seed=r))
            best[name] = min(best[name], s)
            requests[name] = sent
            out[name] = hits
        same = same and out["one_per_query"] == out["coalesced"]
    q = trajectories * turns
    qps = {k: q / v for k, v in best.items()}
    return {
        "queries": q,
        "queries_per_s": qps,
        "ratio": qps["coalesced"] / qps["one_per_query"],
        "requests": requests,
        "same_hits": same,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env-url", required=True)
    ap.add_argument("--trajectories", type=int, default=320)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--spread-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    EnvClient(a.env_url).retrieve(["warm up"], a.topk)
    result = {
        "trajectories": a.trajectories,
        "turns": a.turns,
        "burst": measure(a.env_url, a.trajectories, a.turns, a.topk, 0.0, a.rounds),
        "staggered": {
            "spread_ms": a.spread_ms,
            **measure(a.env_url, a.trajectories, a.turns, a.topk, a.spread_ms / 1000, a.rounds),
        },
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
