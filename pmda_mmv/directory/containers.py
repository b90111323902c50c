"""MMV directories inside containers' own filesystems (``--containers``), without PCP.

A container is a mount namespace other than the agent's.  At most every
:data:`WALK_INTERVAL` seconds (and within the request budget: the walk resumes at the next
request) the agent reads ``/proc/<pid>/ns/mnt`` of every process; for each mount namespace
not seen before it opens ``/proc/<pid>/root`` and, from that directory, the container's
``$PCP_TMP_DIR/mmv`` (its ``/etc/pcp.conf`` says where, else ``/var/lib/pcp/tmp``), one
component at a time with ``O_NOFOLLOW | O_DIRECTORY`` (:func:`~.opener.open_dir`): a
symlink anywhere on the way is refused, so the path never leaves the container's root.
pcp.conf is opened as every file a user controls is (:func:`~.opener.open_beneath`): a
FIFO or device there is never opened.  The descriptor of that directory
is kept; its files are read through ``/proc/self/fd/<fd>/<name>`` (one component below it,
:func:`~.opener.open_regular`), and a symlink in it is never followed (:func:`~.policy.resolve`
with ``follow=False``): nothing of the host is reachable through a container's directory.
A directory that is the agent's own, or the one the agent's namespace has at the same path
(a bind mount, a service's private ``/tmp``), is not a container's.

Names: the files of a container are ``containers/<container>/<file>`` in the scanner
(``/`` never occurs in a host file's name, so a container's file never has a host file's
identity in the registry) and ``<prefix>.containers.<container>.<file>.<metric>`` in the
namespace (the subtree is reserved: no host file is served there).  ``<container>`` is
``c`` and the first 12 hex digits of the container ID in the cgroup path of the process the
directory was opened through (Docker, containerd, CRI-O, podman), else ``mnt`` and the
mount namespace's inode number.  Every file of the container carries the label
``container`` (the ID, else the cgroup path).

The container's end: a pidfd of the process the directory was opened through, polled at
each request (one ``epoll_wait`` for all containers); when it exits another process of the
namespace seen at the last walk takes its place, and when none is left the container is
gone: its files are forgotten at that request, as those of a removed directory.
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from pmda_mmv.directory.filestate import Changes, FileState, ignore_reason
from pmda_mmv.directory.procfs import cgroup_of, container_of
from pmda_mmv.mmvfile.opener import open_beneath, open_dir, read_head

SCOPE: Final = "containers"
"""The subtree of the namespace (``mmv.containers``) and the head of the scanner's names."""
WALK_INTERVAL: Final = 5.0  # seconds between two walks of /proc for new mount namespaces
WALK_STEP: Final = 64  # processes read between two looks at the clock
LIST_INTERVAL: Final = 0.05
"""Seconds between two looks (fstat) at the containers' directories: a request between
two costs one epoll_wait (the pidfds) and nothing per container."""
DEFAULT_TMP: Final = "/var/lib/pcp/tmp"
PCP_CONF: Final = "/etc/pcp.conf"
MAX_CONF: Final = 1 << 16  # bytes of a container's pcp.conf read, at most
_ROOT: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class HostEntries(Protocol):
    """What the containers need of the scanner's entries: their states, the scopes the
    loader resolves container names with, and forgetting a name."""

    @property
    def states(self) -> Mapping[str, FileState]: ...

    scopes: dict[str, tuple[str, dict[str, str]]]

    def forget(self, name: str) -> Changes: ...


class Host(Protocol):
    """What the containers need of the scanner: its entries and its queue."""

    @property
    def entries(self) -> HostEntries: ...
    def enqueue(self, names: Iterable[str]) -> Changes: ...


def tmp_dir(root: int) -> str:
    """The container's PCP_TMP_DIR: its pcp.conf's (a regular file below ``root``, opened
    by :func:`~.opener.open_beneath`, MAX_CONF bytes read at most), when it names an
    absolute path (no variable), else PCP's default."""
    try:
        fd, _ = open_beneath(root, PCP_CONF)
    except OSError:
        return DEFAULT_TMP
    try:
        text = read_head(fd, MAX_CONF).decode("utf-8", "replace")
    except OSError:
        return DEFAULT_TMP
    finally:
        os.close(fd)
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        value = value.strip().strip("'\"")
        if key == "PCP_TMP_DIR" and value.startswith("/") and "$" not in value:
            return value
    return DEFAULT_TMP


