"""Node names from stores are input (issue 27): one checker (``shardwise.format.names``)
decides which node paths shardwise reads and writes through. Properties of the checker
(no accepted path reaches outside the root; every name Zarr v3 allows, but for a
backslash or NUL, is accepted), its refusals one by one, and stores made to be hostile
(a draft array named ``..``, group members ``..``, backslashes, NUL, empty names)
refused by ``migrate``, ``reshard``, ``inventory`` and ``info`` before anything is
written. And one damaged ``zarr.json`` among many: reported, the rest listed."""

from __future__ import annotations

import json
import posixpath
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import assert_error_line, run
from test_draft import LEGACY, write_draft
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise.errors import UnsafeNameError, UnsupportedArrayError
from shardwise.format import names as names_module
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under, node_name, node_path
from shardwise.io.sources import open_source

ROOT = "/store/root"


def buffer(raw: bytes):
    return default_buffer_prototype().buffer.from_bytes(raw)


def tree(path: Path) -> set[str]:
    """Every file and directory under ``path``."""
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# -- the checker: properties ------------------------------------------------------------------
# names Zarr v3 allows (not empty, no '/', not only periods), less backslash and NUL
allowed_names = st.text(min_size=1, max_size=12).filter(
    lambda s: "/" not in s and "\\" not in s and "\x00" not in s and s.strip(".") != ""
)
# pieces of hostile paths, and anything else
pieces = st.one_of(
    st.sampled_from(["..", ".", "", "...", "a", "\\", "..\\..", "a\\..", "\x00", " ", "__x", "c"]),
    st.text(max_size=4),
)
paths = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "", "/"]),
    st.lists(pieces, max_size=6),
)


@settings(max_examples=500, deadline=None)
@given(paths)
def test_no_accepted_path_resolves_outside_the_root(path):
    try:
        checked = node_path(path, document="k")
    except UnsafeNameError as e:
        assert e.key == "k" and e.array == path
        return
    assert checked == path
    where = posixpath.normpath(f"{ROOT}/{path}")
    assert where == ROOT or where.startswith(ROOT + "/")
    assert posixpath.normpath(path) == (path or ".")  # nothing for a normalizer to fold
    assert key_under("dst", f"dst/{path}/zarr.json" if path else "dst/zarr.json")


@settings(max_examples=300, deadline=None)
@given(st.lists(allowed_names, min_size=1, max_size=4))
def test_every_name_the_spec_allows_is_accepted(parts):
    for name in parts:
        assert node_name(name) == name
    path = "/".join(parts)
    assert node_path(path, document="zarr.json") == path
    assert key_under("a/b", f"a/b/{path}/c/0") == f"a/b/{path}/c/0"


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    return tmp_path_factory.mktemp("names")


@settings(max_examples=100, deadline=None)
@given(st.lists(allowed_names, min_size=1, max_size=3))
def test_a_local_store_writes_accepted_keys_inside_its_root(disk, parts):
    root = disk / uuid.uuid4().hex / "root"
    key = key_under("", node_path("/".join(parts)) + "/zarr.json")
    try:
        sync(LocalStore(root).set(key, buffer(b"{}")))
    except OSError as e:  # a name too long for the file system: not shardwise's to refuse
        assert e.errno == 36
        return
    written = [p for p in root.parent.rglob("*") if p.is_file()]
    assert len(written) == 1
    assert written[0].resolve().is_relative_to(root.resolve())


# -- the checker: cases -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("..", "made only of periods"),
        (".", "made only of periods"),
        ("...", "made only of periods"),
        ("a/../b", "made only of periods ('..')"),
        ("a/./b", "made only of periods ('.')"),
        ("../../evil", "made only of periods ('..')"),
        ("a//b", "an empty name"),
        ("a/", "an empty name"),
        ("/a", "a leading '/'"),
        ("/", "a leading '/'"),
        ("a\\b", "a backslash"),
        ("..\\..\\evil", "a backslash"),
        ("a\x00b", "a NUL character"),
        ("a/b\x00/c", "a NUL character"),
    ],
)
def test_refused_paths(path, why):
    with pytest.raises(UnsafeNameError) as err:
        node_path(path, document="meta/root/x.array.json")
    assert err.value.array == path and err.value.key == "meta/root/x.array.json"
    assert why in str(err.value) and repr(path) in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, shardwise.ShardwiseError)


