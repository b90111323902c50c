"""Differential tests: pmda-mmv under pmcd against PCP 6.0.3's C pmdammv, case by case.

Each case is a directory of MMV files written by real writers: the project's corpus
(:mod:`tests.support.writers`: libpcp_mmv through ctypes and its legacy APIs, python3-pcp's
``pcp.mmv``, Perl's ``PCP::MMV``, the pcp-testsuite captures) plus the cases made here
(:data:`OWN_CASES`, with libpcp_mmv's registry API and the ``tests/support/mmvbuild`` writers).  For
every case the same client commands run against

* the C agent: ``pmda_mmv.so`` loaded in a local context (``pminfo -L -Kclear -Kadd,70,...``)
  with ``PCP_TMP_DIR`` at the case, so every command scans afresh;
* pmda-mmv without options (the drop-in configuration), a pipe agent of one private pmcd per
  module, restarted for each case with ``--dir`` at that case;

and :mod:`tests.support.normalize` lists every field that differs in ``pminfo mmv`` (the names
listed), ``pminfo -dfTlt`` and ``pminfo -x`` of every name either side knows, ``pminfo -m``,
``pmprobe -I`` and ``pminfo -tT`` of every instance domain.  Each difference must be one of
the documented :data:`KINDS` (docs/differences.md); each kind also has a test of its own,
named after it, on a case made to show it.  Bugs it found are regression tests at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands.check import judge
from pmda_mmv.mmvfile import layout, pmunits
from tests.support import mmvbuild
from tests.support.normalize import (
    BAD_INDOM,
    BAD_PMID,
    NO_TEXT,
    Block,
    Diff,
    diff_blocks,
    diff_maps,
    parse_indom_help,
    parse_info,
    parse_pmids,
    parse_probe,
)
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent
from tests.support.writers.cases import CASES, Params
from tests.support.writers.corpus import write_corpus
from tests.support.writers.libpcp_mmv import (
    LABEL_BOOLEAN,
    LABEL_MAP,
    LABEL_NULL,
    LABEL_NUMBER,
    LABEL_STRING,
    Registry,
)
from tests.support.writers.reference import C_DSO, local_context, write_pmns

pytestmark = pytest.mark.pmcd

LARGE_INSTANCES = 5000  # capi-large*: 2 x 5000 values (the C agent's fetch is quadratic)
CLIENT_ENV = {k: v for k, v in os.environ.items() if k not in ("PMCD_HOST", "PMCD_PORT")}

# ---- real writers: libpcp_mmv's registry API (tests.support.writers.libpcp_mmv) ------------

NONE_UNITS, COUNT = 0, pmunits.units_word(dim_count=1)
U32, I32, U64, FLOAT, DOUBLE = (
    layout.TYPE_U32,
    layout.TYPE_I32,
    layout.TYPE_U64,
    layout.TYPE_FLOAT,
    layout.TYPE_DOUBLE,
)
INSTANT, COUNTER = layout.SEM_INSTANT, layout.SEM_COUNTER


def case_collide(d: Path) -> list[Any]:
    """Clusters the C agent aliases: bbb 1, aaa 2, ccc 0 (C auto-assigns 2, aaa's), ddd and
    eee both 7; each file: a counter, a per-instance metric, one metric of its own, a label."""
    writers = []
    for k, (name, cluster) in enumerate(
        [("aaa", 2), ("bbb", 1), ("ccc", 0), ("ddd", 7), ("eee", 7)]
    ):
        r = Registry(d / name, cluster)
        r.indom(1, [(0, f"{name}0"), (k + 1, f"{name}{k + 1}")], f"{name} instances")
        r.metric("m.count", 1, U64, COUNTER, COUNT, short=f"{name} count")
        r.metric("m.multi", 2, U32, indom=1, short=f"{name} per instance")
        r.metric(f"m.only_{name}", 3 + k, I32)
        r.registry_label("file", f'"{name}"', LABEL_STRING)
        r.start().set("m.count", None, 100 + k).set(f"m.only_{name}", None, -k)
        r.set("m.multi", f"{name}0", 10 * k).set("m.multi", f"{name}{k + 1}", 10 * k + 1)
        writers.append(r)
    return writers


def case_indom_alias(d: Path) -> list[Any]:
    """The C agent's indom packing ``(cluster << 11) | serial`` makes p (cluster 1, serial
    4097) and q (cluster 3, serial 1) one instance domain, 70.6145."""
    p = Registry(d / "p", 1).indom(4097, [(0, "p0"), (1, "p1")], "p's instances")
    p.metric("v", 1, U32, indom=4097).start().set("v", "p0", 1).set("v", "p1", 2)
    q = Registry(d / "q", 3).indom(1, [(0, "q0"), (5, "q5")], "q's instances")
    q.metric("v", 1, U32, indom=1).start().set("v", "q0", 3).set("v", "q5", 4)
    return [p, q]


SPEEDY = ((3776285, "visits", [(1, "home"), (2, "about")]), (1234567, "hits", [(7, "api")]))
"""Indom serials as Speed and Parfait write them (22-bit hashes), on cluster 7: C numbers
70.3784477 and 70.1244807."""


def speedy(path: Path, reverse: bool = False) -> Registry:
    """libpcp_mmv writes file ``speedy``'s indoms (in the other order with ``reverse``)."""
    r = Registry(path, 7)
    for serial, name, insts in reversed(SPEEDY) if reverse else SPEEDY:
        r.indom(serial, insts, f"{name} instances")
    for item, (serial, name, _) in enumerate(SPEEDY, 1):
        r.metric(name, item, U32, indom=serial)
    r.start()
    for _, name, insts in SPEEDY:
        for internal, inst in insts:
            r.set(name, inst, internal)
    return r


def case_hashed_serials(d: Path) -> list[Any]:
    return [speedy(d / "speedy")]


def case_help(d: Path) -> list[Any]:
    """Help text everywhere: indoms with both texts, one-line only, none; a NOSUPPORT metric
    with help; a metric on an empty indom (no value entry) with help."""
    r = Registry(d / "helps", 31)
    r.indom(1, [(1, "x"), (2, "y")], "indom one-line", "indom long text\nsecond line")
    r.indom(2, [(7, "z")], "only a one-line")
    r.indom(3, [(8, "w")])
    r.indom(4, [], "empty indom", "an indom without instances")
    r.metric("nosup", 1, layout.TYPE_NOSUPPORT, short="not supported here", long="nosup long")
    r.metric("on.one", 2, U32, indom=1, short="on one", long="long text on one")
    r.metric("on.two", 3, U32, indom=2, short="on two")
    r.metric("on.three", 4, U32, indom=3)
    r.metric("on.empty", 5, U32, indom=4, short="on nothing", long="no instances at all")
    r.start().set("on.one", "x", 1).set("on.one", "y", 2).set("on.two", "z", 3)
    r.set("on.three", "w", 4)
    return [r]


