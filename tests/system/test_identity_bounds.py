"""The identity registry under attack through a real private pmcd (``-t 5``): another local
user's files (owned by ``nobody``) aimed at every other user's remembered numbers, checked
after an agent restart against real ``pcp.mmv`` writers' PMIDs and indoms.

* Long spilled names: a registry file grown past the read limit was refused whole at the
  next start (every user's numbers gone); now it loads its newest records, a long name
  costs a bounded amount and each owner's records are bounded in bytes.
* A NOPREFIX file named ``family:websrv`` had the family's registry key: the restarted
  agent took the family's owner and cluster from it.
* A stranger cycling names made the cap forget a victim's departed name first, because the
  victim's served files counted against it."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.registryfile import MAX_BYTES
from tests.support.identity import Writers, identities, served, stranger_claiming, strangers
from tests.support.mmvbuild import Metric, MmvBuilder, Value
from tests.support.pmcd import REGISTRY_NAME, PrivatePmcd, our_agent, registry_dir

pytestmark = [pytest.mark.pmcd, pytest.mark.serial]

BUDGET = 1.0  # seconds: no request of the attack's may take longer


class Timed:
    """pmcd requests, each timed (the slowest kept)."""

    def __init__(self, pmcd: PrivatePmcd) -> None:
        self.pmcd = pmcd
        self.slowest = 0.0

    def run(self, *argv: str) -> str:
        t = time.monotonic()
        out = self.pmcd.run(*argv).stdout
        self.slowest = max(self.slowest, time.monotonic() - t)
        return out

    def wait(self, metric: str, served: bool = True, timeout: float = 20) -> None:
        """Until ``metric`` has a value (or, ``served`` False, is not served)."""
        deadline = time.monotonic() + timeout
        while [*self.run("pmprobe", metric).split(), "", ""][1].startswith("-") == served:
            assert time.monotonic() < deadline, metric
            time.sleep(0.1)


@pytest.fixture
def shared(writers: Writers) -> Iterator[Path]:
    os.chmod(writers.mmv_dir, 0o1777)  # a shared directory, as $PCP_TMP_DIR/mmv is
    yield writers.mmv_dir


def long_names(tag: str, n: int) -> list[str]:
    return [f"{tag}_{k:05d}_".ljust(245, "x") for k in range(n)]


def spiller(tag: str, n: int) -> MmvBuilder:
    """A stranger's file of ``n`` metrics with 245-character names, all on item 0 (each
    but the first spilled)."""
    b = MmvBuilder(cluster=0, version=2)
    b.metrics += [Metric(name, 0) for name in long_names(tag, n)]
    b.values += [Value(name, None, 1) for name in long_names(tag, n)]
    return b


def past_the_read_limit(path: Path, victim: dict[str, object]) -> None:
    """The registry file the attack left (version 1, one record a line): the stranger's
    records of 4,096 long spilled names each, then the victim's, past the read limit."""
    spills = {name: [100, k % 1024] for k, name in enumerate(long_names("m", 4096))}
    with path.open("w") as f:
        f.write('{"version": 1, "names": [\n')
        k = 0
        while f.tell() <= MAX_BYTES:
            record = {"name": f"old{k}", "uid": 65534, "cluster": 100, "spills": spills}
            f.write(json.dumps(record) + ",\n")
            k += 1
        f.write(json.dumps(victim) + "\n]}\n")


