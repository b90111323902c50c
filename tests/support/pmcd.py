"""A private pmcd for tests (python-pmda-api.md section 3) and its pytest fixtures.

:class:`PrivatePmcd` runs ``$PCP_BINADM_DIR/pmcd -f`` on a free port of its own with its own
pmcd.conf, PMNS, run and log directories and ``PCP_TMP_DIR``, all under one work directory,
and ``PMCD_ROOT_AGENT=0`` so that pmcd starts its agents itself instead of asking the system
pmdaroot.  Clients reach it only through an explicit ``-h localhost:PORT``:
:meth:`PrivatePmcd.run` adds it for the PCP client tools.  The system pmcd is never touched.

Agents are :class:`AgentSpec` lines; :func:`our_agent`, :func:`launcher_agent` and
:func:`c_agent` make the mmv agent lines for pmda-mmv (``python -m pmda_mmv pmda``), for its
launcher ``deploy/pmdas/mmv/pmdammv`` and for PCP's C ``pmdammv`` (the reference).

Permissions: pmcd starts agents as root; the mmv agents then drop to user pcp, so every
directory they read must be readable by pcp.  pytest's ``tmp_path`` lives under the mode 0700
``/tmp/pytest-of-root``, so the fixtures here use their own base directory (mode 0755) under
/tmp instead.

Fixtures: ``private_pmcd`` (a factory: ``private_pmcd(agent, ...) -> PrivatePmcd``, stopped at
teardown), ``private_dir`` (a fresh 0755 directory), ``private_mmv_dir``
(``private_dir/tmp/mmv``; its parent is the ``PCP_TMP_DIR`` for :func:`c_agent`) and
``pcp_required``.  Tests that use them fail, never skip, when pmcd, the PCP client tools or
python3-pcp are missing.

Every test that starts a private pmcd is marked ``pmcd`` (pyproject.toml), so that
``-m "not pmcd"`` runs none: :class:`PrivatePmcd` and ``private_pmcd`` fail the test that is
not (:func:`require_pmcd_marker`).

Every test runs with ``PMDA_MMV_REGISTRY=none``: a command or agent not given ``--registry``
keeps its identity registry in memory, never reading a used machine's (:func:`pytest_configure`).

Also here: the ``system_pmcd`` marker for tests that change the *system* pmcd (its pmcd.conf,
PMNS, $PCP_PMDAS_DIR/mmv): they run only when asked for explicitly, with ``--system-pmcd``
or ``-m system_pmcd`` (``.ci/run`` passes ``--system-pmcd``); otherwise they are deselected,
also under ``CI=true``, which only makes a skip fail the run (tests/support/ci.py).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
LAUNCHER = CHECKOUT / "deploy" / "pmdas" / "mmv" / "pmdammv"
MMV_DOMAIN = 70

# PCP clients that talk to a pmcd and take -h HOST
HOST_TOOLS = frozenset({"pminfo", "pmprobe", "pmval", "pmstore", "pmdumptext", "pmrep"})


def pcp_config(name: str, default: str = "") -> str:
    """A PCP configuration variable (``PCP_BINADM_DIR`` ...): the environment's value, else
    ``$PCP_CONF`` (/etc/pcp.conf), else ``default``.  Never imports python3-pcp."""
    if os.environ.get(name):
        return os.environ[name]
    try:
        text = Path(os.environ.get("PCP_CONF", "/etc/pcp.conf")).read_text()
    except OSError:
        return default
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == name:
            return value.strip().strip('"')
    return default


def binadm(tool: str) -> Path:
    """``$PCP_BINADM_DIR/tool`` (pmcd, pmcd_wait, pmnsmerge ...)."""
    return Path(pcp_config("PCP_BINADM_DIR", "/usr/lib/pcp/bin")) / tool


def missing_requirements() -> list[str]:
    """What a private pmcd test lacks on this machine (empty when all is there)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (pmcd starts agents as root; the mmv agents then drop to pcp)")
    for tool in ("pmcd", "pmcd_wait", "pmnsmerge"):
        if not os.access(binadm(tool), os.X_OK):
            missing.append(f"{binadm(tool)} (Debian package pcp)")
    for tool in sorted(HOST_TOOLS - {"pmdumptext", "pmrep"}):
        if shutil.which(tool) is None:
            missing.append(f"{tool} on PATH (Debian package pcp)")
    for module, package in (
        ("pcp.pmda", "python3-pcp, through a venv made with --system-site-packages"),
        ("watchdog", "watchdog (pip)"),
        ("psutil", "psutil (pip)"),
    ):
        try:
            __import__(module)
        except ImportError as e:
            missing.append(f"python module {module} for {sys.executable}: {e} ({package})")
    return missing


