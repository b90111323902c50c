"""One verdict for every file: ``pmda-mmv check`` says what the agent does.

For every file of the project's corpora (the real-writer corpus, :mod:`tests.support.writers`;
the crafted files of :mod:`tests.support.mmvbuild`, :mod:`tests.support.hostile` and
``tests/data/hardening``; the entries of the issue's table), ``check --json DIR`` is compared
with what pmda-mmv under a
private pmcd then serves from the same directory, with the same options: ``ok`` exactly
when the agent serves all of the file's metrics, ``partial`` when it serves part of it,
``refused``, ``not-ready`` or ``exited`` when it serves none (the agent's
``mmv.control.file.state``, with its own last problem), ``ignored`` when the agent does not
even list it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pmda_mmv.commands import check as check_cmd
from pmda_mmv.commands import dump
from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.rules import printable
from tests.support import hostile, mmvbuild
from tests.support.crafted import crafted, single
from tests.support.mmvbuild import Metric, sample
from tests.support.pmcd import VALUE_LINE, PrivatePmcd, make_dir, our_agent
from tests.support.writers import reference

UID = os.getuid()
OPTIONS = ("--owners", str(UID))  # the agent's options, given to check too
PMCD_STATES = ("ok", "partial", "not-ready", "refused", "no-writer")
"""The states a file loaded once can have (``exited``: only a writer followed, then gone,
tests/system/test_containers.py and tests/system/test_liveness.py)."""


@dataclass
class Served:
    """What the agent serves from the directory now: per entry (status instance name) its
    state, number of problems, last problem and number of metrics, and every name."""

    state: dict[str, str]
    problems: dict[str, int]
    last: dict[str, str]
    metrics: dict[str, int]
    names: set[str]


def _values(pmcd: PrivatePmcd, metric: str) -> dict[str, str]:
    out = pmcd.run("pminfo", "-f", metric)
    assert out.returncode == 0, out.stderr
    values = {}
    for line in out.stdout.splitlines():
        m = VALUE_LINE.match(line)
        if m and m.group(2) is not None:
            values[m.group(2)] = m.group(3)
    return values


def served(pmcd: PrivatePmcd) -> Served:
    text = {k: _values(pmcd, f"mmv.control.file.{k}") for k in ("state", "last_problem")}
    counts = {k: _values(pmcd, f"mmv.control.file.{k}") for k in ("problems", "metrics")}
    listing = pmcd.run("pminfo", "mmv")
    assert listing.returncode == 0, listing.stderr
    names = {n for n in listing.stdout.split() if not n.startswith("mmv.control.")}
    return Served(
        {k: v[1:-1] for k, v in text["state"].items()},
        {k: int(v) for k, v in counts["problems"].items()},
        {k: v[1:-1] for k, v in text["last_problem"].items()},
        {k: int(v) for k, v in counts["metrics"].items()},
        names,
    )


def check_dir(path: Path, *options: str) -> list[check_cmd.Doc]:
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", "--json", *OPTIONS, *options, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    results: list[check_cmd.Doc] = json.loads(done.stdout)
    return results


def metric_entries(path: Path) -> int:
    """Metric entries the file's TOC lists (what "all of the file's metrics" counts)."""
    doc = dump.describe(os.path.realpath(path))  # a symlink: its target, as served
    return sum(t["count"] for t in doc.get("toc", ()) if t["type"] == layout.TOC_METRICS)


def compare(directory: Path, results: list[check_cmd.Doc], agent: Served) -> list[str]:
    """Every disagreement between check's verdicts and what the agent serves."""
    bad: list[str] = []
    listed = sorted(os.listdir(directory))
    if [Path(r["file"]).name for r in results] != listed:
        bad.append(f"{directory}: check lists {[r['file'] for r in results]}, not {listed}")
    union: set[str] = set()
    for r in results:
        name = Path(r["file"]).name
        inst, where = printable(name), f"{r['file']}"
        status, problems, names = r["status"], r["problems"], set(r["served"])
        union |= names
        if status == "ignored":
            if inst in agent.state:
                bad.append(f"{where}: ignored by check, {agent.state[inst]} for the agent")
            continue
        if agent.state.get(inst) != status:
            bad.append(f"{where}: check {status}, agent {agent.state.get(inst)}")
            continue
        count = agent.problems[inst]
        if len(problems) != min(count, limits.MAX_PROBLEMS + 1):
            bad.append(f"{where}: check {len(problems)} problems, agent {count}")
        if count <= limits.MAX_PROBLEMS and problems:
            last = printable(problems[-1]["message"])
            if not agent.last[inst].endswith(last):
                bad.append(f"{where}: check's reason {last!r}, agent's {agent.last[inst]!r}")
        if agent.metrics[inst] != len(names):
            bad.append(f"{where}: check serves {len(names)} metrics, agent {agent.metrics[inst]}")
        if not names <= agent.names:
            bad.append(f"{where}: check serves {sorted(names - agent.names)}, the agent not")
        entries = metric_entries(directory / name)
        if status == "ok" and (problems or len(names) != entries):
            bad.append(f"{where}: ok, but serves {len(names)} of {entries} metrics: {problems}")
        if status == "partial" and not (names and problems):
            bad.append(f"{where}: partial, serving {len(names)} metrics, problems {problems}")
        if status in ("refused", "not-ready", "exited") and (names or not problems):
            bad.append(f"{where}: {status}, serving {len(names)}, problems {problems}")
    if union != agent.names:
        bad.append(f"{directory}: the agent serves {sorted(agent.names - union)[:5]} too")
    return bad


