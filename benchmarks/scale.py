"""Cost at scale: memory per served name, and the cost of one change among many names.

One private pmcd per (agent, population), one at a time: the C pmdammv, pmda-mmv, the
candidate (``--candidate DIR``) and ``pyfloor.py`` (a python3-pcp PMDA given the same
names on its command line: python3-pcp's own memory per name).  Populations: ``empty``
(no file), ``plain`` (FILES files of METRICS singular metrics, written by libpcp_mmv, no
help text) and ``help`` (the same with one-line and long help text, the same text for
metric j of every file, as for many processes of one application).  Figures:

* RSS per served name: (the agent's RSS with a population - its RSS with none) / names,
  after one lookup and fetch of a metric of every file.
* new file: in ``plain``, a new file of one metric is written; the time from the writer's
  completion until a lookup and fetch of its metric answer (median of REPEATS).
* rewrite: in ``plain``, one file of METRICS metrics is written again (same names); the
  time of the next request (a fetch of its first metric) and until it is answered.
* python3-pcp floor of a change: in this process, what cpmda does at any change of its
  tables (``set_need_refresh``): the namespace rebuilt from its name dictionary
  (``cpmda.pmns_refresh``) and the metric table rehashed (libpcp_pmda's ``pmdaRehash``),
  for the same names plus one (median of REPEATS); cpmda's copy of the table (in C) is
  left out, so this is a lower bound.

    .venv/bin/python benchmarks/scale.py [--files N] [--metrics M] [--repeats R]
                                         [--candidate DIR] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from benchmarks import agents, standalone
from benchmarks.client import Client, poll
from benchmarks.writer import Shape
from pmda_mmv.mmvfile import layout
from tests.support.pmcd import AgentSpec, PrivatePmcd, c_agent, make_dir, our_agent
from tests.support.writers.libpcp_mmv import Library, Registry, library

RESULTS = Path(__file__).resolve().parent / "results"
POPULATIONS = ("empty", "plain", "help")
LABELS = {"c": "C pmdammv", "ours": "pmda-mmv", "cand": "candidate", "pyfloor": "py floor"}


@dataclasses.dataclass(frozen=True)
class Population:
    """FILES files ``fNNN`` of METRICS singular U64 counters ``mNNN``; file k has cluster
    k + 1; ``helped``: each metric has help text (the same for metric j of every file)."""

    files: int
    metrics: int
    helped: bool

    @property
    def names(self) -> int:
        return self.files * self.metrics


def write_file(lib: Library, path: Path, cluster: int, metrics: int, helped: bool) -> float:
    """One libpcp_mmv file; returns when the writer completed it (``time.perf_counter``)."""
    r = Registry(path, cluster, lib=lib)
    try:
        for j in range(metrics):
            short = f"requests of kind {j} served" if helped else None
            long = f"Requests of kind {j} served since the process started." if helped else None
            r.metric(f"m{j:03d}", j, layout.TYPE_U64, layout.SEM_COUNTER, 0, None, short, long)
        r.start()
        return time.perf_counter()
    finally:
        r.free()


def write_population(lib: Library, mmv_dir: Path, pop: Population) -> None:
    for k in range(pop.files):
        write_file(lib, mmv_dir / f"f{k:03d}", k + 1, pop.metrics, pop.helped)


def spec(agent: str, mmv_dir: Path, pop: Population, candidate: Path | None) -> AgentSpec:
    if agent == "c":
        return c_agent(mmv_dir.parent)
    if agent == "pyfloor":
        shapes = [Shape(f"f{k:03d}", pop.metrics, 1, k + 1) for k in range(pop.files)]
        shapes = shapes or [Shape("f000", 1, 1, 1)]  # it needs a name to serve
        return agents.pyfloor_spec(shapes)
    extra = ("--max-names", str(max(500_000, 2 * pop.names)))
    if agent == "cand":
        assert candidate is not None
        made = our_agent(mmv_dir, *extra)
        return dataclasses.replace(made, env={"PYTHONPATH": str(candidate)})
    return our_agent(mmv_dir, *extra)


def first_names(agent: str, pop: Population) -> list[str]:
    root = "pyfloor" if agent == "pyfloor" else "mmv"
    return [f"{root}.f{k:03d}.m000" for k in range(pop.files)]


def settle(client: Client, agent: str, pop: Population) -> None:
    """Wait until every file is served, then fetch one metric of each."""
    names = first_names(agent, pop)
    if names:
        poll(lambda: client.try_lookup(names) is not None, timeout=120.0)
        client.ctx.pmFreeResult(client.ctx.pmFetch(client.lookup(names)))


def rss(pmcd: PrivatePmcd) -> int:
    return int(psutil.Process(agents.agent_pid(pmcd)).memory_info().rss)


def one_value(client: Client, name: str) -> bool:
    pmids = client.try_lookup([name])
    if pmids is None:
        return False
    res = client.ctx.pmFetch(pmids)
    try:
        return bool(res.contents.get_numval(0) == 1)
    finally:
        client.ctx.pmFreeResult(res)


def changes(
    lib: Library, client: Client, mmv_dir: Path, pop: Population, repeats: int
) -> dict[str, float]:
    """The new-file and rewrite figures of one agent serving ``plain`` (milliseconds)."""
    new, first, answered = [], [], []
    for r in range(repeats):
        done = write_file(lib, mmv_dir / f"new{r}", 1000 + r, 1, False)
        name = f"mmv.new{r}.m000"
        poll(lambda name=name: one_value(client, name))  # type: ignore[misc]
        new.append(time.perf_counter() - done)
        pmids = client.lookup(["mmv.f000.m000"])
        done = write_file(lib, mmv_dir / "f000", 1, pop.metrics, False)
        seconds, res = client.fetch_once(pmids)
        client.ctx.pmFreeResult(res)
        first.append(seconds)
        poll(lambda: one_value(client, "mmv.f000.m000"))
        answered.append(time.perf_counter() - done)
        time.sleep(0.5)
    return {
        "new_file_ms": _ms(statistics.median(new)),
        "rewrite_next_request_ms": _ms(statistics.median(first)),
        "rewrite_answered_ms": _ms(statistics.median(answered)),
    }


def floor_change(pop: Population, repeats: int) -> dict[str, float]:
    """python3-pcp alone: its rebuild at a change of its tables, for ``pop``'s names plus
    one (see the module docstring); milliseconds, median of ``repeats``."""
    import cpmda
    from pcp.pmda import pmdaMetric

    from benchmarks.rehash import Agent

    names = {}
    for k in range(pop.files):
        for j in range(pop.metrics):
            names[(70 << 22) | ((k + 1) << 10) | j] = f"mmv.f{k:03d}.m{j:03d}"
    metrics = []
    for pmid in names:
        m = pmdaMetric.__new__(pmdaMetric)
        m.m_desc.pmid = pmid
        metrics.append(m)
    agent, pmns, table = Agent(), [], []
    for r in range(repeats):
        pmid = (70 << 22) | ((1000 + r) << 10)
        names[pmid] = f"mmv.new{r}.m000"
        m = pmdaMetric.__new__(pmdaMetric)
        m.m_desc.pmid = pmid
        metrics.append(m)
        copied = (pmdaMetric * len(metrics))(*metrics)  # cpmda's copy, in C: not timed
        t = time.perf_counter()
        cpmda.set_need_refresh()
        cpmda.pmns_refresh(names)
        t1 = time.perf_counter()
        agent.rehash(copied)
        table.append(time.perf_counter() - t1)
        pmns.append(t1 - t)
    return {
        "pmns_rebuild_ms": _ms(statistics.median(pmns)),
        "rehash_ms": _ms(statistics.median(table)),
        "change_ms": _ms(statistics.median(pmns) + statistics.median(table)),
    }


def measure(
    agent: str, pop: Population, candidate: Path | None, workdir: Path, repeats: int
) -> dict[str, Any]:
    lib = library()
    key = f"{agent}-{'help' if pop.helped else 'plain' if pop.files else 'empty'}"
    mmv_dir = make_dir(workdir / key / "tmp" / "mmv")
    write_population(lib, mmv_dir, pop)
    pmcd = agents.start(workdir / key / "pmcd", spec(agent, mmv_dir, pop, candidate))
    try:
        client = Client(key, pmcd.host)
        settle(client, agent, pop)
        out: dict[str, Any] = {"rss": rss(pmcd), "load": standalone.load()}
        if pop.files and not pop.helped and agent != "pyfloor":
            out.update(changes(lib, client, mmv_dir, pop, repeats))
        return out
    finally:
        pmcd.stop()
        shutil.rmtree(workdir / key, ignore_errors=True)


def run(a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    who = ["c", "ours", *(["cand"] if a.candidate else []), "pyfloor"]
    pops = {
        "empty": Population(0, a.metrics, False),
        "plain": Population(a.files, a.metrics, False),
        "help": Population(a.files, a.metrics, True),
    }
    out: dict[str, Any] = {}
    for agent in who:
        got = {p: measure(agent, pops[p], a.candidate, workdir, a.repeats) for p in POPULATIONS}
        for p in ("plain", "help"):
            got[p]["bytes_per_name"] = round((got[p]["rss"] - got["empty"]["rss"]) / pops[p].names)
        out[agent] = got
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def table(doc: dict[str, Any]) -> str:
    r, n = doc["agents"], doc["files"] * doc["metrics"]
    lines = [
        f"{doc['files']} files x {doc['metrics']} metrics ({n:,} names), {doc['when']}, "
        f"load {doc['load']}",
        f"{'agent':<12}{'B/name':>8}{'B/name help':>13}{'new file':>11}{'rewrite next':>14}"
        f"{'rewrite done':>14}",
    ]
    for a, g in r.items():
        plain = g["plain"]
        lines.append(
            f"{LABELS[a]:<12}{plain['bytes_per_name']:>8}{g['help']['bytes_per_name']:>13}"
            f"{plain.get('new_file_ms', '-'):>11}{plain.get('rewrite_next_request_ms', '-'):>14}"
            f"{plain.get('rewrite_answered_ms', '-'):>14}"
        )
    lines.append(floor_line(doc["floor"], n))
    return "\n".join(lines)


def floor_line(f: dict[str, float], names: int) -> str:
    """:func:`floor_change`'s figures ``f`` at ``names`` names, as one line."""
    return (
        f"python3-pcp floor of one change among {names:,} names: {f['change_ms']} ms "
        f"(namespace {f['pmns_rebuild_ms']} ms, pmdaRehash {f['rehash_ms']} ms)"
    )


def main(argv: list[str] | None = None) -> int:
    p = standalone.parser("benchmarks/scale.py", __doc__, RESULTS / "scale.json")
    p.add_argument("--files", type=int, default=100, help="files (default 100)")
    p.add_argument("--metrics", type=int, default=1000, help="metrics per file (default 1000)")
    p.add_argument("--repeats", type=int, default=5, help="repeats of each change (default 5)")
    p.add_argument("--quick", action="store_true", help="10 files x 1,000 metrics, 3 repeats")
    a = p.parse_args(argv)
    if a.quick:
        a.files, a.repeats = 10, 3
    before = standalone.load()
    results = standalone.in_workdir("pmda-mmv-scale-", lambda workdir: run(a, workdir))
    doc = standalone.document("benchmarks/scale.py", argv, before, a.candidate, files=a.files)
    floor = floor_change(Population(a.files, a.metrics, False), a.repeats)
    doc.update(metrics=a.metrics, agents=results, floor=floor)
    standalone.write(doc, a.out)
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
