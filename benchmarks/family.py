"""A family's fetch against fetching its members' files one by one, and the cost of 5,000
departed members' files beside them (docs/families.md).

``--members`` files (default 200) of ``--metrics`` singular metrics each (default 100,
counters and instants alternately), written with tests/support/mmvbuild.py, served by pmda-mmv with
``--family bench=member_*``.  Timed, round robin, median of ``--rounds``:

* ``family``: one pmFetch of the family's metrics (``mmv.bench.*``);
* ``one by one``: one pmFetch per member of its own metrics, all members (the time it takes
  a client to get the same information without a family), for pmda-mmv and the C pmdammv;
* ``family, departed``: the family's fetch from a second pmda-mmv whose directory also
  holds ``--departed`` files (default 5,000) of the same family whose writers have exited
  (MMV_FLAG_PROCESS, a reaped pid): never served, never read at a fetch.

* ``--churn SECONDS`` instead: the departures thread's cost (directory/departures.py). An
  idle agent (no request) while 100 files a second are written and unlinked in its
  directory, 4 living at a time: its CPU seconds per second when the files match
  ``--family`` (each opened, held and credited at once) and when they match no family.

    .venv/bin/python benchmarks/family.py [--members N] [--metrics M] [--departed D]
    .venv/bin/python benchmarks/family.py --churn 20
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pcp.pmapi import pmErr

from benchmarks import agents
from benchmarks.client import Client
from pmda_mmv.mmvfile import layout
from tests.support import mmvbuild
from tests.support.pmcd import PrivatePmcd, c_agent, make_dir, our_agent

RESULTS = Path(__file__).resolve().parent / "results"
FAMILY = "bench=member_*"


def member(i: int, metrics: int, process: int = 0) -> mmvbuild.MmvBuilder:
    flags = layout.FLAG_PROCESS if process else 0
    b = mmvbuild.MmvBuilder(cluster=0, flags=flags, process=process)
    for j in range(metrics):
        counter = j % 2 == 0
        mtype = layout.TYPE_U64 if counter else layout.TYPE_U32
        sem = layout.SEM_COUNTER if counter else layout.SEM_INSTANT
        b.metrics.append(mmvbuild.Metric(f"m{j:03d}", j + 1, mtype, sem))
        b.values.append(mmvbuild.Value(f"m{j:03d}", None, i * 1000 + j))
    return b


def populate(mmv_dir: Path, members: int, metrics: int, departed: int) -> None:
    for i in range(members):
        member(i, metrics).write(mmv_dir / f"member_{i:04d}")
    if departed:
        gone = mmvbuild.dead_pid()
        image = member(0, metrics, gone).build()
        for k in range(departed):
            image.write(mmv_dir / f"member_x{k:05d}")


def wait_names(client: Client, names: list[str], timeout: float = 60) -> Any:
    """The PMIDs of ``names``; a lookup that fails is retried name by name (in this run,
    pmLookupName of 100 member names answered PM_ERR_NAME on a context that had looked
    up the family's, while every name resolved alone: a client-side oddity, not timed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.lookup(names)
        except pmErr as e:
            ids = [client.try_lookup([n]) for n in names]
            if all(i is not None for i in ids):
                return (ctypes.c_uint * len(names))(*(i[0] for i in ids))
            if time.monotonic() > deadline:
                unknown = [n for n, i in zip(names, ids, strict=True) if i is None]
                raise SystemExit(f"{client.label}: {e} after {timeout} s: {unknown[:5]}") from e
        time.sleep(0.5)


def wait_loaded(pmcd: PrivatePmcd, members: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        files = pmcd.run("pmprobe", "-v", "mmv.control.files", "mmv.control.reload").stdout
        if files.split()[2:3] == [str(members)] and files.split()[-1] == "0":
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{pmcd.host}: not every member served in {timeout} s: {files}")
        time.sleep(1)


def timed(client: Client, pmids: Any, expect: int) -> float:
    seconds, res = client.fetch_once(pmids)
    try:
        got = sum(res.contents.get_numval(k) for k in range(res.contents.numpmid))
    finally:
        client.ctx.pmFreeResult(res)
    if got != expect:
        raise SystemExit(f"{client.label}: {got} values, {expect} expected")
    return seconds


def run(members: int, metrics: int, departed: int, rounds: int, work: Path) -> dict[str, Any]:
    dirs = {k: make_dir(work / k / "tmp" / "mmv") for k in ("live", "departed")}
    populate(dirs["live"], members, metrics, 0)
    populate(dirs["departed"], members, metrics, departed)
    pmcds: dict[str, PrivatePmcd] = {}
    try:
        pmcds["ours"] = agents.start(
            work / "live" / "pmcd", our_agent(dirs["live"], "--family", FAMILY)
        )
        pmcds["ours-departed"] = agents.start(
            work / "departed" / "pmcd", our_agent(dirs["departed"], "--family", FAMILY)
        )
        pmcds["c"] = agents.start(work / "c" / "pmcd", c_agent(dirs["live"].parent))
        for k in ("ours", "ours-departed"):  # every member loaded and in the tables
            wait_loaded(pmcds[k], members)
        clients = {k: Client(k, p.host) for k, p in pmcds.items()}
        family = [f"mmv.bench.m{j:03d}" for j in range(metrics)]
        own = [[f"mmv.member_{i:04d}.m{j:03d}" for j in range(metrics)] for i in range(members)]
        pmids = {k: wait_names(clients[k], family) for k in ("ours", "ours-departed")}
        each = {k: [wait_names(clients[k], names) for names in own] for k in ("ours", "c")}
        check_sum(pmcds["ours"], members)
        samples: dict[str, list[float]] = {
            k: [] for k in ("family", "one by one", "C one by one", "departed")
        }
        for _ in range(rounds):
            samples["family"].append(timed(clients["ours"], pmids["ours"], metrics))
            departed_client = clients["ours-departed"]
            samples["departed"].append(timed(departed_client, pmids["ours-departed"], metrics))
            ours = sum(timed(clients["ours"], p, metrics) for p in each["ours"])
            samples["one by one"].append(ours)
            samples["C one by one"].append(sum(timed(clients["c"], p, metrics) for p in each["c"]))
    finally:
        for pmcd in pmcds.values():
            pmcd.stop()
    return {k: round(statistics.median(v) * 1000, 3) for k, v in samples.items()}


def churn(seconds: float, work: Path, rate: int = 100) -> dict[str, float]:
    """The agent's CPU seconds per second, idle, while ``rate`` files a second churn."""
    import psutil

    cpu: dict[str, float] = {}
    for label, family in (("matching", FAMILY), ("not-matching", "bench=other_*")):
        mmv_dir = make_dir(work / label / "tmp" / "mmv")
        pmcd = agents.start(work / label / "pmcd", our_agent(mmv_dir, "--family", family))
        try:
            pmcd.run("pmprobe", "mmv.control.files")
            agent = psutil.Process(agents.agent_pid(pmcd))
            image = member(1, 10).build()
            before, n = agent.cpu_times(), 0
            start = time.monotonic()
            while time.monotonic() - start < seconds:
                image.write(mmv_dir / f"member_{n:06d}")
                if n >= 4:
                    (mmv_dir / f"member_{n - 4:06d}").unlink()
                n += 1
                time.sleep(max(0.0, start + n / rate - time.monotonic()))
            after = agent.cpu_times()
            used = after.user + after.system - before.user - before.system
            cpu[label] = round(used / (time.monotonic() - start), 4)
        finally:
            pmcd.stop()
    return cpu


def check_sum(pmcd: PrivatePmcd, members: int) -> None:
    """The family's m000 (a counter) is the sum of the members' values (i * 1000)."""
    got = pmcd.fetch("mmv.bench.m000")[None]
    if int(got) != 1000 * members * (members - 1) // 2:
        raise SystemExit(f"mmv.bench.m000 is {got}, not the members' sum")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/family.py", description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=200)
    p.add_argument("--metrics", type=int, default=100)
    p.add_argument("--departed", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", type=Path, default=RESULTS / "family.json")
    p.add_argument("--churn", type=float, default=0, help="seconds of the churn run only")
    a = p.parse_args(argv)
    work = make_dir(Path(tempfile.mkdtemp(prefix="pmda-mmv-family-", dir="/tmp")))
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        if a.churn:
            cpu = churn(a.churn, work)
            print(json.dumps({"churn seconds": a.churn, "load": load, "agent CPU s/s": cpu}))
            return 0
        ms = run(a.members, a.metrics, a.departed, a.rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {
        "when": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(["benchmarks/family.py", *(sys.argv[1:] if argv is None else argv)]),
        "members": a.members,
        "metrics": a.metrics,
        "departed": a.departed,
        "rounds": a.rounds,
        "load": load,
        "median_ms": ms,
        "family / one by one": round(ms["family"] / ms["one by one"], 3),
        "family / C one by one": round(ms["family"] / ms["C one by one"], 3),
        "departed / family": round(ms["departed"] / ms["family"], 3),
    }
    make_dir(a.out.parent)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
