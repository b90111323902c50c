"""Every command the README shows is run by a test: the README's shell blocks (```sh) and
its ``$ `` examples are extracted, and each command must be in :data:`RUN_BY`, which names
the test or the CI script that runs it; a command added to the README without one fails
:func:`test_every_readme_command_says_which_test_runs_it`, and a name in :data:`RUN_BY`
that runs nothing fails :func:`test_what_runs_each_command_exists`.  The Querying commands
are run here, as shown, against a private pmcd serving the demo writer (``-h`` added, and
``-s`` for the ones that sample for ever); the installing ones change the system pmcd and
run where CI runs them (``--system-pmcd``, scripts/check-deb)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import Metric, MmvBuilder, Value, single
from tests.support.pmcd import CHECKOUT, PrivatePmcd, our_agent

README = CHECKOUT / "README.md"
HERE = "tests/system/test_readme.py"
QUERYING = f"{HERE}::test_the_querying_commands_run_as_shown"
WATCHING = "tests/system/test_watching.py"
# pmrep's interpreter is found through PATH (pmpython): python3-pcp is /usr/bin/python3's
ENV = dict(os.environ, PATH="/usr/bin:/bin:" + os.environ.get("PATH", ""))

RUN_BY: dict[str, tuple[str, ...]] = {
    # Installing (change the system pmcd: .ci/run and scripts/matrix run them as root)
    "apt-get install ./pmda-mmv_0.1.0_all.deb && pmda-mmv install": (
        "scripts/check-deb",  # dpkg -i the .deb (its dependencies installed), pmda-mmv install
    ),
    "apt-get install pcp python3-pcp python3-venv": ("scripts/setup",),
    "/usr/bin/python3 -m venv --system-site-packages /opt/pmda-mmv": (
        "tests/system/test_install.py::test_wheel_in_a_fresh_venv_installs_serves_and_removes",
    ),
    "/opt/pmda-mmv/bin/pip install pmda_mmv-0.1.0-py3-none-any.whl && "
    "/opt/pmda-mmv/bin/pmda-mmv install": (
        "tests/system/test_install.py::test_wheel_in_a_fresh_venv_installs_serves_and_removes",
    ),
    "scripts/setup && ./Install": (
        "scripts/setup",
        "tests/system/test_install.py::test_install_serves_real_files_from_our_agent_and_remove_restores_stock",
    ),
    # Quick start: scripts/test is what CI runs; scripts/demo is scripts/setup (without
    # --test), ./Install and examples/demo_writer.py, each run by the tests named
    "scripts/demo": (
        "tests/project/test_packaging.py::test_demo_installs_no_test_only_package",
        "tests/system/test_install.py::test_install_serves_real_files_from_our_agent_and_remove_restores_stock",
        "tests/system/test_demo.py::test_demo_metrics_have_instances_help_and_labels",
    ),
    "scripts/test": ("scripts/test",),
    # Querying: run here
    "pminfo -dfTlt mmv": (QUERYING,),
    "pmval -t 1 mmv.demo.requests": (QUERYING,),
    "pmrep -t 1 mmv.demo": (QUERYING,),
    "pmprobe -I mmv.demo.latency": (QUERYING,),
    "pmstore mmv.control.reload 1": (QUERYING,),
    # Multi-process applications (also shown in docs/multiprocess.md)
    "pmrep -t 1 -s 4 -e 'websrv.total=sum(mmv.websrv.requests)' websrv.total": (
        "tests/system/test_multiprocess.py::test_prefork_server_totals_as_the_doc_shows",
    ),
    "pmrep -a websrv-archive -S +1sec -e 'websrv.total=sum(mmv.websrv.requests)' websrv.total": (
        "tests/system/test_multiprocess.py::test_prefork_server_totals_as_the_doc_shows",
    ),
    # Why is my file not served?
    "pmda-mmv check /tmp/vdemo": (f"{HERE}::test_the_check_example_is_what_check_prints",),
    # Watching the agent
    "pminfo -f mmv.control.files_by_state mmv.control.file.state_code": (
        f"{WATCHING}::test_the_status_and_pmlogger_commands_run_as_shown",
    ),
    'pmieconf enable mmv && pmieconf modify mmv.refused delta "10 sec"': (
        f"{WATCHING}::test_pmie_reports_a_refused_file_within_the_rules_delta",
        f"{WATCHING}::test_pmie_says_nothing_for_a_directory_of_good_files",
    ),
    "pmlogconf -s /var/lib/pcp/config/pmlogconf/mmv/summary": (
        f"{WATCHING}::test_the_status_and_pmlogger_commands_run_as_shown",
    ),
    "curl -s 'http://localhost:44322/metrics?names=mmv'": (
        f"{WATCHING}::test_prometheus_scrapes_the_states_the_counts_and_the_family_total",
    ),
}
"""Each README command and what runs it: a test (``path::name``) or a script CI runs."""

SCRIPTS_CI_RUNS = {
    "scripts/check-deb": "scripts/check-deb",
    "scripts/setup": "scripts/setup --test",
    "scripts/test": "scripts/test --system-pmcd",
}
"""The scripts in :data:`RUN_BY` and how .ci/run runs each."""


def readme_commands(text: str) -> list[str]:
    """The commands of the README's ``sh`` blocks (one a line, comments dropped) and of its
    indented ``$ `` examples."""
    commands = []
    for block in re.findall(r"(?ms)^```sh\n(.*?)^```", text):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    commands += re.findall(r"(?m)^\s+\$ (.+)$", text)
    return commands


def test_every_readme_command_says_which_test_runs_it() -> None:
    shown = readme_commands(README.read_text())
    assert len(shown) >= 10, shown  # the extraction found the blocks
    missing = [c for c in shown if c not in RUN_BY]
    assert not missing, f"README commands no test runs (add them to RUN_BY): {missing}"
    stale = [c for c in RUN_BY if c not in shown]
    assert not stale, f"RUN_BY names commands the README no longer shows: {stale}"


def test_what_runs_each_command_exists() -> None:
    """Each test named is defined in its file; each script is run by .ci/run (and so by
    scripts/matrix in every root)."""
    ci = (CHECKOUT / ".ci" / "run").read_text()
    for command, runners in RUN_BY.items():
        for runner in runners:
            path, _, name = runner.partition("::")
            assert (CHECKOUT / path).is_file(), (command, runner)
            if name:
                assert re.search(rf"(?m)^def {name}\(", (CHECKOUT / path).read_text()), runner
            else:
                assert SCRIPTS_CI_RUNS[path] in ci, (command, runner)


def test_the_scripts_do_what_the_readme_says() -> None:
    """scripts/setup installs the packages the README's apt-get line names; check-deb
    installs the .deb and runs ``pmda-mmv install``; scripts/test runs pytest."""
    setup = (CHECKOUT / "scripts" / "setup").read_text()
    (packages,) = re.findall(r'(?m)^PACKAGES="([^"]*)"$', setup)
    assert {"pcp", "python3-pcp", "python3-venv"} <= set(packages.split())
    check_deb = (CHECKOUT / "scripts" / "check-deb").read_text()
    assert "dpkg_locked -i" in check_deb and "pmda-mmv install" in check_deb
    assert "-m pytest" in (CHECKOUT / "scripts" / "test").read_text()


# -- the Querying commands, as shown -------------------------------------------------------


def querying(pmcd: PrivatePmcd, command: str) -> str:
    """``command`` as the README shows it, against ``pmcd``; its output."""
    argv = shlex.split(command)
    argv[1:1] = ["-h", pmcd.host]
    if "-t" in argv:
        argv[1:1] = ["-s", "2"]  # two samples, not for ever
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    return out.stdout


@pytest.mark.pmcd
def test_the_querying_commands_run_as_shown(
    demo_writer: None, private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path
) -> None:
    pmcd = private_pmcd(our_agent(private_mmv_dir, "--status-metrics"))
    block = re.search(r"(?ms)^## Querying\n\n```sh\n(.*?)^```", README.read_text())
    assert block is not None
    commands = readme_commands(f"```sh\n{block.group(1)}```\n")
    assert [c for c in commands if RUN_BY[c] != (QUERYING,)] == []
    out = {c.split()[0]: querying(pmcd, c) for c in commands}
    assert "mmv.demo.requests" in out["pminfo"] and "Data Type:" in out["pminfo"]
    assert "labels {" in out["pminfo"] and "Help:" in out["pminfo"]
    assert "/login" in out["pmval"]
    assert "m.d.requests" in out["pmrep"].splitlines()[0]  # pmrep's abbreviated header
    assert len(out["pmrep"].splitlines()) >= 3  # and its rows
    assert out["pmprobe"].startswith("mmv.demo.latency ")
    assert int(out["pmprobe"].split()[1]) > 0  # instances
    assert "new value=1" in out["pmstore"]


# -- the check example, as shown -------------------------------------------------------------


def vdemo(directory: Path) -> None:
    """The directory of the README's ``pmda-mmv check /tmp/vdemo`` example."""
    (directory / ".hidden").write_bytes(b"")
    clash = MmvBuilder(cluster=11)
    clash.metrics += [Metric("a.b", 1), Metric("a.b.c", 2)]
    clash.values += [Value("a.b", None, 1), Value("a.b.c", None, 2)]
    clash.write(directory / "clash")
    single(12).write(directory / "client-123")
    single(13, name="shared.m", flags=layout.FLAG_NOPREFIX).write(directory / "np_first")
    single(14, name="shared.m", flags=layout.FLAG_NOPREFIX).write(directory / "np_second")
    single(15, flags=layout.FLAG_PROCESS, process=-1).write(directory / "old")


