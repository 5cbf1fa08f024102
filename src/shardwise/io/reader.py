"""Reading a selection of a (sharded or unsharded) Zarr v3 array: no dask, no xarray.

``ArrayReader`` plans a selection with ``shardwise.format.grid``, fetches what it needs
with as few store requests as the options allow (the whole shard, or the index and then
coalesced inner-chunk ranges), and decodes inner chunks in the calling thread. The
requests are ``shardwise.io.fetch.ShardFetcher``'s: shard indexes read by
``shardwise.io.shard_index.read_shard_index`` (as inventory and verify read them)
with the version of the shard they came from, kept in this process's index cache, and
inner chunks read only from that version.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import os
import queue
import reprlib
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
import shardwise.config as config
from shardwise._buffers import SCRATCH_LIMIT, scratch
from shardwise._flags import rectilinear_grids
from shardwise._html import array_html
from shardwise.codecs import ChunkDecoder, ShardDecoder
from shardwise.errors import (
    ArgumentError,
    ChunksError,
    NotAZarrStoreError,
    ShardwiseError,
    TooLargeError,
    UnsupportedCodecError,
    is_store_failure,
    naming_metadata_errors,
)
from shardwise.format.grid import (
    INT64_MAX,
    ReadPlan,
    Sel,
    ShardRead,
    check_chunks_per_shard,
    out_len,
)
from shardwise.format.metadata import PARSE_ERRORS, ArrayInfo, metadata_key
from shardwise.format.v2 import array_info as v2_array_info
from shardwise.io.cache import SUPPLIED, IndexEntry
from shardwise.io.capabilities import local_root
from shardwise.io.conditional import file_version
from shardwise.io.draft import DraftStore
from shardwise.io.fetch import Fetched, ShardFetcher
from shardwise.io.opener import v3_first, web_store
from shardwise.io.shard_index import naming
from shardwise.io.stores import ReadOptions, metadata_error, store_token
from shardwise.io.threads import decode_threads, read_pool, read_threads

__all__ = ["ArrayReader"]


class ArrayReader:
    """Reads selections of one Zarr array into NumPy arrays, without dask.

    Open one with ``open``. ``reader[...]`` (any NumPy basic selection) reads with
    one request per whole shard, or the shard's index (cached) and its inner chunks'
    coalesced ranges, decoding on every core the process may use when called from a
    script or a notebook. Thread-safe and picklable (the store is pickled; decoders
    are rebuilt on the other side), so one reader can serve every task of a dask graph.

    Attributes
    ----------
    info : ArrayInfo
        The array's shape, data type, shards, inner chunks and codecs.
    store
        The zarr-python ``Store`` read.
    options : ReadOptions
        How selections turn into requests.

    Examples
    --------
    >>> r = shardwise.ArrayReader.open("data.zarr", "temperature")
    >>> block = r[0:24, :, :]  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Any,
        info: ArrayInfo,
        options: ReadOptions | None = None,
        *,
        session: str | None = None,
    ):
        self.store = store
        self.info = info
        self.options = options or ReadOptions()
        # cached shard indexes belong to this reader (and its pickled copies): a store
        # rewritten and opened again never meets the indexes of its old shards
        self.session = session or uuid.uuid4().hex
        self._token = f"{store_token(store)}#{self.session}"
        self.fetcher = ShardFetcher(
            store, info.name, self._token, self.options, itemsize=info.dtype.itemsize
        )
        # the folder whose files are the store's keys, where a shard is read on the
        # reading thread straight from its file (zarr-python's local store)
        self._local_root = local_root(store, ("get",))
        self._decoders: dict[tuple[int, ...], ShardDecoder | ChunkDecoder] = {}
        self.decoder((0,) * info.ndim)  # codecs shardwise cannot read fail here, at open

    @classmethod
    def open(
        cls,
        store: Any,
        path: str = "",
        *,
        storage_options: dict[str, Any] | None = None,
        options: ReadOptions | None = None,
        **kwargs: Any,
    ) -> ArrayReader:
        """Open an array for reading: Zarr v3, Zarr v2, or a store of the 2022 sharding
        draft.

        Parameters
        ----------
        store : str, os.PathLike, zarr.abc.store.Store or zarr.Array
            A path, a URL (with ``storage_options``) or a zarr-python ``Store``; or a
            ``zarr.Array`` already open (Zarr v3 or v2): its store and path are read,
            with the metadata it holds (nothing is opened again), and ``path``,
            ``storage_options`` and ``kwargs`` must then be left out.
        path : str, default ""
            The array's path in the store (``""``: the array at its root).
        storage_options : dict, optional
            Options of the fsspec file system a URL names (credentials, endpoint).
        options : ReadOptions, optional
            How selections turn into requests.
        **kwargs
            Passed to ``zarr.open_array`` as ``dask.array.from_zarr`` passes them
            (``zarr_format=2`` to insist on a format, ``config=``...); a name no
            zarr-python opener takes is a ``TypeError``. ``mode`` is ignored: the array
            is always opened read-only. With ``zarr_format`` given, a store of the
            sharding draft is not looked for.

        Returns
        -------
        ArrayReader

        Raises
        ------
        shardwise.errors.NotAZarrStoreError
            No array is at ``path``.
        shardwise.errors.UnsupportedCodecError, shardwise.errors.UnsupportedArrayError
            The array's codecs or data type are ones shardwise does not read.
        """
        import zarr

        if isinstance(store, zarr.Array):
            return cls._of_array(store, path, storage_options, kwargs, options)
        kwargs = _open_kwargs(kwargs)
        fmt = kwargs.get("zarr_format")

        def draft(error: BaseException) -> ArrayReader | None:
            """The array when ``store`` is a draft store (looked for only when
            zarr-python finds no array, and no format was insisted on)."""
            found = None if fmt is not None else DraftStore.after(error, store, storage_options)
            return None if found is None else cls(found.store, found.info(path), options)

        where = {"store": web_store(store, storage_options), "path": path, "mode": "r"}
        try:
            with rectilinear_grids():  # zarr-python reads rectilinear grids only with its flag on
                arr = v3_first(zarr.open_array, **where, storage_options=storage_options, **kwargs)
            info = _info_of(arr)
        except ShardwiseError:
            raise
        except FileNotFoundError as e:
            if (reader := draft(e)) is not None:
                return reader
            if fmt is not None:
                raise NotAZarrStoreError(
                    f"no Zarr v{fmt} array here",
                    expected=f"a Zarr v{fmt} array (zarr_format={fmt} was asked)",
                    found=f"none ({type(e).__name__}: {e})",
                    array=path or "/",
                    key=metadata_key(path) if fmt == 3 else _v2_key(path),
                    advice=f"Check the path {store!r} and the array path, or leave "
                    "zarr_format out to read either format.",
                ) from e
            raise NotAZarrStoreError(
                "no Zarr array here",
                expected="a zarr.json describing an array",
                found="nothing",
                array=path or "/",
                key=metadata_key(path),
                advice=f"Check the path {store!r} and the array path.",
            ) from e
        except PARSE_ERRORS as e:  # zarr-python's own: name the zarr.json that caused it
            if (reader := draft(e)) is not None:
                return reader
            err = metadata_error(store, path, e, storage_options=storage_options)
            if err is e:
                raise
            raise err from e
        except Exception as e:
            if not is_store_failure(e):
                raise
            # the store failed (a dead endpoint, s3fs's OSError for a 503, obstore's
            # GenericError): named, with no search for a culprit document
            with naming_metadata_errors(
                "opening the array", metadata_key(path or ""), "Open it again (the store failed)."
            ):
                raise e from None
        return cls(arr.store_path.store, info, options)

    @classmethod
    def _of_array(
        cls,
        arr: Any,
        path: str | None,
        storage_options: dict[str, Any] | None,
        kwargs: dict[str, Any],
        options: ReadOptions | None,
    ) -> ArrayReader:
        """The reader of a ``zarr.Array`` already open: its store, path and metadata."""
        given = [
            f"{what}={value!r}"
            for what, value in (("path", path), ("storage_options", storage_options))
            if value
        ] + [f"{k}={reprlib.repr(v)}" for k, v in kwargs.items()]
        if given:
            raise ChunksError(
                "a zarr.Array was given with arguments that say where to open an array",
                expected="no path, storage_options or zarr.open_array arguments (the "
                "zarr.Array says where its data is and was opened with its own)",
                found=", ".join(given),
                array=arr.path or "/",
                advice="Leave them out, or pass the store (or its path or URL) instead of "
                "the zarr.Array.",
            )
        return cls(arr.store_path.store, _info_of(arr), options)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "info": self.info,
            "options": self.options,
            "session": self.session,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["store"], state["info"], state["options"], session=state["session"]
        )

    def __repr__(self) -> str:
        return f"<shardwise.ArrayReader {self.info.name} shape={self.shape} of {self.store}>"

    def _repr_html_(self) -> str:
        """A notebook's view (``shardwise._html.array_html``)."""
        return array_html(self.info, self.store)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.info.dtype

    @property
    def ndim(self) -> int:
        return self.info.ndim

    # -- decoders (one per distinct shard shape; rectilinear grids have several) ---------
    def decoder(self, shard: tuple[int, ...]) -> ShardDecoder | ChunkDecoder:
        """The decoder of a shard (a ``ShardDecoder``), or of a chunk of an
        unsharded array; one per distinct shard shape, built on first use.
        ``shardwise.errors.TooLargeError`` for a shard of more than
        ``shardwise.format.grid.MAX_CHUNKS_PER_SHARD`` inner chunks (its index could not
        be held)."""
        shape = self.info.layout.shard_shape(shard)
        dec = self._decoders.get(shape)
        if dec is None:
            info = self.info
            if info.sharding is not None:  # refuse an index too large to hold, unread
                check_chunks_per_shard(
                    info.layout.chunks_per_shard(shard),
                    array=info.name,
                    key=metadata_key(info.path),
                )
            try:
                if info.sharding is not None:
                    dec = ShardDecoder(
                        info.sharding, shape, info.zdtype, info.fill_value, array=info.name
                    )
                else:
                    dec = ChunkDecoder(
                        info.codecs, shape, info.zdtype, info.fill_value, array=info.name
                    )
            except UnsupportedCodecError as e:  # the codecs are the zarr.json's
                raise UnsupportedCodecError(
                    e.problem,
                    array=e.array,
                    key=metadata_key(info.path),
                    expected=e.expected,
                    found=e.found,
                    advice=e.advice,
                ) from e
            self._decoders[shape] = dec
        return dec

    # -- public reading ------------------------------------------------------------------
    def __getitem__(self, key: Any) -> npt.NDArray[Any]:
        """Basic and outer indexing (``reader[0, 2:10, [1, 5]]``)."""
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = next(i for i, k in enumerate(key) if k is Ellipsis)
            fill = (slice(None),) * (self.ndim - len(key) + 1)
            key = key[:i] + fill + key[i + 1 :]
        key = key + (slice(None),) * (self.ndim - len(key))
        return self.read(key)

    def read(self, selection: Sequence[int | slice | npt.ArrayLike]) -> npt.NDArray[Any]:
        """Read an outer selection: per dimension an int (the dimension is dropped), a
        slice (any step) or a 1-d integer array."""
        sel, shape, out = self._output(selection)
        if out.size:
            self._execute(self.info.layout.plan(sel), out)
        return out.reshape(shape)

    async def read_async(
        self, selection: Sequence[int | slice | npt.ArrayLike]
    ) -> npt.NDArray[Any]:
        """``read`` in the caller's event loop: the requests go out on it (with the
        same coalescing and index cache), and the decoding runs in one worker thread, so
        the loop stays free while several reads are under way."""
        sel, shape, out = self._output(selection)
        if out.size:
            plan = self.info.layout.plan(sel)
            fetched = await self._fetch_all(plan, SUPPLIED.current())
            await asyncio.to_thread(self._place, plan, fetched, out)
        return out.reshape(shape)

    def _output(
        self, selection: Sequence[int | slice | npt.ArrayLike]
    ) -> tuple[list[slice | npt.ArrayLike], tuple[int, ...], npt.NDArray[Any]]:
        """The selection with ints made slices, the result's shape (ints dropped), and
        the output array to read into."""
        if len(selection) != self.ndim:
            raise IndexError(f"expected {self.ndim} indexers, got {len(selection)}")
        sel: list[slice | npt.ArrayLike] = []
        drop: list[int] = []
        for axis, (s, n) in enumerate(zip(selection, self.shape, strict=True)):
            if isinstance(s, int | np.integer):
                i = int(s) + (n if s < 0 else 0)
                if not 0 <= i < n:
                    raise IndexError(f"index {s} is out of bounds for axis {axis} with size {n}")
                sel.append(slice(i, i + 1))
                drop.append(axis)
            else:
                sel.append(s)
        layout = self.info.layout
        # the output first: a selection too large for memory fails here, at once, before
        # its inner chunks are listed
        shape = tuple(map(out_len, layout.dims, sel))
        nbytes = math.prod(shape) * self.dtype.itemsize
        if nbytes > INT64_MAX:  # numpy's "array is too big", naming nothing
            raise TooLargeError(
                "the selection is larger than any array numpy can hold",
                expected="at most 2**63 - 1 bytes",
                found=f"shape {shape} of {self.dtype}: {nbytes:,} bytes",
                array=self.info.name,
                advice="Select a smaller region (isel/sel, or ArrayReader[...] with "
                "slices), or open with chunks={} to work on it with dask.",
            )
        out = np.empty(shape, dtype=self.dtype)
        return sel, tuple(n for i, n in enumerate(out.shape) if i not in drop), out

    # -- execution -----------------------------------------------------------------------
    def _execute(self, plan: ReadPlan, out: npt.NDArray[Any]) -> None:
        # the indexes a fan-out graph's task supplied, taken in the task's thread (its
        # requests go out on zarr-python's event loop, and the shards' reads may run
        # on the read pool's threads)
        supplied, n = SUPPLIED.current(), len(plan.shards)
        if self._local_root is not None:
            self._execute_local(plan, out, min(read_threads(self.options.threads), n), supplied)
        elif n == 1:
            self._place(plan, _compat.sync(self._fetch_all(plan, supplied)), out)
        else:
            self._execute_streamed(
                plan, out, min(decode_threads(self.options.threads), n), supplied
            )

    def _execute_local(
        self,
        plan: ReadPlan,
        out: npt.NDArray[Any],
        threads: int,
        supplied: Mapping[Hashable, IndexEntry],
    ) -> None:
        """A local file store's shards, each read and decoded by one thread (this one,
        or ``threads`` of the process's read pool, the codecs releasing the GIL), so
        that reading one shard overlaps decoding another."""

        def one(i: int) -> None:
            part = _one_shard(plan, i)
            fetched = self._fetch_local(part, supplied)
            if fetched is None:
                fetched = _compat.sync(self._fetch_all(part, supplied))
            self._place(part, fetched, out)

        if threads > 1:
            for _ in read_pool(threads).map(one, range(len(plan.shards))):
                pass  # (an error in a thread is raised here)
        else:
            for i in range(len(plan.shards)):
                one(i)

    def _execute_streamed(
        self,
        plan: ReadPlan,
        out: npt.NDArray[Any],
        threads: int,
        supplied: Mapping[Hashable, IndexEntry],
    ) -> None:
        """The shards of a plan fetched together on zarr's event loop (up to the
        process's bound on requests, :mod:`shardwise.io.requests`), each decoded as
        soon as it has come, on this thread or on ``threads`` of the process's read
        pool (a dask task's too: its thread waits), so that the network and the codecs
        work at once. At most
        ``shardwise.read-ahead-bytes`` of stored bytes (as estimated before they come)
        are fetched and not yet decoded."""
        n = len(plan.shards)
        loop = _compat.io_loop()
        arrived: queue.SimpleQueue[tuple[int, Fetched, BaseException | None]] = queue.SimpleQueue()
        costs = [self._estimate(s) for s in plan.shards]
        ahead = max(1, config.get_bytes("read-ahead-bytes"))
        slots = max(1, min(n, ahead // max(1, max(costs))))

        async def fetch_all(room: asyncio.Semaphore) -> None:
            sem = asyncio.Semaphore(self.options.concurrency)

            async def one(i: int) -> None:
                await room.acquire()
                try:
                    data = await self._fetch_shard(plan.shards[i], sem, supplied)
                except Exception as e:
                    arrived.put((i, None, e))
                    raise
                arrived.put((i, data, None))

            tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()

        async def start() -> asyncio.Semaphore:
            return asyncio.Semaphore(slots)

        room = asyncio.run_coroutine_threadsafe(start(), loop).result()
        done = asyncio.run_coroutine_threadsafe(fetch_all(room), loop)
        # (when the fetches end without every shard having come: cancelled, or failed
        # in a way that put nothing)
        done.add_done_callback(lambda _: arrived.put((-1, None, None)))
        pool = read_pool(threads) if threads > 1 else None
        decoding: list[concurrent.futures.Future[None]] = []

        def place(i: int, data: Fetched) -> None:
            try:
                self._place(_one_shard(plan, i), [data], out)
            finally:
                loop.call_soon_threadsafe(room.release)

        try:
            for _ in range(n):
                i, data, error = arrived.get()
                if error is not None:
                    raise error
                if i < 0:
                    done.result()  # (raises what ended the fetches)
                    raise RuntimeError("the shards' fetches ended before every shard came")
                if pool is None:
                    place(i, data)
                else:
                    decoding.append(pool.submit(place, i, data))
            for d in decoding:
                d.result()
        finally:
            done.cancel()
            for d in decoding:
                d.cancel()

    def _estimate(self, shard_read: ShardRead) -> int:
        """The stored bytes a shard read is expected to fetch: its share of the shard's
        inner chunks times the stored size of the shards this reader has seen (at first,
        the shard's decoded size)."""
        decoder = self.decoder(shard_read.shard)
        if not isinstance(decoder, ShardDecoder):
            return self.fetcher.typical_size(math.prod(decoder.shape) * self.dtype.itemsize)
        whole = self.fetcher.typical_size(math.prod(decoder.shard_shape) * self.dtype.itemsize)
        return max(1, whole * len(shard_read.chunks) // max(1, decoder.index.nchunks))

    def _place(self, plan: ReadPlan, fetched: list[Fetched], out: npt.NDArray[Any]) -> None:
        """Decode the fetched inner chunks of ``plan`` into ``out``."""
        fill = self.info.fill_value
        for shard_read, data in zip(plan.shards, fetched, strict=True):
            if data is None:
                for c in shard_read.chunks:
                    out[_ix(c.out)] = fill
                continue
            key = self.info.key(shard_read.shard)
            decoder = self.decoder(shard_read.shard)
            chunk_decoder = decoder.chunk if isinstance(decoder, ShardDecoder) else decoder
            # an inner chunk that fills a contiguous region of the output whole is
            # decoded straight into it (no copy); others through a reused buffer
            direct = plan.basic and chunk_decoder.can_decode_into
            for c in shard_read.chunks:
                raw = data[c.inner]
                if raw is None:
                    out[_ix(c.out)] = fill
                    continue
                if direct and chunk_decoder.decode_into(raw, out[c.out], key=key, chunk=c.inner):
                    continue
                arr = chunk_decoder.decode(raw, key=key, chunk=c.inner, scratch=True)
                if plan.basic:
                    out[c.out] = arr[c.local]
                else:
                    out[_ix(c.out)] = arr[_ix(c.local)]

    def _fetch_local(
        self, plan: ReadPlan, supplied: Mapping[Hashable, IndexEntry]
    ) -> list[Fetched] | None:
        """A plan of one whole shard of a local file store, read on this thread into its
        reused buffer (no allocation and no page faults per shard, no hop to zarr's
        event loop). The chunks are views of that buffer: decoded at once by
        ``_place``, before the thread reads again. None where the plan is
        fetched by ``_fetch_all`` (other stores, several shards, some chunks of a
        shard, indexes handed in by a fan-out graph)."""
        root = self._local_root
        if root is None or len(plan.shards) != 1:
            return None
        (shard_read,) = plan.shards
        decoder = self.decoder(shard_read.shard)
        if not isinstance(decoder, ShardDecoder):
            return None
        key = self.info.key(shard_read.shard)
        needed = sorted({c.inner for c in shard_read.chunks})
        fetcher = self.fetcher
        if (self._token, key) in supplied or not fetcher.wants_whole(decoder, needed):
            return None
        with naming(self.info.name, key):  # an absent shard is no error
            try:
                f = open(root / key, "rb")  # noqa: SIM115 - closed below
            except (FileNotFoundError, NotADirectoryError):
                return [None]
        with f, naming(self.info.name, key):
            # the bytes and the version both of the one open file
            st = os.fstat(f.fileno())
            size = st.st_size
            buf = scratch(size, "shard") if size <= SCRATCH_LIMIT else np.empty(size, np.uint8)
            view = memoryview(buf)
            n = 0
            while n < size and (got := f.readinto(view[n:])):
                n += got
        version = None if fetcher.trusted else file_version(st)
        return [fetcher.chunks_of_whole(decoder, buf[:n], key, needed, version)]

    def read_into(self, plan: ReadPlan, out: npt.NDArray[Any]) -> None:
        """Read what ``plan`` lists into ``out`` (of the plan's output shape); parts of
        ``out`` that no shard read of the plan covers are left as they are."""
        if plan.shards:
            self._execute(plan, out)

    def fetch_encoded(self, plan: ReadPlan, *, transient: bool = False) -> list[Fetched]:
        """The encoded inner chunks a plan touches, per shard read (None for a missing
        shard; per inner chunk its bytes, or None when it is empty), fetched as
        ``read`` fetches them: no decoding.

        ``transient=True`` allows what ``read`` does with one whole shard of a local
        file store: it is read into this thread's reused buffer, and the chunks are
        views of it, valid only until this thread's next read."""
        supplied = SUPPLIED.current()
        fetched = self._fetch_local(plan, supplied) if transient else None
        if fetched is None:
            fetched = _compat.sync(self._fetch_all(plan, supplied))
        return fetched

    async def _fetch_all(
        self, plan: ReadPlan, supplied: Mapping[Hashable, IndexEntry]
    ) -> list[Fetched]:
        """The shards of ``plan`` fetched (see ``fetch_encoded``), with the indexes
        ``supplied`` to this read (taken by the caller in its thread)."""
        sem = asyncio.Semaphore(self.options.concurrency)
        return list(
            await asyncio.gather(*(self._fetch_shard(s, sem, supplied) for s in plan.shards))
        )

    async def _fetch_shard(
        self, shard_read: ShardRead, sem: asyncio.Semaphore, supplied: Mapping[Hashable, IndexEntry]
    ) -> Fetched:
        key = self.info.key(shard_read.shard)
        decoder = self.decoder(shard_read.shard)
        if not isinstance(decoder, ShardDecoder):  # a chunk: one request, one version
            got = await self.fetcher.get(key, sem)
            return None if got.data is None else {(0,) * self.info.ndim: got.data}
        needed = sorted({c.inner for c in shard_read.chunks})
        return await self.fetcher.fetch(key, decoder, needed, sem, supplied.get((self._token, key)))

    @property
    def token(self) -> str:
        """Names this opened array in every process: the first half of the keys of
        ``shardwise.io.cache.index_cache`` and ``shardwise.io.cache.SUPPLIED``."""
        return self._token

    def shard_index(self, shard: tuple[int, ...]) -> npt.NDArray[np.uint64] | None:
        """The decoded index of one shard: ``(offset, nbytes)`` pairs over its inner
        chunks, or ``None`` when the shard does not exist (see ``index_entry``)."""
        return self.index_entry(shard).table

    def index_entry(self, shard: tuple[int, ...]) -> IndexEntry:
        """The index of one shard with the version of the shard it came from: what a
        fan-out graph's index task hands to its read tasks. One request, or none when
        this process has it cached (then marked ``cached``: the read tasks use it as a
        cached index, checking it as ``ReadOptions.recheck_cached_data`` says)."""
        decoder = self.decoder(shard)
        if not isinstance(decoder, ShardDecoder):
            raise ValueError(f"array {self.info.name!r} is not sharded: its chunks have no index")
        key = self.info.key(shard)
        entry = self.fetcher.cached(key, None)
        if entry is not None:
            return dataclasses.replace(entry, cached=True)
        fresh: IndexEntry = _compat.sync(self.fetcher.index(key, decoder, asyncio.Semaphore(1)))
        return fresh


def _one_shard(plan: ReadPlan, i: int) -> ReadPlan:
    return dataclasses.replace(plan, shards=(plan.shards[i],))


def _all_slices(sel: tuple[Sel, ...]) -> bool:
    return all(isinstance(s, slice) for s in sel)


def _ix(sel: tuple[Sel, ...]) -> tuple[Any, ...]:
    """An index for ``sel`` usable on both sides of an assignment: plain slices when all
    are slices, else an open mesh (``np.ix_``) of index arrays."""
    if _all_slices(sel):
        return sel
    arrays = [np.arange(s.start, s.stop, s.step or 1) if isinstance(s, slice) else s for s in sel]
    return np.ix_(*arrays)


def _info_of(arr: Any) -> ArrayInfo:
    """The ``ArrayInfo`` of an open ``zarr.Array`` (Zarr v3 or v2)."""
    if arr.metadata.zarr_format == 2:
        return v2_array_info(arr.metadata, arr.path)
    return ArrayInfo.from_metadata(arr.metadata, arr.path)


def _v2_key(path: str) -> str:
    path = path.strip("/")
    return f"{path}/.zarray" if path else ".zarray"


def _open_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``zarr.open_array``, as ``dask.array.from_zarr`` passes them:
    ``mode`` dropped (reads are read-only). zarr-python ignores, when it opens an array,
    what it would pass on to ``zarr.create``, and any other name; a name that none of
    zarr-python's openers takes (``zarr.open_array``, ``zarr.create``,
    ``zarr.open_group``: ``use_consolidated``, which dask code passes, is one of the
    last's) is a ``TypeError`` here, not a misspelling silently ignored."""
    import inspect

    import zarr

    out = {k: v for k, v in kwargs.items() if k != "mode"}
    if not out:
        return out
    known: set[str] = set()
    for func in (zarr.open_array, zarr.create, zarr.open_group):
        known.update(
            n
            for n, p in inspect.signature(func).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        )
    if unknown := sorted(k for k in out if k not in known):
        raise ArgumentError(
            "a read got keywords zarr-python's openers do not take",
            expected="parameters of zarr.open_array (the keyword arguments of a read go "
            "to it, as dask.array.from_zarr passes them)",
            found=", ".join(unknown),
            advice="Check the spelling (zarr_format=, use_consolidated=...).",
        )
    return out
