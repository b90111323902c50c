"""libpcp_pmda's pmdaRehash cost as PMIDs accumulate, with and without pmda_mmv.agent.pmidhash.

python3-pcp calls pmdaRehash at every metric-table change.  This rebuilds a 450-metric
table (the soak's size) after 0, 1, 10 and 100 million PMIDs have been hashed, through
real libpcp_pmda calls on a pmdaInterface set up by pmdaDaemon, and prints the median time
of one rebuild, without and with the node-count reset before each, and the reset's cost.

    .venv/bin/python benchmarks/rehash.py [--up-to N]     (about a minute for 10^8)
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pcp.pmda import pmdaMetric

from pmda_mmv.agent.pmidhash import PmidHashCount

LIBPMDA = ctypes.CDLL("libpcp_pmda.so.3")


class Agent:
    """A pmdaInterface from pmdaDaemon (domain 70), and its count found by pmidhash."""

    def __init__(self) -> None:
        self.dispatch = ctypes.create_string_buffer(4096)
        ctypes.c_int.from_buffer(self.dispatch).value = 70
        LIBPMDA.pmdaDaemon(self.dispatch, 7, b"rehash", 70, None, None)
        self.ext = ctypes.c_void_p(ctypes.c_void_p.from_buffer(self.dispatch, 16).value)
        start = ctypes.addressof(self.dispatch)
        count = PmidHashCount.find(70, [(start, start + len(self.dispatch))])
        assert isinstance(count, PmidHashCount), count
        self.count = count
        self.hashed = 0

    def rehash(self, metrics: ctypes.Array[pmdaMetric]) -> None:
        LIBPMDA.pmdaRehash(self.ext, metrics, len(metrics))
        self.hashed += len(metrics)


def table(n: int) -> ctypes.Array[pmdaMetric]:
    metrics = (pmdaMetric * n)()
    for i, m in enumerate(metrics):
        m.m_desc.pmid = (70 << 22) | ((1 + i // 1024) << 10) | (i % 1024)
    return metrics


def median_ms(agent: Agent, metrics: ctypes.Array[pmdaMetric], reset: bool) -> float:
    times = []
    for _ in range(21):
        t = time.perf_counter()
        if reset:
            agent.count.reset()
        agent.rehash(metrics)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--up-to", type=float, default=1e8, help="PMIDs hashed before the last row")
    a = p.parse_args()
    small, big = table(450), table(100_000)
    plain, fixed = Agent(), Agent()
    print(f"{'PMIDs hashed before':>20}  {'rebuild, 6.0.3':>14}  {'rebuild, reset':>14}")
    for target in (0, 1e6, 1e7, 1e8):
        if target > a.up_to:
            break
        while plain.hashed < target:  # fixed never grows: its count is reset, not summed
            plain.rehash(big)
        print(
            f"{plain.hashed:>20,}  {median_ms(plain, small, False):>11.2f} ms"
            f"  {median_ms(fixed, small, True):>11.2f} ms"
        )
    n = 100_000
    t = time.perf_counter()
    for _ in range(n):
        fixed.count.reset()
    print(f"one reset (two preads of /proc/self/mem): {(time.perf_counter() - t) / n * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