@pytest.mark.parametrize(
    "path",
    ["", "a", "a/b/c", "__zarr_reserved", "a/__b", ".zarray", "a..b", "..a", "a.", " ", "é ü/日本"],
)
def test_accepted_paths(path):
    assert node_path(path) == path


def test_one_name():
    assert node_name("x") == "x"
    for bad in ["", "a/b", "..", "a\\b"]:
        with pytest.raises(UnsafeNameError):
            node_name(bad, document="g/")
    with pytest.raises(UnsafeNameError, match="the node's path as in the store"):
        node_path("../x")  # a path a user gave: no document


def test_windows_rules(monkeypatch):
    monkeypatch.setattr(names_module, "_WINDOWS", True)
    for bad in ["C:x", "a/C:", "a:stream", ".. ", "a.", "a "]:
        with pytest.raises(UnsafeNameError):
            node_path(bad)
    assert node_path("a/b.c") == "a/b.c"


@pytest.mark.parametrize(
    ("root", "key"),
    [
        ("dst", "dst/a/zarr.json"),
        ("dst", "dst/zarr.json"),
        ("a/b.zarr", "a/b.zarr/v/c/0/1"),
        ("", "v/0.1"),
        ("", "zarr.json"),
        ("dst", "dst/.zattrs"),
    ],
)
def test_keys_under_the_root(root, key):
    assert key_under(root, key) == key


@pytest.mark.parametrize(
    ("root", "key", "why"),
    [
        ("dst", "dst", "not under 'dst/'"),
        ("dst", "dst2/a", "not under 'dst/'"),
        ("dst", "other/zarr.json", "not under 'dst/'"),
        ("dst", "dst/", "nothing after the root"),
        ("", "", "nothing after the root"),
        ("dst", "dst/../x/zarr.json", "made only of periods"),
        ("dst", "dst/a/../../x", "made only of periods"),
        ("dst", "dst//x", "an empty name"),
        ("", "../x", "made only of periods"),
        ("", "/etc/passwd", "a leading '/'"),
        ("dst", "dst/a\\..\\..\\x", "a backslash"),
        ("dst", "dst/a\x00", "a NUL character"),
        ("a/../b", "a/../b/x", "root 'a/../b'"),
        ("/dst", "/dst/x", "root '/dst'"),
    ],
)
def test_keys_refused(root, key, why):
    with pytest.raises(UnsafeNameError) as err:
        key_under(root, key)
    assert why in str(err.value) and err.value.key == key


# -- hostile stores ---------------------------------------------------------------------------
def draft(store, path):
    """A draft store holding one array at ``path`` (the names are not checked here)."""
    write_draft(
        store,
        path,
        np.arange(12, dtype="<i4").reshape(3, 4),
        (2, 2),
        (1, 2),
        compressor=None,
        order="C",
        fill=0,
        rng=np.random.default_rng(0),
    )
    return store


def refusals(src, dst):
    """What each tool raises for ``src``; none may write anything."""
    out = {}
    for name, call in [
        ("open_source", lambda: open_source(src)),
        ("inventory", lambda: shardwise.inventory(src)),
        ("info", lambda: shardwise.info(src)),
        ("migrate", lambda: shardwise.tools.migrate.migrate(src, dst)),
        ("reshard", lambda: shardwise.reshard(src, dst)),
        ("engine", lambda: xr.open_datatree(src, engine="shardwise", chunks={})),
    ]:
        with pytest.raises(UnsafeNameError) as err:
            call()
        out[name] = err.value
    return out


