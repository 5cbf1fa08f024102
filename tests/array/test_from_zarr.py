"""``shardwise.array.from_zarr`` takes every parameter of ``dask.array.from_zarr``, in its
order and with its meaning (``component``, ``storage_options``, ``chunks``, ``name``,
``inline_array``, a ``zarr.Array`` as the source, ``**kwargs`` for
``zarr.open_array``), checked against dask's own reads and zarr-python's of the same
stores, and with the logic of dask's own tests of those parameters."""

from __future__ import annotations

import gc
import inspect
import os

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from dask.task_spec import Task, TaskRef

import shardwise
from shardwise import ArrayReader
from shardwise.errors import ChunksError, NotAZarrStoreError


def values(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).round(3).astype("f4")


DATA = values((30, 20))


def sharded(root, path="g/v"):
    """A Zarr v3 array of DATA in shards of (10, 20) and inner chunks of (5, 10)."""
    z = zarr.create_array(
        root, name=path, shape=DATA.shape, dtype="f4", shards=(10, 20), chunks=(5, 10)
    )
    z[...] = DATA
    return z


def unsharded(root, path="v"):
    z = zarr.create_array(root, name=path, shape=DATA.shape, dtype="f4", chunks=(7, 20))
    z[...] = DATA
    return z


def v2(root, path="v"):
    z = zarr.create_array(
        root, name=path, shape=DATA.shape, dtype="f4", chunks=(8, 20), zarr_format=2
    )
    z[...] = DATA
    return z


def in_memory(root, path="v"):
    store = zarr.storage.MemoryStore()
    z = zarr.create_array(
        store, name=path, shape=DATA.shape, dtype="f4", shards=(10, 20), chunks=(5, 10)
    )
    z[...] = DATA
    return z


def tasks(x):
    return dict(x.__dask_graph__())


# -- the signature: dask's positional order ----------------------------------------------
def test_positional_parameters_are_dasks_in_its_order():
    ours = list(inspect.signature(shardwise.array.from_zarr).parameters.values())
    theirs = list(inspect.signature(da.from_zarr).parameters.values())
    positional = [p for p in theirs if p.kind is p.POSITIONAL_OR_KEYWORD]
    # the same names but the first two (shardwise calls url "store" and component "path")
    assert [p.name for p in ours[: len(positional)]] == [
        "store",
        "path",
        "storage_options",
        "chunks",
        "name",
        "inline_array",
    ]
    assert [p.name for p in positional] == [
        "url",
        "component",
        "storage_options",
        "chunks",
        "name",
        "inline_array",
    ]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in ours[: len(positional)])
    assert {"component", "read_options"} <= set(
        inspect.signature(shardwise.array.from_zarr).parameters
    )


def test_positional_call_means_what_it_means_in_dask(tmp_path):
    sharded(tmp_path / "s.zarr")
    url = str(tmp_path / "s.zarr")
    # url, component, storage_options, chunks, name, inline_array
    theirs = da.from_zarr(url, "g/v", {}, ((10, 10, 10), (20,)), "dask-x", True)
    ours = shardwise.array.from_zarr(url, "g/v", {}, ((10, 10, 10), (20,)), "ours-x", True)
    assert ours.name == "ours-x" and theirs.name == "dask-x"
    assert ours.chunks == theirs.chunks == ((10, 10, 10), (20,))
    assert not [k for k in tasks(ours) if isinstance(k, str)]  # inline: no source key
    np.testing.assert_array_equal(ours.compute(), theirs.compute())
    np.testing.assert_array_equal(ours.compute(), DATA)


def test_storage_options_are_for_urls_and_ignored_elsewhere_as_in_dask(tmp_path):
    """dask reads a local path given storage_options (they are for the file system of a
    URL); zarr-python alone refuses them there."""
    sharded(tmp_path / "s.zarr")
    for where in (str(tmp_path / "s.zarr"), tmp_path / "s.zarr", f"file://{tmp_path}/s.zarr"):
        want = da.from_zarr(where, "g/v", {"auto_mkdir": False}).compute()
        got = shardwise.array.from_zarr(where, "g/v", {"auto_mkdir": False}).compute()
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="storage_options"):
        zarr.open_array(str(tmp_path / "s.zarr"), path="g/v", storage_options={}, mode="r")


