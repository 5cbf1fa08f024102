"""Errors and warnings of shardwise.

The base of every error is ``ShardwiseError`` (also ``shardwise.ShardwiseError``);
every error and warning class is here.

Every error subclasses both ``ShardwiseError`` and the built-in exception that
existing ``except`` clauses already catch (``FileNotFoundError``, ``ValueError``, ...),
the way zarr-python's ``errors.py`` does. Messages say what was expected, what was
found, which array and store key, and what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = [
    "ArgumentError",
    "ArrayChoiceError",
    "ChangingShardError",
    "ChecksumError",
    "ChunkRoundingWarning",
    "ChunksError",
    "ConflictError",
    "CorruptShardError",
    "IncompleteAppendError",
    "NotAZarrStoreError",
    "OverlapError",
    "RegionConflictError",
    "ShardwiseError",
    "StoreExistsError",
    "StoreIOError",
    "TooLargeError",
    "TruncatedShardError",
    "UnprotectedWriteWarning",
    "UnsafeNameError",
    "UnsupportedArrayError",
    "UnsupportedCodecError",
    "VersionError",
    "WriteError",
]


class ShardwiseError(Exception):
    """Base class of every error shardwise raises on purpose.

    Attributes ``array``, ``key`` and ``chunk`` say where the problem is (any of them
    may be ``None`` when it does not apply).
    """

    def __init__(
        self,
        problem: str,
        *,
        array: str | None = None,
        key: str | None = None,
        chunk: tuple[int, ...] | None = None,
        expected: str | None = None,
        found: str | None = None,
        advice: str | None = None,
    ) -> None:
        self.problem = problem
        self.array = array
        self.key = key
        self.chunk = chunk
        self.expected = expected
        self.found = found
        self.advice = advice
        super().__init__(self._message())

    def _message(self) -> str:
        parts = [self.problem]
        if self.expected is not None:
            parts.append(f"expected {self.expected}")
        if self.found is not None:
            parts.append(f"found {self.found}")
        msg = "; ".join(parts)
        where = []
        if self.array is not None:
            where.append(f"array {self.array!r}")
        if self.key is not None:
            where.append(f"store key {self.key!r}")
        if self.chunk is not None:
            where.append(f"inner chunk {self.chunk}")
        if where:
            msg += f" ({', '.join(where)})"
        msg += "."
        if self.advice:
            msg += f" {self.advice}"
        return msg

    def __reduce__(self) -> tuple[object, ...]:
        # keep the keyword arguments across pickling (dask sends errors between processes)
        return (
            _rebuild,
            (
                type(self),
                self.problem,
                {
                    "array": self.array,
                    "key": self.key,
                    "chunk": self.chunk,
                    "expected": self.expected,
                    "found": self.found,
                    "advice": self.advice,
                },
            ),
        )


def _rebuild(cls: type[ShardwiseError], problem: str, kwargs: dict[str, object]) -> ShardwiseError:
    return cls(problem, **kwargs)  # type: ignore[arg-type]


class NotAZarrStoreError(ShardwiseError, FileNotFoundError):
    """The path or URL holds no Zarr group or array (no ``zarr.json``)."""


class CorruptShardError(ShardwiseError, ValueError):
    """A shard's bytes do not follow the ``sharding_indexed`` format (bad index entries,
    undecodable inner chunk)."""


class ChecksumError(CorruptShardError):
    """A crc32c checksum (of a shard index or an inner chunk) does not match its data."""


class TruncatedShardError(CorruptShardError):
    """A shard object is shorter than its index says it is."""


class UnsupportedCodecError(ShardwiseError, ValueError):
    """The array's metadata names a codec that neither shardwise nor zarr-python knows."""


class UnsupportedArrayError(ShardwiseError, ValueError):
    """The array's metadata describes something shardwise cannot read (not Zarr v3,
    an unknown chunk grid, a data type without a fixed size...)."""


class WriteError(ShardwiseError, ValueError):
    """A write was refused before anything was written: shapes that do not fit, a
    region outside the array, an append that changes dimensions or data type..."""


