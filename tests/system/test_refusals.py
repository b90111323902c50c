"""Hardening (issue 6): hostile files, lifecycle races, special files, name clashes and writer
liveness never take the agent down, never stop the good files, and every refusal is explained.

One private pmcd serves one MMV directory for the whole module, with pmda-mmv as its pipe
agent (``--status-metrics``; a second pmcd with ``--owners root`` for the ownership policy).
A real writer (python3-pcp ``pcp.mmv``, libpcp_mmv) keeps the file ``good`` live throughout:
after each test the agent must still be the same process and must serve the good file's
counter at the value just written.  A refused or partly served file must be explained by
exactly one agent log line naming the file, the field and its byte offset, the same text
``mmv.control.file.last_problem`` reports.

Scanner-level cases (each special file kind, symlinks, owners, PROCESS flag details) are in
tests/unit/directory/test_scanner.py; reader rules one by one in
tests/unit/mmvfile/test_reader*.py.  Here they run under pmcd, through pminfo and pmprobe.  A
bug found here stays as an ``xfail(strict=True)`` test
until it is fixed, then as a plain regression test; inputs are built here or kept in
tests/data/hardening/.
"""

from __future__ import annotations

import mmap
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.target import check_bytes, check_file
from pmda_mmv.directory.filestate import NOT_READY_GRACE
from pmda_mmv.mmvfile import layout
from tests.support import mmvbuild
from tests.support.mmvbuild import Indom, Instance, Label, Metric, MmvBuilder, Value, sample
from tests.support.mmvbuild import single as one
from tests.support.pmcd import PrivatePmcd, kept_dir, make_dir, our_agent, require_pcp

pytestmark = pytest.mark.pmcd

GOOD = "mmv.good.py.counter"
DATA = Path(__file__).parents[1] / "data"
MOVED = "header.cluster at offset 36: asked for cluster"
UNKNOWN_NAME = "-12357"  # PM_ERR_NAME, as pmprobe prints it
EMPTY = "file.size at offset 0: size 0, not written yet"


# -- the served directory --------------------------------------------------------------------


@dataclass
class Agent:
    """One private pmcd with pmda-mmv serving ``dir``; ``good`` is the live pcp.mmv file."""

    pmcd: PrivatePmcd
    dir: Path
    pid: int
    good: mmvbuild.Written | None = None
    counter: int = 41

    def probe(self, *metrics: str) -> dict[str, str]:
        """``pmprobe -v``: {metric: "count values..." or "error-code message"}."""
        out = self.pmcd.run("pmprobe", "-v", *metrics)
        result = {}
        for line in out.stdout.splitlines():
            name, _, rest = line.partition(" ")
            result[name] = rest
        return result

    def bump(self) -> int:
        """Write the next counter value into the good file (the writer's own mapping)."""
        assert self.good is not None
        self.counter += 1
        self.good.handle.lookup_set("py.counter", "", self.counter)
        return self.counter

    def assert_alive(self) -> None:
        """Same agent process, and it serves the good file's latest value."""
        value = self.bump()
        assert self.probe(GOOD)[GOOD] == f"1 {value}"
        assert agent_pids(self.pmcd) == [self.pid]

    def log_lines(self, path: Path, identity: bool = False) -> list[str]:
        """Agent log lines naming ``path`` (the text after ``Error: `` or ``Info: ``); the
        info lines saying a file is not served under the cluster it asked for only when
        ``identity`` (this module's files come and go under one agent: a departed file
        keeps its cluster, so a later file asking for it is told it moved)."""
        lines = self.pmcd.agent_log().splitlines()
        found = [
            re.split(r" (?:Error|Info): ", ln, maxsplit=1)[-1] for ln in lines if f"{path}:" in ln
        ]
        return [ln for ln in found if identity or f"{path}: {MOVED}" not in ln]

    def status(self, name: str) -> tuple[str, str]:
        """(mmv.control.file.state, mmv.control.file.last_problem) of directory entry name."""
        state = self.pmcd.fetch("mmv.control.file.state")[name]
        last = self.pmcd.fetch("mmv.control.file.last_problem")[name]
        return state.strip('"'), last[1:-1]

    def assert_explained(self, path: Path, state: str, *wanted: str) -> str:
        """Exactly one log line names ``path``; it holds every ``wanted`` text (field and
        offset) and is what last_problem reports; the entry is in ``state``."""
        lines = self.log_lines(path)
        assert len(lines) == 1, lines
        for text in wanted:
            assert text in lines[0], lines[0]
        assert self.status(path.name) == (state, lines[0])
        return lines[0]


def agent_pids(pmcd: PrivatePmcd) -> list[int]:
    """PIDs of pmda-mmv processes under ``pmcd`` (pmcd may have other short-lived children)."""
    pids = []
    for pid in pmcd.agent_processes():
        try:
            if "pmda_mmv" in psutil.Process(pid).cmdline():
                pids.append(pid)
        except psutil.Error:
            continue
    return pids


def start_agent(base: Path, *args: str) -> Agent:
    require_pcp()
    mmv_dir = make_dir(base / "tmp" / "mmv")
    pmcd = PrivatePmcd(base / "pmcd", [our_agent(mmv_dir, "--status-metrics", *args)])
    pmcd.start()
    pids = agent_pids(pmcd)
    if len(pids) != 1:
        pmcd.stop()
        raise AssertionError(f"expected one pmda-mmv process under pmcd, found {pids}")
    return Agent(pmcd, mmv_dir, pids[0])


