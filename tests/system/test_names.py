"""Names and numbers under pmcd (pmda_mmv.namespace: catalogue, indomnumbers): a NOPREFIX file
cannot shadow another file's names or the control metrics, one catalogue refusal is one log
line, files asking for the same cluster get distinct PMIDs, indom serials that alias in the C
agent are distinct indoms here, and a stranger cannot borrow a cluster or its indoms."""

from __future__ import annotations

import os
import re

import pytest

from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import Indom, Instance, Metric, MmvBuilder, Value
from tests.support.mmvbuild import single as one
from tests.support.served import (
    GOOD,
    Agent,
    Scratch,
)

pytestmark = pytest.mark.pmcd


def noprefix(cluster: int, *names: str, value: int = 999) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, flags=layout.FLAG_NOPREFIX)
    for item, name in enumerate(names, 1):
        b.metrics.append(Metric(name, item))
        b.values.append(Value(name, None, value))
    return b


def pmid(agent: Agent, metric: str) -> str:
    out = agent.pmcd.run("pminfo", "-m", metric).stdout.split()
    assert len(out) == 3 and out[1] == "PMID:", out
    return out[2]


SHADOWS = {
    "shadow_leaf": ("good.py.counter", "mmv.good.py.counter is already served"),
    "shadow_nonleaf": ("good", "mmv.good is a non-leaf of names already served"),
    "shadow_below_leaf": ("good.py.counter.sub", "mmv.good.py.counter is already a leaf"),
    "shadow_control": ("control.reload", "mmv.control.reload is reserved for the agent"),
    "shadow_control_new": ("control.new", "mmv.control.new is reserved for the agent"),
}


@pytest.mark.parametrize("name", sorted(SHADOWS))
def test_noprefix_cannot_shadow(agent: Agent, scratch: Scratch, name: str) -> None:
    target, reason = SHADOWS[name]
    before = pmid(agent, GOOD), pmid(agent, "mmv.control.reload")
    b = noprefix(25, target)
    path = scratch.put(name, b)
    agent.assert_alive()
    where = f"metrics at offset {b.build().at('metrics', 0)}: {reason}"
    assert all(where in line for line in agent.log_lines(path))
    # none of it served: refused, the lost name the reason
    assert agent.status(name) == ("refused", f"{path}: {where}, metric not served")
    assert (pmid(agent, GOOD), pmid(agent, "mmv.control.reload")) == before
    assert agent.probe("mmv.control.reload")["mmv.control.reload"] == "1 0"
    assert agent.pmcd.fetch("mmv.control.file.metrics")[name] == "0"


@pytest.mark.parametrize("name", ["dup_shadow", "bad-name"])
def test_catalogue_refusal_is_one_log_line(agent: Agent, scratch: Scratch, name: str) -> None:
    b = noprefix(25, "good.py.counter") if name == "dup_shadow" else one(cluster=25)
    path = scratch.put(name, b)
    agent.assert_alive()
    agent.assert_explained(path, "refused", "already served" if name == "dup_shadow" else "'-'")


def test_noprefix_file_serves_its_own_names(agent: Agent, scratch: Scratch) -> None:
    scratch.put("np", noprefix(26, "np_own.a", value=12))
    agent.assert_alive()
    assert agent.probe("mmv.np_own.a")["mmv.np_own.a"] == "1 12"


def test_same_cluster_twice_distinct_pmids(agent: Agent, scratch: Scratch) -> None:
    # (a cluster no other file of this module's agent held: docs/identity.md)
    scratch.put("twin_a", one(cluster=1503, value=1))
    scratch.put("twin_b", one(cluster=1503, value=2))
    got = agent.probe("mmv.twin_a.v", "mmv.twin_b.v")
    assert got == {"mmv.twin_a.v": "1 1", "mmv.twin_b.v": "1 2"}
    assert pmid(agent, "mmv.twin_a.v") == "70.1503.1"  # first in name order keeps it
    assert pmid(agent, "mmv.twin_b.v") != "70.1503.1"
    # a warning, not a problem: one log line, the file is served in full
    lines = agent.log_lines(agent.dir / "twin_b", identity=True)
    assert (
        len(lines) == 1
        and "header.cluster at offset 36: asked for cluster 1503, served to twin_a" in lines[0]
    )
    log = agent.pmcd.agent_log()
    assert re.search(r"\) Info: .*/twin_b: header.cluster .*: asked for cluster 1503", log)
    cluster = lines[0].rsplit(" ", 1)[1]
    assert pmid(agent, "mmv.twin_b.v") == f"70.{cluster}.1"
    assert agent.pmcd.fetch("mmv.control.file.cluster")["twin_b"] == cluster
    assert agent.status("twin_b") == ("ok", "")


