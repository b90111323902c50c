"""Install/Remove end to end under the *system* pmcd (marker system_pmcd: they rewrite
pmcd.conf, the PMNS and $PCP_PMDAS_DIR/mmv, so they run only when selected or in CI), and
the launcher's interpreter check (no pmcd needed).

Each system test starts from the stock C agent and leaves it back; a module fixture
restores the saved pmcd.conf, PMNS and $PCP_PMDAS_DIR/mmv if a test could not, and the
system agent's identity registry as it was."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from pmda_mmv.agent import pcpcompat
from tests.support import mmvbuild
from tests.support.pmcd import CHECKOUT, LAUNCHER, pcp_config, require_pcp

PMDAS = Path(pcp_config("PCP_PMDAS_DIR", "/var/lib/pcp/pmdas"))
MMVDIR = PMDAS / "mmv"
PMCDCONF = Path(pcp_config("PCP_PMCDCONF_PATH", "/etc/pcp/pmcd/pmcd.conf"))
PMNS = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "pmns" / "root"
SYSTEM_MMV = Path(pcp_config("PCP_TMP_DIR", "/var/lib/pcp/tmp")) / "mmv"
VENV = CHECKOUT / ".venv"
REGISTRY = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "config/pmda/70.mmv-identity.json"
REGISTRY_FILES = tuple(REGISTRY.with_name(REGISTRY.name + end) for end in ("", ".key", ".journal"))
FILE = f"pmdammvinstall{os.getpid()}"  # metric names mmv.<FILE>.py.*


def sh(*argv: str | Path, cwd: Path = CHECKOUT, stdin: str = "", **env: str) -> str:
    """Run a script as the tests' user with stdin, PMDA_MMV_OPTIONS unset unless given;
    return stdout+stderr, failing the test on a non-zero exit."""
    environ = {k: v for k, v in os.environ.items() if k != "PMDA_MMV_OPTIONS"}
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{output}"
    return output


def mmv_line() -> list[str]:
    """The mmv line of the system pmcd.conf, split into words ([] if none)."""
    for line in PMCDCONF.read_text().splitlines():
        if line.split()[:1] == ["mmv"]:
            return line.split()
    return []


def pmda_dir() -> dict[str, str]:
    """$PCP_PMDAS_DIR/mmv: name -> symlink target, or the file's content."""
    return {
        p.name: os.readlink(p) if p.is_symlink() else p.read_text(errors="replace")
        for p in MMVDIR.iterdir()
        if p.is_file() or p.is_symlink()
    }


def system_fetch(metric: str) -> dict[str | None, str]:
    """``pminfo -f`` through the system pmcd, as PrivatePmcd.fetch."""
    out = subprocess.run(["pminfo", "-f", metric], capture_output=True, text=True)
    values = {}
    for line in out.stdout.splitlines():
        m = re.match(r'^\s+(?:inst \[-?\d+ or "(.*)"\] )?value (.*)$', line)
        if m:
            values[m.group(1)] = m.group(2)
    return values


def our_agents() -> list[psutil.Process]:
    """Running pmda-mmv agents named pmdammv (as pmdaproc.sh finds them)."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "pmdammv" and "pmda_mmv" in (p.info["cmdline"] or []):
            found.append(p)
    return found


def skeleton(output: str) -> list[str]:
    """pmdaproc.sh's messages with the numbers replaced by N."""
    return [re.sub(r"\d+", "N", line) for line in output.splitlines() if line.strip()]


@dataclass
class Stock:
    """The system's stock mmv setup, saved before the tests."""

    line: list[str]
    files: dict[str, str]
    written: mmvbuild.Written
    saved: Path


