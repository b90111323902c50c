"""A private Prometheus (Debian's ``prometheus`` package) on loopback, scraping what the test
names, with its own configuration and data directory; queried through its HTTP API.

Nothing here touches a system Prometheus: it listens on a free 127.0.0.1 port (never 9090),
keeps its TSDB under the test's directory and is stopped by :meth:`Prometheus.stop` (or
the context manager).  :func:`require_prometheus` fails the calling test (never skips it)
when the binary is missing.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet.services import Daemon, PortInUse, _wait, spawn

BINARY = "prometheus"


def require_prometheus() -> str:
    """The prometheus binary; fails the calling test when it is not on PATH."""
    path = shutil.which(BINARY)
    if path is None:
        pytest.fail("prometheus is not on PATH (Debian package prometheus; run scripts/setup)")
    return path


class Prometheus(Daemon):
    """``prometheus`` on 127.0.0.1:PORT under ``workdir`` (``prometheus.yml``, ``data/``,
    ``prometheus.log``), scraping as the configuration text ``config`` says; started, it
    answers ``/-/ready``."""

    def __init__(self, workdir: Path, config: str) -> None:
        super().__init__(workdir)
        self.config = config
        self.log = self.workdir / "prometheus.log"

    def start(self) -> None:
        (self.workdir / "prometheus.yml").write_text(self.config)
        super().start()

    def _start(self, port: int) -> None:
        self.port = port
        argv = [require_prometheus(), f"--config.file={self.workdir / 'prometheus.yml'}"]
        argv += [f"--storage.tsdb.path={self.workdir / 'data'}"]
        argv += [f"--web.listen-address=127.0.0.1:{port}", "--log.level=info"]
        self.proc = spawn(argv, self.workdir, self.log)
        _wait(f"prometheus on port {port}", self._ready, self.proc, self.log, 60)

    def _ready(self) -> bool:
        if "address already in use" in self.logs():
            raise PortInUse(f"prometheus: port {self.port} in use")
        try:
            with urllib.request.urlopen(self._url("/-/ready"), timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _url(self, path: str, **query: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(query)}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` (``/api/v1/query``): each sample's ``metric``
        (labels) and ``value`` ([time, text])."""
        with urllib.request.urlopen(self._url("/api/v1/query", query=promql), timeout=10) as r:
            reply = json.loads(r.read())
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def values(self, promql: str, label: str = "instname") -> dict[str | None, float]:
        """``promql``'s samples as {the sample's ``label`` (None without one): value}."""
        return {s["metric"].get(label): float(s["value"][1]) for s in self.query(promql)}

    def wait_for(self, promql: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The samples of ``promql`` once there are any (scrapes every second); raises
        AssertionError with the log after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.query(promql)
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"no samples of {promql} after {timeout} s:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
