"""Zarr v2 arrays, read as the Zarr v3 arrays they are equivalent to.

A Zarr v2 array (``.zarray``) is an unsharded array whose chunks are encoded by
``filters`` then a ``compressor``, in ``C`` or ``F`` memory order, at keys ``0.1`` (or
``0/1``). This module translates its document into zarr-python's ``ArrayV3Metadata`` of
the equivalent unsharded Zarr v3 array: ``F`` order as a ``transpose`` codec, the
filters as array-to-array codecs, ``bytes`` in the data type's byte order, the
compressor as Zarr v3's own ``zstd``, ``blosc`` or ``gzip`` codec where there is one
(they decode the same bytes) and as zarr-python's ``numcodecs.*`` codec otherwise,
and the ``v2`` chunk key encoding with the array's separator. The reader, ``inventory``
and ``reshard`` then need no special case. The same translation of numcodecs
compressors serves the 2022 draft (:mod:`shardwise.io.draft`).

The fill value keeps its Zarr v2 meaning in :attr:`V2ArrayInfo.v2_fill_value` (``None``
for ``fill_value: null``: chunks never written are undefined; read as 0 here, as
zarr-python 3 does).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise.errors import UnsupportedArrayError, UnsupportedCodecError
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import node_path

__all__ = ["V2ArrayInfo", "array_info", "compressor_codecs", "parse_documents"]

_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
# numcodecs ids zarr-python has codecs for (zarr.codecs.numcodecs), by their kind
_BYTES_BYTES = {"zlib", "lz4", "bz2", "lzma", "shuffle", "crc32", "crc32c", "adler32"}
_ARRAY_ARRAY = {"delta", "fixedscaleoffset", "quantize", "bitround", "astype", "packbits"}


def compressor_codecs(config: dict[str, Any] | None, itemsize: int) -> list[dict[str, Any]] | None:
    """The Zarr v3 codecs (as JSON) that decode what the numcodecs compressor ``config``
    (``{"id": ..., ...}``) encoded: ``[]`` for none, None when zarr-python has no codec
    for it."""
    if config is None:
        return []
    name = str(config.get("id", ""))
    if name == "zstd":
        out = {"level": int(config.get("level", 0)), "checksum": bool(config.get("checksum"))}
        return [{"name": "zstd", "configuration": out}]
    if name == "gzip":
        return [{"name": "gzip", "configuration": {"level": int(config.get("level", 5))}}]
    if name == "blosc":
        shuffle = int(config.get("shuffle", 1))
        if shuffle == -1:  # numcodecs' AUTOSHUFFLE: bit-shuffle for 1-byte items
            shuffle = 2 if itemsize == 1 else 1
        settings: dict[str, Any] = {
            "cname": str(config.get("cname", "lz4")),
            "clevel": int(config.get("clevel", 5)),
            "shuffle": _BLOSC_SHUFFLE[shuffle],
            "blocksize": int(config.get("blocksize", 0)),
            "typesize": itemsize,
        }
        return [{"name": "blosc", "configuration": settings}]
    if name in _BYTES_BYTES:
        rest = {k: v for k, v in config.items() if k != "id"}
        return [{"name": f"numcodecs.{name}", "configuration": rest}]
    return None


@dataclass(frozen=True)
class V2ArrayInfo(ArrayInfo):
    """A Zarr v2 array: the geometry and codecs of the equivalent unsharded Zarr v3
    array, with the v2 chunk keys."""

    v2_fill_value: Any = None  # the document's fill_value (None for null)

    @property
    def document_key(self) -> str:
        return _document(self.path, ".zarray")


def _document(path: str, name: str) -> str:
    """The key of the document ``name`` (``.zarray``, ``.zgroup``, ``.zattrs``) of the
    node at ``path``."""
    return f"{path}/{name}" if path else name


def _bad(path: str, found: str, expected: str, error: type = UnsupportedArrayError) -> Any:
    return error(
        "the Zarr v2 array cannot be read by shardwise",
        expected=expected,
        found=found,
        array=path or "/",
        key=_document(path, ".zarray"),
        advice="Read it with zarr-python or engine='zarr'.",
    )


def parse_documents(
    path: str, zarray: bytes | None, zgroup: bytes | None, zattrs: bytes | None
) -> Any:
    """zarr-python's ``ArrayV2Metadata`` (when there is a ``.zarray``) or
    ``GroupMetadata`` (a ``.zgroup``) of the Zarr v2 node at ``path``, from its
    documents' bytes (None where absent), or None when it has neither. A document
    that cannot be read raises :class:`UnsupportedArrayError` naming the node and that
    document, with zarr-python's own message."""

    def load(raw: bytes, name: str) -> dict[str, Any]:
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise _damaged(path, name, f"no JSON ({e})") from e
        if not isinstance(doc, dict):
            raise _damaged(path, name, f"a JSON {type(doc).__name__}, not an object")
        return doc

    raw, name = (zarray, ".zarray") if zarray is not None else (zgroup, ".zgroup")
    if raw is None:
        return None
    doc = load(raw, name)
    attributes = {} if zattrs is None else load(zattrs, ".zattrs")
    try:
        cls: Any = _compat.ArrayV2Metadata if name == ".zarray" else _compat.GroupMetadata
        return _compat.from_dict(cls, {**doc, "attributes": attributes}, path)
    except Exception as e:  # zarr-python's parsers raise ValueError, TypeError, KeyError...
        raise _damaged(path, name, f"{type(e).__name__}: {e}") from e


