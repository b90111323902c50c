"""A PROCESS-flag MMV writer in a PID namespace of its own, as in a container (issue 25).

Run it under ``unshare --pid --fork --mount-proc /usr/bin/python3 namespaced.py`` (python3-pcp
is built for /usr/bin/python3).  It reads commands from stdin, one a line:

``write PATH PID CLUSTER``
    write PATH with python3-pcp's ``pcp.mmv`` (libpcp_mmv, MMV_FLAG_PROCESS: the header holds
    the writer's PID in this namespace) from the process of PID ``PID`` here: this process
    for its own PID (1: the namespace's init, as a container's entrypoint) or 0 (run without
    unshare: a host writer); any other is a child forked at that PID
    (``/proc/sys/kernel/ns_last_pid``, this namespace's own).  ``mmv.<file>.alive``
    holds 17.  Replies ``ready PID``.

The writer keeps its mapping until stdin ends; the namespace's init waits for its children.
"""

from __future__ import annotations

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
    if not line or line[0] != "write":
        return
    path, pid, cluster = line[1], int(line[2]), int(line[3])
    if pid not in (0, os.getpid()):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        child = os.fork()
        if child:
            os.waitpid(child, 0)
            return
    kept = write(path, cluster)
    print(f"ready {os.getpid() if pid else 0}", flush=True)
    sys.stdin.read()
    del kept


if __name__ == "__main__":
    main()
