"""How ``inventory`` and ``info`` put an array into words and JSON: byte sizes, shapes,
percentages and ratios, codec chains, store names.

Apart from both because both print the same things the same way: the attributes of an
:func:`~shardwise.tools.inventory.inventory` (and the text of
:func:`~shardwise.tools.inventory.summary`) and the arrays of an
:class:`~shardwise.tools.info.Info` must agree to the character. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise.codecs import codec_name
from shardwise.io.capabilities import fsspec_store

__all__ = [
    "byte_size",
    "codec_chain",
    "dims_text",
    "percent",
    "ratio_of",
    "shape_list",
    "store_name",
]


def codec_chain(codecs: Sequence[Any]) -> str:
    """A codec chain as text, e.g. ``sharding_indexed(bytes > zstd; index at end: bytes
    > crc32c)``."""
    from zarr.codecs import ShardingCodec

    parts = []
    for c in codecs:
        if isinstance(c, ShardingCodec):
            parts.append(
                f"sharding_indexed({codec_chain(c.codecs)}; index at {_compat.literal(c.index_location)}: "
                f"{codec_chain(c.index_codecs)})"
            )
        else:
            parts.append(codec_name(c))
    return " > ".join(parts)


def shape_list(shape: Sequence[int | Sequence[int]]) -> list[Any]:
    """A (possibly rectilinear) shape as JSON: ints, or lists of ints per dimension."""
    return [int(n) if isinstance(n, int | np.integer) else [int(m) for m in n] for n in shape]


def store_name(store: Any) -> str:
    fsspec = fsspec_store(store)
    if fsspec is not None:
        protocol = fsspec.fs.protocol
        protocol = protocol[0] if isinstance(protocol, tuple | list) else protocol
        return f"{protocol}://{fsspec.path}"
    return str(store)


def ratio_of(raw: int, stored: int) -> float | None:
    return round(raw / stored, 4) if stored else None


def byte_size(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError  # pragma: no cover


def dims_text(shape: Sequence[Any], names: Sequence[str | None] | None) -> str:
    def one(n: Any) -> str:
        if isinstance(n, list | tuple):
            return "[" + ", ".join(map(str, n)) + "]"
        return str(n)

    if names is None:
        return "(" + ", ".join(one(n) for n in shape) + ")"
    return "(" + ", ".join(f"{d}: {one(n)}" for d, n in zip(names, shape, strict=True)) + ")"


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"
