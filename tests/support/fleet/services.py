"""Private runs of the fleet components: a Redis/Valkey key server, pmproxy, pmlogger and
the pmseries client, each on loopback, on free ports, in its own directory.

Nothing here touches the system services: the key server never uses 6379, pmproxy never
44322/44323, and every PCP daemon gets its own ``PCP_TMP_DIR``, ``PCP_RUN_DIR`` and
``PCP_LOG_DIR``.  Each daemon class is a context manager that stops what it started.

:func:`require_fleet` fails the calling test (never skips it) when a component is missing,
naming the Debian package that provides it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest

from tests.support.pmcd import binadm, free_port, make_dir, pcp_config

KEY_SERVERS = ("valkey-server", "redis-server")  # Debian 12 has redis-server 7.0 only
SID = re.compile(r"^[0-9a-f]{40}$")


def key_server_binary() -> str | None:
    """The first of valkey-server, redis-server on PATH (None: neither)."""
    return next((p for p in map(shutil.which, KEY_SERVERS) if p), None)


def missing_fleet() -> list[str]:
    """What the fleet tests lack on this machine (empty when all is there)."""
    missing = []
    if key_server_binary() is None:
        missing.append("redis-server or valkey-server on PATH (Debian package redis-server)")
    for tool in ("pmproxy", "pmlogger"):
        if not os.access(binadm(tool), os.X_OK):
            missing.append(f"{binadm(tool)} (Debian package pcp)")
    for tool in ("pmseries", "pmdumplog"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} on PATH (Debian package pcp)")
    return missing


def require_fleet() -> None:
    """Fail the calling test (never skip it) when :func:`missing_fleet` finds gaps."""
    missing = missing_fleet()
    if missing:
        pytest.fail("the fleet tests need: " + "; ".join(missing) + " (run scripts/setup)")


def _free_loopback_port(avoid: tuple[int, ...] = (6379, 44321, 44322, 44323)) -> int:
    while True:
        port = free_port()
        if port not in avoid:
            return port


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def spawn(
    argv: list[str], cwd: Path, output: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` started in ``cwd``, in a session of its own, stdin /dev/null, its stdout and
    stderr appended to ``output``."""
    with open(output, "ab") as sink:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class PortInUse(RuntimeError):
    """The free port found was taken before the daemon bound it (retry with another)."""


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Poll ``ready()`` until it is true; stop ``proc`` and raise RuntimeError (PortInUse
    when the log says so) when the process exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ready():
                return
            time.sleep(0.1)
    except PortInUse:
        _stop(proc)
        raise
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    _stop(proc)
    error = PortInUse if "already in use" in text.lower() else RuntimeError
    raise error(f"{what} did not come up (exit {proc.returncode}):\n{text}")


def _on_free_port(start: Callable[[int], None], attempts: int = 3) -> None:
    """Call ``start(port)`` with a free loopback port, again with another on PortInUse."""
    for attempt in range(attempts):
        try:
            return start(_free_loopback_port())
        except PortInUse:
            if attempt == attempts - 1:
                raise


