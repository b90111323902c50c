"""A good file's fetch with 1,000 never-ready files beside it, against the same fetch
without them, per agent, in one run (the target: at most 1.2x for pmda-mmv).

One private pmcd per (agent, directory): pmda-mmv and the C pmdammv, each over a directory
holding only the good file (``clean``) and over one holding it plus N files that never
become ready (``waiting``: a third each empty, generation 0, and g1 != g2, built with
tests/support/mmvbuild.py).  The good file is libpcp_mmv's (benchmarks/writer.py, 10 metrics x 100
instances).  After a warm-up long enough for pmda-mmv's backoff to reach its longest delay,
fetches go round robin across the agents for ``--seconds``; the figure is the mean fetch
time (it includes the requests that pay for retries) and the median, and the ratio
waiting / clean of each agent.  ``--candidate DIR`` also runs the pmda_mmv package in DIR
(for example a checkout of the code before the change) the same way.

    .venv/bin/python benchmarks/notready.py [--files N] [--seconds S] [--candidate DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import agents, standalone
from benchmarks.client import Client
from benchmarks.writer import Shape, Writer
from tests.support import mmvbuild
from tests.support.pmcd import AgentSpec, PrivatePmcd, c_agent, make_dir, our_agent

GOOD = Shape("good", 10, 100, 1)
WARMUP = 8.0  # seconds: pmda-mmv's backoff reaches its 4 s delay after 6.35 s
RESULTS = Path(__file__).resolve().parent / "results"


def never_ready(path: Path, k: int) -> None:
    """One of three kinds of files that never become ready."""
    if k % 3 == 0:
        path.write_bytes(b"")
        return
    b = mmvbuild.MmvBuilder(cluster=0)
    b.metrics.append(mmvbuild.Metric("v", 1))
    b.values.append(mmvbuild.Value("v", None, 1))
    image = b.build()
    if k % 3 == 1:
        image.data[8:24] = b"\0" * 16  # generation 0
    else:
        image.data[16:24] = (b.generation + 1).to_bytes(8, sys.byteorder)  # g1 != g2
    image.write(path)


def spec(agent: str, mmv_dir: Path, candidate: Path | None) -> AgentSpec:
    if agent == "c":
        return c_agent(mmv_dir.parent)
    if agent == "cand":
        assert candidate is not None
        return dataclasses.replace(our_agent(mmv_dir), env={"PYTHONPATH": str(candidate)})
    return our_agent(mmv_dir)


def run(files: int, seconds: float, candidate: Path | None, workdir: Path) -> dict[str, Any]:
    writer = Writer()
    who = ["c", "ours", *(["cand"] if candidate else [])]
    pmcds: dict[str, PrivatePmcd] = {}
    clients: dict[str, Client] = {}
    try:
        for a in who:
            for population in ("clean", "waiting"):
                key = f"{a}-{population}"
                mmv_dir = make_dir(workdir / key / "tmp" / "mmv")
                writer.write(mmv_dir / GOOD.name, GOOD)
                if population == "waiting":
                    for k in range(files):
                        never_ready(mmv_dir / f"wait{k:04d}", k)
                pmcds[key] = agents.start(workdir / key / "pmcd", spec(a, mmv_dir, candidate))
                clients[key] = Client(key, pmcds[key].host)
        pmids = {k: c.lookup(GOOD.metric_names("mmv")) for k, c in clients.items()}
        for k, c in clients.items():
            c.fetch_checked(pmids[k], GOOD, True)
        samples: dict[str, list[float]] = {k: [] for k in clients}
        start = time.perf_counter()
        while time.perf_counter() - start < WARMUP + seconds:
            measuring = time.perf_counter() - start >= WARMUP
            for k, c in clients.items():
                t = c.fetch_checked(pmids[k], GOOD, False)
                if measuring:
                    samples[k].append(t)
    finally:
        for pmcd in pmcds.values():
            pmcd.stop()
    out: dict[str, Any] = {}
    for a in who:
        clean, waiting = samples[f"{a}-clean"], samples[f"{a}-waiting"]
        out[a] = {
            "fetches": {"clean": len(clean), "waiting": len(waiting)},
            "mean_ms": {
                "clean": _ms(statistics.fmean(clean)),
                "waiting": _ms(statistics.fmean(waiting)),
            },
            "median_ms": {
                "clean": _ms(statistics.median(clean)),
                "waiting": _ms(statistics.median(waiting)),
            },
            "max_ms": {"clean": _ms(max(clean)), "waiting": _ms(max(waiting))},
        }
        out[a]["mean_ratio"] = round(out[a]["mean_ms"]["waiting"] / out[a]["mean_ms"]["clean"], 3)
        out[a]["median_ratio"] = round(
            out[a]["median_ms"]["waiting"] / out[a]["median_ms"]["clean"], 3
        )
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


LABELS = {"c": "C pmdammv", "ours": "pmda-mmv", "cand": "candidate"}


def table(doc: dict[str, Any]) -> str:
    lines = [
        f"Good file ({GOOD.values} values) fetch with {doc['files']} never-ready files beside "
        f"it, {doc['when']} ({doc['seconds']} s measured, load {doc['load']})",
        f"{'agent':<12}{'clean mean':>12}{'waiting mean':>14}{'ratio':>8}"
        f"{'clean median':>14}{'waiting median':>16}{'ratio':>8}",
    ]
    for a, r in doc["agents"].items():
        lines.append(
            f"{LABELS[a]:<12}{r['mean_ms']['clean']:>12.3f}{r['mean_ms']['waiting']:>14.3f}"
            f"{r['mean_ratio']:>7.2f}x{r['median_ms']['clean']:>14.3f}"
            f"{r['median_ms']['waiting']:>16.3f}{r['median_ratio']:>7.2f}x"
        )
    ours = doc["agents"]["ours"]["mean_ratio"]
    lines.append(
        f"target: pmda-mmv waiting/clean <= 1.2x: {ours:.2f}x, {'met' if ours <= 1.2 else 'MISSED'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/notready.py", description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=1000, help="never-ready files (default 1000)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured time (default 20)")
    p.add_argument("--candidate", type=Path, help="also run the pmda_mmv package in DIR")
    p.add_argument("--out", type=Path, default=RESULTS / "notready.json")
    a = p.parse_args(argv)
    load = standalone.load()
    results = standalone.in_workdir(
        "pmda-mmv-notready-", lambda workdir: run(a.files, a.seconds, a.candidate, workdir)
    )
    doc = standalone.document("benchmarks/notready.py", argv, load, a.candidate, files=a.files)
    doc.update(seconds=a.seconds, agents=results)
    standalone.write(doc, a.out)
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
