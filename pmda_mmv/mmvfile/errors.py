"""The problems of an MMV file as data (:class:`Problem`), and the errors of reading one:
:class:`MmvError` and its four kinds.

Each carries the file's ``path``, the ``field`` (a dotted location such as
``metrics[3].item``), its absolute byte ``offset``, a ``message`` and the ``limit`` broken.
A problem stays data from where it is found (the reader, the catalogue, the directory's
policies and limits) to where it is shown (the log, ``mmv.control.file.last_problem``,
``check``, ``dump`` and ``debug``), which render it as text and escape it
(:func:`~.rules.printable`) there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from pmda_mmv.mmvfile import limits


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One problem of the file at ``path``: its ``field`` (empty: the whole file), the
    byte ``offset`` of that field (-1: none), the ``message``, the ``limit`` broken (or
    None), its ``kind`` (an :class:`MmvError` kind, or ``error``) and ``count``: how many
    problems it stands for (more than one: the summary of those not listed).  Built by
    keyword only: its fields have one order, the one of :meth:`__str__`."""

    path: str
    field: str = ""
    message: str
    offset: int = -1
    limit: int | None = None
    kind: str = "error"
    count: int = 1

    def __str__(self) -> str:
        """``path: field[ at offset N]: message`` (``path: message`` for the whole file)."""
        if not self.field:
            return f"{self.path}: {self.message}"
        where = f" at offset {self.offset}" if self.offset >= 0 else ""
        return f"{self.path}: {self.field}{where}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: field (``file`` for the whole file), offset, message (and limit
        when set, count when more than one)."""
        out: dict[str, object] = {
            "field": self.field or "file",
            "offset": self.offset,
            "message": self.message,
        }
        if self.limit is not None:
            out["limit"] = self.limit
        if self.count != 1:
            out["count"] = self.count
        return out


def problem_count(problems: Iterable[Problem]) -> int:
    """How many problems ``problems`` stand for (a summary counts those it summarises)."""
    return sum(p.count for p in problems)


def bounded(problems: list[Problem], path: str) -> list[Problem]:
    """At most :data:`~.limits.MAX_PROBLEMS` problems of the file at ``path``, then one
    summary counting the others (those a summary in ``problems`` stood for included)."""
    listed = [p for p in problems if p.count == 1]
    more = problem_count(problems) - len(listed)
    if more == 0 and len(listed) <= limits.MAX_PROBLEMS:
        return problems
    more += max(0, len(listed) - limits.MAX_PROBLEMS)
    return [*listed[: limits.MAX_PROBLEMS], unlisted(path, more).problem]


def unlisted(path: str, count: int) -> Corrupt:
    """The one problem standing for ``count`` problems past :data:`~.limits.MAX_PROBLEMS`."""
    message = f"{count} more problems not listed (the first {limits.MAX_PROBLEMS} are)"
    return Corrupt(path=path, field="file", message=message, limit=limits.MAX_PROBLEMS, count=count)


class MmvError(Exception):
    """A problem with an MMV file, raised: it carries one :class:`Problem` (:attr:`problem`,
    of this error's :attr:`kind`), built from the same keywords; ``path``, ``field``,
    ``offset``, ``message``, ``limit`` and ``count`` read it."""

    kind = "error"

    def __init__(
        self,
        *,
        path: str,
        field: str = "",
        message: str,
        offset: int = -1,
        limit: int | None = None,
        count: int = 1,
    ) -> None:
        self.problem = Problem(
            path=path,
            field=field,
            message=message,
            offset=offset,
            limit=limit,
            kind=self.kind,
            count=count,
        )
        super().__init__(self.problem)

    path = property(attrgetter("problem.path"))
    field = property(attrgetter("problem.field"))
    offset = property(attrgetter("problem.offset"))
    message = property(attrgetter("problem.message"))
    limit = property(attrgetter("problem.limit"))
    count = property(attrgetter("problem.count"))

    def __str__(self) -> str:
        return str(self.problem)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: field, offset, message (and limit when set)."""
        return self.problem.as_dict()


class NotReady(MmvError):
    """The writer has not finished: generation 0, or g1 != g2 (mmv(5) "Generation numbers").
    Not a defect; the file is retried later."""

    kind = "not-ready"


class Refused(MmvError):
    """The file cannot be served at all: bad type, size, magic, version, TOC or cluster."""

    kind = "refused"


class Corrupt(MmvError):
    """One section or entry is malformed and was skipped; the rest of the file is served."""

    kind = "corrupt"


class Changed(MmvError):
    """The file changed since it was loaded (truncated, grown past its values, vanished or
    given a new generation); it must be loaded again before it is read."""

    kind = "changed"