def case_labels(d: Path) -> list[Any]:
    """A cluster-0 writer with labels at every level; instance p has a map label (two PCP
    labels from one payload) and a bool; q a null."""
    r = Registry(d / "lab0", 0).indom(3, [(0, "p"), (1, "q")], "pair")
    r.metric("c", 1, U64, COUNTER, COUNT, short="count").metric("per", 2, DOUBLE, indom=3)
    r.registry_label("app", '"lab0"', LABEL_STRING)
    r.registry_label("tier", "2", LABEL_NUMBER, optional=True)
    r.metric_label(1, "unit", '"ops"', LABEL_STRING)
    r.indom_label(3, "kind", '"pair"', LABEL_STRING)
    r.instance_label(3, 0, "where", '{"rack":"r1","row":4}', LABEL_MAP)
    r.instance_label(3, 0, "first", "true", LABEL_BOOLEAN)
    r.instance_label(3, 1, "second", "null", LABEL_NULL, optional=True)
    r.start().set("c", None, 7).set("per", "p", 0.5).set("per", "q", 1.5)
    return [r]


def case_negative_instance(d: Path) -> list[Any]:
    """Negative internal instance ids (an int32 in the file; pmdaInstance handles them)."""
    r = Registry(d / "neg", 44).indom(1, [(-5, "minus5"), (3, "three")], "signed ids")
    r.metric("v", 1, I32, indom=1)
    r.instance_label(1, -5, "sign", '"negative"', LABEL_STRING)
    return [r.start().set("v", "minus5", -50).set("v", "three", 30)]


def case_sentinel(d: Path) -> list[Any]:
    """NaN floats and doubles in a SENTINEL file (no value) and in a plain one (NaN)."""
    writers = []
    for name, cluster, flags in (("sent", 60, layout.FLAG_SENTINEL), ("plain", 61, 0)):
        r = Registry(d / name, cluster, flags).indom(1, [(0, "nan"), (1, "num")])
        r.metric("f", 1, FLOAT, indom=1).metric("d", 2, DOUBLE, indom=1).start()
        for metric in ("f", "d"):
            r.set(metric, "nan", float("nan")).set(metric, "num", 2.5)
        writers.append(r)
    return writers


def case_noprefix(d: Path) -> list[Any]:
    """A NOPREFIX file whose names collide with a prefixed file's (``mmv.app.x``) and with
    the agent's own ``mmv.control.reload``; the C agent keeps the first in directory order."""
    app = Registry(d / "app", 12).metric("x", 1, U32).metric("y", 2, U32)
    app.start().set("x", None, 1).set("y", None, 2)
    np_ = Registry(d / "np", 10, layout.FLAG_NOPREFIX)
    np_.metric("app.x", 1, U32).metric("np_only", 2, U32).metric("control.reload", 3, U32)
    np_.start().set("app.x", None, 100).set("np_only", None, 200)
    return [app, np_]


def case_noprefix_order(d: Path) -> list[Any]:
    """As :func:`case_noprefix`, but ``app`` asks for cluster 0: ``mmv.app.x`` is still
    claimed first by ``app``, the first file in name order, as the C agent does."""
    app = Registry(d / "app", 0).metric("x", 1, U32).metric("y", 2, U32)
    app.start().set("x", None, 1).set("y", None, 2)
    np_ = Registry(d / "np", 10, layout.FLAG_NOPREFIX).metric("app.x", 1, U32)
    np_.metric("np_only", 2, U32).start().set("app.x", None, 100).set("np_only", None, 200)
    return [app, np_]


def case_names(d: Path) -> list[Any]:
    """Metric names with empty components, which the C agent accepts and pmns(5) does not
    allow, next to valid ones (a leading digit is accepted by both)."""
    r = Registry(d / "names", 33)
    for item, name in enumerate(["ok", "a..b", "trail.", "x.9lead"], start=1):
        r.metric(name, item, U32)
    r.start()
    for item, name in enumerate(["ok", "a..b", "trail.", "x.9lead"], start=1):
        r.set(name, None, item)
    return [r]


def case_mmvbuild(d: Path) -> list[Any]:
    """The project's real-writer fixtures: libpcp_mmv registry (v2 long names, labels) and
    python3-pcp's pcp.mmv (v1)."""
    capi = mmvbuild.write_capi(d / "capi", long_names=True)
    py = mmvbuild.write_pcp_mmv(d / "pywriter", cluster=42)
    return [capi, py]


def case_shared(d: Path) -> list[Any]:
    """PCP QA 648's writers: NOPREFIX files of one application, one cluster, the same metric
    on the same indom, each with instances of its own; one metric is served (PCP 7's
    ``mmv.control.metrics`` counts it once)."""
    for name, insts in (("cats", [(10, "Tom")]), ("dogs", [(0, "Fido"), (1, "Brutus")])):
        b = mmvbuild.MmvBuilder(cluster=420, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(mmvbuild.Indom(1, [mmvbuild.Instance(i, n) for i, n in insts], "pets"))
        b.metrics.append(mmvbuild.Metric("animals.tag", 33, U32, layout.SEM_DISCRETE, 0, 1, "tag"))
        b.values += [mmvbuild.Value("animals.tag", i, i) for i, _ in insts]
        b.write(d / name)
    return []


OWN_CASES: dict[str, Callable[[Path], list[Any]]] = {
    "own-collide": case_collide,
    "own-indom-alias": case_indom_alias,
    "own-hashed-serials": case_hashed_serials,
    "own-help": case_help,
    "own-labels": case_labels,
    "own-negative-instance": case_negative_instance,
    "own-sentinel": case_sentinel,
    "own-noprefix": case_noprefix,
    "own-noprefix-order": case_noprefix_order,
    "own-names": case_names,
    "own-mmvbuild": case_mmvbuild,
    "own-shared": case_shared,
}

# ---- the two agents ----------------------------------------------------------------------


@dataclass
class Ran:
    """One client command: output, exit status, and its wall-clock start and end."""

    stdout: str
    stderr: str
    rc: int
    start: float
    end: float


def run(argv: list[str], env: dict[str, str]) -> Ran:
    start = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env, timeout=120)
    return Ran(p.stdout, p.stderr, p.returncode, start, time.time())


class CAgent:
    """The C reference, ``pmda_mmv.so``, in a local context over one case directory."""

    def __init__(self, base: Path) -> None:
        if not os.access(C_DSO, os.R_OK):
            pytest.fail(f"the C reference {C_DSO} is missing (Debian package pcp)")
        self.local = local_context(write_pmns(base / "root_mmv"))

    def run(self, case: Path, tool: str, *args: str) -> Ran:
        return run([tool, *self.local, *args], dict(CLIENT_ENV, PCP_TMP_DIR=str(case)))