def settled(pmcd: PrivatePmcd, directory: Path, requests: int = 100) -> Served:
    """What the agent serves once it has looked at every entry of ``directory`` (a
    request loads what its budget allows, the rest waits for the next ones): each
    non-dot entry has a status instance, none of them ``pending``."""
    entries = {printable(n) for n in os.listdir(directory) if not n.startswith(".")}
    for _ in range(requests):
        agent = served(pmcd)
        if set(agent.state) == entries and "pending" not in agent.state.values():
            return agent
        time.sleep(0.05)
    raise AssertionError(f"the agent did not settle on {directory}: {agent.state}")


@pytest.mark.pmcd
@pytest.mark.host_pid_namespace  # the corpus's PROCESS files name PID 1: host init
def test_check_says_what_the_agent_serves_for_every_corpus_file(
    mmv_corpus: Path, private_pmcd, private_dir: Path
) -> None:
    """The whole corpus, every entry of every directory, against one agent re-pointed at
    each directory in turn (``mmv.control.reload``)."""
    dirs = []
    for case in sorted(p.parent for p in mmv_corpus.glob("*/mmv")):
        dirs.append(private_dir / "corpus" / case.name)
        shutil.copytree(case / "mmv", dirs[-1], symlinks=True)
    dirs.append(make_dir(private_dir / "crafted"))
    crafted(dirs[-1])
    link = private_dir / "current"
    link.symlink_to(make_dir(private_dir / "empty"))
    pmcd = private_pmcd(our_agent(link, "--status-metrics", *OPTIONS))
    bad: list[str] = []
    verdicts: dict[str, int] = {}
    for directory in dirs:
        # through the empty directory: every entry is then new to the agent, pending
        # until it is looked at, so that settled() knows when the agent is done
        for target in (private_dir / "empty", directory):
            link.unlink()
            link.symlink_to(target)
            stored = pmcd.run("pmstore", "mmv.control.reload", "1")
            assert stored.returncode == 0, stored.stderr
            agent = settled(pmcd, link)
        results = check_dir(link)
        bad += compare(link, results, agent)
        for r in results:
            verdicts[r["status"]] = verdicts.get(r["status"], 0) + 1
    assert bad == []
    assert set(verdicts) == {*PMCD_STATES, "ignored"}, verdicts  # every verdict was met


@pytest.mark.pmcd
def test_help_slot_without_nul_is_served_as_c_serves_it(
    private_pmcd, private_mmv_dir: Path, c_reference: tuple[str, str]
) -> None:
    """Speed fills a 256-byte help slot with no NUL: the agent serves its first 255 bytes,
    as the C agent does, and check, the log and the status metric call the file partial."""
    b = single("m", cluster=40)
    b.metrics[0].shorthelp = b"x" * layout.STRING_SIZE
    b.write(private_mmv_dir / "speedy")
    pmcd = private_pmcd(our_agent(private_mmv_dir, "--status-metrics"))
    out = pmcd.run("pminfo", "-t", "mmv.speedy.m")
    theirs = subprocess.run(
        [c_reference[0], *reference.local_context(reference.write_pmns(private_mmv_dir.parent
         / "pmns")), "-t", "mmv.speedy.m"],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PCP_TMP_DIR=str(private_mmv_dir.parent)),
    )  # fmt: skip
    assert out.stdout == theirs.stdout, (out.stdout, theirs.stdout, theirs.stderr)
    assert out.stdout.strip() == f"mmv.speedy.m [{'x' * (layout.STRING_SIZE - 1)}]", out.stderr
    [r] = check_dir(private_mmv_dir)
    assert r["status"] == "partial" == served(pmcd).state["speedy"]
    assert "served as its first 255 bytes" in r["problems"][0]["message"]
    assert "served as its first 255 bytes" in pmcd.agent_log()
    # what mmv.control.files counts, in the status-metric variant's own help text
    files = pmcd.run("pminfo", "-tT", "mmv.control.files").stdout
    assert "Count of files served (state ok or partial" in files, files


