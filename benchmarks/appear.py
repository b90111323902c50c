"""Many large files appearing at once: a good file's worst request, and the agent's peak RSS.

One private pmcd per agent (pmcd's default agent timeout, 5 s), one at a time: the C
pmdammv, pmda-mmv and the candidate (``--candidate DIR``).  Each agent serves a directory
holding one good file (``good``, one metric); FILES files of METRICS singular metrics
(libpcp_mmv, ``benchmarks/scale.py``'s files, written beforehand beside the directory) are
then renamed into it at once, by default 1,000 x 1,000: a million names, twice pmda-mmv's
default ``--max-names`` (500,000), so that it serves the first half and refuses the rest.
Meanwhile a client fetches the good metric without pause, and a sampler reads the agent's
RSS every 20 ms.  Figures per agent:

* worst request: the longest fetch of the good metric from the renames until the agent
  settled (``mmv.control.reload`` reads 0 and the first file is served), and the median;
* fetches that failed (an error, or no value) and whether pmcd dropped the agent;
* settled: seconds from the renames until it settled; peak RSS meanwhile, and RSS then.

The python3-pcp floor is measured in this process for the names pmda-mmv serves at the
end: cpmda's namespace rebuild and ``pmdaRehash`` (``scale.floor_change``), what any agent
on ``pcp.pmda.PMDA`` pays at each change of its tables, at least once per request that
registers names.

    .venv/bin/python benchmarks/appear.py [--files N] [--metrics M] [--candidate DIR]
                                          [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from pcp.pmapi import pmErr

from benchmarks import agents, scale, standalone
from benchmarks.client import Client
from tests.support.pmcd import PrivatePmcd, make_dir
from tests.support.writers.libpcp_mmv import library

RESULTS = Path(__file__).resolve().parent / "results"
GOOD = "mmv.good.m000"
GOOD_CLUSTER = 4000
SETTLE_TIMEOUT = 300.0


class Sampler(threading.Thread):
    """The peak RSS of process ``pid``, read every ``every`` seconds until :meth:`stop`."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.every = every
        self.peak = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            self._done.wait(self.every)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


class Fetcher(threading.Thread):
    """Fetches the good metric without pause until :meth:`stop`, with the agent's
    ``mmv.control.reload`` in the same request (the only requests made meanwhile, but for
    a lookup when it reads 0): each request's time, the count of those that failed (an
    error, or no value), and the last value of ``mmv.control.reload``."""

    def __init__(self, host: str) -> None:
        super().__init__(daemon=True)
        self.client = Client("good", host)
        self.pmids = self.client.lookup([GOOD, "mmv.control.reload"])
        self.times: list[float] = []
        self.failed = 0
        self.reload = 1
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            t0 = time.perf_counter()
            try:
                res = self.client.ctx.pmFetch(self.pmids)
            except pmErr:
                self.failed += 1
                time.sleep(0.01)
                continue
            self.times.append(time.perf_counter() - t0)
            try:
                r = res.contents
                if r.get_numval(0) != 1:
                    self.failed += 1
                    time.sleep(0.01)
                if r.get_numval(1) == 1:
                    self.reload = r.get_vlist(1, 0).value.lval
            finally:
                self.client.ctx.pmFreeResult(res)

    def stop(self) -> None:
        self._done.set()
        self.join()


def stage(workdir: Path, files: int, metrics: int) -> Path:
    """The FILES files, written by libpcp_mmv into ``workdir/stage``."""
    lib, where = library(), make_dir(workdir / "stage")
    for k in range(files):
        scale.write_file(lib, where / f"f{k:03d}", k + 1, metrics, False)
    return where


def settled(control: Client, fetcher: Fetcher) -> bool:
    """Whether the agent has nothing left to load and serves the first file."""
    return fetcher.reload == 0 and control.try_lookup(["mmv.f000.m000"]) is not None