@dataclass(eq=False)
class Container:
    """One container's MMV directory: its scope (``containers/<name>``), mount namespace,
    directory descriptor, labels, the process followed (pidfd) and the others seen in it."""

    scope: str
    ns: int
    fd: int
    labels: dict[str, str]
    pid: int
    pidfd: int
    members: list[int] = field(default_factory=list)
    mtime: int | None = None

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def close(self) -> None:
        for fd in (self.fd, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.pidfd = -1


class Containers:
    """The containers' directories of one agent; :meth:`refresh` at each request."""

    def __init__(
        self,
        directory: str,
        subdir: str = "mmv",
        *,
        proc: str = "/proc",
        interval: float = WALK_INTERVAL,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.subdir = subdir
        self.proc = proc
        self.interval = interval
        self.log = log or (lambda line: None)
        self.own_ns = os.stat(f"{proc}/self/ns/mnt").st_ino
        if os.geteuid() != 0:  # ptrace read access: only to this user's processes
            self.log("--containers: not root: only this user's processes' containers are seen")
        self.directory = directory
        self.by_ns: dict[int, Container] = {}
        self.by_pidfd: dict[int, Container] = {}
        self.walks = 0  # walks of /proc completed (tests: bounded)
        self._epoll = select.epoll()
        self._next_walk = self._next_list = float("-inf")
        self._walking: list[str] | None = None  # /proc entries the walk has still to read
        self._seen: dict[int, list[int]] = {}  # mount namespace -> its processes (walk)

    # -- per request

    def refresh(
        self, host: Host, now: float, deadline: float | None, clock: Callable[[], float]
    ) -> Changes:
        """Containers gone, new ones (the walk, when due, until ``deadline``), and the
        listing of every container's directory that changed."""
        changes = Changes()
        for c in self._exited():
            changes.extend(self._drop(host, c))
        if self._walking is None and now >= self._next_walk:
            self._walking = sorted((n for n in os.listdir(self.proc) if n.isdigit()), key=int)
            self._seen = {}
        if self._walking is not None and self._walk(deadline, clock):
            self._walking, self._next_walk = None, now + self.interval
            self.walks += 1
            changes.extend(self._settle(host))
        if now >= self._next_list:
            self._next_list = now + LIST_INTERVAL
            for c in list(self.by_ns.values()):
                changes.extend(self._list(host, c))
        return changes

    def _walk(self, deadline: float | None, clock: Callable[[], float]) -> bool:
        """Read the mount namespace of the processes left to read; True when done."""
        todo = self._walking or []
        while todo:
            step, todo[:] = todo[:WALK_STEP], todo[WALK_STEP:]
            for name in step:
                try:
                    ns = os.stat(f"{self.proc}/{name}/ns/mnt").st_ino
                except OSError:
                    continue
                if ns != self.own_ns:
                    self._seen.setdefault(ns, []).append(int(name))
            if deadline is not None and todo and clock() >= deadline:
                return False
        return True

    def _settle(self, host: Host) -> Changes:
        """After a walk: namespaces gone are dropped, new ones opened, members updated."""
        changes = Changes()
        for ns, gone in list(self.by_ns.items()):
            if ns not in self._seen:
                changes.extend(self._drop(host, gone))
        for ns, pids in self._seen.items():
            known = self.by_ns.get(ns)
            if known is not None:
                known.members = pids
                known.mtime = None  # listed again: a file rewritten in place is looked at
            else:
                self._open(host, ns, pids)
        self._seen = {}
        return changes

    # -- one container

    def _open(self, host: Host, ns: int, pids: list[int]) -> None:
        """Open the MMV directory of mount namespace ``ns`` through one of ``pids``."""
        for pid in pids:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                fd = self._mmv_dir(pid, ns)
            except OSError:
                os.close(pidfd)
                return  # none in this namespace, or not a container's: the next walk again
            cgroup = cgroup_of(self.proc, pid)
            ident = container_of(cgroup)
            c = Container(self._scope(ns, ident), ns, fd, {}, pid, pidfd, pids)
            if cgroup:
                c.labels["container"] = ident
            self.by_ns[ns], self.by_pidfd[pidfd] = c, c
            self._epoll.register(pidfd, select.EPOLLIN)
            host.entries.scopes[c.scope] = (c.path, c.labels)
            self._next_list = float("-inf")  # listed at once
            self.log(f"{c.scope}: serving the MMV directory of mount namespace {ns} (PID {pid})")
            return

    def _mmv_dir(self, pid: int, ns: int) -> int:
        """The descriptor of the container's MMV directory, opened beneath its root."""
        root = os.open(f"{self.proc}/{pid}/root", _ROOT)
        try:
            if os.stat(f"{self.proc}/{pid}/ns/mnt").st_ino != ns:  # the PID was reused
                raise OSError(errno.ESRCH, "process gone")
            path = os.path.join(tmp_dir(root), self.subdir)
            fd = open_dir(root, path)
        finally:
            os.close(root)
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        shared = key in _dir_keys([self.directory, path])
        if shared or any(_key(c.fd) == key for c in self.by_ns.values()):
            os.close(fd)
            raise OSError(errno.EEXIST, "the host's directory")
        return fd

    def _scope(self, ns: int, ident: str) -> str:
        taken = {c.scope for c in self.by_ns.values()}
        if len(ident) == 64:
            scope = f"{SCOPE}/c{ident[:12]}"
            if scope not in taken:
                return scope
        return f"{SCOPE}/mnt{ns}"

    def _exited(self) -> list[Container]:
        """Containers whose followed process exited and that have no other process left."""
        gone = []
        for pidfd, _ in self._epoll.poll(0) if self.by_pidfd else ():
            c = self.by_pidfd.pop(pidfd)
            self._epoll.unregister(pidfd)
            os.close(pidfd)
            c.pidfd = -1
            if not self._follow(c):
                gone.append(c)
        return gone

    def _follow(self, c: Container) -> bool:
        """Follow another process of ``c``'s namespace; False when none is left."""
        for pid in c.members:
            if pid == c.pid:
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                same = os.stat(f"{self.proc}/{pid}/ns/mnt").st_ino == c.ns
            except OSError:
                same = False
            if not same:
                os.close(pidfd)
                continue
            c.pid, c.pidfd = pid, pidfd
            self.by_pidfd[pidfd] = c
            self._epoll.register(pidfd, select.EPOLLIN)
            return True
        return False

    def _drop(self, host: Host, c: Container) -> Changes:
        """Forget a container gone: its files, as those of a removed directory."""
        changes = Changes()
        head = c.scope + "/"
        for name in sorted(n for n in host.entries.states if n.startswith(head)):
            changes.extend(host.entries.forget(name))
        host.entries.scopes.pop(c.scope, None)
        self.by_ns.pop(c.ns, None)
        if c.pidfd >= 0:
            self.by_pidfd.pop(c.pidfd, None)
            self._epoll.unregister(c.pidfd)
        c.close()
        self.log(f"{c.scope}: mount namespace {c.ns} gone, its files are no longer served")
        return changes

    def _list(self, host: Host, c: Container) -> Changes:
        """Queue the entries of ``c``'s directory when it changed; forget those gone."""
        try:
            mtime = os.fstat(c.fd).st_mtime_ns
        except OSError:
            return Changes()
        if mtime == c.mtime:
            return Changes()
        c.mtime = mtime
        try:
            names = {f"{c.scope}/{n}" for n in os.listdir(c.fd) if ignore_reason(n) is None}
        except OSError:
            names = set()
        changes = Changes()
        head = c.scope + "/"
        for gone in sorted(n for n in host.entries.states if n.startswith(head) and n not in names):
            changes.extend(host.entries.forget(gone))
        changes.extend(host.enqueue(sorted(names)))
        return changes

    def close(self) -> None:
        for c in list(self.by_ns.values()):
            c.close()
        self.by_ns.clear()
        self.by_pidfd.clear()
        self._epoll.close()


def _key(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino)


def _dir_keys(paths: Iterable[str]) -> set[tuple[int, int]]:
    """(device, inode) of the directories of ``paths`` that the agent can stat."""
    keys = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        keys.add((st.st_dev, st.st_ino))
    return keys
