"""The env server's latency reported into the run's metrics (issue 46, run health): the real env server times each
/retrieve and /reward itself and says so in a Server-Timing header; the trainer's client keeps it beside its own round
trip, counts timed-out attempts, and `take_stats()` gives a step's p50/p99 as metrics (env/retrieve_ms/p99, …)."""

from __future__ import annotations

import socket
import threading

from search_agent_trainer.env_client import EnvClient, EnvError, percentile, server_ms


def test_server_timing_header_parsing():
    assert server_ms("retrieve;dur=12.5", "retrieve") == 12.5
    assert server_ms('db;dur=3, retrieve;desc="bm25";dur=0.25', "retrieve") == 0.25
    assert server_ms("reward;dur=4", "retrieve") is None
    assert server_ms(None, "retrieve") is None


def test_percentiles_interpolate_like_numpy():
    assert percentile([1.0], 99) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert abs(percentile([float(x) for x in range(1, 101)], 99) - 99.01) < 1e-9


def test_the_real_env_server_reports_its_retrieve_and_reward_times(demo_env):
    env = EnvClient(demo_env.url)
    assert env.take_stats() == {}, "nothing called yet: no metrics"
    for q in ("Koben", "Paris", "river"):
        env.retrieve([q], 2)
    env.reward([{"response": "<answer> x </answer>", "golden": ["x"]}])
    m = env.take_stats()
    assert m["env/retrieve_requests"] == 3.0 and m["env/retrieve_timeouts"] == 0.0
    # the server's own time, and the round trip that contains it
    assert 0 <= m["env/retrieve_ms/p50"] <= m["env/retrieve_ms/p99"]
    assert m["env/retrieve_wait_ms/p99"] >= m["env/retrieve_ms/p50"]
    assert m["env/reward_requests"] == 1.0 and "env/reward_ms/p99" in m
    assert env.take_stats() == {}, "take_stats resets: the next step starts empty"


def test_a_request_that_times_out_is_counted():
    """A server that accepts the connection and never answers: every attempt times out, the client counts them."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        env = EnvClient(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=0.3, retries=1, backoff_s=0.01)
        try:
            env.retrieve(["q"], 1)
            raise AssertionError("expected the request to fail")
        except EnvError as e:
            assert "did not answer after 2 attempts" in str(e)
        assert env.take_stats()["env/retrieve_timeouts"] == 2.0
    finally:
        stop.set()
        t.join()
        for c in conns:
            c.close()
        srv.close()