def test_a_draft_array_named_dotdot_on_disk_is_refused(tmp_path):
    """On a file system: a document ``meta/root/...array.json`` names an array ``..``,
    whose chunks a migration would write next to the destination."""
    src = tmp_path / "src.zarr"
    draft(LocalStore(src), "..")
    assert (src / "meta/root/...array.json").is_file()
    before = tree(tmp_path)
    for err in refusals(src, tmp_path / "dst").values():
        assert err.array == ".." and err.key == "meta/root/...array.json"
        assert "'..'" in str(err) and "meta/root/...array.json" in str(err)
    assert tree(tmp_path) == before  # nothing written, in dst or outside it


def test_a_draft_array_named_dotdot_is_refused_by_the_command_line(tmp_path):
    src = tmp_path / "src.zarr"
    draft(LocalStore(src), "..")
    before = tree(tmp_path)
    for args in [
        ("migrate", src, tmp_path / "dst"),
        ("reshard", src, tmp_path / "dst"),
        ("inventory", src),
        ("info", src),
    ]:
        assert_error_line(run(*args), "node-name rules", "'..'", "meta/root/...array.json")
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("path", "name", "document"),
    [
        ("../../evil", "..", "meta/root/.."),
        ("a/../../evil", "..", "meta/root/a/.."),
        ("a\\..\\..\\evil", "a\\..\\..\\evil", "meta/root/a\\..\\..\\evil.array.json"),
        ("ev\x00il", "ev\x00il", "meta/root/ev\x00il.array.json"),
        ("a//evil", "", "meta/root/a/"),
    ],
    ids=["dotdot", "dotdot-below", "backslash", "nul", "empty"],
)
def test_hostile_draft_names_in_an_object_store(tmp_path, path, name, document):
    src = draft(MemoryStore(), path)
    for err in refusals(src, tmp_path / "dst").values():
        assert err.array == name and err.key == document
    assert tree(tmp_path) == set()


def test_a_draft_group_named_dotdot(tmp_path):
    src = tmp_path / "src.zarr"
    draft(LocalStore(src), "g/v")
    (src / "meta/root/g.group.json").write_text('{"attributes": {}}')
    (src / "meta/root/...group.json").write_text('{"attributes": {}}')
    with pytest.raises(UnsafeNameError) as err:
        shardwise.tools.migrate.migrate(src, tmp_path / "dst")
    assert err.value.array == ".." and err.value.key == "meta/root/...group.json"
    assert not (tmp_path / "dst").exists()


def test_a_draft_separator_that_climbs_is_refused(tmp_path):
    """The draft's chunk key separator goes into every chunk key."""
    src = draft(MemoryStore(), "v")
    doc = json.loads(src._store_dict["meta/root/v.array.json"].to_bytes())
    doc["chunk_grid"]["separator"] = "/../../"
    src._store_dict["meta/root/v.array.json"] = buffer(json.dumps(doc).encode())
    with pytest.raises(UnsupportedArrayError, match="separator") as err:
        shardwise.ArrayReader.open(src, "v")
    assert err.value.key == "meta/root/v.array.json"
    assert "v" in open_source(src).unreadable


def v3_group(store, zarr_format=3):
    root = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    for name in ("a", "b", "c"):
        root.create_array(name, shape=(6,), chunks=(2,), dtype="i4", fill_value=0)[:] = 7
    sub = root.create_group("sub")
    sub.create_array("d", shape=(3,), chunks=(3,), dtype="f4", fill_value=0)[:] = 1.5
    return store


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize(
    ("member", "name"),
    [
        ("sub/../../evil", ".."),
        ("sub/a\\..\\..\\evil", "a\\..\\..\\evil"),
        ("sub/e\x00vil", "e\x00vil"),
        ("sub//evil", ""),
    ],
    ids=["dotdot", "backslash", "nul", "empty"],
)
def test_hostile_group_members(tmp_path, zarr_format, member, name):
    store = v3_group(MemoryStore(), zarr_format)
    doc = "zarr.json" if zarr_format == 3 else ".zarray"
    store._store_dict[f"{member}/{doc}"] = store._store_dict[f"a/{doc}"]
    for call in [
        lambda: open_source(store),
        lambda: shardwise.info(store),
        lambda: shardwise.inventory(store, "a"),
        lambda: shardwise.reshard(store, tmp_path / "dst"),
    ]:
        with pytest.raises(UnsafeNameError) as err:
            call()
        assert err.value.array == name and err.value.key == f"sub/{name}"
    assert tree(tmp_path) == set()
    with pytest.raises(UnsafeNameError):
        open_source(store, group="sub/../..")  # a path given: checked too


