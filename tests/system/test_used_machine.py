"""The suite on a used machine: a machine where the agent has run keeps an identity
registry of many names (:mod:`tests.support.usedmachine`), and nothing a test checks may
depend on it.  ``check`` and ``debug`` read the agent's registry only for the agent's own
directory ($PCP_TMP_DIR/<prefix>) or when ``--registry`` (or ``PMDA_MMV_REGISTRY``) names
one; the system test plants a used machine's registry where the system agent keeps it
(saved and put back) and runs the check, identity and command tests under it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.agent.options import REGISTRY_ENV
from pmda_mmv.namespace.registry import Registry, default_path
from tests.support import usedmachine
from tests.support.mmvbuild import Metric, MmvBuilder, Value
from tests.support.pmcd import CHECKOUT, pcp_config

CLUSTER = 50  # the cluster the file asks for; the planted registry gives it to another name
KEY_TESTS = (
    "tests/system/test_check.py",
    "tests/system/test_identity.py",
    "tests/unit/commands",
    "tests/unit/test_cli.py",
    "tests/unit/agent/test_pmda.py",
    "tests/unit/agent/test_serving.py",
)
"""The tests that judge files and numbers (those a used machine's registry could move) and
the in-process agent's (those that would write it)."""
WORKERS = os.environ.get("PMDA_MMV_TEST_WORKERS") or str(2 * (os.cpu_count() or 1))


def one_metric(path: Path) -> None:
    b = MmvBuilder(cluster=CLUSTER)
    b.metrics.append(Metric("m", 1))
    b.values.append(Value("m", None, 7))
    b.write(path)


def pmda_mmv(*argv: str, **env: str) -> str:
    """Run ``pmda-mmv ARGV`` with ``env`` added (PMDA_MMV_REGISTRY unset unless given)."""
    environ = {k: v for k, v in os.environ.items() if k != REGISTRY_ENV} | env
    done = subprocess.run(
        [sys.executable, "-P", "-m", "pmda_mmv", *argv],
        cwd=CHECKOUT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def check_cluster(path: Path, **env: str) -> int:
    [verdict] = json.loads(pmda_mmv("check", "--json", str(path), **env))
    return int(verdict["cluster"])


def test_check_and_debug_read_the_agents_registry_only_for_the_agents_directory(
    tmp_path: Path,
) -> None:
    """A private PCP_VAR_DIR holds a used registry (cluster 50 held by another name); a file
    asking for 50 gets it in any directory but the agent's, or with PMDA_MMV_REGISTRY."""
    var, pcp_tmp, elsewhere = tmp_path / "var", tmp_path / "tmp", tmp_path / "elsewhere"
    registry = Path(default_path(str(var), 70))
    registry.parent.mkdir(parents=True)
    assert usedmachine.plant(registry) > 500
    env = {"PCP_VAR_DIR": str(var), "PCP_TMP_DIR": str(pcp_tmp)}
    for d in (pcp_tmp / "mmv", elsewhere):
        d.mkdir(parents=True)
        one_metric(d / "first")
    assert check_cluster(elsewhere / "first", **env) == CLUSTER
    assert check_cluster(pcp_tmp / "mmv" / "first", **env) != CLUSTER
    assert check_cluster(elsewhere / "first", **env, PMDA_MMV_REGISTRY=str(registry)) != CLUSTER
    assert check_cluster(pcp_tmp / "mmv" / "first", **env, PMDA_MMV_REGISTRY="none") == CLUSTER
    assert f"70.{CLUSTER}.1" in pmda_mmv("debug", "--once", "--dir", str(elsewhere), **env)
    assert f"70.{CLUSTER}.1" not in pmda_mmv("debug", "--once", **env)


@pytest.fixture
def used_system_registry() -> Iterator[Path]:
    """The system agent's registry (and its secret and journal) replaced by a used
    machine's; put back."""
    path = Path(default_path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp"), 70))
    files = tuple(path.with_name(path.name + end) for end in ("", ".key", ".journal"))
    saved = Path(tempfile.mkdtemp(prefix="pmda-mmv-used-"))
    for f in files:
        if f.exists():
            shutil.copy2(f, saved / f.name)
        f.unlink(missing_ok=True)
    usedmachine.plant(path)
    try:
        yield path
    finally:
        for f in files:
            f.unlink(missing_ok=True)
            if (saved / f.name).exists():
                shutil.copy2(saved / f.name, f)
        shutil.rmtree(saved)


@pytest.mark.system_pmcd
def test_the_key_tests_pass_with_a_used_machines_registry(used_system_registry: Path) -> None:
    """The check, identity, command and in-process agent tests, run as the README runs
    them, pass with thousands of names remembered by the system agent's registry, those
    tests' own names among them, at other clusters, and leave it as it was."""
    held = Registry(str(used_system_registry))
    held.load()
    assert len(held.records) > 500
    planted = used_system_registry.read_bytes()
    done = subprocess.run(
        # side by side, as scripts/test runs them (this test runs alone: serial)
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", WORKERS, *KEY_TESTS],
        cwd=CHECKOUT,
        env={k: v for k, v in os.environ.items() if k != REGISTRY_ENV},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout.splitlines()[-1] and "failed" not in done.stdout
    assert used_system_registry.read_bytes() == planted, "a test wrote the machine's registry"
