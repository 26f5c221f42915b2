"""The env server's calls from veRL's workers, coalesced: concurrent `/retrieve` queries and `/reward` items of one
event loop go out as one request (no veRL import: the bench and the tests run it anywhere).

veRL runs a coroutine per trajectory (agent loops in an `AgentLoopWorker`, reward functions in a reward-loop
worker), each of which would otherwise make its own HTTP request: 2,560 single-query `/retrieve` calls a turn in
Search-R1's GRPO step, where Search-R1's own rollout sends one batched request per turn. A `Coalescer` gathers the
items that arrive within `BATCH_WAIT_S` of the first (or `BATCH_MAX` of them), sends them as one request on the
loop's default executor (the client is blocking urllib), and hands each caller its own result. The env server
answers any number of queries or items per request (DESIGN §4.4).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ...env_client import EnvClient

BATCH_WAIT_S = 0.005  # the gather window, from the first pending item
BATCH_MAX = 256  # items per request (a full window is sent at once)


class Coalescer:
    """Items submitted concurrently on one event loop, sent together by `send(items) -> results` (one result per
    item, in order). A failure of the request fails every caller in it."""

    def __init__(
        self, send: Callable[[list[Any]], list[Any]], wait_s: float = BATCH_WAIT_S, max_items: int = BATCH_MAX
    ):
        self.send = send
        self.wait_s = wait_s
        self.max_items = max_items
        self.pending: list[tuple[Any, asyncio.Future]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.requests = 0  # requests sent (tests and the bench read it)
        self.items = 0  # items sent

    async def submit(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((item, future))
        if len(self.pending) >= self.max_items:
            self._flush()
        elif self.timer is None:
            self.timer = loop.call_later(self.wait_s, self._flush)
        return await future

    async def submit_all(self, items: Sequence[Any]) -> list[Any]:
        return list(await asyncio.gather(*(self.submit(x) for x in items)))

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.pending = self.pending, []
        if batch:
            self.requests += 1
            self.items += len(batch)
            asyncio.get_running_loop().create_task(self._send(batch))

    async def _send(self, batch: list[tuple[Any, asyncio.Future]]) -> None:
        try:
            results = await asyncio.get_running_loop().run_in_executor(None, self.send, [item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batched request of {len(batch)} items got {len(results)} results")
        except Exception as e:  # noqa: BLE001 - every caller gets the failure
            for _, f in batch:
                if not f.done():
                    f.set_exception(e)
            return
        for (_, f), r in zip(batch, results):
            if not f.done():
                f.set_result(r)


class EnvBatchers:
    """One env server's coalescers on one event loop: `/reward` items, and `/retrieve` queries per top-k."""

    def __init__(self, env: EnvClient):
        self.env = env
        self.reward = Coalescer(env.reward)
        self._retrieve: dict[int, Coalescer] = {}

    def retriever(self, topk: int) -> Coalescer:
        c = self._retrieve.get(topk)
        if c is None:
            c = self._retrieve[topk] = Coalescer(lambda queries: self.env.retrieve(queries, topk))
        return c

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        """Per query its hits, as `EnvClient.retrieve`, the queries sent with those of the loop's other callers."""
        return await self.retriever(int(topk)).submit_all(list(queries))


_BATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, EnvBatchers]] = weakref.WeakKeyDictionary()


def env_batchers(env_url: str) -> EnvBatchers:
    """The running event loop's batchers for `env_url` (made on first use; they go with the loop)."""
    per_url = _BATCHERS.setdefault(asyncio.get_running_loop(), {})
    if env_url not in per_url:
        per_url[env_url] = EnvBatchers(EnvClient(env_url))
    return per_url[env_url]
