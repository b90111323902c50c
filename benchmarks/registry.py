"""The identity registry's cost: loading it at start, saving it after a change, and the
cost of each new name however many are remembered.

Builds a registry of N remembered names (each with one indom), saves it to a temporary
directory as the agent does before it serves a new number, and loads it back, and prints
the median of several runs of each (``--names``).  Then (``--per-name``), for each size,
numbers new names one at a time after N remembered ones, each followed by the save the
agent makes before serving it (the journal's line appended and fsynced; the file written
whole when the journal has grown past the registry), and prints the mean, median and
slowest cost per new name, and the cost of writing the file whole (the slowest save's
bound).  The bounds: 4,096 names loaded in under 50 ms; the cost per new name flat from
100 to 100,000 names.

    .venv/bin/python benchmarks/registry.py [--names 4096 10000] [--runs 7]
        [--per-name 100 1000 10000 100000] [--new 500]
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


def filled(path: str, names: int, cap: int = 0) -> Registry:
    r = Registry(path, cap=cap or max(names, 1))
    for k in range(names):
        key = (f"websrv_{100000 + k}", 1000)
        r.serve(key, k % 4095 + 1, 42, False, {5: 100000 + k})
        if k % 4:
            r.depart(key)
    return r


def measure(names: int, runs: int) -> tuple[float, float, int]:
    """(median load ms, median whole-file save ms, file bytes) for ``names`` names."""
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "70.mmv-identity.json")
        r = filled(path, names)
        saves = []
        for _ in range(runs):
            r.dirty = True
            r._journal.close()  # the file written whole
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


def per_name(names: int, new: int) -> tuple[float, float, float, float]:
    """(mean, median, slowest ms per new name, ms to write the file whole) after ``names``
    remembered names: each new name served, then saved, as the agent does."""
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "70.mmv-identity.json")
        r = filled(path, names, cap=names + new)
        r.dirty = True
        assert r.save()  # the file as the agent left it
        costs = []
        for k in range(new):
            t = time.perf_counter()
            r.serve((f"new_{k}", 1000), (names + k) % 4095 + 1, 0, False, {5: k + 1})
            assert r.save()
            costs.append(time.perf_counter() - t)
        r.dirty = True
        r._journal.close()
        t = time.perf_counter()
        assert r.save()
        whole = time.perf_counter() - t
    ms = [c * 1e3 for c in costs]
    return statistics.mean(ms), statistics.median(ms), max(ms), whole * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--names", type=int, nargs="*", default=[4096, 10_000])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--per-name", type=int, nargs="*", default=[100, 1000, 10_000, 100_000])
    p.add_argument("--new", type=int, default=500)
    a = p.parse_args()
    if a.names:
        print(f"{'names':>8} {'load ms':>9} {'save ms':>9} {'bytes':>10}")
    for n in a.names:
        load, save, size = measure(n, a.runs)
        print(f"{n:>8} {load:>9.1f} {save:>9.1f} {size:>10}")
    if a.per_name:
        print(
            f"\n{'names':>8} {'new':>5} {'mean ms':>8} {'median':>8} {'slowest':>8} {'whole ms':>9}"
        )
    for n in a.per_name:
        mean, median, slowest, whole = per_name(n, a.new)
        print(f"{n:>8} {a.new:>5} {mean:>8.2f} {median:>8.2f} {slowest:>8.2f} {whole:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
