"""Identities archives can rely on, with real writers (python3-pcp's ``pcp.mmv``
under /usr/bin/python3), a real private pmcd and a real pmlogger: a name keeps its PMIDs,
indoms and instance ids across writer, agent and pmcd restarts, and a departed name's
numbers go to no other name.  Pure rules: tests/unit/namespace/test_registry.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.identity import PROCESS, Writers, identities, served
from tests.support.pmcd import (
    REGISTRY_NAME,
    PrivatePmcd,
    our_agent,
    pcp_config,
    registry_dir,
)

pytestmark = pytest.mark.pmcd

VAR_DIR = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp"))
SYSTEM_REGISTRY = VAR_DIR / "config" / "pmda" / "70.mmv-identity.json"


def system_registry_state() -> tuple[int, int] | None:
    try:
        st = SYSTEM_REGISTRY.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def test_every_name_keeps_its_numbers_across_agent_and_pmcd_restarts(
    private_dir: Path, writers: Writers
) -> None:
    before = system_registry_state()
    pmcd = PrivatePmcd(private_dir / "pmcd", [our_agent(writers.mmv_dir)])
    pmcd.start()
    try:
        # created in the order opposite to the listing's, each served before the next:
        # pcp.mmv's default cluster 42 twice, cluster 0 twice
        order = [("zz42", 42), ("aa42", 42), ("zz0", 0), ("aa0", 0)]
        for name, cluster in order:
            writers.start(name, cluster, len(name))
            served(pmcd, name)
        names = [n for n, _ in order]
        first = identities(pmcd, *names)
        assert first["mmv.zz42.requests"][0] == "70.42.1"
        assert first["mmv.aa42.requests"][0] != "70.42.1"
        pmcd.restart_agent()
        served(pmcd, *names)
        assert identities(pmcd, *names) == first
    finally:
        pmcd.stop()
    pmcd = PrivatePmcd(private_dir / "pmcd2", [our_agent(writers.mmv_dir)])  # a reboot
    with pmcd:
        served(pmcd, *names)
        assert identities(pmcd, *names) == first
    registry = json.loads((private_dir / "tmp" / "identity" / REGISTRY_NAME).read_text())
    assert {r["name"] for r in registry["names"]} == set(names)
    assert system_registry_state() == before  # the system's registry is never touched


def test_a_departed_writers_numbers_go_to_no_other_name(
    private_dir: Path, writers: Writers
) -> None:
    agent = our_agent(writers.mmv_dir, "--status-metrics")
    pmcd = PrivatePmcd(private_dir / "pmcd", [agent])
    with pmcd:
        writers.start("websrv_7205", 42, 1000, PROCESS)
        served(pmcd, "websrv_7205")
        old = identities(pmcd, "websrv_7205")
        writers.kill("websrv_7205")  # its file stays behind; the writer has exited
        writers.start("websrv_8100", 42, 5000, PROCESS)
        served(pmcd, "websrv_8100")
        new = identities(pmcd, "websrv_8100")
        assert {v[0] for v in new.values()}.isdisjoint({v[0] for v in old.values()})
        old_indoms = {v[1] for v in old.values()} - {"PM_INDOM_NULL"}
        assert old_indoms and old_indoms.isdisjoint({v[1] for v in new.values()})
        gone = pmcd.run("pminfo", "-f", "mmv.websrv_7205.requests")
        assert "value" not in gone.stdout
        pmval = pmcd.run("pmval", "-s", "2", "-t", "0.2", "mmv.websrv_7205.requests")
        assert not re.search(r"^\s*\d+\s*$", pmval.stdout, re.M), pmval.stdout
        log = pmcd.agent_log()
        assert "asked for cluster 42, held by websrv_7205 (departed): served as cluster" in log
        assert re.search(r"\) Info: .*/websrv_8100: header.cluster .*held by websrv_7205", log)
        assert re.search(r"\) Info: .*/websrv_7205: .*writer process \d+ has exited", log)
        assert not re.search(r"\) Error: .*websrv", log), log
        ident = pmcd.fetch("mmv.control.file.identity")
        assert ident["websrv_8100"].startswith('"asked for cluster 42, held by websrv_7205')
        # check reads the agent's registry (read only) and says the same
        check = subprocess.run(
            [
                *(sys.executable, "-P", "-m", "pmda_mmv", "check"),
                *("--registry", str(private_dir / "tmp" / "identity" / REGISTRY_NAME)),
                str(writers.mmv_dir / "websrv_8100"),
            ],
            capture_output=True,
            text=True,
        )
        assert "asked for cluster 42, held by websrv_7205 (departed): served as" in check.stdout


def test_pmlogger_keeps_recording_across_agent_and_pmcd_restarts(
    private_dir: Path, writers: Writers
) -> None:
    # Not "notready": pmlogger reconnects as soon as pmcd is back, and pmcd answers
    # PM_ERR_AGAIN for a notready agent's names until its first scan is done, which
    # pmlogger takes as fatal ("Error looking up 9 metrics ... Try again"; see the report)
    agent = our_agent(writers.mmv_dir, notready=False)
    pmcd = PrivatePmcd(private_dir / "pmcd", [agent])
    pmcd.start()
    port = pmcd.port
    conf = private_dir / "pmlogger.conf"
    conf.write_text("log mandatory on every 1 second {\n    mmv\n}\n")
    archive = private_dir / "archive"
    logger = None
    try:
        # arrival order against the listing's: without the registry a restarted agent
        # numbers web_a and web_z the other way round (and pmlogger exits: "PMID ... has
        # changed"); web_c collides with web_b on pcp.mmv's default cluster 42
        for name, cluster, value in [("web_z", 0, 400), ("web_a", 0, 100), ("web_b", 42, 200)]:
            writers.start(name, cluster, value)
            served(pmcd, name)
        writers.start("web_c", 42, 300)
        served(pmcd, "web_c")
        logger = subprocess.Popen(
            [
                *("pmlogger", "-h", pmcd.host, "-c", str(conf), "-t", "1", "-T", "20sec"),
                *("-l", str(private_dir / "pmlogger.log"), str(archive)),
            ],
            env=dict(os.environ, PCP_TMP_DIR=str(pmcd.tmp_dir)),
        )
        time.sleep(5)
        pmcd.restart_agent()
        served(pmcd, "web_a", "web_b", "web_c", "web_z")
        time.sleep(3)
        pmcd.stop()  # pmcd restarts on the same port: pmlogger reconnects
        pmcd.port = port
        pmcd._spawn()
        assert pmcd._wait_pmcd(), pmcd.pmcd_log()
        pmcd.wait_agents()
        served(pmcd, "web_a", "web_b", "web_c", "web_z")
        assert logger.wait(60) == 0, (private_dir / "pmlogger.log").read_text()
    finally:
        if logger is not None and logger.poll() is None:
            logger.kill()
        pmcd.stop()
    log = (private_dir / "pmlogger.log").read_text()
    assert "has changed" not in log, log
    dumped = subprocess.run(
        ["pmdumplog", "-a", str(archive)], capture_output=True, text=True
    ).stdout
    pmids = dict(re.findall(r"PMID: (\S+) \(mmv\.(\w+)\.requests\)", dumped))
    assert len({pmids[k] for k in pmids}) == len(pmids)  # one PMID per name
    replay = subprocess.run(
        [
            "pmrep",
            "-a",
            str(archive),
            "-o",
            "csv",
            "-u",
            "-r",
            *(f"mmv.{n}.requests" for n in ("web_a", "web_b", "web_c", "web_z")),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", "")),
    )
    assert replay.returncode == 0, replay.stderr
    rows = [line.split(",")[1:] for line in replay.stdout.splitlines()[1:]]
    for column, own in enumerate(("100", "200", "300", "400")):
        seen = {row[column] for row in rows if row[column] not in ("", "N/A")}
        assert seen == {own}, (column, seen)


def test_an_unusable_registry_file_never_stops_the_agent(
    private_dir: Path, writers: Writers
) -> None:
    registry = registry_dir(writers.mmv_dir) / REGISTRY_NAME
    registry.write_text('{"version": 1, "names": [{"name": "x", "ui')  # truncated
    pmcd = PrivatePmcd(private_dir / "pmcd", [our_agent(writers.mmv_dir)])
    with pmcd:
        writers.start("app", 42, 7)
        served(pmcd, "app")
        log = pmcd.agent_log()
        assert log.count("identity registry: not a usable registry") == 1, log
        assert json.loads(registry.read_text())["names"][0]["name"] == "app"  # rebuilt
    unwritable = private_dir / "ro"
    unwritable.mkdir()
    unwritable.chmod(0o555)
    agent = our_agent(writers.mmv_dir, "--registry", str(unwritable / "sub" / "reg.json"))
    pmcd = PrivatePmcd(private_dir / "pmcd2", [agent])
    with pmcd:
        served(pmcd, "app")
        writers.start("more", 0, 8)
        served(pmcd, "more")
        assert pmcd.agent_log().count("cannot save") == 1, pmcd.agent_log()


def test_a_full_registry_forgets_the_longest_departed_and_serves_on(
    private_dir: Path, writers: Writers
) -> None:
    pmcd = PrivatePmcd(private_dir / "pmcd", [our_agent(writers.mmv_dir, "--registry-cap", "2")])
    with pmcd:
        for k in range(6):  # PROCESS writers named by PID come and go
            writers.start(f"worker_{k}", 42, k, PROCESS)
            served(pmcd, f"worker_{k}")
            writers.kill(f"worker_{k}")
        writers.start("last", 42, 99, PROCESS)
        served(pmcd, "last")
        assert pmcd.fetch("mmv.last.requests") == {None: "99"}
        log = pmcd.agent_log()
        assert log.count("more than 2 names remembered (--registry-cap)") == 1, log
    registry = json.loads((registry_dir(writers.mmv_dir) / REGISTRY_NAME).read_text())
    names = [r["name"] for r in registry["names"]]
    assert len(names) <= 3 and "last" in names and "worker_0" not in names


@pytest.mark.parametrize("kind", ["fifo", "deep", "device"])
def test_a_registry_path_that_is_no_registry_never_stops_the_agent(
    private_dir: Path, writers: Writers, kind: str
) -> None:
    # A FIFO blocked the agent's start for ever (pmcd gave up on it after its 5 s), a
    # symlink to /dev/zero read until memory ran out, a deeply nested JSON document raised
    # RecursionError out of the load: the agent never served.  Each is now an unusable
    # registry, logged once, and the agent serves from memory.
    registry = private_dir / "reg"
    if kind == "fifo":
        os.mkfifo(registry)
    elif kind == "device":
        registry.symlink_to("/dev/zero")
    else:
        registry.write_text('{"version": 1, "names": ' + "[" * 100_000 + "]" * 100_000 + "}")
    writers.start("app", 42, 7)
    agent = our_agent(writers.mmv_dir, "--registry", str(registry))
    pmcd = PrivatePmcd(private_dir / "pmcd", [agent])
    with pmcd:
        served(pmcd, "app")
        log = pmcd.agent_log()
        why = "not a usable registry" if kind == "deep" else "cannot read: not a regular file"
        assert log.count(f"identity registry: {why}") == 1, log
