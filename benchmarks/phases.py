"""The measurements of one benchmark run (see benchmarks/README.md for what each means).

Phase 1 (one private pmcd per agent, all running): full fetches at each size, interleaved
across agents; new-file latency; RSS; the 1M file (pmda-mmv only); py-spy profile.
Phase 2 (fresh pmcds, empty directories): for 10, 100, 1,000 files: first request after
the files appear, pmstore reload + fetch, a fetch of one small file while all are served,
and agent restart to ready.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from benchmarks import agents, pyspy, report
from benchmarks.client import Client, median_ms, poll
from benchmarks.writer import Shape, Writer
from tests.support.pmcd import AgentSpec, PrivatePmcd, c_agent, make_dir, our_agent

FETCH_SHAPES = {
    "1k": Shape("s1k", 10, 100, 1),
    "10k": Shape("s10k", 100, 100, 2),
    "100k": Shape("s100k", 100, 1000, 3),
    "1M": Shape("s1m", 100, 10000, 4),
}
BIG = "1M"  # pmda-mmv (and the floors) only: the C agent is O(values^2) per fetch
NEW_FILE = Shape("new", 10, 100, 100)  # name and cluster get a per-repeat suffix
SCAN_FILE = Shape("f", 10, 10, 1000)  # 100 values per file in the rescan/startup phase
SCAN_KEYS = (
    "add_ms",
    "add_max_ms",
    "add_requests",
    "reload_ms",
    "startup_ms",
    "fetch_ms",
    "fetch_mean_ms",
    "fetch_idle_ms",
)
MANY = 10_000  # files from which only their appearing is measured (add, longest request)
HUP_AFTER = 0.02  # seconds an agent may stay dead before pmcd gets a SIGHUP (see restart_ms)
STEADY = 0.5  # seconds of back-to-back fetches of one file while N files are served
IDLE = (9, 0.1)  # fetches of one file, each after this many seconds without requests
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Plan:
    """How much to measure: fetch ``sizes`` and median-of-``repeats`` per size (``c_repeats``
    caps the C agent where one fetch takes seconds), new-file repeats, rescan file counts,
    reload repeats, restarts per startup figure, and whether to profile."""

    mode: str
    sizes: tuple[str, ...]
    repeats: dict[str, int]
    c_repeats: dict[str, int]
    new_file: int
    scan_files: tuple[int, ...]
    reload: int
    restarts: int
    profile: bool


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def vm_rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` in kB, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Bench:
    """One run: work directory, writer, private pmcds and clients, and the results.

    ``candidate``: a directory holding another ``pmda_mmv`` package (a scratch copy with a
    proposed change), run as one more agent ("cand") through PYTHONPATH."""

    def __init__(
        self, plan: Plan, workdir: Path, candidate: Path | None = None, raw: Path = RESULTS
    ) -> None:
        self.plan = plan
        self.raw = raw  # py-spy raw output goes to <raw>-<profile key>.txt
        self.workdir = workdir
        self.candidate = candidate
        self.mmv = ("c", "ours", "cand") if candidate else ("c", "ours")
        self.ours = ("ours", "cand") if candidate else ("ours",)
        self.writer = Writer()
        self.pmcds: dict[str, PrivatePmcd] = {}
        self.clients: dict[str, Client] = {}
        self.dirs: dict[str, Path] = {}
        self.results: dict[str, Any] = {"fetch": {}, "new_file": {}, "scan": {}, "rss": {}}
        self.floor_bin = agents.build_floor(make_dir(workdir / "bin"))

    # -- agents

    def spec(self, a: str, shapes: list[Shape]) -> AgentSpec:
        if a == "c":
            return c_agent(self.dirs["c"].parent)
        if a == "ours":
            return our_agent(self.dirs["ours"])
        if a == "cand":
            env = {"PYTHONPATH": str(self.candidate)}
            return dataclasses.replace(our_agent(self.dirs["cand"]), env=env)
        if a == "floor":
            return agents.floor_spec(self.floor_bin, shapes)
        return agents.pyfloor_spec(shapes)

    def start_agents(
        self, tag: str, which: tuple[str, ...], shapes: list[Shape], files: list[Shape]
    ) -> None:
        """One MMV directory per mmv agent holding ``files`` (written once by libpcp_mmv
        into the C agent's; the others get hard links: the same inodes), and one private
        pmcd per agent in ``which``; the floors serve ``shapes``."""
        base = agents.fresh_dir(self.workdir / tag)
        self.dirs = {a: make_dir(base / f"files-{a}" / "mmv") for a in self.mmv}
        for shape in files:
            self.writer.write(self.dirs["c"] / shape.name, shape)
            for a in self.mmv[1:]:
                os.link(self.dirs["c"] / shape.name, self.dirs[a] / shape.name)
        for a in which:
            self.pmcds[a] = agents.start(base / f"pmcd-{a}", self.spec(a, shapes))
            self.clients[a] = Client(agents.LABELS[a], self.pmcds[a].host)
            log(f"{agents.LABELS[a]}: pmcd {self.pmcds[a].host}, agent pid {self.pid(a)}")

    def stop_agents(self) -> None:
        for pmcd in self.pmcds.values():
            pmcd.stop()
        self.pmcds.clear()
        self.clients.clear()

    def pid(self, a: str) -> int:
        return agents.agent_pid(self.pmcds[a])

    # -- full fetch

    def fetch_phase(self, sizes: tuple[str, ...]) -> None:
        for size in sizes:
            shape = FETCH_SHAPES[size]
            who = [a for a in self.clients if a != "c" or size != BIG]
            pmids = {a: self.clients[a].lookup(shape.metric_names(agents.PREFIX[a])) for a in who}
            for a in who:  # warm-up, and the values must be the writer's
                self.clients[a].fetch_checked(pmids[a], shape, a in self.mmv)
            counts = {a: self.repeats(a, size) for a in who}
            samples: dict[str, list[float]] = {a: [] for a in who}
            for r in range(max(counts.values())):
                for a in who:
                    if r < counts[a]:
                        samples[a].append(self.clients[a].fetch_checked(pmids[a], shape, False))
            self.results["fetch"][size] = {
                "values": shape.values,
                "shape": f"{shape.metrics} metrics x {shape.instances} instances",
                "repeats": counts,
                "ms": {a: median_ms(s) for a, s in samples.items()},
                "min_ms": {a: min(s) * 1000 for a, s in samples.items()},
            }
            log(f"fetch {size}: " + report.fmt_ms(self.results["fetch"][size]["ms"]))

    def repeats(self, agent: str, size: str) -> int:
        n = self.plan.repeats[size]
        return min(n, self.plan.c_repeats.get(size, n)) if agent == "c" else n

    # -- new file

    def new_file_phase(self, served: int) -> None:
        """A writer completes a new file in each mmv agent's directory in turn; time until
        a request pair (lookup of its names, fetch of all its values) succeeds, and count
        the requests.  ``served``: files to expect once the new ones are removed."""
        lat: dict[str, list[float]] = {a: [] for a in (*self.mmv, "floor")}
        reqs: dict[str, list[int]] = {a: [] for a in self.mmv}
        floor_shape = FETCH_SHAPES["1k"]
        floor_names = floor_shape.metric_names(agents.PREFIX["floor"])
        for k in range(self.plan.new_file):
            shape = Shape(f"{NEW_FILE.name}{k:02d}", 10, 100, NEW_FILE.cluster + k)
            for a in self.mmv:
                client, names = self.clients[a], shape.metric_names("mmv")
                done = self.writer.write(self.dirs[a] / shape.name, shape)
                _, n = poll(partial(_served, client, names, shape))
                lat[a].append(time.perf_counter() - done)
                reqs[a].append(n)
            fl = self.clients["floor"]
            t0 = time.perf_counter()
            fl.fetch_checked(fl.lookup(floor_names), floor_shape, False)
            lat["floor"].append(time.perf_counter() - t0)
        self.results["new_file"] = {
            "file": f"{NEW_FILE.metrics} metrics x {NEW_FILE.instances} instances",
            "repeats": self.plan.new_file,
            "ms": {a: median_ms(v) for a, v in lat.items()},
            "max_ms": {a: max(v) * 1000 for a, v in lat.items()},
            "requests_max": {a: max(v) for a, v in reqs.items()},
            "requests": reqs,
        }
        log("new file: " + report.fmt_ms(self.results["new_file"]["ms"]))
        self.remove_files(f"{NEW_FILE.name}*", expect=served)

    def remove_files(self, pattern: str, expect: int, only: str | None = None) -> None:
        """Remove ``pattern`` from the mmv agents' directories (or ``only``'s) and wait
        until each serves ``expect`` files."""
        for a in self.mmv if only is None else (only,):
            for path in self.dirs[a].glob(pattern):
                path.unlink()
            files = self.clients[a].lookup(["mmv.control.files"])
            poll(partial(_serves, self.clients[a], files, expect))

    # -- RSS and the 1M file

    def rss(self, key: str) -> None:
        self.results["rss"][key] = {a: vm_rss_kb(self.pid(a)) for a in self.pmcds}
        log(f"RSS {key}: {self.results['rss'][key]} kB")

    def add_big_file(self) -> None:
        """The 1M file appears in each pmda-mmv directory (written, then linked): time
        until its names resolve and one of its metrics (10k values) is fetched."""
        shape = FETCH_SHAPES[BIG]
        one = Shape(shape.name, 1, shape.instances, shape.cluster)
        visible = {}
        for a in self.ours:
            path = self.dirs[a] / shape.name
            if a == "ours":
                done = self.writer.write(path, shape)
            else:
                os.link(self.dirs["ours"] / shape.name, path)
                done = time.perf_counter()
            client, names = self.clients[a], shape.metric_names("mmv")

            def loaded(c: Client = client, m: list[str] = names) -> bool:
                if c.try_lookup(m) is None:
                    return False
                c.fetch_checked(c.lookup(m[:1]), one, True)
                return True

            poll(loaded, timeout=120)
            visible[a] = (time.perf_counter() - done) * 1000
        self.results["rss"]["big_file_visible_ms"] = visible

    # -- rescan and startup

    def scan_phase(self) -> None:
        which = (*self.mmv, "floor")
        self.start_agents("scan", which, [FETCH_SHAPES["1k"], scan_shape(0)], [])
        self.results["rss"]["no_files"] = {a: vm_rss_kb(self.pid(a)) for a in self.ours}
        for n in self.plan.scan_files:
            row: dict[str, Any] = {k: {} for k in SCAN_KEYS}
            for a in self.mmv:
                self.scan_one(a, n, row)
            row["add_ms"]["floor"] = row["reload_ms"]["floor"] = self.floor_round_trip()
            self.steady_fetch("floor", agents.PREFIX["floor"], row)
            row["startup_ms"]["floor"] = self.startup_ms("floor", _floor_ready(self))
            if n < MANY:
                row["startup_ms"]["pyfloor"] = self.pyfloor_startup_ms(n)
            self.results["scan"][str(n)] = row
            log(
                f"{n} files: add {report.fmt_ms(row['add_ms'])}; reload "
                f"{report.fmt_ms(row['reload_ms'])}; startup {report.fmt_ms(row['startup_ms'])}"
                f"; fetch of one file {report.fmt_ms(row['fetch_mean_ms'])}"
            )

    def scan_one(self, a: str, n: int, row: dict[str, Any]) -> None:
        """N files for agent ``a``: ``plan.restarts`` times, the files are written and the
        first request pair that finds them all is timed (then they are removed); with the
        files present: reload, steady fetches and restarts."""
        client = self.clients[a]
        shapes = [scan_shape(i) for i in range(n)]
        last = shapes[-1].metric_names("mmv")[:1]
        files = client.lookup(["mmv.control.files"])

        slowest = [0.0]  # the longest single request (a lookup or a fetch), seconds

        def timed_call(call: Callable[[], Any]) -> Any:
            t0 = time.perf_counter()
            try:
                return call()
            finally:
                slowest[0] = max(slowest[0], time.perf_counter() - t0)

        def ready() -> bool:
            return client.try_lookup(last) is not None and client.fetch_int(files) == n

        def timed() -> bool:
            return (
                timed_call(partial(client.try_lookup, last)) is not None
                and timed_call(partial(client.fetch_int, files)) == n
            )

        adds, reqs = [], []
        many = n >= MANY  # appearing at once only: the C agent's restart takes minutes
        for r in range(1 if many else self.plan.restarts):
            if r:
                self.remove_files(f"{SCAN_FILE.name}*", expect=0, only=a)
            done = 0.0
            for shape in shapes:
                done = self.writer.write(self.dirs[a] / shape.name, shape)
            reqs.append(poll(timed, timeout=120)[1])
            adds.append(time.perf_counter() - done)
        row["add_ms"][a] = median_ms(adds)
        row["add_max_ms"][a] = round(slowest[0] * 1000, 3)
        if many:  # the last figure: the files stay until the pmcds stop
            return
        row["add_requests"][a] = max(reqs)
        reload = client.lookup(["mmv.control.reload"])
        samples = []
        for _ in range(self.plan.reload):
            t0 = time.perf_counter()
            client.store_int(reload, 1)
            got = client.fetch_int(files)
            samples.append(time.perf_counter() - t0)
            if got != n:
                raise RuntimeError(f"{client.label}: control.files {got} after reload, not {n}")
        row["reload_ms"][a] = median_ms(samples)
        self.steady_fetch(a, "mmv", row)
        row["startup_ms"][a] = self.startup_ms(a, ready)
        self.remove_files(f"{SCAN_FILE.name}*", expect=0, only=a)

    def pyfloor_startup_ms(self, n: int) -> float:
        """The python3-pcp floor of startup with ``n`` files: ``pyfloor.py``
        registering the metrics and indoms of ``n`` scan files from its command line, no
        file read or validated, timed as :meth:`startup_ms` (restart to its last name
        resolving).  No agent built on ``pcp.pmda.PMDA`` starts faster than this."""
        shapes = [scan_shape(i) for i in range(n)]
        base = agents.fresh_dir(self.workdir / f"pyfloor-{n}")
        self.pmcds["pyfloor"] = agents.start(base, agents.pyfloor_spec(shapes))
        client = self.clients["pyfloor"] = Client(
            agents.LABELS["pyfloor"], self.pmcds["pyfloor"].host
        )
        last = shapes[-1].metric_names(agents.PREFIX["pyfloor"])[:1]
        try:
            return self.startup_ms("pyfloor", partial(_resolves, client, last))
        finally:
            self.pmcds.pop("pyfloor").stop()
            self.clients.pop("pyfloor")

    def steady_fetch(self, a: str, prefix: str, row: dict[str, Any]) -> None:
        """Fetches of the first file (100 values) while the others are served: back to back
        for STEADY seconds (median, and mean, which includes periodic work such as
        pmda-mmv's generation checks of every served file), and the median of IDLE fetches
        each after a pause, as a logger's requests come (each pays the periodic work)."""
        client = self.clients[a]
        shape = scan_shape(0)
        pmids = client.lookup(shape.metric_names(prefix))
        samples: list[float] = []
        end = time.perf_counter() + STEADY
        while time.perf_counter() < end or len(samples) < 11:
            samples.append(client.fetch_checked(pmids, shape, False))
        row["fetch_ms"][a] = median_ms(samples)
        row["fetch_mean_ms"][a] = statistics.fmean(samples) * 1000
        idle = []
        for _ in range(IDLE[0]):
            time.sleep(IDLE[1])
            idle.append(client.fetch_checked(pmids, shape, False))
        row["fetch_idle_ms"][a] = median_ms(idle)

    def floor_round_trip(self) -> float:
        fl = self.clients["floor"]
        shape = FETCH_SHAPES["1k"]
        names = shape.metric_names(agents.PREFIX["floor"])
        samples = []
        for _ in range(self.plan.reload):
            t0 = time.perf_counter()
            fl.fetch_checked(fl.lookup(names), shape, False)
            samples.append(time.perf_counter() - t0)
        return median_ms(samples)

    def startup_ms(self, a: str, ready: Callable[[], bool]) -> float:
        """Median of ``plan.restarts`` restarts (a rare restart takes far longer)."""
        return statistics.median(self.restart_ms(a, ready) for _ in range(self.plan.restarts))

    def restart_ms(self, a: str, ready: Callable[[], bool]) -> float:
        """Kill the agent (SIGKILL) and time until pmcd's restarted agent answers
        ``ready``: agent restart to ready, pmcd's part included (the C floor's figure is
        that part: noticing the death, reaping, forking, the handshake).

        pmcd notices the death when it next talks to the agent (requests are sent until
        then) and restarts the agent at once when a client request made it notice, else
        only a minute later: then (the dead agent reaped and no new one for HUP_AFTER
        seconds) a SIGHUP makes it restart it now."""
        pmcd = self.pmcds[a]
        assert pmcd.proc is not None
        old = psutil.Process(self.pid(a))
        orphaned = [float("inf")]  # when the agent was first seen reaped with no successor

        def answered() -> bool:
            try:
                if ready():
                    return True
            except Exception:
                pass
            if _reaped(old) and not [p for p in pmcd.agent_processes() if p != old.pid]:
                orphaned[0] = min(orphaned[0], time.perf_counter())
                if time.perf_counter() - orphaned[0] > HUP_AFTER and pmcd.proc is not None:
                    pmcd.proc.send_signal(signal.SIGHUP)
                    orphaned[0] = float("inf")
            return False

        t0 = time.perf_counter()
        old.send_signal(signal.SIGKILL)
        poll(answered, timeout=120)
        ms = (time.perf_counter() - t0) * 1000
        if ms > 5000:
            log(f"{agents.LABELS[a]}: restart took {ms:.0f} ms; pmcd log:\n{pmcd.pmcd_log()}")
        return ms

    # -- the whole run

    def run(self) -> dict[str, Any]:
        """All phases; every pmcd (and so every agent) is stopped on the way out."""
        try:
            self.fetch_run()
            self.stop_agents()
            self.scan_phase()
        finally:
            self.stop_agents()
        return self.results

    def fetch_run(self) -> None:
        shapes = [FETCH_SHAPES[s] for s in self.plan.sizes]
        files = [s for s in shapes if s.name != FETCH_SHAPES[BIG].name]
        self.start_agents("fetch", (*self.mmv, "floor", "pyfloor"), shapes, files)
        self.fetch_phase(tuple(s for s in self.plan.sizes if s != BIG))
        self.new_file_phase(len(files))
        self.rss("fetch_files")
        if BIG in self.plan.sizes:
            self.add_big_file()
            self.rss("with_1M_loaded")
            self.fetch_phase((BIG,))
            self.rss("with_1M_fetched")
        if self.plan.profile:
            for a in self.ours:
                key = "profile" if a == "ours" else "profile_candidate"
                out = self.raw.with_name(f"{self.raw.name}-{key}.txt")
                self.results[key] = pyspy.record(
                    self.pid(a), self.clients[a], FETCH_SHAPES["100k"], out
                )


def scan_shape(i: int) -> Shape:
    """File ``i`` of a scan: a cluster each for the first 3,000, then sharing those
    clusters at other items (4,095 clusters cannot hold 10,000 files)."""
    return Shape(f"{SCAN_FILE.name}{i:05d}", 10, 10, SCAN_FILE.cluster + i % 3000, i // 3000 * 10)


def _served(client: Client, names: list[str], shape: Shape, check: bool = True) -> bool:
    """One request pair: the file's names resolve and a fetch returns all its values (the
    writer's, with ``check``)."""
    pmids = client.try_lookup(names)
    if pmids is None:
        return False
    client.fetch_checked(pmids, shape, check)
    return True


def _resolves(client: Client, names: list[str]) -> bool:
    """One lookup: ``names`` resolve."""
    return client.try_lookup(names) is not None


def _serves(client: Client, files: Any, n: int) -> bool:
    """``mmv.control.files`` (PMID array ``files``) reads ``n``."""
    return client.fetch_int(files) == n


def _reaped(proc: psutil.Process) -> bool:
    """The process is gone: dead and reaped by its parent (pmcd)."""
    try:
        proc.status()
    except psutil.NoSuchProcess:
        return True
    return False


def _floor_ready(bench: Bench) -> Callable[[], bool]:
    fl = bench.clients["floor"]
    shape = FETCH_SHAPES["1k"]
    names = shape.metric_names(agents.PREFIX["floor"])

    def ready() -> bool:
        return _served(fl, names, shape, check=False)

    return ready