# -- component: dask's name of path --------------------------------------------------------
def test_component_is_path(tmp_path):
    sharded(tmp_path / "s.zarr")
    url = str(tmp_path / "s.zarr")
    by_path = shardwise.array.from_zarr(url, "g/v")
    by_component = shardwise.array.from_zarr(url, component="g/v")
    both = shardwise.array.from_zarr(url, "/g/v/", component="g/v")
    assert by_path.name == by_component.name == both.name  # one array read one way
    np.testing.assert_array_equal(by_component.compute(), da.from_zarr(url, component="g/v"))
    np.testing.assert_array_equal(both.compute(), DATA)


def test_path_and_component_naming_different_arrays_are_refused(tmp_path):
    sharded(tmp_path / "s.zarr", "g/v")
    sharded(tmp_path / "s.zarr", "g/w")
    with pytest.raises(ChunksError, match="path and component") as info:
        shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", component="g/w")
    assert isinstance(info.value, ValueError)
    assert "path='g/v'" in str(info.value) and "component='g/w'" in str(info.value)


# -- chunks: None is the default, one dask chunk per shard ----------------------------------
def test_chunks_none_is_one_chunk_per_shard_where_dask_has_one_per_zarr_chunk(tmp_path):
    z = sharded(tmp_path / "s.zarr")
    x = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks=None)
    assert x.chunks == shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v").chunks
    assert x.chunks == ((10, 10, 10), (20,))  # the shards (10, 20)
    assert da.from_zarr(z).chunks == ((5,) * 6, (10, 10))  # dask's: the inner chunks
    np.testing.assert_array_equal(x.compute(), z[...])


def test_chunks_that_cut_inner_chunks_are_rounded_with_a_warning(tmp_path):
    sharded(tmp_path / "s.zarr")
    with pytest.warns(shardwise.errors.ChunkRoundingWarning, match="inner-chunk boundaries"):
        x = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks=(6, 20))
    assert x.chunks == ((5,) * 6, (20,))
    np.testing.assert_array_equal(x.compute(), DATA)


# -- name --------------------------------------------------------------------------------
def test_name_is_the_arrays_name_and_names_every_layer(tmp_path):
    """dask's test_from_zarr_name, and the index and reader keys named after it."""
    a = zarr.array([1, 2, 3])
    assert shardwise.array.from_zarr(a, name="foo").name == "foo"

    sharded(tmp_path / "s.zarr")
    x = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks="inner", name="foo")
    y = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks="inner", name="bar")
    assert x.name == "foo" and x.__dask_keys__()[0][0] == ("foo", 0, 0)
    assert set(x.dask.layers) == {"foo", "original-foo", "reader-foo", y_index(x)}
    assert y_index(x) != y_index(y)  # two names: no key in common
    assert not set(tasks(x)) & set(tasks(y))
    np.testing.assert_array_equal((x + y).compute(), 2 * DATA)


def y_index(x):
    (index,) = [n for n in x.dask.layers if n.startswith("shardwise-index-")]
    return index


def test_default_names_of_two_in_memory_arrays_differ():
    """dask's test_from_zarr_unique_name."""
    a = zarr.array([1, 2, 3])
    b = zarr.array([4, 5, 6])
    assert shardwise.array.from_zarr(a).name != shardwise.array.from_zarr(b).name


def test_the_same_array_read_twice_gets_the_same_name(tmp_path):
    a = zarr.array([1, 2, 3])
    assert shardwise.array.from_zarr(a).name == shardwise.array.from_zarr(a).name
    sharded(tmp_path / "s.zarr")
    one = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v")
    assert one.name == shardwise.array.from_zarr(str(tmp_path / "s.zarr"), "g/v").name
    assert one.name.startswith("shardwise-read-g/v-")
    # read differently, or another array: another name
    assert one.name != shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks="inner").name
    sharded(tmp_path / "t.zarr")
    assert one.name != shardwise.array.from_zarr(tmp_path / "t.zarr", "g/v").name


def test_names_of_in_memory_arrays_freed_one_after_another_never_repeat():
    """A MemoryStore is named by its dict's id, which Python hands out again once the
    dict is freed: names are tokenized from its contents instead (as dask tokenizes an
    in-memory array), so an array kept (persisted) never meets another's name."""
    names = {}
    for i in range(40):
        names.setdefault(shardwise.array.from_zarr(zarr.array([i, i + 1, i + 2])).name, i)
        gc.collect()
    assert len(names) == 40
    kept = shardwise.array.from_zarr(zarr.array([1, 2, 3])).persist()
    gc.collect()
    other = shardwise.array.from_zarr(zarr.array([10, 20, 30]))
    np.testing.assert_array_equal((kept + other).compute(), [11, 22, 33])