def require_pcp() -> None:
    """Fail the calling test (never skip it) when :func:`missing_requirements` finds gaps."""
    missing = missing_requirements()
    if missing:
        pytest.fail("a private pmcd needs: " + "; ".join(missing) + " (run scripts/setup)")


def make_dir(path: Path, mode: int = 0o755) -> Path:
    """Create ``path`` (and parents) with ``mode`` set explicitly (umask ignored)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


@dataclass(frozen=True)
class AgentSpec:
    """One pmcd.conf agent: ``name domain pipe binary [notready] <wrapper script>``.

    The wrapper exports ``env`` and execs ``argv`` (pmcd.conf has no quoting and no per-agent
    environment).  ``notready``: pmcd waits for the agent's ready report (the agent must be
    told so too, e.g. pmda-mmv's ``--notready``).  ``pmns_root``: the dynamic PMNS root the
    agent serves (``None``: the agent's name; ``""``: none).  ``argv0``: run ``argv[0]``
    through a symlink of this name (pmdaproc.sh's Install/Remove stop every process named
    ``pmdammv``, private ones included)."""

    name: str
    domain: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    notready: bool = False
    pmns_root: str | None = None
    argv0: str | None = None

    @property
    def root(self) -> str:
        return self.name if self.pmns_root is None else self.pmns_root


def private_registry(mmv_dir: Path, extra: Sequence[str]) -> tuple[str, ...]:
    """``--registry`` in the test's own directory (beside ``mmv_dir``), unless ``extra``
    names one: a test never reads or writes the system's identity registry
    ($PCP_VAR_DIR/config/pmda/70.mmv-identity.json)."""
    if any(a == "--registry" or a.startswith("--registry=") for a in extra):
        return ()
    return ("--registry", str(registry_dir(mmv_dir) / REGISTRY_NAME))


REGISTRY_NAME = "mmv-identity.json"
"""The private agents' identity registry, in ``identity/`` beside their MMV directory."""


def registry_dir(mmv_dir: Path) -> Path:
    """``identity/`` beside ``mmv_dir``, writable by the user the agent runs as (it drops
    to the PCP user before it saves the registry)."""
    path = make_dir(Path(mmv_dir).parent / "identity")
    if os.geteuid() == 0:
        user = pwd.getpwnam(pcp_config("PCP_USER", "pcp"))
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def our_agent(mmv_dir: Path, *extra: str, notready: bool = True) -> AgentSpec:
    """pmda-mmv run by this interpreter: ``python -P -m pmda_mmv pmda -d 70 --dir mmv_dir
    -l mmv.log [--notready] --registry mmv_dir/../mmv-identity.json extra...`` (log in the
    pmcd's log directory)."""
    argv = [sys.executable, "-P", "-m", "pmda_mmv", "pmda", "-d", str(MMV_DOMAIN)]
    argv += ["--dir", str(mmv_dir), "-l", "mmv.log", *(["--notready"] if notready else [])]
    argv += private_registry(mmv_dir, extra)
    return AgentSpec("mmv", MMV_DOMAIN, (*argv, *extra), notready=notready)


def launcher_agent(mmv_dir: Path, *extra: str) -> AgentSpec:
    """pmda-mmv through ``deploy/pmdas/mmv/pmdammv`` (the line ./Install writes), with
    ``PMDA_MMV_VENV`` set to this interpreter's venv (registry as :func:`our_agent`)."""
    argv = (str(LAUNCHER), "-d", str(MMV_DOMAIN), "--notready", "--dir", str(mmv_dir))
    argv += (*private_registry(mmv_dir, extra), *extra)
    return AgentSpec("mmv", MMV_DOMAIN, argv, {"PMDA_MMV_VENV": sys.prefix}, notready=True)


def c_agent(tmp_dir: Path, *extra: str) -> AgentSpec:
    """PCP's C pmdammv as a pipe agent serving ``tmp_dir/mmv`` (``PCP_TMP_DIR=tmp_dir``).

    The binary is the packaged one in ``$PCP_PMDASADM_DIR/mmv`` (once pmda-mmv is installed,
    ``$PCP_PMDAS_DIR/mmv/pmdammv`` is our launcher), run as ``pmdammv-reference`` so that
    an Install or Remove elsewhere on the machine does not stop it."""
    binary = Path(pcp_config("PCP_PMDASADM_DIR", "/usr/lib/pcp/pmdas")) / "mmv" / "pmdammv"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"the C reference agent {binary} is missing (Debian package pcp)")
    argv = (str(binary), "-d", str(MMV_DOMAIN), *extra)
    env = {"PCP_TMP_DIR": str(tmp_dir)}
    return AgentSpec("mmv", MMV_DOMAIN, argv, env, argv0="pmdammv-reference")


