"""Bounded work, third round (issue 28): valid files within every per-file limit, under a
private pmcd with its default agent timeout (5 s, as the system pmcd runs).

Each test puts its attack beside the live ``good`` file of :mod:`tests.system.test_bounded`'s
agent (or starts an agent of its own), then checks what the issue's "Done when" asks: the
agent is never dropped, the good file's requests answer in under a second, a victim's new
file is served within a few requests.
"""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import cpmapi as c_api
import psutil
import pytest
from pcp import pmapi

from pmda_mmv.agent.options import parse_args
from pmda_mmv.agent.ratelimit import LogLimit
from pmda_mmv.agent.serving import Serving
from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.directory.watcher import Watcher
from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support import hostile, mmvbuild
from tests.support.pmcd import AgentSpec, PrivatePmcd, kept_dir, make_dir, our_agent, require_pcp
from tests.system.test_budget import GOOD, Served, pmda_mmv, serve
from tests.system.test_refusals import agent_pids

BIG = (80, 12_500)  # metrics x instances: 1M values, 33 MB, about 0.2 s to load here
QUICK = 1.0  # seconds a good file's request may take
TRY_AGAIN = 10.0  # seconds from an agent's start to its first answer (interpreter
# included; 1.0-2.2 s here, up to 6.2 s on a loaded machine; main before issue 28: 7.8-16 s,
# so the test's structural check is that the agent answers before every file is loaded)


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    yield from serve(request)


def wait_served(s: Served, count: int, requests: int = 400) -> None:
    """Requests until ``count`` files are served (mmv.control.files)."""
    for _ in range(requests):
        out = s.pmcd.run("pmprobe", "-v", "mmv.control.files").stdout.split()
        if out[-1] == str(count):
            return
    pytest.fail(f"served files: {out}")


def new_generation(path: Path, generation: int) -> None:
    """Give ``path`` a new generation pair in place (same inode and size): its next
    snapshot raises Changed."""
    with open(path, "r+b") as f:
        f.seek(layout.GENERATION_OFFSET)
        f.write(struct.pack("=QQ", generation, generation))


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


@pytest.mark.pmcd
def test_reloads_a_fetch_finds_stay_within_the_budget(served: Served) -> None:
    """Finding 2: served files of 1M values given new generations just before a fetch of
    one metric of each: the fetch reloads what its budget allows and queues the rest
    (they answer nothing in that fetch), so it answers in well under a second, not one
    load per file inline (12 x 0.2 s here; pmcd's 5 s timeout dropped the agent at the
    issue's sizes)."""
    paths = hostile.big_files(served.dir, 12, *BIG)
    names = [f"mmv.{p.name}.m0" for p in paths]
    try:
        wait_served(served, len(paths) + 1)
        served.assert_good_answers()
        client = Client(served.pmcd, GOOD, *names)
        for round_ in range(2):
            client.fetch()
            for path in paths:
                new_generation(path, 0x7000 + round_)
            took, counts = client.fetch()
            assert took < QUICK, (took, counts)
            assert counts[0] == 1, counts
            served.assert_good_answers()
        wait_served(served, len(paths) + 1)  # every reload done in the end
    finally:
        for path in paths:
            path.unlink()
    served.assert_good_answers()


def first_answer(pmcd: PrivatePmcd, first: list[float], stop: threading.Event) -> None:
    """The time of the agent's first answer (a value of mmv.control.files) through
    ``pmcd`` once it listens, into ``first``; pmcd answers "Try again" while the agent is
    not ready."""
    while not stop.is_set():
        if pmcd.port:
            out = pmcd.run("pmprobe", "-v", "mmv.control.files").stdout.split()
            if out[1:2] == ["1"]:
                first.append(time.time())
                first.append(float(out[2]))  # files served at the first answer
                return
        time.sleep(0.05)