def test_an_in_memory_array_written_again_gets_a_new_name():
    a = zarr.array([1, 2, 3])
    before = shardwise.array.from_zarr(a)
    a[:] = [4, 5, 6]
    after = shardwise.array.from_zarr(a)
    assert before.name != after.name
    np.testing.assert_array_equal(after.compute(), [4, 5, 6])


# -- inline_array --------------------------------------------------------------------------
@pytest.mark.parametrize("inline_array", [True, False])
def test_inline_array_graph_as_dasks(inline_array):
    """dask's test_zarr_inline_array: a source key, or none."""
    a = zarr.array([1, 2, 3])
    dsk = tasks(shardwise.array.from_zarr(a, inline_array=inline_array))
    assert len(dsk) == (0 if inline_array else 1) + 1
    readers = [v for v in dsk.values() if isinstance(v, ArrayReader)]
    assert len(readers) == (0 if inline_array else 1)
    theirs = tasks(da.from_zarr(a, inline_array=inline_array))
    assert len(theirs) == len(dsk)


@pytest.mark.parametrize("inline_array", [True, False])
def test_inline_array_with_index_tasks(tmp_path, inline_array):
    z = sharded(tmp_path / "s.zarr")
    x = shardwise.array.from_zarr(
        tmp_path / "s.zarr", "g/v", chunks="inner", inline_array=inline_array
    )
    dsk = tasks(x)
    keys = [k for k in dsk if isinstance(k, str)]
    reads = {k: v for k, v in dsk.items() if isinstance(k, tuple) and k[0] == x.name}
    index = {k: v for k, v in dsk.items() if isinstance(k, tuple) and k[0] != x.name}
    assert len(reads) == 12 and len(index) == 3  # 6 x 2 inner chunks, 3 shards
    if inline_array:
        assert keys == []
        # the reader itself in every index task, and (in its source) in every read task
        assert all(any(isinstance(a, ArrayReader) for a in t.args) for t in index.values())
        for t in reads.values():
            (src,) = [a for a in t.args if isinstance(a, Task)]
            assert isinstance(src.args[0], ArrayReader)
            assert src.dependencies <= set(index)
    else:
        assert sorted(keys) == [f"original-{x.name}", f"reader-{x.name}"]
        assert isinstance(dsk[f"original-{x.name}"], ArrayReader)
        assert all(t.dependencies == {f"reader-{x.name}"} for t in index.values())
        assert all(f"original-{x.name}" in t.dependencies for t in reads.values())
        assert not any(isinstance(a, ArrayReader) for t in dsk.values() for a in _args(t))
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(x.compute(), z[...])
        np.testing.assert_array_equal(x[3:17, 4:15].compute(), z[3:17, 4:15])
        np.testing.assert_array_equal(x[12].compute(), z[12])


def _args(task):
    if not isinstance(task, Task):
        return []
    out = []
    for a in task.args:
        out.extend(_args(a) if isinstance(a, Task) else [a])
    return [a for a in out if not isinstance(a, TaskRef)]


def test_inline_array_is_the_same_array(tmp_path):
    sharded(tmp_path / "s.zarr")
    x = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks=(5, 10))
    y = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", chunks=(5, 10), inline_array=True)
    assert x.chunks == y.chunks
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal((x - y).compute(), np.zeros_like(DATA))


# -- a zarr.Array as the source --------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "chunks"),
    [
        (sharded, ((10, 10, 10), (20,))),
        (unsharded, ((7, 7, 7, 7, 2), (20,))),
        (v2, ((8, 8, 8, 6), (20,))),
        (in_memory, ((10, 10, 10), (20,))),
    ],
    ids=["v3-sharded", "v3-unsharded", "v2", "memory"],
)
def test_a_zarr_array_is_read_as_zarr_python_reads_it(tmp_path, make, chunks):
    """dask's test_zarr_existing_array: ``from_zarr(z)``."""
    z = make(tmp_path / "s.zarr")
    x = shardwise.array.from_zarr(z)
    assert x.chunks == chunks and x.dtype == z.dtype
    np.testing.assert_array_equal(x.compute(), z[...])
    np.testing.assert_array_equal(x[5:23:3, 4].compute(), z[5:23:3, 4])
    reader = ArrayReader.open(z)
    assert reader.store is z.store_path.store and reader.info.path == z.path
    np.testing.assert_array_equal(reader[...], z[...])


