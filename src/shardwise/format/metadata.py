"""Array metadata, read through zarr-python and reduced to what the shard engine needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise._flags import rectilinear_grids
from shardwise.errors import UnsupportedArrayError, UnsupportedCodecError, VersionError
from shardwise.format.grid import ShardLayout
from shardwise.format.names import node_path

__all__ = [
    "FIXED_KINDS",
    "ArrayInfo",
    "metadata_key",
    "node_document",
    "parse_document",
    "read_document",
]

FIXED_KINDS = "biufcmM"
"""The numpy dtype kinds of fixed size (numbers, booleans, times): what the shard writer
encodes itself. Others (strings, objects) go through zarr-python."""


# The largest extent numpy, dask and xarray can index (int64).
MAX_EXTENT = 2**63 - 1

# What zarr-python's and xarray's metadata parsing raise on a damaged document (found by
# fuzzing); I/O errors (OSError) are not among them, so a flaky connection is not
# answered by more requests looking for a culprit.
PARSE_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    AttributeError,
    NotImplementedError,
    ZeroDivisionError,  # (zarr-python 3.1 opening an inner chunk size of 0)
)


def node_document(raw: Any, node_type: str | None = None) -> dict[str, Any] | None:
    """A metadata document's JSON object (``raw``: its bytes, or a buffer), None when
    it is absent, no JSON object, or not of ``node_type`` (``"array"``, ``"group"``)
    where one is asked for: for code that edits documents read from a store and leaves
    any other alone (the readers' checks are :func:`parse_document`'s)."""
    if raw is None:
        return None
    try:
        doc = json.loads(bytes(raw))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if node_type is not None and doc.get("node_type") != node_type:
        return None
    return doc


def metadata_key(path: str) -> str:
    """The store key of the ``zarr.json`` of the node at ``path``."""
    path = path.strip("/")
    return f"{path}/zarr.json" if path else "zarr.json"


def _bad_document(path: str, key: str, found: str) -> UnsupportedArrayError:
    return UnsupportedArrayError(
        "the metadata cannot be read",
        expected="a valid Zarr v3 zarr.json document",
        found=found,
        array=path or "/",
        key=key,
        advice="The document is damaged or was not written by a Zarr v3 writer: "
        "rewrite it (or the array) from its source.",
    )


def parse_document(raw: bytes, key: str) -> Any:
    """zarr-python's ``ArrayV3Metadata`` or ``GroupMetadata`` of one ``zarr.json``
    document at ``key``. A document zarr-python cannot read raises
    :class:`UnsupportedArrayError` (:class:`UnsupportedCodecError` for an unknown codec)
    naming the node and ``key``, with zarr-python's own message; a ``key`` whose node
    path breaks the node-name rules raises :class:`~shardwise.errors.UnsafeNameError`."""
    from zarr.errors import UnknownCodecError

    path = node_path(key.removesuffix("zarr.json").removesuffix("/"), document=key)

    def bad(found: str) -> UnsupportedArrayError:
        return _bad_document(path, key, found)

    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"no JSON ({e})") from e
    if not isinstance(doc, dict):
        raise bad(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("zarr_format") != 3:
        raise bad(f"zarr_format {doc.get('zarr_format')!r} in a zarr.json (Zarr v3's name)")
    node = doc.get("node_type")
    if node not in ("array", "group"):
        raise bad(f"node_type {node!r} (expected 'array' or 'group')")
    grid = doc.get("chunk_grid")
    rectilinear = isinstance(grid, dict) and grid.get("name") == "rectilinear"
    if rectilinear and not _compat.has("rectilinear"):
        raise VersionError(
            "the array has a rectilinear shard grid, which this installation cannot read",
            expected=_compat.needed("rectilinear"),
            found="chunk_grid 'rectilinear'",
            array=path or "/",
            key=key,
            advice="Upgrade zarr (pip install 'zarr>=3.2').",
        )
    try:
        # zarr-python reads rectilinear grids only with its flag on: an array's own, and
        # its members' in a group's consolidated metadata
        with rectilinear_grids():
            if node == "group":
                return _compat.GroupMetadata.from_dict(doc)
            return _compat.ArrayV3Metadata.from_dict(doc)
    except UnknownCodecError as e:
        raise UnsupportedCodecError(
            "the array's metadata names a codec zarr-python does not know",
            expected="a codec registered with zarr-python",
            found=str(e),
            array=path or "/",
            key=key,
            advice="Install the package that registers this codec with zarr-python "
            "(zarr.registry.register_codec), then open again.",
        ) from e
    except ValueError as e:
        if "index_codecs" not in str(e):
            raise bad(f"{type(e).__name__}: {e}") from e
        raise UnsupportedCodecError(  # zarr-python refuses index codecs of no fixed size
            "the shard index codecs have no fixed encoded size",
            expected="index codecs whose encoded size is fixed, as the sharding spec requires "
            "(bytes, transpose, checksums)",
            found=str(e),
            array=path or "/",
            key=key,
            advice="Write the array with fixed-size index codecs (the default is bytes + "
            "crc32c); a shard index is found by its size.",
        ) from e
    except Exception as e:  # zarr-python's parsers raise ValueError, TypeError, KeyError...
        raise bad(f"{type(e).__name__}: {e}") from e


def read_document(raw: bytes, key: str, *, need_dims: bool = False) -> ArrayInfo | None:
    """Read one ``zarr.json`` document: the :class:`ArrayInfo` of an array, None for a
    group. What zarr-python (or shardwise, or xarray when ``need_dims``) cannot read
    raises :class:`UnsupportedArrayError` (:class:`UnsupportedCodecError` for an unknown
    codec) naming the array and ``key``, with zarr-python's own message (see
    :func:`parse_document`)."""

    metadata = parse_document(raw, key)
    if not isinstance(metadata, _compat.ArrayV3Metadata):
        return None
    path = key.removesuffix("zarr.json").removesuffix("/")

    def bad(found: str) -> UnsupportedArrayError:
        return _bad_document(path, key, found)

    info = ArrayInfo.from_metadata(metadata, path)
    names = metadata.dimension_names
    ndim = len(metadata.shape)
    if need_dims and (
        (names is None and ndim)
        or (
            names is not None and (len(names) != ndim or not all(isinstance(n, str) for n in names))
        )
    ):
        raise bad(
            f"dimension_names {None if names is None else list(names)!r} for "
            f"{ndim} dimensions (xarray needs a name for each; open the array with "
            "shardwise.ArrayReader or zarr-python instead)"
        )
    return info


@dataclass(frozen=True)
class ArrayInfo:
    """A Zarr v3 array's geometry, data type, fill value and codecs.

    ``path`` is the array's path inside its store ("" for an array at the root);
    ``metadata`` is zarr-python's ``ArrayV3Metadata``.
    """

    path: str
    metadata: Any
    layout: ShardLayout

    @classmethod
    def from_metadata(cls, metadata: Any, path: str = "") -> ArrayInfo:

        path = node_path(path.strip("/"), document=metadata_key(path))
        name = path or "/"
        if not isinstance(metadata, _compat.ArrayV3Metadata):
            raise UnsupportedArrayError(
                "not a Zarr v3 array",
                expected="zarr_format 3",
                found=f"zarr_format {getattr(metadata, 'zarr_format', '?')}",
                array=name,
                key=f"{path.strip('/')}/.zarray" if path.strip("/") else ".zarray",
                advice="Read Zarr v2 arrays with engine='zarr'.",
            )
        key = metadata_key(path)
        if any(n > MAX_EXTENT for n in metadata.shape):
            raise UnsupportedArrayError(
                "shape too large",
                expected="extents up to 2**63 - 1 (what numpy, dask and xarray can index)",
                found=str(tuple(metadata.shape)),
                array=name,
                key=key,
            )
        if metadata.storage_transformers:
            raise UnsupportedArrayError(
                "storage transformers are not supported",
                expected="no storage_transformers",
                found=str(list(metadata.storage_transformers)),
                array=name,
                key=key,
                advice="Data in the 2022 sharding storage-transformer draft must be migrated "
                "to the sharding_indexed codec.",
            )
        grid = metadata.chunk_grid
        shards: list[int | tuple[int, ...]]
        if isinstance(grid, _compat.RegularChunkGridMetadata):
            shards = list(grid.chunk_shape)
        elif isinstance(grid, _compat.RectilinearChunkGridMetadata):
            shards = list(grid.chunk_shapes)
        else:
            raise UnsupportedArrayError(
                "unknown chunk grid",
                expected="'regular' or 'rectilinear'",
                found=type(grid).__name__,
                array=name,
                key=key,
            )
        sharding = _compat.sharding_codec(metadata)
        inner = None if sharding is None else tuple(sharding.chunk_shape)
        try:
            layout = ShardLayout.build(metadata.shape, shards, inner)
        except ValueError as e:
            raise UnsupportedArrayError(
                "impossible chunk geometry",
                expected="shard and inner chunk sizes from 1 to 2**63 - 1, inner chunks "
                "dividing every shard",
                found=str(e),
                array=name,
                key=key,
            ) from e
        return cls(path=path.strip("/"), metadata=metadata, layout=layout)

    @property
    def name(self) -> str:
        return self.path or "/"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.metadata.shape)

    @property
    def ndim(self) -> int:
        return len(self.metadata.shape)

    @property
    def zdtype(self) -> Any:
        return self.metadata.data_type

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.metadata.data_type.to_native_dtype()

    @property
    def fill_value(self) -> Any:
        return self.metadata.fill_value

    @property
    def sharding(self) -> Any | None:
        """zarr-python's ``ShardingCodec`` when the array is sharded, else None."""
        return _compat.sharding_codec(self.metadata)

    @property
    def codecs(self) -> tuple[Any, ...]:
        return tuple(self.metadata.codecs)

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        names = self.metadata.dimension_names
        return None if names is None else tuple(names)

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.metadata.attributes)

    @property
    def shard_shape(self) -> tuple[int | tuple[int, ...], ...]:
        """The shard (outer chunk) size per dimension; a tuple of sizes along a
        rectilinear dimension."""
        return tuple(d.shards for d in self.layout.dims)

    @property
    def inner_chunk_shape(self) -> tuple[int, ...] | None:
        s = self.sharding
        return None if s is None else tuple(s.chunk_shape)

    @property
    def data_prefix(self) -> str:
        """The prefix of the store keys of the array's shards (and of its zarr.json)."""
        return f"{self.path}/" if self.path else ""

    def key(self, shard: tuple[int, ...]) -> str:
        """The store key of a shard (of a chunk, for an unsharded array)."""
        k = self.metadata.encode_chunk_key(shard)
        return f"{self.path}/{k}" if self.path else str(k)

    def coords(self, key: str) -> tuple[int, ...] | None:
        """The shard (or chunk) coordinates of a store key of this array; None for keys
        that are not one of its shards (metadata, strays, coordinates off the grid)."""
        prefix = self.data_prefix
        if not key.startswith(prefix):
            return None
        try:
            coords = tuple(
                int(c)
                for c in _compat.decode_chunk_key(
                    self.metadata.chunk_key_encoding, key[len(prefix) :]
                )
            )
        except (ValueError, TypeError, AttributeError):
            return None
        return coords if self._on_grid(coords) and self.key(coords) == key else None

    def _on_grid(self, coords: tuple[int, ...]) -> bool:
        grid = self.layout.grid_shape
        return len(coords) == len(grid) and all(
            0 <= c < n for c, n in zip(coords, grid, strict=True)
        )