@pytest.mark.pmcd
def test_the_first_scan_is_bounded_and_the_agent_serves_at_once(
    request: pytest.FixtureRequest,
) -> None:
    """Finding 3: an agent started (as pmcd restarts it) over a directory of big files
    reports ready after a bounded first scan (pmcd answers "Try again" until then), not
    after loading them all; the rest load within the next requests' budget, the agent
    is never dropped."""
    require_pcp()
    for base in kept_dir(request, "pmda-mmv-bounded3-", "bounded work directory"):
        mmv_dir = make_dir(base / "tmp" / "mmv", 0o1777)
        paths = hostile.big_files(mmv_dir, 24, *BIG)
        good = mmvbuild.write_pcp_mmv(mmv_dir / "good")
        pmcd = PrivatePmcd(base / "pmcd", [our_agent(mmv_dir)], agent_timeout=None)
        first: list[float] = []
        stop = threading.Event()
        poller = threading.Thread(target=first_answer, args=(pmcd, first, stop), daemon=True)
        try:
            poller.start()
            pmcd.start()
            pids = agent_pids(pmcd)
            started = psutil.Process(pids[0]).create_time()
            poller.join(30)
            assert first, "no answer"
            print("try again for", first[0] - started)
            assert first[0] - started < TRY_AGAIN, first[0] - started
            # ready after a bounded first scan, not after loading every file
            assert first[1] < len(paths) + 1, first
            client = Client(pmcd, "mmv.control.files")
            for _ in range(400):
                took, counts = client.fetch()  # one request: one load at most
                assert took < QUICK and counts == [1], (took, counts)
                out = pmcd.run("pmprobe", "-v", "mmv.control.files").stdout
                if out.split()[-1] == str(len(paths) + 1):
                    break
            else:
                pytest.fail(out)
            assert pmcd.run("pmprobe", "-v", "mmv.good.py.counter").stdout.split()[1] == "1"
            assert agent_pids(pmcd) == pids
        finally:
            stop.set()
            poller.join()
            pmcd.stop()
            good.handle.stop()
            for path in paths:
                path.unlink()
            os.sync()


def test_a_served_file_whose_writer_only_writes_values_is_not_reloaded(tmp_path: Path) -> None:
    """Finding 13: a served file's mtime moves at every write through its writer's
    mapping; a listing (any other file's churn) then found its stat changed and loaded it
    again, unserving and serving it anew.  Same inode, size and generation: the entry,
    its tables and its values stay as they are."""
    scanner = Scanner(str(tmp_path), Catalogue(), check_interval=0)
    path = tmp_path / "permanent"
    image = mmvbuild.single(9, 1).write(path)
    changes = scanner.refresh()
    [entry] = changes.added
    for k in range(3):
        data = bytearray(path.read_bytes())
        value_at = image.entries["values"][0]
        struct.pack_into("=Q", data, value_at, 100 + k)  # a value written in place
        with open(path, "r+b") as f:
            f.write(data)
        os.utime(path, ns=(0, (k + 1) * 10**9))
        (tmp_path / f"churn{k}").write_bytes(b"")  # the directory changed: a listing
        changes = scanner.refresh()
        assert not changes.removed and not changes.added, changes
        assert scanner.catalogue.files["permanent"] is entry
        assert next(iter(entry.mf.values()))[2] == 100 + k
    new_generation(path, 0x9000)  # a new generation is still a reload
    os.utime(path, ns=(0, 10 * 10**9))
    scanner.mark_dirty("permanent")
    changes = scanner.refresh()
    assert [e.name for e in changes.removed] == [e.name for e in changes.added] == ["permanent"]


def limited_agent(mmv_dir: Path, nofile: str) -> AgentSpec:
    """pmda-mmv started under ``ulimit NOFILE`` (``-Sn 1024``: systemd's default soft
    limit; ``-n 1024``: soft and hard)."""
    spec = our_agent(mmv_dir, "--status-metrics")
    argv = ("/bin/sh", "-c", f'ulimit {nofile} && exec "$@"', "sh", *spec.argv)
    return AgentSpec(spec.name, spec.domain, argv, notready=spec.notready)


def probe(pmcd: PrivatePmcd, name: str) -> list[str]:
    return pmcd.run("pmprobe", "-v", name).stdout.split()


@pytest.mark.pmcd
def test_served_files_never_take_the_descriptors_a_listing_needs(
    request: pytest.FixtureRequest,
) -> None:
    """Finding 9: under systemd's default soft limit of 1,024 descriptors, 1,100 tiny
    files took one each and the listing failed ("cannot list directory: Too many open
    files"): a new file was never even listed.  The agent raises its soft limit to the
    hard one at start; the new file is served within a few requests, the log has no
    listing error."""
    require_pcp()
    for base in kept_dir(request, "pmda-mmv-bounded3-", "bounded work directory"):
        mmv_dir = make_dir(base / "tmp" / "mmv", 0o1777)
        paths = hostile.many_files(mmv_dir, 1100)
        pmcd = PrivatePmcd(base / "pmcd", [limited_agent(mmv_dir, "-Sn 1024")], agent_timeout=None)
        try:
            pmcd.start()
            for _ in range(400):
                if probe(pmcd, "mmv.control.files")[-1] == str(len(paths)):
                    break
            else:
                pytest.fail(pmcd.agent_log()[-2000:])
            victim = mmvbuild.single(9, 4242).write(mmv_dir / "victim")
            assert victim
            for _ in range(5):
                if probe(pmcd, "mmv.victim.v") == ["mmv.victim.v", "1", "4242"]:
                    break
            else:
                pytest.fail(pmcd.agent_log()[-2000:])
            assert "cannot list directory" not in pmcd.agent_log()
        finally:
            pmcd.stop()