def test_a_zarr_array_in_a_group_reads_that_array(tmp_path):
    sharded(tmp_path / "s.zarr", "g/v")
    z = zarr.open_group(tmp_path / "s.zarr", mode="r")["g/v"]
    assert z.path == "g/v"
    np.testing.assert_array_equal(shardwise.array.from_zarr(z).compute(), DATA)


def test_a_zarr_array_is_not_opened_again(tmp_path):
    """Its metadata is taken from the zarr.Array: with the store's zarr.json gone, the
    array still reads (the shards are still there)."""
    z = zarr.open_array(sharded(tmp_path / "s.zarr").store_path)
    os.remove(tmp_path / "s.zarr" / "g" / "v" / "zarr.json")
    with pytest.raises(FileNotFoundError):
        shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v")
    np.testing.assert_array_equal(shardwise.array.from_zarr(z).compute(), DATA)
    np.testing.assert_array_equal(ArrayReader.open(z)[...], DATA)


@pytest.mark.parametrize(
    "given",
    [
        {"path": "g/v"},
        {"component": "g/v"},
        {"storage_options": {"anon": True}},
        {"zarr_format": 3},
        {"mode": "r"},
    ],
    ids=lambda g: next(iter(g)),
)
def test_a_zarr_array_with_where_to_open_is_refused(tmp_path, given):
    z = sharded(tmp_path / "s.zarr")
    with pytest.raises(ChunksError, match=r"a zarr\.Array was given") as info:
        shardwise.array.from_zarr(z, **given)
    assert isinstance(info.value, ValueError)
    (key,) = given
    assert f"{'path' if key == 'component' else key}=" in str(info.value)
    if "component" not in given:  # ArrayReader.open takes the rest itself
        with pytest.raises(ChunksError, match=r"a zarr\.Array was given"):
            ArrayReader.open(z, **given)


# -- **kwargs: zarr.open_array's -------------------------------------------------------------
def test_zarr_format_is_passed_to_zarr_python(tmp_path):
    v2(tmp_path / "v2.zarr")
    sharded(tmp_path / "v3.zarr")
    np.testing.assert_array_equal(
        shardwise.array.from_zarr(tmp_path / "v2.zarr", "v", zarr_format=2).compute(), DATA
    )
    np.testing.assert_array_equal(
        shardwise.array.from_zarr(tmp_path / "v3.zarr", "g/v", zarr_format=3).compute(), DATA
    )
    for where, path, fmt in [("v2.zarr", "v", 3), ("v3.zarr", "g/v", 2)]:
        url = str(tmp_path / where)
        with pytest.raises(zarr.errors.ArrayNotFoundError):  # dask: zarr-python's error
            da.from_zarr(url, path, zarr_format=fmt)
        with pytest.raises(NotAZarrStoreError, match=f"zarr_format={fmt}") as info:
            shardwise.array.from_zarr(url, path, zarr_format=fmt)
        assert isinstance(info.value, FileNotFoundError)
        assert isinstance(info.value.__cause__, zarr.errors.ArrayNotFoundError)


def test_mode_is_ignored_reads_are_read_only(tmp_path):
    sharded(tmp_path / "s.zarr")
    for mode in ("w", "a", "r+"):
        x = shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", mode=mode)
        np.testing.assert_array_equal(x.compute(), DATA)
        assert x.name == shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v").name
    # mode="w" would have replaced the array: it is all still there
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr", path="g/v")[...], DATA)
    assert isinstance(ArrayReader.open(tmp_path / "s.zarr", "g/v", mode="w"), ArrayReader)


def test_zarr_pythons_other_arguments_are_passed_and_misspellings_refused(tmp_path):
    sharded(tmp_path / "s.zarr")
    # what dask code passes: zarr-python takes these (and ignores them for an array)
    for kwargs in ({"use_consolidated": False}, {"config": {"order": "C"}}):
        np.testing.assert_array_equal(
            shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", **kwargs).compute(), DATA
        )
    with pytest.raises(TypeError, match="found zarr_fromat") as info:
        shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", zarr_fromat=2)
    assert isinstance(info.value, shardwise.errors.ArgumentError)
    with pytest.raises(TypeError, match="found bogus"):
        ArrayReader.open(tmp_path / "s.zarr", "g/v", bogus=1)
    # a value zarr-python refuses: its own error
    with pytest.raises(ValueError, match="zarr_format"):
        zarr.open_array(tmp_path / "s.zarr", path="g/v", mode="r", zarr_format=4)
    with pytest.raises(ValueError, match="zarr_format"):
        shardwise.array.from_zarr(tmp_path / "s.zarr", "g/v", zarr_format=4)
