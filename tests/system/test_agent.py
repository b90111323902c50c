"""The agent under a real (private) pmcd, queried with pminfo, pmprobe, pmstore and dbpmda,
on files written by libpcp_mmv (python3-pcp ``pcp.mmv``, ctypes) and pcp-testsuite's captures."""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import (
    Indom,
    Instance,
    Metric,
    MmvBuilder,
    Value,
    publish,
    sample,
    single,
    write_capi,
    write_pcp_mmv,
)
from tests.support.normalize import parse_info
from tests.support.pmcd import PrivatePmcd, c_agent, our_agent

Start = Callable[..., PrivatePmcd]
CAPTURES = Path("/var/lib/pcp/testsuite/mmv")


def names(pmcd: PrivatePmcd, root: str = "mmv") -> set[str]:
    out = pmcd.run("pminfo", root)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.pmcd
def test_pcp_mmv_values_follow_the_writer(start_mmv: Start, private_mmv_dir: Path) -> None:
    written = write_pcp_mmv(private_mmv_dir / "py")
    pmcd = start_mmv()
    assert pmcd.fetch("mmv.py.py.counter") == {None: "41"}
    assert pmcd.fetch("mmv.py.py.gauge") == {"red": "0", "green": "-1", "blue": "-2"}
    assert pmcd.fetch("mmv.py.py.name") == {None: '"from pcp.mmv"'}
    written.handle.lookup_set("py.counter", "", 99)
    written.handle.lookup_set("py.gauge", "blue", 7)
    assert pmcd.fetch("mmv.py.py.counter") == {None: "99"}
    assert pmcd.fetch("mmv.py.py.gauge")["blue"] == "7"


@pytest.mark.pmcd
def test_descriptors_help_and_indom_help(start_mmv: Start, private_mmv_dir: Path) -> None:
    write_pcp_mmv(private_mmv_dir / "py")
    pmcd = start_mmv()
    out = pmcd.run("pminfo", "-dtT", "mmv.py.py.counter", "mmv.py.py.gauge").stdout
    assert "mmv.py.py.counter [a counter]" in out
    assert "Data Type: 64-bit unsigned int  InDom: PM_INDOM_NULL" in out
    assert "Semantics: counter  Units: count" in out
    assert "Help:\ncounts" in out
    indom = re.search(r"InDom: (70\.\d+)", out.split("mmv.py.py.gauge")[1])
    assert indom is not None
    text = pmcd.run("pminfo", "-T", "-I", indom.group(1)).stdout  # not served by the C agent
    assert "the colours" in text


@pytest.mark.pmcd
def test_elapsed_is_a_microsecond_counter(start_mmv: Start, private_mmv_dir: Path) -> None:
    write_pcp_mmv(private_mmv_dir / "py")
    pmcd = start_mmv()
    out = pmcd.run("pminfo", "-d", "mmv.py.py.timer").stdout
    assert "64-bit int" in out and "Semantics: counter  Units: microsec" in out


@pytest.mark.pmcd
def test_capi_labels_and_help(start_mmv: Start, private_mmv_dir: Path) -> None:
    write_capi(private_mmv_dir / "capi", cluster=0)
    pmcd = start_mmv()
    out = pmcd.run("pminfo", "-tTl", "mmv.capi").stdout
    labels = [
        json.loads(line.split("labels ", 1)[1]) for line in out.splitlines() if "labels " in line
    ]
    assert labels and all(lb["agent"] == "mmv" for lb in labels)
    # Registry (cluster) labels of a cluster-0 writer: lost by the C agent, served here.
    assert any(k.startswith("reg") or k == "app" for lb in labels for k in lb), out


