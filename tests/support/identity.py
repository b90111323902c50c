"""Real writers for the identity system tests (tests/system/test_identity.py,
test_identity_attacks.py): python3-pcp's ``pcp.mmv`` under /usr/bin/python3, one process per
file with a counter and an instant metric over an indom, and what a private pmcd says of
their metrics' numbers (PMID, InDom, instances)."""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.support.mmvbuild import Indom, Instance, Metric, MmvBuilder, Value
from tests.support.pmcd import PrivatePmcd

NOBODY = pwd.getpwnam("nobody").pw_uid

PYTHON = "/usr/bin/python3"  # python3-pcp's interpreter
WRITER = """
import sys
from pcp import mmv, pmapi
path, flags, cluster, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
w = mmv.MemoryMappedValues(path, flags=flags, cluster=cluster)
indom = mmv.mmv_indom(serial=5, shorttext="workers", helptext="workers")
indom.set_instances([mmv.mmv_instance(3, "three"), mmv.mmv_instance(9, "nine")])
w.add_indoms([indom])
metrics = [
    mmv.mmv_metric("requests", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF),
    mmv.mmv_metric("busy", 2, 1, 3, pmapi.pmUnits(), 5),
]
for m in metrics:
    m.semantics = 3  # instant (pcp.mmv 6.0.3's mmv_metric leaves it 0)
w.add_metrics(metrics)
w.start()
w.lookup_set("requests", "", value)
w.lookup_set("busy", "three", value + 1)
w.lookup_set("busy", "nine", value + 2)
print("ready", flush=True)
sys.stdin.read()
"""
PROCESS = 2  # MMV_FLAG_PROCESS


class Writers:
    """pcp.mmv writer processes, one per file; each stays until stopped."""

    def __init__(self, mmv_dir: Path) -> None:
        self.mmv_dir = mmv_dir
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, cluster: int, value: int, flags: int = 0) -> None:
        proc = subprocess.Popen(
            [PYTHON, "-c", WRITER, str(self.mmv_dir / name), str(flags), str(cluster), str(value)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        self.procs[name] = proc

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def served(pmcd: PrivatePmcd, *names: str, timeout: float = 20) -> None:
    """Wait until every ``mmv.<name>.requests`` answers a value."""
    deadline = time.monotonic() + timeout
    while True:
        out = pmcd.run("pmprobe", *[f"mmv.{n}.requests" for n in names]).stdout
        if all(line.split()[1] == "1" for line in out.splitlines() if line.strip()):
            return
        assert time.monotonic() < deadline, out
        time.sleep(0.2)


def identities(pmcd: PrivatePmcd, *names: str) -> dict[str, tuple[str, str, list[str]]]:
    """{metric: (PMID, InDom, instance ids and names)} of each file's metrics."""
    metrics = [f"mmv.{n}.{m}" for n in names for m in ("requests", "busy")]
    desc = pmcd.run("pminfo", "-md", *metrics).stdout
    values = pmcd.run("pminfo", "-f", *metrics).stdout
    got: dict[str, tuple[str, str, list[str]]] = {}
    for block in desc.strip().split("\n\n"):
        head = block.splitlines()[0]
        name, pmid = re.match(r"(\S+) PMID: (\S+)", head).groups()  # type: ignore[union-attr]
        indom = re.search(r"InDom: (\S+)", block).group(1)  # type: ignore[union-attr]
        got[name] = (pmid, indom, [])
    for block in values.strip().split("\n\n"):
        lines = block.splitlines()
        got[lines[0]][2].extend(re.findall(r"inst \[(\d+ or \"\w+\")\]", block))
    assert set(got) == set(metrics), desc + values
    return got


def strangers(builder: MmvBuilder, path: Path) -> None:
    """``builder``'s file at ``path``, owned by user nobody from its first appearance."""
    tmp = path.with_name(f".{path.name}.tmp")  # a dot-file: ignored by the agent
    builder.write(tmp)
    os.chown(tmp, NOBODY, -1)
    os.rename(tmp, path)


def stranger_claiming(cluster: int) -> MmvBuilder:
    """A file of the victim's shape (the :data:`WRITER`'s) asking for ``cluster``."""
    b = MmvBuilder(cluster=cluster, version=2)
    b.indoms.append(Indom(5, [Instance(3, "three"), Instance(9, "nine")]))
    b.metrics += [Metric("requests", 1), Metric("busy", 2, indom=5)]
    b.values += [Value("requests", None, 666), Value("busy", 3, 667), Value("busy", 9, 668)]
    return b
