"""Change events for an MMV directory (watchdog), queued for the agent's thread.

The watcher never touches the catalogue: it only calls :meth:`Scanner.mark_dirty`, and the
agent applies queued work at its next request.  inotify is used where the kernel offers it,
watchdog's polling observer otherwise.  The per-request directory check in the scanner stays
the guarantee; events only make in-place changes visible sooner and cheaper.
"""

from __future__ import annotations

import inspect
import os
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

from .filestate import ALL

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
        self.observer: BaseObserver | None = None
        self.mode = "none"
        self.inode: tuple[int, int] | None = None
        self.handler: _Handler | None = None

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
        for factory, mode in self._factories():
            try:
                observer = factory()
                observer.daemon = True
                events = POLLED if mode == "polling" else CHANGES
                handler = _Handler(self.directory, self.mark, events)
                if EVENT_FILTER:
                    observer.schedule(handler, self.directory, event_filter=events)
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
