"""The README's "Watching the agent" (and docs/watching.md's scrape configuration), run as
shown against a private pmcd: the status
metrics' states as numbers and counts per state, PCP's pmlogconf group, the shipped pmie
rules (the configuration pmieconf generates from them, evaluated by a real pmie) and the
Prometheus path (a private pmproxy's ``/metrics?names=mmv`` scraped by a real Prometheus,
Debian's package, queried through its HTTP API).  Every daemon is started on loopback by
the test, in its own directory, and stopped by it.

The directory: two files of a real writer (python3-pcp ``pcp.mmv``), ``app_w0`` and
``app_w1``, served and summed as the family ``app``; with ``bad``, also ``client-123``
(built: a name that is not a name component), refused.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pmda_mmv.commands import pmieconf
from pmda_mmv.directory.filestate import NO_WRITER, OK, REFUSED, STATES
from pmda_mmv.mmvfile import layout
from tests.support.fleet.services import Pmproxy
from tests.support.mmvbuild import MmvBuilder, dead_pid, single, write_pcp_mmv
from tests.support.pmcd import CHECKOUT, PrivatePmcd, make_dir, our_agent, pcp_config
from tests.support.prometheus import Prometheus, require_prometheus

README = (CHECKOUT / "README.md").read_text()
SECTION = README.split("## Watching the agent\n", 1)[1].split("\n## ", 1)[0]
WATCHING = (CHECKOUT / "docs" / "watching.md").read_text()
ENV = dict(os.environ, PATH="/usr/bin:/bin:" + os.environ.get("PATH", ""))
FAMILY = "app=app_w*"

pytestmark = pytest.mark.pmcd


def shown(prefix: str) -> list[str]:
    """The section's ``sh`` commands (each of a ``&&`` list, comments dropped) that start
    with ``prefix``."""
    blocks = re.findall(r"(?ms)^```sh\n(.*?)^```", SECTION)
    lines = [re.sub(r"\s+#.*$", "", line) for block in blocks for line in block.splitlines()]
    commands = [c.strip() for line in lines for c in line.split("&&")]
    found = [c for c in commands if c.startswith(prefix)]
    assert found, prefix
    return found


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env or ENV)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


BAD = {"client-123": single(12)}
"""The refused file: its name is not a name component."""


@pytest.fixture
def served(
    private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path
) -> Iterator[Callable[[dict[str, MmvBuilder]], PrivatePmcd]]:
    """Factory: the directory, with the ``extra`` files built, served by the agent with
    ``--status-metrics`` and the family, under a private pmcd; the writers live until the
    test ends."""
    writers: list[Any] = []

    def serve(extra: dict[str, MmvBuilder]) -> PrivatePmcd:
        for i in range(2):
            writers.append(write_pcp_mmv(private_mmv_dir / f"app_w{i}", cluster=42 + i))
        for name, built in extra.items():
            built.write(private_mmv_dir / name)
        agent = our_agent(private_mmv_dir, "--status-metrics", "--family", FAMILY)
        return private_pmcd(agent)

    yield serve
    writers.clear()


def counts(**by_state: int) -> dict[str | None, float]:
    """Every state's count (0 but those given: ``not_ready=`` for ``not-ready``)."""
    return {s: float(by_state.get(s.replace("-", "_"), 0)) for s in STATES}


def test_the_status_and_pmlogger_commands_run_as_shown(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd],
) -> None:
    pmcd = served(BAD)
    (pminfo,) = shown("pminfo ")
    out = run([*shlex.split(pminfo)[:1], "-h", pmcd.host, *shlex.split(pminfo)[1:]])
    assert re.search(r'inst \[\d+ or "client-123"\] value 4\n', out), out
    assert re.search(r'inst \[0 or "ok"\] value 2\n', out), out
    assert re.search(r'inst \[4 or "refused"\] value 1\n', out), out
    (pmlogconf,) = shown("pmlogconf ")
    argv = shlex.split(pmlogconf)
    group = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "config" / "pmlogconf" / "mmv"
    argv[-1] = str(group / "summary")  # the same file, where this PCP keeps it
    out = run([argv[0], "-h", pmcd.host, *argv[1:]])
    assert re.match(r"#\+ \S+/mmv/summary:y:", out), out  # included: a file is served


