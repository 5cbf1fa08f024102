"""Which node paths and store keys shardwise accepts: one place decides.

A store's metadata and listings are input. A draft array document named
``meta/root/...array.json`` (an array ``..``), a group member ``..`` in an object store,
a Zarr v2 or v3 consolidated metadata key ``../x``: used as a key, such a name reaches
outside the store's root, and a ``reshard`` or ``migrate`` would write outside its
destination. So every node path taken from a store (and every path a user gives for a
node: ``group=``, ``variables=``) goes through :func:`node_path` (one name: through
:func:`node_name`) before it is used to read or write, and every key the writers build
goes through :func:`key_under`.

The rules are Zarr v3's for node names (core specification, "Node names"), applied
to each ``/``-separated component of a path:

- not empty (no ``a//b``, no leading or trailing ``/``);
- not made only of periods (``.``, ``..``, ``...``);
- and, stricter than the specification, no backslash (a separator on Windows, and
  zarr-python reads it as ``/``) and no NUL (no file system holds it); on Windows also
  no ``:`` (a drive or a data stream) and no trailing ``.`` or space (Windows drops
  them, so ``.. `` would be ``..``).

Every other name the specification allows is accepted: any Unicode, spaces, control
characters other than NUL, periods among other characters (``.zarray``, ``a..b``).

Names starting with ``__`` are accepted too. The specification reserves that prefix
for Zarr itself and its extensions, so a conforming writer does not make such nodes;
but such a name cannot reach outside the root, and refusing it would make data a
lenient writer wrote unreadable, for no safety gained.

A leading or trailing ``/`` is refused here: paths as stores hold them have neither. A
caller holding a path in the form users write it (``"/a/b/"``, zarr-python's
``"/"`` for the root) strips the slashes at the edges before checking; inner empty
components stay refused.
"""

from __future__ import annotations

import os

from shardwise.errors import UnsafeNameError

__all__ = ["key_under", "node_name", "node_path"]

_WINDOWS = os.name == "nt"

_RULES = (
    "names that are not empty and not only periods ('.', '..'), separated by single '/', "
    "without a leading '/', a backslash or NUL"
)


def _name_problem(name: str) -> str | None:
    """Why one path component is refused, or None."""
    if name == "":
        return "an empty name"
    if name.strip(".") == "":
        return "a name made only of periods"
    if "\\" in name:
        return "a backslash"
    if "\x00" in name:
        return "a NUL character"
    if _WINDOWS and ":" in name:
        return "a ':' (a drive or data stream on Windows)"
    if _WINDOWS and name[-1] in ". ":
        return "a trailing '.' or space (dropped by Windows)"
    return None


def _path_problem(path: object) -> str | None:
    """Why a node path is refused, or None (the root, ``""``, is accepted)."""
    if not isinstance(path, str):
        return f"a {type(path).__name__}, not a string"
    if path == "":
        return None
    if path.startswith("/"):
        return "a leading '/'"
    names = path.split("/")
    for name in names:
        problem = _name_problem(name)
        if problem is not None:
            return f"{problem} ({name!r})" if name and len(names) > 1 else problem
    return None


def _refuse(path: object, problem: str, document: str | None) -> UnsafeNameError:
    return UnsafeNameError(
        "a node path breaks Zarr's node-name rules",
        expected=_RULES,
        found=f"{path!r}: {problem}",
        array=path if isinstance(path, str) else repr(path),
        key=document,
        advice=(
            "shardwise reads and writes nothing through such a name: it could reach "
            "outside the store's root. A name found in the store: rename or remove that "
            "node (the store is damaged or was made to be hostile); a path you gave: give "
            "it as in the store, names separated by single '/'."
            if document is not None
            else "Give the node's path as in the store: names separated by single '/'."
        ),
    )


def node_path(path: str, *, document: str | None = None) -> str:
    """``path``, a node path (``"a/b"``; ``""`` for the root) taken from a store's
    metadata or listing, or given by a user, when it follows the node-name rules of the
    module docstring; raises :class:`~shardwise.errors.UnsafeNameError` naming the path
    and ``document`` (the store key it came from; None for a path a user gave)
    otherwise. Nothing is stripped or normalized: ``"/a"``, ``"a/"`` and ``"a//b"`` are
    refused."""
    problem = _path_problem(path)
    if problem is not None:
        raise _refuse(path, problem, document)
    return path


def node_name(name: str, *, document: str | None = None) -> str:
    """``name``, one node name (a child of a group, as a listing gives it), when it
    follows the rules: as :func:`node_path`, and moreover not empty and without ``/``."""
    if isinstance(name, str) and "/" in name:
        raise _refuse(name, "a '/' inside one name", document)
    if name == "":
        raise _refuse(name, "an empty name", document)
    return node_path(name, document=document)


def key_under(root: str, key: str) -> str:
    """``key``, a store key a writer is about to write, when it lies under ``root`` (the
    destination's path inside its store, ``""`` for the whole store): ``root + "/" +
    rest`` (``rest`` when ``root`` is ``""``) with ``rest`` one or more names following
    the rules (``zarr.json``, ``.zarray``, ``c/0/1`` and ``0.1`` do). ``root`` follows
    the rules too. Raises :class:`~shardwise.errors.UnsafeNameError` otherwise: the
    writing code checks this invariant before each write, so no key outside the
    destination is written whatever names reached it."""
    problem = _path_problem(root)
    if problem is not None:
        raise UnsafeNameError(
            "a write was refused: the destination's root breaks Zarr's node-name rules",
            expected=_RULES,
            found=f"root {root!r}: {problem}",
            key=key if isinstance(key, str) else None,
            advice="Give the destination as a path without '.', '..' or empty components.",
        )
    rest: object = key
    if root:
        if not isinstance(key, str) or not key.startswith(root + "/"):
            rest = None
            problem = f"not under {root + '/'!r}"
        else:
            rest = key[len(root) + 1 :]
    if problem is None and isinstance(rest, str):
        if rest == "":
            problem = "nothing after the root"
        elif rest.startswith("/"):
            problem = "an empty name after the root"
        else:
            problem = _path_problem(rest)
    if problem is not None:
        raise UnsafeNameError(
            "a write outside the destination was refused",
            expected=f"a key {root + '/' if root else ''}<names>, with {_RULES}",
            found=f"{key!r}: {problem}",
            key=key if isinstance(key, str) else None,
            advice="No byte was written to this key. A name from the source that "
            "escaped the checks made it: report it, with the source's listing.",
        )
    return key
