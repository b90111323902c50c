"""What a parse produces (:class:`Parsed`) and what it keeps while it runs (:class:`State`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pmda_mmv.mmvfile import limits
from pmda_mmv.mmvfile.errors import Corrupt, unlisted
from pmda_mmv.mmvfile.parse.ranges import Ranges
from pmda_mmv.mmvfile.parsed import Header, Indom, Label, Metric, Toc


@dataclass(slots=True)
class Parsed:
    """The validated contents of one file: ``header``, ``toc`` (every TOC entry),
    ``sections`` (the TOC entries whose sections were accepted), ``indoms`` (serial ->
    :class:`~.entries.Indom`), ``metrics`` (accepted, in file order), ``labels``
    (accepted) and ``label_index`` (PCP label set -> its labels), ``problems`` (skipped
    sections and entries, at most MAX_PROBLEMS then one summary), and the values span
    (``base``, ``span``: the bytes from the first to the last value entry)."""

    header: Header
    toc: list[Toc] = field(default_factory=list)
    sections: list[Toc] = field(default_factory=list)
    indoms: dict[int, Indom] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    label_index: dict[tuple[int, int, int], list[Label]] = field(default_factory=dict)
    problems: list[Corrupt] = field(default_factory=list)
    base: int = 0
    span: int = 0


class State:
    """One parse in progress: the file's bytes, the result being filled in, and what the
    section parsers tell each other (accepted ranges and entries, what was reported)."""

    def __init__(self, path: str, data: bytes, out: Parsed) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.out = out
        self.version = out.header.version
        self.unlisted = 0  # problems past limits.MAX_PROBLEMS, counted, not recorded
        self.sections = Ranges[Toc]()  # accepted sections
        self.claimed = Ranges[int]()  # instance ranges of accepted indoms -> indoms[i]
        self.items: set[int] = set()  # items of the accepted metrics
        self.first: dict[int, tuple[int, str]] = {}  # item -> (entry index, name) of the
        # first accepted metric at it (the one at its own item; later ones spill)
        self.instance_at: dict[int, tuple[Indom, int]] = {}  # entry offset -> (indom, pos)
        self.metric_at: dict[int, Metric] = {}
        self.names: dict[int, set[str]] = {}  # indom entry offset -> external names seen
        self.tried: set[int] = (
            set()
        )  # metric entry offsets whose values were tried as one run (values)
        self.order: dict[int, list[int]] | None = None  # indom serial -> instance entries
        self.good_strings: set[int] = set()  # string entry offsets a string value may use
        # What was skipped and reported once, so that references to it are not reported again
        self.rejected_metrics = False  # a METRICS section
        self.rejected_indoms = False  # an INDOMS section
        self.skipped_metrics: set[int] = set()  # metric entry offsets
        self.skipped_serials: set[int] = set()
        self.skipped_instances: set[int] = set()  # instance entry offsets

    def problem(self, field: str, offset: int, message: str, limit: int | None = None) -> None:
        """Record one skipped section or entry; past :data:`~.limits.MAX_PROBLEMS` only
        count it (:meth:`finish` then adds one summary problem)."""
        if len(self.out.problems) < limits.MAX_PROBLEMS:
            self.out.problems.append(
                Corrupt(path=self.path, field=field, offset=offset, message=message, limit=limit)
            )
        else:
            self.unlisted += 1

    def finish(self) -> Parsed:
        if self.unlisted:
            self.out.problems.append(unlisted(self.path, self.unlisted))
        return self.out
