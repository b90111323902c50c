"""A private pmcd serving one MMV directory with pmda-mmv, a live good file beside the
files under test: the agents the system tests of hostile files (tests/system/test_refusals,
test_lifecycle, test_policy, test_names, test_liveness, test_budget, test_loading,
test_containers) put their inputs beside.

:class:`Agent` (``--status-metrics``, pmcd's ``-t`` 30 s) and :class:`Scratch` (entries one test
puts into the served directory, removed after it): after each test the agent must still be
the same process and serve the good file's counter at the value just written.  :class:`Served`
(:func:`serve`): the same under pmcd's default agent timeout (5 s, as the system pmcd runs),
for the bounded-work tests.  The modules define their fixtures from :func:`served_agent`,
:func:`scratch_in` and :func:`serve`."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cpmapi as c_api
import psutil
import pytest
from pcp import pmapi

from tests.support import mmvbuild
from tests.support.mmvbuild import MmvBuilder
from tests.support.pmcd import PrivatePmcd, kept_dir, make_dir, our_agent, require_pcp

GOOD = "mmv.good.py.counter"
MOVED = "header.cluster at offset 36: asked for cluster"
UNKNOWN_NAME = "-12357"  # PM_ERR_NAME, as pmprobe prints it
EMPTY = "file.size at offset 0: size 0, not written yet"


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


FETCHES = 5  # fetches of the good file while each attack is in place


@dataclass
class Served:
    pmcd: PrivatePmcd
    dir: Path
    pid: int
    good: mmvbuild.Written
    counter: int = 41

    def log_size(self) -> int:
        path = self.pmcd.log_dir / "mmv.log"
        return path.stat().st_size if path.exists() else 0

    def log_lines(self, path: Path) -> list[str]:
        return [ln for ln in self.pmcd.agent_log().splitlines() if str(path) in ln]

    def assert_good_answers(self) -> None:
        """FETCHES fetches of the good file, each the value just written, by the same
        agent process (pmcd drops an agent that misses its timeout; it is not restarted)."""
        for _ in range(FETCHES):
            self.counter += 1
            self.good.handle.lookup_set("py.counter", "", self.counter)
            out = self.pmcd.run("pmprobe", "-v", GOOD)
            assert out.stdout.strip() == f"{GOOD} 1 {self.counter}", out.stdout + out.stderr
        assert agent_pids(self.pmcd) == [self.pid], self.pmcd.pmcd_log()[-2000:]


def serve(request: pytest.FixtureRequest, *args: str) -> Iterator[Served]:
    """A :class:`Served` agent (``args``: more of its options), stopped after."""
    require_pcp()
    for base in kept_dir(request, "pmda-mmv-bounded-", "bounded work directory"):
        mmv_dir = make_dir(base / "tmp" / "mmv", 0o1777)
        agent = our_agent(mmv_dir, "--status-metrics", *args)
        pmcd = PrivatePmcd(base / "pmcd", [agent], agent_timeout=None)
        pmcd.start()
        good = mmvbuild.write_pcp_mmv(mmv_dir / "good")
        try:
            pids = agent_pids(pmcd)
            assert len(pids) == 1, pids
            s = Served(pmcd, mmv_dir, pids[0], good)
            s.assert_good_answers()
            yield s
        finally:
            pmcd.stop()
            good.handle.stop()


def served_agent(base: Path, *args: str) -> Iterator[Agent]:
    """An :class:`Agent` in ``base`` with its live good file (pcp.mmv), stopped after."""
    a = start_agent(base, *args)
    a.good = mmvbuild.write_pcp_mmv(a.dir / "good")
    try:
        a.assert_alive()
        yield a
    finally:
        a.pmcd.stop()
        if a.good is not None:
            a.good.handle.stop()


def scratch_in(agent: Agent) -> Iterator[Scratch]:
    """A :class:`Scratch` of ``agent``'s directory; after the test, its entries removed and
    the agent alive (which also lets it forget them)."""
    s = Scratch(agent)
    yield s
    s.cleanup()
    agent.assert_alive()


QUICK = 1.0  # seconds a good file's request may take


def wait_served(s: Served, count: int, requests: int = 400) -> None:
    """Requests until ``count`` files are served (mmv.control.files)."""
    for _ in range(requests):
        out = s.pmcd.run("pmprobe", "-v", "mmv.control.files").stdout.split()
        if out[-1] == str(count):
            return
    pytest.fail(f"served files: {out}")


class Client:
    """A PMAPI context on ``pmcd`` with ``names`` looked up: :meth:`fetch` times one
    pmFetch (one request to the agent)."""

    def __init__(self, pmcd: PrivatePmcd, *names: str) -> None:
        self.ctx = pmapi.pmContext(c_api.PM_CONTEXT_HOST, pmcd.host)
        self.pmids = self.ctx.pmLookupName(list(names))

    def fetch(self) -> tuple[float, list[int]]:
        """One pmFetch: its duration and each metric's number of values (negative: an
        error code)."""
        start = time.monotonic()
        result = self.ctx.pmFetch(self.pmids)
        took = time.monotonic() - start
        counts = [result.contents.get_numval(k) for k in range(len(self.pmids))]
        self.ctx.pmFreeResult(result)
        return took, counts
