"""MMV_FLAG_PROCESS: which process writes a served file, and whether it is alive, without PCP.

A PROCESS file's header names its writer by the PID the writer saw: in a container (another
PID namespace) that is not the PID the agent sees, and the agent's own process of that
number (init at 1, kthreadd at 2) is someone else.  So the writer is *found* once per file
load (:meth:`Writers.open`):

* The candidates are the processes whose innermost PID (the last ``NSpid`` of
  ``/proc/<pid>/status``) is the header's: the agent's own process of that number, when it
  is in the agent's namespace, and any process of another PID namespace.  Fast path: the
  agent's own process of that number that has the file mapped or open is taken at once.
  Otherwise one walk of ``/proc`` (:class:`~.procfs.ProcIndex`) indexes every process by innermost
  PID; it is shared by the files loaded meanwhile, bounded by the request budget (resumed
  at the next request, the file ``pending`` meanwhile) and done again only for files seen
  after it started.
* Evidence: a candidate whose ``/proc/<pid>/maps`` (or ``fd``) shows the file's device and
  inode is its writer; one whose maps are readable and do not is not, nor a kernel thread.
  Maps are readable for processes of the agent's user (and all of them for root): for other
  users' processes the agent cannot look, and takes, among those whose mounts reach the
  file (``/proc/<pid>/mountinfo``, readable by all: a mount of the file's device whose root
  holds the file's path; a container without the directory bind-mounted cannot be its
  writer), the candidate that started last before the file was created, never the agent's
  own PID 1 (init) unless its maps show the file.
* A live candidate that started more than PID_SLACK seconds after the file's creation
  (:func:`~.generation.generation_time`) is not the writer but a reused PID.

Each verdict is one sentence (:class:`NoWriter`, :meth:`Writer.exited_reason`), the same in
the agent's log, ``mmv.control.file.last_problem``, ``check`` and ``debug``.

Each writer found is watched through a ``pidfd_open(2)`` descriptor (of its PID in the
agent's namespace), all of them in one epoll set polled at the start of every request
(:meth:`Writers.exited`), so a writer's exit removes its file at the next request whatever
the number of files (a zombie has exited too).  Without pidfds (Linux < 5.3, or out of
descriptors) psutil checks the process at the scanner's periodic check (:func:`running`).

A writer in another PID namespace is attributed (:attr:`Writer.container`): the container ID
found in its cgroup path (``/proc/<pid>/cgroup``), else that path.

psutil is imported where it is used, so that ``check`` and ``dump`` run without it; the
agent imports it up front (:mod:`~.pmda`), as root, before it drops to user pcp, who may
not be able to read the venv (a checkout under /root).
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pmda_mmv.directory import procfs
from pmda_mmv.mmvfile import generation, layout
from pmda_mmv.mmvfile.errors import MmvError, Problem
from pmda_mmv.mmvfile.reader import MmvFile

if TYPE_CHECKING:
    import psutil  # imported where used: check and dump need it only for PROCESS files

PID_SLACK: Final = 2.0  # seconds a writer may seem to start after its file (clock grain)


@dataclass(slots=True)
class Writer:
    """The process of a PROCESS file: ``pid`` in the agent's namespace, ``header_pid`` the
    PID the file names (its innermost), its pidfd (-1 when psutil watches it), the psutil
    process, and for a writer in another PID namespace its ``cgroup`` path and
    ``container`` (an ID found in that path, else the path)."""

    pid: int
    fd: int = -1
    process: psutil.Process | None = None
    header_pid: int = 0
    nested: bool = False
    cgroup: str = ""
    container: str = ""
    confirmed: bool = False  # its maps or descriptors show the file

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def describe(self) -> str:
        """``writer process N`` (N the header's PID), and where it is when nested."""
        text = f"writer process {self.header_pid or self.pid}"
        if self.nested:
            text += f" (PID {self.pid} in the agent's namespace, container {self.container})"
        return text

    def exited_reason(self) -> str:
        return f"{self.describe()} has exited"

    def labels(self) -> dict[str, str]:
        """The labels a nested writer's files carry: ``container`` (none for the agent's
        own namespace)."""
        return {"container": self.container} if self.nested and self.container else {}

    def as_dict(self) -> dict[str, object]:
        """What ``check --json`` shows of the writer."""
        doc: dict[str, object] = {"pid": self.header_pid or self.pid, "agent_pid": self.pid}
        doc["confirmed"] = self.confirmed
        if self.nested:
            doc.update(container=self.container, cgroup=self.cgroup)
        return doc


class NoWriter(MmvError):
    """No live writer of the PROCESS file at ``path``, a problem of its ``header.process``:
    ``reason`` says what was seen; ``exited`` only when the writer was found and has
    exited."""

    def __init__(self, *, path: str, reason: str, exited: bool = False) -> None:
        why = f"{reason} (MMV_FLAG_PROCESS), file not served"
        super().__init__(
            path=path, field="header.process", message=why, offset=layout.HEADER.at["process"]
        )
        self.reason = reason
        self.exited = exited

    @classmethod
    def not_found(cls, path: str, pid: int, seen: str = "") -> NoWriter:
        """No process of innermost PID ``pid`` is the writer (``seen``: what was seen)."""
        return cls(
            path=path, reason=f"writer PID {pid} not found in this PID namespace or any other{seen}"
        )


class Searching(Exception):
    """The walk of /proc that finds the writer did not end within the request budget: the
    file is looked at again at the next request."""


def writer_problem(path: str, reason: str) -> Problem:
    """The problem of a PROCESS file without a live writer."""
    return NoWriter(path=path, reason=reason).problem


def exit_problem(path: str, mf: MmvFile, writer: Writer | None = None) -> Problem:
    """The problem of a PROCESS file whose writer has exited."""
    what = writer.exited_reason() if writer is not None else None
    return writer_problem(path, what or f"writer process {mf.header.process} has exited")


@dataclass(slots=True)
class _Candidate:
    pid: int
    nspid: list[int]
    started: float  # seconds since the epoch
    holds: bool | None
    kthread: bool = False
    reaches: bool | None = None  # its mounts reach the file (looked at when holds is None)
    dev: int = 0  # the file's device and inode
    ino: int = 0
    uids: frozenset[int] = frozenset()  # its real, effective, saved and filesystem uids

    def why_not(self, owner: int) -> str:
        """Why this process of the header's PID is not taken for the writer of a file of
        user ``owner``."""
        where = "here" if len(self.nspid) == 1 else f"(PID {self.pid} here)"
        who = f"PID {self.nspid[-1]} {where}"
        if self.kthread:
            return f"{who} is a kernel thread"
        if self.holds is None and self.reaches is False:
            return f"{who} has no mount that holds this file"
        if self.holds is None and owner not in self.uids:
            return f"{who} is another user's process, whose maps the agent may not read"
        if self.holds is None:  # the agent's own init, whose maps it may not read
            return f"{who} is init, whose maps the agent may not read"
        return f"{who} does not have this file mapped or open"


class Writers:
    """The pidfds of the served files' writers, in one epoll set; ``pidfd`` False: psutil
    only (also once the kernel refuses pidfds).  Finds writers (see the module docstring)."""

    def __init__(
        self,
        pidfd: bool = True,
        proc: str = procfs.PROC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pidfd = pidfd and hasattr(os, "pidfd_open")
        self.proc = proc
        self.clock = clock
        self._epoll: select.epoll | None = None
        self._names: dict[int, str] = {}  # pidfd -> name of the file it watches
        self._index: procfs.ProcIndex | None = None
        self.walks = 0  # walks of /proc done so far
        self._boot: float | None = None  # boot time (seconds since the epoch), once read

    def open(
        self, mf: MmvFile, deadline: float | None = None, *, path: str | None = None
    ) -> Writer | None:
        """The live writer of a PROCESS file (None for other files and pid 0, as the C
        agent); raises NoWriter saying why there is none (a problem of ``path``, by default
        the file's), Searching when the walk of /proc must go on at the next request (past
        ``deadline``)."""
        path = mf.path if path is None else path
        pid = mf.header.process
        if not mf.header.process_flag or pid == 0:
            return None
        if pid < 0:
            raise NoWriter(path=path, reason=f"writer PID {pid} is not a process ID")
        st = os.fstat(mf.fd)
        dev, ino = st.st_dev, st.st_ino
        created = generation.generation_time(mf.header.g1, time.time())
        fast = self._candidate(pid, dev, ino, None)
        if fast is not None and fast.holds and len(fast.nspid) == 1:
            return self._follow(path, fast, pid, created)
        where = procfs.fs_path(self.proc, mf.path, dev)
        # the writer existed when the file was created (or last written): a walk that
        # listed /proc since then holds it.  Never later than the inode's ctime, which its
        # owner cannot set: a generation (or mtime) in the future would otherwise ask for a
        # walk listed after every call, a new walk each time, never done when one walk
        # takes more than a request's budget (the file pending for ever)
        since = st.st_mtime if created is None else created
        index = self._walk(min(since, st.st_ctime, time.time()), deadline)
        found = [self._candidate(p, dev, ino, where) for p in index.by_inner.get(pid, ())]
        cands = [c for c in found if c is not None and c.nspid[-1] == pid]
        return self._follow(path, self._choose(path, pid, cands, created, st.st_uid), pid, created)

    def _walk(self, since: float, deadline: float | None) -> procfs.ProcIndex:
        """A finished walk of /proc that listed it after ``since`` (wall clock): the last
        one, or a new one; raises Searching when it is not finished by ``deadline``."""
        for _ in range(2):  # the walk under way may have listed /proc before ``since``
            index = self._index
            if index is None or (index.done and index.listed < since):
                index = self._index = procfs.ProcIndex(self.proc)
                self.walks += 1
            if not index.done and not index.advance(deadline, self.clock):
                raise Searching
            if index.listed >= since:
                return index
        raise Searching

    def _candidate(self, pid: int, dev: int, ino: int, where: str | None) -> _Candidate | None:
        """Process ``pid`` as a candidate writer of the file (``dev``, ``ino``), at ``where``
        within its filesystem (None: not known, its mounts are not looked at)."""
        status = procfs.pid_status(self.proc, pid)
        st = procfs.pid_stat(self.proc, pid)
        if status is None or st is None:
            return None
        nspid, uids = status
        started, flags = st
        kthread = bool(flags & procfs.PF_KTHREAD)
        evidence = False if kthread else procfs.holds(self.proc, pid, dev, ino)
        if self._boot is None:
            self._boot = procfs.boot_time(self.proc)
        cand = _Candidate(pid, nspid, self._boot + started, evidence, kthread, dev=dev, ino=ino)
        cand.uids = uids
        if evidence is None and where is not None:
            cand.reaches = procfs.reaches(self.proc, pid, dev, where)
        return cand

    def _choose(
        self, path: str, pid: int, cands: list[_Candidate], created: float | None, owner: int
    ) -> _Candidate:
        """The writer among the processes of innermost PID ``pid``: the one whose maps show
        the file, else (maps unreadable) the one of the file's ``owner`` that started last
        before the file, never the agent's own init; NoWriter saying what was seen when
        none is.  Without evidence from the maps, a process of another user is never taken:
        in a PID namespace of its own, any user can hold any innermost PID."""
        if not cands:
            raise NoWriter.not_found(path, pid)
        late = [c for c in cands if created is not None and c.started > created + PID_SLACK]
        timely = [c for c in cands if c not in late]
        confirmed = [c for c in timely if c.holds] or [c for c in late if self._writes(c)]
        if confirmed:
            return max(confirmed, key=lambda c: c.started)
        unknown = [
            c
            for c in timely
            if c.holds is None and c.pid != 1 and c.reaches is not False and owner in c.uids
        ]
        if unknown:
            return max(unknown, key=lambda c: c.started)
        if late and not timely:  # every holder of that PID started after the file
            here = next((c for c in late if len(c.nspid) == 1), late[0])
            return _reused(path, pid, here)
        # what was seen of the agent's own process of that number (the host's init, a
        # process that does not map the file): those of other namespaces come and go
        mine = [c.why_not(owner) for c in timely if len(c.nspid) == 1]
        seen = f": {mine[0]}" if mine else ""
        raise NoWriter.not_found(path, pid, seen)

    def _writes(self, cand: _Candidate) -> bool:
        """Whether ``cand``, though it seems to have started after the file, is its writer:
        it maps the file writable.  Its start time and the file's generation are both read
        on the wall clock, so a clock stepped forward since the file was created (the first
        NTP sync of a machine without a battery-backed clock) moves every writer's start
        past its file; a process given a dead writer's PID cannot map another user's file
        writable, and the agent is never the writer."""
        if not cand.holds or cand.pid == os.getpid():
            return False
        return procfs.maps_writable(self.proc, cand.pid, cand.dev, cand.ino)

    def _follow(self, path: str, cand: _Candidate, pid: int, created: float | None) -> Writer:
        """Open the chosen process (pidfd, psutil); NoWriter when it went meanwhile."""
        import psutil

        writer = Writer(cand.pid, header_pid=pid, nested=len(cand.nspid) > 1)
        writer.confirmed = bool(cand.holds)
        try:
            if self.pidfd:
                writer.fd = self._pidfd_open(cand.pid)
            writer.process = psutil.Process(cand.pid)
            late = created is not None and writer.process.create_time() > created + PID_SLACK
            if late and not self._writes(cand):
                _reused(path, pid, cand)
            again = procfs.innermost(self.proc, cand.pid)
            if again is None or again[-1] != pid:
                raise NoWriter.not_found(path, pid)
            if writer.fd >= 0 and _readable(writer.fd):
                raise NoWriter(path=path, reason=writer.exited_reason())  # since it was found
        except NoWriter:
            writer.close()
            raise
        except (psutil.Error, OSError, ValueError):
            writer.close()
            raise NoWriter.not_found(path, pid) from None
        if writer.nested:
            writer.cgroup = procfs.cgroup_of(self.proc, cand.pid)
            writer.container = procfs.container_of(writer.cgroup)
        return writer

    def _pidfd_open(self, pid: int) -> int:
        """A pidfd of ``pid``, or -1 when this one cannot have one (psutil watches it);
        ProcessLookupError when there is no such process."""
        try:
            return os.pidfd_open(pid)
        except ProcessLookupError:
            raise
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EPERM):  # no pidfds here (old kernel, seccomp)
                self.pidfd = False
            return -1

    @property
    def watched(self) -> int:
        """Pidfds held for served files' writers (descriptors: fdlimit.py)."""
        return len(self._names)

    def watch(self, name: str, writer: Writer) -> None:
        """Report ``name`` from :meth:`exited` once ``writer`` exits (psutil: never)."""
        if writer.fd >= 0:
            if self._epoll is None:
                self._epoll = select.epoll()
            self._epoll.register(writer.fd, select.EPOLLIN)
            self._names[writer.fd] = name

    def unwatch(self, writer: Writer) -> None:
        """Stop watching ``writer`` and close its pidfd."""
        if writer.fd >= 0 and self._epoll is not None:
            self._epoll.unregister(writer.fd)
            del self._names[writer.fd]
        writer.close()

    def exited(self) -> list[str]:
        """Names of the files whose pidfd-watched writer exited: one epoll_wait."""
        if not self._names or self._epoll is None:
            return []
        return [self._names[fd] for fd, _ in self._epoll.poll(0)]


def _reused(path: str, pid: int, cand: _Candidate) -> _Candidate:
    where = "" if len(cand.nspid) == 1 else f" (PID {cand.pid} in the agent's namespace)"
    why = f"PID {pid}{where} belongs to a process started after this file: PID reused"
    raise NoWriter(path=path, reason=why)


def running(writer: Writer) -> bool:
    """psutil's answer, for a writer no pidfd watches."""
    import psutil

    try:
        return writer.process is not None and writer.process.is_running()
    except psutil.Error:
        return False


def _readable(fd: int) -> bool:
    """Whether a pidfd says its process has exited (poll: select cannot take fds >= 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
