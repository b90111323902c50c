"""One verdict for one file, whoever judges it: the agent (its Scanner), ``check`` and
``dump`` map what opening a file raised to a state alike (:func:`~.filestate.status_of`),
and show its problem as the same data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check, dump
from pmda_mmv.directory.filestate import NOT_READY, PARTIAL, REFUSED
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout, limits, reader
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import Metric, single


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


def test_check_counts_the_problems_the_reader_left_unlisted(tmp_path: Path) -> None:
    """A file of 40 bad metric names: the reader lists MAX_PROBLEMS of them and one summary
    ("8 more problems not listed").  check --json then bounds that list again: the
    summary it writes must still count the 8 the reader left unlisted, not the reader's
    summary as one problem ("1 more problems not listed")."""
    bad = 40
    b = single()
    b.metrics += [Metric(f"bad name {i}", 100 + i) for i in range(bad)]
    b.write(tmp_path / "f")
    [checked] = check.judge([str(tmp_path / "f")], ServingOptions())
    assert checked["status"] == PARTIAL and checked["served"] == ["mmv.f.v"]
    problems = checked["problems"]
    assert len(problems) == limits.MAX_PROBLEMS + 1
    assert problems[0]["field"].startswith("metrics[")
    more = bad - limits.MAX_PROBLEMS
    assert problems[-1]["message"] == (
        f"{more} more problems not listed (the first {limits.MAX_PROBLEMS} are)"
    )
    assert problems[-1]["count"] == more  # as data: the text's count is not parsed back
    assert check.render_check(checked)[0].endswith(f"partial ({bad} problems)")


def test_a_refusal_for_a_total_limit_names_the_limit_in_check_json(tmp_path: Path) -> None:
    """Problems are data: a file refused past ``--max-total`` or ``--max-names`` carries the
    limit it broke (``limit`` in ``check --json``), as one refused past ``--max-size``
    does."""
    for name, cluster in (("a", 5), ("b", 6)):
        single(cluster).write(tmp_path / name)
    size = (tmp_path / "a").stat().st_size
    over: list[tuple[ServingOptions, int]] = [
        (ServingOptions(max_total=size + 1), size + 1),
        (ServingOptions(max_names=1), 1),
        (ServingOptions(max_size=size - 1), size - 1),  # the reader's own: held already
    ]
    for options, limit in over:
        verdicts = {Path(r["file"]).name: r for r in check.judge([str(tmp_path)], options)}
        refused = verdicts["b"] if options.max_size > size else verdicts["a"]
        assert refused["status"] == REFUSED, refused
        [problem] = refused["problems"]
        assert problem.get("limit") == limit, problem
