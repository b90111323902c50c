"""Memory per served name, in process: what each line of the agent keeps, by tracemalloc.

The agent (``MmvPMDA``, built in python3-pcp's generation mode: no pmcd, so libpcp_pmda's
namespace and hash in C are not built) serves FILES files of METRICS singular metrics
written by libpcp_mmv (with ``--help``: help text, the same for metric j of every file),
one fetch of a metric of each file, then the bytes still traced per name, and the lines
that allocated them (the TOP largest).  The quick loop before ``scale.py`` (the agent's
RSS under a real pmcd).  Run it from the checkout to measure.

    .venv/bin/python benchmarks/memory.py [--files N] [--metrics M] [--help-text] [--top K]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the checkout measured: the one it is run from

from benchmarks.scale import write_file
from tests.support.writers.libpcp_mmv import library


def serve(directory: Path, files: int) -> tracemalloc.Snapshot:
    """The agent over ``directory`` after its first scan and one fetch of each file."""
    os.environ["PCP_PYTHON_DOMAIN"] = "1"  # generation mode: no handshake with pmcd
    from pmda_mmv.agent.options import parse_args
    from pmda_mmv.agent.pmda import MmvPMDA

    agent = MmvPMDA(parse_args(["--dir", str(directory), "--max-names", "1000000"]))
    gc.collect()
    tracemalloc.start()
    agent.refresh_metrics(True, False)
    agent.prefetch()
    for k in range(files):
        agent.refresh_cluster(k + 1)
        agent.model.fetcher()(k + 1, 0, 0xFFFFFFFF)
    gc.collect()
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return snap


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=20, help="files (default 20)")
    p.add_argument("--metrics", type=int, default=1000, help="metrics per file (default 1000)")
    p.add_argument("--help-text", action="store_true", help="metrics with help text")
    p.add_argument("--top", type=int, default=20, help="lines shown (default 20)")
    args = p.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="pmda-mmv-memory-"))
    lib = library()
    for k in range(args.files):
        write_file(lib, directory / f"f{k:03d}", k + 1, args.metrics, args.help_text)
    snap = serve(directory, args.files)
    names = args.files * args.metrics
    stats = snap.statistics("lineno")
    print(f"{names} names: {sum(s.size for s in stats) / names:.0f} bytes traced a name")
    for s in stats[: args.top]:
        at = s.traceback[0]
        print(f"{s.size / names:7.1f} B {s.count / names:5.2f} objects  {at.filename}:{at.lineno}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
