"""Stores of the 2022 draft: Zarr v3 core draft layout with the sharding storage transformer.

zarr-python 2.14-2.18 wrote these behind ``ZARR_V3_EXPERIMENTAL_API=1`` and
``ZARR_V3_SHARDING=1`` (spec: ``storage_transformers/sharding/1.0``). Layout: a root
``zarr.json`` whose ``zarr_format`` is the draft protocol URI, array documents at
``meta/root/<path>.array.json``, group documents at ``meta/root/<path>.group.json``
(implicit groups have none) and data at ``data/root/<path>/c<i><sep><j>...``.

A draft shard is a ``sharding_indexed`` shard in all but name: inner chunks anywhere in
the object, then an index of little-endian ``(offset, nbytes)`` uint64 pairs in C order
(``2**64-1`` for a missing chunk), always at the end and without a checksum. So this
module only translates a draft document into zarr-python's ``ArrayV3Metadata`` of the
equivalent final-spec array (the compressor as a v3 codec, ``F`` memory layout as a
``transpose`` codec, the index codecs as ``bytes`` alone) and names the chunk keys the
draft's way (:class:`DraftArrayInfo`); the reader, ``verify`` and the graphs then need
no special case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise.errors import (
    NotAZarrStoreError,
    UnsupportedArrayError,
    UnsupportedCodecError,
    is_client_error,
)
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import node_name, node_path
from shardwise.format.v2 import compressor_codecs, equivalent_metadata
from shardwise.io.listing import list_names
from shardwise.io.opener import DRAFT, DRAFT_FORMAT, is_draft_root, open_store

__all__ = [
    "DRAFT_FORMAT",
    "SHARDING_URI",
    "DraftArrayInfo",
    "DraftStore",
    "array_info",
    "is_draft_root",
]

SHARDING_URI = "https://purl.org/zarr/spec/storage_transformers/sharding/1.0"
CODEC_URI = "https://purl.org/zarr/spec/codec/"


@dataclass(frozen=True)
class DraftArrayInfo(ArrayInfo):
    """An array of a draft store: the geometry and codecs of the equivalent final-spec
    array, with the draft's chunk keys (``data/root/<path>/c0/1``)."""

    separator: str = "/"
    prefix: str = ""  # where the draft store starts inside the zarr-python store

    @property
    def document_key(self) -> str:
        return f"{self.prefix}meta/root/{self.path}.array.json"

    @property
    def data_prefix(self) -> str:
        return f"{self.prefix}data/root/{self.path}/"

    def key(self, shard: tuple[int, ...]) -> str:
        return f"{self.data_prefix}c{self.separator.join(map(str, shard))}"

    def coords(self, key: str) -> tuple[int, ...] | None:
        start = f"{self.data_prefix}c"
        if not key.startswith(start):
            return None
        rest = key[len(start) :]
        try:
            coords = tuple(int(c) for c in rest.split(self.separator)) if rest else ()
        except ValueError:
            return None
        return coords if self._on_grid(coords) and self.key(coords) == key else None


def _bad(path: str, found: str, expected: str) -> UnsupportedArrayError:
    return UnsupportedArrayError(
        "the array document of the 2022 draft cannot be read",
        expected=expected,
        found=found,
        array=path or "/",
        key=f"meta/root/{path}.array.json",
        advice="The document is damaged, or uses a part of the draft shardwise does not "
        "read; report it with the document attached.",
    )


def _compressor(path: str, spec: Any, itemsize: int) -> list[dict[str, Any]]:
    """The draft ``compressor`` as final-spec codecs (empty for none)."""
    if spec is None:
        return []
    uri = spec.get("codec", "") if isinstance(spec, dict) else ""
    config = dict(spec.get("configuration") or {}) if isinstance(spec, dict) else {}
    name = uri.removeprefix(CODEC_URI).rsplit("/", 1)[0] if uri.startswith(CODEC_URI) else ""
    mapped = compressor_codecs({**config, "id": name}, itemsize) if name else None
    if mapped is not None:
        return mapped
    raise UnsupportedCodecError(
        "the draft array's compressor is not one shardwise reads",
        expected=f"no compressor, or blosc, zstd, gzip, zlib, lz4, bz2 or lzma ({CODEC_URI}<name>/1.0)",
        found=json.dumps(spec),
        array=path or "/",
        key=f"meta/root/{path}.array.json",
        advice="Read the array with a zarr-python 2.18 environment and rewrite it.",
    )