class PmcdError(RuntimeError):
    """The private pmcd or one of its agents did not come up; the message has the logs."""


def free_port() -> int:
    """A TCP port nobody listens on right now (pmcd retries on a clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


VALUE_LINE = re.compile(r'^\s+(?:inst \[(-?\d+) or "(.*)"\] )?value (.*)$')


class PrivatePmcd:
    """A pmcd of the tests' own, under ``workdir`` (created, mode 0755).

    Layout: ``pmcd.conf``, ``root`` (PMNS: pmcd's names plus each agent's dynamic root),
    ``agents/<name>.sh`` (wrappers), ``run/`` (PCP_RUN_DIR, unix socket), ``log/``
    (PCP_LOG_DIR and pmcd's cwd: ``pmcd.log`` and the agents' default logs), ``tmp/``
    (PCP_TMP_DIR).  Use as a context manager, or :meth:`start`/:meth:`stop`.

    ``agent_timeout`` is pmcd's ``-t``: how long pmcd waits for an agent's answer before it
    drops the agent (30 s, for a loaded test machine); None starts pmcd without ``-t``, with
    its default (5 s), as the system pmcd runs."""

    def __init__(
        self,
        workdir: Path,
        agents: Sequence[AgentSpec],
        timeout: float = 30.0,
        agent_timeout: float | None = 30.0,
    ):
        self.workdir = make_dir(Path(workdir))
        self.agents = list(agents)
        self.timeout = timeout
        self.agent_timeout = agent_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_dir = self.workdir / "log"
        self.run_dir = self.workdir / "run"
        self.tmp_dir = self.workdir / "tmp"
        self.conf = self.workdir / "pmcd.conf"
        self.pmns = self.workdir / "root"

    @property
    def host(self) -> str:
        """The ``-h`` argument of clients: ``localhost:PORT``."""
        return f"localhost:{self.port}"

    def __enter__(self) -> PrivatePmcd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- running clients

    def run(
        self, tool: str, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a PCP tool (``-h host`` added for the clients in :data:`HOST_TOOLS`; other
        tools such as dbpmda get ``args`` unchanged) and return its completed process
        (text; never raises on a non-zero exit)."""
        exe = shutil.which(tool) or str(binadm(tool))
        host = ["-h", self.host] if tool in HOST_TOOLS else []
        env = {k: v for k, v in os.environ.items() if k not in ("PMCD_HOST", "PMCD_PORT")}
        return subprocess.run(
            [exe, *host, *args],
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
        )

    def fetch(self, metric: str) -> dict[str | None, str]:
        """``pminfo -f metric`` as {external instance name (None if singular): value text
        as pminfo prints it (strings in double quotes)}; raises AssertionError on failure."""
        out = self.run("pminfo", "-f", metric)
        values: dict[str | None, str] = {}
        for line in out.stdout.splitlines():
            m = VALUE_LINE.match(line)
            if m:
                values[m.group(2)] = m.group(3)
        assert out.returncode == 0 and values, f"pminfo -f {metric}: {out.stdout}{out.stderr}"
        return values

    # -- logs and processes

    def agent_log(self, name: str = "mmv") -> str:
        """The agent's log ``log/<name>.log`` ('' if there is none yet)."""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pmcd_log(self) -> str:
        """pmcd's own log plus anything it wrote to stderr."""
        parts = [self.log_dir / "pmcd.log", self.log_dir / "pmcd.stderr"]
        return "".join(p.read_text(errors="replace") for p in parts if p.exists())

    def agent_processes(self) -> list[int]:
        """PIDs of the processes pmcd started (its children)."""
        import psutil

        if self.proc is None:
            return []
        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    # -- life cycle

    def start(self, wait_agents: bool = True) -> None:
        """Write the configuration, start pmcd (retrying on a port clash) and wait until it
        answers and (unless not ``wait_agents``: the test is pmcd's only client) every agent
        with a PMNS root serves names; raises PmcdError.  Under pytest, the running test
        must be marked ``pmcd`` (:func:`require_pmcd_marker`)."""
        require_pmcd_marker()
        self._write_config()
        for _ in range(3):
            self.port = free_port()
            self._spawn()
            if self._wait_pmcd():
                break
            self.stop()
            if "in use" not in self.pmcd_log():
                raise PmcdError(f"private pmcd did not start:\n{self.pmcd_log()}")
        else:
            raise PmcdError(f"private pmcd found no free port:\n{self.pmcd_log()}")
        try:
            if wait_agents:
                self.wait_agents()
        except BaseException:
            self.stop()
            raise

    def sighup(self) -> None:
        """SIGHUP this pmcd only (re-read pmcd.conf, restart agents), then wait as start."""
        assert self.proc is not None, "pmcd is not running"
        self.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        self.wait_agents()

    def restart_agent(self, probe: str = "mmv.control.files") -> None:
        """A new agent process: the old ones killed, pmcd told (a request to the agent, then
        SIGHUP) and restarting it."""
        old = self.agent_processes()
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        self.run("pmprobe", probe)  # pmcd notices the agent has gone
        self.sighup()
        assert not set(old) & set(self.agent_processes())

    def wait_agents(self) -> None:
        """Wait until ``pmprobe ROOT`` lists at least one metric without an error for every
        agent with a PMNS root; raises PmcdError (with the logs) at the timeout, or at once
        when pmcd has dropped the agent ("No PMCD agent for domain")."""
        for agent in self.agents:
            if agent.root:
                self._wait_for(agent)

    def stop(self) -> None:
        """Stop pmcd (TERM, then KILL) and any agent it left behind; idempotent."""
        import psutil

        if self.proc is None:
            return
        children = []
        with contextlib.suppress(psutil.NoSuchProcess):
            children = psutil.Process(self.proc.pid).children(recursive=True)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=5)
        for child in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()

    # -- internals

    def _write_config(self) -> None:
        pcp = pwd.getpwnam(pcp_config("PCP_USER", "pcp"))
        for d in (self.log_dir, self.run_dir, self.tmp_dir, self.workdir / "agents"):
            make_dir(d)
        for d in (self.log_dir, self.run_dir):
            os.chown(d, pcp.pw_uid, pcp.pw_gid)
        pmdas = pcp_config("PCP_PMDAS_DIR", "/var/lib/pcp/pmdas")
        lines = [f"pmcd\t2\tdso\tpmcd_init\t{pmdas}/pmcd/pmda_pmcd.so"]
        roots = []
        for agent in self.agents:
            wrapper = self.workdir / "agents" / f"{agent.name}.sh"
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in agent.env.items())
            argv = list(agent.argv)
            if agent.argv0:
                link = self.workdir / "agents" / agent.argv0
                link.unlink(missing_ok=True)
                link.symlink_to(argv[0])
                argv[0] = str(link)
            wrapper.write_text(f'#!/bin/sh\n{exports}exec {shlex.join(argv)} "$@"\n')
            wrapper.chmod(0o755)
            ipc = "binary notready" if agent.notready else "binary"
            lines.append(f"{agent.name}\t{agent.domain}\tpipe\t{ipc}\t{wrapper}")
            if agent.root:
                roots.append(f"\t{agent.root}\t{agent.domain}:*:*")
        self.conf.write_text("\n".join(lines) + "\n")
        agent_roots = self.workdir / "root_agents"
        agent_roots.write_text("root {\n" + "\n".join(roots) + "\n}\n")
        root_pmcd = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "pmns" / "root_pmcd"
        self.pmns.unlink(missing_ok=True)
        merge = [str(binadm("pmnsmerge")), str(root_pmcd), str(agent_roots), str(self.pmns)]
        done = subprocess.run(merge, capture_output=True, text=True)
        if done.returncode != 0:
            raise PmcdError(f"pmnsmerge failed: {done.stdout}{done.stderr}")

    def _spawn(self) -> None:
        env = dict(os.environ)
        for k in ("PMCD_HOST", "PMCD_PORT", "PCP_PMCDCONF_PATH"):
            env.pop(k, None)
        env.update(
            PMCD_ROOT_AGENT="0",
            PCP_TMP_DIR=str(self.tmp_dir),
            PCP_RUN_DIR=str(self.run_dir),
            PCP_LOG_DIR=str(self.log_dir),
        )
        argv = [str(binadm("pmcd")), "-f", "-A", "-p", str(self.port)]
        argv += ["-s", str(self.run_dir / "pmcd.socket"), "-c", str(self.conf)]
        argv += ["-n", str(self.pmns), "-l", str(self.log_dir / "pmcd.log")]
        if self.agent_timeout is not None:
            argv += ["-t", f"{self.agent_timeout:g}"]
        with open(self.log_dir / "pmcd.stderr", "ab") as stderr:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.log_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_pmcd(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            wait = [str(binadm("pmcd_wait")), "-h", self.host, "-t", "1"]
            if subprocess.run(wait, capture_output=True).returncode == 0:
                return True
        return False

    def _wait_for(self, agent: AgentSpec) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            probe = self.run("pmprobe", agent.root)
            counts = [ln.split()[1] for ln in probe.stdout.splitlines() if len(ln.split()) > 1]
            if probe.returncode == 0 and any(c.isdigit() for c in counts):
                return
            if "No PMCD agent for domain" in probe.stdout:
                break
            time.sleep(0.2)
        raise PmcdError(
            f"agent {agent.name} ({shlex.join(agent.argv)}) does not serve {agent.root} "
            f"through pmcd {self.host}\n--- pmcd log:\n{self.pmcd_log()}\n"
            f"--- {agent.name} log:\n{self.agent_log(agent.name)}"
        )


# -- pytest plugin --------------------------------------------------------------------------


RUNNING: list[pytest.Item] = []
"""The test pytest is running (setup, call and teardown), if any: benchmarks and soak start
private pmcds outside pytest."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    RUNNING.append(item)
    try:
        yield
    finally:
        RUNNING.remove(item)


def require_pmcd_marker() -> None:
    """Fail the running test when it starts a private pmcd without the ``pmcd`` marker, so
    that ``-m "not pmcd"`` runs no pmcd (module fixtures start theirs in their first test's
    setup: the module's tests are marked together)."""
    if RUNNING and RUNNING[-1].get_closest_marker("pmcd") is None:
        pytest.fail(f"{RUNNING[-1].nodeid} starts a private pmcd: mark it pytest.mark.pmcd")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--system-pmcd",
        action="store_true",
        help="also run the tests marked system_pmcd, which Install/Remove pmda-mmv under the "
        "system pmcd (never by default, not even with CI=true)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # no test reads or writes the machine's identity registry: check, debug and agents
    # that are not given a --registry keep theirs in memory (the system agent, which
    # pmcd starts, does not inherit this: pmda-mmv install drops it from PCP's scripts)
    os.environ["PMDA_MMV_REGISTRY"] = "none"
    config.addinivalue_line(
        "markers",
        "system_pmcd: changes the system pmcd (pmcd.conf, PMNS, $PCP_PMDAS_DIR/mmv); runs "
        "only with --system-pmcd or -m system_pmcd",
    )
    config.addinivalue_line(
        "markers",
        "serial: runs alone, after the tests run side by side (scripts/test): it changes the "
        "machine (every system_pmcd test is serial), or it times a request against a bound",
    )
    config.addinivalue_line(
        "markers",
        "host_pid_namespace: needs the initial PID namespace (host init at PID 1, writers "
        "in PID namespaces below the test's, prune's own judgement); deselected elsewhere, "
        "as in a scripts/matrix root, which runs in a PID namespace of its own",
    )


INITIAL_PID_NS = 0xEFFFFFFC  # the inode of the initial PID namespace (PROC_PID_INIT_INO)


def in_initial_pid_namespace() -> bool:
    """Whether this process is in the initial (host) PID namespace."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NS
    except OSError:
        return False


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that changes the system pmcd runs alone (marker ``serial``, scripts/test)."""
    if item.get_closest_marker("system_pmcd") is not None:
        item.add_marker(pytest.mark.serial)


def system_pmcd_selected(config: pytest.Config) -> bool:
    """Whether this run may change the system pmcd: only when asked for explicitly (see
    the module docstring); the environment (``CI=true``) never decides it."""
    return bool(
        config.getoption("--system-pmcd") or "system_pmcd" in (config.getoption("-m") or "")
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    drop = set() if system_pmcd_selected(config) else {"system_pmcd"}
    if not in_initial_pid_namespace():
        drop.add("host_pid_namespace")
    keep = [i for i in items if not any(i.get_closest_marker(m) for m in drop)]
    if len(keep) != len(items):
        gone = [i for i in items if i not in keep]
        config.hook.pytest_deselected(items=gone)
        items[:] = keep
        if "host_pid_namespace" in drop:
            print(
                f"\nnot in the initial PID namespace: {len(gone)} tests deselected that "
                "need it (host_pid_namespace, system_pmcd); CI runs them on the host"
            )


@pytest.fixture(scope="session")
def pcp_required() -> None:
    """Fails (never skips) the test when pmcd, the PCP clients or python3-pcp are missing."""
    require_pcp()


def kept_dir(request: pytest.FixtureRequest, prefix: str, what: str) -> Iterator[Path]:
    """Yield a fresh directory under /tmp, mode 0755 (readable by pcp, unlike tmp_path);
    removed afterwards unless a test failed, when it is kept for its logs."""
    path = make_dir(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")))
    yield path
    if request.session.testsfailed == 0:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\n{what} kept in {path}")


@pytest.fixture(scope="session")
def private_base(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The session's directory for private pmcds (see :func:`kept_dir`)."""
    yield from kept_dir(request, "pmda-mmv-tests-", "private pmcd work directories")


@pytest.fixture
def private_dir(private_base: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh directory (mode 0755) for one test."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    return make_dir(Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=private_base)))


@pytest.fixture
def private_mmv_dir(private_dir: Path) -> Path:
    """``private_dir/tmp/mmv`` (0755): the MMV directory; its parent is a PCP_TMP_DIR."""
    return make_dir(private_dir / "tmp" / "mmv")


@pytest.fixture
def private_pmcd(pcp_required: None, private_dir: Path) -> Iterator[Callable[..., PrivatePmcd]]:
    """Factory: ``private_pmcd(agent, ...)`` starts a :class:`PrivatePmcd` with these agents
    in ``private_dir/pmcd[N]`` and returns it; all are stopped at teardown."""
    require_pmcd_marker()
    started: list[PrivatePmcd] = []

    def start(
        *agents: AgentSpec, timeout: float = 30.0, agent_timeout: float | None = 30.0
    ) -> PrivatePmcd:
        pmcd = PrivatePmcd(
            private_dir / f"pmcd{len(started) or ''}", agents, timeout, agent_timeout
        )
        started.append(pmcd)
        pmcd.start()
        return pmcd

    yield start
    for pmcd in started:
        pmcd.stop()
