"""A fetch with 100 container writers against the same fetch with 100 host writers
(docs/containers.md).

Two private pmcds, each with pmda-mmv over a directory of N (default 100) MMV_FLAG_PROCESS
files, each file written by its own python3-pcp ``pcp.mmv`` process
(tests/support/writers/namespaced.py): on the host (``host``), or each in a PID namespace of its own
at PID 1 (``unshare --pid --fork --mount-proc``, ``container``: the agent finds the writer
by NSpid, follows it through a pidfd and labels its file with its cgroup).  Once every file
is served by both, one pmFetch of the N files' metrics goes to each agent round robin for
``--seconds`` after a warm-up; the figures are the mean and median fetch time of each and
the ratio container / host (the liveness work is one epoll_wait per request whatever the
writers' namespaces, so it should be 1).

With ``--own-dirs`` each container writer has a mount namespace of its own too, with a
private tmpfs over its ``/var/lib/pcp/tmp``, and writes into its own ``mmv`` directory
there; the ``container`` agent runs with ``--containers`` and serves them as
``mmv.containers.<container>.wNNN.alive`` (the ``host`` agent as before, without the
option): the cost of ``--containers`` with N containers on the fetch path.

    .venv/bin/python benchmarks/containers.py [--writers N] [--seconds S] [--own-dirs]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import agents
from benchmarks.client import Client
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
NAMESPACED = Path(__file__).resolve().parents[1] / "tests" / "support" / "writers" / "namespaced.py"
PYTHON = "/usr/bin/python3"  # python3-pcp's
WARMUP = 2.0
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
TMP = "/var/lib/pcp/tmp"  # the containers' PCP_TMP_DIR (the host's /etc/pcp.conf)


def start_containers(count: int) -> tuple[list[subprocess.Popen[str]], list[str]]:
    """N containers with an mmv directory of their own (--own-dirs): their processes and
    the names of their files' metric."""
    from pmda_mmv.directory.procfs import cgroup_of, container_of

    procs, names = [], []
    script = f"mount -t tmpfs tmpfs {TMP} && mkdir {TMP}/mmv && exec {PYTHON} {NAMESPACED}"
    for k in range(count):
        cmd = [*UNSHARE, "--mount", "sh", "-c", script]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdin is not None
        p.stdin.write(f"write {TMP}/mmv/w{k:03d} 1 {100 + k}\n")
        p.stdin.flush()
        procs.append(p)
    for k, p in enumerate(procs):
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"container {k} did not start: {line!r}")
        ident = container_of(cgroup_of("/proc", p.pid))
        ns = os.stat(f"/proc/{p.pid}/ns/mnt").st_ino
        name = f"c{ident[:12]}" if len(ident) == 64 else f"mnt{ns}"
        names.append(f"mmv.containers.{name}.w{k:03d}.alive")
    return procs, names


def start_writers(mmv_dir: Path, count: int, nested: bool) -> list[subprocess.Popen[str]]:
    procs = []
    for k in range(count):
        cmd = [*(UNSHARE if nested else []), PYTHON, str(NAMESPACED)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdin is not None
        p.stdin.write(f"write {mmv_dir / f'w{k:03d}'} {1 if nested else 0} {100 + k}\n")
        p.stdin.flush()
        procs.append(p)
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"writer {p.args} did not start: {line!r}")
    return procs