def measure(agent: str, a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    base = make_dir(workdir / agent)
    mmv_dir = make_dir(base / "tmp" / "mmv")
    staged = stage(base, a.files, a.metrics)
    scale.write_file(library(), mmv_dir / "good", GOOD_CLUSTER, 1, False)
    pop = scale.Population(a.files, a.metrics, False)
    spec = scale.spec(agent, mmv_dir, scale.Population(0, 0, False), a.candidate)
    pmcd = PrivatePmcd(base / "pmcd", [spec], timeout=60.0, agent_timeout=None)
    pmcd.start()
    try:
        return observe(pmcd, agent, staged, mmv_dir, pop)
    finally:
        pmcd.stop()
        shutil.rmtree(base, ignore_errors=True)


def observe(
    pmcd: PrivatePmcd, agent: str, staged: Path, mmv_dir: Path, pop: scale.Population
) -> dict[str, Any]:
    """Rename the staged files into ``mmv_dir`` while fetching the good metric."""
    pid = agents.agent_pid(pmcd)
    control = Client("control", pmcd.host)
    sampler, fetcher = Sampler(pid), Fetcher(pmcd.host)
    before = psutil.Process(pid).memory_info().rss
    sampler.start()
    fetcher.start()
    time.sleep(0.5)
    quiet = len(fetcher.times)
    t0 = time.perf_counter()
    for name in sorted(os.listdir(staged)):
        os.rename(staged / name, mmv_dir / name)
    time.sleep(1.0)
    while not settled(control, fetcher):
        if time.perf_counter() - t0 > SETTLE_TIMEOUT:
            break
        time.sleep(0.5)
    took = time.perf_counter() - t0
    time.sleep(0.5)
    fetcher.stop()
    peak = sampler.stop()
    during = fetcher.times[quiet:] or [float("nan")]
    alive = pmcd.agent_processes() == [pid]  # else pmcd dropped it (and restarted it)
    return {
        "worst_ms": _ms(max(during)),
        "median_ms": _ms(statistics.median(during)),
        "fetches": len(during),
        "over_1s": sum(t > 1.0 for t in during),
        "failed": fetcher.failed,
        "dropped": not alive,
        "settled_s": round(took, 2),
        "rss_before": before,
        "rss_peak": peak,
        "rss_after": psutil.Process(pid).memory_info().rss if alive else None,
        "names_served": served_names(control, agent, pop),
        "load": standalone.load(),
    }


def served_names(control: Client, agent: str, pop: scale.Population) -> int:
    """How many of the files' names the agent serves (resolvable first metrics x METRICS)."""
    names = [f"mmv.f{k:03d}.m000" for k in range(pop.files)]
    served = 0
    for name in names:
        served += control.try_lookup([name]) is not None
    return served * pop.metrics


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def run(a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    who = ["c", "ours", *(["cand"] if a.candidate else [])]
    return {agent: measure(agent, a, workdir) for agent in who}


COLUMNS: tuple[tuple[str, int, Callable[[dict[str, Any]], object]], ...] = (
    ("worst ms", 10, lambda g: g["worst_ms"]),
    ("> 1 s", 7, lambda g: g["over_1s"]),
    ("median ms", 11, lambda g: g["median_ms"]),
    ("failed", 8, lambda g: g["failed"]),
    ("dropped", 9, lambda g: g["dropped"]),
    ("settled s", 11, lambda g: g["settled_s"]),
    ("peak MB", 9, lambda g: round(g["rss_peak"] / 1e6)),
    ("after MB", 10, lambda g: "-" if g["rss_after"] is None else round(g["rss_after"] / 1e6)),
    ("names", 10, lambda g: f"{g['names_served']:,}"),
)


def table(doc: dict[str, Any]) -> str:
    title = f"{doc['files']} files x {doc['metrics']} metrics appearing at once"
    lines = [f"{title}, {doc['when']}, load {doc['load']}"]
    lines.append(f"{'agent':<12}" + "".join(f"{h:>{w}}" for h, w, _ in COLUMNS))
    for who, g in doc["agents"].items():
        cells = "".join(f"{cell(g)!s:>{w}}" for _, w, cell in COLUMNS)
        lines.append(f"{scale.LABELS[who]:<12}{cells}")
    lines.append(scale.floor_line(doc["floor"], doc["floor"]["names"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = standalone.parser("benchmarks/appear.py", __doc__, RESULTS / "appear.json")
    p.add_argument("--files", type=int, default=1000, help="files (default 1000)")
    p.add_argument("--metrics", type=int, default=1000, help="metrics per file (default 1000)")
    p.add_argument("--quick", action="store_true", help="200 files x 1,000 metrics")
    a = p.parse_args(argv)
    if a.quick:
        a.files = 200
    before = standalone.load()
    results = standalone.in_workdir("pmda-mmv-appear-", lambda workdir: run(a, workdir))
    doc = standalone.document("benchmarks/appear.py", argv, before, a.candidate, files=a.files)
    names = results["ours"]["names_served"] or a.metrics
    floor = scale.floor_change(scale.Population(names // a.metrics, a.metrics, False), 3)
    doc.update(metrics=a.metrics, agents=results, floor={**floor, "names": names})
    standalone.write(doc, a.out)
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