def test_consolidated_keys_are_never_followed(tmp_path):
    """A consolidated metadata key pointing at a store next to this one."""
    ds = xr.Dataset({"v": ("x", np.arange(4, dtype="i4"))})
    ds.to_zarr(tmp_path / "victim.zarr", zarr_format=3, consolidated=False)
    shardwise.to_zarr(ds, tmp_path / "s.zarr", consolidated=False)
    victim = json.loads((tmp_path / "victim.zarr/v/zarr.json").read_text())
    root = json.loads((tmp_path / "s.zarr/zarr.json").read_text())
    root["consolidated_metadata"] = {
        "kind": "inline",
        "must_understand": False,
        "metadata": {"../victim.zarr/v": victim},
    }
    (tmp_path / "s.zarr/zarr.json").write_text(json.dumps(root))
    assert set(open_source(tmp_path / "s.zarr").arrays) == {"v"}  # listed, not taken
    with pytest.raises(shardwise.ShardwiseError):
        xr.open_dataset(tmp_path / "s.zarr", engine="shardwise")


def test_array_info_checks_its_path():
    meta = zarr.create_array(MemoryStore(), shape=(2,), dtype="i1").metadata
    with pytest.raises(UnsafeNameError) as err:
        ArrayInfo.from_metadata(meta, "a/../../b")
    assert err.value.key == "a/../../b/zarr.json"
    assert ArrayInfo.from_metadata(meta, "/a/b/").path == "a/b"  # edges: stripped


