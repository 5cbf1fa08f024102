"""shardwise.io.mounts: mountinfo lines as Linux prints them (local disks, NFS, Lustre,
GPFS, CephFS, FUSE, SMB), the mount a path lies on, and what each file system does with
the local-disk guard's flock on a folder."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise.io import mounts

# (the NFS and CIFS super options as the kernel prints them: local_lock= always appears)
NFS4 = (
    "rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,"
    "sec=sys,clientaddr=10.0.0.5,local_lock=none,addr=10.0.0.2"
)
NFS3_NOLOCK = (
    "rw,vers=3,rsize=1048576,wsize=1048576,namlen=255,hard,nolock,proto=tcp,timeo=600,"
    "retrans=2,sec=sys,mountaddr=10.0.0.3,mountvers=3,mountport=20048,mountproto=udp,"
    "local_lock=all,addr=10.0.0.3"
)
MOUNTINFO = "\n".join(
    [
        "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard,errors=remount-ro",
        "25 24 0:23 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=24684096k,inode64",
        "30 27 0:30 / /tmp rw,nosuid,nodev shared:15 master:2 - tmpfs tmpfs rw,size=8g",
        f"101 27 0:52 / /home rw,relatime shared:60 - nfs4 nas01:/export/home {NFS4}",
        "102 27 0:53 / /data rw,relatime shared:61 - nfs4 nas02:/data "
        + NFS4.replace("local_lock=none", "local_lock=flock"),
        f"103 27 0:54 / /archive rw,relatime shared:62 - nfs nas03:/archive {NFS3_NOLOCK}",
        "104 27 0:55 / /lustre/scratch rw,relatime shared:63 - lustre "
        "10.1.0.1@o2ib:10.1.0.2@o2ib:/scratch rw,lazystatfs,flock,encrypt",
        "105 27 0:56 / /lustre/work rw,relatime shared:64 - lustre 10.1.0.1@o2ib:/work "
        "rw,localflock,lazystatfs",
        "106 27 0:57 / /lustre/old rw,relatime shared:65 - lustre 10.1.0.1@tcp:/old rw,lazystatfs",
        "107 27 0:58 / /gpfs/fs1 rw,relatime shared:66 - gpfs fs1 rw",
        "108 27 0:59 / /mnt/remote rw,nosuid,nodev,relatime shared:67 - fuse.sshfs "
        "user@login1:/home/user rw,user_id=1000,group_id=1000",
        "109 27 0:60 / /mnt/bucket rw,nosuid,nodev,relatime shared:68 - fuse.gcsfuse my-bucket "
        "rw,user_id=1000,group_id=1000,default_permissions",
        "110 27 0:61 / /mnt/s3 rw,nosuid,nodev,relatime shared:69 - fuse.s3fs s3fs "
        "rw,user_id=1000,group_id=1000",
        "111 27 0:62 / /mnt/share rw,relatime shared:70 - cifs //fileserver/share "
        "rw,vers=3.1.1,cache=strict,username=u,uid=1000,noforceuid,gid=1000,noforcegid,"
        "addr=10.0.0.9,file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,nobrl,"
        "rsize=4194304,wsize=4194304,bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
        "112 27 8:17 / /media/My\\040Drive rw,nosuid,nodev,relatime shared:71 - ext4 /dev/sdb1 rw",
        "113 27 0:63 / /mnt/cephfs rw,relatime shared:72 - ceph 10.0.0.10:6789:/ "
        "rw,name=admin,secret=<hidden>,acl",
        "114 27 0:64 / /mnt/ceph-fuse rw,nosuid,nodev,relatime shared:73 - fuse.ceph-fuse "
        "ceph-fuse rw,user_id=0,group_id=0,allow_other",
        "115 27 253:3 / /mnt/gfs rw,relatime shared:74 - gfs2 /dev/mapper/vg-gfs rw,localflocks",
        "116 27 253:4 / /mnt/gfs-shared rw,relatime shared:75 - gfs2 /dev/mapper/vg-gfs2 rw",
        "117 27 0:65 / /mnt/beegfs rw,relatime shared:76 - beegfs beegfs_nodev "
        "rw,cfgFile=/etc/beegfs/beegfs-client.conf",
        "118 27 0:66 / /mnt/host rw,relatime - 9p hostshare rw,access=client,trans=virtio",
        "119 27 0:67 / /mnt/virtio rw,relatime - virtiofs myfs rw",
        "120 27 0:68 / /a/b rw,relatime - xfs /dev/sdc1 rw,attr2,inode64",
        "121 27 0:69 / /a/bc rw,relatime - nfs4 nas01:/bc " + NFS4,
        "122 27 0:70 / /srv rw,relatime - autofs systemd-1 rw,fd=37,pgrp=1,timeout=0",
        "123 122 0:71 / /srv rw,relatime - nfs4 nas04:/srv " + NFS4,
        "124 27 0:72 /exports/x /mnt/bound rw,relatime - zfs tank/data rw,xattr,posixacl",
        "125 27 0:73 / /mnt/odd\\011tab\\134back rw - weirdfs none rw,path=a\\054b",
        "126 27 0:74 / /mnt/mp rw,nosuid,nodev,relatime - fuse mountpoint-s3 "
        "rw,user_id=1000,group_id=1000",
        "127 27 0:75 / /ctr rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,"
        "upperdir=/var/lib/docker/overlay2/u/diff,workdir=/var/lib/docker/overlay2/u/work",
        "not a mountinfo line",
    ]
)
MOUNTS = mounts.parse_mountinfo(MOUNTINFO)


def at(path: str) -> mounts.Mount:
    found = mounts.mount_of(path, MOUNTS)
    assert found is not None
    return found


def test_parse_fields_optional_fields_and_separator():
    assert len(MOUNTS) == 31  # (the line that is not mountinfo is left out)
    root = at("/")
    assert (root.mount_id, root.mount_point, root.fstype, root.source) == (
        27,
        "/",
        "ext4",
        "/dev/vda",
    )
    assert root.options == ("rw", "relatime")
    assert root.super_options == ("rw", "discard", "errors=remount-ro")
    tmp = at("/tmp")  # two optional fields before the separator
    assert (tmp.fstype, tmp.source, tmp.super_options) == ("tmpfs", "tmpfs", ("rw", "size=8g"))
    proc = mounts.parse_mountinfo("22 27 0:21 / /proc rw,relatime - proc proc rw")  # none
    assert proc[0].fstype == "proc" and proc[0].options == ("rw", "relatime")
    assert "local_lock=none" in at("/home").super_options
    assert "nolock" in at("/archive").super_options
    assert at("/mnt/bound").mount_point == "/mnt/bound"  # (a bind mount's root is not it)


def test_octal_escapes():
    assert at("/media/My Drive/x.zarr").mount_point == "/media/My Drive"
    odd = at("/mnt/odd\ttab\\back")
    assert odd.mount_point == "/mnt/odd\ttab\\back"
    assert odd.super_options == ("rw", "path=a,b")


def test_missing_super_options_and_short_lines():
    (m,) = mounts.parse_mountinfo("40 27 0:80 / /x rw - tmpfs tmpfs")
    assert m.super_options == () and m.fstype == "tmpfs"
    assert mounts.parse_mountinfo("40 27 0:80 / /x rw - tmpfs") == []
    assert mounts.parse_mountinfo("") == []


def test_longest_prefix():
    assert at("/a/b").fstype == "xfs"
    assert at("/a/b/c/d.zarr").fstype == "xfs"
    assert at("/a/bc").fstype == "nfs4"
    assert at("/a/bc/d").fstype == "nfs4"
    assert at("/a/bcd").mount_point == "/"  # neither /a/b nor /a/bc
    assert at("/a").mount_point == "/"
    assert at("/lustre/scratch/u/x.zarr").source.endswith(":/scratch")
    assert at("/lustre/scratch2").mount_point == "/"
    assert at("/home/../home/u").fstype == "nfs4"  # (normalised)


def test_the_mount_on_top_wins():
    assert at("/srv/data").fstype == "nfs4"  # the NFS mount over the automount point
    swapped = [m for m in MOUNTS if m.mount_point == "/srv"][::-1]
    assert mounts.mount_of("/srv/x", swapped).fstype == "autofs"  # (the later line)


def test_no_mounts():
    assert mounts.mount_of("/x", []) is None


GUARDS = [
    "/",
    "/tmp/x",
    "/dev/shm/x",
    "/media/My Drive/x.zarr",
    "/a/b/x",
    "/mnt/bound/x",
    "/ctr/data",
    "/mnt/cephfs/x",
    "/mnt/gfs-shared/x",
]


@pytest.mark.parametrize("path", GUARDS)
def test_guards(path):
    assert mounts.guard_reason(at(path)) is None
    assert at(path).reason is None


@pytest.mark.parametrize(
    ("path", "words"),
    [
        # NFS: a folder's flock never reaches the server, whatever local_lock says
        (
            "/home/u/x.zarr",
            [
                "/home (nfs4 from nas01:/export/home) is NFS",
                "folder to the server",
                "are not kept out",
            ],
        ),
        ("/data/x", ["is NFS"]),
        ("/archive/x", ["(nfs from nas03:/archive) is NFS"]),
        # Lustre: flock (the default since 2.12.3), localflock or neither: files only
        ("/lustre/scratch/x", ["is Lustre", "concern files, not folders"]),
        ("/lustre/work/x", ["is Lustre"]),
        ("/lustre/old/x", ["is Lustre"]),
        ("/gpfs/fs1/x", ["IBM Storage Scale (GPFS)", "does not document", "cannot be known"]),
        ("/mnt/beegfs/x", ["is BeeGFS", "tuneUseGlobalFileLocks"]),
        ("/mnt/share/x", ["is SMB/CIFS"]),
        ("/mnt/host/x", ["is a 9p share"]),
        ("/mnt/virtio/x", ["is a virtiofs share"]),
        ("/mnt/remote/x", ["FUSE file system (sshfs)", "keeps on this node"]),
        ("/mnt/ceph-fuse/x", ["FUSE file system (ceph-fuse)"]),
        ("/mnt/bucket/x", ["object store mounted with FUSE (gcsfuse)", "a copy and a delete"]),
        ("/mnt/s3/x", ["object store mounted with FUSE (s3fs)"]),
        ("/mnt/mp/x", ["object store mounted with FUSE (mountpoint-s3)"]),
        ("/mnt/gfs/x", ["GFS2 mounted with localflocks", "remount without localflocks"]),
        ("/mnt/odd\ttab\\back/x", ["a weirdfs file system", "does not know", "cannot be"]),
    ],
)
def test_cannot_guard(path, words):
    reason = mounts.guard_reason(at(path))
    assert reason is not None
    for word in words:
        assert word in reason
    assert "other nodes" in reason
    assert reason.count(". ") == 0 and not reason.endswith(".")  # one sentence, to be quoted


def test_unknown_types_are_not_trusted():
    (m,) = mounts.parse_mountinfo("50 27 0:90 / /new rw - somefs dev rw")
    assert "somefs" in (m.reason or "")


def test_this_machine(tmp_path):
    """tmp_path is on a local disk here (ext4 or tmpfs), where the guard holds."""
    found = mounts.local_mount(tmp_path)
    assert found is not None and found.fstype in mounts.LOCAL
    assert mounts.local_guard_reason(tmp_path) is None
    assert mounts.local_guard_reason(tmp_path / "not" / "made" / "yet.zarr") is None


def test_symlinks_are_resolved(tmp_path, monkeypatch):
    """The mount of the folder a link leads to, not of the link's own folder."""
    (tmp_path / "nfs").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "nfs")
    info = tmp_path / "mountinfo"
    point = str(tmp_path / "nfs").replace(" ", "\\040")
    info.write_text(
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
        f"90 27 0:99 / {point} rw,relatime - nfs4 srv:/x {NFS4}\n"
    )
    monkeypatch.setattr(mounts, "MOUNTINFO", str(info))
    reason = mounts.local_guard_reason(tmp_path / "link" / "store.zarr")
    assert reason is not None and "is NFS" in reason
    assert mounts.local_guard_reason(tmp_path / "other") is None


