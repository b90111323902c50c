"""Fixtures the system tests of one served agent share (test_lifecycle, test_liveness,
test_names, test_policy, test_refusals): one agent under a private pmcd per module, in a
work directory named after the module and kept on failure, and a scratch directory per
test that the agent serves.  A module defining a fixture of the same name uses its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pmcd import kept_dir
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
