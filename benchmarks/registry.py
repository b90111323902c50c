"""The identity registry's cost (issue 22): loading it at start, saving it after a change.

Builds a registry of N remembered names (each with one indom), saves it to a temporary
directory (the same directory as the file, fsync, rename, fsync of the directory, as the
agent does before it serves a new number) and loads it back, and prints the median of
several runs of each.  The issue's bound: 4,096 names loaded in under 50 ms.

    .venv/bin/python benchmarks/registry.py [--names 4096 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pmda_mmv.namespace.registry import Registry


def filled(path: str, names: int) -> Registry:
    r = Registry(path, cap=max(names, 1))
    for k in range(names):
        key = (f"websrv_{100000 + k}", 1000)
        r.serve(key, k % 4095 + 1, 42, False, {5: 100000 + k})
        if k % 4:
            r.depart(key)
    return r


def measure(names: int, runs: int) -> tuple[float, float, int]:
    """(median load ms, median save ms, file bytes) for ``names`` remembered names."""
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "70.mmv-identity.json")
        r = filled(path, names)
        saves = []
        for _ in range(runs):
            r.dirty = True
            t = time.perf_counter()
            assert r.save()
            saves.append(time.perf_counter() - t)
        loads = []
        for _ in range(runs):
            again = Registry(path, cap=max(names, 1))
            t = time.perf_counter()
            again.load()
            loads.append(time.perf_counter() - t)
            assert len(again.records) == names
        size = Path(path).stat().st_size
    return statistics.median(loads) * 1e3, statistics.median(saves) * 1e3, size


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--names", type=int, nargs="+", default=[4096, 10_000])
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args()
    print(f"{'names':>8} {'load ms':>9} {'save ms':>9} {'bytes':>10}")
    for n in a.names:
        load, save, size = measure(n, a.runs)
        print(f"{n:>8} {load:>9.1f} {save:>9.1f} {size:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