@pytest.mark.pmcd
def test_captured_files_are_served(start_mmv: Start, private_mmv_dir: Path) -> None:
    for name in ("pytest", "KeyboardReader"):
        (private_mmv_dir / name).write_bytes(
            lzma.decompress((CAPTURES / f"{name}.xz").read_bytes())
        )
        os.chmod(private_mmv_dir / name, 0o644)
    pmcd = start_mmv()
    served = names(pmcd)
    assert any(n.startswith("mmv.pytest.") for n in served)
    assert any(n.startswith("mmv.KeyboardReader.") for n in served)
    out = pmcd.run("pmprobe", "-v", "mmv.pytest")
    assert out.returncode == 0 and " -" not in out.stdout.replace("-1", "")


@pytest.mark.pmcd
def test_new_file_visible_in_the_next_request(start_mmv: Start, private_mmv_dir: Path) -> None:
    pmcd = start_mmv()
    assert pmcd.fetch("mmv.control.files") == {None: "0"}
    publish(private_mmv_dir / "fresh", single(5, 123))
    assert pmcd.fetch("mmv.fresh.v") == {None: "123"}
    assert pmcd.fetch("mmv.control.files") == {None: "1"}


@pytest.mark.pmcd
def test_removed_file_disappears(start_mmv: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "gone", single(5, 1))
    pmcd = start_mmv()
    assert "mmv.gone.v" in names(pmcd)
    (private_mmv_dir / "gone").unlink()
    assert "mmv.gone.v" not in names(pmcd)
    assert (
        "Unknown metric name"
        in pmcd.run("pminfo", "-f", "mmv.gone.v").stderr
        + pmcd.run("pminfo", "-f", "mmv.gone.v").stdout
    )


@pytest.mark.pmcd
def test_rewritten_file_new_generation_new_values(start_mmv: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "app", single(5, 1))
    pmcd = start_mmv()
    pmid_before = pmcd.run("pminfo", "-m", "mmv.app.v").stdout
    b = single(5, 2)
    b.generation += 1
    publish(private_mmv_dir / "app", b)
    assert pmcd.fetch("mmv.app.v") == {None: "2"}
    assert pmcd.run("pminfo", "-m", "mmv.app.v").stdout == pmid_before


@pytest.mark.pmcd
def test_two_files_same_cluster_both_served(start_mmv: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "aaa", single(7, 111))
    publish(private_mmv_dir / "bbb", single(7, 222))
    pmcd = start_mmv()
    assert pmcd.fetch("mmv.aaa.v") == {None: "111"}
    assert pmcd.fetch("mmv.bbb.v") == {None: "222"}
    pmids = pmcd.run("pminfo", "-m", "mmv.aaa.v", "mmv.bbb.v").stdout
    found = re.findall(r"PMID: (\S+)", pmids)
    assert len(found) == 2 and found[0] == "70.7.1" and found[1] != found[0]
    assert "asked for cluster 7, served to aaa: served as cluster" in pmcd.agent_log()


@pytest.mark.pmcd
def test_every_type_and_instances_by_id_and_name(start_mmv: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "s", sample(version=2))
    pmcd = start_mmv()
    out = pmcd.run("pmprobe", "-I", "mmv.s.m.tdouble").stdout
    assert '"zero" "one" "seven"' in out
    expected = {
        "t32": "-42",
        "tu32": "4000000000",
        "t64": str(-(1 << 40)),
        "tu64": str((1 << 63) + 5),
        "tfloat": "1.5",
        "tdouble": "2.25",
        "tstring": '"text"',
        "telapsed": "1500000",
    }
    for tname, text in expected.items():
        assert pmcd.fetch(f"mmv.s.s.{tname}") == {None: text}
        assert pmcd.fetch(f"mmv.s.m.{tname}") == dict.fromkeys(("zero", "one", "seven"), text)
    vals = pmcd.run("pmval", "-s", "1", "-i", "seven", "mmv.s.m.tu32").stdout
    assert "seven" in vals and "4000000000" in vals and "zero" not in vals


