"""Identity under attack, through a real private pmcd: another local user's files (owned by
``nobody``) aimed at a victim served from real ``pcp.mmv`` writers.

* Predicted numbers: one file takes the victim's C indom number, four fill the 4,096 numbers
  an unkeyed hash of the victim's name would predict as the first its search for a number
  of its own tries; the victim must not be refused ("no free PCP indom serial"): its search
  starts where the agent's secret says (``<registry>.key``, mode 0600), unknown to the
  attacker.
* A restart's window: a stranger's file claims the victim's cluster and indom serial in
  the window while the victim's writer restarts (unlink, create, write, as libpcp_mmv
  does): the victim keeps its PMIDs and indom, the stranger gets numbers of its own."""

from __future__ import annotations

import os
import re
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.namespace.indomnumbers import INDOM_MASK, PROBES, derived_indom
from tests.support.identity import Writers, identities, served, stranger_claiming, strangers
from tests.support.mmvbuild import Indom, Metric, MmvBuilder
from tests.support.pmcd import REGISTRY_NAME, PrivatePmcd, our_agent

pytestmark = pytest.mark.pmcd


def indom_of(pmcd: PrivatePmcd, metric: str, timeout: float = 20) -> str:
    """The InDom ``pminfo -d`` gives ``metric`` once it is served."""
    deadline = time.monotonic() + timeout
    while True:
        out = pmcd.run("pminfo", "-d", metric).stdout
        found = re.search(r"InDom: (\S+)", out)
        if found:
            return found.group(1)
        assert time.monotonic() < deadline, out
        time.sleep(0.2)


@pytest.fixture
def pmcd(private_dir: Path, writers: Writers) -> Iterator[PrivatePmcd]:
    os.chmod(writers.mmv_dir, 0o1777)  # a shared directory, as $PCP_TMP_DIR/mmv is
    with PrivatePmcd(private_dir / "pmcd", [our_agent(writers.mmv_dir)]) as p:
        yield p


def test_another_users_files_cannot_fill_a_victims_indom_search(
    private_dir: Path, writers: Writers, pmcd: PrivatePmcd
) -> None:
    c_number = (3 << 11) | 5  # the victim: cluster 3, indom serial 5
    # where an unkeyed hash of the name started the victim's search (what an attacker can
    # compute), and the numbers that search tried first
    predicted = zlib.crc32(b"victim\x005") % INDOM_MASK + 1
    window = [(predicted - 1 + k) % INDOM_MASK + 1 for k in range(PROBES)]
    parts = [[c_number], *(window[k : k + 1024] for k in range(0, PROBES, 1024))]
    for k, numbers in enumerate(parts):  # five small files of user nobody
        squat = MmvBuilder(cluster=2048, version=2)  # C's number for (2048, n) is n
        squat.indoms += [Indom(n) for n in numbers]
        squat.metrics.append(Metric("m", k + 1, indom=numbers[0]))
        strangers(squat, writers.mmv_dir / f"squat{k}")
    for k, numbers in enumerate(parts):
        assert indom_of(pmcd, f"mmv.squat{k}.m") == f"70.{numbers[0]}"  # they hold them
    writers.start("victim", 3, 10)
    served(pmcd, "victim")
    got = identities(pmcd, "victim")["mmv.victim.busy"]
    number = int(got[1].removeprefix("70."))
    squatted = {n for part in parts for n in part}
    assert number not in squatted and got[2] == ['3 or "three"', '9 or "nine"']
    after_window = (predicted - 1 + PROBES) % INDOM_MASK + 1  # the unkeyed search's next
    assert number != after_window, "the victim's number was predictable from its name"
    key = private_dir / "tmp" / "identity" / f"{REGISTRY_NAME}.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600  # the attacker cannot read it
    start = derived_indom("victim", 5, bytes.fromhex(key.read_text()))
    first_free = next(
        n for k in range(PROBES) if (n := (start - 1 + k) % INDOM_MASK + 1) not in squatted
    )
    assert number == first_free
    writers.kill("victim")  # the writer restarts: the same number
    writers.start("victim", 3, 20)
    served(pmcd, "victim")
    assert identities(pmcd, "victim")["mmv.victim.busy"][1] == got[1]
    assert "no free PCP indom serial" not in pmcd.agent_log()


def test_a_strangers_file_in_a_writers_restart_window_gets_none_of_its_numbers(
    writers: Writers, pmcd: PrivatePmcd
) -> None:
    writers.start("victim", 7, 10)
    served(pmcd, "victim")
    before = identities(pmcd, "victim")
    assert before["mmv.victim.requests"][0] == "70.7.1"
    assert before["mmv.victim.busy"][1] == f"70.{(7 << 11) | 5}"
    # the writer restarts as libpcp_mmv does: unlink, create (not written yet), write
    writers.kill("victim")
    path = writers.mmv_dir / "victim"
    path.unlink()
    pmcd.run("pmprobe", "mmv")  # the agent sees the victim gone
    path.write_bytes(b"")
    pmcd.run("pmprobe", "mmv")  # and its file there, not ready
    strangers(stranger_claiming(7), writers.mmv_dir / "squatter")
    served(pmcd, "squatter")
    theirs = identities(pmcd, "squatter")
    writers.start("victim", 7, 20)
    served(pmcd, "victim")
    after = identities(pmcd, "victim")
    assert {m: v[:2] for m, v in after.items()} == {m: v[:2] for m, v in before.items()}
    ours = {n for v in before.values() for n in v[:2]} - {"PM_INDOM_NULL"}
    assert not ours & {n for v in theirs.values() for n in v[:2]}
    assert not any(v[0].startswith("70.7.") for v in theirs.values())
    again = identities(pmcd, "squatter")  # both served side by side, apart
    assert again == theirs
