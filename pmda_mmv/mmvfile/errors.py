"""The errors of reading an MMV file: :class:`MmvError` and its four kinds.

Each carries the file's ``path``, the ``field`` (a dotted location such as
``metrics[3].item``), its absolute byte ``offset``, a ``message`` and the ``limit`` broken.
"""

from __future__ import annotations


class MmvError(Exception):
    """A problem with an MMV file: which file, which field, at which byte offset, and why.

    Attributes: ``path`` (str), ``field`` (a dotted location such as ``metrics[3].item``),
    ``offset`` (absolute byte offset of the field in the file, -1 when not applicable),
    ``message`` (str) and ``limit`` (the bound that was broken, or None).
    """

    kind = "error"

    def __init__(
        self, path: str, field: str, offset: int, message: str, limit: int | None = None
    ) -> None:
        super().__init__(path, field, offset, message, limit)
        self.path = path
        self.field = field
        self.offset = offset
        self.message = message
        self.limit = limit

    def __str__(self) -> str:
        where = f" at offset {self.offset}" if self.offset >= 0 else ""
        return f"{self.path}: {self.field}{where}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: field, offset, message (and limit when set)."""
        out: dict[str, object] = {
            "field": self.field,
            "offset": self.offset,
            "message": self.message,
        }
        if self.limit is not None:
            out["limit"] = self.limit
        return out


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
