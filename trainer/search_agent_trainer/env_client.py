"""The env server client (DESIGN §4.4): Search-R1's `/retrieve` (one batched request per turn) and our `/reward`
(the user's reward module; the trainer computes no reward itself). Standard library only (urllib), JSON over HTTP.

Connection failures are retried with backoff (the server may still be starting or briefly busy); an answer the
server gives (4xx/5xx) is not retried and its message is kept.

Latency: each /retrieve and /reward answer carries the env server's own time for it (a W3C `Server-Timing` header,
`retrieve;dur=ms`); the client keeps it with its own round trip (the wait the rollout saw: the server's time plus
queueing, HTTP and JSON) and counts the attempts that timed out. `take_stats()` returns them as the step's metrics
(docs/trainer.md, "Env-server latency"): the server's is the truth about the retriever, the round trip about what
the trainer waited for.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any


class EnvError(RuntimeError):
    pass


# What one request may hold when the server does not say (its /health `limits`; an older server's): its defaults of
# old, 1,024 queries and 65,536 reward items, and 16 MB of body. A batch over them goes as several requests, in order.
DEFAULT_LIMITS = {"max_queries": 1024, "max_reward_items": 65536, "max_body_bytes": 16 * 1024 * 1024}


class EnvClient:
    def __init__(self, url: str, timeout_s: float = 300.0, retries: int = 5, backoff_s: float = 0.5):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.seconds = {"retrieve": 0.0}  # time spent in /retrieve (the rollout's environment share)
        # (server ms, round-trip ms)
        self._calls: dict[str, list[tuple[float | None, float]]] = {
            "retrieve": [],
            "reward": [],
        }
        self._timeouts = {"retrieve": 0, "reward": 0}
        self._limits: dict[str, int] | None = None

    def limits(self) -> dict[str, int]:
        """What one request may hold (`max_queries`, `max_reward_items`, `max_body_bytes`): the server's /health
        `limits`, asked once; the old defaults (DEFAULT_LIMITS) where it gives none or cannot be asked."""
        if self._limits is None:
            limits = dict(DEFAULT_LIMITS)
            try:
                advertised = self.health().get("limits")
            except EnvError:
                advertised = None
            if isinstance(advertised, dict):
                for key in limits:
                    v = advertised.get(key)
                    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                        limits[key] = v
            self._limits = limits
        return self._limits

    def _batches(self, key: str, values: list[Any], max_count: int, **rest: Any) -> list[tuple[bytes, int]]:
        """The request bodies `{key: values[i:j], **rest}` that send `values` in order, each within `max_count`
        values and (but for a single value that alone exceeds it) the server's body limit, with how many values
        each holds (its answer must have as many)."""
        limit = self.limits()["max_body_bytes"]
        head = json.dumps(rest)[:-1] + (", " if rest else "") + json.dumps(key) + ": ["
        encoded = [json.dumps(v).encode("utf-8") for v in values]
        fixed = len(head.encode("utf-8")) + 2
        bodies: list[tuple[bytes, int]] = []
        start, size = 0, fixed
        for i, e in enumerate(encoded):
            grow = len(e) + (1 if i > start else 0)
            if i > start and (i - start >= max_count or size + grow > limit):
                bodies.append((head.encode("utf-8") + b",".join(encoded[start:i]) + b"]}", i - start))
                start, size, grow = i, fixed, len(e)
            size += grow
        bodies.append((head.encode("utf-8") + b",".join(encoded[start:]) + b"]}", len(values) - start))
        return bodies

    def take_stats(self) -> dict[str, float]:
        """The env-server metrics since the last call (then reset): per endpoint, the p50/p99 of the server's own time
        (`env/retrieve_ms/p50`, `…/p99`: Server-Timing) and of the round trip (`env/retrieve_wait_ms/…`), the number
        of requests, and the attempts that timed out (`env/retrieve_timeouts`). Nothing for an endpoint not called."""
        out: dict[str, float] = {}
        for name, calls in self._calls.items():
            if calls or self._timeouts[name]:
                out[f"env/{name}_timeouts"] = float(self._timeouts[name])
            if not calls:
                continue
            out[f"env/{name}_requests"] = float(len(calls))
            server = [s for s, _ in calls if s is not None]
            for key, xs in ((f"env/{name}_ms", server), (f"env/{name}_wait_ms", [w for _, w in calls])):
                if xs:
                    out[f"{key}/p50"] = percentile(xs, 50)
                    out[f"{key}/p99"] = percentile(xs, 99)
        self._calls = {k: [] for k in self._calls}
        self._timeouts = {k: 0 for k in self._timeouts}
        return out

    def _call(self, method: str, path: str, body: Any = None, data: bytes | None = None) -> Any:
        if data is None and body is not None:
            data = json.dumps(body).encode("utf-8")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(
                self.url + path,
                data=data,
                method=method,
                headers={"content-type": "application/json", "x-client-pid": str(os.getpid())},
            )
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as res:
                    out = json.loads(res.read().decode("utf-8"))
                    name = path.strip("/")
                    if name in self._calls:
                        self._calls[name].append(
                            (server_ms(res.headers.get("server-timing"), name), (time.perf_counter() - t0) * 1000)
                        )
                    return out
            except urllib.error.HTTPError as e:
                try:
                    message = json.loads(e.read().decode("utf-8")).get("error", "")
                except Exception:
                    message = ""
                raise EnvError(f"{method} {self.url}{path}: HTTP {e.code}{': ' + message if message else ''}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = e
                name = path.strip("/")
                if name in self._timeouts and (
                    isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError)
                ):
                    self._timeouts[name] += 1
                if attempt < self.retries:
                    time.sleep(self.backoff_s * (2**attempt))
        reason = getattr(last, "reason", last)
        raise EnvError(
            f"{method} {self.url}{path}: the env server did not answer after {self.retries + 1} attempts ({reason})"
        )

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        """Per query, the hits `{document: {id, contents}, score}` (Search-R1's request with return_scores). A batch
        over what one request may hold (`limits()`) goes as several requests, one after another, results in order."""
        if not queries:
            return []
        t0 = time.perf_counter()
        bodies = self._batches("queries", queries, self.limits()["max_queries"], topk=topk, return_scores=True)
        results: list[list[dict[str, Any]]] = []
        for data, count in bodies:
            out = self._call("POST", "/retrieve", data=data)
            result = out.get("result") if isinstance(out, dict) else None
            if not isinstance(result, list) or len(result) != count:
                got = f"{len(result)}" if isinstance(result, list) else type(result).__name__
                raise EnvError(f"POST {self.url}/retrieve: expected {count} result lists, got {got}")
            results.extend(result)
        self.seconds["retrieve"] += time.perf_counter() - t0
        return results

    def reward(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per item `{reward, parts, metrics, error?}`; `reward` is None when the module failed on the item. Split into
        requests within the server's limits (items, body bytes) like `retrieve`."""
        if not items:
            return []
        results: list[dict[str, Any]] = []
        for data, count in self._batches("items", items, self.limits()["max_reward_items"], metrics=True):
            out = self._call("POST", "/reward", data=data)
            part = out.get("results") if isinstance(out, dict) else None
            if not isinstance(part, list) or len(part) != count:
                raise EnvError(f"POST {self.url}/reward: expected {count} results")
            results.extend(part)
        return results


def server_ms(header: str | None, name: str) -> float | None:
    """The duration (ms) a `Server-Timing` header gives for `name` (`retrieve;dur=12.5`); None without one."""
    if not header:
        return None
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0] == name:
            for f in fields[1:]:
                m = re.fullmatch(r"dur=([0-9.eE+-]+)", f)
                if m:
                    return float(m.group(1))
    return None


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (linear interpolation between order statistics, numpy's default)."""
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def passages_to_string(hits: list[dict[str, Any]]) -> str:
    """Search-R1's `_passages2string`: `Doc {i}(Title: {title}) {text}\\n` per hit, title = the first line of
    `contents`, text = the rest."""
    out = []
    for i, hit in enumerate(hits):
        contents = hit["document"]["contents"] if "document" in hit else hit["contents"]
        lines = contents.split("\n")
        out.append(f"Doc {i + 1}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n")
    return "".join(out)
