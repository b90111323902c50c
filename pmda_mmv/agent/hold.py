"""The hold: the files loaded while more wait in the scanner's queue, kept back from
python3-pcp's tables so that many files arriving at once are registered in a few rebuilds
of its namespace, not one per request (docs/architecture.md, Discovery budget)."""

from __future__ import annotations

from typing import Final

from pmda_mmv.directory.budget import HELD_NAMES
from pmda_mmv.directory.filestate import Changes

HOLD: Final = 0.3
"""Seconds the files loaded while more wait in the scanner's queue may be held back from
the tables (a removal is applied at once, with all that was held): each table change
makes libpcp rebuild the whole namespace, so 10,000 files arriving at once are registered
in a few rebuilds, not one per request."""


class Hold:
    """The changes loaded while more files wait in the scanner's queue, held back from the
    tables (each table change makes python3-pcp rebuild its whole namespace): registered
    by the request that finds them :meth:`due` (held for :data:`HOLD` seconds, or
    :data:`~.budget.HELD_NAMES` names), before it loads more, or at once when nothing
    more waits or a file was removed (:meth:`take`)."""

    def __init__(self) -> None:
        self.changes = Changes()
        self.since = 0.0
        self.names = 0  # metrics of the files held
        self.released = False  # since the last request: python3-pcp rebuilt its tables

    def due(self, now: float) -> bool:
        """Whether what is held is to be registered at the start of this request.  What a
        request that registered went on to load is held from the next request on: the
        rebuild in between (which grows with the names served) counts for no hold."""
        if self.released:
            self.since, self.released = now, False
        return bool(self.changes) and (now - self.since >= HOLD or self.names >= HELD_NAMES)

    def release(self) -> Changes:
        """Everything held, which is held no longer."""
        taken, self.changes, self.names = self.changes, Changes(), 0
        self.released = True
        return taken

    def take(self, changes: Changes, queued: int, now: float) -> Changes | None:
        """Add ``changes``; returns everything held when it is registered now (nothing
        queued, or a removal), else None."""
        if changes and not self.changes and not self.released:
            self.since = now
        self.changes.extend(changes)
        self.names += sum(len(e.metrics) for e in changes.added)
        if not queued or changes.removed:
            return self.release()
        return None
