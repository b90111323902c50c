"""One verdict for one file, whoever judges it: the agent (its Scanner), ``check`` and
``dump`` map what opening a file raised to a state alike (:func:`~.filestate.status_of`),
and show its problem as the same data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check, dump
from pmda_mmv.directory.filestate import NOT_READY
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout, reader
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import single


def test_a_file_changed_while_it_is_opened_is_not_ready_for_the_agent_check_and_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer truncates the file between its stat and the read of its bytes (put back
    after each read): the reader raises Changed ("short read").  The file is not ready
    yet (it is retried), not refused: the agent, check and dump say so alike."""
    path = tmp_path / "f"
    single().write(path)
    data = path.read_bytes()
    real = reader._pread_exact

    def truncated(name: str, fd: int, length: int, offset: int) -> bytes:
        if length <= layout.HEADER_SIZE:
            return real(name, fd, length, offset)
        os.truncate(path, layout.HEADER_SIZE)
        try:
            return real(name, fd, length, offset)
        finally:
            path.write_bytes(data)

    monkeypatch.setattr(reader, "_pread_exact", truncated)
    scanner = Scanner(str(tmp_path), Catalogue(), budget=None)
    scanner.refresh(force=True)
    agent = scanner.states["f"]
    [checked] = check.judge([str(path)], ServingOptions())
    dumped = dump.describe(str(path))
    assert agent.state == checked["status"] == dumped["status"] == NOT_READY
    assert agent.last_problem is not None and agent.last_problem.kind == "changed"
    short = f"short read: {layout.HEADER_SIZE} of {len(data)} bytes"
    assert checked["problems"] == dumped["problems"] == [agent.last_problem.as_dict()]
    assert agent.last_problem.message == short
    for mf in scanner.entries.closing:
        mf.close()
