"""What ``pmda-mmv check FILE`` costs on one file of a large directory: the command as a
user runs it (a new interpreter, the directory judged as the agent would), timed from here.

Three populations of ``--files`` N (default 6,000): written by tests/support/hostile.py,
``shared``, tiny NOPREFIX files of one application sharing one cluster, metric and indom
(PCP QA 648's layout, in their thousands), and ``plain``, small files of their own cluster
each; and ``own``, written by python3-pcp's ``pcp.mmv``, one metric a file, file k asking
for cluster k (0 to N-1: past 4,095 refused; every other cluster asked for, so the
cluster-0 file takes cluster 1 and each file after it is moved to the next).  Each
population's first file is checked, and the ``own`` population's middle file and whole
directory (``check DIR``) too.  Each is checked with no identity registry
(``--registry none``) and with the one an agent wrote after serving the directory (every
file remembered, as on a host where the agent runs).  Printed: the median of
``--repeats`` runs per row, for this checkout and, with ``--candidate DIR``, the
``pmda_mmv`` package found in DIR, side by side.

    .venv/bin/python benchmarks/check.py [--files N] [--repeats R] [--candidate DIR] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
if str(CHECKOUT) not in sys.path:
    sys.path.insert(0, str(CHECKOUT))

from pmda_mmv.agent.assembly import RegistryChoice, assemble  # noqa: E402
from pmda_mmv.agent.options import ServingOptions  # noqa: E402
from tests.support import hostile  # noqa: E402

RESULTS = CHECKOUT / "benchmarks" / "results"


def own_clusters(directory: Path, count: int) -> list[Path]:
    """``count`` files written by ``pcp.mmv``, one counter each, file k asking for cluster k."""
    from cmmv import MMV_SEM_COUNTER, MMV_TYPE_U64
    from pcp import mmv, pmapi

    paths = []
    for k in range(count):
        paths.append(directory / f"app{k:05d}")
        writer = mmv.MemoryMappedValues(str(paths[-1]), flags=0, cluster=k)
        units = pmapi.pmUnits(0, 0, 1, 0, 0, 0)
        metric = mmv.mmv_metric("requests", 1, MMV_TYPE_U64, MMV_SEM_COUNTER, units, 0xFFFFFFFF)
        writer.add_metrics([metric])
        writer.start()
        writer.lookup_set("requests", "", k)
        writer.stop()
    return paths


POPULATIONS = {"shared": hostile.shared_cluster, "plain": hostile.many_files, "own": own_clusters}


def agent_registry(directory: Path, path: Path) -> None:
    """The identity registry an agent serving ``directory`` writes (at ``path``)."""
    options = ServingOptions(registry=str(path))
    built = assemble(options, str(directory), RegistryChoice(str(directory.parent)))
    built.scanner.refresh(force=True)
    built.registry.save()
    for entry in built.scanner.served():
        entry.mf.close()


def check_seconds(package: Path, path: Path, registry: str, repeats: int) -> float:
    """The median wall time of ``pmda-mmv check path`` run with ``package`` on the path."""
    env = {**os.environ, "PYTHONPATH": str(package)}
    argv = [sys.executable, "-m", "pmda_mmv", "check", "--registry", registry, str(path)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
        ok = done.returncode in (0, 1) and not done.stderr  # 1: a file not ok (refused ...)
        assert ok, done.stdout[-2000:] + done.stderr[-2000:]
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--files", type=int, default=6000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--candidate", type=Path, help="also run the pmda_mmv package in DIR")
    p.add_argument("--out", type=Path, default=RESULTS / "check.json")
    a = p.parse_args(argv)
    packages = {"pmda-mmv": CHECKOUT}
    if a.candidate:
        packages["candidate"] = a.candidate.resolve()
    work = Path(tempfile.mkdtemp(prefix="pmda-mmv-check-", dir="/tmp"))
    rows: dict[str, dict[str, float]] = {}
    try:
        for population, build in POPULATIONS.items():
            directory = work / population
            directory.mkdir()
            paths = build(directory, a.files)
            checked = {"1": paths[0]}
            if population == "own":
                checked |= {"the middle one": paths[len(paths) // 2], "DIR": directory}
            registry = work / f"{population}.json"
            agent_registry(directory, registry)
            for label, reg in (("no registry", "none"), ("agent's registry", str(registry))):
                for which, path in checked.items():
                    row = f"check {which} of {a.files:,} {population}, {label}"
                    rows[row] = {
                        k: check_seconds(v, path, reg, a.repeats) for k, v in packages.items()
                    }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'':48}" + "".join(f"{k:>12}" for k in packages))
    for row, secs in rows.items():
        print(f"{row:48}" + "".join(f"{secs[k]:11.2f}s" for k in packages))
    a.out.parent.mkdir(exist_ok=True)
    a.out.write_text(json.dumps({"files": a.files, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
