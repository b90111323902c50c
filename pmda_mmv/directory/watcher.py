"""Change events for an MMV directory, queued for the agent's thread.

The watcher never touches the catalogue: it only calls :meth:`Scanner.mark_dirty`, and the
agent applies queued work at its next request.  inotify is used where the kernel offers it
(:class:`InotifyReader`, a thread reading the directory's inotify descriptor), watchdog's
polling observer otherwise.  The per-request directory check in the scanner stays the
guarantee; events only make in-place changes visible sooner and cheaper.

Bounded: an event for a name the scanner ignores
(:func:`~.filestate.ignore_reason`, the one rule) is dropped as it is read, before anything
queues it, and the reader queues nothing of its own: each event is one
:meth:`~.scanner.Scanner.mark_dirty` (a set of names, one "rescan the directory" past
MAX_DIRTY), and the kernel's queue overflowing is one rescan too.  watchdog's inotify
observer kept two unbounded queues (its move grouper's and its dispatcher's): one process
creating and unlinking dot-files grew the agent from 22 to 455 MB.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import inspect
import os
import select
import struct
import threading
from collections.abc import Callable
from typing import Final

import watchdog.events
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver
from watchdog.utils import BaseThread

from pmda_mmv.directory.filestate import ALL, ignore_reason

Mark = Callable[[str], None]

ATTRIB: Final[type[FileSystemEvent]] = getattr(
    watchdog.events, "FileAttribEvent", FileModifiedEvent
)
"""A change of mode or owner: watchdog >= 4 has its own event; before (Debian 12's 2.2.1) it
comes as modified, which MMV writers (mmap, no write(2) after creation) rarely cause."""
EVENT_FILTER: Final = "event_filter" in inspect.signature(BaseObserver.schedule).parameters
"""watchdog >= 4 filters events itself; before, :class:`_Handler` drops the others."""

CHANGES: Final[list[type[FileSystemEvent]]] = [
    FileCreatedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    FileClosedEvent,  # closed after a write
    ATTRIB,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]
"""The inotify events that mean a change.  Not opened, closed without a write, or
modified: the agent's own opens and reads would come back as events, and a writer's
``write(2)`` calls are seen at its close or by the per-request generation check."""
POLLED: Final[list[type[FileSystemEvent]]] = [*CHANGES, FileModifiedEvent]
"""The polling observer reports a change of size or mtime as modified (it sees no opens)."""


# inotify(7)
IN_ATTRIB: Final = 0x4
IN_CLOSE_WRITE: Final = 0x8
IN_MOVED_FROM: Final = 0x40
IN_MOVED_TO: Final = 0x80
IN_CREATE: Final = 0x100
IN_DELETE: Final = 0x200
IN_DELETE_SELF: Final = 0x400
IN_MOVE_SELF: Final = 0x800
IN_Q_OVERFLOW: Final = 0x4000
IN_IGNORED: Final = 0x8000
IN_ONLYDIR: Final = 0x1000000
IN_DONT_FOLLOW: Final = 0x2000000
IN_CLOEXEC: Final = 0o2000000
IN_NONBLOCK: Final = 0o4000
MASK: Final = (
    IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
"""The same changes as CHANGES: not opens, reads or closes without a write."""
EVENT: Final = struct.Struct("=iIII")  # wd, mask, cookie, len; then len bytes of name
LOST: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED


class InotifyReader(BaseThread):
    """Reads the inotify events of one directory and marks each name the scanner does
    not ignore (``mark(ALL)`` for the directory itself or a lost event); nothing is
    queued here.  Raises OSError from the constructor when inotify is unavailable."""

    def __init__(self, directory: str, mark: Mark) -> None:
        super().__init__()
        self.name = f"inotify {directory}"
        self.mark = mark
        self.lost = False  # the watched directory itself was deleted or moved away
        self.dropped = 0  # events for ignored names, dropped as read
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        if libc.inotify_add_watch(fd, os.fsencode(directory), MASK) < 0:
            e = ctypes.get_errno()
            os.close(fd)
            raise OSError(e, os.strerror(e))
        self.fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._closing = threading.Lock()  # the wake pipe is written only while open

    def run(self) -> None:
        poll = select.poll()
        poll.register(self.fd, select.POLLIN)
        poll.register(self._wake_r, select.POLLIN)
        try:
            while self.should_keep_running():
                poll.poll()
                if not self.should_keep_running():
                    break
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError as e:
                    if e.errno == errno.EINTR:
                        continue
                    self.lost = True
                    break
                self._events(data)
        finally:
            with self._closing:
                os.close(self.fd)
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_w = -1

    def _events(self, data: bytes) -> None:
        at, size = 0, EVENT.size
        mark = self.mark
        while at + size <= len(data):
            _, mask, _, length = EVENT.unpack_from(data, at)
            raw = data[at + size : at + size + length].split(b"\0", 1)[0]
            at += size + length
            if mask & (LOST | IN_Q_OVERFLOW) or not raw:
                self.lost = self.lost or bool(mask & LOST)
                mark(ALL)
                continue
            name = os.fsdecode(raw)
            if ignore_reason(name) is None:
                mark(name)
            else:
                self.dropped += 1

    def on_thread_stop(self) -> None:
        with self._closing:
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")


class _Handler(FileSystemEventHandler):
    def __init__(self, directory: str, mark: Mark, events: list[type[FileSystemEvent]]) -> None:
        self.directory = os.path.realpath(directory)
        self.mark = mark
        self.events = tuple(events)
        self.lost = False  # the watched directory itself was deleted or moved away

    def on_any_event(self, event: FileSystemEvent) -> None:
        if type(event) not in self.events:
            return
        if os.fsdecode(event.src_path) == self.directory and event.event_type in (
            "deleted",
            "moved",
        ):
            self.lost = True
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if not path:
                continue
            path = os.fsdecode(path)
            if os.path.dirname(os.path.realpath(path)) == self.directory:
                self.mark(os.path.basename(path))
            else:
                self.mark(ALL)


class Watcher:
    """Watches ``directory`` (not recursively) and calls ``mark(name)`` for each changed
    entry, ``mark(ALL)`` when the directory itself changed.  :meth:`ensure` (re)arms it, for
    example after the directory was removed and created again; it is cheap when armed."""

    def __init__(self, directory: str, mark: Mark, polling: bool = False) -> None:
        self.directory = directory
        self.mark = mark
        self.polling = polling
        self.observer: BaseObserver | InotifyReader | None = None
        self.mode = "none"
        self.inode: tuple[int, int] | None = None
        self.handler: _Handler | InotifyReader | None = None

    def ensure(self) -> None:
        """Start watching if not already (or no longer) watching the directory that is there
        now (it may have been removed and created again); never raises."""
        try:
            st = os.stat(self.directory)
        except OSError:
            self.stop()
            return
        inode = (st.st_dev, st.st_ino)
        armed = self.observer is not None and self.observer.is_alive()
        if armed and inode == self.inode and self.handler and not self.handler.lost:
            return
        self.stop()
        if not self.polling:
            try:
                reader = InotifyReader(self.directory, self.mark)
            except OSError:
                pass
            else:
                reader.start()
                self.observer = self.handler = reader
                self.mode, self.inode = "inotify", inode
                self.mark(ALL)
                return
        for factory, mode in self._factories():
            try:
                observer = factory()
                observer.daemon = True
                events = POLLED if mode == "polling" else CHANGES
                handler = _Handler(self.directory, self.mark, events)
                if EVENT_FILTER:
                    observer.schedule(  # type: ignore[call-arg, unused-ignore]
                        handler, self.directory, event_filter=events
                    )
                else:
                    observer.schedule(handler, self.directory)
                observer.start()
            except (OSError, RuntimeError):
                continue
            self.observer, self.mode, self.inode = observer, mode, inode
            self.handler = handler
            self.mark(ALL)
            return

    def _factories(self) -> list[tuple[Callable[[], BaseObserver], str]]:
        """watchdog's observers, where InotifyReader could not start: its inotify one
        (which may still work where ctypes cannot), then polling."""
        polling: tuple[Callable[[], BaseObserver], str] = (
            lambda: PollingObserver(timeout=1.0),
            "polling",
        )
        return [polling] if self.polling else [(Observer, "inotify"), polling]

    def stop(self) -> None:
        """Stop the observer thread, if any."""
        if self.observer is not None:
            try:
                self.observer.stop()
                self.observer.join(timeout=2)
            except (OSError, RuntimeError):
                pass
            self.observer, self.mode, self.inode = None, "none", None
