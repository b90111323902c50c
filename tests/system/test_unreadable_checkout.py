"""The agent run from a checkout user pcp cannot read.

The README's quick start runs as root in a clone of the repository, and a root user's clone
lives in /root (mode 0700 on Debian).  The agent imports as root, then drops to user pcp
(``set_user``) before its first scan: a module imported after that point, from a directory
pcp cannot traverse, fails.  psutil was imported at the first MMV_FLAG_PROCESS file, and its
ModuleNotFoundError ended every refresh holding one.

Here the agent's own package and its PyPI dependencies (psutil, watchdog) are copied into a
mode 0700 directory owned by root, python3-pcp's modules are linked into a readable one, and
Debian's ``/usr/bin/python3 -S`` (no site-packages: Debian's python3-psutil, if installed,
cannot stand in) gets both on ``PYTHONPATH``: what user pcp can read is exactly what a /root
checkout's venv gives it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import watchdog

import pmda_mmv
from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import publish, single, write_pcp_mmv
from tests.support.pmcd import MMV_DOMAIN, AgentSpec, PrivatePmcd

Start = Callable[..., PrivatePmcd]


@pytest.fixture
def unreadable_site() -> Iterator[Path]:
    """A 0700 root-owned directory holding pmda_mmv, psutil and watchdog."""
    top = Path(tempfile.mkdtemp(prefix="pmda-mmv-root-only-"))  # mode 0700
    site = top / "site"
    for module in (pmda_mmv, psutil, watchdog):
        source = Path(module.__file__ or "").parent
        shutil.copytree(source, site / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    yield site
    shutil.rmtree(top)


@pytest.fixture
def pcp_site(private_dir: Path) -> Path:
    """A readable directory of links to python3-pcp's modules (``pcp``, ``cpmapi`` ...)."""
    import pcp.pmapi
    import pcp.pmda

    site = private_dir / "pcp-site"
    site.mkdir()
    home = Path(pcp.__file__ or "").parent.parent  # the system's dist-packages
    for name, module in list(sys.modules.items()):
        where = Path(getattr(module, "__file__", None) or "/")
        if "." not in name and where.parent == home:  # cpmapi, cpmda ... (.so)
            (site / where.name).symlink_to(where)
    (site / "pcp").symlink_to(home / "pcp")
    assert pcp.pmda and pcp.pmapi and (site / "pcp").exists()
    return site


@pytest.mark.pmcd
@pytest.mark.host_pid_namespace
def test_process_files_are_served_from_a_checkout_pcp_cannot_read(
    private_pmcd: Start, private_mmv_dir: Path, unreadable_site: Path, pcp_site: Path
) -> None:
    denied = subprocess.run(
        ["runuser", "-u", "pcp", "--", "test", "-r", str(unreadable_site / "pmda_mmv")],
        check=False,
    )
    assert denied.returncode != 0, "user pcp can read the copy: the test would prove nothing"
    argv = ("/usr/bin/python3", "-S", "-P", "-m", "pmda_mmv", "pmda", "-d", str(MMV_DOMAIN))
    argv += ("--dir", str(private_mmv_dir), "-l", "mmv.log", "--notready")
    argv += ("--registry", "none")  # never the system's identity registry
    path = f"{unreadable_site}:{pcp_site}"
    agent = AgentSpec("mmv", MMV_DOMAIN, argv, {"PYTHONPATH": path}, notready=True)
    live = write_pcp_mmv(private_mmv_dir / "live", cluster=12, flags=layout.FLAG_PROCESS)
    publish(private_mmv_dir / "plain", single(cluster=13, value=7))
    pmcd = private_pmcd(agent)
    assert pmcd.fetch("mmv.plain.v") == {None: "7"}
    assert pmcd.fetch("mmv.live.py.counter") == {None: "41"}
    live.handle.lookup_set("py.counter", "", 42)
    assert pmcd.fetch("mmv.live.py.counter") == {None: "42"}
    log = pmcd.agent_log()
    assert "Error" not in log and "ModuleNotFoundError" not in log, log
