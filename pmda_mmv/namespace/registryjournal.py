"""The identity registry's journal (:mod:`~.registry`): ``<registry>.journal``, the
changes since the registry file was last written whole, one JSON line each, appended and
fsynced before a new number is served, so that a save costs what changed, not what is
remembered.

Its first line names the epoch of the registry file it follows (``{"version": 2,
"epoch": "..."}``); a journal of another epoch is stale (the file was written whole after
it) and is not read.  Then one line a change: a record (:func:`~.registryfile.record_line`:
the key is served or departed with these numbers) or ``{"forget": true, "name": ...,
"uid": ...}``.  A line cut short (a power cut while it was written, before its numbers were
served) ends the journal: it is cut off when the registry opens the journal to append.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Final

from pmda_mmv.namespace.atomicfile import write_all, write_atomically
from pmda_mmv.namespace.registryfile import (
    MAX_BYTES,
    VERSION,
    Key,
    Record,
    key_line,
    parse,
    parse_key,
    parse_record,
    parse_tail,
    read,
    read_body,
    record_line,
)

Change = tuple[Key, Record | None]
"""(key, its record, or None when it is forgotten)."""


SUFFIX: Final = ".journal"
WHOLE: Final = 64 << 10
"""A registry of at most this many bytes is written whole at each save (no journal)."""


def journal_path(path: str) -> str:
    return f"{path}{SUFFIX}"


def document(
    order: Iterable[Key], bodies: dict[Key, str], present: Container[Key], epoch: str
) -> bytes:
    """The registry file: a header line (its epoch: which journal follows it), then one
    record a line, in ``order`` (each record's JSON is kept until it changes: 10,000 names
    cost ~30 ms to encode anew)."""
    body = ",\n".join(record_line(bodies[k], k in present) for k in order)
    text = f'{{"version": {VERSION}, "epoch": "{epoch}", "names": [\n{body}\n]}}\n'
    return text.encode("utf-8", "surrogateescape")


def changes_text(changed: Iterable[Key], bodies: dict[Key, str], present: Container[Key]) -> bytes:
    """The journal's lines for the ``changed`` keys: each one's record, or that it is
    forgotten (no longer in ``bodies``)."""
    lines = [record_line(bodies[k], k in present) if k in bodies else key_line(k) for k in changed]
    return "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape")


def header(epoch: str) -> str:
    return json.dumps({"version": VERSION, "epoch": epoch}) + "\n"


def changes(path: str, epoch: str) -> tuple[list[Change], int]:
    """The changes the journal of registry file ``path`` holds for ``epoch`` and the bytes
    of its whole, usable lines (0: none, stale, missing, or not a regular file: the next
    save writes the registry whole and a new journal, never through this one)."""
    try:
        text, big = read(journal_path(path))
    except OSError:
        return [], 0
    if big or not epoch or not text.startswith(header(epoch)):
        return [], 0
    out: list[Change] = []
    size = len(header(epoch).encode())
    for line in _lines(text[len(header(epoch)) :]):
        try:
            item = json.loads(line)
            if item.get("forget") is True:
                out.append((parse_key(item), None))
            else:
                key, record = parse_record(item)
                record.body = read_body(line)
                out.append((key, record))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            break
        size += len(line.encode("utf-8", "surrogateescape")) + 1
    return out, size


def load(path: str, keep: int) -> tuple[list[Change], int, int, str]:
    """The registry file at ``path`` (its newest ``keep`` records) and its journal: every
    record and change in order, the journal's usable bytes, how many records were read of a
    file too large to read whole (0: it was read whole) and the file's epoch; OSError,
    ValueError (and the like) when it cannot be used."""
    text, big = read(path)
    records, epoch = (parse_tail(text, keep), "") if big else parse(text, keep)
    journal, size = changes(path, epoch)
    return [*records, *journal], size, len(records) if big else 0, epoch


def _lines(text: str) -> Iterator[str]:
    """The whole lines of ``text`` (a last line without its newline is cut short)."""
    *whole, _ = text.split("\n")
    yield from whole


class Journal:
    """The open journal of one registry file, appended to by :meth:`append`."""

    def __init__(self, path: str) -> None:
        self.path = journal_path(path)
        self.fd = -1
        self.size = 0

    @property
    def usable(self) -> bool:
        return self.fd >= 0

    def reopen(self, size: int) -> None:
        """Append to the journal there, its ``size`` bytes of usable lines kept (a line cut
        short is cut off); not usable when that failed (the next save writes all)."""
        self.close()
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        with contextlib.suppress(OSError):
            fd = os.open(self.path, flags)
            try:
                os.ftruncate(fd, size)
            except OSError:
                os.close(fd)
                raise
            self.fd, self.size = fd, size

    def start(self, epoch: str) -> None:
        """A new, empty journal for the registry file of ``epoch`` (just written whole);
        OSError when that failed."""
        self.close()
        write_atomically(self.path, header(epoch).encode())
        self.reopen(len(header(epoch).encode()))

    def save(
        self,
        changed: Callable[[], bytes],
        whole: Callable[[str], bytes],
        registry_bytes: int,
        renamed: Callable[[], None],
    ) -> None:
        """The changes since the last save on disk: ``changed()`` appended to the journal,
        or, when it is not usable or :meth:`full` or the registry is small (WHOLE: as cheap
        as an append), ``whole(epoch)`` written as the registry file (atomically;
        ``renamed`` runs once it is in place), a new journal after it when the registry is
        not small (a journal of another epoch is not read); OSError when that failed."""
        if self.usable and registry_bytes > WHOLE and not self.full(registry_bytes):
            self.append(changed())
            return
        epoch = os.urandom(8).hex()
        write_atomically(self.path[: -len(SUFFIX)], whole(epoch), renamed)
        if registry_bytes > WHOLE:
            self.start(epoch)
        elif self.usable:
            self.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # stale

    def append(self, data: bytes) -> None:
        """``data`` (whole lines) appended and on disk; OSError when that failed (the
        journal is then not usable: the next save writes all)."""
        try:
            write_all(self.fd, data)
            os.fsync(self.fd)
        except OSError:
            self.close()
            raise
        self.size += len(data)

    def full(self, registry_bytes: int) -> bool:
        """Whether the registry is better written whole now: the journal holds more than
        the registry (so each byte is written at most about twice) or is past the read limit."""
        return self.size > max(registry_bytes, 1 << 20) or self.size > MAX_BYTES // 2

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1
