"""One log-line limiter for the agent: per file and per cause, with a count of what it kept back.

Every line the scanner and the catalogue log starts with the file's path (``path: field at
offset N: message``).  :class:`LogLimit` passes at most ``per_cause`` lines of one cause
(the line with its numbers blanked: ``values[#].metric at offset #: ...``) and at most
``per_file`` lines of one file, and at most ``total`` lines in all, per ``window`` seconds;
the others are counted, and the count is logged as one line once the window has passed.
Each line has a level: ``limit(line)`` goes to ``sink`` (errors: refusals, faults),
``limit.info(line)`` to ``info`` (benign events), both counted against the same limits.  A
file rewritten in a loop, a file of a million bad entries, or ten thousand bad files,
therefore cost a bounded number of log lines per minute: ``total`` lines, per-file counts
included (past it a file's count goes into the total's), plus the total's one count.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pmda_mmv.mmvfile.pcpdefs import Log

WINDOW: Final = 60.0
PER_CAUSE: Final = 5
PER_FILE: Final = 100
TOTAL: Final = 1000

_NUMBER: Final = re.compile(r"\d+")


@dataclass(slots=True)
class _Window:
    start: float
    lines: int = 0
    suppressed: int = 0
    causes: dict[str, int] = field(default_factory=dict)


class LogLimit:
    """A :data:`Log` that forwards to ``sink`` within the limits above."""

    def __init__(
        self,
        sink: Log,
        *,
        info: Log | None = None,
        window: float = WINDOW,
        per_cause: int = PER_CAUSE,
        per_file: int = PER_FILE,
        total: int = TOTAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.info_sink = info or sink
        self.window = window
        self.per_cause = per_cause
        self.per_file = per_file
        self.total = total
        self.clock = clock
        self.files: dict[str, _Window] = {}  # oldest window first (insertion order)
        self.all = _Window(clock())  # every line, whatever the file

    def __call__(self, line: str) -> None:
        """Log ``line`` at error level (a refusal, a fault)."""
        self._pass(line, self.sink)

    def info(self, line: str) -> None:
        """Log ``line`` at info level (a benign event: a writer's exit, a file not ready
        yet, a reassigned number), within the same limits."""
        self._pass(line, self.info_sink)

    def _pass(self, line: str, sink: Log) -> None:
        now = self.clock()
        self._expire(now)
        path, _, rest = line.partition(": ")
        w = self.files.get(path)
        if w is None:
            w = self.files[path] = _Window(now)
        cause = _NUMBER.sub("#", rest)
        seen = w.causes.get(cause, 0)
        w.causes[cause] = seen + 1
        if seen >= self.per_cause or w.lines >= self.per_file:
            w.suppressed += 1
            return
        if self.all.lines >= self.total:
            self.all.suppressed += 1
            return
        w.lines += 1
        self.all.lines += 1
        sink(line)

    def flush(self) -> None:
        """Report every suppressed count now (the agent's exit, tests)."""
        self._expire(float("inf"))
        self.all = _Window(self.clock())

    def _expire(self, now: float) -> None:
        if now - self.all.start >= self.window:
            if self.all.suppressed:
                self.sink(
                    f"{self.all.suppressed} more log lines suppressed (at most {self.total} "
                    f"every {self.window:g} s)"
                )
            self.all = _Window(now)
        while self.files:
            path, w = next(iter(self.files.items()))
            if now - w.start < self.window:
                return
            del self.files[path]
            if not w.suppressed:
                continue
            if self.all.lines >= self.total:  # the total's one line counts them instead
                self.all.suppressed += w.suppressed
                continue
            self.all.lines += 1
            self.sink(
                f"{path}: {w.suppressed} more log lines about this file suppressed "
                f"(at most {self.per_cause} per cause and {self.per_file} per file "
                f"every {self.window:g} s)"
            )
