"""The pmproxy variant (pmdammv-reference.md section 1): pmda-mmv as
``pmda-mmv pmda --prefix pmproxy -d 4`` serves the MMV files a running pmproxy writes into
``$PCP_TMP_DIR/pmproxy``, under the PMNS root ``pmproxy`` on domain 4, as PCP's C agent
does (``pmda_mmv.so`` entry point ``pmproxy_init``).

Everything is private: a redis-server and a pmproxy on free loopback ports (so pmproxy
writes its server, webgroup, series, redis and discover files), and a pmcd whose
``PCP_TMP_DIR`` is the one pmproxy writes into.  The C reference reads the same files in a
local context (``pminfo -L -Kclear -Kadd,4,pmda_mmv.so,pmproxy_init``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fleet.services import KeyServer, Pmproxy, require_fleet
from tests.support.pmcd import (
    LAUNCHER,
    AgentSpec,
    PrivatePmcd,
    make_dir,
    pcp_config,
    require_pcp,
)

pytestmark = pytest.mark.pmcd

PMPROXY_DOMAIN = 4


def pmproxy_agent() -> AgentSpec:
    """pmda-mmv's pmproxy variant as pmcd runs it: ``pmda-mmv pmda --prefix pmproxy -d 4``
    (directory: the default, ``$PCP_TMP_DIR/pmproxy`` of pmcd's environment)."""
    argv: tuple[str, ...] = (sys.executable, "-P", "-m", "pmda_mmv", "pmda")
    argv += ("--prefix", "pmproxy", "-d", str(PMPROXY_DOMAIN), "-l", "pmproxy.log", "--notready")
    argv += ("--registry", "none")  # never the system's registry (4.mmv-identity.json)
    return AgentSpec("pmproxy", PMPROXY_DOMAIN, argv, notready=True)


def c_dso() -> Path:
    """PCP's C ``pmda_mmv.so`` (packaged copy: $PCP_PMDAS_DIR/mmv may hold pmda-mmv)."""
    dso = Path(pcp_config("PCP_PMDASADM_DIR", "/usr/lib/pcp/pmdas")) / "mmv" / "pmda_mmv.so"
    if not dso.exists():
        pytest.fail(f"the C reference {dso} is missing (Debian package pcp)")
    return dso


@dataclass
class Proxied:
    """A running pmproxy writing into the PCP_TMP_DIR of ``pmcd``, which runs our agent."""

    pmproxy: Pmproxy
    pmcd: PrivatePmcd
    base: Path

    def reference(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``pminfo -L -Kclear -Kadd,4,pmda_mmv.so,pmproxy_init args`` on the same files."""
        env = {k: v for k, v in os.environ.items() if k not in ("PMCD_HOST", "PMCD_PORT")}
        env["PCP_TMP_DIR"] = str(self.pmcd.tmp_dir)
        dso = f"-Kadd,{PMPROXY_DOMAIN},{c_dso()},pmproxy_init"
        pmns = self.base / "root_pmproxy"  # its own PMNS: the system's may not exist
        pmns.write_text(f"root {{\n    pmproxy\t{PMPROXY_DOMAIN}:*:*\n}}\n")
        argv = ["pminfo", "-n", str(pmns), "-L", "-Kclear", dso, *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """pmproxy stopped (SIGSTOP) so its values hold still; it stays alive, as the
        agents require of a writer with MMV_FLAG_PROCESS."""
        assert self.pmproxy.proc is not None
        self.pmproxy.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.pmproxy.proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def proxied(private_base: Path) -> Iterator[Proxied]:
    require_pcp()
    require_fleet()
    base = make_dir(Path(tempfile.mkdtemp(prefix="pmproxy-variant-", dir=private_base)))
    with contextlib.ExitStack() as stack:
        keys = stack.enter_context(KeyServer(base / "keys"))
        pmcd = PrivatePmcd(base / "pmcd", [pmproxy_agent()])
        pmproxy = stack.enter_context(Pmproxy(base / "pmproxy", keys.port, pmcd.tmp_dir))
        stack.enter_context(pmcd)
        yield Proxied(pmproxy, pmcd, base)


def blocks(pminfo_output: str) -> dict[str, str]:
    """pminfo's report split per metric: name -> the lines under it."""
    found: dict[str, str] = {}
    for block in pminfo_output.strip().split("\n\n"):
        name, _, rest = block.strip().partition("\n")
        found[name.strip()] = rest
    return found


def pmproxy_files(p: Proxied) -> list[str]:
    return sorted(f.name for f in p.pmproxy.mmv_dir.iterdir() if not f.name.startswith("."))


# -- our agent on pmproxy's files -------------------------------------------------------------


def test_pmproxy_writes_its_own_mmv_files(proxied: Proxied) -> None:
    """The NOPREFIX ``server`` file and the groups of this PCP's pmproxy (6.0.3: webgroup,
    series, redis, discover; 6.3: keys and http instead of redis)."""
    files = pmproxy_files(proxied)
    assert "server" in files and {"webgroup", "series", "discover"} <= set(files), files


def groups(p: Proxied) -> list[str]:
    """The files pmproxy wrote whose metrics are named after them (all but ``server``)."""
    return [f for f in pmproxy_files(p) if f != "server"]


def test_serves_pmproxy_metrics_with_values(proxied: Proxied) -> None:
    pmcd, pid = proxied.pmcd, proxied.pmproxy.proc.pid if proxied.pmproxy.proc else 0
    out = pmcd.run("pminfo", "-f", "pmproxy")
    assert out.returncode == 0, out.stdout + out.stderr
    metrics = blocks(out.stdout)
    assert pmcd.fetch("pmproxy.pid") == {None: str(pid)}  # the "server" file is NOPREFIX
    assert pmcd.fetch("pmproxy.control.files") == {None: str(len(pmproxy_files(proxied)))}
    for group in groups(proxied):
        assert any(n.startswith(f"pmproxy.{group}.") for n in metrics), group
    empty = [n for n, text in metrics.items() if "value" not in text]
    assert not empty, f"metrics without values: {empty}\n{out.stdout}"


def test_domain_4_and_agent_label(proxied: Proxied) -> None:
    out = proxied.pmcd.run("pminfo", "-ml", "pmproxy.pid")
    assert out.returncode == 0, out.stderr
    pmid = re.search(r"PMID: (\d+)\.\d+\.\d+", out.stdout)
    assert pmid and int(pmid.group(1)) == PMPROXY_DOMAIN, out.stdout
    labels = json.loads(out.stdout.split("labels ", 1)[1].splitlines()[0])
    assert labels["agent"] == "pmproxy"


def test_matches_the_c_agent_on_the_same_files(proxied: Proxied) -> None:
    """Names, PMIDs, descriptors, help texts, values and instances: ``pminfo -mdfT``
    from our agent through pmcd equals the C agent's in a local context, with pmproxy
    stopped meanwhile so that its CPU and memory values hold still."""
    with proxied.frozen():
        ours = proxied.pmcd.run("pminfo", "-mdfT", "pmproxy")
        ref = proxied.reference("-mdfT", "pmproxy")
    assert ours.returncode == 0 and ref.returncode == 0, ours.stderr + ref.stderr
    ours_b, ref_b = blocks(ours.stdout), blocks(ref.stdout)
    assert len(ref_b) > 20, ref.stdout
    assert sorted(ours_b) == sorted(ref_b)
    differ = {n: (ours_b[n], ref_b[n]) for n in ref_b if ours_b[n] != ref_b[n]}
    assert not differ, differ


# -- the pmproxy variant picked by program name, as the C agent does --------------------------


def program_named_pmdapmproxy(target: Path, where: Path) -> Path:
    link = make_dir(where) / "pmdapmproxy"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


def c_daemon() -> Path:
    return Path(pcp_config("PCP_PMDASADM_DIR", "/usr/lib/pcp/pmdas")) / "mmv" / "pmdammv"


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("c", id="c-reference"),
        pytest.param("ours", id="pmda-mmv"),
    ],
)
def test_program_name_pmdapmproxy_selects_the_variant(proxied: Proxied, target: str) -> None:
    """``pmproxy 4 pipe binary .../pmdapmproxy`` with no options serves pmproxy's files."""
    binary = c_daemon() if target == "c" else LAUNCHER
    link = program_named_pmdapmproxy(binary, proxied.base / f"bin-{target}")
    env = {"PMDA_MMV_VENV": sys.prefix} if target == "ours" else {}
    # ours: no option but --registry none (never the system's 4.mmv-identity.json)
    extra = ("--registry", "none") if target == "ours" else ()
    agent = AgentSpec("pmproxy", PMPROXY_DOMAIN, (str(link), *extra), env)
    pmcd = PrivatePmcd(proxied.base / f"pmcd-{target}", [agent], timeout=10)
    pmcd.tmp_dir = proxied.pmcd.tmp_dir  # the PCP_TMP_DIR pmproxy writes into
    with pmcd:
        pid = proxied.pmproxy.proc.pid if proxied.pmproxy.proc else 0
        assert pmcd.fetch("pmproxy.pid") == {None: str(pid)}