def test_many_files_with_cluster_zero(agent: Agent, scratch: Scratch) -> None:
    names = [f"zero{n:02d}" for n in range(24)]
    for n, name in enumerate(names):
        scratch.put(name, one(cluster=0, value=n))
    metrics = [f"mmv.{name}.v" for name in names]
    got = agent.probe(*metrics)
    assert [got[m] for m in metrics] == [f"1 {n}" for n in range(len(names))]
    pmids = {pmid(agent, m) for m in metrics}
    assert len(pmids) == len(names) and "70.42.1" not in pmids  # 42 is the good file's
    agent.assert_alive()


def with_indom(cluster: int, serial: int, prefix: str, count: int) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, version=2)
    b.indoms.append(Indom(serial, [Instance(i, f"{prefix}{i}") for i in range(count)]))
    b.metrics.append(Metric("m", 1, indom=serial))
    b.values += [Value("m", i, 100 * cluster + i) for i in range(count)]
    return b


def test_serials_that_alias_in_the_c_agent_are_distinct_indoms(
    agent: Agent, scratch: Scratch
) -> None:
    # the C agent packs (cluster << 11) | serial: (1500, 2049) and (1501, 1) are both
    # 3074049 (clusters no other file of this module's agent held: a departed file keeps
    # its numbers, docs/identity.md)
    scratch.put("alias_a", with_indom(1500, 2049, "a", 2))
    scratch.put("alias_b", with_indom(1501, 1, "b", 3))
    desc = {m: agent.pmcd.run("pminfo", "-d", m).stdout for m in ("mmv.alias_a.m", "mmv.alias_b.m")}
    indoms = {m: out.split("InDom: ")[1].split()[0] for m, out in desc.items()}
    assert indoms["mmv.alias_a.m"] != indoms["mmv.alias_b.m"], desc
    assert indoms["mmv.alias_b.m"] == f"70.{(1501 << 11) | 1}"
    names = agent.pmcd.run("pmprobe", "-I", "mmv.alias_a.m", "mmv.alias_b.m").stdout
    assert names.split("\n")[:2] == [
        'mmv.alias_a.m 2 "a0" "a1"',
        'mmv.alias_b.m 3 "b0" "b1" "b2"',
    ]
    got = agent.probe("mmv.alias_a.m", "mmv.alias_b.m")
    assert got == {"mmv.alias_a.m": "2 150000 150001", "mmv.alias_b.m": "3 150100 150101 150102"}


def per_instance(cluster: int, serial: int, metric: str, item: int, *insts: str) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, version=2)
    b.indoms.append(Indom(serial, [Instance(k, n) for k, n in enumerate(insts)]))
    b.metrics.append(Metric(metric, item, indom=serial))
    b.values += [Value(metric, k, 10 + k) for k in range(len(insts))]
    return b


def instances(agent: Agent, metric: str) -> str:
    return agent.pmcd.run("pmprobe", "-I", metric).stdout.strip()


def test_a_stranger_asking_for_a_cluster_and_indom_cannot_borrow_them(
    agent: Agent, scratch: Scratch
) -> None:
    # the victim's cluster and indom serial, a metric of its own at another item: it agrees
    # with the victim, so it could share, but another user wrote it
    # (a cluster no other file of this module's agent held: docs/identity.md)
    scratch.put("vic", per_instance(1502, 5, "per", 1, "mine"))
    assert instances(agent, "mmv.vic.per") == 'mmv.vic.per 1 "mine"'
    path = scratch.put("att", per_instance(1502, 5, "x", 2, "theirs", "also_theirs"))
    os.chown(path, 65534, 65534)
    assert instances(agent, "mmv.vic.per") == 'mmv.vic.per 1 "mine"'
    assert instances(agent, "mmv.att.x") == 'mmv.att.x 2 "theirs" "also_theirs"'
    assert pmid(agent, "mmv.vic.per") == "70.1502.1"
    assert pmid(agent, "mmv.att.x") != "70.1502.2"
    agent.assert_alive()


def test_a_file_of_many_overflowing_indoms_drains_nothing(agent: Agent, scratch: Scratch) -> None:
    # 2,047 empty indoms of serial >= 2048 used to take every PCP serial the agent had for
    # such indoms; another user's metric then lost its indom, and stayed without it
    drain = MmvBuilder(cluster=35, version=2)
    drain.indoms += [Indom(2048 + k) for k in range(2047)]
    scratch.put("drain", drain)
    agent.assert_alive()
    assert len(drain.build().data) < 70_000
    scratch.put("needs", per_instance(36, 5000, "m", 1, "a", "b"))
    assert agent.probe("mmv.needs.m")["mmv.needs.m"] == "2 10 11"
    assert agent.status("needs") == ("ok", "")
    agent.assert_alive()
