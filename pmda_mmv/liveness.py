"""MMV_FLAG_PROCESS: whether the writer of a served file is alive, without PCP.

Each served file's writer is watched through a ``pidfd_open(2)`` descriptor, all of them in
one epoll set polled at the start of every request (:meth:`Writers.exited`), so a writer's
exit removes its file at the next request whatever the number of files (a zombie has exited
too).  Without pidfds (Linux < 5.3, or out of descriptors) psutil checks the process at the
scanner's periodic check (:func:`running`).  A live process that started more than PID_SLACK
seconds after the file's creation (:func:`~.layout.generation_time`) is not its writer but a
reused PID.
"""

from __future__ import annotations

import errno
import os
import select
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from . import layout as fmt
from .reader import MmvFile

if TYPE_CHECKING:
    import psutil  # imported where used: check and debug need it only for PROCESS files

PID_SLACK: Final = 2.0  # seconds a writer may seem to start after its file (clock grain)


@dataclass(slots=True)
class Writer:
    """The process of a PROCESS file: ``pid``, its pidfd (-1 when psutil watches it) and
    the psutil process."""

    pid: int
    fd: int = -1
    process: psutil.Process | None = None

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


class Exited(Exception):
    """The writer of a PROCESS file has exited."""


class Writers:
    """The pidfds of the served files' writers, in one epoll set; ``pidfd`` False: psutil
    only (also once the kernel refuses pidfds)."""

    def __init__(self, pidfd: bool = True) -> None:
        self.pidfd = pidfd and hasattr(os, "pidfd_open")
        self._epoll: select.epoll | None = None
        self._names: dict[int, str] = {}  # pidfd -> name of the file it watches

    def open(self, mf: MmvFile) -> Writer | None:
        """The live writer of a PROCESS file (None for other files and pid 0, as the C
        agent); raises Exited when it has exited or its pid belongs to a process that
        started after the file was created."""
        pid = mf.header.process
        if not mf.header.process_flag or pid == 0:
            return None
        import psutil

        writer = Writer(pid)
        try:
            if self.pidfd:
                writer.fd = self._pidfd_open(pid)
            writer.process = psutil.Process(pid)
            created = fmt.generation_time(mf.header.g1, time.time())
            if created is not None and writer.process.create_time() > created + PID_SLACK:
                raise Exited
            if writer.fd >= 0 and _readable(writer.fd):
                raise Exited  # it exited after the pidfd was opened
        except (Exited, psutil.Error, OSError, ValueError):
            writer.close()
            raise Exited from None
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


def exit_reason(path: str, mf: MmvFile) -> str:
    """The problem line of a PROCESS file whose writer has exited."""
    return (
        f"{path}: {fmt.header_field('process')}: writer process {mf.header.process} "
        "has exited (MMV_FLAG_PROCESS), file not served"
    )


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