@pytest.fixture(scope="module")
def stock() -> Iterator[Stock]:
    require_pcp()
    was_installed = (MMVDIR / ".pmda-mmv-stock").exists()
    if was_installed:
        sh(CHECKOUT / "Remove")
    saved = Path(tempfile.mkdtemp(prefix="pmda-mmv-install-"))
    for f in REGISTRY_FILES:  # the system agent's registry: what the tests' agents write
        if f.exists():
            shutil.copy2(f, saved / f.name)
    shutil.copy2(PMCDCONF, saved / "pmcd.conf")
    shutil.copy2(PMNS, saved / "root")
    shutil.copytree(MMVDIR, saved / "mmv", symlinks=True)
    written = mmvbuild.write_pcp_mmv(SYSTEM_MMV / FILE, cluster=3000 + os.getpid() % 1000)
    state = Stock(mmv_line(), pmda_dir(), written, saved)
    assert state.line, "the system pmcd.conf has no stock mmv line to replace"
    yield state
    written.handle.stop()
    (SYSTEM_MMV / FILE).unlink(missing_ok=True)
    if (MMVDIR / ".pmda-mmv-stock").exists():
        subprocess.run([CHECKOUT / "Remove"], capture_output=True, timeout=300)
    if mmv_line() != state.line or pmda_dir() != state.files:
        shutil.copy2(saved / "pmcd.conf", PMCDCONF)
        shutil.copy2(saved / "root", PMNS)
        shutil.rmtree(MMVDIR)
        shutil.copytree(saved / "mmv", MMVDIR, symlinks=True)
        # SIGHUP the system pmcd only: its rc script's restart signals every pmcd
        pid = Path(pcp_config("PCP_RUN_DIR", "/run/pcp"), "pmcd.pid").read_text().strip()
        os.kill(int(pid), signal.SIGHUP)
    for f in REGISTRY_FILES:
        f.unlink(missing_ok=True)
        if (saved / f.name).exists():
            shutil.copy2(saved / f.name, f)
    shutil.rmtree(saved)
    if was_installed:
        subprocess.run([CHECKOUT / "Install"], capture_output=True, timeout=300)


def assert_written_values_served(written: mmvbuild.Written) -> None:
    for (name, inst), value in written.values.items():
        got = system_fetch(f"mmv.{FILE}.{name}")
        assert inst in got, (name, got)
        if isinstance(value, float):
            assert float(got[inst]) == value
        else:
            assert got[inst] == (f'"{value}"' if isinstance(value, str) else str(value))


@pytest.mark.system_pmcd
def test_install_serves_real_files_from_our_agent_and_remove_restores_stock(
    stock: Stock,
) -> None:
    sh(CHECKOUT / "Install")
    assert mmv_line() == [
        *["mmv", "70", "pipe", "binary", "notready", str(MMVDIR / "pmdammv")],
        *["-d", "70", "--notready", "--status-metrics"],
    ]
    # the agent directory names the venv's interpreter: no machine-wide record
    assert os.readlink(MMVDIR / "pmda-mmv-python") == str(VENV / "bin" / "pmdammv")
    assert_written_values_served(stock.written)
    probe = subprocess.run(["pmprobe", "-v", f"mmv.{FILE}.py.counter"], capture_output=True)
    assert probe.stdout.decode().split()[1:] == [
        "1",
        str(stock.written.values[("py.counter", None)]),
    ]
    assert system_fetch("mmv.control.file.state"), "--status-metrics is on for ./Install"
    # the process pmcd runs is ours, named pmdammv, from this checkout's venv, as user pcp
    (agent,) = our_agents()
    assert agent.cmdline()[0] == str(VENV / "bin" / "pmdammv")
    assert agent.username() == pcp_config("PCP_USER", "pcp")

    sh(CHECKOUT / "Install")  # idempotent: still one agent, still serving
    assert len(our_agents()) == 1
    assert_written_values_served(stock.written)

    sh(CHECKOUT / "Remove")
    assert mmv_line() == stock.line
    assert pmda_dir() == stock.files
    assert our_agents() == []
    assert_written_values_served(stock.written)  # now from the stock C agent
    assert "not installed" in sh(CHECKOUT / "Remove")


@pytest.mark.system_pmcd
def test_dropin_dir_behaves_as_pcp_qa_expects(stock: Stock) -> None:
    sh(CHECKOUT / "Install")
    # QA runs the PMDA directory's own scripts, answering "dso", without our options
    ours = sh("./Install", cwd=MMVDIR, stdin="dso\n")
    assert mmv_line()[-3:] == ["-d", "70", "--notready"]
    # strict drop-in: no status metrics (mmv.control.metrics only where C has it, PCP 7)
    assert system_fetch("mmv.control.file.state") == {}
    assert bool(system_fetch("mmv.control.metrics")) == pcpcompat.debug_options()
    assert_written_values_served(stock.written)
    removed = sh("./Remove", cwd=MMVDIR)
    assert "Check mmv metrics have gone away ... OK" in removed
    assert mmv_line() == []
    assert our_agents() == [], "Remove culls the agent by its name, pmdammv"

    sh(CHECKOUT / "Remove")
    assert mmv_line() == stock.line
    stock_install = sh("./Install", cwd=MMVDIR)  # the C agent's, over the same files
    # the same pmdaproc.sh messages as the C agent's Install ...
    assert skeleton(ours) == skeleton(stock_install)
    # ... and the same "N metrics and M values" (which PCP QA compares) when our file is
    # alone: other writers' files may share its cluster, where the C agent has defects
    if [p.name for p in SYSTEM_MMV.iterdir()] == [FILE]:
        counts = [line for line in ours.splitlines() if line.startswith("Check mmv")]
        assert counts == [ln for ln in stock_install.splitlines() if ln.startswith("Check mmv")]


