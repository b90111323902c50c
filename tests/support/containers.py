"""What the container system tests (tests/system/test_containers.py,
test_containers_discovery.py) share: the namespaced writer (tests/support/writers/namespaced.py)
and the interpreter that runs it, and a cgroup named as Docker names a container's (the
``cgroup`` fixture of tests/system/conftest.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from pmda_mmv.directory.procfs import cgroup_of, container_of

NAMESPACED = Path(__file__).parent / "writers" / "namespaced.py"
PYTHON = "/usr/bin/python3"  # python3-pcp's
CONTAINER_ID = "c0ffee" * 10 + "c0de"
CGROUPS = Path("/sys/fs/cgroup")


def docker_cgroup() -> Iterator[tuple[Path | None, str]]:
    """A cgroup named as Docker names a container's (v2, else v1 pids), and the label
    the agent must give its writers' files; without a writable cgroup tree the writers stay
    in this one, labelled by its path.  The cgroup is removed once its processes are."""
    for tree in (CGROUPS / "unified", CGROUPS, CGROUPS / "pids"):
        path = tree / f"docker-{CONTAINER_ID}.scope"
        try:
            path.mkdir()
        except OSError:
            continue
        if (path / "cgroup.procs").exists():
            break
        path.rmdir()
    else:
        yield None, container_of(cgroup_of("/proc", os.getpid()))
        return
    try:
        yield path, CONTAINER_ID
    finally:
        for _ in range(100):
            try:
                path.rmdir()
                break
            except OSError:  # its last process not reaped yet
                time.sleep(0.05)
