"""The ``shardwise`` command line (``shardwise --help``; also ``python -m shardwise``).

Each command is one small function under :func:`main`: its own arguments and options,
one call of a tool (``shardwise.verify``, ``migrate``, ``reshard``, ``info``,
``inventory``), and its output as text or, with ``--json``, one JSON document. What the
commands share is elsewhere in this package: the option values in
:mod:`shardwise.cli.arguments`, the :class:`~shardwise.cli.run.Run` each command is given
and the exit statuses in :mod:`shardwise.cli.run`, the progress bars in
:mod:`shardwise.graph.progress`, the inventory tables of ``--out`` in
:mod:`shardwise.cli.tables`.

The tools are reached through ``shardwise``'s lazy names (``shardwise.verify`` loads
:mod:`shardwise.tools.verify` when the command runs), and zarr, dask, distributed,
xarray and tqdm are imported inside the commands, so ``shardwise --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

import click

import shardwise
from shardwise import __version__
from shardwise.cli.arguments import (
    codec_option,
    dst_storage_option,
    sizes_option,
    storage_options_for,
)
from shardwise.cli.run import EXIT_OK, EXIT_PROBLEMS, Run, absolute, shared_options
from shardwise.cli.tables import table_engine, write_table

__all__ = ["main"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- the commands ---------------------------------------------------------------------------
@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="\b\nExit status:\n"
    "  0    done, nothing wrong\n"
    "  1    the command found problems (verify: damaged shards; info and\n"
    "       inventory: damaged metadata documents, the rest reported)\n"
    "  2    bad usage, or input that cannot be read (no store there, an existing\n"
    "       destination, a store of the wrong kind): one line on stderr says why\n"
    "  130  interrupted (Ctrl-C)",
)
@click.version_option(
    __version__, "--version", prog_name="shardwise", message="%(prog)s %(version)s"
)
def main() -> None:
    """Zarr v3 sharding for dask and xarray, from the shell.

    PATH, SRC and DST are local paths or fsspec URLs (s3://bucket/data.zarr), whose
    storage options are given with --storage-option KEY=VALUE. Results go to stdout
    (--json: one JSON document), progress bars and errors to stderr.
    """


@main.command(short_help="Check every shard's index and checksums.")
@click.argument("path")
@click.option("--group", metavar="G", help="Check only the arrays under this group.")
@click.option(
    "--decode",
    is_flag=True,
    help="Decode every inner chunk too (catches damaged compressed data no checksum covers).",
)
@shared_options()
def verify(run: Run, path: str, group: str | None, decode: bool) -> int:
    """Check every shard of the Zarr v3 store (or draft store) at PATH.

    Checks each shard's index (its checksum, and its entries against the shard's size)
    and the crc32c of every inner chunk that has one. Exit status 1 when anything is
    bad; the output names each bad store key.
    """
    options = run.storage_options(path)
    report = shardwise.verify(path, group=group, storage_options=options, decode=decode)
    problems = [
        {
            "array": p.array,
            "key": p.key,
            "chunk": None if p.chunk is None else list(p.chunk),
            "error": p.error,
            "message": p.message,
        }
        for p in report.problems
    ]
    document = {
        "ok": report.ok,
        "arrays": report.arrays,
        "shards": report.shards,
        "chunks": report.chunks,
        "requests": report.requests,
        "bytes_read": report.bytes_read,
        "bad_keys": report.bad_keys,
        "problems": problems,
        "strays": report.strays,
    }
    run.emit(str(report), document)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@main.command(short_help="Migrate a store of the 2022 sharding draft to Zarr v3.")
@click.argument("src")
@click.argument("dst")
@click.option("--group", metavar="G", help="Migrate only this group of SRC (and below).")
@click.option(
    "--mode",
    type=click.Choice(["w-", "w", "a"]),
    default="w-",
    show_default=True,
    help="w-: refuse an existing DST; a: complete an interrupted migration; w: replace DST.",
)
@dst_storage_option
@shared_options(computes=True, store="SRC")
def migrate(
    run: Run,
    src: str,
    dst: str,
    group: str | None,
    mode: str,
    dst_storage_options: dict[str, Any],
) -> int:
    """Migrate the store of the 2022 sharding draft at SRC to Zarr v3 at DST.

    Compressed chunks are copied as bytes where a Zarr v3 codec writes the same bytes
    (zlib is re-encoded as gzip); one task per shard. A failed run is completed with
    --mode a.
    """
    delayed = shardwise.tools.migrate.migrate(
        absolute(src),
        absolute(dst),
        group=group,
        storage_options=run.storage_options(src),
        target_options=storage_options_for(dst, dst_storage_options, "--dst-storage-option"),
        mode=mode,
        compute=False,
    )
    (report,) = run.compute(delayed, desc="migrate")
    lines = [
        f"migrated {src} to {dst}: {_plural(len(report.arrays), 'array')} in "
        f"{_plural(len(report.groups), 'group')}, {_plural(report.shards, 'shard')}"
    ]
    for name in report.arrays:
        how = report.reencoded.get(name)
        lines.append(f"  {name}: " + (f"re-encoded as {how}" if how else "copied as bytes"))
    document = {
        "source": src,
        "destination": dst,
        "arrays": report.arrays,
        "groups": report.groups,
        "shards": report.shards,
        "reencoded": report.reencoded,
    }
    run.emit("\n".join(lines), document)
    return EXIT_OK


@main.command(short_help="Rewrite a store (Zarr v2, v3 or the 2022 draft) as sharded Zarr v3.")
@click.argument("src")
@click.argument("dst")
@sizes_option("--shards", help="Shard sizes by dimension (time=100,y=512), or 'auto'.")
@sizes_option("--chunks", help="Inner chunk sizes by dimension, or 'auto'.")
@codec_option("--codec", help="Compress inner chunks with this codec (default: the source's).")
@click.option("--group", metavar="G", help="Reshard only this group of SRC (and below).")
@click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="V",
    help="Reshard only this array (repeatable; a path relative to --group).",
)
@click.option("--resume", is_flag=True, help="Complete a destination an interrupted run left.")
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists.")
@dst_storage_option
@shared_options(computes=True, store="SRC")
def reshard(
    run: Run,
    src: str,
    dst: str,
    shards: Any,
    chunks: Any,
    codec: Any,
    group: str | None,
    variables: tuple[str, ...],
    resume: bool,
    overwrite: bool,
    dst_storage_options: dict[str, Any],
) -> int:
    """Rewrite the arrays of SRC as sharded Zarr v3 at DST, one task per shard.

    Inner chunks that stay the source's chunks, with codecs that write the same bytes,
    are moved as bytes (no recompression); others are decoded and re-encoded. Sizes
    not given are the source's.
    """
    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other")
    delayed = shardwise.reshard(
        absolute(src),
        absolute(dst),
        shards=shards,
        chunks=chunks,
        codecs=codec,
        group=group,
        variables=list(variables) or None,
        mode="w" if overwrite else "a" if resume else "w-",
        storage_options=run.storage_options(src),
        target_options=storage_options_for(dst, dst_storage_options, "--dst-storage-option"),
        compute=False,
    )
    (report,) = run.compute(delayed, desc="reshard")
    lines = [f"resharded {src} to {dst}", *(f"  {line}" for line in str(report).splitlines())]
    for name in report.arrays:
        how = (
            "repacked (chunks moved as bytes)"
            if name in report.repacked
            else "copied whole (zarr-python)"
            if name in report.copied
            else "re-encoded"
        )
        lines.append(f"  {name}: {how}")
    run.emit("\n".join(lines), {"source": src, "destination": dst, **report.to_dict()})
    return EXIT_OK


@main.command(short_help="Summarise a store: arrays, shards, inner chunks, bytes stored.")
@click.argument("path")
@click.option("--group", metavar="G", help="Summarise only this group (and below).")
@click.option("--no-scan", is_flag=True, help="Read the metadata only (no shard indexes).")
@shared_options(computes=True)
def info(run: Run, path: str, group: str | None, no_scan: bool) -> int:
    """The hierarchy of PATH with, per array: shape, data type, dimension names, shard
    and inner chunk shapes, codecs, stored bytes and compression ratio, and how many
    shards and inner chunks are stored (one index read per stored shard)."""
    found = shardwise.info(
        run.on_workers(path),
        group=group,
        storage_options=run.storage_options(path),
        scan=not no_scan,
    )
    run.emit(str(found), found.to_dict())
    return EXIT_PROBLEMS if found.damaged else EXIT_OK


@main.command(short_help="Which inner chunks of an array are stored, and their sizes.")
@click.argument("path")
@click.option("--var", "variable", metavar="V", help="The array (needed when there are several).")
@click.option("--group", metavar="G", help="The group holding the array.")
@click.option(
    "--out",
    metavar="FILE",
    help="Write the full table (one row per inner chunk) to FILE: .nc, .zarr or .csv.",
)
@shared_options(computes=True)
def inventory(run: Run, path: str, variable: str | None, group: str | None, out: str | None) -> int:
    """The stored inner chunks of an array of PATH: a summary, and with --out the
    table of every inner chunk (stored or not, its bytes, its shard)."""
    # import cost: tools.inventory and io.stores bring numpy and asyncio, which
    # `shardwise --help` should not load (the tools themselves load lazily, through
    # shardwise's names); summary and totals are not among those names
    from shardwise.io.stores import check_apart, location
    from shardwise.tools.inventory import summary, totals

    engine = None if out is None else table_engine(out)  # refused before the scan
    if out is not None:  # the table is never written into (or around) the store read
        check_apart(location(path, None, run.storage_options(path)), location(out), what="--out")
    where, options = run.on_workers(path), run.storage_options(path)
    damaged: tuple[str, ...] = ()
    if variable is None:  # damaged documents beside the array: reported, then passed over
        found = shardwise.info(where, group=group, storage_options=options, scan=False)
        damaged = found.damaged
        for name, why in found.unreadable:
            if name in damaged:
                click.echo(f"shardwise: damaged document ({name or '/'}): {why}", err=True)
    code = EXIT_PROBLEMS if damaged else EXIT_OK
    if out is None:  # the summary alone: from the stored shards, whatever the grid's size
        attrs = totals(where, variable, group=group, storage_options=options)
        run.emit(summary(attrs), {**attrs, "out": None})
        return code
    table = shardwise.inventory(where, variable, group=group, storage_options=options)
    write_table(table, out, engine)
    run.emit(f"{summary(table)}\ntable    written to {out}", {**table.attrs, "out": out})
    return code