class Daemon:
    """A daemon a test runs in ``workdir``, on a free loopback ``port`` (:meth:`_start`
    starts it on the port given and waits for it); a context manager that stops it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = make_dir(workdir)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start it on a free port (another when that one was taken); raises RuntimeError."""
        _on_free_port(self._start)

    def _start(self, port: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None


# -- key server -------------------------------------------------------------------------------


class KeyServer(Daemon):
    """redis-server (or valkey-server) on 127.0.0.1:PORT in ``workdir``: no persistence
    (``--save ''``, no AOF), its own log, foreground, stopped by :meth:`stop`; started, it
    answers PING."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.binary = key_server_binary() or "redis-server"
        self.log = self.workdir / "server.log"

    def _start(self, port: int) -> None:
        self.port = port
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        argv += ["--dir", str(self.workdir), "--logfile", str(self.log)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        _wait(f"{self.binary} on port {self.port}", self.ping, self.proc, self.log, 20)

    def ping(self) -> bool:
        """Whether the server answers a RESP ``PING`` with ``+PONG``."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False


# -- pmproxy ----------------------------------------------------------------------------------


@dataclass
class Pmproxy:
    """``pmproxy -f`` on 127.0.0.1:PORT with its own pmproxy.conf (``[pmproxy]``, ``[redis]``
    with ``key_port``, ``[discover]``, ``[pmseries]``; pmsearch off), under ``workdir``:
    ``tmp/`` (PCP_TMP_DIR: its MMV files go to ``tmp/pmproxy/``), ``run/``, ``log/``
    (pmproxy.log) and ``archive_dir`` (PCP_ARCHIVE_DIR: discovery watches it for active
    pmlogger archives).  ``tmp_dir`` can be given to share a PCP_TMP_DIR (a private pmcd's).
    ``key_port`` 0: no key server, discovery nor pmseries (the live REST API and
    ``/metrics`` only); ``pmcd_port``: the pmcd its live requests go to (PMCD_PORT)."""

    workdir: Path
    key_port: int
    tmp_dir: Path | None = None
    pmcd_port: int = 0
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.workdir = make_dir(self.workdir)
        self.tmp_dir = make_dir(self.tmp_dir or self.workdir / "tmp")
        self.run_dir = self.workdir / "run"
        self.log_dir = self.workdir / "log"
        self.archive_dir = self.workdir / "archive"
        self.conf = self.workdir / "pmproxy.conf"
        self.log = self.log_dir / "pmproxy.log"

    @property
    def mmv_dir(self) -> Path:
        """Where pmproxy writes its own MMV files: ``$PCP_TMP_DIR/pmproxy``."""
        assert self.tmp_dir is not None
        return self.tmp_dir / "pmproxy"

    def __enter__(self) -> Pmproxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write the configuration and start pmproxy; wait until it accepts connections,
        has written its MMV files and has set up the key server; raises RuntimeError."""
        import pwd

        pcp = pwd.getpwnam(pcp_config("PCP_USER", "pcp"))
        for d in (self.run_dir, self.log_dir, self.mmv_dir):
            make_dir(d, 0o775)
            os.chown(d, pcp.pw_uid, pcp.pw_gid)
        make_dir(self.archive_dir)
        keys = "true" if self.key_port else "false"
        self.conf.write_text(
            f"[pmproxy]\npcp.enabled = true\nhttp.enabled = true\nredis.enabled = {keys}\n"
            "secure.enabled = false\n"
            f"[redis]\nenabled = {keys}\nservers = 127.0.0.1:{self.key_port}\n"
            + ("" if self.key_port else "[keys]\nenabled = false\n")
            + f"[discover]\nenabled = {keys}\n"
            f"[pmseries]\nenabled = {keys}\n"
            "[pmsearch]\nenabled = false\n"
        )
        _on_free_port(self._start)

    def _start(self, port: int) -> None:
        self.port = port
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMCD_", "PMPROXY_"))}
        env.update(
            PCP_TMP_DIR=str(self.tmp_dir),
            PCP_RUN_DIR=str(self.run_dir),
            PCP_LOG_DIR=str(self.log_dir),
            PCP_ARCHIVE_DIR=str(self.archive_dir),
        )
        if self.pmcd_port:
            env["PMCD_PORT"] = str(self.pmcd_port)
        argv = [str(binadm("pmproxy")), "-f", "-A", "-p", str(self.port), "-i", "127.0.0.1"]
        argv += ["-s", str(self.run_dir / "pmproxy.socket"), "-c", str(self.conf)]
        argv += ["-l", str(self.log)]
        self.proc = spawn(argv, self.log_dir, self.log_dir / "pmproxy.stderr", env)
        _wait(f"pmproxy on port {self.port}", self._ready, self.proc, self.log, 30)

    def _ready(self) -> bool:
        """pmproxy.log lists our port as ``ok`` (pmproxy keeps running when a port is taken:
        its table says ``err``), the key server is set up and the MMV files are written."""
        text = self.logs()
        if re.search(rf"^\s*err\s+-?\d+\s+{self.port}\s+inet", text, re.M):
            raise PortInUse(f"pmproxy: port {self.port} in use")
        listening = re.search(rf"^\s*ok\s+\d+\s+{self.port}\s+inet", text, re.M)
        keys = "schema version setup" in text or not self.key_port
        return bool(listening and keys and (self.mmv_dir / "server").exists())

    def rest(self, path: str, **query: str) -> Any:
        """GET ``http://127.0.0.1:PORT/<path>?<query>`` (the PMWEBAPI(3) REST API that
        grafana-pcp uses) and return the decoded JSON."""
        url = f"http://127.0.0.1:{self.port}/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return json.loads(reply.read())

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None


# -- pmlogger ---------------------------------------------------------------------------------


def record(host: str, metrics: str, archive: Path, seconds: int, tmp_dir: Path) -> Path:
    """Run ``pmlogger -h HOST -t 1 -T <seconds>sec`` logging ``metrics`` (a PMNS subtree)
    into ``archive`` (a base name; its directory is created) and wait for it to end.

    ``tmp_dir`` is pmlogger's PCP_TMP_DIR (its port map).  Returns ``archive``; raises
    AssertionError with pmlogger's log when it fails or wrote no data volume."""
    make_dir(archive.parent)
    config = archive.parent / f"{archive.name}.config"
    config.write_text(f"log mandatory on 1 sec {{\n    {metrics}\n}}\n")
    log = archive.parent / f"{archive.name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMCD_")}
    env["PCP_TMP_DIR"] = str(tmp_dir)
    argv = [str(binadm("pmlogger")), "-h", host, "-c", str(config), "-t", "1"]
    argv += ["-T", f"{seconds}sec", "-l", str(log), str(archive)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    text = log.read_text(errors="replace") if log.exists() else ""
    ok = done.returncode == 0 and Path(f"{archive}.0").exists()
    assert ok, f"pmlogger failed ({done.returncode}): {done.stdout}{done.stderr}\n{text}"
    return archive


# -- pmseries ---------------------------------------------------------------------------------


@dataclass
class Series:
    """``pmseries -a SID``, parsed: ``pmid``, ``names`` (metric names), ``instances``
    (external name -> instance series id), ``labels`` (external instance name, or None for
    a singular metric -> label dict) and the descriptor lines ``desc``."""

    sid: str
    pmid: str = ""
    desc: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    instances: dict[str, str] = field(default_factory=dict)
    labels: dict[str | None, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    """One value line of a pmseries time series query: ``time`` as pmseries prints it,
    ``value`` text (strings in double quotes, doubles in %e form) and the instance series id
    (None for a singular metric)."""

    time: str
    value: str
    instance: str | None


VALUE_LINE = re.compile(r"^\s+\[([^]]+)\] (.*?)(?: ([0-9a-f]{40}))?$")
INST_LINE = re.compile(r'^\s+inst \[(-?\d+) or "(.*)"\] (series|labels) (.*)$')


class Pmseries:
    """The ``pmseries`` client against the key server on 127.0.0.1:``port``."""

    def __init__(self, port: int) -> None:
        self.port = port

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``pmseries -h 127.0.0.1 -p PORT args...`` (text; never raises on exit status)."""
        argv = ["pmseries", "-h", "127.0.0.1", "-p", str(self.port), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def load(self, archive: Path) -> None:
        """``pmseries --load {source.path: "ARCHIVE"}``; AssertionError on failure.

        (6.0.3 prints its "processed N archive records" only when the key server already
        had a schema version, so success is judged by exit status and errors only.)"""
        out = self.run("--load", f'{{source.path: "{archive}"}}')
        assert out.returncode == 0 and "[Error]" not in out.stdout + out.stderr, out

    def query(self, expr: str) -> list[str]:
        """Series ids a query matches (time series query without a time window)."""
        out = self.run(expr)
        assert out.returncode == 0 and "Error" not in out.stderr, f"{expr}: {out}"
        return [ln.strip() for ln in out.stdout.splitlines() if SID.match(ln.strip())]

    def describe(self, sid: str) -> Series:
        """``pmseries -a SID`` parsed into a :class:`Series`."""
        out = self.run("-a", sid)
        assert out.returncode == 0, out
        s = Series(sid)
        for line in out.stdout.splitlines():
            key, _, rest = line.strip().partition(": ")
            if m := INST_LINE.match(line):
                if m.group(3) == "series":
                    s.instances[m.group(2)] = m.group(4)
                else:
                    s.labels[m.group(2)] = json.loads(m.group(4))
            elif line.strip().startswith("labels "):
                s.labels[None] = json.loads(line.strip()[len("labels ") :])
            elif key == "PMID":
                s.pmid = rest
            elif key == "Metric":
                s.names.append(rest)
            elif key in ("Data Type", "Semantics"):
                s.desc.append(line.strip())
        return s

    def values(self, expr: str) -> dict[str, list[Sample]]:
        """``pmseries EXPR`` where EXPR has a time window (``name[count:N]``): series id ->
        its :class:`Sample` list, newest first."""
        out = self.run(expr)
        assert out.returncode == 0 and "Error" not in out.stderr, f"{expr}: {out}"
        found: dict[str, list[Sample]] = {}
        current = ""
        for line in out.stdout.splitlines():
            if SID.match(line.strip()):
                current = line.strip()
                found[current] = []
            elif m := VALUE_LINE.match(line):
                found[current].append(Sample(m.group(1), m.group(2), m.group(3)))
        return found
