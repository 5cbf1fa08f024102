"""The encodings of the variables a Dataset write creates: ``to_zarr``'s ``shards=`` and
``chunks=`` (sizes by dimension name, ``"auto"``, ``"dask"``) and each variable's
``encoding`` turned into the ``chunks`` / ``shards`` xarray's metadata step creates the
arrays with, and the rectilinear grids it cannot write itself.

Apart from the metadata step (:mod:`shardwise.xarray.metadata_step`) because this is
pure planning on a Dataset's variables, nothing opened or written; the decisions about
grids themselves (dask chunks as shards, padding, inner chunks aimed at a size) are
:mod:`shardwise.array.decisions`'s, which the dask-array path takes too.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Literal

import numpy as np

import shardwise.format.rectilinear as rl
from shardwise.array.decisions import chunk_target, dask_edges, dask_grid, padded_edges
from shardwise.errors import WriteError
from shardwise.format.grid import auto_chunks, auto_shards
from shardwise.format.metadata import FIXED_KINDS

__all__ = ["ShardSpec", "SizeSpec", "check_spec", "check_v2_shards", "nested", "plan_encoding"]

SizeSpec = None | Literal["auto"] | Mapping[Hashable, int]
ShardSpec = SizeSpec | Literal["dask"]


def _by_dim(
    spec: Mapping[Hashable, int], dims: tuple[Hashable, ...], default: tuple[int, ...]
) -> tuple[int, ...]:
    """Sizes by dimension name; a dimension not named spans ``default`` (at least 1: a
    zero-length dimension gets chunks of 1, which zarr needs)."""
    return tuple(int(spec.get(d, max(1, n))) for d, n in zip(dims, default, strict=True))


def check_spec(
    name: str, spec: Any, dims: set[Hashable], holder: str = "the dataset does not have"
) -> None:
    """Refuse a ``shards=`` or ``chunks=`` that is not None, ``"auto"``, ``"dask"``
    (shards) or positive sizes by the name of a dimension among ``dims`` (``holder``
    says whose dimensions they are, in the message)."""
    if spec is None or spec == "auto" or (name == "shards" and spec == "dask"):
        return
    if not isinstance(spec, Mapping):
        raise WriteError(
            f"`{name}=` takes sizes by dimension name",
            expected="None, 'auto'"
            + (", 'dask'" if name == "shards" else "")
            + " or a mapping such as {'time': 100}",
            found=repr(spec),
            advice=f"Give per-variable shapes in encoding={{var: {{{name!r}: (...)}}}}.",
        )
    unknown = [d for d in spec if d not in dims]
    bad = [d for d, v in spec.items() if not isinstance(v, int | np.integer) or v < 1]
    if unknown or bad:
        raise WriteError(
            f"`{name}=` names a dimension {holder}, or a size below 1",
            expected=f"positive sizes for dimensions among {sorted(map(str, dims))}",
            found=repr(dict(spec)),
        )


def nested(spec: Any) -> bool:
    return isinstance(spec, tuple | list) and any(isinstance(x, tuple | list) for x in spec)


def plan_encoding(
    ds: Any,
    encoding: Mapping[Hashable, Mapping[str, Any]],
    shards: ShardSpec,
    chunks: SizeSpec,
    existing: set[str],
    zarr_format: int = 3,
) -> tuple[Any, dict[Hashable, dict[str, Any]], dict[str, tuple[Any, ...]]]:
    """Apply ``shards=``/``chunks=`` to the variables the call creates. Explicit
    per-variable ``encoding`` wins; the shapes inherited in ``variable.encoding`` (from
    the store a dataset was opened from) give way to the arguments.

    Also returns the rectilinear shard grids to write, by variable name: xarray cannot
    write them, so the encoding handed to it holds regular placeholder shards (the
    inner chunks) and :class:`Capture` rewrites the array's grid once xarray has
    created it."""

    out_encoding = {k: _as_dict(k, v) for k, v in encoding.items()}
    grids: dict[str, tuple[Any, ...]] = {}
    ds = ds.copy(deep=False)
    for name, var in ds.variables.items():
        if str(name) in existing or var.ndim == 0:
            continue
        itemsize = var.dtype.itemsize if var.dtype.kind in FIXED_KINDS else 8
        blocks = var.chunks
        explicit = name in out_encoding
        enc = out_encoding[name] if explicit else dict(var.encoding)
        if not explicit and (shards is not None or chunks is not None):
            for k in ("chunks", "shards", "preferred_chunks"):
                enc.pop(k, None)
        if not explicit and nested(enc.get("shards")):
            # a grid inherited from the store the data came from: the dask chunks
            # (which may have changed since) decide instead
            for k in ("chunks", "shards", "preferred_chunks"):
                enc.pop(k, None)
        edges = _rectilinear_edges(name, var, enc, shards)
        if edges is not None:
            if zarr_format == 2:
                raise WriteError(
                    "irregular dask chunks become rectilinear shards, which need Zarr format 3",
                    expected="zarr_format=3 (or None for a new store)",
                    found=f"zarr_format=2 and dask chunks {_sizes_text(var)}",
                    array=str(name),
                    advice="Write Zarr v3, or rechunk to regular sizes first (ds.chunk({...})).",
                )
            enc.pop("shards", None)
            enc["chunks"] = _rectilinear_inner(name, var, enc, edges, chunks, itemsize)
            inner = tuple(enc["chunks"])
            rl.check_inner(name, var.dims, edges, inner, var.shape)
            edges = padded_edges(edges, inner, collapse=True)
            rl.check_supported(name, edges, xarray=True)
            grids[str(name)] = edges
            enc["shards"] = inner  # the placeholder xarray writes
        elif shards == "dask" and blocks is not None and "shards" not in enc and 0 not in var.shape:
            enc["shards"] = dask_grid(blocks)
        if "shards" not in enc and shards is not None and shards != "dask":
            if shards == "auto":
                enc["shards"] = auto_shards(var.shape, itemsize, blocks)
            else:
                enc["shards"] = _by_dim(shards, var.dims, var.shape)
        sharded = enc.get("shards") is not None
        if "chunks" not in enc and not sharded and blocks is not None and 0 in var.shape:
            # a zero-length dimension holds no data: its dask chunk (of size 0) gives
            # way to a chunk of 1, as xarray's own path does (zarr refuses size 0)
            enc["chunks"] = dask_grid(blocks)
        if "chunks" not in enc:
            outer = tuple(enc["shards"]) if sharded else var.shape
            if chunks == "auto" or (chunks is None and sharded):
                enc["chunks"] = auto_chunks(outer, itemsize, blocks, sharded=sharded)
            elif chunks is not None:
                enc["chunks"] = _by_dim(chunks, var.dims, outer)
        _check_shapes(name, var, enc)
        if explicit:
            out_encoding[name] = enc
        else:
            var.encoding = enc
    return ds, out_encoding, grids


def _as_dict(name: Hashable, enc: Any) -> dict[str, Any]:
    """A variable's encoding as a dict, refused in xarray's words when it is none."""
    try:
        return dict(enc)
    except (TypeError, ValueError) as e:
        raise WriteError(
            "encoding must be castable to a dictionary",
            expected="a mapping of encoding keys (dtype, chunks, shards, compressors...)",
            found=repr(enc),
            array=str(name),
            advice="Give e.g. encoding={name: {'dtype': 'f4'}}. Nothing was written.",
        ) from e


def _sizes_text(var: Any) -> str:
    return ", ".join(
        f"{d}: {rl._short(tuple(c))}" for d, c in zip(var.dims, var.chunks or (), strict=True)
    )


def _rectilinear_edges(
    name: Hashable, var: Any, enc: Mapping[str, Any], shards: ShardSpec
) -> tuple[Any, ...] | None:
    """The rectilinear shard grid a new variable gets, or None for a regular one:
    nested ``shards`` in its encoding, or its dask chunks where they are irregular and
    no shard shape is given (or ``shards="dask"``). Regular dimensions keep one size."""

    given = enc.get("shards")
    if nested(given):
        edges: list[Any] = []
        for dim, e, n in zip(var.dims, given or (), var.shape, strict=True):
            if isinstance(e, int | np.integer):
                edges.append(int(e))  # a regular dimension
                bad = e < 1
            else:
                edges.append(tuple(int(x) for x in e))
                bad = any(x < 1 for x in edges[-1]) or sum(edges[-1]) < n
            if bad:
                raise WriteError(
                    "the rectilinear shard sizes do not cover the array",
                    expected=f"sizes >= 1 adding up to at least {n} along {dim!r}",
                    found=f"shard sizes {rl._short(edges[-1])}",
                    array=str(name),
                )
        return tuple(edges)
    blocks = var.chunks
    if (
        given is not None
        or blocks is None
        or var.dtype.kind not in FIXED_KINDS
        or (shards is not None and shards != "dask")
        or 0 in var.shape
    ):
        return None
    if all(rl.is_regular(b) for b in blocks):
        return None
    return dask_edges(name, var.dims, blocks)


def _rectilinear_inner(
    name: Hashable,
    var: Any,
    enc: Mapping[str, Any],
    edges: tuple[Any, ...],
    chunks: SizeSpec,
    itemsize: int,
) -> tuple[int, ...]:

    given = enc.get("chunks")
    if given is not None and given != "auto":
        if isinstance(given, int | np.integer):
            return (int(given),) * var.ndim
        inner = tuple(given)
        if len(inner) != var.ndim:
            raise WriteError(
                "the inner chunk shape has the wrong number of dimensions",
                expected=f"{var.ndim} sizes for dimensions {var.dims}",
                found=f"chunks {inner}",
                array=str(name),
            )
        return inner
    auto = rl.auto_inner(name, var.dims, edges, var.shape, itemsize, chunk_target())
    if isinstance(chunks, Mapping):
        return _by_dim(chunks, var.dims, auto)
    return auto


def _check_shapes(name: Hashable, var: Any, enc: Mapping[str, Any]) -> None:
    s, c = enc.get("shards"), enc.get("chunks")
    if not isinstance(s, tuple | list) or not isinstance(c, tuple | list):
        return
    ok = (
        len(s) == len(c) == var.ndim
        and all(isinstance(x, int | np.integer) and x > 0 for x in (*s, *c))
        and all(si % ci == 0 for si, ci in zip(s, c, strict=True))
    )
    if not ok:
        raise WriteError(
            "the inner chunk shape must divide the shard shape in every dimension",
            expected=f"{var.ndim} shard sizes, each a multiple of the inner chunk size",
            found=f"shards {tuple(s)} and chunks {tuple(c)} for dimensions {var.dims}",
            array=str(name),
            advice="Pick inner chunks that divide the shards, or leave `chunks` out "
            "and shardwise picks ~1 MiB inner chunks that do.",
        )


def check_v2_shards(zarr_format: int, shards: ShardSpec, encoding: Mapping[Hashable, Any]) -> None:
    if zarr_format == 2 and (
        shards is not None
        or any(isinstance(e, Mapping) and e.get("shards") is not None for e in encoding.values())
    ):
        raise WriteError(
            "shards need Zarr format 3",
            expected="zarr_format=3 (or None for a new store)",
            found="zarr_format=2 with shards",
            advice="Zarr v2 has no sharding: drop zarr_format=2, or write shards to a "
            "new Zarr v3 store (an existing v2 store stays v2).",
        )
