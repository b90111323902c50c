"""Transient failures to open a file.  A file that changes while the agent opens it (the
reader's Changed: a short read) is not ready, not refused: retried with backoff (at once
on an event that names it), logged once if it stays so, and served as soon as it stops
changing; what check and dump say of it: tests/unit/commands/test_verdicts.py.  A file
that could not be opened for want of a descriptor is looked at again once there are
some, though its stat did not change."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pmda_mmv.directory.backoff import RETRY_MAX
from pmda_mmv.directory.filestate import NOT_READY, OK
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout, reader
from pmda_mmv.mmvfile.errors import Changed
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import single

STEP = 0.1  # seconds between two requests
GRACE = 1.0  # seconds a file may stay not ready before it is logged


class Changing:
    """The reader's whole-file read of one file: a short read (Changed) while
    ``changing``, each with other numbers (the file's size moves); counts the opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.changing = True
        self.opens = 0
        real = reader._pread_exact

        def read(path: str, fd: int, length: int, offset: int) -> bytes:
            if length <= layout.HEADER_SIZE:
                return real(path, fd, length, offset)
            self.opens += 1
            if not self.changing:
                return real(path, fd, length, offset)
            got = self.opens % 7 + layout.HEADER_SIZE
            raise Changed(
                path=path,
                field="file",
                offset=offset,
                message=f"short read: {got} of {length} bytes",
            )

        monkeypatch.setattr(reader, "_pread_exact", read)


@pytest.fixture
def changing(monkeypatch: pytest.MonkeyPatch) -> Changing:
    return Changing(monkeypatch)


def scanner_of(path: Path, now: list[float], lines: list[str]) -> Scanner:
    return Scanner(
        str(path),
        Catalogue(log=lines.append),
        log=lines.append,
        info=lines.append,
        not_ready_grace=GRACE,
        clock=lambda: now[0],
    )


@pytest.mark.parametrize("events", [False, True])
def test_a_file_changing_while_opened_is_retried_logged_once_then_served(
    tmp_path: Path, changing: Changing, events: bool
) -> None:
    """A minute of requests (one every STEP s) while the file changes at every open:
    not ready all along, one log line (once it stayed so past the grace), retried with
    backoff, or at every request when every request brings an event naming the file (a
    writer writing); then it stops changing and is served within RETRY_MAX s."""
    single().write(tmp_path / "f")
    now, lines = [1000.0], []
    scanner = scanner_of(tmp_path, now, lines)
    requests = int(60 / STEP)
    for _ in range(requests):
        if events:
            scanner.mark_dirty("f")
        scanner.refresh()
        assert scanner.states["f"].state == NOT_READY
        now[0] += STEP
    assert len(lines) == 1 and "short read" in lines[0], lines
    if events:
        assert changing.opens == requests
    else:  # 0, 0.05, 0.1, 0.2 ... 4 s, then every RETRY_MAX s
        assert 10 <= changing.opens <= 10 + 60 / RETRY_MAX, changing.opens
    changing.changing = False
    for _ in range(int(RETRY_MAX / STEP) + 1):
        scanner.refresh()
        if scanner.states["f"].state == OK:
            break
        now[0] += STEP
    assert scanner.states["f"].state == OK and set(scanner.catalogue.files) == {"f"}
    assert len(lines) == 1
    for mf in scanner.entries.closing:
        mf.close()
    scanner.catalogue.files["f"].mf.close()


def test_a_file_refused_for_want_of_a_descriptor_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent out of descriptors (EMFILE) when it opens a new file: "cannot open: Too
    many open files" is a condition of the agent, not of the file.  Once descriptors are
    free again, a later request serves it, though nothing about the file changed (a
    writer that wrote its file once and maps it does not touch its stat).  Found: it was
    refused, and looked at again only when its stat changed."""
    single().write(tmp_path / "f")
    now, lines = [1000.0], []
    scanner = scanner_of(tmp_path, now, lines)
    real = os.open
    short = [True]

    def open_(path: str, flags: int, *args: int, **kwargs: int | None) -> int:
        if short[0] and path.endswith("/f"):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(reader.os, "open", open_)
    scanner.refresh()
    assert scanner.states["f"].state == NOT_READY
    assert "Too many open files" in str(scanner.states["f"].last_problem)
    short[0] = False
    for _ in range(int(60 / STEP)):  # a minute of requests
        now[0] += STEP
        scanner.refresh()
    assert scanner.states["f"].state == OK
    scanner.catalogue.files["f"].mf.close()
