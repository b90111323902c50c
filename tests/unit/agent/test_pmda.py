"""The glue (pmda_mmv.agent.pmda) and its python3-pcp adapter (pmda_mmv.agent.pcpcompat),
imported and
constructed without pmcd: python3-pcp's generation mode (PCP_PYTHON_DOMAIN, as pmdaproc.sh
runs an agent at Install time) builds the agent and exits before any handshake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[3]
PACKAGE = CHECKOUT / "pmda_mmv"


def agent_output(script: str, tmp_path: Path) -> list[str]:
    """The lines ``script`` prints, run with an ``agent`` (MmvPMDA over tmp_path) built in
    generation mode; the script must succeed."""
    prologue = (
        "from pmda_mmv.agent.options import parse_args\n"
        "from pmda_mmv.agent.pmda import MmvPMDA\n"
        f"agent = MmvPMDA(parse_args(['--dir', {str(tmp_path)!r}, '--status-metrics']))\n"
        "logged = []\n"
        "agent.file_log.sink = logged.append\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prologue + script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        env={**os.environ, "PCP_PYTHON_DOMAIN": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_failing_callback_logs_its_name(tmp_path: Path) -> None:
    """Regression: the label callbacks were lambdas, so a failure logged "<lambda>: ...";
    each callback is a named method and its failure names it (and answers the fallback)."""
    script = (
        "def broken(*args):\n"
        "    raise ValueError('boom')\n"
        "agent.model.label = agent.model.instance_label = broken\n"
        "for name in ('label_callback', 'notes_callback', 'instance_label_callback',\n"
        "             'instance_notes_callback'):\n"
        "    assert agent._guard(getattr(agent, name), '{}')(1, 2) == '{}'\n"
        "print('\\n'.join(logged))\n"
    )
    assert agent_output(script, tmp_path) == [
        f"{name}: ValueError: boom"
        for name in (
            "label_callback",
            "notes_callback",
            "instance_label_callback",
            "instance_notes_callback",
        )
    ]


def test_the_agent_serves_its_own_metrics_before_any_file(tmp_path: Path) -> None:
    script = (
        "print(agent.pcp_tables.names())\n"
        "fetch = agent.model.fetcher()\n"
        "agent.prefetch()\n"
        "print(fetch(0, 2, 0xFFFFFFFF), fetch(0, 3, 0xFFFFFFFF))\n"
    )
    names, values = agent_output(script, tmp_path)
    assert "'mmv.control.reload'" in names and "'mmv.control.file.state'" in names
    assert values == "[0, 1] [0, 1]"  # control.files, control.metrics


def test_python3_pcp_private_attributes_are_touched_in_pcpcompat_only() -> None:
    """python3-pcp's MetricDispatch/PMDA private tables (``_metric_oneline``, ``_indoms``
    ...) and the pmidhash workaround are reached through pcpcompat alone."""
    private = re.compile(r"\._(metric|indom|metrics|indoms|pmid|units)\w*\b")
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text()
        if path.name != "pcpcompat.py":
            assert not private.search(text), (path.name, private.search(text))
        if path.name not in ("pcpcompat.py", "pmidhash.py"):
            assert "pmidhash" not in re.sub(r'""".*?"""|#.*', "", text, flags=re.S), path.name


@pytest.mark.parametrize("module", ["agent.serving", "agent.control", "agent.options"])
def test_the_serving_model_needs_no_pcp(module: str) -> None:
    script = (
        "import sys\n"
        "for name in ('pcp', 'cpmapi', 'cpmda', 'cpmi'):\n"
        "    sys.modules[name] = None  # any import of them fails\n"
        f"import pmda_mmv.{module}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=CHECKOUT
    )
    assert done.returncode == 0, done.stderr


def test_the_status_indom_makes_one_instid_per_new_file(tmp_path: Path) -> None:
    """Regression: every state change built a pmdaInstid for every file known (50,000
    files: 250,000 constructions over 5 requests); each file's is made once, and the indom
    still names every file, a removed one gone."""
    script = (
        "from pmda_mmv.directory.filestate import FileState\n"
        "from pmda_mmv.agent import control\n"
        "states = agent.scanner.states\n"
        "def served():\n"
        "    indom = agent.pcp_tables.pmda._indoms[agent.indom(control.STATUS_SERIAL)]\n"
        "    return [(indom.it_set[i].i_inst, indom.it_set[i].i_name.decode())\n"
        "            for i in range(indom.it_numinst)]\n"
        "for i in range(200):\n"
        "    states[f'f{i}'] = FileState(f'f{i}', i + 1)\n"
        "agent._update_status_indom()\n"
        "first = agent.status_instids.made\n"
        "states['new\\x1b'] = FileState('new\\x1b', 500)\n"
        "del states['f3']\n"
        "agent._update_status_indom()\n"
        "agent._update_status_indom()\n"
        "got = served()\n"
        "print(first, agent.status_instids.made - first, len(got), got[-1])\n"
        "print(sorted(got) == sorted([(i + 1, f'f{i}') for i in range(200) if i != 3]"
        " + [(500, 'new\\\\x1b')]))\n"
    )
    counts, same = agent_output(script, tmp_path)
    assert counts == "200 1 200 (500, 'new\\\\x1b')"
    assert same == "True"


def test_a_shared_indom_makes_instids_for_new_instances_only(tmp_path: Path) -> None:
    """Regression: each file arriving in an indom that files share rebuilt a pmdaInstid
    for every instance of every file; one file more makes its new instances' only, and
    the indom python3-pcp serves holds every instance, first name of an id first."""
    from pmda_mmv.mmvfile import layout
    from tests.support import mmvbuild as mb

    def pets(path: Path, *insts: int) -> None:
        b = mb.MmvBuilder(cluster=9, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(mb.Indom(2, [mb.Instance(i, f"{path.name}.{i}") for i in insts]))
        b.metrics.append(mb.Metric("pets.n", 1, indom=2))
        b.values += [mb.Value("pets.n", i, i) for i in insts]
        b.write(path)

    for f in range(30):
        pets(tmp_path / f"f{f:02d}", 2 * f, 2 * f + 1)
    pets(tmp_path / ".new", 0, 99)  # a dot-file: not looked at until renamed
    script = (
        "import pathlib\n"
        f"pets_dir = pathlib.Path({str(tmp_path)!r})\n"
        "agent.apply(agent.scanner.refresh(True, False))\n"
        "[(serial, made)] = agent.indom_instids.items()\n"
        "first = made.made\n"
        "(pets_dir / '.new').rename(pets_dir / 'new')\n"
        "agent.apply(agent.scanner.refresh(True, False))\n"
        "indom = agent.pcp_tables.pmda._indoms[agent.indom(serial)]\n"
        "names = {indom.it_set[i].i_inst: indom.it_set[i].i_name.decode()\n"
        "         for i in range(indom.it_numinst)}\n"
        "print(first, made.made - first, len(names), names[0], names[59], names[99])\n"
    )
    assert " ".join(agent_output(script, tmp_path)).split() == [
        "60",
        "1",
        "61",
        "f00.0",
        "f29.59",
        ".new.99",
    ]


def test_the_first_scan_line_is_escaped(tmp_path: Path) -> None:
    """The info line after the first scan names the directory: a control character in its
    path (here ESC, a terminal escape) is escaped as in every other line of the log."""
    directory = tmp_path / "mmv\x1b[2J"
    directory.mkdir()
    script = (
        "agent.file_log.info_sink = agent.log = logged.append\n"
        "agent.scanner.refresh(True)\n"
        "agent._first_scan_line(0.25)\n"
        "print(*logged, sep='\\n')\n"
    )
    [line] = agent_output(script, directory)
    assert "\x1b" not in line
    assert line.endswith(
        "mmv\\x1b[2J: first scan: 0 files loaded in 0.25 s, 0 queued for the next requests"
    )


def test_the_first_scan_line_is_logged_after_a_first_scan_of_many_refusals(
    tmp_path: Path,
) -> None:
    """A directory of 1,000 files of a bad magic: the first scan logs one refusal each,
    the whole per-minute budget of the log limiter (ratelimit.TOTAL lines).  The line
    that says what the first scan did is one line per start, not a file's: it is still
    logged, not counted among the suppressed."""
    from pmda_mmv.agent import ratelimit

    for k in range(ratelimit.TOTAL):
        (tmp_path / f"junk{k:04d}").write_bytes(b"NOTMMV\0\0" + bytes(40))
    script = (
        "agent.file_log.info_sink = logged.append\n"
        "agent.log = logged.append\n"
        "agent.scanner.refresh(True)\n"
        "agent._first_scan_line(0.25)\n"
        "print(len(logged))\n"
        "print(logged[-1])\n"
    )
    count, last = agent_output(script, tmp_path)
    assert int(count) == ratelimit.TOTAL + 1
    assert last.endswith(": first scan: 0 files loaded in 0.25 s, 0 queued for the next requests")


def write_app(path: Path, metrics: int) -> None:
    """An application's file of ``metrics`` metrics over an indom of two instances,
    written as a new inode (renamed into place)."""
    from pmda_mmv.mmvfile import layout
    from tests.support import mmvbuild as mb

    b = mb.MmvBuilder(cluster=9, flags=layout.FLAG_NOPREFIX)
    b.indoms.append(mb.Indom(2, [mb.Instance(i, f"cpu{i}") for i in range(2)]))
    for j in range(metrics):
        b.metrics.append(mb.Metric(f"app.m{j}", j, indom=2, shorthelp=f"metric {j}"))
        b.values += [mb.Value(f"app.m{j}", i, i + j) for i in range(2)]
    b.write(path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def test_a_file_written_again_with_the_same_metrics_costs_no_rebuild(tmp_path: Path) -> None:
    """Regression: every change made python3-pcp rebuild its whole namespace and metric
    table (0.17 s at 100,000 names); a file written again with the same names, PMIDs,
    descriptors and instances changes nothing python3-pcp copies, so it is told of
    nothing; then one metric more is told once, and one less once."""
    write_app(tmp_path / "app", 3)
    script = (
        "import pathlib, types\n"
        "from pmda_mmv.agent import pcpcompat\n"
        "from tests.unit.agent.test_pmda import write_app\n"
        f"path = pathlib.Path({str(tmp_path)!r}) / 'app'\n"
        "rebuilds = []\n"
        "pcpcompat.cpmda = types.SimpleNamespace(set_need_refresh=lambda: rebuilds.append(1))\n"
        "agent.refresh_metrics(True, False)\n"
        "for metrics in (3, 3, 4, 3):\n"
        "    before, served = len(rebuilds), agent.pcp_tables.names()\n"
        "    write_app(path, metrics)\n"
        "    agent.refresh_metrics(True, False)\n"
        "    added = len(agent.pcp_tables.names()) - len(served)\n"
        "    agent.prefetch()\n"
        "    agent.refresh_cluster(9)\n"
        "    print(len(rebuilds) - before, added, agent.model.fetcher()(9, 2, 1))\n"
    )
    assert agent_output(script, tmp_path) == [
        "0 0 [3, 1]",
        "0 0 [3, 1]",
        "1 1 [3, 1]",
        "1 -1 [3, 1]",
    ]


def test_memory_per_served_name_with_python3_pcps_tables(tmp_path: Path) -> None:
    """The memory one served name costs the whole agent in Python (python3-pcp's tables
    included; libpcp_pmda's namespace in C aside), traced by tracemalloc over 20 files of
    1,000 singular metrics: 1,191 bytes before (python3-pcp's dictionaries by name and of
    entries by PMID, a position index, a node per leaf of the name tree, a table builder
    and a name per PMID in the serving model, a list per PMID in the catalogue), then 747
    (an array of one value offset per singular metric, an int per item, entry offset and
    value offset of each file), 619 now; and every name is still served and counted
    (``mmv.control.metrics``)."""
    from tests.support import hostile

    hostile.prefixed_names(tmp_path, 20, 1000)
    script = (
        "import gc, tracemalloc\n"
        "gc.collect()\n"
        "tracemalloc.start()\n"
        "agent.refresh_metrics(True, False)\n"
        "gc.collect()\n"
        "traced = tracemalloc.get_traced_memory()[0]\n"
        "tracemalloc.stop()\n"
        "names = [n for n in agent.pcp_tables.names() if '.control.' not in n]\n"
        "print(len(names), agent.metrics_value(), traced // len(names))\n"
    )
    names, served, per_name = map(int, agent_output(script, tmp_path)[-1].split())
    assert names == served == 20_000
    assert per_name < 660, per_name


def test_a_request_that_registers_held_names_loads_one_file(tmp_path: Path) -> None:
    """Found by benchmarks/appear.py: with 1,000 files of 1,000 metrics appearing, the
    request that registered what was held (57,000 names) also spent its whole loading
    budget, then python3-pcp rebuilt its namespace: 1.8 s.  Here the rebuild is made to
    cost more than the budget (REBUILD_COST), so each request that registers held names
    loads one file, the others load within the budget, and every file is served.  The
    charge counts the names served without listing them (a dictionary of every name at
    each registering request put 500,000-name requests back over 1.7 s)."""
    from tests.support import mmvbuild as mb

    for k in range(24):
        b = mb.MmvBuilder(cluster=k + 1)
        for j in range(200):
            b.metrics.append(mb.Metric(f"m{j}", j + 1))
        b.write(tmp_path / f"f{k:02d}")
    script = (
        "from pmda_mmv.agent import hold, serving\n"
        "from pmda_mmv.directory import budget\n"
        "listed = []\n"
        "names = serving.Serving.served_names\n"
        "serving.Serving.served_names = property(lambda m: listed.append(1) or names.fget(m))\n"
        "budget.REBUILD_COST = 1.0\n"
        "hold.HELD_NAMES = 300\n"
        "agent.scanner.budget = 0.004\n"
        "charged = []\n"
        "register = agent._register_held\n"
        "agent._register_held = lambda: charged.append(register()) or charged[-1]\n"
        "for _ in range(300):\n"
        "    before = len(agent.catalogue.files)\n"
        "    agent.refresh_metrics()\n"
        "    print(charged[-1] > 0, len(agent.catalogue.files) - before)\n"
        "    if not agent.scanner.pending:\n"
        "        break\n"
        "print(len(agent.catalogue.files), len(agent.pcp_tables.names()), len(listed))\n"
    )
    *requests, end = agent_output(script, tmp_path)
    loaded = [(c == "True", int(n)) for c, n in (line.split() for line in requests)]
    assert any(charged for charged, _ in loaded)
    assert all(n <= 1 for charged, n in loaded if charged)
    files, names, listed = map(int, end.split())
    assert files == 24 and names >= 24 * 200
    assert listed == 0  # the charge counts the names served: it lists none (a dict of all)