# -- Prometheus through pmproxy -----------------------------------------------------------------


def scrape_config(port: int) -> str:
    """docs/watching.md's scrape configuration, its target our pmproxy, scraping every
    second."""
    (yaml,) = re.findall(r"(?ms)^```yaml\n(.*?)^```", WATCHING)
    assert "'localhost:44322'" in yaml
    target = yaml.replace("'localhost:44322'", f"'127.0.0.1:{port}'")
    return "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n" + target


def test_prometheus_scrapes_the_states_the_counts_and_the_family_total(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd], private_dir: Path
) -> None:
    require_prometheus()
    pmcd = served(BAD)
    with Pmproxy(private_dir / "pmproxy", 0, pmcd_port=pmcd.port) as proxy:
        (curl,) = shown("curl ")
        text = run(shlex.split(curl.replace("localhost:44322", f"127.0.0.1:{proxy.port}")))
        # each sample line carries its labels (their order differs between PCP versions)
        codes = re.findall(
            r'^mmv_control_file_state_code\{.*instname="([^"]+)".*\} (\d+)$', text, re.M
        )
        ok, refused = str(STATES.index(OK)), str(STATES.index(REFUSED))
        assert sorted(codes) == [("app_w0", ok), ("app_w1", ok), ("client-123", refused)], text
        assert "mmv_control_file_state{" not in text  # a string: left out
        with Prometheus(private_dir / "prometheus", scrape_config(proxy.port)) as prom:
            prom.wait_for('mmv_control_file_state_code{instname="client-123"}')
            assert prom.values('up{job="pcp-mmv"}') == {None: 1.0}
            states = prom.values("mmv_control_file_state_code")
            refused, ok = STATES.index(REFUSED), STATES.index(OK)
            assert states == {"app_w0": ok, "app_w1": ok, "client-123": refused}
            assert prom.values("mmv_control_files_by_state") == counts(ok=2, refused=1)
            assert prom.values("mmv_app_py_counter") == {None: 41.0 + 41.0}  # the family's
            assert prom.values("mmv_app_w1_py_gauge") == {"red": 0, "green": -1, "blue": -2}
            strings = '{__name__=~"mmv_control_file_(state|last_problem|identity)"}'
            assert prom.query(strings) == []
            assert prom.proc is not None and prom.proc.poll() is None
        assert prom.proc is None
    assert proxy.proc is None


# -- pmie with the shipped rules ----------------------------------------------------------------


def pmie_config(directory: Path, delta: str) -> Path:
    """The configuration pmieconf generates from PCP's global group and the agent's rules
    laid in ``directory``: the README's commands, as shown, then (for the test) every rule
    of the group evaluated every ``delta``, its action an ``echo`` to pmie's stdout."""
    rules = directory / "config" / "pmieconf"
    system = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "config" / "pmieconf"
    shutil.copytree(system / "global", rules / "global")
    pmieconf.lay_rules(pmieconf.rules_source(), directory)
    conf = directory / "pmie.conf"
    private = ["-r", str(rules), "-f", str(conf)]
    for command in shown("pmieconf "):
        argv = shlex.split(command)
        run([argv[0], *private, *argv[1:]])
    assert re.search(r"(?m)^delta = 10 sec;\nmmv\.refused =", conf.read_text())
    test = ["modify global syslog_action no", "modify mmv user_action yes"]
    test += [f"modify mmv delta '{delta}'", "modify mmv.no_writer held 1"]
    for command in test:
        run(["pmieconf", *private, *shlex.split(command)])
    return conf


def pmie_log(conf: Path) -> Path:
    """pmie's log, in the directory ``pmie_output`` runs it in."""
    return conf.parent / "run" / "pmie.log"


