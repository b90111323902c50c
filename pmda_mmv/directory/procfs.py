"""What ``/proc`` says about a process, for finding an MMV_FLAG_PROCESS file's writer
(:mod:`~.liveness`): its PIDs in every PID namespace (``NSpid``), user ids, start time and
kernel-thread flag, whether its maps or descriptors hold a file, whether its mounts reach
one, and its cgroup (container ID).  Every reader bounds what it reads and answers None (or
False) for a process that has gone.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Final

PROC: Final = "/proc"
PF_KTHREAD: Final = 0x00200000  # /proc/<pid>/stat flags: a kernel thread
WALK_STEP: Final = 64  # processes read between two looks at the clock
MAX_FDS: Final = 4096  # descriptors of one candidate looked at, at most
MAX_MAPS: Final = 8 << 20  # bytes of one candidate's maps read, at most
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")

_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


class ProcIndex:
    """Every process of ``/proc`` by innermost PID (the last ``NSpid``), built by one walk
    that :meth:`advance` resumes until it is ``done``; ``listed``: when it listed /proc
    (wall clock), so the writer of any file created before then is in it."""

    def __init__(self, proc: str = PROC) -> None:
        self.listed = float("-inf")
        self.proc = proc
        self.by_inner: dict[int, list[int]] = {}
        self._names: list[str] | None = None
        self._pos = 0
        self.done = False

    def advance(self, deadline: float | None, clock: Callable[[], float]) -> bool:
        """Read on until the walk ends (True) or ``deadline`` passes (WALK_STEP processes
        at least: each call gets on)."""
        if self._names is None:
            self.listed = time.time()
            self._names = [n for n in os.listdir(self.proc) if n.isdigit()]
        names, n = self._names, len(self._names)
        while self._pos < n:
            stop = min(self._pos + WALK_STEP, n)
            for name in names[self._pos : stop]:
                inner = innermost(self.proc, int(name))
                if inner is not None:
                    self.by_inner.setdefault(inner[-1], []).append(int(name))
            self._pos = stop
            if deadline is not None and self._pos < n and clock() >= deadline:
                return False
        self.done = True
        self._names = None
        return True


def innermost(proc: str, pid: int) -> list[int] | None:
    """The ``NSpid`` list of ``pid`` (its PID in the agent's namespace first, innermost
    last; ``[pid]`` without NSpid, Linux < 4.1), or None when it is gone."""
    found = pid_status(proc, pid)
    return None if found is None else found[0]


def pid_status(proc: str, pid: int) -> tuple[list[int], frozenset[int]] | None:
    """``pid``'s NSpid list (see :func:`innermost`) and user ids (real, effective, saved,
    filesystem: ``Uid:``, readable by every user), or None when it is gone."""
    try:
        fd = os.open(f"{proc}/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 16384)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        uids = frozenset(int(w) for w in _field(data, b"Uid:") or ())
        nspid = _field(data, b"NSpid:")
        return ([pid] if nspid is None else [int(w) for w in nspid]), uids
    except ValueError:
        return None


def _field(status: bytes, name: bytes) -> list[bytes] | None:
    """The words of line ``name`` of a /proc status file, or None when it has none."""
    i = status.find(b"\n" + name)
    if i < 0:
        return None
    j = status.find(b"\n", i + 1)
    return status[i + 1 + len(name) : j if j >= 0 else len(status)].split()


def pid_stat(proc: str, pid: int) -> tuple[float, int] | None:
    """(start time in seconds since boot, flags) of ``pid``, or None when it is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return int(fields[19]) / CLK_TCK, int(fields[6])
    except (OSError, ValueError, IndexError):
        return None


def holds(proc: str, pid: int, dev: int, ino: int) -> bool | None:
    """Whether ``pid`` has the file (``dev``, ``ino``) mapped or open: None when the agent
    may not look (another user's process)."""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x} {ino} ".encode()
    try:
        with open(f"{proc}/{pid}/maps", "rb") as f:
            maps = f.read(MAX_MAPS)
    except PermissionError:
        return None
    except OSError:
        return False  # gone
    if not maps and pid_stat(proc, pid) is None:
        return False
    if any(line.split(maxsplit=5)[3:5] == want.split() for line in maps.splitlines()):
        return True
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")[:MAX_FDS]
    except PermissionError:
        return None if not maps else False
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if st.st_dev == dev and st.st_ino == ino:
            return True
    return False