# -- one damaged document among many ----------------------------------------------------------
DAMAGE = {
    "not JSON": b"{",
    "a list": b"[]",
    "no data_type": b'{"zarr_format": 3, "node_type": "array", "shape": "x"}',
    "attributes a number": b'{"zarr_format": 3, "node_type": "group", "attributes": 5}',
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_one_damaged_document_among_many(tmp_path, damage):
    v3_group(LocalStore(tmp_path / "s.zarr"))
    (tmp_path / "s.zarr/b/zarr.json").write_bytes(DAMAGE[damage])
    src = open_source(tmp_path / "s.zarr")
    assert set(src.arrays) == {"a", "c", "sub/d"} and set(src.groups) == {"", "sub"}
    assert set(src.unreadable) == src.damaged == {"b"}
    err = src.unreadable["b"]
    assert isinstance(err, UnsupportedArrayError)
    assert err.array == "b" and err.key == "b/zarr.json" and "cannot be read" in str(err)

    found = shardwise.info(tmp_path / "s.zarr")
    assert [a.path for a in found.arrays] == ["a", "c", "sub/d"]
    assert all(a.error is None and a.chunks_present == a.chunks_total for a in found.arrays)
    ((path, why),) = found.unreadable
    assert path == "b" and "b/zarr.json" in why and "cannot be read" in why
    assert "b/zarr.json" in str(found)
    assert shardwise.inventory(tmp_path / "s.zarr", "a").attrs["chunks_present"] == 3
    assert set(shardwise.tools.inventory.inventories(tmp_path / "s.zarr")) == {"a", "c", "sub/d"}
    with pytest.raises(UnsupportedArrayError, match=r"b/zarr\.json"):
        shardwise.inventory(tmp_path / "s.zarr", "b")
    report = shardwise.reshard(tmp_path / "s.zarr", tmp_path / "dst", variables=["a", "sub/d"])
    assert report.arrays == ["a", "sub/d"]


def test_a_damaged_group_document_and_v2_documents(tmp_path):
    store = v3_group(LocalStore(tmp_path / "v3.zarr"))
    (tmp_path / "v3.zarr/sub/zarr.json").write_bytes(b"{")
    src = open_source(store)
    assert set(src.arrays) == {"a", "b", "c"} and src.damaged == {"sub"}
    assert src.unreadable["sub"].key == "sub/zarr.json"

    v3_group(LocalStore(tmp_path / "v2.zarr"), zarr_format=2)
    (tmp_path / "v2.zarr/b/.zarray").write_bytes(b'{"zarr_format": 2, "shape": "x"}')
    (tmp_path / "v2.zarr/c/.zattrs").write_bytes(b"[1]")
    src = open_source(tmp_path / "v2.zarr")
    assert set(src.arrays) == {"a", "sub/d"} and src.damaged == {"b", "c"}
    assert src.unreadable["b"].key == "b/.zarray" and src.unreadable["c"].key == "c/.zattrs"


@pytest.mark.parametrize(
    ("zarr_format", "document"), [(3, "zarr.json"), (2, ".zgroup"), (2, ".zattrs")]
)
def test_the_root_document_damaged_is_a_refusal_naming_it(tmp_path, zarr_format, document):
    v3_group(LocalStore(tmp_path / "s.zarr"), zarr_format)
    (tmp_path / "s.zarr" / document).write_bytes(DAMAGE["attributes a number"][:-1])
    for call in [open_source, shardwise.info, lambda p: shardwise.inventory(p, "a")]:
        with pytest.raises(UnsupportedArrayError) as err:
            call(tmp_path / "s.zarr")
        assert err.value.key == document and err.value.array == "/"


def test_info_names_the_damaged_array_on_the_command_line(tmp_path):
    v3_group(LocalStore(tmp_path / "s.zarr"))
    (tmp_path / "s.zarr/b/zarr.json").write_bytes(b"{")
    proc = run("info", tmp_path / "s.zarr")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1  # problems found, the rest reported
    assert "b  (damaged document)" in proc.stdout
    assert "store key 'b/zarr.json'" in proc.stdout
    assert "sub/d  float32 (3)" in proc.stdout
    # inventory of the group: the damaged document named on stderr, the array summarised
    (tmp_path / "one.zarr").mkdir()
    g = zarr.open_group(tmp_path / "one.zarr", mode="w", zarr_format=3)
    g.create_array("a", shape=(4,), chunks=(2,), shards=(4,), dtype="f4")[...] = 1
    g.create_array("b", shape=(4,), chunks=(2,), dtype="f4")
    (tmp_path / "one.zarr/b/zarr.json").write_bytes(b"{")
    proc = run("inventory", tmp_path / "one.zarr")
    assert proc.returncode == 1, proc.stderr
    assert "damaged document (b)" in proc.stderr and "b/zarr.json" in proc.stderr
    assert "array    a" in proc.stdout
    # reshard names it, unless it is left out
    proc = run("reshard", tmp_path / "one.zarr", tmp_path / "out.zarr")
    assert proc.returncode == 2 and "b/zarr.json" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.zarr").exists()
    proc = run("reshard", tmp_path / "one.zarr", tmp_path / "out.zarr", "--var", "a")
    assert proc.returncode == 0, proc.stderr


def test_damaged_documents_of_a_draft_store(tmp_path):
    src = tmp_path / "hierarchy"
    shutil.copytree(LEGACY / "hierarchy", src)
    (src / "meta/root/surface.group.json").write_text('{"attributes": 5}')
    (src / "meta/root/surface/counts.array.json").write_text("{")
    found = open_source(src)
    assert set(found.arrays) == {"deep/inside/flags"}
    assert set(found.unreadable) == found.damaged == {"surface", "surface/counts"}
    assert found.unreadable["surface"].key == "meta/root/surface.group.json"
    assert found.unreadable["surface/counts"].key == "meta/root/surface/counts.array.json"
    summary = shardwise.info(src)
    assert [a.path for a in summary.arrays] == ["deep/inside/flags"]
    assert [p for p, _ in summary.unreadable] == ["surface", "surface/counts"]
    (src / "meta/root.group.json").write_text("[")  # the root group's own document
    with pytest.raises(UnsupportedArrayError) as err:
        open_source(src)
    assert err.value.key == "meta/root.group.json" and err.value.array == "/"
