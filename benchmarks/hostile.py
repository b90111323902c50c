"""A good file's fetch time beside each hostile population, C pmdammv against
pmda-mmv in the same run, both under pmcd's default agent timeout (5 s).

Two private pmcds (tests/support/pmcd.py, no ``-t``), one per agent, each serving its own directory
with a live python3-pcp ``pcp.mmv`` writer (``good``).  For each population of
tests/support/hostile.py (the sizes of tests/system/test_budget.py), the same files go into both
directories; then, alternating between the agents, ``--fetches`` timed pmFetch calls of the
good counter, each after writing a new value, each checked.  Printed per population and
agent: the first fetch (it loads the population), the median and the maximum of the others,
whether pmcd dropped the agent, and the ratio ours/C of the medians.

    .venv/bin/python benchmarks/hostile.py [--fetches N] [--only NAME...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cpmapi as c_api
from pcp.pmapi import pmContext, pmErr

from tests.support import hostile, mmvbuild
from tests.support.pmcd import PrivatePmcd, c_agent, make_dir, our_agent

GOOD = "mmv.good.py.counter"

POPULATIONS: dict[str, Callable[[Path], list[Path]]] = {"none": lambda d: [], **hostile.ATTACKS}


class Side:
    """One agent in its own pmcd, with its good file and a PMAPI context."""

    def __init__(self, label: str, base: Path, c: bool) -> None:
        self.label = label
        tmp = make_dir(base / "tmp")
        self.dir = make_dir(tmp / "mmv", 0o1777)
        spec = c_agent(tmp) if c else our_agent(self.dir)
        self.pmcd = PrivatePmcd(base / "pmcd", [spec], timeout=60.0, agent_timeout=None)
        self.good = mmvbuild.write_pcp_mmv(self.dir / "good")
        self.counter = 100
        self.pmcd.start()
        self.connect()

    def connect(self) -> None:
        self.ctx = pmContext(c_api.PM_CONTEXT_HOST, self.pmcd.host)
        self.pmids = self.ctx.pmLookupName([GOOD])

    def fetch(self) -> float | None:
        """One timed fetch of the counter just written; None when it failed or was wrong."""
        self.counter += 1
        self.good.handle.lookup_set("py.counter", "", self.counter)
        t0 = time.perf_counter()
        try:
            res = self.ctx.pmFetch(self.pmids)
        except pmErr:
            return None
        seconds = time.perf_counter() - t0
        try:
            r = res.contents
            ok = (
                r.get_numval(0) == 1
                and self.counter
                == self.ctx.pmExtractValue(
                    r.get_valfmt(0), r.get_vlist(0, 0), c_api.PM_TYPE_U64, c_api.PM_TYPE_U64
                ).ull
            )
        finally:
            self.ctx.pmFreeResult(res)
        return seconds if ok else None

    def restart(self) -> None:
        self.pmcd.stop()
        self.pmcd.start()
        self.connect()

    def stop(self) -> None:
        self.pmcd.stop()
        self.good.handle.stop()


def measure(sides: list[Side], build: Callable[[Path], list[Path]], fetches: int) -> dict:
    out: dict[str, dict[str, object]] = {}
    written = {s.label: build(s.dir) for s in sides}
    times: dict[str, list[float | None]] = {s.label: [] for s in sides}
    for _ in range(fetches):
        for s in sides:
            times[s.label].append(s.fetch())
    for s in sides:
        t = times[s.label]
        rest = [x for x in t[1:] if x is not None]
        dropped = any(x is None for x in t)
        out[s.label] = {
            "first_ms": None if t[0] is None else round(t[0] * 1e3, 2),
            "median_ms": round(statistics.median(rest) * 1e3, 2) if rest else None,
            "max_ms": round(max(rest) * 1e3, 2) if rest else None,
            "failed": sum(1 for x in t if x is None),
        }
        for p in written[s.label]:
            p.unlink()
        if dropped:
            s.restart()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fetches", type=int, default=20)
    p.add_argument("--only", nargs="*", help="populations whose name contains one of these")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pmda-mmv-hostile-bench-", dir="/tmp"))
    base.chmod(0o755)
    sides = [Side("C pmdammv", base / "c", c=True), Side("pmda-mmv", base / "ours", c=False)]
    results = {}
    try:
        for name, build in POPULATIONS.items():
            if a.only and not any(o in name for o in a.only):
                continue
            results[name] = r = measure(sides, build, a.fetches)
            c, ours = r["C pmdammv"], r["pmda-mmv"]
            ratio = (
                f"{ours['median_ms'] / c['median_ms']:.2f}x"
                if c["median_ms"] and ours["median_ms"]
                else "-"
            )
            cells = [
                f"{x['first_ms']} / {x['median_ms']} / {x['max_ms']} ms"
                + (f", {x['failed']} failed" if x["failed"] else "")
                for x in (c, ours)
            ]
            print(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |", flush=True)
    finally:
        for s in sides:
            s.stop()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
