"""Fixtures the system tests share.  Those of one served agent (test_lifecycle,
test_liveness, test_names, test_policy, test_refusals): one agent under a private pmcd per
module, in a work directory named after the module and kept on failure, and a scratch
directory per test that the agent serves; a module defining a fixture of the same name uses
its own.  And examples/demo_writer.py writing into the private MMV directory (test_demo,
test_readme); a cgroup named as Docker names a container's (test_containers,
test_containers_discovery); pcp.mmv writers in the private MMV directory (test_identity,
test_identity_attacks)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.containers import docker_cgroup
from tests.support.identity import Writers
from tests.support.pmcd import CHECKOUT, kept_dir, make_dir
from tests.support.served import Agent, Scratch, scratch_in, served_agent


@pytest.fixture(scope="module")
def base(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A module directory under /tmp (the agent runs as pcp); kept on failure."""
    topic = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    yield from kept_dir(request, f"pmda-mmv-{topic}-", f"{topic} work directory")


@pytest.fixture(scope="module")
def agent(base: Path) -> Iterator[Agent]:
    yield from served_agent(base / "main")


@pytest.fixture
def scratch(agent: Agent) -> Iterator[Scratch]:
    yield from scratch_in(agent)


@pytest.fixture
def demo_writer(private_mmv_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """examples/demo_writer.py writing every 0.2 s into the private MMV directory, once
    both its files exist; stopped after the test."""
    argv = [sys.executable, str(CHECKOUT / "examples" / "demo_writer.py")]
    writer = subprocess.Popen(
        [*argv, "--tmp-dir", str(private_mmv_dir.parent), "--interval", "0.2"]
    )
    deadline = time.monotonic() + 30
    while len(list(private_mmv_dir.iterdir())) < 2 and time.monotonic() < deadline:
        assert writer.poll() is None, "demo_writer.py exited"
        time.sleep(0.1)
    yield writer
    writer.terminate()
    writer.wait(10)


@pytest.fixture(scope="module")
def cgroup() -> Iterator[tuple[Path | None, str]]:
    """A cgroup named as Docker names a container's, and the container label the agent
    must give the files of writers in it (tests/support/containers.py)."""
    yield from docker_cgroup()


@pytest.fixture
def writers(private_dir: Path) -> Iterator[Writers]:
    """pcp.mmv writers of files in the private MMV directory, stopped after the test."""
    w = Writers(make_dir(private_dir / "tmp" / "mmv"))
    try:
        yield w
    finally:
        w.close()