def _alive(proc: psutil.Process) -> bool:
    """Running and not yet a zombie (pmcd, its parent, reaps it later)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class OurAgent:
    """pmda-mmv under a private pmcd, serving the directory behind the symlink ``current``."""

    def __init__(self, base: Path) -> None:
        self.empty = make_dir(base / "empty")
        self.link = base / "current"
        self.link.symlink_to(self.empty)
        # memory only: a fresh agent per case, as each C command is, remembers nothing
        self.pmcd = PrivatePmcd(base / "pmcd", [our_agent(self.link, "--registry", "none")])

    def agents(self) -> list[psutil.Process]:
        """The agent processes pmcd runs now (not zombies)."""
        procs = []
        for pid in self.pmcd.agent_processes():
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        return [p for p in procs if _alive(p)]

    def serve(self, mmv_dir: Path) -> None:
        """Restart the agent on ``mmv_dir`` (a fresh agent per case, as each C command is)."""
        old = self.agents()
        for proc in old:
            proc.terminate()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in old) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.link.unlink()
        self.link.symlink_to(mmv_dir)
        self.run("pmprobe", "mmv.control.files")  # pmcd notices the agent has gone
        self.pmcd.sighup()  # restarts it and waits until it serves mmv
        new = self.agents()
        assert new and not {p.pid for p in old} & {p.pid for p in new}

    def run(self, tool: str, *args: str) -> Ran:
        return run([tool, "-h", self.pmcd.host, *args], CLIENT_ENV)


# ---- one comparison ------------------------------------------------------------------------


@dataclass
class Compared:
    """Both agents' answers for one case, and their differences.  ``info`` is from
    ``pminfo -dfTlt``; ``window_us`` is the time from the start of the C command to the end
    of ours, per command (bounds values that advance on their own)."""

    case: str
    c_tree: Ran
    ours_tree: Ran
    c_info: dict[str, Block]
    ours_info: dict[str, Block]
    c_pmids: dict[str, str]
    ours_pmids: dict[str, str]
    c_probe: dict[str, str]
    ours_probe: dict[str, str]
    requested: set[int]
    sentinel: bool
    held_pid: bool = False  # a PROCESS file names a live process here (not its writer)
    diffs: list[Diff] = field(default_factory=list)
    window_us: dict[str, float] = field(default_factory=dict)
    spilled: set[str] = field(default_factory=set)  # names served under a spill cluster

    def c_cluster(self, name: str) -> int | None:
        pmid = self.c_pmids.get(name)
        return int(pmid.split(".")[1]) if pmid else None

    def ours_cluster(self, name: str) -> int | None:
        pmid = self.ours_pmids.get(name)
        return int(pmid.split(".")[1]) if pmid else None


def listed(r: Ran) -> list[str]:
    return [line for line in r.stdout.splitlines() if line.startswith("mmv.")]


def headers(mmv_dir: Path) -> list[tuple[int, int]]:
    """(cluster, flags) from the header of each MMV file in the directory that both agents
    serve (they drop MMV_FLAG_PROCESS files whose writer is gone)."""
    out = []
    for path in sorted(mmv_dir.iterdir()):
        head = path.read_bytes()[: layout.HEADER_SIZE]
        if len(head) == layout.HEADER_SIZE:
            _, _, _, _, _, flags, pid, cluster = layout.HEADER.unpack(head)
            if not (flags & layout.FLAG_PROCESS and pid and not psutil.pid_exists(pid)):
                out.append((cluster, flags))
    return out


def held_pids(mmv_dir: Path) -> bool:
    """Whether an MMV_FLAG_PROCESS file of the directory names a live process (1, init, in
    the corpus's "alive" cases) that is not its writer: every corpus writer has exited."""
    for path in sorted(mmv_dir.iterdir()):
        head = path.read_bytes()[: layout.HEADER_SIZE]
        if len(head) == layout.HEADER_SIZE:
            _, _, _, _, _, flags, pid, _ = layout.HEADER.unpack(head)
            if flags & layout.FLAG_PROCESS and pid > 0 and psutil.pid_exists(pid):
                return True
    return False


def spilled_names(mmv_dir: Path) -> set[str]:
    """The names ``pmda-mmv check`` says are served under a spill cluster (which names
    spill does not depend on the identity registry; their PMIDs do)."""
    results = judge([str(mmv_dir)], ServingOptions(registry="none"))
    return {s["name"] for r in results for s in r.get("spills", ())}


def observe(c: CAgent, ours: OurAgent, case: Path) -> Compared:
    """Run every command on both sides (C first) and list the differences."""
    c_tree, ours_tree = c.run(case, "pminfo", "mmv"), ours.run("pminfo", "mmv")
    c_names, o_names = set(listed(c_tree)), set(listed(ours_tree))
    names = sorted(c_names | o_names)
    out: dict[str, tuple[str, str]] = {}
    window: dict[str, float] = {}
    for tool, opt in (("pminfo", "-dfTlt"), ("pminfo", "-x"), ("pminfo", "-m"), ("pmprobe", "-I")):
        cr, orr = c.run(case, tool, opt, *names), ours.run(tool, opt, *names)
        out[opt] = cr.stdout, orr.stdout
        window[opt] = (orr.end - cr.start) * 1e6
    hdrs = headers(case / "mmv")
    c_info, o_info = map(parse_info, out["-dfTlt"])
    c_pmids, o_pmids = map(parse_pmids, out["-m"])
    c_probe, o_probe = map(parse_probe, out["-I"])
    r = Compared(
        *(case.name, c_tree, ours_tree, c_info, o_info, c_pmids, o_pmids, c_probe, o_probe),
        requested={cl for cl, _ in hdrs if cl},
        sentinel=any(fl & layout.FLAG_SENTINEL for _, fl in hdrs),
        held_pid=held_pids(case / "mmv"),
        window_us=window,
        spilled=spilled_names(case / "mmv"),
    )
    r.diffs = [
        Diff("pminfo mmv", n, "listed", n in c_names, n in o_names)
        for n in names
        if (n in c_names) != (n in o_names)
    ]
    r.diffs += diff_blocks("pminfo -dfTlt", r.c_info, r.ours_info)
    r.diffs += diff_blocks("pminfo -x", *(parse_info(text) for text in out["-x"]))
    r.diffs += diff_maps("pminfo -m", "pmid", r.c_pmids, r.ours_pmids)
    r.diffs += diff_maps("pmprobe -I", "instances", r.c_probe, r.ours_probe)
    r.diffs += indom_help_diffs(c, ours, case, r)
    return r


def indom_pairs(r: Compared) -> set[tuple[str, str]]:
    """(C indom, our indom) pairs, from the descriptors of the names both serve."""
    pairs = set()
    for name, cb in r.c_info.items():
        ob = r.ours_info.get(name)
        if ob and cb.indom and ob.indom and cb.indom != "PM_INDOM_NULL":
            pairs.add((cb.indom, ob.indom))
    return pairs


def indom_help_diffs(c: CAgent, ours: OurAgent, case: Path, r: Compared) -> list[Diff]:
    pairs = indom_pairs(r)
    if not pairs:
        return []
    c_help = parse_indom_help(c.run(case, "pminfo", "-tT", *{ci for ci, _ in pairs}).stdout)
    o_help = parse_indom_help(ours.run("pminfo", "-tT", *{oi for _, oi in pairs}).stdout)
    return [
        Diff("pminfo -tT", f"{ci}/{oi}", "indom help", c_help.get(ci), o_help.get(oi))
        for ci, oi in sorted(pairs)
        if c_help.get(ci) != o_help.get(oi)
    ]


# ---- the documented differences ----------------------------------------------------------


def cluster_alias(d: Diff, r: Compared) -> bool:
    """C: two files share a cluster (both ask for it, or one asked for 0 and C's auto-assign
    picked a taken one), so their PMIDs, indoms, values, help and labels alias.  Ours: the
    later file gets a free cluster.  Recognised by a C PMID of the name's cluster that C gives
    two names we serve under different PMIDs."""
    mine = r.c_cluster(d.name)
    names: dict[str, set[str]] = {}
    for n, pmid in r.c_pmids.items():
        names.setdefault(pmid, set()).add(n)
    return mine is not None and any(
        len(ns) > 1
        and int(pmid.split(".")[1]) == mine
        and len({r.ours_pmids.get(n) for n in ns}) > 1
        for pmid, ns in names.items()
    )


def indom_alias(d: Diff, r: Compared) -> bool:
    """C packs ``(cluster << 11) | serial`` into 22 bits, which overflows for clusters or
    serials of 2048 and more, so two files' indoms can get one number: C serves one indom
    and merges their instances.  Ours: the first served keeps C's number (in one scan a pair
    that packs without loss before one that overflows, then name order), the others get
    numbers of their own.  Recognised by a C indom that we serve as several."""
    cb, ob = r.c_info.get(d.name), r.ours_info.get(d.name)
    if cb is None or ob is None or cb.indom in (None, "PM_INDOM_NULL") or ob.indom is None:
        return False
    ours = {
        r.ours_info[n].indom
        for n, b in r.c_info.items()
        if b.indom == cb.indom and n in r.ours_info
    }
    return len(ours) > 1  # C serves one indom where we serve several: aliased


def _subset(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(k in b and b[k] == v for k, v in a.items()) and a != b


def _label_gain(d: Diff, r: Compared) -> tuple[bool, bool] | None:
    """For a labels or instance_labels difference where C's labels are a subset of ours:
    (labels of a cluster-0 writer's cluster added, instance labels C truncated added); None
    when some added label is explained by neither (or C's are not a subset)."""
    cb, ob = r.c_info.get(d.name), r.ours_info.get(d.name)
    if cb is None or ob is None or not isinstance(d.c, dict) or not isinstance(d.ours, dict):
        return None
    metric = set(ob.labels or {})
    cluster0 = metric - set(cb.labels or {})
    if cluster0 and r.c_cluster(d.name) in r.requested:
        return None  # the file asked for a cluster: C finds its cluster labels
    if d.field == "labels":
        return (bool(cluster0), False) if _subset(d.c, d.ours) else None
    truncated = False
    for inst, c_set in d.c.items():
        o_set = d.ours.get(inst, {})
        if c_set == o_set:
            continue
        own = set(o_set) - metric  # the instance's own labels
        rest = set(o_set) - set(c_set) - cluster0
        if not _subset(c_set, o_set) or (rest and not (rest <= own and any("." in k for k in own))):
            return None
        truncated |= bool(rest)
    return bool(cluster0), truncated


def cluster0_labels(d: Diff, r: Compared) -> bool:
    """C compares cluster labels with the assigned cluster, but a writer that asked for
    cluster 0 stores 0 as their identity: they never appear.  Ours: they do."""
    gain = _label_gain(d, r) if d.field in ("labels", "instance_labels") else None
    return gain is not None and gain[0]


def instance_label_truncation(d: Diff, r: Compared) -> bool:
    """C reports as many instance labels as payloads matched, so an instance whose map label
    flattens to several labels loses the last ones (by name).  Ours: all of them."""
    gain = _label_gain(d, r) if d.field == "instance_labels" else None
    return gain is not None and gain[1]


def float_sentinel(d: Diff, r: Compared) -> bool:
    """6.0.3 compares NaN with ``==``, so SENTINEL never hides a FLOAT or DOUBLE value (fixed
    in 6.3.1).  Ours: a NaN in a SENTINEL file is "no value"."""
    cb = r.c_info.get(d.name)
    if not r.sentinel or cb is None or cb.type not in ("float", "double") or not cb.values:
        return False
    nan = {inst for inst, v in cb.values.items() if v == "nan"}
    if d.field == "values":
        return bool(nan) and {i for i in d.c if d.c[i] != (d.ours or {}).get(i)} <= nan
    if d.field == "fetch_error":
        return d.ours == "No value(s) available!" and nan == set(cb.values)
    if d.field == "instances":
        kept = [f'"{i[1]}"' for i in cb.values if i is not None and i not in nan]
        return bool(d.ours == " ".join([str(len(kept)), *kept]))
    return False


def nosupport_help(d: Diff, r: Compared) -> bool:
    """C's help lookup goes through the value lookup, which answers PM_ERR_APPVERSION for a
    NOSUPPORT metric, so its help text is PM_ERR_PMID.  Ours: the file's text (PM_ERR_TEXT
    when it has none)."""
    cb = r.c_info.get(d.name)
    ok = d.field in ("oneline", "help") and d.c == BAD_PMID
    return ok and cb is not None and cb.type == "Not Supported"


def no_value_help(d: Diff, r: Compared) -> bool:
    """6.0.3 finds help text through a metric's value entries, so a metric without any (on an
    empty indom) has none: PM_ERR_PMID (fixed in 7.0).  Ours: the file's text."""
    cb = r.c_info.get(d.name)
    ok = d.field in ("oneline", "help") and d.c == BAD_PMID
    return ok and cb is not None and cb.values is None and cb.type != "Not Supported"


C_INDOM_HELP_ERRORS = ((NO_TEXT, NO_TEXT), (BAD_INDOM, BAD_INDOM))
"""What the C agent answers for any indom's help: PM_ERR_TEXT (6.x), PM_ERR_INDOM (7.x)."""


def indom_help(d: Diff, r: Compared) -> bool:
    """6.x never serves indom help text, 7.x looks it up but compares the wrong serial and
    answers PM_ERR_INDOM.  Ours: the file's one-line and long text, as written (pcp.mmv
    writes "" for none, served as empty text like a metric's), PM_ERR_TEXT without one."""
    if d.field != "indom help" or d.c not in C_INDOM_HELP_ERRORS or not d.ours:
        return False
    return d.ours == (NO_TEXT, NO_TEXT) or not d.ours[0].startswith("Error:")


def nosupport_fetch(d: Diff, r: Compared) -> bool:
    """Limitation, not a choice: python3-pcp 6.0.3 answers any fetch of a PM_TYPE_NOSUPPORT
    metric with -EOPNOTSUPP before our callback's PM_ERR_APPVERSION can count.  Both are
    errors; the message differs."""
    cb = r.c_info.get(d.name)
    if cb is None or cb.type != "Not Supported":
        return False
    appversion = "Metric not supported by this version of monitored application"
    return (d.field, d.c, d.ours) in (
        ("fetch_error", f"Error: {appversion}", "Error: Operation not supported"),
        ("instances", f"-12350 {appversion}", "-95 Operation not supported"),
    )


def elapsed_running(d: Diff, r: Compared) -> bool:
    """Not a difference: an ELAPSED timer still open (value.extra < 0) reads ``now`` into its
    value; ours is read after C's, and never by more than the time in between."""
    cb = r.c_info.get(d.name)
    if d.field != "values" or cb is None or (cb.type, cb.units) != ("64-bit int", "microsec"):
        return False
    if not isinstance(d.c, dict) or not isinstance(d.ours, dict) or set(d.c) != set(d.ours):
        return False
    window = r.window_us[d.command.split()[-1]]
    return all(0 <= int(d.ours[i]) - int(v) <= window for i, v in d.c.items())


def broken_namespace(d: Diff, r: Compared) -> bool:
    """C inserts both ``a.b`` and ``a.b.c``, which breaks every traversal of ``mmv`` ("Unknown
    metric name") and both names.  Ours: the first is served, the second refused with a log
    line, the rest of the tree is intact."""
    if r.c_tree.rc == 0 or "Unknown metric name" not in r.c_tree.stderr:
        return False
    unknown = d.c is None or d.c == "-12357 Unknown metric name"
    return d.field == "listed" or (d.field in ("presence", "pmid", "instances") and unknown)


def empty_component(d: Diff, r: Compared) -> bool:
    """C accepts metric names with empty components (``a..b``, ``trail.``), which pmns(5)
    does not allow (every component begins with a letter).  Ours refuses them (logged)."""
    refused = d.ours in (None, False, "-12357 Unknown metric name")
    return bool(re.search(r"\.\.|\.$", d.name)) and refused


def refused_names_count(d: Diff, r: Compared) -> bool:
    """``mmv.control.metrics`` (PCP 7) counts the metrics served: ours is lower by the
    names it refuses (broken-namespace, empty-component) that C counts."""
    if d.name != "mmv.control.metrics" or d.field != "values":
        return False
    if not isinstance(d.c, dict) or not isinstance(d.ours, dict):
        return False
    refused = any(
        broken_namespace(x, r) or empty_component(x, r) for x in r.diffs if x.name != d.name
    )
    return int(d.ours[None]) < int(d.c[None]) and refused


def process_namespaces(d: Diff, r: Compared) -> bool:
    """C serves an MMV_FLAG_PROCESS file while ``/proc/<header pid>`` exists in its own
    namespace (init at 1, in the corpus's "alive" cases, whose writers have all exited).
    Ours takes for the writer only a process of that innermost PID that has the file mapped,
    in any PID namespace, never host init (docs/containers.md): no such process,
    no file (``no-writer``), and ``mmv.control.files`` counts it out."""
    if not r.held_pid:
        return False
    if d.field in ("labels", "instance_labels") and d.c is not None and d.ours is not None:
        # another PID namespace's PID 1 (a container's, on a shared machine) taken for the
        # writer where the agent (pcp) cannot read its maps: labelled with its container
        return _container_labelled(d.c, d.ours)
    if d.name in ("mmv.control.files", "mmv.control.metrics") and d.field == "values":
        if not isinstance(d.c, dict) or not isinstance(d.ours, dict):
            return False
        return int(d.ours[None]) < int(d.c[None])
    return d.ours in (None, False, "-12357 Unknown metric name") and d.c not in (None, False)


def _container_labelled(c: object, ours: object) -> bool:
    """``ours`` is ``c`` with a ``container`` label added (label sets, or per instance)."""
    if isinstance(c, dict) and isinstance(ours, dict) and "container" in ours:
        return {k: v for k, v in ours.items() if k != "container"} == c
    if isinstance(c, dict) and isinstance(ours, dict) and c.keys() == ours.keys():
        return all(_container_labelled(c[k], ours[k]) for k in c)
    return False


def spilled(d: Diff, r: Compared) -> bool:
    """C drops a metric whose item is past 1023 or the item of an earlier metric of the
    file (and refuses a file of more than 1023 metrics); ours serves it under a spill
    cluster of its file (docs/spill.md), and counts it in ``mmv.control.metrics``."""
    counted = d.name == "mmv.control.metrics" and d.field == "values" and r.spilled
    if counted and isinstance(d.c, dict) and isinstance(d.ours, dict):
        return int(d.ours[None]) - int(d.c[None]) == len(r.spilled - set(r.c_pmids))
    unknown = d.c in (None, False, "-12357 Unknown metric name")
    return d.name in r.spilled and unknown and d.ours not in (None, False)


KINDS: dict[str, Callable[[Diff, Compared], bool]] = {
    "cluster-alias": cluster_alias,
    "indom-alias": indom_alias,
    "cluster0-labels": cluster0_labels,
    "instance-label-truncation": instance_label_truncation,
    "float-sentinel": float_sentinel,
    "nosupport-help": nosupport_help,
    "no-value-help": no_value_help,
    "indom-help": indom_help,
    "nosupport-fetch": nosupport_fetch,
    "elapsed-running": elapsed_running,
    "broken-namespace": broken_namespace,
    "empty-component": empty_component,
    "refused-names-count": refused_names_count,
    "process-namespaces": process_namespaces,
    "spilled": spilled,
}
"""Every allowed difference, by the id docs/differences.md gives it."""


def classify(d: Diff, r: Compared) -> str | None:
    return next((kind for kind, allowed in KINDS.items() if allowed(d, r)), None)


def unexplained(r: Compared) -> list[str]:
    return [str(d) for d in r.diffs if classify(d, r) is None]


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def diff_base(private_base: Path, pcp_required: None) -> Path:
    return make_dir(private_base / "differential")


@pytest.fixture(scope="module")
def corpus(diff_base: Path) -> Path:
    """The real-writer corpus (:mod:`tests.support.writers`), files only: the C agent's outputs are
    made here, in the same run as ours."""
    out = diff_base / "corpus"
    write_corpus(out, Params(large=LARGE_INSTANCES), references=False)
    return out


@pytest.fixture(scope="module")
def own_cases(diff_base: Path) -> Iterator[Path]:
    """The cases of :data:`OWN_CASES`, written by real writers in this process."""
    out = make_dir(diff_base / "own")
    writers = []
    for name, write in OWN_CASES.items():
        writers += write(make_dir(out / name / "mmv"))
    yield out
    for w in writers:
        if isinstance(w, mmvbuild.Written) and hasattr(w.handle, "stop"):
            w.handle.stop()


@pytest.fixture(scope="module")
def agents(diff_base: Path) -> Iterator[tuple[CAgent, OurAgent]]:
    ours = OurAgent(diff_base)
    ours.pmcd.start()
    yield CAgent(diff_base), ours
    ours.pmcd.stop()


@pytest.fixture(scope="module")
def compared(
    corpus: Path, own_cases: Path, agents: tuple[CAgent, OurAgent]
) -> Callable[[str], Compared]:
    """``compared(case)``: both agents' answers for a case (computed once per module)."""
    done: dict[str, Compared] = {}

    def get(case: str) -> Compared:
        if case not in done:
            path = own_cases / case if case in OWN_CASES else corpus / case
            assert (path / "mmv").is_dir(), f"{case}: not written"
            agents[1].serve(path / "mmv")
            done[case] = observe(*agents, path)
        return done[case]

    return get


# ---- the differential test -----------------------------------------------------------------


@pytest.mark.parametrize("case", [*CASES, *OWN_CASES])
def test_differential(case: str, compared: Callable[[str], Compared]) -> None:
    """Every difference between the C agent and ours is one of the documented KINDS."""
    r = compared(case)
    assert r.ours_tree.rc == 0, r.ours_tree.stderr
    assert "mmv.control.files" in r.ours_info and r.c_info, "nothing compared"
    assert not unexplained(r), "\n".join(unexplained(r))


def test_corpus_cases_are_all_compared(corpus: Path) -> None:
    """Every case of the corpus wrote files (test_differential compares them all)."""
    written = {p.name for p in corpus.iterdir() if (p / "mmv").is_dir() and any(p.iterdir())}
    assert written == set(CASES)


# ---- one test per documented difference ------------------------------------------------------


def values(info: dict[str, Block], name: str) -> dict[Any, str]:
    """{instance name or None: value text} of a metric as pminfo showed it."""
    block = info[name]
    return {inst[1] if inst else None: v for inst, v in (block.values or {}).items()}


def test_cluster_alias(compared: Callable[[str], Compared]) -> None:
    """Two files asking for cluster 7 (ddd, eee), and ccc asking for 0 next to aaa (2) and
    bbb (1): C gives eee ddd's PMIDs and values, and ccc aaa's; ours keeps every file apart."""
    r = compared("own-collide")
    c, ours = r.c_pmids, r.ours_pmids
    assert c["mmv.eee.m.count"] == c["mmv.ddd.m.count"] == "70.7.1"
    assert values(r.c_info, "mmv.eee.m.count") == values(r.c_info, "mmv.ddd.m.count")
    assert c["mmv.ccc.m.count"] == c["mmv.aaa.m.count"] == "70.2.1"
    assert len(set(ours.values())) == len(ours), "ours: every name has a PMID of its own"
    assert ours["mmv.ddd.m.count"] == "70.7.1" and ours["mmv.aaa.m.count"] == "70.2.1"
    for name, value in (("eee", "104"), ("ccc", "102")):
        assert r.ours_cluster(f"mmv.{name}.m.count") not in (1, 2, 7)
        assert values(r.ours_info, f"mmv.{name}.m.count") == {None: value}
        assert r.ours_info[f"mmv.{name}.m.count"].oneline == f"{name} count"
        assert (r.ours_info[f"mmv.{name}.m.count"].labels or {})["file"] == name


def test_indom_alias(compared: Callable[[str], Compared]) -> None:
    """p (cluster 1, serial 4097) and q (cluster 3, serial 1) pack to the same C indom, whose
    instances C merges; ours: q, the pair that packs without loss, keeps C's number, and p
    gets a number of its own, derived from its file name and serial under the agent's
    secret."""
    r = compared("own-indom-alias")
    assert r.c_info["mmv.p.v"].indom == r.c_info["mmv.q.v"].indom == "70.6145"
    assert "p0" in r.c_probe["mmv.q.v"], "C: q's instances merged into p's"
    assert r.ours_info["mmv.q.v"].indom == "70.6145"
    # p's number of its own: derived under the agent's secret, so only
    # known to be another
    assert r.ours_info["mmv.p.v"].indom.startswith("70.")
    assert r.ours_info["mmv.p.v"].indom not in ("70.6145", "70.4097")
    assert values(r.ours_info, "mmv.p.v") == {"p0": "1", "p1": "2"}
    assert values(r.ours_info, "mmv.q.v") == {"q0": "3", "q5": "4"}
    keyboard = compared("captured-KeyboardReader")  # cluster 2986: overflows, aliases nothing
    ours_indoms = {n: b.indom for n, b in keyboard.ours_info.items() if b.indom}
    c_indoms = {n: b.indom for n, b in keyboard.c_info.items() if b.indom and n in ours_indoms}
    assert ours_indoms == c_indoms and len(set(c_indoms.values())) > 2


def test_hashed_serials_get_the_c_agents_numbers(compared: Callable[[str], Compared]) -> None:
    """Speed and Parfait write 22-bit hashes as indom serials: C's number whenever it
    aliases nothing, so archives keep their numbers when users switch agents."""
    r = compared("own-hashed-serials")
    for metric, number in (("mmv.speedy.visits", 3784477), ("mmv.speedy.hits", 1244807)):
        assert r.c_info[metric].indom == r.ours_info[metric].indom == f"70.{number}"
    assert {classify(d, r) for d in r.diffs} == {"indom-help"}  # 6.0.3 serves none


def test_cluster0_labels(compared: Callable[[str], Compared]) -> None:
    """A writer asking for cluster 0: C never serves its cluster (registry) labels."""
    r = compared("own-labels")
    c, ours = r.c_info["mmv.lab0.c"].labels or {}, r.ours_info["mmv.lab0.c"].labels or {}
    assert "app" not in c and "tier" not in c and c["unit"] == "ops"
    assert ours["app"] == "lab0" and ours["tier"] == "2" and ours["unit"] == "ops"
    assert (r.ours_info["mmv.lab0.per"].labels or {})["kind"] == "pair"


def test_instance_label_truncation(compared: Callable[[str], Compared]) -> None:
    """Instance p has two payloads, one a map that PCP flattens into two labels: C reports
    two labels (the count of payloads) and drops where.row; ours reports all three."""
    r = compared("own-labels")
    ours = r.ours_info["mmv.lab0.per"].instance_labels[(0, "p")]
    c = r.c_info["mmv.lab0.per"].instance_labels[(0, "p")]
    assert {"first", "where.rack", "where.row"} <= set(ours)
    assert "where.row" not in c and {"first", "where.rack"} <= set(c)
    assert r.ours_info["mmv.lab0.per"].instance_labels[(1, "q")]["second"] is None
    corpus = compared("capi-v3-labels").c_info["mmv.labels.lab.multi"].instance_labels
    assert "ins_n" not in corpus[(1, "one")], "the corpus case shows the same loss"


def test_process_namespaces(compared: Callable[[str], Compared]) -> None:
    """Header PID 1 (init, alive) and no writer: C serves the file; ours never takes host
    init for its writer: not served, or (where another PID namespace's PID 1 runs on this
    machine, whose maps the agent as pcp cannot read) served labelled with its container."""
    r = compared("capi-process-live")
    assert r.held_pid
    assert [n for n in r.c_info if n.startswith("mmv.proclive.")]
    ours = [b for n, b in r.ours_info.items() if n.startswith("mmv.proclive.")]
    assert all(b.labels and "container" in b.labels for b in ours), ours
    assert {classify(d, r) for d in r.diffs} == {"process-namespaces"}


def test_float_sentinel(compared: Callable[[str], Compared]) -> None:
    """NaN in a SENTINEL file: no value from ours, and from C since 6.3.1 ("nan" before: the
    documented difference); in a plain file both serve the NaN."""
    r = compared("own-sentinel")
    for metric in ("f", "d"):
        assert values(r.c_info, f"mmv.sent.{metric}") in (
            {"nan": "nan", "num": "2.5"},
            {"num": "2.5"},
        )
        assert values(r.ours_info, f"mmv.sent.{metric}") == {"num": "2.5"}
        assert values(r.ours_info, f"mmv.plain.{metric}") == {"nan": "nan", "num": "2.5"}
        assert values(r.c_info, f"mmv.plain.{metric}") == {"nan": "nan", "num": "2.5"}


def test_nosupport_help(compared: Callable[[str], Compared]) -> None:
    r = compared("own-help")
    assert r.c_info["mmv.helps.nosup"].type == r.ours_info["mmv.helps.nosup"].type
    assert (r.c_info["mmv.helps.nosup"].oneline, r.c_info["mmv.helps.nosup"].help) == (
        BAD_PMID,
        BAD_PMID,
    )
    ours = r.ours_info["mmv.helps.nosup"]
    assert (ours.oneline, ours.help) == ("not supported here", "nosup long")


def test_no_value_help(compared: Callable[[str], Compared]) -> None:
    """A metric on an empty indom has no value entry: 6.0.3 finds no help for it."""
    r = compared("own-help")
    c, ours = r.c_info["mmv.helps.on.empty"], r.ours_info["mmv.helps.on.empty"]
    assert (ours.oneline, ours.help) == ("on nothing", "no instances at all")
    assert (c.oneline, c.help) in ((BAD_PMID, BAD_PMID), (ours.oneline, ours.help))  # 7.x: same
    assert c.values is None and ours.values is None


def indom_help_of(r: Compared, name: str) -> tuple[Any, Any]:
    """(C, ours) indom help of a metric's indom: (oneline, long) or None when equal."""
    key = f"{r.c_info[name].indom}/{r.ours_info[name].indom}"
    shown = next((d for d in r.diffs if d.field == "indom help" and d.name == key), None)
    return (shown.c, shown.ours) if shown else (None, None)


def test_indom_help(compared: Callable[[str], Compared]) -> None:
    """The file's indom texts; without a long text, libpcp shows the one-line text instead
    (its fallback for any missing long text)."""
    r = compared("own-help")
    c, ours = indom_help_of(r, "mmv.helps.on.one")
    assert c in C_INDOM_HELP_ERRORS and ours == ("indom one-line", "indom long text\nsecond line")
    c, ours = indom_help_of(r, "mmv.helps.on.two")
    assert c in C_INDOM_HELP_ERRORS and ours == ("only a one-line", "only a one-line")


def test_indom_without_help(compared: Callable[[str], Compared]) -> None:
    """Indom help text the file does not have is absent (PM_ERR_TEXT), as a metric's is;
    the C agent's answer is the same on 6.x (no difference shown) and PM_ERR_INDOM on 7.x."""
    r = compared("own-help")
    c, ours = indom_help_of(r, "mmv.helps.on.three")
    assert (c, ours) in ((None, None), ((BAD_INDOM, BAD_INDOM), (NO_TEXT, NO_TEXT)))


def test_nosupport_fetch(compared: Callable[[str], Compared]) -> None:
    """A python3-pcp 6.0.3 limitation: both sides fail the fetch, with different codes."""
    r = compared("own-help")
    appversion = "Metric not supported by this version of monitored application"
    assert r.c_info["mmv.helps.nosup"].fetch_error == f"Error: {appversion}"
    assert r.ours_info["mmv.helps.nosup"].fetch_error == "Error: Operation not supported"
    assert r.c_probe["mmv.helps.nosup"].startswith("-12350 ")
    assert r.ours_probe["mmv.helps.nosup"].startswith("-95 ")


def test_elapsed_running(compared: Callable[[str], Compared]) -> None:
    """An open ELAPSED interval reads the clock: ours (read second) is ahead by at most the
    time between the two reads."""
    r = compared("capi-elapsed-running")
    timers = [n for n, b in r.c_info.items() if b.units == "microsec" and n.startswith("mmv.")]
    moving = [d for d in r.diffs if d.field == "values"]
    assert moving and all(d.name in timers and classify(d, r) == "elapsed-running" for d in moving)


def test_broken_namespace(compared: Callable[[str], Compared]) -> None:
    """Metrics a.b and a.b.c in one file: C cannot list or find any of the tree's names
    that way; ours serves a.b (first wins), refuses a.b.c, and the rest is intact."""
    r = compared("capi-name-clash")
    assert r.c_tree.rc != 0 and "Unknown metric name" in r.c_tree.stderr
    assert "mmv.clash.a.b" not in r.c_info
    assert {"mmv.clash.a.b", "mmv.clash.ok", "mmv.control.files"} <= set(listed(r.ours_tree))
    assert "mmv.clash.a.b.c" not in listed(r.ours_tree)
    assert values(r.ours_info, "mmv.clash.a.b") == {None: "1"}
    assert values(r.ours_info, "mmv.clash.ok") == values(r.c_info, "mmv.clash.ok") == {None: "3"}


def test_empty_component(compared: Callable[[str], Compared]) -> None:
    r = compared("own-names")
    for name in ("mmv.names.a..b", "mmv.names.trail."):
        assert name in listed(r.c_tree) and name not in listed(r.ours_tree)
    for name in ("mmv.names.ok", "mmv.names.x.9lead"):
        assert values(r.ours_info, name) == values(r.c_info, name)


def test_refused_names_count(compared: Callable[[str], Compared]) -> None:
    """Where C has ``mmv.control.metrics`` (PCP 7), ours counts the 2 names it refuses less;
    elsewhere the strict drop-in has no such metric, as C."""
    r = compared("own-names")
    if "mmv.control.metrics" not in r.c_info:
        assert "mmv.control.metrics" not in r.ours_info
        return
    c, ours = values(r.c_info, "mmv.control.metrics"), values(r.ours_info, "mmv.control.metrics")
    assert int(c[None]) - int(ours[None]) == 2


def test_spilled(compared: Callable[[str], Compared]) -> None:
    """``capi-items``: C drops ``item.big`` (item 1024); ours serves it, with its value,
    under a spill cluster (not the file's); every other name is served alike."""
    r = compared("capi-items")
    name = "mmv.items.item.big"
    assert name not in r.c_pmids and r.spilled == {name}
    files = {r.c_cluster(n) for n in r.c_pmids if n.startswith("mmv.items.")}
    assert r.ours_cluster(name) not in files | {None, 0}
    assert values(r.ours_info, name) == {None: "12"}
    assert {d.name for d in r.diffs if classify(d, r) == "spilled"} <= {name, "mmv.control.metrics"}


# ---- regressions: bugs the comparison found, fixed ------------------------------------------


def test_negative_instance_ids(compared: Callable[[str], Compared]) -> None:
    r = compared("own-negative-instance")
    assert values(r.ours_info, "mmv.neg.v") == {"minus5": "-50", "three": "30"}
    assert r.ours_info["mmv.neg.v"].instance_labels[(-5, "minus5")]["sign"] == "negative"


def test_empty_help_text(compared: Callable[[str], Compared]) -> None:
    """pcp.mmv writes "" for absent help: C serves the empty text, pminfo shows ``[]``."""
    r = compared("pymmv-basic")
    block = r.ours_info["mmv.pymmv.py.multi"]
    assert (block.oneline, block.help) == ("", "<empty entry>")


def test_name_conflict_first_in_name_order(compared: Callable[[str], Compared]) -> None:
    r = compared("own-noprefix-order")
    assert values(r.ours_info, "mmv.app.x") == values(r.c_info, "mmv.app.x") == {None: "1"}


# ---- a live agent against a fresh C scan, while files change ---------------------------------


def test_differential_follows_changes(diff_base: Path, agents: tuple[CAgent, OurAgent]) -> None:
    """One running agent: instances added and removed by a rewrite (new generation), a file
    removed, a file added; after each change ours equals a fresh C scan."""
    case = make_dir(diff_base / "live")
    mmv_dir = make_dir(case / "mmv")
    c, ours = agents
    keep = [Registry(mmv_dir / "gone", 51).metric("g", 1, U32).start().set("g", None, 5)]
    live = Registry(mmv_dir / "live", 50).indom(1, [(1, "one"), (2, "two")], "live set")
    keep.append(live.metric("v", 1, U32, indom=1).start().set("v", "one", 1).set("v", "two", 2))
    ours.serve(mmv_dir)
    before = observe(c, ours, case)
    assert not unexplained(before), "\n".join(unexplained(before))
    assert values(before.ours_info, "mmv.live.v") == {"one": "1", "two": "2"}

    live = Registry(mmv_dir / "live", 50).indom(1, [(2, "two"), (3, "three")], "live set")
    keep.append(live.metric("v", 1, U32, indom=1).start().set("v", "two", 20).set("v", "three", 3))
    (mmv_dir / "gone").unlink()
    keep.append(Registry(mmv_dir / "late", 52).metric("l", 1, U32).start().set("l", None, 7))
    after = observe(c, ours, case)
    assert not unexplained(after), "\n".join(unexplained(after))
    assert values(after.ours_info, "mmv.live.v") == {"two": "20", "three": "3"}
    assert "mmv.gone.g" not in after.ours_info and values(after.ours_info, "mmv.late.l")


def indom_numbers(ours: OurAgent, *metrics: str) -> dict[str, str]:
    out = ours.run("pminfo", "-d", *metrics).stdout
    return {b.split("\n")[0]: b.split("InDom: ")[1].split()[0] for b in out.strip().split("\n\n")}


def test_indom_numbers_survive_restarts_and_other_files(
    diff_base: Path, agents: tuple[CAgent, OurAgent]
) -> None:
    """speedy's indoms keep C's numbers when its writer restarts with its indoms in the
    other order, when a file whose indom C would merge with one of them arrives (sorting
    first) and leaves, and when the agent restarts; with both files there, a restarted agent
    gives C's number to the lossless pair whatever order they were written in."""
    c, ours = agents
    case = make_dir(diff_base / "identity")
    mmv_dir = make_dir(case / "mmv")
    keep = [speedy(mmv_dir / "speedy")]
    ours.serve(mmv_dir)
    metrics = ("mmv.speedy.visits", "mmv.speedy.hits")
    first = indom_numbers(ours, *metrics)
    assert first == {"mmv.speedy.visits": "70.3784477", "mmv.speedy.hits": "70.1244807"}
    assert not unexplained(observe(c, ours, case))

    keep.append(speedy(mmv_dir / "speedy", reverse=True))  # the writer restarts
    assert indom_numbers(ours, *metrics) == first
    # (1847 << 11) | 1821 = 3784477: C makes aaa's indom and speedy.visits' one indom
    aaa = Registry(mmv_dir / "aaa", 1847).indom(1821, [(5, "intruder")])
    keep.append(aaa.metric("m", 1, U32, indom=1821).start().set("m", "intruder", 9))
    both = observe(c, ours, case)
    assert not unexplained(both), "\n".join(unexplained(both))
    assert both.c_info["mmv.aaa.m"].indom == both.c_info["mmv.speedy.visits"].indom
    assert indom_numbers(ours, *metrics) == first
    assert indom_numbers(ours, "mmv.aaa.m")["mmv.aaa.m"] not in {"70.3784477", *first.values()}
    assert both.ours_probe["mmv.speedy.visits"] == '2 "home" "about"'
    (mmv_dir / "aaa").unlink()
    assert indom_numbers(ours, *metrics) == first
    ours.serve(mmv_dir)  # the agent restarts
    assert indom_numbers(ours, *metrics) == first

    numbered = []
    for order in ((speedy, "aaa"), ("aaa", speedy)):
        for path in mmv_dir.iterdir():
            path.unlink()
        for writer in order:
            if writer == "aaa":
                aaa = Registry(mmv_dir / "aaa", 1847).indom(1821, [(5, "intruder")])
                keep.append(aaa.metric("m", 1, U32, indom=1821).start())
            else:
                keep.append(speedy(mmv_dir / "speedy"))
        ours.serve(mmv_dir)
        numbered.append(indom_numbers(ours, "mmv.aaa.m", *metrics))
    # restarted with both there: aaa's pair packs without loss and wins C's number, in
    # either order; speedy.visits gets a number of its own (derived under the secret of a
    # fresh agent, with --registry none one per process)
    for numbers in numbered:
        assert numbers["mmv.aaa.m"] == "70.3784477"
        assert numbers["mmv.speedy.hits"] == first["mmv.speedy.hits"]
        assert numbers["mmv.speedy.visits"] not in ("70.3784477", first["mmv.speedy.hits"])


def test_help_with_blank_lines_is_one_block() -> None:
    """PCP 7.x's C agent: ``mmv.control.debug`` help has a blank line inside (``pminfo -T``
    output of 7.2.2); once parsed as a new, nameless block."""
    text = (
        "mmv.control.debug [Debug options]\n"
        "    Data Type: string  InDom: PM_INDOM_NULL 0xffffffff\n"
        "Help:\n"
        "See pmdbg(1).  pmstore into this metric to change the debug option(s)\n"
        "\n"
        "Note that if this PMDA is installed as a DSO agent, the debug options\n"
        "are shared with pmcd(1)\n"
        '    value ""\n'
        "\n"
        "mmv.control.files [Memory mapped file count]\n"
        "    value 0\n"
    )
    blocks = parse_info(text)
    assert list(blocks) == ["mmv.control.debug", "mmv.control.files"]
    assert (blocks["mmv.control.debug"].help or "").split("\n")[1:3] == [
        "",
        "Note that if this PMDA is installed as a DSO agent, the debug options",
    ]
    assert blocks["mmv.control.debug"].values == {None: '""'}