def test_long_spilled_names_cost_no_user_its_numbers(
    private_dir: Path, writers: Writers, shared: Path
) -> None:
    registry = registry_dir(shared) / REGISTRY_NAME
    past_the_read_limit(
        registry,
        {
            "name": "victim",
            "uid": 0,
            "cluster": 9,
            "asked": 0,
            "noprefix": False,
            "indoms": {"5": 12345},
            "present": False,
        },
    )
    agent = our_agent(shared, "--registry-cap", "8")
    with PrivatePmcd(private_dir / "pmcd", [agent]) as pmcd:
        timed = Timed(pmcd)
        for generation in range(2):  # every file written again under a new name
            for k in range(4):
                if generation:
                    (shared / f"g0_{k}").unlink()
                strangers(spiller(f"g{generation}", 1024), shared / f"g{generation}_{k}")
                timed.wait(f"mmv.g{generation}_{k}.{long_names(f'g{generation}', 1)[0]}")
        assert timed.slowest < BUDGET, timed.slowest
        first_log = pmcd.agent_log()
        pmcd.restart_agent()
        writers.start("victim", 0, 10)  # the victim's writer asks for no cluster
        served(pmcd, "victim")
        got = identities(pmcd, "victim")
        assert got["mmv.victim.requests"][0] == "70.9.1"  # remembered, not a fresh number
        assert got["mmv.victim.busy"][1] == "70.12345"
        assert "larger than 64 MiB: its newest" in first_log  # read from its end
    kept = Registry(str(registry), 8, readonly=True)
    kept.load()  # the stranger's 4 served files of 1,024 long names, the victim's one
    assert len(kept.text()) < 4 * 1024 * 64  # long names cost a bounded amount each


def test_a_file_named_as_a_familys_record_never_takes_the_family(
    private_dir: Path, writers: Writers, shared: Path
) -> None:
    agent = our_agent(shared, "--family", "websrv=websrv_*")
    with PrivatePmcd(private_dir / "pmcd", [agent]) as pmcd:
        writers.start("websrv_1", 0, 10)
        writers.start("websrv_2", 0, 20)
        served(pmcd, "websrv_1", "websrv_2")
        timed = Timed(pmcd)
        timed.wait("mmv.websrv.requests")
        before = pmcd.run("pminfo", "-m", "mmv.websrv.requests").stdout
        assert pmcd.fetch("mmv.websrv.requests") == {None: "30"}
        forged = MmvBuilder(cluster=0, version=2, flags=layout.FLAG_NOPREFIX)
        forged.metrics.append(Metric("forged.x", 1))
        forged.values.append(Value("forged.x", None, 999_999))
        strangers(forged, shared / "family:websrv")  # a NOPREFIX file: served by any name
        strangers(stranger_claiming(0), shared / "websrv_evil")  # the stranger's member
        timed.wait("mmv.forged.x")
        served(pmcd, "websrv_evil")
        pmcd.restart_agent()
        served(pmcd, "websrv_1", "websrv_2", "websrv_evil")
        timed.wait("mmv.websrv.requests")
        assert pmcd.run("pminfo", "-m", "mmv.websrv.requests").stdout == before
        assert pmcd.fetch("mmv.websrv.requests") == {None: "30"}  # the workers', not 666
        assert timed.slowest < BUDGET, timed.slowest


def test_a_stranger_cycling_names_never_takes_a_busy_victims_departed_name(
    private_dir: Path, writers: Writers, shared: Path
) -> None:
    agent = our_agent(shared, "--registry-cap", "8")
    with PrivatePmcd(private_dir / "pmcd", [agent]) as pmcd:
        timed = Timed(pmcd)
        for k in range(6):  # the victim's served files
            writers.start(f"served{k}", 0, k)
        writers.start("victim", 7, 10)
        served(pmcd, "victim", *(f"served{k}" for k in range(6)))
        before = identities(pmcd, "victim")
        assert before["mmv.victim.requests"][0] == "70.7.1"
        writers.kill("victim")
        (shared / "victim").unlink()
        timed.wait("mmv.victim.requests", served=False)
        for k in range(12):  # the stranger cycles names, each asking for the victim's cluster
            strangers(stranger_claiming(7), shared / f"churn{k}")
            timed.wait(f"mmv.churn{k}.requests")
            (shared / f"churn{k}").unlink()
            timed.wait(f"mmv.churn{k}.requests", served=False)
        assert timed.slowest < BUDGET, timed.slowest
        first_log = pmcd.agent_log()
        pmcd.restart_agent()
        writers.start("victim", 7, 20)
        served(pmcd, "victim")
        after = identities(pmcd, "victim")
        assert {m: v[:2] for m, v in after.items()} == {m: v[:2] for m, v in before.items()}
        assert re.search(r"more than 8 names remembered.*uid 65534", first_log)  # its own