def _damaged(path: str, name: str, found: str) -> UnsupportedArrayError:
    return UnsupportedArrayError(
        "the metadata cannot be read",
        expected=f"a valid Zarr v2 {name} document",
        found=found,
        array=path or "/",
        key=_document(path, name),
        advice="The document is damaged or was not written by a Zarr v2 writer: "
        "rewrite it (or the array) from its source.",
    )


def array_info(metadata: Any, path: str) -> V2ArrayInfo:
    """The :class:`V2ArrayInfo` of zarr-python's ``ArrayV2Metadata`` at ``path`` (a
    path breaking the node-name rules raises :class:`~shardwise.errors.UnsafeNameError`)."""

    path = node_path(path.strip("/"), document=_document(path.strip("/"), ".zarray"))
    dtype = np.dtype(metadata.dtype.to_native_dtype())
    shape = [int(n) for n in metadata.shape]
    chunks = [int(n) for n in metadata.chunks]
    if dtype.kind not in "biufc" or dtype.hasobject:
        raise _bad(path, f"dtype {dtype.str!r}", "a fixed-size numeric or bool dtype")

    codecs: list[dict[str, Any]] = []
    if metadata.order == "F" and len(shape) > 1:
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    after: list[dict[str, Any]] = []  # bytes-to-bytes filters: after `bytes`
    for f in metadata.filters or ():
        config = dict(f.get_config())
        name = str(config.pop("id", ""))
        if name in _ARRAY_ARRAY and not after:
            codecs.append({"name": f"numcodecs.{name}", "configuration": config})
        elif name in _BYTES_BYTES:
            after.append({"name": f"numcodecs.{name}", "configuration": config})
        else:
            raise _bad(
                path,
                f"filter {json.dumps({'id': name, **config})}",
                "numeric filters zarr-python has codecs for, array-to-array ones first",
                UnsupportedCodecError,
            )
    if dtype.itemsize > 1:
        endian = "big" if dtype.byteorder == ">" else "little"
        codecs.append({"name": "bytes", "configuration": {"endian": endian}})
    else:
        codecs.append({"name": "bytes"})
    codecs += after
    compressor = None if metadata.compressor is None else dict(metadata.compressor.get_config())
    mapped = compressor_codecs(compressor, dtype.itemsize)
    if mapped is None:
        raise _bad(
            path,
            f"compressor {json.dumps(compressor)}",
            "no compressor, or one zarr-python has a codec for",
            UnsupportedCodecError,
        )
    codecs += mapped

    fill = metadata.fill_value
    keys = {"name": "v2", "configuration": {"separator": metadata.dimension_separator or "."}}
    v3 = equivalent_metadata(
        path,
        shape=shape,
        dtype=dtype,
        outer=chunks,
        keys=keys,
        fill=0 if fill is None else _json_fill(fill),
        codecs=codecs,
        attributes=dict(metadata.attributes),
        bad=lambda found, expected: _bad(path, found, expected),
    )
    base = ArrayInfo.from_metadata(v3, path)
    return V2ArrayInfo(
        path=base.path, metadata=base.metadata, layout=base.layout, v2_fill_value=fill
    )


def equivalent_metadata(
    path: str,
    *,
    shape: list[int],
    dtype: np.dtype[Any],
    outer: list[int],
    keys: dict[str, Any],
    fill: Any,
    codecs: list[dict[str, Any]],
    attributes: dict[str, Any],
    bad: Any,
) -> Any:
    """zarr-python's ``ArrayV3Metadata`` of the Zarr v3 array equivalent to an array of
    an older format (dimension names from ``_ARRAY_DIMENSIONS``); ``bad(found,
    expected)`` makes the error for a document zarr-python cannot map."""

    dims = attributes.get("_ARRAY_DIMENSIONS")
    final: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype.newbyteorder("=").name if dtype.itemsize > 1 else dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": outer}},
        "chunk_key_encoding": keys,
        "fill_value": fill,
        "codecs": codecs,
        "attributes": attributes,
    }
    if isinstance(dims, list) and len(dims) == len(shape):
        final["dimension_names"] = [str(d) for d in dims]
    with warnings.catch_warnings():
        # zarr-python warns that numcodecs.* codecs are not in the Zarr v3 spec; here
        # they stand for the older format's own codecs
        warnings.filterwarnings("ignore", message=".*numcodecs.*", category=UserWarning)
        try:
            return _compat.ArrayV3Metadata.from_dict(final)
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"{type(e).__name__}: {e}", "a document zarr-python can map") from e


def _json_fill(value: Any) -> Any:
    """A fill value as Zarr v3 JSON (NaN and infinities by name)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if np.isnan(value):
            return "NaN"
        if np.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, complex):
        return [_json_fill(value.real), _json_fill(value.imag)]
    return value