@pytest.mark.pmcd
def test_store_reload_and_permission(start_mmv: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "app", single(5, 1))
    pmcd = start_mmv()
    ok = pmcd.run("pmstore", "mmv.control.reload", "1")
    assert ok.returncode == 0 and "new value=1" in ok.stdout
    denied = pmcd.run("pmstore", "mmv.app.v", "5")
    assert denied.returncode != 0 and "No permission" in denied.stdout + denied.stderr
    assert pmcd.fetch("mmv.control.reload") == {None: "0"}  # the rescan ran


@pytest.mark.pmcd
def test_status_metrics_explain_refused_files(start: Start, private_mmv_dir: Path) -> None:
    publish(private_mmv_dir / "good", single(5, 1))
    (private_mmv_dir / "bad").write_bytes(b"MMV\0\x09\0\0\0" + bytes(64))
    os.chmod(private_mmv_dir / "bad", 0o644)
    pmcd = start(our_agent(private_mmv_dir, "--status-metrics"))
    state = pmcd.fetch("mmv.control.file.state")
    assert state == {"good": '"ok"', "bad": '"refused"'}
    problem = pmcd.fetch("mmv.control.file.last_problem")["bad"]
    assert "header.version at offset 4" in problem and "/bad" in problem
    assert pmcd.fetch("mmv.control.metrics") == {None: "1"}
    assert pmcd.fetch("mmv.control.files") == {None: "1"}


