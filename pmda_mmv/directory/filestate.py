"""What the agent knows of each directory entry: the file states vocabulary (as
``mmv.control.file.state`` and ``pmda-mmv check`` report them), the per-entry record and the
changes a refresh hands to the agent.  No PCP imports.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass, field
from typing import Final

from pmda_mmv.directory.liveness import NoWriter, Writer
from pmda_mmv.mmvfile.errors import Changed, MmvError, NotReady, Problem
from pmda_mmv.namespace.served import FileEntry

OK: Final = "ok"
PARTIAL: Final = "partial"
NOT_READY: Final = "not-ready"
NOT_READY_GRACE: Final = 1.0  # seconds a file may stay not ready before it is logged
REFUSED: Final = "refused"
PENDING: Final = "pending"  # found, queued for loading by a later request (budget)
EXITED: Final = "exited"
NO_WRITER: Final = "no-writer"  # a PROCESS file whose writer is not found, or a reused PID
IGNORED: Final = "ignored"
"""States of a directory entry, as ``mmv.control.file.state`` reports them (``ignored``
entries, :func:`ignore_reason`, have no state: only ``pmda-mmv check`` lists them)."""
STATES: Final = (OK, PARTIAL, PENDING, NOT_READY, REFUSED, EXITED, NO_WRITER)
"""Every state ``mmv.control.file.state`` reports (its help text names them in this order);
``pmda-mmv check`` reports each but ``pending`` (it scans without a request budget), and
``ignored``.  A state's position is its code (:func:`state_code`): a new state goes last."""


def state_code(state: str) -> int:
    """The number of ``state`` (its position in :data:`STATES`), as
    ``mmv.control.file.state_code`` and the instance ids of ``mmv.control.files_by_state``
    report it: 0 is ``ok``."""
    return STATES.index(state)


UNSEEN: Final = (-1,)
"""Stat key of an entry not looked at yet (or to be looked at again)."""

ALL: Final = "\0all"
"""Marker queued by the watcher when the whole directory must be listed again."""


def status_of(error: MmvError) -> str:
    """The state of a directory entry whose look, open, read or writer search raised
    ``error`` (whose :attr:`~.MmvError.problem` is the entry's): ``not-ready`` for NotReady
    and Changed (the writer is not done, or the file changed while it was read: it is
    retried), ``exited`` or ``no-writer`` for :class:`~.liveness.NoWriter`, ``refused`` for
    anything else (a :class:`~.policy.Skip` included).  The one mapping of the agent,
    ``check``, ``dump`` and ``debug``."""
    if isinstance(error, NoWriter):
        return EXITED if error.exited else NO_WRITER
    return NOT_READY if isinstance(error, NotReady | Changed) else REFUSED


def ignore_reason(name: str) -> str | None:
    """Why the directory entry ``name`` is not even looked at, or None when it is."""
    return "dot-file, ignored" if name.startswith(".") else None


def parse_owners(spec: str | None) -> tuple[int, ...] | None:
    """``--owners``: comma-separated user names or uids (None: any owner); raises
    ValueError naming an unknown user."""
    if not spec:
        return None
    uids = []
    for word in (w.strip() for w in spec.split(",")):
        try:
            uids.append(int(word) if word.isdigit() else pwd.getpwnam(word).pw_uid)
        except KeyError:
            raise ValueError(f"--owners: unknown user {word!r}") from None
    return tuple(uids)


@dataclass(slots=True)
class FileState:
    """What the agent knows of one directory entry: ``state`` (see the module constants),
    ``problems`` (as data, newest last), the served ``entry`` (or None), the stat
    ``key`` it was last looked at with, and a stable ``instance`` id for the status indom."""

    name: str
    instance: int
    state: str = PENDING  # found, not looked at yet in this pass
    problems: list[Problem] = field(default_factory=list)
    entry: FileEntry | None = None
    key: tuple[int, ...] | None = (-1,)
    writer: Writer | None = None  # of the served entry, when it is a PROCESS file
    inode: tuple[int, int] | None = None  # of the served entry, when not through a symlink
    log_after: float = 0.0  # while not ready: when its problem is worth a log line
    delay: float = 0.0  # while not ready: seconds until the next retry
    retry: int = 0  # while not ready: the sequence number of its pending retry
    peek: int = -1  # while not ready: a descriptor to read its header through
    peek_inode: tuple[int, int] = (0, 0)
    head: bytes | None = None  # while not ready: its header when it was last opened

    @property
    def last_problem(self) -> Problem | None:
        return self.problems[-1] if self.problems else None


@dataclass(slots=True)
class Changes:
    """Entries the agent must stop serving (``removed``) and start serving (``added``), in that
    order; ``states`` is True when any directory entry's state changed."""

    removed: list[FileEntry] = field(default_factory=list)
    added: list[FileEntry] = field(default_factory=list)
    states: bool = False

    def __bool__(self) -> bool:
        return bool(self.removed or self.added or self.states)

    def extend(self, other: Changes) -> None:
        """Append ``other``; an entry added here and removed there was never served, so it
        leaves both lists."""
        added = {id(a) for a in self.added}
        dropped = {id(e) for e in other.removed if id(e) in added}
        if dropped:  # one rebuild, not one per entry (linear in both lists)
            self.added = [a for a in self.added if id(a) not in dropped]
        self.removed += [e for e in other.removed if id(e) not in dropped]
        self.added += other.added
        self.states |= other.states