def _fill(value: Any, dtype: np.dtype[Any]) -> Any:
    if value is None:
        return 0
    return value  # "NaN", "Infinity", numbers: the final spec writes them the same way


def array_info(doc: Any, path: str, prefix: str = "") -> DraftArrayInfo:
    """The :class:`DraftArrayInfo` of the array document ``doc`` at ``path`` (a path
    breaking the node-name rules raises :class:`~shardwise.errors.UnsafeNameError`)."""

    path = node_path(path.strip("/"), document=f"{prefix}meta/root/{path.strip('/')}.array.json")
    if not isinstance(doc, dict):
        raise _bad(path, f"a JSON {type(doc).__name__}", "a JSON object")
    try:
        shape = [int(n) for n in doc["shape"]]
        dtype = np.dtype(doc["data_type"])
        grid = doc["chunk_grid"]
        chunks = [int(n) for n in grid["chunk_shape"]]
        separator = str(grid.get("separator", "/"))
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"{type(e).__name__}: {e}", "shape, data_type and chunk_grid") from e
    if grid.get("type") != "regular" or len(chunks) != len(shape):
        raise _bad(path, json.dumps(grid), "a regular chunk_grid with a size per dimension")
    if separator not in ("/", "."):  # it goes into every chunk key
        raise _bad(path, f"chunk_grid separator {separator!r}", "'/' or '.'")
    if dtype.kind not in "biufc" or dtype.hasobject:
        raise _bad(path, f"data_type {doc['data_type']!r}", "a fixed-size numeric data_type")
    layout = doc.get("chunk_memory_layout", "C")
    if layout not in ("C", "F"):
        raise _bad(path, f"chunk_memory_layout {layout!r}", "'C' or 'F'")

    inner: list[dict[str, Any]] = []
    if layout == "F" and len(shape) > 1:
        inner.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    if dtype.itemsize > 1:
        endian = "big" if dtype.byteorder == ">" else "little"
        inner.append({"name": "bytes", "configuration": {"endian": endian}})
    else:
        inner.append({"name": "bytes"})
    inner += _compressor(path, doc.get("compressor"), dtype.itemsize)

    transformers = doc.get("storage_transformers") or []
    if len(transformers) > 1 or any(
        not isinstance(t, dict) or t.get("extension") != SHARDING_URI or t.get("type") != "indexed"
        for t in transformers
    ):
        raise UnsupportedCodecError(
            "the draft array has a storage transformer shardwise does not read",
            expected=f"none, or one {SHARDING_URI} of type 'indexed'",
            found=json.dumps(transformers),
            array=path or "/",
            key=f"meta/root/{path}.array.json",
        )
    if transformers:
        per_shard = (transformers[0].get("configuration") or {}).get("chunks_per_shard")
        if not isinstance(per_shard, list) or len(per_shard) != len(shape):
            raise _bad(path, json.dumps(transformers[0]), "chunks_per_shard for every dimension")
        outer = [c * int(n) for c, n in zip(chunks, per_shard, strict=True)]
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": chunks,
                    "codecs": inner,
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_location": "end",
                },
            }
        ]
    else:
        outer, codecs = chunks, inner

    metadata = equivalent_metadata(
        path,
        shape=shape,
        dtype=dtype,
        outer=outer,
        keys={"name": "default", "configuration": {"separator": "/"}},
        fill=_fill(doc.get("fill_value"), dtype),
        codecs=codecs,
        attributes=dict(doc.get("attributes") or {}),
        bad=lambda found, expected: _bad(path, found, expected),
    )
    base = ArrayInfo.from_metadata(metadata, path)
    return DraftArrayInfo(
        path=base.path,
        metadata=base.metadata,
        layout=base.layout,
        separator=separator,
        prefix=prefix,
    )