@pytest.fixture(scope="module")
def base(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A module directory under /tmp (the agent runs as pcp); kept on failure."""
    yield from kept_dir(request, "pmda-mmv-hardening-", "hardening work directory")


@pytest.fixture(scope="module")
def agent(base: Path) -> Iterator[Agent]:
    a = start_agent(base / "main")
    a.good = mmvbuild.write_pcp_mmv(a.dir / "good")
    try:
        a.assert_alive()
        yield a
    finally:
        a.pmcd.stop()
        if a.good is not None:
            a.good.handle.stop()


@dataclass
class Scratch:
    """Entries one test puts into the served directory; removed at teardown."""

    agent: Agent
    names: list[str] = field(default_factory=list)

    def path(self, name: str) -> Path:
        self.names.append(name)
        return self.agent.dir / name

    def put(self, name: str, content: MmvBuilder | bytes) -> Path:
        path = self.path(name)
        if isinstance(content, MmvBuilder):
            content.write(path)
        else:
            path.write_bytes(content)
        return path

    def cleanup(self) -> None:
        for name in self.names:
            path = self.agent.dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()


@pytest.fixture
def scratch(agent: Agent) -> Iterator[Scratch]:
    s = Scratch(agent)
    yield s
    s.cleanup()
    agent.assert_alive()  # also lets the agent forget the removed entries


# -- corrupt and hostile files ---------------------------------------------------------------


def image(b: MmvBuilder, *patches: tuple[str, int, str, object]) -> mmvbuild.Image:
    img = b.build()
    for section, index, name, value in patches:
        img.patch(section, index, name, value)
    return img


def big_endian() -> tuple[bytes, str]:
    """sample(1) with its header written big-endian, as a big-endian writer would."""
    data = bytearray(sample(1).build().data)
    fields = list(layout.HEADER.unpack_from(data))
    struct.pack_into(">" + layout.HEADER.format[1:], data, 0, *fields)
    return bytes(data), "header.version at offset 4"


def corrupt_cases() -> dict[str, tuple[Callable[[], tuple[bytes, str]], str]]:
    """name -> (maker of (bytes, "field at offset N"), expected state)."""

    def header(name: str, value: object, where: str) -> Callable[[], tuple[bytes, str]]:
        def make() -> tuple[bytes, str]:
            b = sample(1)
            b.header[name] = value
            return bytes(b.build().data), where

        return make

    def patched(
        version: int, section: str, index: int, name: str, value: object, report: str = ""
    ) -> Callable[[], tuple[bytes, str]]:
        """Patch one field; the problem is reported at field ``report`` (default: name)."""

        def make() -> tuple[bytes, str]:
            img = image(sample(version))
            if section == "toc":
                index_ = img.toc_index[index]
                img.patch("toc", index_, name, value)
                where = f"toc[{index_}].{report or name}"
                return bytes(img.data), f"{where} at offset {img.at('toc', index_, report or name)}"
            img.patch(section, index, name, value)
            at = img.at(section, index, report or name)
            return bytes(img.data), f"{section}[{index}].{report or name} at offset {at}"

        return make

    def overlapping() -> tuple[bytes, str]:
        img = image(sample(2))
        k = img.toc_index[layout.TOC_VALUES]
        img.patch("toc", k, "offset", img.get("toc", img.toc_index[layout.TOC_METRICS], "offset"))
        return bytes(img.data), f"toc[{k}].offset at offset {img.at('toc', k, 'offset')}"

    def label_not_json() -> tuple[bytes, str]:
        img = image(sample(3))
        img.patch("labels", 1, "payload", mmvbuild.cbytes("{dom: 1}", layout.LABEL_PAYLOAD_SIZE))
        return bytes(img.data), f"labels[1].payload at offset {img.at('labels', 1, 'payload')}"

    def label_unterminated() -> tuple[bytes, str]:
        img = image(sample(3))
        img.patch("labels", 2, "payload", b"{" + b"x" * (layout.LABEL_PAYLOAD_SIZE - 1))
        return bytes(img.data), f"labels[2].payload at offset {img.at('labels', 2, 'payload')}"

    return {
        "hdr_magic": (header("magic", b"MMV\1", "header.magic at offset 0"), "refused"),
        "hdr_version": (header("version", 9, "header.version at offset 4"), "refused"),
        "hdr_tocs_minus1": (header("tocs", -1, "header.tocs at offset 24"), "refused"),
        "hdr_tocs_past_end": (header("tocs", 100000, "header.tocs at offset 24"), "refused"),
        "hdr_cluster": (header("cluster", 4096, "header.cluster at offset 36"), "refused"),
        "big_endian": (big_endian, "refused"),
        "toc_values_past_end": (
            patched(2, "toc", layout.TOC_VALUES, "offset", 1 << 40),
            "partial",
        ),
        "toc_values_count_minus1": (
            patched(1, "toc", layout.TOC_VALUES, "count", 0xFFFFFFFF, report="offset"),
            "partial",
        ),
        "toc_bad_type": (patched(2, "toc", layout.TOC_STRINGS, "type", 77), "partial"),
        "overlapping_sections": (overlapping, "partial"),
        "entry_unknown_type": (patched(1, "metrics", 2, "type", 8), "partial"),
        "entry_v1_name_unterminated": (patched(1, "metrics", 0, "name", b"n" * 64), "partial"),
        "entry_unknown_semantics": (patched(2, "metrics", 3, "semantics", 9), "partial"),
        "entry_string_offset_past_end": (patched(3, "values", 24, "extra", 1 << 62), "partial"),
        "label_not_json": (label_not_json, "partial"),
        "label_unterminated": (label_unterminated, "partial"),
        # an item past 1023 and a duplicate item are not corrupt any more: those metrics
        # are served under a spill cluster of their file (tests/system/test_spill.py)
    }


CORRUPT = corrupt_cases()


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_file_is_explained_once_and_good_files_stay(
    agent: Agent, scratch: Scratch, name: str
) -> None:
    make, state = CORRUPT[name]
    data, where = make()
    path = scratch.put(name, data)
    agent.assert_alive()
    agent.assert_explained(path, state, where)
    agent.assert_alive()  # a second request: still one line, still the same agent


def test_hostile_file_name_in_the_log_is_text_not_a_format(agent: Agent, scratch: Scratch) -> None:
    path = scratch.put("fmt%s%s%s%s%n%n%x", b"MMV\0" + b"%n" * 30)
    agent.assert_alive()
    agent.assert_explained(path, "refused", "header.version at offset 4")


def test_partial_file_serves_what_is_valid(agent: Agent, scratch: Scratch) -> None:
    img = image(sample(2), ("metrics", 0, "type", 99))  # an unknown type: not servable
    scratch.put("partly", bytes(img.data))
    agent.assert_alive()
    got = agent.probe("mmv.partly.s.t32", "mmv.partly.m.t32", "mmv.partly.s.tu32")
    assert got["mmv.partly.s.t32"].startswith(UNKNOWN_NAME)  # the refused entry
    assert got["mmv.partly.m.t32"] == "3 -42 -42 -42"
    assert got["mmv.partly.s.tu32"] == "1 4000000000"


# -- findings of this suite (fixed since; kept as regression tests) --------------------------


def elapsed_overflow() -> MmvBuilder:
    """A running ELAPSED timer whose value plus the elapsed time exceeds int64."""
    b = MmvBuilder(cluster=5)
    b.metrics += [Metric("e", 1, layout.TYPE_ELAPSED), Metric("after", 2, layout.TYPE_U32)]
    b.values += [Value("e", None, (1 << 63) - 1, extra=-1), Value("after", None, 7)]
    return b


def test_elapsed_overflow_does_not_fail_other_files(agent: Agent, scratch: Scratch) -> None:
    scratch.put("elapsed", elapsed_overflow())
    agent.assert_alive()
    value = agent.bump()
    got = agent.probe("mmv.elapsed.e", GOOD, "mmv.elapsed.after")
    assert got[GOOD] == f"1 {value}"
    assert got["mmv.elapsed.after"] == "1 7"
    agent.assert_alive()


LABELS_PCP_REJECTS = {"space": '{"bad key":1}', "digit": '{"9lives":1}', "nan": '{"a":NaN}'}


@pytest.mark.parametrize("case", sorted(LABELS_PCP_REJECTS))
def test_label_pcp_rejects_is_explained(agent: Agent, scratch: Scratch, case: str) -> None:
    b = one(cluster=30, version=3)
    payload = LABELS_PCP_REJECTS[case]
    b.labels += [Label(layout.LABEL_ITEM, 1, '{"ok":1}'), Label(layout.LABEL_ITEM, 1, payload)]
    path = scratch.put(f"badlabel_{case}", b)
    agent.assert_alive()
    at = b.build().at("labels", 1, "payload")
    agent.assert_explained(path, "partial", f"labels[1].payload at offset {at}")
    labels = agent.pmcd.run("pminfo", "-l", f"mmv.{path.name}.v").stdout
    assert '"ok":1' in labels


CASCADES = {  # name: (section, index, field, value, state: refused when no metric is left)
    "metrics_count_minus1": ("toc", layout.TOC_METRICS, "count", 0xFFFFFFFF, "refused"),
    "metrics_past_end": ("toc", layout.TOC_METRICS, "offset", 1 << 40, "refused"),
    "indoms_count_minus1": ("toc", layout.TOC_INDOMS, "count", 0xFFFFFFFF, "partial"),
    "instance_bad_backref": ("instances", 1, "indom", 8, "partial"),
    "instance_duplicate_id": ("instances", 1, "internal", 0, "partial"),
}


@pytest.mark.parametrize("name", list(CASCADES))
def test_one_defect_is_one_log_line(agent: Agent, scratch: Scratch, name: str) -> None:
    section, index, fname, value, state = CASCADES[name]
    img = image(sample(2))
    if section == "toc":
        index = img.toc_index[index]
    img.patch(section, index, fname, value)
    path = scratch.put(name, bytes(img.data))
    agent.assert_alive()
    agent.assert_explained(path, state, f"{section}[{index}].")


def strings_file() -> mmvbuild.Image:
    b = MmvBuilder(cluster=31, version=2)
    b.metrics += [Metric("text", 1, layout.TYPE_STRING), Metric("n", 2)]
    b.values += [Value("text", None, "hello"), Value("n", None, 4)]
    return b.build()


@pytest.mark.parametrize(
    "extra",
    [1 << 40, -1, 0, 8, "unterminated"],
    ids=["past_end", "minus1", "zero", "header", "no_nul"],
)
def test_live_string_offset_tampering(agent: Agent, scratch: Scratch, extra: int | str) -> None:
    """A writer may change values in place without a new generation; a string value whose
    offset now points outside the file, into the header, or at text without a NUL gives an
    error for that value only, never bytes from outside the string entries."""
    img = strings_file()
    path = scratch.put(f"tamper_{extra}".replace("-", "m"), bytes(img.data))
    metric = f"mmv.{path.name}.text"
    assert agent.probe(metric)[metric] == '1 "hello"'
    with open(path, "r+b") as f:
        if extra == "unterminated":
            f.seek(img.get("values", 0, "extra"))
            f.write(b"x" * layout.STRING_SIZE)
        else:
            f.seek(img.at("values", 0, "extra"))
            f.write(struct.pack("=q", extra))
    got = agent.probe(metric, f"mmv.{path.name}.n", GOOD)
    assert not got[metric].startswith("1 "), got
    assert got[f"mmv.{path.name}.n"] == "1 4"
    agent.assert_alive()


# -- lifecycle races while a client fetches in a loop ----------------------------------------


class Fetcher(threading.Thread):
    """Runs ``pmprobe -v GOOD metrics...`` back to back until stopped."""

    def __init__(self, agent: Agent, *metrics: str) -> None:
        super().__init__(daemon=True)
        self.agent = agent
        self.metrics = metrics
        self.results: list[dict[str, str]] = []
        self.done = threading.Event()
        self.progress = threading.Semaphore(0)

    def run(self) -> None:
        while not self.done.is_set():
            self.results.append(self.agent.probe(GOOD, *self.metrics))
            self.progress.release()

    def wait_fetches(self, n: int) -> None:
        for _ in range(n):
            assert self.progress.acquire(timeout=30), "the client made no progress"

    def stop(self) -> list[dict[str, str]]:
        self.done.set()
        self.join(30)
        return self.results


def assert_good_throughout(agent: Agent, results: list[dict[str, str]]) -> None:
    """Every fetch of the loop got the good counter (its value is written only by the test,
    between loops, so any single value is right)."""
    assert results
    for got in results:
        count, _, value = got.get(GOOD, "").partition(" ")
        assert count == "1" and value.isdigit(), got


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite ``path`` in place (same inode), shrinking or growing it to ``data``."""
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))