# -- the launcher's interpreter check (no pmcd) -----------------------------------------------


def check_python(venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAUNCHER, "--check-python"],
        capture_output=True,
        text=True,
        env={**os.environ, "PMDA_MMV_VENV": str(venv)},
        timeout=60,
    )


def test_launcher_accepts_the_project_venv() -> None:
    done = check_python(Path(sys.prefix))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(Path(sys.prefix) / "bin" / "python")


@pytest.mark.parametrize("system_site", [True, False])
def test_launcher_names_what_is_missing(tmp_path: Path, system_site: bool) -> None:
    venv = tmp_path / "venv"
    argv = ["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)]
    subprocess.run(argv + (["--system-site-packages"] if system_site else []), check=True)
    done = check_python(venv)
    assert done.returncode == 1
    assert "pmda_mmv.agent.pmda:" in done.stderr
    # python3-pcp comes only through the system site-packages, and so do watchdog and
    # psutil where Debian's python3-watchdog and python3-psutil are installed
    for module in ("pcp.pmda", "watchdog", "psutil"):
        found = system_site and system_imports(module)
        assert (f"{module}:" in done.stderr) is not found, (module, done.stderr)


def system_imports(module: str) -> bool:
    """Whether Debian's python3 imports ``module`` from the system's site-packages."""
    argv = ["/usr/bin/python3", "-c", f"import {module}"]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def test_launcher_without_an_installed_interpreter_says_what_to_do(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PMDA_MMV_VENV"}
    done = subprocess.run(
        [LAUNCHER, "-d", "70"],
        capture_output=True,
        text=True,
        env={**env, "PCP_SYSCONF_DIR": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 1
    assert "pmda-mmv-python is missing" in done.stderr
    assert "run 'pmda-mmv install'" in done.stderr


# -- a wheel in a fresh venv, no checkout ------------------------------------------------------


def build_wheel(into: Path) -> Path:
    """The project's wheel, built from the checkout with the test venv's setuptools."""
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "-w", str(into), str(CHECKOUT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = into.glob("pmda_mmv-*.whl")
    return wheel


@pytest.mark.system_pmcd
def test_wheel_in_a_fresh_venv_installs_serves_and_removes(stock: Stock) -> None:
    """The README's pip way: python3 -m venv --system-site-packages V, V/bin/pip install the
    wheel (watchdog and psutil come from Debian through the system site-packages, offline),
    V/bin/pmda-mmv install; the agent runs from V with no checkout on any path."""
    work = Path(tempfile.mkdtemp(prefix="pmda-mmv-wheel-"))
    try:
        wheel = build_wheel(work / "dist")
        venv = work / "V"
        subprocess.run(
            ["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True
        )
        sh(venv / "bin" / "pip", "install", "-q", "--no-index", str(wheel), cwd=work)
        # the wheel carries the agent's directory and the man page
        agent = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        agent = agent / "site-packages" / "pmda_mmv" / "pmdadir"
        assert sorted(p.name for p in agent.iterdir()) == sorted(
            ["Install", "Remove", "domain.h", "pmdammv", "root_mmv"]
        )
        assert (venv / "share" / "man" / "man1" / "pmda-mmv.1").is_file()

        env = {"PMDA_MMV_OPTIONS": "", "PYTHONPATH": "", "PMDA_MMV_VENV": ""}
        out = sh(venv / "bin" / "pmda-mmv", "install", cwd=work, **env)
        assert "pmda-mmv is installed" in out
        assert mmv_line() == [
            *["mmv", "70", "pipe", "binary", "notready", str(MMVDIR / "pmdammv")],
            *["-d", "70", "--notready"],
        ]
        assert os.readlink(MMVDIR / "pmda-mmv-python") == str(venv / "bin" / "pmdammv")
        (process,) = our_agents()
        assert process.cmdline()[0] == str(venv / "bin" / "pmdammv")
        # served from the wheel's copy, not from this checkout
        files = {Path(f.path) for f in process.open_files()} | {
            Path(m.path) for m in process.memory_maps() if m.path.startswith("/")
        }
        assert not any(CHECKOUT in p.parents for p in files)
        assert_written_values_served(stock.written)
        pmval = subprocess.run(
            ["pmval", "-r", "-s", "1", f"mmv.{FILE}.py.counter"], capture_output=True, text=True
        )
        assert str(stock.written.values[("py.counter", None)]) in pmval.stdout, pmval.stdout

        out = sh(venv / "bin" / "pmda-mmv", "remove", cwd=work, **env)
        assert "pmda-mmv is removed" in out
        assert mmv_line() == stock.line
        assert pmda_dir() == stock.files
        assert our_agents() == []
        assert_written_values_served(stock.written)  # the stock C agent again
    finally:
        shutil.rmtree(work)


def test_install_and_remove_refuse_without_root_and_bad_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage errors exit 2 before anything changes; install's agent options are checked as
    the agent will read them; a user other than root is refused (exit 1) before anything
    is looked at (in-process: the checkout may be in a directory other users cannot read)."""
    pmda_mmv = [sys.executable, "-m", "pmda_mmv"]
    bad = subprocess.run([*pmda_mmv, "install", "--max-size", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--max-size" in bad.stderr
    extra = subprocess.run([*pmda_mmv, "remove", "extra"], capture_output=True, text=True)
    assert extra.returncode == 2 and "unrecognized arguments: extra" in extra.stderr
    from pmda_mmv.commands import install

    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    for command, argv in (("install", []), ("install", ["--refresh"]), ("remove", [])):
        assert install.main(command, argv) == 1
        assert "must be run as root" in capsys.readouterr().err


# -- all or nothing: an install stopped after it changed something leaves nothing changed --


def machine_state() -> list[tuple[str, str]]:
    """pmcd.conf, $PCP_PMDAS_DIR/mmv and the PMNS: every path's type, mode, owner and
    link target or content."""
    found = []
    for root in (PMCDCONF, MMVDIR, PMNS.parent):
        for path in [root, *sorted(root.rglob("*"))]:
            st = path.lstat()
            what = os.readlink(path) if path.is_symlink() else ""
            if path.is_file() and not path.is_symlink():
                what = path.read_bytes().hex()
            found.append((str(path), f"{st.st_mode:o} {st.st_uid} {st.st_gid} {what}"))
    return found


def install_stopped_midway(sig: signal.Signals) -> subprocess.Popen[str]:
    """``pmda-mmv install`` sent ``sig`` (its whole session for SIGKILL, as a power cut
    would) once it has laid the agent's files, so after it changed the machine."""
    proc = subprocess.Popen(
        [VENV / "bin" / "python", "-P", "-m", "pmda_mmv", "install"],
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for _ in range(600):
        if (MMVDIR / "pmda-mmv-python").is_symlink():
            break
        time.sleep(0.05)
    assert (MMVDIR / "pmda-mmv-python").is_symlink(), proc.communicate()
    (os.killpg if sig == signal.SIGKILL else os.kill)(proc.pid, sig)
    proc.wait(timeout=120)
    return proc


def assert_stock_back(stock: Stock, before: list[tuple[str, str]]) -> None:
    assert machine_state() == before
    for _ in range(100):  # pmcd stops our agent once it has read pmcd.conf again
        if not our_agents():
            break
        time.sleep(0.1)
    assert our_agents() == []
    assert_written_values_served(stock.written)  # from the stock C agent


@pytest.mark.system_pmcd
def test_an_install_stopped_by_a_signal_puts_back_exactly_what_was_there(stock: Stock) -> None:
    before = machine_state()
    proc = install_stopped_midway(signal.SIGTERM)
    assert proc.returncode == 1
    last = proc.stderr.read().strip().splitlines()[-1] if proc.stderr else ""
    assert "interrupted by SIGTERM" in last and "are as before" in last
    assert_stock_back(stock, before)


@pytest.mark.system_pmcd
def test_remove_after_an_install_killed_midway_recovers(stock: Stock) -> None:
    before = machine_state()
    proc = install_stopped_midway(signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert (MMVDIR.parent / ".pmda-mmv-undo").is_dir()
    assert "interrupted install" in sh(CHECKOUT / "Remove")
    assert not (MMVDIR.parent / ".pmda-mmv-undo").exists()
    assert_stock_back(stock, before)
