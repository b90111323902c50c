"""MMV writers in other PID namespaces, as in containers, under a private pmcd.

Each writer is python3-pcp's ``pcp.mmv`` (libpcp_mmv) in a PID namespace of its own
(``unshare --pid --fork --mount-proc``, tests/support/writers/namespaced.py) writing
MMV_FLAG_PROCESS files into the served directory (a directory the container shares with the
host, as a bind
mount does): its header holds its PID in the namespace, 1 as a container's entrypoint, which
on the host is init.  The agent must follow the real writer: served while it lives, gone at
the next request after ``kill -9``, never kept alive by a host process of the same number;
its files labelled with the container.  The agent runs as pcp and the writers as root, so
the agent cannot read their maps: it goes by NSpid and start times
(tests/unit/directory/test_scanner.py has the cases where maps are read).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from pmda_mmv.directory.filestate import NO_WRITER, OK, PENDING
from pmda_mmv.directory.liveness import Writers
from pmda_mmv.directory.procfs import ProcIndex, innermost
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.containers import NAMESPACED, PYTHON
from tests.support.mmvbuild import Label, sample
from tests.support.pmcd import kept_dir
from tests.support.served import UNKNOWN_NAME, Agent, start_agent

pytestmark = [pytest.mark.pmcd, pytest.mark.host_pid_namespace, pytest.mark.serial]

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


@dataclass
class NsWriter:
    """A writer in a PID namespace of its own: ``unshare`` (its process), the PID the
    writer has inside (``inner``) and in this namespace (``pid``)."""

    unshare: subprocess.Popen[str]
    inner: int
    pid: int = 0

    def kill(self) -> None:
        """``kill -9`` the writer (not its namespace's init, unless it is the writer)."""
        proc = psutil.Process(self.pid)  # before it can be reaped (by its parent)
        proc.send_signal(signal.SIGKILL)
        psutil.wait_procs([proc], timeout=10)

    def stop(self) -> None:
        if self.unshare.stdin is not None:
            self.unshare.stdin.close()
        self.unshare.kill()  # --kill-child: its namespace's init goes, and all in it
        self.unshare.wait(30)


def ns_writer(
    path: Path, inner: int, cluster: int, cgroup: Path | None = None, mapper: bool = False
) -> NsWriter:
    """Start a namespaced writer of ``path`` at PID ``inner`` in its namespace, in
    ``cgroup`` (a cgroup directory) when given; returns once the file is written (with
    ``mapper``: once the file already written is mapped)."""
    cmd = [*UNSHARE, PYTHON, str(NAMESPACED)]
    unshare = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    w = NsWriter(unshare, inner)
    try:
        init = _child(unshare.pid)
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(f"{init}\n")
        assert unshare.stdin is not None and unshare.stdout is not None
        command = f"map {path} {inner}" if mapper else f"write {path} {inner} {cluster}"
        unshare.stdin.write(command + "\n")
        unshare.stdin.flush()
        assert unshare.stdout.readline() == f"ready {inner}\n"
        found = [p for p in _tree(init) if (innermost("/proc", p) or [0])[-1] == inner]
        assert len(found) == 1, found
        w.pid = found[0]
        assert (innermost("/proc", w.pid) or [])[1:] == [inner]  # nested one level
    except BaseException:
        w.stop()
        raise
    return w


def _namespaced_inits() -> list[tuple[int, str, float]]:
    """The processes that are PID 1 of another PID namespace: (PID here, command, start)."""
    found = []
    for p in psutil.process_iter(["cmdline", "create_time"]):
        ns = innermost("/proc", p.pid) or []
        if len(ns) > 1 and ns[-1] == 1:
            found.append((p.pid, " ".join(p.info["cmdline"] or [])[:80], p.info["create_time"]))
    return found


def _child(pid: int) -> int:
    for _ in range(500):
        children = psutil.Process(pid).children()
        if children:
            return children[0].pid
        time.sleep(0.01)
    raise AssertionError(f"unshare {pid} started no child")


def _tree(pid: int) -> list[int]:
    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


@pytest.fixture(scope="module")
def agent(request: pytest.FixtureRequest) -> Iterator[Agent]:
    for base in kept_dir(request, "pmda-mmv-containers-", "containers work directory"):
        a = start_agent(base / "main")
        try:
            yield a
        finally:
            a.pmcd.stop()


def served(agent: Agent, metric: str, want: str = "1 17") -> str:
    """The metric's value once served (a walk of /proc may take a few requests)."""
    got = ""
    for _ in range(100):
        got = agent.probe(metric)[metric]
        if got == want:
            break
        time.sleep(0.05)
    return got


def cli(*args: str) -> str:
    """The output of ``pmda-mmv ARGS`` (run as root: it reads the writers' maps)."""
    cmd = [sys.executable, "-m", "pmda_mmv", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout


def check_json(path: Path) -> dict[str, object]:
    result = json.loads(cli("check", "--json", str(path)))
    assert len(result) == 1
    return dict(result[0])


@pytest.mark.parametrize("inner", [1, 2, 99])
def test_a_namespaced_writer_is_served_while_alive_and_gone_after_kill(
    agent: Agent, cgroup: tuple[Path | None, str], inner: int
) -> None:
    # host PID 1 is init and 2 kthreadd, alive throughout: the file of a container's PID
    # 1 or 2 must not be served forever after its writer died, nor that of PID 99 (no
    # such host process) never served
    name = f"ns{inner}"
    path = agent.dir / name
    w = ns_writer(path, inner, 400 + inner, cgroup[0])
    try:
        metric = f"mmv.{name}.alive"
        assert served(agent, metric) == "1 17"
        assert agent.status(name) == ("ok", "")
        labels = agent.pmcd.run("pminfo", "-l", metric).stdout
        assert f'"container":"{cgroup[1]}"' in labels, labels
        doc = check_json(path)  # check, run as root, reads the writer's maps
        assert doc["status"] == "ok"
        assert doc["writer"] == {
            "pid": inner,
            "agent_pid": w.pid,
            "confirmed": True,
            "container": cgroup[1],
            "cgroup": doc["writer"]["cgroup"],  # type: ignore[index]
        }
        text = cli("check", str(path)).splitlines()
        assert text[1:] == [f"  writer: process {inner} (PID {w.pid} here), container {cgroup[1]}"]
        w.kill()
        assert psutil.pid_exists(inner) is (inner < 3)  # host init and kthreadd live on
        assert agent.probe(metric)[metric].startswith(UNKNOWN_NAME)  # the next request
        why = (
            f"header.process at offset 32: writer process {inner} (PID {w.pid} in the "
            f"agent's namespace, container {cgroup[1]}) has exited (MMV_FLAG_PROCESS)"
        )
        agent.assert_explained(path, "exited", why)
    finally:
        w.stop()
        path.unlink(missing_ok=True)


def test_a_host_process_holding_the_header_pid_is_not_the_writer(
    agent: Agent, cgroup: tuple[Path | None, str]
) -> None:
    holder = subprocess.Popen(["sleep", "600"])  # a live host process, started first
    path = agent.dir / "held"
    w = ns_writer(path, holder.pid, 450, cgroup[0])  # the writer's PID inside: the same number
    try:
        assert served(agent, "mmv.held.alive") == "1 17"
        w.kill()
        assert holder.poll() is None
        assert agent.probe("mmv.held.alive")["mmv.held.alive"].startswith(UNKNOWN_NAME)
        assert agent.status("held")[0] == "exited"
        # the file is looked at again (a new agent, or a change): no writer, though the
        # host process of that number lives
        doc = check_json(path)
        assert doc["status"] == "no-writer", doc
        message = doc["problems"][0]["message"]  # type: ignore[index]
        assert f"writer PID {holder.pid} not found in this PID namespace or any other" in message
        assert f"PID {holder.pid} here does not have this file mapped or open" in message
        # the same words from debug (and, for the agent, its log and last_problem)
        lines = cli("debug", "--once", "--dir", str(agent.dir)).splitlines()
        assert [ln for ln in lines if "held" in ln and message in ln], lines
    finally:
        w.stop()
        holder.kill()
        holder.wait()
        path.unlink(missing_ok=True)


@pytest.fixture
def crowd() -> Iterator[list[subprocess.Popen[bytes]]]:
    """5,000 more processes on the host (sleeps), killed and reaped afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(5000):
            procs.append(subprocess.Popen(["sleep", "600"]))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def whole_walk() -> float:
    """The shortest of three whole walks of /proc (no deadline), in seconds."""
    spent = []
    for _ in range(3):
        start = time.perf_counter()
        ProcIndex().advance(None, time.monotonic)
        spent.append(time.perf_counter() - start)
    return min(spent)


def test_the_writer_search_is_bounded_by_the_request_budget(
    tmp_path: Path, crowd: list[subprocess.Popen[bytes]]
) -> None:
    # one walk of /proc finds the writers of every file loaded meanwhile, a slice per
    # request (the files pending until it ends), and no request walks again once found.
    # The budget is a third of one whole walk as measured here (on a fast machine a walk
    # of 5,000 processes took 49 ms, within a fixed 0.1 s budget: nothing to slice)
    walk = whole_walk()
    budget = walk / 3
    scanner = Scanner(str(tmp_path), Catalogue(), budget=budget)
    writers: list[NsWriter] = []
    try:
        for k in range(3):
            writers.append(ns_writer(tmp_path / f"c{k}", 1, 500 + k))
        times = []
        for _ in range(50):
            start = time.perf_counter()
            scanner.refresh()
            times.append(time.perf_counter() - start)
            if all(scanner.states[f"c{k}"].state == OK for k in range(3)):
                break
        assert {n: s.state for n, s in scanner.states.items()} == dict.fromkeys(
            ("c0", "c1", "c2"), OK
        )
        walks: Writers = scanner.entries.writers
        assert walks.walks == 1
        assert len(times) > 1, (walk, times)  # the walk took more than one request
        # a slice ends at the first WALK_STEP boundary past the budget; 20 ms: the rest
        # of a refresh of three small files
        assert max(times) < budget * 1.5 + 0.02, (walk, times)
        for k, w in enumerate(writers):
            state = scanner.states[f"c{k}"]
            assert state.writer is not None and state.writer.pid == w.pid
        for _ in range(5):
            scanner.refresh()
        assert walks.walks == 1
    finally:
        for w in writers:
            w.stop()


def test_a_container_cannot_forge_its_container_label(
    tmp_path: Path, cgroup: tuple[Path | None, str]
) -> None:
    # a file of a container writer that sets "container" itself, at every level: the
    # agent's label (from the writer's cgroup) replaces it; "app" is the file's own
    b = sample(labels=True)
    b.flags, b.process, b.generation = layout.FLAG_PROCESS, 1, int(time.time()) << 32
    forged = '{"container":"host"}'
    b.labels += [
        Label(layout.LABEL_CLUSTER, 12, forged),
        Label(layout.LABEL_ITEM, 1, forged),
        Label(layout.LABEL_INDOM, 3, forged),
        Label(layout.LABEL_INSTANCES, 3, forged, internal=7),
    ]
    b.write(tmp_path / "forger")
    w = ns_writer(tmp_path / "forger", 1, 0, cgroup[0], mapper=True)
    try:
        scanner = Scanner(str(tmp_path), Catalogue())
        scanner.refresh(force=True)
        entry = scanner.catalogue.files["forger"]
        state = scanner.states["forger"]
        assert state.writer is not None and state.writer.pid == w.pid
        assert state.writer.confirmed  # root reads the maps
        real = f'"container":"{cgroup[1]}"'
        assert '"app":"sample"' in entry.labels and real in entry.labels
        item1 = next(sm for sm in entry.metrics if sm.metric.item == 1)
        texts = [entry.labels, item1.labels, entry.indoms[3].labels]
        texts.append(entry.indoms[3].instance_labels[7][0])
        assert all(real in t and '"host"' not in t for t in texts), texts
    finally:
        w.stop()


def test_a_container_whose_mounts_cannot_reach_the_file_is_not_its_writer(
    request: pytest.FixtureRequest,
) -> None:
    # The served directory is a tmpfs of its own.  The writer (PID 1 in its namespace)
    # shares it; a decoy (PID 1 in another namespace, started after the writer and within
    # PID_SLACK of the file: by start time alone it would win) has unmounted it.  The agent
    # (pcp) cannot read either's maps, so only their mounts tell them apart.
    for base in kept_dir(request, "pmda-mmv-containers-mounts-", "mounts work directory"):
        mmv_dir = base / "tmp" / "mmv"
        mmv_dir.mkdir(parents=True)
        mount = ["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(mmv_dir)]
        subprocess.run(mount, check=True)
        stage = mmv_dir / ".stage"  # a directory the agent does not look into
        stage.mkdir()
        agent: Agent | None = None
        writer = decoy = None
        try:
            writer = ns_writer(stage / "reach", 1, 470)
            decoy = subprocess.Popen(
                [*UNSHARE, "sh", "-c", f"umount {mmv_dir} && echo ready && exec sleep 600"],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert decoy.stdout is not None and decoy.stdout.readline() == "ready\n"
            agent = start_agent(base)
            os.rename(stage / "reach", mmv_dir / "reach")  # the file the writer maps
            assert served(agent, "mmv.reach.alive") == "1 17"
            writer.kill()
            assert decoy.poll() is None  # alive, and PID 1 in its namespace
            got = agent.probe("mmv.reach.alive")["mmv.reach.alive"]
            assert got.startswith(UNKNOWN_NAME), (got, _namespaced_inits(), decoy.pid, writer.pid)
            assert agent.status("reach")[0] == "exited"
        finally:
            if agent is not None:
                agent.pmcd.stop()
            if writer is not None:
                writer.stop()
            if decoy is not None:
                decoy.kill()
                decoy.wait()
            subprocess.run(["umount", str(mmv_dir)], check=False)


def test_a_generation_in_the_future_does_not_keep_the_writer_search_going(
    tmp_path: Path, crowd: list[subprocess.Popen[bytes]]
) -> None:
    # A PROCESS file whose generation says it is created an hour from now (any user can
    # write one) asked for a walk of /proc listed after "its creation", i.e. after every
    # request: each request began a new walk of its own, taken only if it ended within
    # that one request's budget (4 walks here before one did, where walks are shared and
    # resumed; with no walk fitting one budget, as when the budget is spent already,
    # pending for ever: 25 walks in 50 calls).  The inode's ctime bounds it.
    budget = 0.1
    scanner = Scanner(str(tmp_path), Catalogue(), budget=budget)
    b = sample()
    b.flags, b.process = layout.FLAG_PROCESS, crowd[-1].pid
    b.generation = int(time.time() + 3600) << 32
    b.write(tmp_path / "future")
    crowd[-1].kill()
    crowd[-1].wait()
    for _ in range(50):
        scanner.refresh()
        if scanner.states["future"].state != PENDING:
            break
    state = scanner.states["future"]
    assert state.state == NO_WRITER, (state.state, state.problems)
    walks: Writers = scanner.entries.writers
    assert walks.walks == 1


def test_another_users_process_at_the_header_pid_is_not_the_writer(
    agent: Agent,
) -> None:
    # Any user can hold any innermost PID in a PID namespace of its own.  Here user nobody
    # holds PID 1 of a namespace started before a root writer's (PID 1 of its own); the
    # writer is killed before the agent sees its file.  The agent (pcp) can read neither's
    # maps: by start time and mounts alone nobody's process would be taken for the dead
    # writer, and the file served for ever, frozen; only the file's owner may be its writer.
    stage = agent.dir / ".owner-stage"  # a directory the agent does not look into
    stage.mkdir()
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    squatter = subprocess.Popen(
        [*UNSHARE, *as_nobody, "sh", "-c", "echo ready && exec sleep 600"],
        stdout=subprocess.PIPE,
        text=True,
    )
    writer = None
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
        time.sleep(0.05)  # the squatter starts before the file, as a writer would
        writer = ns_writer(stage / "owned", 1, 490)
        writer.kill()
        inner = [p for p in _tree(squatter.pid) if (innermost("/proc", p) or [0])[-1] == 1]
        assert len(inner) == 1 and psutil.Process(inner[0]).username() == "nobody"
        os.rename(stage / "owned", agent.dir / "owned")
        got = agent.probe("mmv.owned.alive")["mmv.owned.alive"]
        assert got.startswith(UNKNOWN_NAME), got
        state, why = agent.status("owned")
        assert state == NO_WRITER, (state, why)
        assert "writer PID 1 not found in this PID namespace or any other" in why
    finally:
        if writer is not None:
            writer.stop()
        squatter.kill()
        squatter.wait(30)
        (agent.dir / "owned").unlink(missing_ok=True)
        stage.rmdir()
