"""Reading a selection of a (sharded or unsharded) Zarr v3 array: no dask, no xarray.

:class:`ArrayReader` plans a selection with :mod:`shardwise.format.grid`, fetches what it needs
with as few store requests as the options allow (the whole shard, or the index and then
coalesced inner-chunk ranges), and decodes inner chunks in the calling thread. Shard
indexes are read by :func:`~shardwise.io.shard_index.read_shard_index` (as inventory and
verify read them) and kept in this process's index cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import multiprocessing
import os
import reprlib
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise._buffers import SCRATCH_LIMIT, scratch
from shardwise.codecs import ChunkDecoder, ShardDecoder
from shardwise.errors import (
    ArgumentError,
    ChunksError,
    CorruptShardError,
    NotAZarrStoreError,
    ShardwiseError,
    StoreIOError,
    TooLargeError,
    TruncatedShardError,
    UnsupportedCodecError,
)
from shardwise.format.grid import (
    INT64_MAX,
    ReadPlan,
    Sel,
    ShardRead,
    check_chunks_per_shard,
    out_len,
)
from shardwise.format.html import array_html
from shardwise.format.index import EMPTY
from shardwise.format.metadata import PARSE_ERRORS, ArrayInfo, metadata_key
from shardwise.format.rectilinear import enabled
from shardwise.format.v2 import array_info as v2_array_info
from shardwise.io.cache import ABSENT, IN_FLIGHT, SUPPLIED, index_cache
from shardwise.io.draft import DraftStore
from shardwise.io.icechunk import out_of_bounds
from shardwise.io.shard_index import naming, read_shard_index
from shardwise.io.stores import ByteRange, ReadOptions, coalesce, metadata_error, store_token

__all__ = ["ArrayReader"]

Bytes = memoryview
# what a shard fetch yields: None for a missing shard, else inner chunk -> bytes or None
Fetched = dict[tuple[int, ...], Bytes | None] | None


class ArrayReader:
    """Reads selections of one Zarr v3 array from a zarr-python ``Store``.

    Thread-safe and picklable (the store is pickled; decoders are rebuilt on the other
    side), so one reader can serve every task of a dask graph.
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
        """Open the array at ``path`` of ``store`` (a path, a URL or a zarr ``Store``):
        Zarr v3, Zarr v2 (:mod:`shardwise.format.v2`), or a store of the 2022 sharding draft
        (:mod:`shardwise.io.draft`).

        ``store`` may also be a ``zarr.Array`` already open (Zarr v3 or v2): its store and
        path are read, with the metadata it holds (nothing is opened again); ``path``,
        ``storage_options`` and ``kwargs`` must then be left out.

        ``kwargs`` go to ``zarr.open_array`` as :func:`dask.array.from_zarr` passes them
        (``zarr_format=2`` to insist on a format, ``config=``...); a name that no
        zarr-python opener takes is a ``TypeError``. ``mode`` is ignored: the array is
        always opened read-only. With ``zarr_format`` given, a store of the sharding
        draft is not looked for."""
        import zarr

        if isinstance(store, zarr.Array):
            return cls._of_array(store, path, storage_options, kwargs, options)
        kwargs = _open_kwargs(kwargs)
        fmt = kwargs.get("zarr_format")

        def draft() -> ArrayReader | None:
            """The array when ``store`` is a draft store (looked for only when
            zarr-python finds no array: a draft has no ``<path>/zarr.json``)."""
            if fmt is not None:  # a format was insisted on: not the draft's
                return None
            try:
                found = DraftStore.open(store, storage_options)
            except (FileNotFoundError, *PARSE_ERRORS):
                return None
            return None if found is None else cls(found.store, found.info(path), options)

        try:
            with enabled():  # zarr-python reads rectilinear grids only with its flag on
                arr = zarr.open_array(
                    store=store, path=path, mode="r", storage_options=storage_options, **kwargs
                )
            info = _info_of(arr)
        except ShardwiseError:
            raise
        except FileNotFoundError as e:
            if (reader := draft()) is not None:
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
            if (reader := draft()) is not None:
                return reader
            err = metadata_error(store, path, e, storage_options=storage_options)
            if err is e:
                raise
            raise err from e
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
        """A notebook's view (:func:`~shardwise.format.html.array_html`)."""
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
        """The decoder of a shard (a :class:`ShardDecoder`), or of a chunk of an
        unsharded array; one per distinct shard shape, built on first use.
        :class:`~shardwise.errors.TooLargeError` for a shard of more than
        :data:`~shardwise.format.grid.MAX_CHUNKS_PER_SHARD` inner chunks (its index could not
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
        """:meth:`read` in the caller's event loop: the requests go out on it (with the
        same coalescing and index cache), and the decoding runs in one worker thread, so
        the loop stays free while several reads are under way."""
        sel, shape, out = self._output(selection)
        if out.size:
            plan = self.info.layout.plan(sel)
            fetched = await self._fetch_all(plan)
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
        threads = min(read_threads(self.options.threads), len(plan.shards))
        if threads > 1:
            self._execute_parallel(plan, out, threads)
            return
        fetched = self._fetch_local(plan)
        if fetched is None:
            fetched = _compat.sync(self._fetch_all(plan))
        self._place(plan, fetched, out)

    def _execute_parallel(self, plan: ReadPlan, out: npt.NDArray[Any], threads: int) -> None:
        """:meth:`_execute` on ``threads`` threads of the process's read pool, each
        shard fetched and decoded into its own part of ``out`` by one thread (the codecs
        release the GIL). From a local file store every thread reads its shard itself,
        so reading one shard overlaps decoding another; from other stores every shard is
        fetched first (the requests concurrent, as on one thread), then decoded on the
        threads."""
        from zarr.storage import LocalStore

        def sub(i: int) -> ReadPlan:
            return dataclasses.replace(plan, shards=(plan.shards[i],))

        if type(self.store) is LocalStore:

            def one(i: int) -> None:
                part = sub(i)
                fetched = self._fetch_local(part)
                if fetched is None:
                    fetched = _compat.sync(self._fetch_all(part))
                self._place(part, fetched, out)

        else:
            everything = _compat.sync(self._fetch_all(plan))

            def one(i: int) -> None:
                self._place(sub(i), [everything[i]], out)

        for _ in read_pool(threads).map(one, range(len(plan.shards))):
            pass  # (an error in a thread is raised here)

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

    def _fetch_local(self, plan: ReadPlan) -> list[Fetched] | None:
        """A plan of one whole shard of a local file store, read on this thread into its
        reused buffer (no allocation and no page faults per shard, no hop to zarr's
        event loop). The chunks are views of that buffer: decoded at once by
        :meth:`_place`, before the thread reads again. None where the plan is
        fetched by :meth:`_fetch_all` (other stores, several shards, some chunks of a
        shard, indexes handed in by a fan-out graph)."""
        from zarr.storage import LocalStore

        if type(self.store) is not LocalStore or len(plan.shards) != 1:
            return None
        (shard_read,) = plan.shards
        decoder = self.decoder(shard_read.shard)
        if not isinstance(decoder, ShardDecoder):
            return None
        key = self.info.key(shard_read.shard)
        needed = sorted({c.inner for c in shard_read.chunks})
        if SUPPLIED.get((self._token, key)) is not None or not self._wants_whole(decoder, needed):
            return None
        with naming(self.info.name, key):  # an absent shard is no error
            try:
                f = open(self.store.root / key, "rb")  # noqa: SIM115 - closed below
            except (FileNotFoundError, NotADirectoryError):
                return [None]
        with f, naming(self.info.name, key):
            size = os.fstat(f.fileno()).st_size
            buf = scratch(size, "shard") if size <= SCRATCH_LIMIT else np.empty(size, np.uint8)
            view = memoryview(buf)
            n = 0
            while n < size and (got := f.readinto(view[n:])):
                n += got
        return [self._chunks_of_whole(decoder, buf[:n], key, needed)]

    def _wants_whole(self, decoder: ShardDecoder, needed: list[tuple[int, ...]]) -> bool:
        """Whether to read a shard whole: most of its inner chunks are wanted."""
        return len(needed) >= self.options.whole_shard_fraction * decoder.index.nchunks

    def _chunks_of_whole(
        self, decoder: ShardDecoder, whole: Any, key: str, needed: list[tuple[int, ...]]
    ) -> dict[tuple[int, ...], Bytes | None]:
        """The wanted inner chunks of a whole shard object held in memory; its index is
        checked and cached."""
        view, table = decoder.parse(whole, key=key)
        if self.options.index_cache:
            index_cache().put((self._token, key), table)
        return {inner: decoder.entry(view, table, inner) for inner in needed}

    def read_into(self, plan: ReadPlan, out: npt.NDArray[Any]) -> None:
        """Read what ``plan`` lists into ``out`` (of the plan's output shape); parts of
        ``out`` that no shard read of the plan covers are left as they are."""
        if plan.shards:
            self._execute(plan, out)

    def fetch_encoded(self, plan: ReadPlan, *, transient: bool = False) -> list[Fetched]:
        """The encoded inner chunks a plan touches, per shard read (None for a missing
        shard; per inner chunk its bytes, or None when it is empty), fetched as
        :meth:`read` fetches them: no decoding.

        ``transient=True`` allows what :meth:`read` does with one whole shard of a local
        file store: it is read into this thread's reused buffer, and the chunks are
        views of it, valid only until this thread's next read."""
        fetched = self._fetch_local(plan) if transient else None
        if fetched is None:
            fetched = _compat.sync(self._fetch_all(plan))
        return fetched

    async def _fetch_all(self, plan: ReadPlan) -> list[Fetched]:
        sem = asyncio.Semaphore(self.options.concurrency)
        return list(await asyncio.gather(*(self._fetch_shard(s, sem) for s in plan.shards)))

    async def _get(
        self, key: str, sem: asyncio.Semaphore, byte_range: Any = None
    ) -> memoryview | None:
        from zarr.buffer import default_buffer_prototype

        with naming(self.info.name, key):
            async with sem:
                buf = await self.store.get(key, default_buffer_prototype(), byte_range)
        if buf is None:
            return None
        return memoryview(buf.as_numpy_array()).cast("B")

    async def _fetch_shard(self, shard_read: ShardRead, sem: asyncio.Semaphore) -> Fetched:
        info, opts = self.info, self.options
        key = info.key(shard_read.shard)
        decoder = self.decoder(shard_read.shard)
        if not isinstance(decoder, ShardDecoder):
            whole = await self._get(key, sem)
            return None if whole is None else {(0,) * info.ndim: whole}

        needed = sorted({c.inner for c in shard_read.chunks})
        cache_key = (self._token, key)
        supplied = SUPPLIED.get(cache_key)
        if supplied is ABSENT:
            return None
        table: npt.NDArray[np.uint64] | None
        if isinstance(supplied, np.ndarray):
            table = supplied
        else:
            table = index_cache().get(cache_key) if opts.index_cache else None
        if table is None and self._wants_whole(decoder, needed):
            whole = await self._get(key, sem)
            if whole is None:
                return None
            return self._chunks_of_whole(decoder, whole, key, needed)

        if table is None:
            table = await self._load_index(key, decoder, sem)
            if table is None:
                return None
        result: dict[tuple[int, ...], Bytes | None] = {}
        wanted: list[tuple[int, ...]] = []
        ranges: list[ByteRange] = []
        for inner in needed:
            offset, nbytes = table[inner]
            if offset == EMPTY:
                result[inner] = None
            else:
                wanted.append(inner)
                ranges.append(ByteRange(int(offset), int(offset) + int(nbytes)))
        groups = coalesce(ranges, gap=opts.coalesce_gap, max_size=opts.coalesce_max)
        # With the index at the end, read by a suffix request, the shard's size is unknown
        # and an entry pointing into the index would pass every check: the group reaching
        # furthest is read on by the index's length, so a short read tells where the data
        # ends (one request as before; ``index.nbytes`` more bytes)
        tail = decoder.index.nbytes if decoder.index.location == "end" else 0
        last = max(  # (zero-length groups make no request)
            range(len(groups)),
            key=lambda g: (groups[g][0].stop > groups[g][0].start, groups[g][0].stop),
            default=-1,
        )

        async def fetch_group(req: ByteRange, members: list[int], extra: int) -> None:
            from zarr.abc.store import RangeByteRequest

            if req.stop == req.start:  # zero-length chunks need no request
                for m in members:
                    result[wanted[m]] = memoryview(b"")
                return
            try:
                buf = await self._get(key, sem, RangeByteRequest(req.start, req.stop + extra))
            except Exception as error:
                # the store's own error (StoreIOError keeps it as the cause)
                e = error.__cause__ if isinstance(error, StoreIOError) else error
                assert isinstance(e, Exception)
                if not (extra and out_of_bounds(e)):
                    if isinstance(e, OSError | ValueError) and not isinstance(e, ShardwiseError):
                        # a file system that refuses the seek (ext4 past 16 TiB) where the
                        # index points past any file: the object's size tells
                        await self._past_the_end(key, req, extra, members, ranges, wanted, e)
                    raise
                # a store that refuses a range past the object's end (Icechunk) rather
                # than return it short: the object ends before the read-on's end, so the
                # range reaching furthest lies in the index's bytes, or past the end
                r, inner = max(((ranges[m], wanted[m]) for m in members), key=lambda x: x[0].stop)
                raise TruncatedShardError(
                    "inner chunk lies outside the shard object's data",
                    expected=f"offset + nbytes at least {extra} bytes (the index) before the "
                    "object's end",
                    found=f"bytes [{r.start}, {r.stop}), and the object ends before byte "
                    f"{req.stop + extra} ({type(e).__name__}: {str(e).splitlines()[0]})",
                    array=info.name,
                    key=key,
                    chunk=inner,
                    advice="The shard index is corrupt or the shard truncated; rewrite the "
                    "shard from its source.",
                ) from e
            if buf is not None and extra:
                self._check_data_end(
                    key, req, buf, extra, [(ranges[m], wanted[m]) for m in members]
                )
                buf = buf[: req.stop - req.start]
            if buf is None:
                raise CorruptShardError(
                    "shard disappeared while it was being read",
                    expected="the shard whose index was just read",
                    found="no object",
                    key=key,
                    array=info.name,
                    advice="Another process deleted or rewrote it; read again.",
                )
            for m in members:
                r = ranges[m]
                piece = buf[r.start - req.start : r.stop - req.start]
                if len(piece) != r.stop - r.start:
                    raise TruncatedShardError(
                        "inner chunk lies past the end of the shard object",
                        expected=f"bytes [{r.start}, {r.stop})",
                        found=f"the object ends at byte {req.start + len(buf)}",
                        array=info.name,
                        key=key,
                        chunk=wanted[m],
                        advice="The shard is truncated; rewrite it from its source.",
                    )
                result[wanted[m]] = piece

        await asyncio.gather(
            *(
                fetch_group(req, members, tail if g == last else 0)
                for g, (req, members) in enumerate(groups)
            )
        )
        return result

    async def _past_the_end(
        self,
        key: str,
        req: ByteRange,
        extra: int,
        members: list[int],
        ranges: Sequence[ByteRange],
        wanted: Sequence[tuple[int, ...]],
        error: Exception,
    ) -> None:
        """Raise :class:`TruncatedShardError` when a ranged read failed because its
        range reaches past the object's end (the store's ``error`` kept as the cause);
        return when the object's size is unknown or the range lies inside it."""
        try:
            size = await self.store.getsize(key)
        except Exception:  # the size cannot be had: the store's own error stands
            return
        if req.stop + extra <= size:
            return
        r, inner = max(((ranges[m], wanted[m]) for m in members), key=lambda x: x[0].stop)
        raise TruncatedShardError(
            "inner chunk lies outside the shard object",
            expected=f"byte ranges within the object's {size} bytes",
            found=f"bytes [{r.start}, {r.stop}) ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})",
            array=self.info.name,
            key=key,
            chunk=inner,
            advice="The shard index is corrupt; rewrite the shard from its source.",
        ) from error

    def _check_data_end(
        self,
        key: str,
        req: ByteRange,
        buf: memoryview,
        extra: int,
        members: list[tuple[ByteRange, tuple[int, ...]]],
    ) -> None:
        """``buf`` is ``req`` read on by ``extra`` (the index's length): when it comes back
        short the object ends there, and no inner chunk may reach into its last ``extra``
        bytes (the index)."""
        if len(buf) >= req.stop - req.start + extra:
            return  # the object goes on past the index's length: every range is data
        size = req.start + len(buf)
        data_stop = size - extra
        for r, inner in members:
            if r.stop > data_stop:
                raise TruncatedShardError(
                    "inner chunk lies outside the shard object's data",
                    expected=f"offset + nbytes <= {data_stop} (the index takes the last "
                    f"{extra} bytes)",
                    found=f"bytes [{r.start}, {r.stop}) of a {size}-byte object",
                    array=self.info.name,
                    key=key,
                    chunk=inner,
                    advice="The shard index is corrupt or the shard truncated; rewrite the "
                    "shard from its source.",
                )

    @property
    def token(self) -> str:
        """Names this opened array in every process: the first half of the keys of
        :func:`~shardwise.io.cache.index_cache` and :data:`~shardwise.io.cache.SUPPLIED`."""
        return self._token

    def shard_index(self, shard: tuple[int, ...]) -> npt.NDArray[np.uint64] | None:
        """Read (or take from this process's cache) the decoded index of one shard:
        ``(offset, nbytes)`` pairs over its inner chunks, or ``None`` when the shard does
        not exist. One request when not cached."""

        decoder = self.decoder(shard)
        if not isinstance(decoder, ShardDecoder):
            raise ValueError(f"array {self.info.name!r} is not sharded: its chunks have no index")
        key = self.info.key(shard)
        sem = asyncio.Semaphore(1)
        table: npt.NDArray[np.uint64] | None = _compat.sync(self._load_index(key, decoder, sem))
        return table

    async def _load_index(
        self, key: str, decoder: ShardDecoder, sem: asyncio.Semaphore
    ) -> npt.NDArray[np.uint64] | None:
        """Read (:func:`~shardwise.io.shard_index.read_shard_index`), check and cache one
        shard's index; concurrent loads of one shard in this process share one request."""
        cache_key = (self._token, key)

        async def load() -> npt.NDArray[np.uint64] | None:
            if self.options.index_cache:
                cached = index_cache().get(cache_key)
                if cached is not None:
                    return cached
            table = await read_shard_index(
                self.store,
                key,
                decoder.index,
                array=self.info.name,
                max_nbytes=decoder.chunk.max_encoded,
                sem=sem,
                name_errors=True,
            )
            if table is not None and self.options.index_cache:
                index_cache().put(cache_key, table)
            return table

        return await IN_FLIGHT.run(cache_key, load)


def _all_slices(sel: tuple[Sel, ...]) -> bool:
    return all(isinstance(s, slice) for s in sel)


# -- threads for reads outside dask ---------------------------------------------------------
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def read_threads(option: int | None) -> int:
    """How many threads a read takes (``ReadOptions.threads``): ``option`` when given;
    else every core this process may use when called from the main thread of a process
    that is not a child (a script, a notebook: no dask task runs there but under dask's
    synchronous scheduler, which runs one at a time), one elsewhere (dask's and
    distributed's worker threads, dask's process pool: their parallelism is dask's)."""
    if option is not None:
        return option
    if threading.current_thread() is not threading.main_thread():
        return 1
    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def read_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of read threads, at least ``threads`` strong, made on first use
    and kept (its threads keep their scratch buffers from read to read)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or threads > _POOL_SIZE:
            old, _POOL = (
                _POOL,
                concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="shardwise-read"),
            )
            _POOL_SIZE = threads
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def _forget_pool() -> None:
    """In a child made by ``fork``: the parent's threads are not there."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE, _POOL_LOCK = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _ix(sel: tuple[Sel, ...]) -> tuple[Any, ...]:
    """An index for ``sel`` usable on both sides of an assignment: plain slices when all
    are slices, else an open mesh (``np.ix_``) of index arrays."""
    if _all_slices(sel):
        return sel
    arrays = [np.arange(s.start, s.stop, s.step or 1) if isinstance(s, slice) else s for s in sel]
    return np.ix_(*arrays)


def _info_of(arr: Any) -> ArrayInfo:
    """The :class:`ArrayInfo` of an open ``zarr.Array`` (Zarr v3 or v2)."""
    if arr.metadata.zarr_format == 2:
        return v2_array_info(arr.metadata, arr.path)
    return ArrayInfo.from_metadata(arr.metadata, arr.path)


def _v2_key(path: str) -> str:
    path = path.strip("/")
    return f"{path}/.zarray" if path else ".zarray"


def _open_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``zarr.open_array``, as :func:`dask.array.from_zarr` passes them:
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