def pmie_lines(log: Path) -> list[str]:
    """The lines of pmie's ``log`` less pmie's own (its start and end)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    own = ("Log for pmie ", "Log finished ", "pmie: PID = ")
    return [line for line in text.splitlines() if line and not line.startswith(own)]


def pmie_output(pmcd: PrivatePmcd, conf: Path, seconds: float, want: str | None) -> list[str]:
    """The lines pmie's actions write (its log, less pmie's own lines) while it evaluates
    ``conf`` against ``pmcd`` for ``seconds`` (or until a line has ``want``); pmie is
    stopped before this returns.  The lines are those before pmie is stopped: a SIGTERM
    that finds pmie waiting for a fetch's answer makes it log that fetch's failure and the
    lost connection (docs/watching.md), pmie's stopping, not the agent's."""
    env = {k: v for k, v in ENV.items() if not k.startswith("PMCD_")}
    work = pmie_log(conf).parent  # pmie (as root) runs as the PCP user: its log, stats file
    make_dir(work / "tmp", 0o775)
    user = pwd.getpwnam(pcp_config("PCP_USER", "pcp"))
    for path in (work, work / "tmp"):
        os.chown(path, user.pw_uid, user.pw_gid)
    env["PCP_TMP_DIR"] = str(work / "tmp")  # not the system's
    argv = ["pmie", "-h", pmcd.host, "-c", str(conf), "-l", str(pmie_log(conf))]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            if want is not None and any(want in line for line in pmie_lines(pmie_log(conf))):
                break
            time.sleep(0.1)
        lines = pmie_lines(pmie_log(conf))
        assert proc.poll() is None, f"pmie exited: {lines}"
    finally:
        proc.terminate()
        proc.wait(10)
    return lines


@pytest.mark.serial
def test_pmie_reports_a_refused_file_within_the_rules_delta(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd], private_dir: Path
) -> None:
    pmcd = served(BAD)
    conf = pmie_config(private_dir / "pmie", "2 sec")
    started = time.monotonic()
    out = pmie_output(pmcd, conf, 2 + 3, "client-123")
    took = time.monotonic() - started
    assert len(out) == 1 and out[0].startswith("MMV file refused by the mmv agent client-123@")
    assert took < 2 + 3, took  # within the delta (and pmie's start)


def test_pmie_says_nothing_for_a_directory_of_good_files(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd], private_dir: Path
) -> None:
    pmcd = served({})
    conf = pmie_config(private_dir / "pmie", "1 sec")
    out = pmie_output(pmcd, conf, 4, None)  # every rule, four times over
    assert out == []


def test_pmie_stopped_while_a_fetch_waits_for_the_agent_reports_nothing_of_it(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd], private_dir: Path
) -> None:
    pmcd = served({})
    conf = pmie_config(private_dir / "pmie", "1 sec")
    (agent,) = pmcd.agent_processes()
    # the agent stopped after pmie's second fetch: its third waits (on pmcd, pmcd on the
    # agent, well within pmcd's 5 s agent timeout) when pmie is stopped; the agent resumes
    # half a second later (PCP 6.3's pmie waits for that fetch's answer before it exits)
    halt = threading.Timer(1.5, os.kill, (agent, signal.SIGSTOP))
    resume = threading.Timer(3.2, os.kill, (agent, signal.SIGCONT))
    halt.start()
    resume.start()
    try:
        out = pmie_output(pmcd, conf, 2.7, None)
    finally:
        halt.join()
        resume.join()
        os.kill(agent, signal.SIGCONT)
    assert out == []
    # what pmie logs of its own stopping, if anything (PCP 6.0.3's pmie: these two lines;
    # docs/watching.md), and nothing else
    stopping = (
        r"Error: pmFetch from \S+ failed: IPC protocol failure$",
        r"Info: Lost connection to pmcd \S+$",
    )
    after = pmie_lines(pmie_log(conf))
    assert all(any(re.search(p, line) for p in stopping) for line in after), after
    assert pmcd.fetch("mmv.control.file.state_code") == {"app_w0": "0", "app_w1": "0"}


@pytest.mark.serial
def test_pmie_reports_a_file_without_a_writer_after_held_evaluations(
    served: Callable[[dict[str, MmvBuilder]], PrivatePmcd], private_dir: Path
) -> None:
    pmcd = served({"old": single(15, flags=layout.FLAG_PROCESS, process=dead_pid())})
    assert pmcd.fetch("mmv.control.file.state_code")["old"] == str(STATES.index(NO_WRITER))
    conf = pmie_config(private_dir / "pmie", "1 sec")  # held 1: two evaluations in a row
    started = time.monotonic()
    out = pmie_output(pmcd, conf, 2 + 3, "old@")
    took = time.monotonic() - started
    assert len(out) == 1 and out[0].startswith("MMV file without a writer old@"), out
    assert 1 <= took < 2 + 3, took  # not at the first evaluation: at the second