@pytest.mark.pmcd
def test_control_metrics_counts_a_shared_metric_once(start: Start, private_mmv_dir: Path) -> None:
    """Two writers of one application (PCP QA 648: NOPREFIX, one cluster, the same metric,
    instances of their own) serve one metric: ``mmv.control.metrics`` is 1, as C 7 counts."""
    for name, inst in (("cats", 10), ("dogs", 0)):
        b = MmvBuilder(cluster=420, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(Indom(1, [Instance(inst, f"{name}{inst}")]))
        b.metrics.append(Metric("animals.tag", 33, layout.TYPE_U32, layout.SEM_DISCRETE, 0, 1))
        b.values.append(Value("animals.tag", inst, inst))
        publish(private_mmv_dir / name, b)
    pmcd = start(our_agent(private_mmv_dir, "--status-metrics"))
    assert pmcd.fetch("mmv.animals.tag") == {"cats10": "10", "dogs0": "0"}
    assert pmcd.fetch("mmv.control.metrics") == {None: "1"}
    assert pmcd.fetch("mmv.control.files") == {None: "2"}


@pytest.mark.pmcd
def test_strict_drop_in_has_the_c_agent_s_control_metrics(
    start: Start, private_mmv_dir: Path
) -> None:
    """Names, descriptors and help of ``mmv.control.*`` are the installed C agent's (PCP 6:
    three, an int ``control.debug``; PCP 7: ``control.metrics`` too, a string
    ``control.debug``) and so are the values with no file."""
    c = start(c_agent(private_mmv_dir.parent))
    ours = start(our_agent(private_mmv_dir))
    assert names(ours) == names(c) >= {"mmv.control.reload", "mmv.control.files"}
    control = sorted(names(c))
    c_info = c.run("pminfo", "-dtTf", *control)
    assert c_info.returncode == 0, c_info.stderr
    assert parse_info(ours.run("pminfo", "-dtTf", *control).stdout) == parse_info(c_info.stdout)


@pytest.mark.pmcd
def test_control_files_counts_the_files_served(start: Start, private_mmv_dir: Path) -> None:
    """docs/differences.md ``mmv.control.files``: the C agent counts the files it mapped, a
    file none of whose metrics it serves too; pmda-mmv the files it serves (ok or partial)."""
    publish(private_mmv_dir / "good", single(5, 1))
    publish(private_mmv_dir / "client-123", single(6, 2))  # not a name component: refused
    c = start(c_agent(private_mmv_dir.parent))
    ours = start(our_agent(private_mmv_dir))
    assert "mmv.good.v" in names(c) and "mmv.good.v" in names(ours)
    assert not any("client" in n for n in names(c) | names(ours))
    assert c.fetch("mmv.control.files") == {None: "2"}
    assert ours.fetch("mmv.control.files") == {None: "1"}


@pytest.mark.pmcd
def test_control_debug_follows_the_debug_option(start: Start, private_mmv_dir: Path) -> None:
    """``-D appl0,pdu``: ``mmv.control.debug`` shows it as the C agent's does (PCP 6: the
    legacy pmDebug bits; PCP 7: the options)."""
    c = start(c_agent(private_mmv_dir.parent, "-D", "appl0,appl1"))
    ours = start(our_agent(private_mmv_dir, "-D", "appl0,appl1"))
    assert ours.fetch("mmv.control.debug") == c.fetch("mmv.control.debug")


DEBUG_STORES = ["appl0", "pdu,appl1", "", "-pdu", "nonsense", "all", "3", "0"]


@pytest.mark.pmcd
def test_control_debug_stores_as_the_c_agent_does(start: Start, private_mmv_dir: Path) -> None:
    """pmstore into ``mmv.control.debug``, then its value: each answer (stored, refused with
    PM_ERR_CONV, the options that remain) is the C agent's of this PCP."""
    c = start(c_agent(private_mmv_dir.parent))
    ours = start(our_agent(private_mmv_dir))

    def session(pmcd: PrivatePmcd) -> list[tuple[int, str, dict[str | None, str]]]:
        answers = []
        for value in DEBUG_STORES:
            out = pmcd.run("pmstore", "mmv.control.debug", value)
            answers.append(
                (out.returncode, out.stdout + out.stderr, pmcd.fetch("mmv.control.debug"))
            )
        return answers

    assert session(ours) == session(c)


def test_dbpmda_session(private_mmv_dir: Path, tmp_path: Path) -> None:
    write_pcp_mmv(private_mmv_dir / "py")
    pmns = tmp_path / "pmns"
    pmns.write_text("root {\n    mmv\t70:*:*\n}\n")
    agent = our_agent(private_mmv_dir, "-U", "root", notready=False)
    script = "\n".join(
        [
            "open pipe " + " ".join(agent.argv).replace("-l mmv.log", f"-l {tmp_path}/log"),
            "desc mmv.py.py.gauge",
            "fetch mmv.py.py.counter",
            "text mmv.py.py.counter",
            'store mmv.control.reload "1"',
            "children mmv.py.py",
            "desc mmv.no.such.metric",
            "",
        ]
    )
    dbpmda = shutil.which("dbpmda")
    assert dbpmda, "dbpmda (package pcp) is missing"
    import subprocess

    run = subprocess.run(
        [dbpmda, "-ei", "-n", str(pmns)], input=script, capture_output=True, text=True, timeout=60
    )
    out = run.stdout + run.stderr
    assert "Data Type: 32-bit int" in out
    assert re.search(r"70\.42\.1 .*numval: 1", out)
    assert "[a counter]" in out and "counts" in out
    assert "70.0.0: 0 -> 1" in out
    assert "leaf counter" in out and "leaf gauge" in out
    assert "Unknown metric name" in out


@pytest.fixture
def start(private_pmcd: Start) -> Start:
    return private_pmcd


@pytest.fixture
def start_mmv(private_pmcd: Start, private_mmv_dir: Path) -> Callable[[], PrivatePmcd]:
    """Start a private pmcd with pmda-mmv (strict drop-in options) on private_mmv_dir."""
    return lambda: private_pmcd(our_agent(private_mmv_dir))


@pytest.mark.pmcd
def test_instance_names_served_byte_for_byte(start_mmv: Start, private_mmv_dir: Path) -> None:
    # Perl's PCP::MMV writes Latin-1 names; the C agent serves the bytes, and so do we.
    from tests.support.mmvbuild import Indom, Instance

    b = MmvBuilder(cluster=9)
    b.indoms.append(Indom(2, [Instance(0, b"caf\xe9"), Instance(1, "plain")]))
    b.metrics.append(Metric("m", 1, indom=2))
    b.values += [Value("m", 0, 1), Value("m", 1, 2)]
    publish(private_mmv_dir / "latin", b)
    pmcd = start_mmv()
    import subprocess

    out = subprocess.run(
        ["pmprobe", "-h", pmcd.host, "-I", "mmv.latin.m"], capture_output=True, timeout=30
    ).stdout
    assert b'"caf\xe9" "plain"' in out


def _pmrep_abort(pmcd: PrivatePmcd) -> list[str]:
    """Values pmrep prints before --names-change=abort stops it (3 samples at most)."""
    import subprocess

    env = {**os.environ, "PATH": "/usr/bin:/bin:" + os.environ.get("PATH", "")}
    out = subprocess.run(
        [
            "pmrep",
            "-h",
            pmcd.host,
            "-s",
            "3",
            "-t",
            "0.3",
            "--names-change=abort",
            "mmv.control.files",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    ).stdout
    return [line.strip() for line in out.splitlines()[2:] if line.strip()]


@pytest.mark.pmcd
def test_names_change_only_when_names_change_or_on_explicit_reload(
    start_mmv: Start, private_mmv_dir: Path
) -> None:
    # No spurious names change (the C agent raises one after every rescan) ...
    pmcd = start_mmv()
    assert _pmrep_abort(pmcd) == ["0", "0", "0"]
    # ... but a stored reload re-maps everything and says so, as C does (PCP QA 1547).
    assert pmcd.run("pmstore", "mmv.control.reload", "1").returncode == 0
    assert _pmrep_abort(pmcd) == []
    assert _pmrep_abort(pmcd) == ["0", "0", "0"]


@pytest.mark.pmcd
def test_new_file_flags_names_and_labels_once(start_mmv: Start, private_mmv_dir: Path) -> None:
    """A new file: exactly one fetch carries PMCD_NAMES_CHANGE, with PMCD_LABEL_CHANGE beside
    it (python3-pcp 6.0.3's only notification call sets both; the C agent never raises label
    changes, reference section 12 item 12, which is why PCP QA 1351 expects "names" alone)."""
    import cpmapi as c_api
    from pcp import pmapi

    pmcd = start_mmv()
    fg = pmapi.fetchgroup(c_api.PM_CONTEXT_HOST, pmcd.host)
    files = fg.extend_item("mmv.control.files")
    changes = c_api.PMCD_NAMES_CHANGE | c_api.PMCD_LABEL_CHANGE
    assert fg.fetch() & changes == 0 and files() == 0
    publish(private_mmv_dir / "fresh", single(5, 1))
    assert fg.fetch() & changes == changes and files() == 1
    assert fg.fetch() & changes == 0 and files() == 1


@pytest.mark.pmcd
def test_writer_restarting_with_another_cluster_keeps_the_tables_whole(
    start_mmv: Start, private_mmv_dir: Path
) -> None:
    """A file rewritten under the same name with another cluster, seen in one request with a
    new file: its old PMID leaves before its new one arrives (found by a breaker run: the new
    PMID was added first, python3-pcp raised on the name already served, and the new file and
    every later change were lost until the agent restarted)."""
    publish(private_mmv_dir / "swapx", single(500, 1))
    pmcd = start_mmv()
    assert pmcd.fetch("mmv.swapx.v") == {None: "1"}
    (private_mmv_dir / "swapx").unlink()
    publish(private_mmv_dir / "swapx", single(400, 2))  # the writer restarts, another cluster
    publish(private_mmv_dir / "victimy", single(450, 3))  # another application's new file
    assert pmcd.fetch("mmv.swapx.v") == {None: "2"}
    assert pmcd.fetch("mmv.victimy.v") == {None: "3"}
    assert pmcd.run("pminfo", "-m", "mmv.swapx.v").stdout.split()[-1] == "70.400.1"
    (private_mmv_dir / "swapx").unlink()
    assert names(pmcd) >= {"mmv.victimy.v"} and "mmv.swapx.v" not in names(pmcd)
    assert "KeyError" not in pmcd.agent_log("mmv")