def test_refused_flock(tmp_path, monkeypatch):
    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(mounts, "_PROBED", {})
    monkeypatch.setattr(fcntl, "flock", refuse)
    assert mounts.probe_flock(tmp_path) == "ENOLCK"
    reason = mounts.local_guard_reason(tmp_path / "store.zarr")
    assert reason is not None and "refuses flock (ENOLCK)" in reason


def test_probe_made_once_per_file_system(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(mounts, "_PROBED", {})
    monkeypatch.setattr(mounts, "probe_flock", lambda d: calls.append(d))
    (tmp_path / "a").mkdir()
    assert mounts.local_guard_reason(tmp_path / "a") is None
    assert mounts.local_guard_reason(tmp_path / "b") is None
    assert len(calls) == 1


def test_a_lock_held_by_another_is_no_refusal(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert mounts.probe_flock(tmp_path) is None  # (EWOULDBLOCK: flock works here)
    finally:
        os.close(fd)
    assert mounts.probe_flock(tmp_path / "missing") is None


def test_without_mountinfo(tmp_path, monkeypatch):
    """macOS and BSD: no mountinfo; the path is taken as local, the probe decides."""
    monkeypatch.setattr(mounts, "MOUNTINFO", str(tmp_path / "absent"))
    assert mounts.local_mount(tmp_path) is None
    assert mounts.local_guard_reason(tmp_path) is None


def escape(path: str) -> str:
    """As the kernel writes a path in mountinfo (seq_path's " \\t\\n\\\\")."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


# (the kernel writes mount points normalized: no "." or ".." in them)
PART = st.text(st.characters(blacklist_characters="\x00/"), min_size=1).filter(
    lambda p: p not in (".", "..")
)


@given(st.lists(PART, min_size=1))
def test_escaped_mount_points_round_trip(parts):
    point = "/" + "/".join(parts)
    (m,) = mounts.parse_mountinfo(f"60 27 0:91 / {escape(point)} rw - ext4 /dev/x rw")
    assert m.mount_point == point
    assert mounts.mount_of(os.path.join(point, "store.zarr"), [m]) == m
