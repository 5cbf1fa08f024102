"""The process's requests (shardwise.io.requests): the bound on requests in flight, the
link's measure, and hedging (a slow request sent again, the first answer taken, the
extra requests bounded and counted). The request is a coroutine function here; the
reads' own use of it is tested against a real HTTP server in test_http.py."""

from __future__ import annotations

import asyncio
import time

import dask.config
import pytest

from shardwise.io import requests
from shardwise.io.requests import send, stats


@pytest.fixture(autouse=True)
def _fresh():
    requests.reset()
    with dask.config.set({"shardwise.hedge": True, "shardwise.hedge-budget": 0.05}):
        yield
    requests.reset()


def _size(answer: bytes) -> int:
    return len(answer)


class Server:
    """Answers each call after ``delays[i]`` seconds (the i-th call; ``usual`` for
    calls not listed), counting calls and the calls that were cancelled."""

    def __init__(self, usual: float = 0.001, delays: dict[int, float] | None = None) -> None:
        self.usual = usual
        self.delays = delays or {}
        self.calls = 0
        self.cancelled = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self) -> bytes:
        i = self.calls
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delays.get(i, self.usual))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        return b"x" * 100


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_a_slow_request_is_hedged_and_the_first_answer_taken():
    server = Server(delays={30: 30.0})  # the 31st call would take 30 s

    async def main() -> float:
        for _ in range(30):
            await send("network", server, 100, _size)
        start = time.monotonic()
        assert await send("network", server, 100, _size) == b"x" * 100
        return time.monotonic() - start

    took = _run(main())
    assert took < 20  # (the 30 s answer was not waited for: wait_for would have failed)
    found = stats()
    assert found.requests == 31 and found.hedged >= 1 and found.hedges_won >= 1
    assert server.cancelled >= 1  # the slow one, abandoned
    assert found.nbytes == 31 * 100  # the answers taken, hedges' losers not counted


def test_before_requests_are_timed_the_links_guess_decides_and_off_is_off():
    # five times the guessed round trip (0.02 s) and transfer, 0.1 s for 100 bytes, but
    # at least 0.25 s while the link is a guess (a round trip of 100 ms is no reason)
    server = Server(delays={1: 0.15, 3: 30.0})

    async def main() -> None:
        for _ in range(5):
            await send("network", server, 100, _size)

    _run(main())  # the 2nd (0.15 s) is not hedged, the 4th (30 s) is
    assert stats().hedged == 1 and stats().hedges_won == 1 and server.calls == 6
    requests.reset()
    server = Server(delays={1: 0.3, 20: 0.3})
    with dask.config.set({"shardwise.hedge": False}):
        for _ in range(5):
            _run(main())
    assert stats().hedged == 0 and server.calls == 25


def test_disk_and_memory_requests_are_never_hedged():
    server = Server(delays={20: 0.3})

    async def main() -> None:
        for _ in range(25):
            await send("disk", server, 100, _size)

    _run(main())
    assert stats().hedged == 0 and stats().requests == 25


def test_hedges_stay_within_the_budget():
    # every 10th call slow: a tenth of the requests would be hedged without the bound
    server = Server(delays={i: 0.05 for i in range(0, 2000, 10)})

    async def main() -> None:
        await asyncio.gather(*(send("network", server, 100, _size) for _ in range(400)))

    with dask.config.set({"shardwise.concurrency.network": 8}):
        _run(main())
    found = stats()
    assert found.requests == 400
    # one token at the start, then one per 1 / budget requests
    assert 0 < found.hedged <= 1 + 0.05 * 400


def test_a_failure_waits_for_the_other_and_both_failing_raises():
    calls = {"n": 0}

    async def flaky() -> bytes:
        calls["n"] += 1
        n = calls["n"]
        if n <= 20 or n == 24:
            await asyncio.sleep(0.001)
            return b"ok"
        if n == 21:  # slow, then fails while its hedge is under way
            await asyncio.sleep(0.1)
            raise ConnectionError("reset")
        if n == 22:  # the hedge: slower still, and its answer is taken
            await asyncio.sleep(0.3)
            return b"hedge"
        await asyncio.sleep(0.1 if n != 23 else 0.001)  # 23, 25 and 26 fail
        raise ConnectionError(f"down {n}")

    async def main() -> None:  # (one event loop: its requests' times are its pool's)
        for _ in range(20):
            await send("network", flaky, 10, _size)
        assert await send("network", flaky, 10, _size) == b"hedge"
        assert stats().hedged == 1 and stats().hedges_won == 1
        with dask.config.set({"shardwise.hedge-budget": 1.0}):
            with pytest.raises(ConnectionError, match="down 23"):
                await send("network", flaky, 10, _size)  # (23 fails; nothing hedged it)
            assert await send("network", flaky, 10, _size) == b"ok"  # 24
            # 25 fails slowly, hedged by 26, which fails too: the last failure is raised
            with pytest.raises(ConnectionError, match=r"down 2[56]"):
                await send("network", flaky, 10, _size)
        assert stats().hedged >= 2

    _run(main())


def test_requests_in_flight_are_bounded_per_process():
    server = Server(usual=0.01)

    async def main() -> None:
        await asyncio.gather(*(send("network", server, 100, _size) for _ in range(50)))

    with dask.config.set({"shardwise.concurrency": {"network": 5}}):
        _run(main())
    assert server.most_in_flight <= 5 + stats().hedged  # (a hedge is extra, bounded apart)
    assert server.calls == 50 + stats().hedged


def test_the_link_is_measured_from_the_requests():
    async def main() -> requests.Link:
        guess = requests.link()
        assert not guess.measured and guess.latency == 0.02  # the settings' guess

        async def small() -> bytes:
            await asyncio.sleep(0.01)
            return b"x" * 1000

        async def large() -> bytes:
            await asyncio.sleep(0.05)
            return b"x" * (4 << 20)

        for _ in range(10):
            await send("network", small, 1000, _size)
        for _ in range(5):
            await send("network", large, 4 << 20, _size)
        return requests.link()

    with dask.config.set({"shardwise.hedge": False}):
        found = _run(main())
    assert found.measured
    assert 0.01 <= found.latency < 0.05
    # 4 MiB in about 0.04 s beyond the round trip: about 100 MB/s (sleeps only run long)
    assert 10e6 < found.bandwidth < 2e9
    assert found.gap == int(found.latency * found.bandwidth)
    assert 4 << 20 <= found.part <= 64 << 20


def test_a_bad_bound_is_refused_with_its_name():
    async def main() -> None:
        await send("network", Server(), 100, _size)

    with (
        dask.config.set({"shardwise.concurrency.network": 0}),
        pytest.raises(ValueError, match=r"shardwise\.concurrency\.network"),
    ):
        _run(main())
