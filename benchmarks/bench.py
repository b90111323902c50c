"""The pmda-mmv benchmark suite: ``benchmarks/run [--quick]`` (see benchmarks/README.md).

Starts private pmcds (tests/support/pmcd.py), one per agent: PCP's C pmdammv, pmda-mmv, a C PMDA
whose fetch does no work and a python3-pcp PMDA whose fetch does no work, all serving the
same MMV files written by libpcp_mmv.  Measures from this process with the PMAPI
(python3-pcp pmContext): full fetches, new-file latency, rescan and startup cost, RSS; then
profiles pmda-mmv with py-spy during the 100k fetch loop.  Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
if str(CHECKOUT) not in sys.path:
    sys.path.insert(0, str(CHECKOUT))

from benchmarks import atscale, report  # noqa: E402
from benchmarks.phases import RESULTS, Bench, Plan, log  # noqa: E402
from tests.support.pmcd import make_dir  # noqa: E402

FULL = Plan(
    mode="full",
    sizes=("1k", "10k", "100k", "1M"),
    repeats={"1k": 101, "10k": 31, "100k": 11, "1M": 7},
    c_repeats={"100k": 5},
    new_file=7,
    scan_files=(10, 100, 1000, 10000),
    reload=5,
    restarts=3,
    profile=True,
)
QUICK = Plan(
    mode="quick",
    sizes=("1k", "10k"),
    repeats={"1k": 31, "10k": 9},
    c_repeats={},
    new_file=3,
    scan_files=(10, 100),
    reload=3,
    restarts=3,
    profile=False,
)


def source_version() -> dict[str, Any]:
    """The checkout's commit, and whether pmda_mmv/ differs from it (the agent runs from
    the working tree)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "pmda_mmv_modified": bool(git("status", "--porcelain", "--", "pmda_mmv")),
    }


def environment() -> dict[str, Any]:
    from pcp.pmapi import pmContext

    return {
        "source": source_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pcp": pmContext.pmGetConfig("PCP_VERSION"),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1k/10k only, fewer repeats (< 2 min)")
    p.add_argument(
        "--out",
        type=Path,
        help="JSON output (default results/latest.json; results/quick.json with --quick)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    p.add_argument(
        "--candidate",
        type=Path,
        metavar="DIR",
        help="also run the pmda_mmv package found in DIR (a copy with a proposed change) "
        "as agent 'candidate', through PYTHONPATH",
    )
    for phase, what in (
        ("scale", "RSS per name, a new file and a rewrite among 100,000 names (scale.py)"),
        ("check", "pmda-mmv check on one of 6,000 files (check.py)"),
        ("appear", "1,000 files x 1,000 metrics appearing at once (appear.py)"),
    ):
        p.add_argument(f"--{phase}", action="store_true", help=f"also {what}")
    p.add_argument("--at-scale", action="store_true", help="--scale --check --appear")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.no_profile:
        plan = dataclasses.replace(plan, profile=False)
    if args.candidate and not (args.candidate / "pmda_mmv" / "__init__.py").exists():
        sys.exit(f"benchmarks/run: no pmda_mmv package in {args.candidate}")
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    make_dir(RESULTS)
    workdir = make_dir(Path(tempfile.mkdtemp(prefix="pmda-mmv-bench-", dir="/tmp")))
    started = time.perf_counter()
    env = environment()
    try:
        results = Bench(plan, workdir, args.candidate, out.with_suffix("")).run()
        phases = [p for p in atscale.PHASES if args.at_scale or getattr(args, p)]
        at_scale = atscale.run(phases, args.quick, args.candidate, make_dir(workdir / "scale"))
    finally:
        if args.keep:
            log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    env["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.candidate:
        env["candidate"] = str(args.candidate.resolve())
    doc = report.document(
        results,
        plan.mode,
        env,
        datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        time.perf_counter() - started,
        " ".join(["benchmarks/run", *(sys.argv[1:] if argv is None else argv)]),
    )
    doc["at_scale"] = at_scale
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(report.table(doc))
    if at_scale:
        print(atscale.table(at_scale))
    log(f"JSON written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
