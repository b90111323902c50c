"""Where discovering new files goes, in process (docs/performance.md, Discovery):
``Scanner.refresh(force=True)`` over N files written by libpcp_mmv (5 metrics, an indom of
4 instances, cluster 0), split into phases by timing wrappers: listing (``os.listdir``),
reading and validating (``MmvFile.open``), cataloguing (``Catalogue.add``), and the
scanner's own work (the rest: stat, states, queue, budget, refusals).  Printed: microseconds
per file per phase, best of ``--repeats`` (a fresh scanner each time, files in the page cache).

    .venv/bin/python benchmarks/discovery.py [--files N] [--repeats R] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout, reader
from pmda_mmv.namespace import catalogue
from pmda_mmv.namespace.catalogue import Catalogue


def write(directory: Path, count: int) -> None:
    from tests.support.writers.libpcp_mmv import Registry, library

    lib = library()
    for k in range(count):
        r = Registry(directory / f"app{k:05d}", 0, lib=lib)
        try:
            r.indom(1, ((i, f"inst{i}") for i in range(4)), "four")
            for j in range(5):
                r.metric(f"m{j}", j + 1, layout.TYPE_U64, layout.SEM_COUNTER, 0, 1)
            r.start()
        finally:
            r.free()


def timed(spent: dict[str, float], phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            spent[phase] += time.perf_counter() - t0

    return wrapper


def once(directory: Path, count: int) -> dict[str, float]:
    spent = dict.fromkeys(("listing", "open+validate", "catalogue"), 0.0)
    saved = (os.listdir, reader.MmvFile.open, catalogue.Catalogue.add)
    os.listdir = timed(spent, "listing", os.listdir)  # type: ignore[assignment]
    open_ = timed(spent, "open+validate", reader.MmvFile.open.__func__)  # type: ignore[attr-defined]
    reader.MmvFile.open = classmethod(open_)  # type: ignore[method-assign,assignment]
    catalogue.Catalogue.add = timed(spent, "catalogue", catalogue.Catalogue.add)  # type: ignore[method-assign]
    try:
        scanner = Scanner(str(directory), Catalogue())
        t0 = time.perf_counter()
        scanner.refresh(force=True)
        total = time.perf_counter() - t0
    finally:
        os.listdir, reader.MmvFile.open, catalogue.Catalogue.add = saved  # type: ignore[method-assign]
    assert len(scanner.catalogue.files) == count, len(scanner.catalogue.files)
    for entry in scanner.served():
        entry.mf.close()
    spent["scanner (the rest)"] = total - sum(spent.values())
    spent["total"] = total
    return {k: v / count * 1e6 for k, v in spent.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="also print a cProfile of one run")
    a = p.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="pmda-mmv-discovery-", dir="/tmp"))
    try:
        write(directory, a.files)
        runs = [once(directory, a.files) for _ in range(a.repeats)]
        best = min(runs, key=lambda r: r["total"])
        print(f"{a.files} files, best of {a.repeats} (us per file):")
        for phase, us in best.items():
            print(f"  {phase:20} {us:8.1f}")
        if a.profile:
            prof = cProfile.Profile()
            scanner = Scanner(str(directory), Catalogue())
            prof.runcall(scanner.refresh, force=True)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    finally:
        shutil.rmtree(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
