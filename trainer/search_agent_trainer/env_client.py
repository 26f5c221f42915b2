"""The env server client (DESIGN §4.4): Search-R1's `/retrieve` (one batched request per turn) and our `/reward`
(the user's reward module; the trainer computes no reward itself). Standard library only (urllib), JSON over HTTP.

Connection failures are retried with backoff (the server may still be starting or briefly busy); an answer the
server gives (4xx/5xx) is not retried and its message is kept.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any


class EnvError(RuntimeError):
    pass


class EnvClient:
    def __init__(self, url: str, timeout_s: float = 300.0, retries: int = 5, backoff_s: float = 0.5):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.seconds = {"retrieve": 0.0}  # time spent in /retrieve (the rollout's environment share)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers={"content-type": "application/json", "x-client-pid": str(os.getpid())})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as res:
                    return json.loads(res.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                try:
                    message = json.loads(e.read().decode("utf-8")).get("error", "")
                except Exception:
                    message = ""
                raise EnvError(f"{method} {self.url}{path}: HTTP {e.code}{': ' + message if message else ''}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = e
                if attempt < self.retries:
                    time.sleep(self.backoff_s * (2**attempt))
        reason = getattr(last, "reason", last)
        raise EnvError(f"{method} {self.url}{path}: the env server did not answer after {self.retries + 1} attempts ({reason})")

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        """Per query, the hits `{document: {id, contents}, score}` (Search-R1's request with return_scores)."""
        if not queries:
            return []
        t0 = time.perf_counter()
        out = self._call("POST", "/retrieve", {"queries": queries, "topk": topk, "return_scores": True})
        self.seconds["retrieve"] += time.perf_counter() - t0
        result = out.get("result")
        if not isinstance(result, list) or len(result) != len(queries):
            raise EnvError(f"POST {self.url}/retrieve: expected {len(queries)} result lists, got {type(result).__name__}")
        return result

    def reward(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per item `{reward, parts, metrics, error?}`; `reward` is None when the module failed on the item."""
        if not items:
            return []
        out = self._call("POST", "/reward", {"items": items, "metrics": True})
        results = out.get("results")
        if not isinstance(results, list) or len(results) != len(items):
            raise EnvError(f"POST {self.url}/reward: expected {len(items)} results")
        return results


def passages_to_string(hits: list[dict[str, Any]]) -> str:
    """Search-R1's `_passages2string`: `Doc {i}(Title: {title}) {text}\\n` per hit, title = the first line of
    `contents`, text = the rest."""
    out = []
    for i, hit in enumerate(hits):
        contents = hit["document"]["contents"] if "document" in hit else hit["contents"]
        lines = contents.split("\n")
        out.append(f"Doc {i + 1}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n")
    return "".join(out)
