"""Whether the local-disk guard of independent jobs holds where a store lies, from the
file system ``/proc/self/mountinfo`` names for the path (docs/shared-file-systems.md).

:class:`shardwise.io.conditional.LocalConditional` compares and renames holding a
``flock`` on the object's **folder**. Linux hands a ``flock`` to a file system only where
it has a ``flock`` operation for that file, else locks on this node (``fs/locks.c``); for
folders NFS (whatever ``local_lock=``), Lustre (whatever ``flock``/``localflock``, which
concern files), BeeGFS, SMB/CIFS, 9p and every FUSE file system have none, so jobs on
two nodes both hold the lock. CephFS's kernel client, GFS2 and OCFS2 (unless mounted
``localflocks``) lock folders cluster-wide and rename atomically.

A guard that holds on one node only loses rows while every process exits 0, so only what
is known is trusted: file systems of one kernel, and those three. Any other type, known
or not (GPFS among them: its client is closed, its documentation silent on a folder's
``flock``), gets a reason. ``flock`` is also tried once per file system (``LOCK_NB``): a
refusal is a reason too. Without ``/proc/self/mountinfo`` (macOS, BSD) the path is taken
as local and only that probe can say otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Mount",
    "guard_reason",
    "local_guard_reason",
    "local_mount",
    "mount_of",
    "parse_mountinfo",
    "probe_flock",
]

MOUNTINFO = "/proc/self/mountinfo"
# one kernel sees every process that can reach these (overlay: the mount exists on one
# machine; fuseblk: a FUSE driver of a block device, such as ntfs-3g)
LOCAL = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "bcachefs", "f2fs", "jfs", "reiserfs"}
    | {"nilfs2", "tmpfs", "ramfs", "overlay", "fuseblk", "fuse.fuse-overlayfs"}
)
CLUSTER = {"ceph": "CephFS", "gfs2": "GFS2", "ocfs2": "OCFS2"}  # folders locked cluster-wide
NETWORK = {
    "nfs": ("NFS", "the Linux NFS client sends no lock of a folder to the server"),
    "nfs4": ("NFS", "the Linux NFS client sends no lock of a folder to the server"),
    "lustre": ("Lustre", "its flock, localflock and noflock options concern files, not folders"),
    "beegfs": ("BeeGFS", "its tuneUseGlobalFileLocks concerns files, not folders"),
    "cifs": ("SMB/CIFS", "the SMB client sends no lock of a folder to the server"),
    "smb3": ("SMB/CIFS", "the SMB client sends no lock of a folder to the server"),
    "9p": ("a 9p share", "its host and other guests do not see this machine's locks"),
    "virtiofs": ("a virtiofs share", "its host and other guests do not see this machine's locks"),
}
OBJECT_FUSE = ("gcsfuse", "s3fs", "blobfuse", "goofys", "rclone", "mountpoint-s3", "geesefs")
REFUSALS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})
_OCTAL = re.compile(r"\\([0-7]{3})")
_PROBED: dict[int, str | None] = {}  # st_dev -> what flock said on that file system


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo``: ``options`` are the mount's own (``rw``,
    ``relatime``...), ``super_options`` the file system's (``local_lock=none``, ``flock``...)."""

    mount_id: int
    mount_point: str
    fstype: str
    source: str
    options: tuple[str, ...]
    super_options: tuple[str, ...]

    @property
    def reason(self) -> str | None:
        """:func:`guard_reason` of this mount."""
        return guard_reason(self)


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of ``/proc/<pid>/mountinfo`` text (proc_pid_mountinfo(5)): ``id parent
    major:minor root mount-point options [optional fields...] - type source super-options``,
    with space, tab, newline and backslash written as octal escapes (``\\040``...).
    Lines that do not have that form are left out."""
    mounts = []
    for line in text.split("\n"):  # (not splitlines: \x1c-\x1e, \x85... may be in a path)
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            mount_id = int(fields[0])
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        supers = fields[sep + 3] if len(fields) > sep + 3 else ""
        mounts.append(
            Mount(
                mount_id=mount_id,
                mount_point=_unescape(fields[4]),
                fstype=_unescape(fields[sep + 1]),
                source=_unescape(fields[sep + 2]),
                options=tuple(_unescape(o) for o in fields[5].split(",") if o),
                super_options=tuple(_unescape(o) for o in supers.split(",") if o),
            )
        )
    return mounts


def mount_of(path: str | os.PathLike[str], mounts: Sequence[Mount]) -> Mount | None:
    """The mount ``path`` lies on: the longest mount point that is ``path`` or a folder
    above it (``/a/b`` holds ``/a/b/c``, not ``/a/bc``); of mounts on the same point, the
    last (the one on top). ``path`` is taken as given: absolute, symbolic links resolved
    (:func:`local_mount` resolves them)."""
    target = os.path.normpath(os.fspath(path))
    found = None
    for mount in mounts:
        point = mount.mount_point
        holds = point == "/" or target == point or target.startswith(point.rstrip("/") + "/")
        if holds and (found is None or len(point) >= len(found.mount_point)):
            found = mount
    return found


def guard_reason(mount: Mount) -> str | None:
    """None when a ``flock`` on a folder of ``mount`` and a rename within it keep apart
    every process that can see the file system; else why independent jobs cannot be
    guarded there, and what to do (one sentence)."""
    kind = mount.fstype
    where = f"{mount.mount_point} ({kind} from {mount.source})"
    if kind in LOCAL:
        return None
    if kind in CLUSTER:
        if "localflocks" not in mount.super_options + mount.options:
            return None
        return (
            f"{where} is {CLUSTER[kind]} mounted with localflocks, which keeps flock on this "
            f"node, so jobs on other nodes are not kept out (remount without localflocks)"
        )
    subtype = kind.removeprefix("fuse.") if kind.startswith("fuse.") else mount.source
    fuse = kind == "fuse" or kind.startswith("fuse.")
    known = True  # (that other nodes are not kept out)
    if kind in NETWORK:
        what, why = NETWORK[kind]
        how = f"is {what}, where the flock shardwise takes on a store's folder is kept by this node's kernel ({why})"
    elif fuse and any(name in subtype for name in OBJECT_FUSE):
        how = f"is an object store mounted with FUSE ({subtype}), where a rename is a copy and a delete and the kernel keeps a folder's flock on this node"
    elif fuse:
        how = (
            f"is a FUSE file system ({subtype}), whose folders' flock the kernel keeps on this node"
        )
    elif kind == "gpfs":
        known = False
        how = "is IBM Storage Scale (GPFS), which does not document whether a flock on a folder reaches other nodes"
    else:
        known = False
        how = f"is a {kind} file system, which shardwise does not know to lock a folder for every process that can see it"
    kept = "are not" if known else "cannot be known to be"
    return f"{where} {how}, so independent jobs on other nodes {kept} kept out"


def probe_flock(directory: str | os.PathLike[str]) -> str | None:
    """The errno name (``ENOLCK``...) if ``flock(LOCK_EX | LOCK_NB)`` on ``directory`` is
    refused; None if it is taken (and released at once), held by another, or the folder
    cannot be opened (nothing can be said)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e.errno)) if e.errno in REFUSALS else None
    finally:
        os.close(fd)  # (closing releases the lock)
    return None


