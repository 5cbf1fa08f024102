"""Transient store faults, retried: one policy for the requests shardwise makes itself.

Most requests go through zarr-python's stores, whose clients retry what they retry
(s3fs, obstore). The requests shardwise makes with a store's own client, to carry a
condition or to learn a version (:mod:`shardwise.io.conditional`: versioned reads,
conditional puts, deletes), get their retries here: throttling (``503 SlowDown``) and
server errors (``500``, ``502``, ``504``), connections reset or refused, bodies cut
short, timeouts. Exponential backoff with full jitter, bounded in tries and in total
time (:func:`policy`: dask config ``shardwise.store-retries`` and
``shardwise.store-retry-seconds``), and counted (:func:`retried`).

A retried write is not always safe to retry blindly: a conditional put whose response
was lost may have been applied, and its retry then fails its condition against this
very write. The conditional puts settle such an outcome by looking at what the store
holds (:meth:`shardwise.io.conditional.Conditional.put`); this module only says what is
transient and how long to wait.

The optimistic writes of independent jobs (a conditional put that found the object
changed: read, merge, try again) take their tries from here too (:func:`tries`: dask
config ``shardwise.write-retries``, with :func:`backoff`'s pauses).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import shardwise.config as config
from shardwise.errors import WriteError

__all__ = [
    "RetryPolicy",
    "backoff",
    "count",
    "policy",
    "retried",
    "retries",
    "retrying",
    "transient",
    "tries",
    "client_errors",
]

_STATUSES = frozenset({429, 500, 502, 503, 504})
_CODES = frozenset(
    {
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a request that failed transiently is tried again: at most ``attempts``
    tries in all, and no new try after ``seconds`` since the first; before try ``n``
    (from 1) a pause of a random time up to ``base * 2**(n-1)``, at most ``cap``."""

    attempts: int = 10
    seconds: float = 120.0
    base: float = 0.1
    cap: float = 10.0

    def pause(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1)))


def policy() -> RetryPolicy:
    """The policy from dask config ``shardwise.store-retries`` (tries in all, default
    10) and ``shardwise.store-retry-seconds`` (default 120)."""
    attempts = config.get("store-retries")
    seconds = config.get("store-retry-seconds")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(
            f"dask config shardwise.store-retries must be an int >= 1, got {attempts!r}"
        )
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(
            f"dask config shardwise.store-retry-seconds must be a number >= 0, got {seconds!r}"
        )
    return RetryPolicy(attempts=attempts, seconds=float(seconds))


_COUNTS: Counter[str] = Counter()
_LOCK = threading.Lock()


def retried() -> dict[str, int]:
    """How many requests of this process were tried again, by the kind of fault (the
    exception's class name): a figure for tests and benchmarks."""
    with _LOCK:
        return dict(_COUNTS)


def count(error: BaseException) -> None:
    """Count one retry after ``error`` (see :func:`retried`)."""
    with _LOCK:
        _COUNTS[type(error).__name__] += 1


def transient(error: BaseException) -> bool:
    """Whether ``error`` is a fault worth trying again: throttling and server errors
    (HTTP 429, 500, 502, 503, 504 and S3's codes for them), connections reset, refused or
    closed early, bodies shorter than their length, timeouts. Not: refusals (403,
    404, 412...), errors in what was sent."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):  # a botocore ClientError: an answer from the server
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
        return status in _STATUSES or code in _CODES
    if isinstance(error, ConnectionError | TimeoutError | asyncio.TimeoutError):
        return True
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__}
    if "azure.core.exceptions.HttpResponseError" in names:  # (an answer from Azure)
        return getattr(error, "status_code", None) in _STATUSES or any(
            name in names for name in _TRANSIENT_CLASSES
        )
    if "gcsfs.retry.HttpError" in names:  # (an answer from Google Cloud Storage)
        return getattr(error, "code", None) in _STATUSES
    return any(name in names for name in _TRANSIENT_CLASSES)


# by name, so that neither botocore nor aiohttp is imported for a store that needs neither
_TRANSIENT_CLASSES = (
    "botocore.exceptions.ConnectionError",  # closed, refused, timeouts of connecting
    "botocore.exceptions.HTTPClientError",
    "botocore.exceptions.ReadTimeoutError",
    "botocore.exceptions.ResponseStreamingError",
    "botocore.exceptions.IncompleteReadError",
    "urllib3.exceptions.ProtocolError",
    "aiohttp.client_exceptions.ClientPayloadError",
    "aiohttp.client_exceptions.ClientConnectionError",
    "aiohttp.client_exceptions.ServerDisconnectedError",
    "aiohttp.http_exceptions.BadStatusLine",
    "http.client.IncompleteRead",
    "http.client.RemoteDisconnected",
    # azure-core's: no answer (connecting, or the response cut short)
    "azure.core.exceptions.ServiceRequestError",
    "azure.core.exceptions.ServiceResponseError",
    "azure.core.exceptions.IncompleteReadError",
)


async def retrying[T](
    call: Callable[[], Awaitable[T]], *, retry_on: Callable[[BaseException], bool] = transient
) -> T:
    """``await call()``, tried again after a transient fault (``retry_on``) within the
    :func:`policy`; the last fault is raised when the tries or the time run out."""
    rules = policy()
    loop = asyncio.get_running_loop()
    start = loop.time()
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as error:
            attempt += 1
            if (
                not retry_on(error)
                or attempt >= rules.attempts
                or loop.time() - start >= rules.seconds
            ):
                raise
            count(error)
            await asyncio.sleep(rules.pause(attempt))


# -- optimistic writes: tries against other jobs ---------------------------------------------
def retries() -> int:
    """How many times a shard task tries a conditional put before it gives up: dask
    config ``shardwise.write-retries`` (default 100: with pauses of up to 1 s, about a
    minute of losing to other jobs before giving up)."""
    value = config.get("write-retries")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WriteError(
            "unknown dask config shardwise.write-retries",
            expected="an int >= 1",
            found=repr(value),
            advice="Set it with dask.config.set({'shardwise.write-retries': 100}).",
        )
    return value


def tries(count: int | None = None) -> Iterator[int]:
    """The tries of an optimistic write, ``0`` to ``count - 1`` (default
    :func:`retries`), with the pause of :func:`backoff` before each try after the
    first: a loop over them ends with a success (``break``, ``return``) or runs out."""
    count = retries() if count is None else count
    for attempt in range(count):
        if attempt:
            time.sleep(backoff(attempt - 1))
        yield attempt


def backoff(attempt: int) -> float:
    """The pause after failed try ``attempt`` (from 0): a random time up to 10 ms
    doubled per try, at most 1 s ("full jitter"), so that writers that collided do not
    collide again in step."""
    return random.uniform(0, min(1.0, 0.01 * 2**attempt))


@contextlib.contextmanager
def client_errors(path: str) -> Iterator[None]:
    """A store client's own error raised as an ``OSError`` naming ``path`` (the readers
    and writers name the array and key of an ``OSError``): a ``ConnectionError`` for a
    fault the client's own retries did not outlast, an ``OSError`` for the rest.
    ``OSError``, ``ValueError`` and ``TypeError`` pass as they are, and so does every
    exception of shardwise's own (``Stale``)."""
    try:
        yield
    except (OSError, ValueError, TypeError):
        raise
    except Exception as e:
        if type(e).__module__.startswith("shardwise."):
            raise
        if transient(e):
            raise ConnectionError(
                f"{path}: {type(e).__name__}: {e} (after the client's retries)"
            ) from e
        raise OSError(f"{path}: {type(e).__name__}: {e}") from e