class ArgumentError(ShardwiseError, TypeError):
    """A keyword the call does not take with the data given (zarr-python's creation
    arguments, dask's ``**zarr_array_kwargs``, with a Dataset rather than a dask
    array)."""


class StoreExistsError(ShardwiseError, FileExistsError):
    """``mode="w-"`` asks for a new dataset where Zarr data already exists."""


class ChunksError(ShardwiseError, ValueError):
    """``shardwise.open_dataset`` was asked for dask chunks it cannot build (an unknown
    dimension or keyword, sizes that do not add up to the array)."""


class RegionConflictError(ShardwiseError, ValueError):
    """Region writes meant for separate jobs would write the same shard
    (``shardwise.regions.check_regions``)."""


class OverlapError(ShardwiseError, ValueError):
    """A source and a destination are the same place, or one lies inside the other
    (``reshard``, ``migrate``): writing the destination could destroy the source."""


class UnsafeNameError(ShardwiseError, ValueError):
    """A node name or path taken from a store's metadata breaks Zarr v3's node-name
    rules (``.``/``..`` or empty components, a leading ``/``, a backslash or NUL): used
    as a key it could reach outside the store's root."""


class TooLargeError(ShardwiseError, ValueError):
    """What was asked would need memory or time in proportion to a chunk grid far
    larger than what is stored (or sizes past what 64-bit integers hold): refused
    before anything is allocated."""


class ConflictError(ShardwiseError, OSError):
    """Another job kept changing what this write merges into (a shard, or the
    ``zarr.json`` of an array it appends to): every conditional put found it changed
    since it was read, up to the retry bound. Nothing was half-written: each put is
    whole or not made."""


class ChangingShardError(ShardwiseError, OSError):
    """A shard kept changing while it was read: every time its index was read again,
    another job had replaced the shard before its inner chunks could be read from the
    same version, up to the retry bound. Nothing is wrong with the data, and no value
    was read from the wrong version: read again once the other job has written."""


class IncompleteAppendError(ShardwiseError, OSError):
    """An append grew its arrays (their metadata holds the new rows: other jobs append
    after them) and then failed to write some of its data; readers see fill values
    where it was not written. The message names the rows (``rows``: per array, the
    dimension and the ``(start, stop)`` range) and how to complete them: running the
    same append again where the claim is recorded in the arrays' attributes (Zarr v3
    arrays that other jobs may append to), else a region write of the same data. The
    error that stopped the data step is the cause."""

    def __init__(
        self, problem: str, *, rows: dict[str, tuple[str, int, int]] | None = None, **where: Any
    ) -> None:
        self.rows = dict(rows or {})
        super().__init__(problem, **where)


class VersionError(ShardwiseError, NotImplementedError):
    """What was asked needs a newer release of a dependency than the one installed (a
    feature only the newer releases of the versions shardwise supports have): the
    message names the release. Nothing was written."""


class ArrayChoiceError(ShardwiseError, ValueError):
    """``inventory`` was not told which array, and the group holds several, or was told
    one the group does not hold."""


class ChunkRoundingWarning(UserWarning):
    """Requested dask chunks cut inner chunks and were moved to inner-chunk boundaries."""


class UnprotectedWriteWarning(UserWarning):
    """A write into an existing array went ahead without the guard against other jobs
    (``independent_writers="auto"``, the default) because the store (or the way the
    array is written) cannot give it: another job writing the same shards at the same
    time could lose rows, as with ``Dataset.to_zarr``. Pass ``independent_writers=False``
    to say this job is the only writer (no warning), or ``True`` to be refused
    instead."""


class StoreIOError(ShardwiseError, OSError):
    """A store request failed while shardwise read or wrote a shard or an array's
    metadata: the file system's error, or the object-store client's (after the retries
    its faults get), kept as the cause."""