def test_debug_says_partial_when_check_does(tmp_path: Path) -> None:
    """``debug`` prints the agent's verdict for a served file: partial after the skipped
    metric's line, as check says (it printed ``ok`` before)."""
    clash = single("a.b", cluster=41)
    clash.metrics.append(Metric("a.b.c", 2))
    clash.write(tmp_path / "clash")
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "debug", "--dir", str(tmp_path), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    problem = next(k for k, line in enumerate(lines) if "metric not served" in line)
    served_line = next(line for line in lines if " served " in line)
    assert lines.index(served_line) > problem
    assert served_line.endswith("partial (1 problem)"), served_line
    [r] = check_dir(tmp_path)
    assert r["status"] == "partial" and r["served"] == ["mmv.clash.a.b"]
    assert r["conflicts"] == [
        {
            "name": "mmv.clash.a.b.c",
            "winner": "clash",
            "why": "mmv.clash.a.b is already a leaf",
            "taken": False,
        }
    ]


def test_check_json_names_the_file_that_won(tmp_path: Path) -> None:
    """NOPREFIX names and clusters: the file that won a conflict is named, and the reserved
    subtree is the agent's."""
    single("shared.m", cluster=50, flags=layout.FLAG_NOPREFIX).write(tmp_path / "first")
    single("shared.m", cluster=50, flags=layout.FLAG_NOPREFIX, mtype=layout.TYPE_U64).write(
        tmp_path / "second"
    )
    single("control.x", cluster=51, flags=layout.FLAG_NOPREFIX).write(tmp_path / "third")
    by = {Path(r["file"]).name: r for r in check_dir(tmp_path)}
    assert (by["first"]["status"], by["first"]["served"], by["first"]["cluster"]) == (
        "ok",
        ["mmv.shared.m"],
        50,
    )
    second = by["second"]
    assert second["status"] == "refused" and second["served"] == []
    assert second["conflicts"] == [
        {
            "name": "mmv.shared.m",
            "winner": "first",
            "why": "mmv.shared.m is already served",
            "taken": True,
        }
    ]
    third = by["third"]
    assert third["status"] == "refused"
    assert third["conflicts"] == [
        {
            "name": "mmv.control.x",
            "winner": None,
            "why": "mmv.control.x is reserved for the agent",
            "taken": False,
        }
    ]
    assert third["problems"][-1]["message"] == (
        "mmv.control.x is reserved for the agent, metric not served"
    )
    # one file alone: judged with the others beside it
    [alone] = check_dir(tmp_path / "second")
    assert alone == second


def test_check_owners_as_the_agent(tmp_path: Path) -> None:
    """``--owners``: a file of another user is refused by check as by the agent."""
    sample().write(tmp_path / "mine")
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", "--owners", str(UID + 1), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == [
        f"{tmp_path / 'mine'}: refused (1 problem)",
        f"  file: owner uid {UID} is not trusted",
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", "--owners", "no-such-user-x", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown user" in bad.stderr


def test_debug_takes_the_agents_options(tmp_path: Path) -> None:
    """``debug --owners``: the same refusal as check and the agent."""
    sample().write(tmp_path / "mine")
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "debug", "--dir", str(tmp_path), "--once",
         "--owners", str(UID + 1)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"problem  {tmp_path / 'mine'}: owner uid {UID} is not trusted" in done.stdout
    assert " served " not in done.stdout


def test_written_files_agree(tmp_path: Path) -> None:
    """A live pcp.mmv writer's file: ok in check, all its metrics served."""
    written = mmvbuild.write_pcp_mmv(tmp_path / "py")
    try:
        [r] = check_dir(tmp_path)
        assert r["status"] == "ok" and len(r["served"]) == metric_entries(tmp_path / "py")
    finally:
        written.handle.stop()


@pytest.mark.pmcd
def test_check_max_total_judges_as_the_agent_serves(private_pmcd, private_dir: Path) -> None:
    """``check --max-total N`` judges as an agent started with ``--max-total N`` serves:
    the same files refused for the total, with the same reason (one set of serving
    options, agent/options.py); without the option check serves them all."""
    directory = make_dir(private_dir / "total")
    hostile.big_files(directory, 3, 10, 4000)  # about 1.6 MiB each
    sample().write(directory / "small")
    limit = ("--max-total", "3")
    pmcd = private_pmcd(our_agent(directory, "--status-metrics", *OPTIONS, *limit))
    agent = settled(pmcd, directory)
    refused = sorted(k for k, v in agent.state.items() if v == "refused")
    assert refused and all("--max-total" in agent.last[k] for k in refused), agent
    results = check_dir(directory, *limit)
    assert compare(directory, results, agent) == []
    assert sorted(Path(r["file"]).name for r in results if r["status"] == "refused") == refused
    unlimited = {Path(r["file"]).name: r["status"] for r in check_dir(directory)}
    assert all(unlimited[k] == "ok" for k in refused), unlimited