def test_the_check_example_is_what_check_prints(tmp_path: Path) -> None:
    directory = tmp_path / "vdemo"
    directory.mkdir()
    vdemo(directory)
    (example,) = re.findall(
        r"(?ms)^( +)\$ pmda-mmv check /tmp/vdemo\n(.*?)\n\n", README.read_text()
    )
    indent, shown = example
    wanted = [line.removeprefix(indent) for line in shown.splitlines()]
    out = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1  # not every file is ok
    assert out.stdout.replace(str(directory), "/tmp/vdemo").splitlines() == wanted


# -- the command's synopsis ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pmda", "debug", "check", "dump", "prune"])
def test_the_synopsis_lists_every_option(command: str) -> None:
    """The README's ``pmda-mmv`` synopsis names every option ``pmda-mmv COMMAND --help``
    does (``--max-total`` was missing once)."""
    text = README.read_text()
    start = text.index("```\npmda-mmv pmda ")
    synopsis = text[start : text.index("```\n", start + 4)]
    entries = re.split(r"\n(?=\S)", synopsis)  # a line and its continuation lines
    mine = [e for e in entries if e.startswith(f"pmda-mmv {command} ")]
    assert len(mine) == 1, mine
    shown = set(re.findall(r"--[a-z][a-z-]+", mine[0]))
    if "SERVING" in mine[0]:
        serving = synopsis[synopsis.index("SERVING:") :]
        shown |= set(re.findall(r"--[a-z][a-z-]+", serving))
    usage = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
    ).stdout
    wanted = set(re.findall(r"--[a-z][a-z-]+", usage[: usage.index("\n\n")])) - {"--help"}
    assert wanted and wanted == shown, (wanted - shown, shown - wanted)