def stop_writers(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.stdin is not None:
            p.stdin.close()
        p.kill()
    for p in procs:
        p.wait(30)


def run(count: int, seconds: float, workdir: Path, own_dirs: bool = False) -> dict[str, Any]:
    names = {k: [f"mmv.w{i:03d}.alive" for i in range(count)] for k in ("host", "container")}
    pmcds: dict[str, PrivatePmcd] = {}
    clients: dict[str, Client] = {}
    writers: list[subprocess.Popen[str]] = []
    try:
        for key in ("host", "container"):
            mmv_dir = make_dir(workdir / key / "tmp" / "mmv")
            args: tuple[str, ...] = ()
            if key == "container" and own_dirs:
                started, names[key] = start_containers(count)
                writers += started
                args = ("--containers",)
            else:
                writers += start_writers(mmv_dir, count, key == "container")
            # this checkout's package, whatever else is installed (a system-wide pmda_mmv
            # would shadow the venv's editable install)
            spec = our_agent(mmv_dir, *args)
            spec = dataclasses.replace(spec, env={"PYTHONPATH": str(REPO)})
            pmcds[key] = agents.start(workdir / key / "pmcd", spec)
            clients[key] = Client(key, pmcds[key].host)
        pmids: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while len(pmids) < len(clients):
            for key, c in clients.items():
                if key not in pmids:
                    got = c.try_lookup(names[key])
                    if got is not None:
                        pmids[key] = got
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every file served after 60 s: {sorted(pmids)}")
            time.sleep(0.1)
        samples: dict[str, list[float]] = {k: [] for k in clients}
        start = time.perf_counter()
        while time.perf_counter() - start < WARMUP + seconds:
            measuring = time.perf_counter() - start >= WARMUP
            for key, c in clients.items():
                t, res = c.fetch_once(pmids[key])
                try:
                    r = res.contents
                    bad = [k for k in range(r.numpmid) if r.get_numval(k) != 1]
                finally:
                    c.ctx.pmFreeResult(res)
                if r.numpmid != count or bad:
                    numvals = [r.get_numval(k) for k in bad[:3]]
                    raise RuntimeError(
                        f"{key}: {len(bad)} of {count} metrics without a value: {numvals}"
                    )
                if measuring:
                    samples[key].append(t)
        labels = pmcds["container"].run("pminfo", "-l", names["container"][0]).stdout
        if '"container":' not in labels:  # the agent found the writers in their namespaces
            raise RuntimeError(f"container writers' files without a container label: {labels}")
    finally:
        for pmcd in pmcds.values():
            pmcd.stop()
        stop_writers(writers)
    out: dict[str, Any] = {}
    for key, s in samples.items():
        out[key] = {
            "fetches": len(s),
            "mean_ms": round(statistics.fmean(s) * 1000, 4),
            "median_ms": round(statistics.median(s) * 1000, 4),
        }
    host, cont = out["host"], out["container"]
    out["mean_ratio"] = round(cont["mean_ms"] / host["mean_ms"], 3)
    out["median_ratio"] = round(cont["median_ms"] / host["median_ms"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="benchmarks/containers.py", description=__doc__.splitlines()[0]
    )
    p.add_argument("--writers", type=int, default=100, help="writers per agent (default 100)")
    p.add_argument("--seconds", type=float, default=10.0, help="measured time (default 10)")
    p.add_argument(
        "--own-dirs",
        action="store_true",
        help="container writers in mount namespaces of their own, served by --containers",
    )
    p.add_argument("--out", type=Path, default=None, help="default results/containers.json")
    a = p.parse_args(argv)
    out = a.out or RESULTS / ("containers-own-dirs.json" if a.own_dirs else "containers.json")
    workdir = make_dir(Path(tempfile.mkdtemp(prefix="pmda-mmv-containers-", dir="/tmp")))
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        results = run(a.writers, a.seconds, workdir, a.own_dirs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {
        "when": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(
            ["benchmarks/containers.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "writers": a.writers,
        "own_dirs": a.own_dirs,
        "seconds": a.seconds,
        "load": load,
        "results": results,
    }
    make_dir(out.parent)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    h, c = results["host"], results["container"]
    print(f"{'writers':<10} {'fetches':>8} {'mean ms':>9} {'median ms':>10}")
    for key, r in (("host", h), ("container", c)):
        print(f"{key:<10} {r['fetches']:>8} {r['mean_ms']:>9.3f} {r['median_ms']:>10.3f}")
    print(f"container / host: mean {results['mean_ratio']}, median {results['median_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
