"""Many empty indoms (docs/bounded.md), measured on pmda-mmv and the C pmdammv in one run
(private pmcds with pmcd's default 5 s agent timeout), for its table: 200 files of 2,047
empty indoms (and one metric each, 66 KB a file, 13 MB in all) renamed into a served
directory; the agent's RSS once all are served (or after ``--wait`` seconds).

Usage (root, as the pmcd tests): ``.venv/bin/python -m benchmarks.bounded3``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import psutil

from tests.support.mmvbuild import Indom, Metric, MmvBuilder, Value
from tests.support.pmcd import PrivatePmcd, c_agent, make_dir, our_agent


def empty_indoms(mmv_dir: Path, files: int = 200, indoms: int = 2047) -> None:
    """``files`` copies of one file of ``indoms`` empty indoms and one metric (cluster 0:
    each gets a cluster of its own), each renamed into ``mmv_dir``."""
    b = MmvBuilder(cluster=0, version=2)
    b.indoms += [Indom(2048 + s) for s in range(indoms)]
    b.metrics.append(Metric("m", 1))
    b.values.append(Value("m", None, 1))
    data = b.build().data
    for k in range(files):
        tmp = mmv_dir / f".e{k:03d}"
        tmp.write_bytes(data)
        os.rename(tmp, mmv_dir / f"e{k:03d}")


def agent_rss(pmcd: PrivatePmcd) -> int:
    return sum(psutil.Process(p).memory_info().rss for p in pmcd.agent_processes())


def finding6(base: Path, side: str, wait: float) -> dict[str, object]:
    mmv_dir = make_dir(base / side / "tmp" / "mmv")
    agent = our_agent(mmv_dir) if side == "ours" else c_agent(mmv_dir.parent)
    with PrivatePmcd(base / side / "pmcd", [agent], agent_timeout=5) as pmcd:
        start = agent_rss(pmcd)
        empty_indoms(mmv_dir)
        deadline = time.monotonic() + wait
        served = 0
        while time.monotonic() < deadline:
            out = pmcd.run("pminfo", "mmv").stdout
            served = sum(1 for line in out.splitlines() if line.endswith(".m"))
            if served >= 200:
                break
            time.sleep(1)
        return {"served": served, "rss_start_kib": start >> 10, "rss_kib": agent_rss(pmcd) >> 10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", choices=("ours", "c", "both"), default="both")
    ap.add_argument("--wait", type=float, default=60.0)
    a = ap.parse_args()
    sides = ["ours", "c"] if a.agent == "both" else [a.agent]
    with tempfile.TemporaryDirectory(prefix="pmda-mmv-bounded3-") as tmp:
        os.chmod(tmp, 0o755)
        result = {side: finding6(Path(tmp), side, a.wait) for side in sides}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
