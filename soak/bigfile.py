"""One big, valid MMV file dropped beside a small one, under a private pmcd.

    .venv/bin/python soak/bigfile.py [--instances 3000000]

Any local user may write such a file into the (world-writable) MMV directory.  This reports
how long the agent takes to answer for the small file while it loads the big one, whether
the client's request timed out, and the agent's RSS before and after.  It is a measurement
for soak/README.md, not a CI test (it needs gigabytes of memory).

The file (version 1): one indom of ``--instances`` instances, one U32 metric on it, one
value per instance; 112 bytes per instance (336 MB for 3 million), well under the reader's
1 GiB size limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import psutil

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from pmda_mmv.mmvfile import layout  # noqa: E402
from tests.support.mmvbuild import Metric, MmvBuilder, Value  # noqa: E402
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent  # noqa: E402


def big_file(path: Path, n: int) -> int:
    """Write the big file with the layout.py structs; returns its size."""
    isize, vsize = layout.INSTANCE_V1.size, layout.VALUE.size
    indoms = layout.HEADER_SIZE + 4 * layout.TOC_SIZE
    insts = indoms + layout.INDOM.size
    metric = insts + n * isize
    values = metric + layout.METRIC_V1.size
    data = bytearray(values + n * vsize)
    layout.HEADER.pack_into(data, 0, layout.MAGIC, 1, 7, 7, 4, 0, 0, 9)
    for k, (ttype, count, offset) in enumerate(
        [
            (layout.TOC_INDOMS, 1, indoms),
            (layout.TOC_INSTANCES, n, insts),
            (layout.TOC_METRICS, 1, metric),
            (layout.TOC_VALUES, n, values),
        ]
    ):
        layout.TOC.pack_into(data, layout.HEADER_SIZE + k * layout.TOC_SIZE, ttype, count, offset)
    layout.INDOM.pack_into(data, indoms, 1, n, insts, 0, 0)
    layout.METRIC_V1.pack_into(
        data, metric, b"m", 1, layout.TYPE_U32, layout.SEM_INSTANT, 0, 1, 0, 0
    )
    for i in range(n):
        layout.INSTANCE_V1.pack_into(data, insts + i * isize, indoms, i, b"i%d" % i)
        raw = struct.pack("=Q", i)
        layout.VALUE.pack_into(data, values + i * vsize, raw, 0, metric, insts + i * isize)
    path.write_bytes(data)
    return len(data)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=3_000_000)
    a = p.parse_args()
    work = make_dir(Path(tempfile.mkdtemp(prefix="pmda-mmv-bigfile-", dir="/tmp")))
    mmv_dir = make_dir(work / "tmp" / "mmv")
    small = MmvBuilder(cluster=3)
    small.metrics.append(Metric("v", 1))
    small.values.append(Value("v", None, 5))
    small.write(mmv_dir / "small")
    size = big_file(work / "big", a.instances)
    pmcd = PrivatePmcd(work / "pmcd", [our_agent(mmv_dir, "--status-metrics")])
    pmcd.start()
    try:
        pid = next(
            x for x in pmcd.agent_processes() if "pmda_mmv" in " ".join(psutil.Process(x).cmdline())
        )
        before = psutil.Process(pid).memory_info().rss
        os.rename(work / "big", mmv_dir / "big")
        print(f"big file: {a.instances} instances, {size >> 20} MiB")
        for attempt in ("first", "second"):
            t = time.monotonic()
            out = pmcd.run("pmprobe", "-v", "mmv.small.v")
            took = time.monotonic() - t
            print(f"{attempt} request for the small file: {took:.1f} s: {out.stdout.strip()}")
        after = psutil.Process(pid).memory_info().rss
        print(
            f"agent RSS {before >> 20} MiB -> {after >> 20} MiB, same process: "
            f"{pid in pmcd.agent_processes()}"
        )
        print("states:", pmcd.fetch("mmv.control.file.state"))
    finally:
        pmcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