def recreate(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def truncate_then_restore(path: Path, data: bytes) -> None:
    os.truncate(path, 0)
    os.truncate(path, len(data) // 2)
    rewrite_in_place(path, data)


def grow_then_shrink(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(bytes(1 << 16))
    rewrite_in_place(path, data)


RACES: dict[str, Callable[[Path, bytes], None]] = {
    "truncated": truncate_then_restore,
    "grown": grow_then_shrink,
    "rewritten_in_place": rewrite_in_place,
    "renamed_over": mmvbuild.publish,
    "unlinked_recreated": recreate,
}


@pytest.mark.parametrize("race", sorted(RACES))
def test_lifecycle_race_under_a_fetch_loop(agent: Agent, scratch: Scratch, race: str) -> None:
    path = scratch.path(race)
    one(cluster=20, value=0, generation=1 << 40).write(path)
    metric = f"mmv.{race}.v"
    assert agent.probe(metric)[metric] == "1 0"
    fetcher = Fetcher(agent, metric)
    fetcher.start()
    try:
        for i in range(1, 41):
            RACES[race](
                path, bytes(one(cluster=20, value=i, generation=(1 << 40) + i).build().data)
            )
            if i % 8 == 0:
                fetcher.wait_fetches(2)
    finally:
        results = fetcher.stop()
    assert_good_throughout(agent, results)
    for got in results:  # the victim: its value, an error, or momentarily no such name
        assert got.get(metric), got
    agent.assert_alive()
    assert agent.probe(metric)[metric] == "1 40"
    assert agent.status(race)[0] == "ok"


def test_directory_removed_and_recreated(agent: Agent) -> None:
    assert agent.good is not None
    agent.good.handle.stop()
    shutil.rmtree(agent.dir)
    assert agent.probe(GOOD)[GOOD].startswith(UNKNOWN_NAME)
    assert agent.pmcd.fetch("mmv.control.files") == {None: "0"}
    make_dir(agent.dir)
    agent.good = mmvbuild.write_pcp_mmv(agent.dir / "good")
    agent.counter = 41
    agent.assert_alive()
    assert agent.pmcd.fetch("mmv.control.files") == {None: "1"}


@pytest.mark.parametrize("g1,g2", [(0, 0), (5, 6)], ids=["generation0", "g1_ne_g2"])
def test_writer_that_never_completes(agent: Agent, scratch: Scratch, g1: int, g2: int) -> None:
    b = one(cluster=21, value=3)
    b.header.update(g1=g1, g2=g2)
    name = f"unfinished{g1}"
    metric = f"mmv.{name}.v"
    path = scratch.put(name, b)
    for _ in range(10):  # every request retries the file; the good values keep moving
        value = agent.bump()
        got = agent.probe(GOOD, metric)
        assert got[GOOD] == f"1 {value}"
        assert got[metric].startswith(UNKNOWN_NAME)
    where = "header.g1 at offset 8" if g1 == 0 else "header.g2 at offset 16"
    explained_after_grace(agent, path, where)
    img = b.build()
    img.patch("header", 0, "g1", 7).patch("header", 0, "g2", 7)
    rewrite_in_place(path, bytes(img.data))  # the writer finishes: served at the next request
    assert agent.probe(metric)[metric] == "1 3"


def explained_after_grace(agent: Agent, path: Path, where: str) -> None:
    """A file that stays not ready is logged once, at the first request after
    NOT_READY_GRACE (writers pass through the state, so it is not logged at once)."""
    time.sleep(NOT_READY_GRACE)
    agent.probe(f"mmv.{path.name}")
    agent.assert_explained(path, "not-ready", where)


def test_empty_file_is_not_ready_and_explained_when_it_stays_so(
    agent: Agent, scratch: Scratch
) -> None:
    path = scratch.path("zero_bytes")
    zero_bytes(path)
    agent.assert_alive()
    assert agent.status("zero_bytes") == ("not-ready", f"{path}: {EMPTY}")
    assert agent.log_lines(path) == []  # not yet: libpcp_mmv creates, then sizes its files
    explained_after_grace(agent, path, EMPTY)
    one(cluster=23, value=4).write(path)  # the writer sizes and fills it
    assert agent.probe("mmv.zero_bytes.v")["mmv.zero_bytes.v"] == "1 4"


def test_file_seen_before_its_header_is_served_once_written(agent: Agent, scratch: Scratch) -> None:
    data = bytes(one(cluster=29, value=8).build().data)
    path = scratch.path("late")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # as mmv_mapping_init
    os.ftruncate(fd, len(data))
    mapping = mmap.mmap(fd, len(data))
    os.close(fd)
    with mapping:
        for _ in range(3):  # until every event (the agent's own open included) is consumed
            time.sleep(1)
            assert agent.probe("mmv.late.v")["mmv.late.v"].startswith(UNKNOWN_NAME)
        mapping[:] = data  # mmv_init fills the file through the mapping
        time.sleep(1)  # (the writer keeps its mapping: unmapping would signal IN_CLOSE_WRITE)
        assert agent.probe("mmv.late.v")["mmv.late.v"] == "1 8"


class Rewriter(threading.Thread):
    """Rewrites a file in place with a new generation and value, back to back."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.done = threading.Event()
        self.last = 0

    def run(self) -> None:
        while not self.done.is_set():
            self.last += 1
            data = bytes(
                one(cluster=34, value=self.last, generation=(1 << 40) + self.last).build().data
            )
            rewrite_in_place(self.path, data)

    def stop(self) -> int:
        self.done.set()
        self.join(30)
        return self.last


def test_busy_writer_while_the_agent_starts(base: Path) -> None:
    mmv_dir = make_dir(base / "busy" / "tmp" / "mmv")
    path = mmv_dir / "busy"
    one(cluster=34, value=0).write(path)
    for n in range(40):  # a scan long enough for the busy file to move on before its check
        one(cluster=40 + n, value=n).write(mmv_dir / f"quiet{n:02d}")
    rewriter = Rewriter(path)
    rewriter.start()
    pmcd = PrivatePmcd(base / "busy" / "pmcd", [our_agent(mmv_dir, "--status-metrics")])
    try:
        pmcd.start()
        pid = agent_pids(pmcd)
        for _ in range(30):  # each request 0.1 s apart also checks every served file
            pmcd.run("pmprobe", "-v", "mmv.busy.v")
            time.sleep(0.1)
        last = rewriter.stop()
        assert "Traceback" not in pmcd.agent_log() and "KeyError" not in pmcd.agent_log()
        assert pmcd.run("pmprobe", "-v", "mmv.busy.v").stdout.split()[1:] == ["1", str(last)]
        assert agent_pids(pmcd) == pid
    finally:
        rewriter.stop()
        pmcd.stop()


# -- special files and permissions -----------------------------------------------------------


def fifo(path: Path) -> object:
    os.mkfifo(path)
    return None


def unix_socket(path: Path) -> object:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def char_device(path: Path) -> object:
    os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    return None


def subdirectory(path: Path) -> object:
    path.mkdir()
    one(cluster=22).write(path / "inner")
    return None


def symlink_out(path: Path) -> object:
    outside = path.parent.parent / "outside"
    one(cluster=22).write(outside)
    path.symlink_to(outside)
    return None


def symlink_to_etc(path: Path) -> object:
    path.symlink_to("/etc/passwd")
    return None


def symlink_to_itself(path: Path) -> object:
    path.symlink_to(path.name)
    return None


def symlink_chain_out(path: Path) -> object:
    hop = path.with_name(f".{path.name}.hop")  # a dot-file: never served itself
    hop.symlink_to("/etc/passwd")
    path.symlink_to(hop.name)
    return hop


def sparse_1tb(path: Path) -> object:
    one(cluster=22).write(path)
    os.truncate(path, 1 << 40)
    return None


def zero_bytes(path: Path) -> object:
    path.write_bytes(b"")
    return None


def unreadable(path: Path) -> object:
    one(cluster=22).write(path)
    path.chmod(0)
    return None


SPECIAL: dict[str, tuple[Callable[[Path], object], str]] = {
    "fifo": (fifo, "not a regular file (FIFO)"),
    "socket": (unix_socket, "not a regular file (socket)"),
    "chardev": (char_device, "not a regular file (character device)"),
    "subdir": (subdirectory, "not a regular file (directory)"),
    "link_out": (symlink_out, "symlink out of the directory, not followed"),
    "link_etc": (symlink_to_etc, "symlink out of the directory, not followed"),
    "link_self": (symlink_to_itself, "not a regular file (symlink)"),
    "link_chain_out": (symlink_chain_out, "symlink out of the directory, not followed"),
    "sparse_1tb": (sparse_1tb, "file.size at offset 0: size 1099511627776 exceeds"),
    "unreadable": (unreadable, "cannot open: Permission denied"),
}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_entry_refused_without_blocking(agent: Agent, scratch: Scratch, kind: str) -> None:
    make, reason = SPECIAL[kind]
    path = scratch.path(kind)
    keep = make(path)
    try:
        agent.assert_alive()
        agent.assert_explained(path, "refused", reason)
        assert agent.probe(f"mmv.{kind}")[f"mmv.{kind}"].startswith(UNKNOWN_NAME)
        agent.assert_alive()
    finally:
        if isinstance(keep, socket.socket):
            keep.close()
        elif isinstance(keep, Path):
            keep.unlink()


def test_agent_runs_as_pcp_so_mode_000_is_unreadable(agent: Agent) -> None:
    assert psutil.Process(agent.pid).username() == "pcp"


@pytest.fixture(scope="module")
def owners_agent(base: Path) -> Iterator[Agent]:
    """A second pmcd whose agent trusts only files owned by root."""
    a = start_agent(base / "owners", "--owners", "root")
    try:
        yield a
    finally:
        a.pmcd.stop()


def test_owner_policy_under_pmcd(owners_agent: Agent) -> None:
    a = owners_agent
    nobody = pwd.getpwnam("nobody").pw_uid
    one(cluster=23, value=5).write(a.dir / "mine")
    one(cluster=24, value=6).write(a.dir / "theirs")
    os.chown(a.dir / "theirs", nobody, nobody)
    (a.dir / "alias").symlink_to("theirs")  # root's link to the other user's file
    got = a.probe("mmv.mine.v", "mmv.theirs.v", "mmv.alias.v")
    assert got["mmv.mine.v"] == "1 5"
    assert got["mmv.theirs.v"].startswith(UNKNOWN_NAME)
    assert got["mmv.alias.v"].startswith(UNKNOWN_NAME)
    for name in ("theirs", "alias"):
        a.assert_explained(a.dir / name, "refused", f"owner uid {nobody} is not trusted")
    assert agent_pids(a.pmcd) == [a.pid]


# -- names and identity ----------------------------------------------------------------------


def noprefix(cluster: int, *names: str, value: int = 999) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, flags=layout.FLAG_NOPREFIX)
    for item, name in enumerate(names, 1):
        b.metrics.append(Metric(name, item))
        b.values.append(Value(name, None, value))
    return b


def pmid(agent: Agent, metric: str) -> str:
    out = agent.pmcd.run("pminfo", "-m", metric).stdout.split()
    assert len(out) == 3 and out[1] == "PMID:", out
    return out[2]


SHADOWS = {
    "shadow_leaf": ("good.py.counter", "mmv.good.py.counter is already served"),
    "shadow_nonleaf": ("good", "mmv.good is a non-leaf of names already served"),
    "shadow_below_leaf": ("good.py.counter.sub", "mmv.good.py.counter is already a leaf"),
    "shadow_control": ("control.reload", "mmv.control.reload is reserved for the agent"),
    "shadow_control_new": ("control.new", "mmv.control.new is reserved for the agent"),
}


@pytest.mark.parametrize("name", sorted(SHADOWS))
def test_noprefix_cannot_shadow(agent: Agent, scratch: Scratch, name: str) -> None:
    target, reason = SHADOWS[name]
    before = pmid(agent, GOOD), pmid(agent, "mmv.control.reload")
    b = noprefix(25, target)
    path = scratch.put(name, b)
    agent.assert_alive()
    where = f"metrics at offset {b.build().at('metrics', 0)}: {reason}"
    assert all(where in line for line in agent.log_lines(path))
    # none of it served: refused (issue 13), the lost name the reason
    assert agent.status(name) == ("refused", f"{path}: {where}, metric not served")
    assert (pmid(agent, GOOD), pmid(agent, "mmv.control.reload")) == before
    assert agent.probe("mmv.control.reload")["mmv.control.reload"] == "1 0"
    assert agent.pmcd.fetch("mmv.control.file.metrics")[name] == "0"


@pytest.mark.parametrize("name", ["dup_shadow", "bad-name"])
def test_catalogue_refusal_is_one_log_line(agent: Agent, scratch: Scratch, name: str) -> None:
    b = noprefix(25, "good.py.counter") if name == "dup_shadow" else one(cluster=25)
    path = scratch.put(name, b)
    agent.assert_alive()
    agent.assert_explained(path, "refused", "already served" if name == "dup_shadow" else "'-'")


def test_noprefix_file_serves_its_own_names(agent: Agent, scratch: Scratch) -> None:
    scratch.put("np", noprefix(26, "np_own.a", value=12))
    agent.assert_alive()
    assert agent.probe("mmv.np_own.a")["mmv.np_own.a"] == "1 12"


def test_same_cluster_twice_distinct_pmids(agent: Agent, scratch: Scratch) -> None:
    # (a cluster no other file of this module's agent held: docs/identity.md)
    scratch.put("twin_a", one(cluster=1503, value=1))
    scratch.put("twin_b", one(cluster=1503, value=2))
    got = agent.probe("mmv.twin_a.v", "mmv.twin_b.v")
    assert got == {"mmv.twin_a.v": "1 1", "mmv.twin_b.v": "1 2"}
    assert pmid(agent, "mmv.twin_a.v") == "70.1503.1"  # first in name order keeps it
    assert pmid(agent, "mmv.twin_b.v") != "70.1503.1"
    # a warning, not a problem: one log line, the file is served in full
    lines = agent.log_lines(agent.dir / "twin_b", identity=True)
    assert (
        len(lines) == 1
        and "header.cluster at offset 36: asked for cluster 1503, served to twin_a" in lines[0]
    )
    log = agent.pmcd.agent_log()
    assert re.search(r"\) Info: .*/twin_b: header.cluster .*: asked for cluster 1503", log)
    cluster = lines[0].rsplit(" ", 1)[1]
    assert pmid(agent, "mmv.twin_b.v") == f"70.{cluster}.1"
    assert agent.pmcd.fetch("mmv.control.file.cluster")["twin_b"] == cluster
    assert agent.status("twin_b") == ("ok", "")


def test_many_files_with_cluster_zero(agent: Agent, scratch: Scratch) -> None:
    names = [f"zero{n:02d}" for n in range(24)]
    for n, name in enumerate(names):
        scratch.put(name, one(cluster=0, value=n))
    metrics = [f"mmv.{name}.v" for name in names]
    got = agent.probe(*metrics)
    assert [got[m] for m in metrics] == [f"1 {n}" for n in range(len(names))]
    pmids = {pmid(agent, m) for m in metrics}
    assert len(pmids) == len(names) and "70.42.1" not in pmids  # 42 is the good file's
    agent.assert_alive()


def with_indom(cluster: int, serial: int, prefix: str, count: int) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, version=2)
    b.indoms.append(Indom(serial, [Instance(i, f"{prefix}{i}") for i in range(count)]))
    b.metrics.append(Metric("m", 1, indom=serial))
    b.values += [Value("m", i, 100 * cluster + i) for i in range(count)]
    return b


def test_serials_that_alias_in_the_c_agent_are_distinct_indoms(
    agent: Agent, scratch: Scratch
) -> None:
    # the C agent packs (cluster << 11) | serial: (1500, 2049) and (1501, 1) are both
    # 3074049 (clusters no other file of this module's agent held: a departed file keeps
    # its numbers, docs/identity.md)
    scratch.put("alias_a", with_indom(1500, 2049, "a", 2))
    scratch.put("alias_b", with_indom(1501, 1, "b", 3))
    desc = {m: agent.pmcd.run("pminfo", "-d", m).stdout for m in ("mmv.alias_a.m", "mmv.alias_b.m")}
    indoms = {m: out.split("InDom: ")[1].split()[0] for m, out in desc.items()}
    assert indoms["mmv.alias_a.m"] != indoms["mmv.alias_b.m"], desc
    assert indoms["mmv.alias_b.m"] == f"70.{(1501 << 11) | 1}"
    names = agent.pmcd.run("pmprobe", "-I", "mmv.alias_a.m", "mmv.alias_b.m").stdout
    assert names.split("\n")[:2] == [
        'mmv.alias_a.m 2 "a0" "a1"',
        'mmv.alias_b.m 3 "b0" "b1" "b2"',
    ]
    got = agent.probe("mmv.alias_a.m", "mmv.alias_b.m")
    assert got == {"mmv.alias_a.m": "2 150000 150001", "mmv.alias_b.m": "3 150100 150101 150102"}


def test_non_utf8_file_name_does_not_stop_the_scan(agent: Agent, scratch: Scratch) -> None:
    bad = os.fsdecode(b"nonutf\xff")  # what os.listdir returns for it
    scratch.put(bad, one(cluster=32, value=1))
    scratch.put("later", one(cluster=33, value=2))  # sorts after it
    assert agent.probe("mmv.later.v")["mmv.later.v"] == "1 2"
    lines = [ln for ln in agent.pmcd.agent_log().splitlines() if f"{agent.dir}/nonutf" in ln]
    assert len(lines) == 1 and "not a valid metric name component" in lines[0], lines
    agent.assert_alive()


def test_file_name_cannot_forge_log_lines(agent: Agent, scratch: Scratch) -> None:
    forged = "x\n[Mon Jan  1 00:00:00] pmdammv(1) Error: good: forged"
    scratch.put(forged, b"junk" * 20)
    agent.assert_alive()
    log = agent.pmcd.agent_log().splitlines()
    assert not [ln for ln in log if ln.startswith("[Mon Jan  1 00:00:00]")], log[-3:]
    assert len([ln for ln in log if f"{agent.dir}/x" in ln]) == 1


# -- process liveness ------------------------------------------------------------------------


def started_long_ago() -> int:
    """A libpcp_mmv-style generation: creation time (seconds << 32) one hour before this test
    process started, so that this (live) process looks like a reused PID."""
    return int(psutil.Process().create_time() - 3600) << 32


REUSED = "PID {} belongs to a process started after this file: PID reused"
NOT_FOUND = "writer PID {} not found in this PID namespace or any other"


@pytest.mark.parametrize(
    "case,served",
    [
        ("dead", NOT_FOUND),
        ("reused", REUSED),
        ("reused_seconds", REUSED),
        ("seconds", ""),
        ("negative", "writer PID {} is not a process ID"),
        ("zero", ""),
        # init (host PID 1) is alive but no writer of this file: not taken for it (issue 25)
        ("one", NOT_FOUND + ": PID 1 here is init, whose maps the agent may not read"),
    ],
)
@pytest.mark.host_pid_namespace  # host init at PID 1
def test_process_flag_pids(agent: Agent, scratch: Scratch, case: str, served: str) -> None:
    started = psutil.Process().create_time()
    now = int(started) << 32
    pid, generation = {
        "dead": (mmvbuild.dead_pid(), now),
        "reused": (os.getpid(), started_long_ago()),
        # Speed, Parfait and Hornet: the creation time in plain Unix seconds
        "reused_seconds": (os.getpid(), int(started) - 3600),
        "seconds": (os.getpid(), int(time.time())),
        "negative": (-1, now),
        "zero": (0, now),
        # created as init started: no process of another namespace (a container's init)
        # can be its writer, whatever runs on this machine meanwhile
        "one": (1, int(psutil.Process(1).create_time() + 1) << 32),
    }[case]
    b = one(cluster=27, value=11, flags=layout.FLAG_PROCESS, process=pid, generation=generation)
    path = scratch.put(f"pid_{case}", b)
    got = agent.probe(f"mmv.pid_{case}.v")[f"mmv.pid_{case}.v"]
    if not served:  # a live writer (the agent cannot read this test's maps: root's)
        assert got == "1 11"
        assert agent.status(path.name) == ("ok", "")
    else:  # what was seen, never "exited": no writer was followed
        assert got.startswith(UNKNOWN_NAME)
        why = f"header.process at offset 32: {served.format(pid)}"
        agent.assert_explained(path, "no-writer", why)
    agent.assert_alive()


CHILD_WRITER = """
import sys
from pcp import mmv, pmapi
w = mmv.MemoryMappedValues(sys.argv[1], flags=2, cluster=28)
w.add_metrics([mmv.mmv_metric("alive", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
w.start()
w.lookup_set("alive", "", 17)
print("ready", flush=True)
sys.stdin.read()
"""


def test_file_disappears_at_the_next_request_after_its_writer_exits(
    agent: Agent, scratch: Scratch
) -> None:
    path = scratch.path("child")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert agent.probe("mmv.child.alive")["mmv.child.alive"] == "1 17"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert path.exists()  # killed: the file stays behind, as after a crash
    assert agent.probe("mmv.child.alive")["mmv.child.alive"].startswith(UNKNOWN_NAME)
    agent.assert_explained(path, "exited", f"writer process {child.pid} has exited")
    agent.assert_alive()


MANY_FILES_WRITER = """
import sys
from pcp import mmv, pmapi
writers = []
for k in range(int(sys.argv[2])):
    w = mmv.MemoryMappedValues(f"{sys.argv[1]}{k:03d}", flags=2, cluster=300 + k)
    w.add_metrics([mmv.mmv_metric("alive", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
    w.start()
    w.lookup_set("alive", "", k)
    writers.append(w)
print("ready", flush=True)
sys.stdin.read()
"""


def test_every_file_of_an_exited_writer_goes_at_the_next_request(
    agent: Agent, scratch: Scratch
) -> None:
    # more files than one periodic check looks at (64): all go at the very next request.
    # They arrive at once, so the request budget may spread their loading over a few
    # requests (and hold what loaded meanwhile): waited for until all are served (found
    # by whole-suite runs on a loaded machine: mmv.many000.alive unknown at the first probe)
    count = 100
    prefix = scratch.path("many")
    names = [scratch.path(f"many{k:03d}").name for k in range(count)]
    child = subprocess.Popen(
        [sys.executable, "-c", MANY_FILES_WRITER, str(prefix), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        metrics = [f"mmv.{name}.alive" for name in names]
        wanted = {m: f"1 {k}" for k, m in enumerate(metrics)}
        for _ in range(100):
            if agent.probe(*metrics) == wanted:
                break
            time.sleep(0.1)
        assert agent.probe(*metrics) == wanted
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    got = agent.probe(*metrics)
    assert [m for m in metrics if not got[m].startswith(UNKNOWN_NAME)] == []
    states = agent.pmcd.fetch("mmv.control.file.state")
    assert {states[name] for name in names} == {'"exited"'}
    agent.assert_alive()


# -- identity that strangers cannot borrow (issue 17) ------------------------------------------


def per_instance(cluster: int, serial: int, metric: str, item: int, *insts: str) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, version=2)
    b.indoms.append(Indom(serial, [Instance(k, n) for k, n in enumerate(insts)]))
    b.metrics.append(Metric(metric, item, indom=serial))
    b.values += [Value(metric, k, 10 + k) for k in range(len(insts))]
    return b


def instances(agent: Agent, metric: str) -> str:
    return agent.pmcd.run("pmprobe", "-I", metric).stdout.strip()


def test_a_stranger_asking_for_a_cluster_and_indom_cannot_borrow_them(
    agent: Agent, scratch: Scratch
) -> None:
    # the victim's cluster and indom serial, a metric of its own at another item: it agrees
    # with the victim, so it could share, but another user wrote it
    # (a cluster no other file of this module's agent held: docs/identity.md)
    scratch.put("vic", per_instance(1502, 5, "per", 1, "mine"))
    assert instances(agent, "mmv.vic.per") == 'mmv.vic.per 1 "mine"'
    path = scratch.put("att", per_instance(1502, 5, "x", 2, "theirs", "also_theirs"))
    os.chown(path, 65534, 65534)
    assert instances(agent, "mmv.vic.per") == 'mmv.vic.per 1 "mine"'
    assert instances(agent, "mmv.att.x") == 'mmv.att.x 2 "theirs" "also_theirs"'
    assert pmid(agent, "mmv.vic.per") == "70.1502.1"
    assert pmid(agent, "mmv.att.x") != "70.1502.2"
    agent.assert_alive()


def test_a_file_of_many_overflowing_indoms_drains_nothing(agent: Agent, scratch: Scratch) -> None:
    # 2,047 empty indoms of serial >= 2048 used to take every PCP serial the agent had for
    # such indoms; another user's metric then lost its indom, and stayed without it
    drain = MmvBuilder(cluster=35, version=2)
    drain.indoms += [Indom(2048 + k) for k in range(2047)]
    scratch.put("drain", drain)
    agent.assert_alive()
    assert len(drain.build().data) < 70_000
    scratch.put("needs", per_instance(36, 5000, "m", 1, "a", "b"))
    assert agent.probe("mmv.needs.m")["mmv.needs.m"] == "2 10 11"
    assert agent.status("needs") == ("ok", "")
    agent.assert_alive()


# -- fuzz findings and a bounded fuzz run ----------------------------------------------------

REGRESSION = sorted((DATA / "hardening").glob("*.mmv"))


@pytest.mark.parametrize(
    "path",
    REGRESSION,
    ids=[p.name for p in REGRESSION],
)
def test_regression_input(path: Path, tmp_path: Path) -> None:
    """Inputs that broke the fuzz oracle (fuzz/target.py), from the atheris run or found
    under pmcd; the README beside them says which bug each one shows."""
    check_bytes(path.read_bytes(), str(tmp_path / "f"))


SEEDS = [bytes(sample(v, labels).build().data) for v in layout.VERSIONS for labels in (False, True)]


def mutable_spans(data: bytes) -> list[tuple[int, int]]:
    """Header, TOC and every section of a valid file (offsets from its own TOC)."""
    tocs = struct.unpack_from("=i", data, 24)[0]
    version = struct.unpack_from("=i", data, 4)[0]
    spans = [(0, layout.HEADER_SIZE + tocs * layout.TOC_SIZE)]
    for k in range(tocs):
        ttype, count, offset = layout.TOC.unpack_from(
            data, layout.HEADER_SIZE + k * layout.TOC_SIZE
        )
        spans.append(
            (offset, offset + count * layout.ENTRY_SIZE[(ttype, layout.entry_layout(version))])
        )
    return spans


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    spans = mutable_spans(bytes(data))
    for _ in range(draw(st.integers(1, 4))):
        start, end = draw(st.sampled_from(spans))
        width = draw(st.sampled_from([1, 4, 8]))
        at = draw(st.integers(start, max(start, end - width)))
        word = draw(
            st.sampled_from([0, 1, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 31, 40, 1 << 40])
            | st.integers(0, (1 << (8 * width)) - 1)
        )
        data[at : at + width] = (word & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=mutated())
def test_bounded_fuzz_of_reader_and_catalogue(data: bytes) -> None:
    """The atheris oracle (fuzz/target.py) on structured mutations of valid files."""
    with tempfile.TemporaryDirectory() as tmp:
        check_bytes(data, os.path.join(tmp, "f"))


def test_oracle_accepts_real_writer_files(tmp_path: Path) -> None:
    written = mmvbuild.write_capi(tmp_path / "capi")
    assert check_file(str(written.path)) == "ok"
    img = sample(3).build()
    assert check_bytes(bytes(img.data), str(tmp_path / "s")) == "ok"