def local_mount(path: str | os.PathLike[str]) -> Mount | None:
    """The mount ``path`` (symbolic links resolved, which need not exist yet) lies on,
    from ``/proc/self/mountinfo``; None where that cannot be read."""
    try:
        with open(MOUNTINFO, "rb") as f:
            text = os.fsdecode(f.read())
    except OSError:
        return None
    return mount_of(os.path.realpath(path), parse_mountinfo(text))


def flock_refusal(path: str | os.PathLike[str]) -> str | None:
    """Why the file system of the local folder ``path`` (or of its nearest existing
    parent) cannot guard at all: it refuses ``flock`` (:func:`probe_flock`, made once
    per file system); None when it takes it."""
    directory = os.path.realpath(path)
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    try:
        dev = os.stat(directory).st_dev
    except OSError:
        return None
    if dev not in _PROBED:
        _PROBED[dev] = probe_flock(directory)
    refused = _PROBED[dev]
    if refused is None:
        return None
    return (
        f"{directory} refuses flock ({refused}), which shardwise takes on a store's folder "
        f"to keep independent jobs apart"
    )


def local_guard_reason(path: str | os.PathLike[str]) -> str | None:
    """Why independent jobs writing the local folder ``path`` cannot be guarded
    (:func:`guard_reason` of its mount, or a refusal of ``flock`` there:
    :func:`flock_refusal`), or None. The mount is looked up on every call; the probe is
    made once per file system."""
    mount = local_mount(path)
    if mount is not None and (reason := mount.reason) is not None:
        return reason
    return flock_refusal(path)
