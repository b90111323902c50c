"""Family members' departures, credited as they happen (docs/families.md).

:class:`Departures` is the agent's one owner of this concurrency: a thread of its own that
opens each file matching a ``--family`` pattern as soon as the watcher reports it (no other
file costs it anything), holds its descriptor and its PROCESS writer's pidfd, and when the
file is unlinked or replaced, or its writer exits, reads the file's last values through the
held descriptor and credits them to the family and saves the identity registry, between
two requests or while the agent's thread answers one.  Both threads take
:attr:`~pmda_mmv.namespace.family.Families.lock` around the families' counts and the
registry: the agent's thread for a whole refresh (and its save), this one for one credit
and its save, so a departure is on disk before the next request is answered.  The entry
table and the catalogue are not touched here: the agent's thread unserves the member at its
next request, and the family's ledger (name and generation) keeps it from being credited
twice.  At start, the matching files are looked at once: a file left by a writer that is
gone (killed, or ended while the agent was down) is credited then, once.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import Final

from pmda_mmv.directory.filestate import ALL
from pmda_mmv.directory.liveness import NoWriter, Searching, Writer, Writers
from pmda_mmv.mmvfile.errors import MmvError
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.registry import Registry

RETRY: Final = 0.02
"""Seconds between looks at a matching file that is not ready or is refused: a writer
fills its file after creating it (the TOC, then the generation)."""
PATIENCE: Final = 2.0
"""Seconds a matching file is looked at again so before this thread gives up on it (the
agent's own scanner still serves it when it becomes ready)."""
SETTLE: Final = 0.005
"""Seconds this thread waits for the families' lock before it goes back to opening new
files (the departed ones wait in their held descriptors)."""
MAX_HELD: Final = 1024
"""Matching files held open at once (a descriptor each, and a pidfd for a PROCESS file):
past it a new matching file is not held, one log line says so, and its departure is
credited at a request as the agent's thread sees it, so that no population of matching
names can take the descriptors the agent serves files with."""


@dataclass
class Held:
    """A matching file held open: its descriptor (in ``mf``) and its writer's pidfd."""

    mf: MmvFile
    writer: Writer | None

    def exited(self) -> bool:
        """Whether the writer's pidfd says it has exited."""
        if self.writer is None or self.writer.fd < 0:
            return False
        poller = select.poll()
        poller.register(self.writer.fd, select.POLLIN)
        return bool(poller.poll(0))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.mf.close()


class Departures:
    """The departures thread of one directory's families (see the module docstring)."""

    def __init__(self, directory: str, families: Families, registry: Registry, log: Log) -> None:
        self.directory = directory
        self.families = families
        self.registry = registry
        self.log = log
        self.active = bool(families.families)
        self.writers = Writers()
        self.held: dict[str, Held] = {}  # this thread's only (the main one's before start)
        self.credits = 0  # departures credited
        self._pending: set[str] = set()
        self._retry: dict[str, float] = {}  # name -> until when
        self._mutex = threading.Lock()  # guards _pending (the watcher's thread adds)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        self._fds: dict[int, str] = {}  # pidfd -> held file name
        self._departed: list[Held] = []  # to credit, at the next free moment of the lock
        self._full = False  # MAX_HELD met (logged once until a file is held again)
        self.thread: threading.Thread | None = None

    def notice(self, name: str) -> None:
        """The watcher saw a change of ``name`` (ALL: of the directory): looked at soon."""
        if not self.active or (name != ALL and self.families.family_of(name) is None):
            return
        with self._mutex:
            self._pending.add(name)
        with contextlib.suppress(OSError):  # the pipe is full: a wake-up is pending
            os.write(self._wake_w, b"x")

    def start(self) -> None:
        """Look at every matching file once (crediting those left by a writer that is
        gone), then start the thread; from the agent's thread, before its first answer."""
        if not self.active or self.thread is not None:
            return
        for name in self._matching():
            self._look(name)
        self._settle(None)
        self.thread = threading.Thread(target=self._run, name="departures", daemon=True)
        self.thread.start()

    def _matching(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            names = []
        return sorted(n for n in names if self.families.family_of(n) is not None)

    def _run(self) -> None:
        while True:
            timeout = SETTLE * 1000 if self._departed else RETRY * 1000 if self._retry else None
            ready = self._poll.poll(timeout)
            names = {self._fds[fd] for fd, _ in ready if fd in self._fds}
            if any(fd == self._wake_r for fd, _ in ready):
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            with self._mutex:
                names |= self._pending
                self._pending = set()
            if ALL in names:
                names = (names - {ALL}) | set(self._matching()) | set(self.held)
            now = time.monotonic()
            self._retry = {n: u for n, u in self._retry.items() if u >= now}
            names |= set(self._retry)
            for name in sorted(names):
                try:
                    self._look(name)
                except Exception as e:  # never end the thread: the requests still credit
                    self.log(f"departures: {name}: {type(e).__name__}: {e}")
            self._settle(SETTLE)

    def _look(self, name: str) -> None:
        """``name`` changed: a new file is held, a departed one credited."""
        held = self.held.get(name)
        mf = self._open(name)
        same = held is not None and mf is not None and _same(held.mf, mf)
        if held is not None and (not same or held.exited()):
            self._release(name)
            self._departed.append(held)  # unlinked, replaced, or its writer exited
        if same or mf is None or not self._owners(mf):
            if mf is not None:
                mf.close()
            return
        try:
            writer = self.writers.open(mf)
        except NoWriter:  # a file left by a writer that is gone
            self._departed.append(Held(mf, None))
            return
        except Searching:
            writer = None
        if not self._room(mf):
            Held(mf, writer).close()
            return
        self.held[name] = Held(mf, writer)
        if writer is not None and writer.fd >= 0:
            self._fds[writer.fd] = name
            self._poll.register(writer.fd, select.POLLIN)

    def _owners(self, mf: MmvFile) -> bool:
        """Whether ``mf`` is its family owner's (any owner's while the family has none)."""
        fam = self.families.family_of(mf.name)
        return fam is not None and (fam.owner is None or mf.uid == fam.owner)

    def _room(self, mf: MmvFile) -> bool:
        """Whether one more file may be held: fewer than :data:`MAX_HELD` are (one log line
        when that bound is first met, until a file is held again)."""
        if len(self.held) < MAX_HELD:
            self._full = False
            return True
        if not self._full:
            self._full = True
            self.log(
                f"departures: {MAX_HELD} matching files held; {mf.name} and those after it"
                " are not held (their departures are credited at a request)"
            )
        return False

    def _open(self, name: str) -> MmvFile | None:
        path = os.path.join(self.directory, name)
        try:
            mf = MmvFile.open(path, name=name)
        except (MmvError, OSError):  # not ready, or refused while its writer writes it
            if os.path.lexists(path):
                self._retry.setdefault(name, time.monotonic() + PATIENCE)
            return None
        self._retry.pop(name, None)
        return mf

    def _release(self, name: str) -> None:
        held = self.held.pop(name)
        if held.writer is not None and held.writer.fd in self._fds:
            del self._fds[held.writer.fd]
            self._poll.unregister(held.writer.fd)

    def _settle(self, wait: float | None) -> None:
        """Credit the departed files gathered so far to their families and save the
        registry once, under the families' lock; while the agent's thread holds it longer
        than ``wait`` seconds (None: as long as it takes) they wait for the next turn, and
        meanwhile new files go on being opened, however short their lives."""
        if not self._departed:
            return
        if not self.families.lock.acquire(timeout=-1 if wait is None else wait):
            return
        departed, self._departed = self._departed, []
        try:
            credited = 0
            for held in departed:
                try:
                    credited += self.families.credit_departed(held.mf, held.mf.last_snapshot())
                except Exception as e:  # one file's failure credits the others still
                    self.log(f"departures: {held.mf.name}: {type(e).__name__}: {e}")
            if credited:
                self.registry.save()
                self.credits += credited
        finally:
            self.families.lock.release()
            for held in departed:
                held.close()


def _same(a: MmvFile, b: MmvFile) -> bool:
    """Whether two opens are of one file (inode and generation)."""
    sa, sb = os.fstat(a.fd), os.fstat(b.fd)
    return (sa.st_dev, sa.st_ino, a.header.g1, a.header.g2) == (
        sb.st_dev,
        sb.st_ino,
        b.header.g1,
        b.header.g2,
    )
