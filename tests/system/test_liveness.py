"""Writer liveness under pmcd (pmda_mmv.directory.liveness): MMV_FLAG_PROCESS files whose
writer PID is dead, reused (a process started after the file), negative, zero or 1, and
files that leave at the next request after their writer exits.  The rules one by one are in
tests/unit/directory/test_liveness.py; writers in other PID namespaces in
tests/system/test_containers.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pmda_mmv.mmvfile import layout
from tests.support import mmvbuild
from tests.support.mmvbuild import single as one
from tests.support.served import (
    UNKNOWN_NAME,
    Agent,
    Scratch,
)

pytestmark = pytest.mark.pmcd


def started_long_ago() -> int:
    """A libpcp_mmv-style generation: creation time (seconds << 32) one hour before this test
    process started, so that this (live) process looks like a reused PID."""
    return int(psutil.Process().create_time() - 3600) << 32


REUSED = "PID {} belongs to a process started after this file: PID reused"


NOT_FOUND = "writer PID {} not found in this PID namespace or any other"


@pytest.mark.parametrize(
    "case,served",
    [
        ("dead", NOT_FOUND),
        ("reused", REUSED),
        ("reused_seconds", REUSED),
        ("seconds", ""),
        ("negative", "writer PID {} is not a process ID"),
        ("zero", ""),
        # init (host PID 1) is alive but no writer of this file: not taken for it
        ("one", NOT_FOUND + ": PID 1 here is init, whose maps the agent may not read"),
    ],
)
@pytest.mark.host_pid_namespace  # host init at PID 1
def test_process_flag_pids(agent: Agent, scratch: Scratch, case: str, served: str) -> None:
    started = psutil.Process().create_time()
    now = int(started) << 32
    pid, generation = {
        "dead": (mmvbuild.dead_pid(), now),
        "reused": (os.getpid(), started_long_ago()),
        # Speed, Parfait and Hornet: the creation time in plain Unix seconds
        "reused_seconds": (os.getpid(), int(started) - 3600),
        "seconds": (os.getpid(), int(time.time())),
        "negative": (-1, now),
        "zero": (0, now),
        # created as init started: no process of another namespace (a container's init)
        # can be its writer, whatever runs on this machine meanwhile
        "one": (1, int(psutil.Process(1).create_time() + 1) << 32),
    }[case]
    b = one(cluster=27, value=11, flags=layout.FLAG_PROCESS, process=pid, generation=generation)
    path = scratch.put(f"pid_{case}", b)
    got = agent.probe(f"mmv.pid_{case}.v")[f"mmv.pid_{case}.v"]
    if not served:  # a live writer (the agent cannot read this test's maps: root's)
        assert got == "1 11"
        assert agent.status(path.name) == ("ok", "")
    else:  # what was seen, never "exited": no writer was followed
        assert got.startswith(UNKNOWN_NAME)
        why = f"header.process at offset 32: {served.format(pid)}"
        agent.assert_explained(path, "no-writer", why)
    agent.assert_alive()


CHILD_WRITER = """
import sys
from pcp import mmv, pmapi
w = mmv.MemoryMappedValues(sys.argv[1], flags=2, cluster=28)
w.add_metrics([mmv.mmv_metric("alive", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
w.start()
w.lookup_set("alive", "", 17)
print("ready", flush=True)
sys.stdin.read()
"""


def test_file_disappears_at_the_next_request_after_its_writer_exits(
    agent: Agent, scratch: Scratch
) -> None:
    path = scratch.path("child")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert agent.probe("mmv.child.alive")["mmv.child.alive"] == "1 17"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert path.exists()  # killed: the file stays behind, as after a crash
    assert agent.probe("mmv.child.alive")["mmv.child.alive"].startswith(UNKNOWN_NAME)
    agent.assert_explained(path, "exited", f"writer process {child.pid} has exited")
    agent.assert_alive()


MANY_FILES_WRITER = """
import sys
from pcp import mmv, pmapi
writers = []
for k in range(int(sys.argv[2])):
    w = mmv.MemoryMappedValues(f"{sys.argv[1]}{k:03d}", flags=2, cluster=300 + k)
    w.add_metrics([mmv.mmv_metric("alive", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
    w.start()
    w.lookup_set("alive", "", k)
    writers.append(w)
print("ready", flush=True)
sys.stdin.read()
"""


def test_every_file_of_an_exited_writer_goes_at_the_next_request(
    agent: Agent, scratch: Scratch
) -> None:
    # more files than one periodic check looks at (64): all go at the very next request.
    # They arrive at once, so the request budget may spread their loading over a few
    # requests (and hold what loaded meanwhile): waited for until all are served (found
    # by whole-suite runs on a loaded machine: mmv.many000.alive unknown at the first probe)
    count = 100
    prefix = scratch.path("many")
    names = [scratch.path(f"many{k:03d}").name for k in range(count)]
    child = subprocess.Popen(
        [sys.executable, "-c", MANY_FILES_WRITER, str(prefix), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        metrics = [f"mmv.{name}.alive" for name in names]
        wanted = {m: f"1 {k}" for k, m in enumerate(metrics)}
        for _ in range(100):
            if agent.probe(*metrics) == wanted:
                break
            time.sleep(0.1)
        assert agent.probe(*metrics) == wanted
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    got = agent.probe(*metrics)
    assert [m for m in metrics if not got[m].startswith(UNKNOWN_NAME)] == []
    states = agent.pmcd.fetch("mmv.control.file.state")
    assert {states[name] for name in names} == {'"exited"'}
    agent.assert_alive()