@contextmanager
def naming_io_errors(what: str, *, array: str, key: str, advice: str) -> Iterator[None]:
    """Inside the block, an ``OSError`` that is not shardwise's, or an error of an
    object-store client library (aiohttp's, botocore's, obstore's, ...: see
    ``is_client_error``), becomes a ``StoreIOError`` saying ``what`` failed,
    on which array and store key, and ``advice``."""
    try:
        yield
    except ShardwiseError:
        raise
    except Exception as e:
        if not isinstance(e, OSError) and not is_client_error(e):
            raise
        raise StoreIOError(
            f"{what} failed: a store request raised an error",
            found=f"{type(e).__name__}: {e}",
            array=array,
            key=key,
            advice=advice,
        ) from e


def naming_metadata_errors(what: str, key: str, advice: str) -> AbstractContextManager[None]:
    """``naming_io_errors`` for a request of a metadata document (``key``, an
    array's or a group's ``zarr.json``): the array named is the document's folder."""
    return naming_io_errors(what, array=key.rpartition("/")[0] or "/", key=key, advice=advice)


def incomplete_append(
    error: BaseException,
    rows: dict[str, tuple[str, int, int]],
    *,
    region: str,
    key: str | None,
    also: str = "",
    recorded: bool = False,
) -> IncompleteAppendError:
    """The ``IncompleteAppendError`` for an append whose data step raised ``error``
    after its metadata claimed ``rows`` (array -> (dimension, start, stop)); ``region``:
    the ``region=`` argument that writes them (as Python source); ``also``: what else
    the completion needs (a sentence); ``recorded``: the claim is recorded in the
    arrays' attributes, where running the same append again finds it."""
    claimed = "; ".join(f"{a!r}: {d} {lo}-{hi - 1}" for a, (d, lo, hi) in sorted(rows.items()))
    if recorded:
        advice = (
            "The claimed rows hold fill values where they were not written, and other "
            "jobs' appends go after them. Run the same append again (the same data, "
            "store and append dimension): it finds its claim in the arrays' attributes "
            f"and writes these rows instead of appending. Or write the same data with "
            f"region={region} (mode 'r+'){also}."
        )
    else:
        advice = (
            "The claimed rows hold fill values where they were not written, and other "
            "jobs' appends go after them. Complete them by writing the same data with "
            f"region={region} (mode 'r+'){also}; running the append again would append "
            "after them."
        )
    return IncompleteAppendError(
        "the append grew its arrays, then failed to write some of its data",
        rows=rows,
        expected="every claimed row written",
        found=f"{type(error).__name__} in the data step; rows claimed: {claimed}",
        key=key,
        array=next(iter(rows)) if len(rows) == 1 else None,
        advice=advice,
    )


#: the top-level packages of the clients zarr-python's stores talk to object stores with
CLIENT_PACKAGES = frozenset(
    {
        "aiohttp",
        "aiobotocore",
        "botocore",
        "urllib3",
        "requests",
        "obstore",
        "s3fs",
        "gcsfs",
        "adlfs",
        "azure",
        "google",
        "fsspec",
        "http",
    }
)


def is_store_failure(error: BaseException) -> bool:
    """Whether ``error`` says a store request failed (rather than answering it): an
    object-store client library's own error (``is_client_error``), a plain
    ``OSError`` (s3fs's for an HTTP error that outlasted its retries, a full disk), a
    reset connection or a timeout. Not the ``OSError`` subclasses that answer
    (``FileNotFoundError``, ``FileExistsError``, ``PermissionError``...), nor
    shardwise's own errors."""
    if isinstance(error, ShardwiseError):
        return False
    plain = type(error) is OSError or isinstance(error, ConnectionError | TimeoutError)
    return plain or is_client_error(error)


def is_client_error(error: BaseException) -> bool:
    """Whether ``error`` was raised by an object-store client library rather than by
    shardwise, zarr-python or numpy: its class (or a base class) comes from one of
    ``CLIENT_PACKAGES`` (``http`` is the standard library's ``http.client``)."""
    return any(cls.__module__.partition(".")[0] in CLIENT_PACKAGES for cls in type(error).__mro__)