def maps_writable(proc: str, pid: int, dev: int, ino: int) -> bool:
    """Whether ``pid`` maps the file (``dev``, ``ino``) shared and writable (``rw-s``), as its
    writer does: a reader (the agent, ``check``, another user) maps it read-only."""
    want = [f"{os.major(dev):02x}:{os.minor(dev):02x}".encode(), str(ino).encode()]
    try:
        with open(f"{proc}/{pid}/maps", "rb") as f:
            maps = f.read(MAX_MAPS)
    except OSError:
        return False
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if fields[3:5] == want and fields[1][1:2] == b"w" and fields[1][3:4] == b"s":
            return True
    return False


def mounts(proc: str, pid: int | str) -> list[tuple[int, str, str]] | None:
    """(device, root within its filesystem, mount point) of each mount ``pid`` sees, or
    None when its mountinfo cannot be read."""
    try:
        with open(f"{proc}/{pid}/mountinfo", "rb") as f:
            data = f.read(MAX_MAPS)
    except OSError:
        return None
    out = []
    for line in data.splitlines():
        fields = line.split(b" ", 5)
        if len(fields) < 5 or fields[2].count(b":") != 1:
            continue
        major, minor = fields[2].split(b":")
        try:
            dev = os.makedev(int(major), int(minor))
        except ValueError:
            continue
        out.append((dev, _unescape(fields[3]), _unescape(fields[4])))
    return out


def _unescape(field: bytes) -> str:
    """A mountinfo path: octal escapes (``\\040`` for a space) decoded."""
    text = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field)
    return os.fsdecode(text)


def fs_path(proc: str, path: str, dev: int) -> str | None:
    """The path of ``path`` (on device ``dev``) within its filesystem, from the agent's own
    mounts; None when no mount of ``dev`` holds it (btrfs subvolumes, overlayfs)."""
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for mdev, root, point in mounts(proc, "self") or ():
        if mdev == dev and _under(real, point) and (best is None or len(point) > best[0]):
            rest = real[len(point) :].lstrip("/") if point != "/" else real.lstrip("/")
            best = (len(point), os.path.join(root, rest))
    return best[1] if best else None


def reaches(proc: str, pid: int, dev: int, path: str) -> bool | None:
    """Whether process ``pid`` has a mount of device ``dev`` whose root holds ``path``
    (within the filesystem): None when its mountinfo cannot be read."""
    seen = mounts(proc, pid)
    if seen is None:
        return None
    return any(mdev == dev and _under(path, root) for mdev, root, _ in seen)


def _under(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def boot_time(proc: str = PROC) -> float:
    """When the system booted (``btime`` of ``/proc/stat``, seconds since the epoch), as
    psutil reads it: process start times are counted from it."""
    with open(f"{proc}/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError(f"{proc}/stat: no btime")


def cgroup_of(proc: str, pid: int) -> str:
    """The cgroup path of ``pid``: the first that is not the root of the unified (v2)
    hierarchy's, systemd's (v1) and the v1 controllers', in that order; "" when unknown."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = [ln.split(":", 2) for ln in f.read(65536).splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if len(ln) == 3]
    order = {"": 0, "name=systemd": 1}  # hierarchy ID 0 with no controllers: v2
    paths = [p for _, c, p in sorted(lines, key=lambda ln: order.get(ln[1], 2))]
    return next((p for p in paths if p != "/"), paths[0] if paths else "")


def container_of(cgroup: str) -> str:
    """The container ID in a cgroup path (docker, containerd, CRI-O, podman: 64 hex
    digits), else the path itself."""
    m = _CONTAINER_ID.search(cgroup)
    return m.group(1) if m else cgroup