class DraftStore:
    """The documents of a draft store in a zarr-python ``Store``, from ``prefix`` on
    (``""``, or a path ending in ``/``)."""

    def __init__(self, store: Any, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix

    @classmethod
    def open(cls, store: Any, storage_options: dict[str, Any] | None = None) -> DraftStore | None:
        """The draft store at ``store`` (a path, URL or ``Store``), or None when what is
        there is not a draft store (:func:`~shardwise.io.opener.open_store` tells)."""
        opened = open_store(store, storage_options, draft_only=True)
        if opened is None or opened.format != DRAFT:
            return None
        return cls(opened.store, opened.prefix)

    @classmethod
    def after(
        cls, error: BaseException, store: Any, storage_options: dict[str, Any] | None = None
    ) -> DraftStore | None:
        """The draft store at ``store``, looked for because zarr-python failed to open
        it with ``error`` (a draft has no ``zarr.json`` where zarr-python looks): None
        when there is none, when ``error`` is the store's own failure (an I/O error: no
        draft is looked for after one), or when the look fails too (the first error
        stands)."""
        if not isinstance(error, FileNotFoundError) and (
            isinstance(error, OSError) or is_client_error(error)
        ):
            return None
        try:
            return cls.open(store, storage_options)
        except Exception:  # not a store at all
            return None

    def get(self, key: str) -> bytes | None:
        from zarr.buffer import default_buffer_prototype

        buf = _compat.sync(self.store.get(self.prefix + key, prototype=default_buffer_prototype()))
        return None if buf is None else buf.to_bytes()

    def _listing(self, group: str) -> list[str]:
        """The names in the folder of ``group``'s documents: ``<name>.array.json``,
        ``<name>.group.json`` and folders ``<name>``. Every name is checked: one that
        breaks the node-name rules (a document ``...array.json`` names an array ``..``)
        raises :class:`~shardwise.errors.UnsafeNameError` naming it and its document,
        whatever is asked of the listing."""

        where = self._folder(node_path(group))
        found = sorted(_compat.sync(list_names(self.store, where)))
        for n in found:
            name = n.rstrip("/")
            for suffix in (".array.json", ".group.json"):
                if n.endswith(suffix):
                    name = n.removesuffix(suffix)
            node_name(name, document=where + n)
        return found

    def _folder(self, group: str) -> str:
        """The key prefix of the documents directly in ``group``."""
        return f"{self.prefix}meta/root/{group}/" if group else f"{self.prefix}meta/root/"

    def arrays(self, group: str = "") -> list[str]:
        """The names of the arrays directly in ``group`` (names checked: see
        :meth:`_listing`)."""
        return [
            n.removesuffix(".array.json")
            for n in self._listing(group.strip("/"))
            if n.endswith(".array.json")
        ]

    def groups(self, group: str = "") -> list[str]:
        """The names of the groups directly in ``group``: those with a document and the
        implicit ones (a folder of documents without one); names checked (see
        :meth:`_listing`)."""
        names = self._listing(group.strip("/"))
        found = {n.removesuffix(".group.json") for n in names if n.endswith(".group.json")}
        found |= {n.rstrip("/") for n in names if not n.endswith((".array.json", ".group.json"))}
        return sorted(found)

    def group_attributes(self, group: str = "") -> dict[str, Any]:
        """The attributes of ``group`` (none for an implicit group); a document that
        cannot be read raises :class:`UnsupportedArrayError` naming it."""
        group = node_path(group.strip("/"))
        key = f"meta/root/{group}.group.json" if group else "meta/root.group.json"
        raw = self.get(key)
        if raw is None:
            return {}
        try:
            doc = json.loads(raw)
            attributes = (doc.get("attributes") or {}) if isinstance(doc, dict) else {}
            if not isinstance(attributes, dict):
                raise ValueError(f"attributes {json.dumps(attributes)}, not an object")
        except (UnicodeDecodeError, ValueError) as e:
            raise UnsupportedArrayError(
                "the group document of the 2022 draft cannot be read",
                expected="a JSON object, with attributes an object",
                found=str(e),
                array=group or "/",
                key=self.prefix + key,
            ) from e
        return dict(attributes)

    def info(self, path: str) -> DraftArrayInfo:
        """The :class:`DraftArrayInfo` of the array at ``path``."""
        key = f"meta/root/{path.strip('/')}.array.json"
        path = node_path(path.strip("/"), document=self.prefix + key)
        raw = self.get(key)
        if raw is None:
            raise NotAZarrStoreError(
                "no array of the 2022 draft here",
                expected=f"an array document {key}",
                found="nothing",
                array=path or "/",
                key=self.prefix + key,
            )
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise _bad(path, f"no JSON ({e})", "a JSON object") from e
        return array_info(doc, path, self.prefix)
