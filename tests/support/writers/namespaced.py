"""A PROCESS-flag MMV writer in a PID namespace of its own, as in a container.

Run it under ``unshare --pid --fork --mount-proc /usr/bin/python3 namespaced.py`` (python3-pcp
is built for /usr/bin/python3).  It reads commands from stdin, one a line:

``write PATH PID CLUSTER``
    write PATH with python3-pcp's ``pcp.mmv`` (libpcp_mmv, MMV_FLAG_PROCESS: the header holds
    the writer's PID in this namespace) from the process of PID ``PID`` here: this process
    for its own PID (1: the namespace's init, as a container's entrypoint) or 0 (run without
    unshare: a host writer); any other is a child forked at that PID
    (``/proc/sys/kernel/ns_last_pid``, this namespace's own).  ``mmv.<file>.alive``
    holds 17.  Replies ``ready PID``.

``map PATH PID``
    map the file PATH (written by the test, e.g. with tests/support/mmvbuild.py) from the process of
    PID ``PID`` here, as its writer does: the agent takes a process that has the file mapped
    for its writer.  Replies ``ready PID``.

The writer keeps its mapping until stdin ends; the namespace's init waits for its children.
"""

from __future__ import annotations

import mmap
import os
import sys


def write(path: str, cluster: int) -> object:
    from pcp import mmv, pmapi

    writer = mmv.MemoryMappedValues(path, flags=2, cluster=cluster)  # MMV_FLAG_PROCESS
    writer.add_metrics([mmv.mmv_metric("alive", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
    writer.start()
    writer.lookup_set("alive", "", 17)
    return writer


def main() -> None:
    line = sys.stdin.readline().split()
    if not line or line[0] not in ("write", "map"):
        return
    path, pid = line[1], int(line[2])
    if pid not in (0, os.getpid()):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        child = os.fork()
        if child:
            os.waitpid(child, 0)
            return
    if line[0] == "map":
        with open(path, "rb") as f:
            kept: object = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    else:
        kept = write(path, int(line[3]))
    print(f"ready {os.getpid() if pid else 0}", flush=True)
    sys.stdin.read()
    del kept


if __name__ == "__main__":
    main()