def test_served_files_stop_at_the_descriptor_bound_and_resume(tmp_path: Path) -> None:
    """Finding 9, past the hard limit: served files and their writers' pidfds hold at most
    ``max_files`` descriptors (fdlimit.py); one more file is refused naming the limit,
    while the directory is still listed, and served once a served file leaves."""
    scanner = Scanner(str(tmp_path), Catalogue(), check_interval=0, budget=None)
    scanner.max_files = 6  # descriptors: a file loading counts two (its pidfd, if any)
    for k in range(4):
        mmvbuild.single(10 + k, k).write(tmp_path / f"f{k}")
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f0", "f1", "f2"]
    assert scanner.states["f3"].state == "refused"
    assert "descriptor limit" in scanner.states["f3"].last_problem
    (tmp_path / "f0").unlink()
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f1", "f2", "f3"]
    assert fdlimit.max_files(20_000) == 20_000 - fdlimit.RESERVE - 5_000


FLOOD = """
import os, sys, time
d, seconds = sys.argv[1], float(sys.argv[2])
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for k in range(100):
        p = os.path.join(d, f".tmp{k}")
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        os.unlink(p)
    n += 100
print(n)
"""


def test_the_watcher_drops_ignored_names_before_queueing_them(tmp_path: Path) -> None:
    """Finding 10: another process creating and unlinking dot-files as fast as it can.
    Their events are dropped as they are read (filestate.ignore_reason, the scanner's
    rule), never marked, and nothing queues behind them: a real file written after the
    flood is marked within a second (watchdog's queues were still draining for tens of
    seconds after such a flood, its memory grown by hundreds of MB)."""
    marks: list[str] = []
    arrived: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.append(name)
        arrived.setdefault(name, time.monotonic())

    watcher = Watcher(str(tmp_path), mark)
    watcher.ensure()
    try:
        flood = subprocess.run(
            [sys.executable, "-c", FLOOD, str(tmp_path), "4"],
            capture_output=True,
            text=True,
            check=True,
        )
        written = time.monotonic()
        (tmp_path / "after").write_bytes(b"x")
        deadline = written + 30
        while "after" not in arrived and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "after" in arrived, len(marks)
        assert arrived["after"] - written < 1.0, (arrived["after"] - written, flood.stdout)
        assert not [m for m in marks if m.startswith(".")], len(marks)
    finally:
        watcher.stop()


def test_the_log_limit_holds_in_total_with_the_per_file_counts() -> None:
    """Finding 11: 50 new files a second, each with 40 bad entries: the per-file counts
    ("N more log lines about this file suppressed") went around the total (500 files/s:
    ~150 MB of log an hour where 1,000 lines a minute were promised).  Every window now
    has at most ``total`` lines, counts included, plus the total's one count."""
    lines: list[tuple[float, str]] = []
    now = [0.0]
    limit = LogLimit(
        lambda line: lines.append((now[0], line)),
        window=10,
        per_cause=2,
        per_file=5,
        total=100,
        clock=lambda: now[0],
    )
    for second in range(100):
        now[0] = float(second)
        for f in range(50):
            for k in range(40):
                limit(f"/d/f{second}_{f}: values[{k}].metric at offset {k}: cause {k % 7}")
    now[0] = 100.0
    limit.flush()
    for start in range(0, 100, 10):
        window = [ln for t, ln in lines if start <= t < start + 10]
        assert len(window) <= 100 + 1, (start, len(window))
    assert any("more log lines suppressed" in ln for _, ln in lines)


@pytest.mark.pmcd
def test_empty_maps_count_as_labels_libpcp_counts(served: Served) -> None:
    """Finding 12: item labels of 60 empty maps and 200 plain labels (260: libpcp counts an
    empty map as a label, and accepts at most 254).  ``check`` said ok and every label
    request logged libpcp's refusal (1.3 MB in 5 s).  Now the set is refused once, with one
    line naming the file, label requests log nothing more, and ``check`` names it; 254
    (40 maps and 214 plain labels) is still served whole."""
    (bad,) = hostile.empty_maps(served.dir, 60, 200)
    (edge,) = hostile.empty_maps(served.dir, 40, 214, cluster=210)
    try:
        served.assert_good_answers()
        lines = [ln for ln in served.log_lines(bad) if "labels" in ln]
        assert len(lines) == 1 and "libpcp" in lines[0], lines
        size = served.log_size()
        for _ in range(3):
            shown = served.pmcd.run("pminfo", "-l", f"mmv.{bad.name}.v", f"mmv.{edge.name}.v")
            assert shown.returncode == 0, shown.stderr
        assert served.log_size() == size, served.pmcd.agent_log()[size:]
        text = shown.stdout.split(f"mmv.{edge.name}.v")[1]
        assert '"e0":{}' in text and '"l213":213' in text, text[:500]
        assert "libpcp" in pmda_mmv("check", str(bad))
        assert "libpcp" not in pmda_mmv("check", str(edge))
    finally:
        bad.unlink()
        edge.unlink()


def link_stream(target: Path, links: list[Path], stop: threading.Event) -> None:
    """A new symlink to ``target`` beside it every 20 ms until ``stop``."""
    while not stop.is_set():
        link = target.with_name(f"s{len(links):04d}")
        link.symlink_to(target.name)
        links.append(link)
        time.sleep(0.02)


@pytest.mark.pmcd
def test_a_stream_of_heavy_new_files_cannot_starve_a_small_new_file(
    request: pytest.FixtureRequest,
) -> None:
    """Finding 4: a new name every 20 ms for a file that costs more than half the budget
    to load (symlinks to one 16 MB file of 480,000 values: each is served under its own
    name, so each is loaded).  New names went first and the first queued file always
    loaded, so a victim's small new file stayed ``pending`` for the whole stream.  Heavy
    files now take turns with the others: the victim is served within a few requests."""
    require_pcp()
    for base in kept_dir(request, "pmda-mmv-bounded3-", "bounded work directory"):
        mmv_dir = make_dir(base / "tmp" / "mmv", 0o1777)
        (big,) = hostile.big_files(mmv_dir, 1, 80, 6000)
        agent = our_agent(mmv_dir, "--max-total", "100000", "--status-metrics")
        pmcd = PrivatePmcd(base / "pmcd", [agent], agent_timeout=None)
        stop = threading.Event()
        links: list[Path] = []
        writer = threading.Thread(target=link_stream, args=(big, links, stop), daemon=True)
        try:
            pmcd.start()
            pids = agent_pids(pmcd)
            writer.start()
            time.sleep(1.0)
            mmvbuild.single(9, 4242).write(mmv_dir / "victim")
            want = ["mmv.victim.v", "1", "4242"]
            probes = 1
            while (got := probe(pmcd, "mmv.victim.v")) != want:  # each: a few requests
                probes += 1
                if probes > 10:
                    states = pmcd.run("pminfo", "-f", "mmv.control.file.state").stdout
                    victim = [ln for ln in states.splitlines() if "victim" in ln]
                    pytest.fail(f"victim not served: {got} {victim}; {len(links)} links")
            print("victim served at probe", probes, "of the stream's", len(links), "links")
            assert agent_pids(pmcd) == pids
        finally:
            stop.set()
            if writer.is_alive():
                writer.join()
            pmcd.stop()
            for path in [*links, big, mmv_dir / "victim"]:
                path.unlink(missing_ok=True)


def test_memory_per_served_name_is_cut(tmp_path: Path) -> None:
    """Finding 5 (in part): the memory one served name costs the scanner, the catalogue and
    the serving model (python3-pcp's own tables aside), traced by tracemalloc: 1,957 bytes
    before (a closure, five cells, a tuple and a key list per name for its table builder),
    1,429 now; RSS 2,201 -> 1,593 bytes a name (100 files x 1,000 names)."""
    hostile.prefixed_names(tmp_path, 20, 1000)
    gc.collect()
    tracemalloc.start()
    try:
        catalogue = Catalogue()
        scanner = Scanner(str(tmp_path), catalogue, budget=None)
        model = Serving(catalogue, print)
        plan = model.apply(scanner.refresh(True))
        for cluster, item in plan.pmids:
            model.serve_metric(cluster, item)
        gc.collect()
        per_name = tracemalloc.get_traced_memory()[0] / len(model.served_names)
    finally:
        tracemalloc.stop()
    assert len(model.served_names) == 20_000
    assert per_name < 1_600, per_name


def test_served_names_stop_at_max_names_and_resume(tmp_path: Path) -> None:
    """Finding 5: nothing bounded the names of all files together (1,000 files of 1,000
    metrics: 2.85 GB).  ``--max-names``: a file that would take the served files past it
    is refused naming the option, and served once a file leaves."""
    assert parse_args(["--max-names", "2500"]).max_names == 2500
    hostile.prefixed_names(tmp_path, 3, 1000)
    scanner = Scanner(str(tmp_path), Catalogue(), check_interval=0, budget=None, max_names=2500)
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f000", "f001"]
    assert "--max-names" in scanner.states["f002"].last_problem
    (tmp_path / "f000").unlink()
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f001", "f002"]
