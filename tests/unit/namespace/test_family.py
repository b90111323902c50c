"""Family rules without pmcd (pmda_mmv/namespace/family.py, pmda_mmv/agent/aggregate.py):
agreement and its reasons, one owner, departed counts (from the departing file, kept in the
registry), numbers that never move, modes; the family served as tests/support/family.py
serves it, from files of the test-only byte builder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.pcpdefs import PM_IN_NULL
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.familyspec import FamilySpec, parse_family
from pmda_mmv.namespace.registry import Registry
from tests.support.family import COUNT, World, member
from tests.support.mmvbuild import Metric, Value

STRANGER = 65534


def test_counters_sum_live_members_plus_departed_ones_read_from_their_last_values(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((10, 20), busy=1))
    w.add("websrv_b", member((1, 2), busy=2))
    assert w.fetch("requests") == {0: 11, 1: 22}
    assert w.fetch("busy") == {PM_IN_NULL: 3}
    member((12, 24), busy=1).write(tmp_path / "websrv_a")  # counted on after the last fetch
    member((15, 30), busy=1).write(tmp_path / "websrv_a.new")  # then restarted: unlinked,
    os.rename(tmp_path / "websrv_a.new", tmp_path / "websrv_a")  # its old inode has 12, 24
    b_file = tmp_path / "websrv_b"
    member((7, 9), busy=2).write(b_file)  # rewritten in place (same inode): its last values
    w.remove("websrv_a")
    w.remove("websrv_b")
    w.add("websrv_a", member((0, 0), busy=5, generation=0x5F5E1000000002))
    assert w.fetch("requests") == {0: 12 + 7, 1: 24 + 9}  # what they had counted
    assert w.fetch("busy") == {PM_IN_NULL: 5}  # live members only
    # a reload of the same file (name and generation) is not counted twice
    w.remove("websrv_a")
    w.add("websrv_a", member((0, 0), busy=5, generation=0x5F5E1000000002))
    assert w.fetch("requests") == {0: 19, 1: 33}


def test_departed_counts_and_numbers_survive_an_agent_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "identity.json")
    registry = Registry(path)
    w = World(tmp_path, "websrv=websrv_*", registry)
    w.add("websrv_a", member((4, 8)))
    pmid = w.cat.leaf_pmid["mmv.websrv.requests"]
    indom = w.families.families[0].indoms[1].serial
    w.remove("websrv_a")
    assert w.fetch("requests") == {0: 4, 1: 8}  # no member: served while it counted
    assert registry.save()
    again = Registry(path)
    again.load()
    w2 = World(tmp_path, "websrv=websrv_*", again)
    w2.add("websrv_b", member((1, 1), generation=0x5F5E1000000003))
    assert w2.cat.leaf_pmid["mmv.websrv.requests"] == pmid
    assert w2.families.families[0].indoms[1].serial == indom
    assert w2.fetch("requests") == {0: 5, 1: 9}


def test_a_member_that_disagrees_or_a_strangers_file_is_left_out_with_the_reason(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((1, 1)))
    w.add("websrv_t", member(busy_type=layout.TYPE_U64))
    w.add("websrv_u", member(units=0))
    w.add("websrv_i", member(post="put"))
    w.add("websrv_s", member((100, 100)), uid=STRANGER)
    status = {n: w.families.status(n) for n in ("websrv_a", "websrv_t", "websrv_u", "websrv_i")}
    assert status == {
        "websrv_a": ("websrv", ""),
        "websrv_t": ("websrv", "metric busy: type u64, the family's is u32 (as websrv_a)"),
        "websrv_u": ("websrv", "metric requests: units '', the family's is 'count' (as websrv_a)"),
        "websrv_i": (
            "websrv",
            "metric requests: instances [0 'get', 1 'put'], the family's is "
            "[0 'get', 1 'post'] (as websrv_a)",
        ),
    }
    assert w.families.status("websrv_s") == (
        "websrv",
        f"owned by uid {STRANGER}: the family takes only uid 0's files",
    )
    assert w.fetch("requests") == {0: 1, 1: 1}  # none of them adds or subtracts
    w.remove("websrv_s")  # a stranger leaving credits nothing either
    assert w.fetch("requests") == {0: 1, 1: 1}
    assert any("not in family websrv: owned by uid 65534" in line for line in w.log)


@pytest.mark.parametrize(("mode", "value"), [("sum", 6), ("min", 1), ("max", 3), ("mostrecent", 2)])
def test_instant_metrics_follow_the_mode(tmp_path: Path, mode: str, value: int) -> None:
    w = World(tmp_path, f"websrv=websrv_*:mode.busy={mode}")
    w.add("websrv_a", member(busy=1, generation=0x5F5E1000000001))
    w.add("websrv_b", member(busy=2, generation=0x5F5E1000000009))  # started last
    w.add("websrv_c", member(busy=3, generation=0x5F5E1000000005))
    assert w.fetch("busy") == {PM_IN_NULL: value}


def test_family_options() -> None:
    assert parse_family("web=web_*:owner=0:mode=max:mode.busy=min") == FamilySpec(
        "web", "web_*", 0, "max", (("busy", "min"),)
    )
    bad_owners = ("web=x:owner=4294967295", "web=x:owner=99999999999999999999")
    for bad in ("web", "=x", "web=", "a.b=x", "web=x:mode=avg", "web=x:colour=red",
                "web=x:mode.=max", *bad_owners):  # fmt: skip
        with pytest.raises(ValueError, match="--family"):
            parse_family(bad)


def test_no_file_shares_the_familys_cluster(tmp_path: Path) -> None:
    """A NOPREFIX file asking for the family's cluster, with the family's very metric
    (mmv.websrv.requests, same item and descriptor) would otherwise join it (PCP QA 648)."""
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((1, 1)))
    cluster = w.families.families[0].cluster
    b = member((50, 50))
    b.flags, b.cluster = layout.FLAG_NOPREFIX, cluster
    b.metrics = [Metric("websrv.requests", 1, layout.TYPE_U64, layout.SEM_COUNTER, COUNT, indom=1)]
    b.values = [Value("websrv.requests", 0, 50), Value("websrv.requests", 1, 50)]
    w.add("intruder", b)
    assert w.cat.files["intruder"].cluster != cluster
    assert w.fetch("requests") == {0: 1, 1: 1}


def test_install_carries_the_family_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pmda-mmv install`` checks --family as the agent reads it (before anything is
    looked at), and --refresh takes it back from the pmcd.conf line (whitespace-separated
    words, the glob unexpanded).  Never a real install: the system pmcd is not the test's."""
    from pmda_mmv.agent.options import parse_args
    from pmda_mmv.commands import install

    monkeypatch.setattr(os, "geteuid", lambda: 65534)  # should it get that far: refused
    monkeypatch.setattr(install, "install", lambda options: pytest.fail("installed"))
    assert install.main("install", ["--family", "web"]) == 2
    assert "--family 'web': not NAME=GLOB" in capsys.readouterr().err
    assert install.main("install", ["--family", "control=worker_*"]) == 2
    assert "'control' is reserved for the agent" in capsys.readouterr().err
    assert install.main("install", ["--family", "web=web_*:mode.=max"]) == 2
    assert "'mode.=max' names no metric" in capsys.readouterr().err
    launcher = Path("/var/lib/pcp/pmdas/mmv/pmdammv")
    line = f"mmv 70 pipe binary notready {launcher} -d 70 --notready --family websrv=websrv_w*"
    options = install.installed_options(line, launcher)
    assert options == ["--family", "websrv=websrv_w*"]
    assert parse_args(options).families == (FamilySpec("websrv", "websrv_w*"),)


def test_owner_root_given_is_kept_when_a_strangers_file_comes_first(tmp_path: Path) -> None:
    """``:owner=root`` (uid 0, falsy) was dropped: the first matching file's owner won, so
    a stranger's file took the family and root's own members were left out."""
    w = World(tmp_path, "websrv=websrv_*:owner=root")
    w.add("websrv_x", member((100, 100)), uid=STRANGER)
    w.add("websrv_a", member((1, 1)), uid=0)
    fam = w.families.families[0]
    assert fam.owner == 0
    assert fam.left_out == {"websrv_x": "owned by uid 65534: the family takes only uid 0's files"}
    assert w.fetch("requests") == {0: 1, 1: 1}


def test_a_file_named_as_the_family_does_not_take_its_names(tmp_path: Path) -> None:
    """A stranger's file named ``websrv`` (or a NOPREFIX ``websrv.*`` metric) served first
    took ``mmv.websrv.requests``: the family's own metric was not served and the stranger's
    values were read under the family's name.  The family's subtree is reserved."""
    w = World(tmp_path, "websrv=websrv_*:owner=0")
    w.add("websrv", member((500, 500)), uid=STRANGER)
    w.add("websrv_a", member((1, 1)), uid=0)
    assert w.families.families[0].problems == []
    assert w.fetch("requests") == {0: 1, 1: 1}
    assert not any(sm.file == "websrv" for sm in w.cat.files["websrv"].metrics)
    assert any("mmv.websrv.requests is reserved for family websrv" in line for line in w.log)


def test_a_family_may_not_be_named_control() -> None:
    with pytest.raises(ValueError, match="reserved for the agent"):
        parse_family("control=worker_*")


def test_a_string_counter_is_the_most_recent_members_not_an_error(tmp_path: Path) -> None:
    """A STRING metric with counter semantics (libpcp_mmv takes it) was summed: every
    fetch of it failed (TypeError: int + str, logged) instead of the newest member's."""
    w = World(tmp_path, "websrv=websrv_*")
    for name, version, generation in (("websrv_a", "1.0", 1), ("websrv_b", "2.0", 9)):
        b = member(generation=0x5F5E1000000000 + generation)
        b.metrics.append(Metric("version", 3, layout.TYPE_STRING, layout.SEM_COUNTER, 0))
        b.values.append(Value("version", None, version))
        w.add(name, b)
    assert w.fetch("version") == {PM_IN_NULL: "2.0"}
    w.remove("websrv_b")  # departs: nothing of a string is credited
    assert w.fetch("version") == {PM_IN_NULL: "1.0"}
    assert not [line for line in w.log if "Error" in line], w.log


def test_a_file_left_out_for_disagreeing_joins_when_the_members_it_disagreed_with_left(
    tmp_path: Path,
) -> None:
    """A rolling upgrade (busy u32 -> u64): the new worker's file was left out while the
    old one served, and stayed left out after the old one left: the family was not served
    at all, while ``check`` (judging the files as they are) called the new file a member."""
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_old", member((5, 5), busy=1))
    new = member((7, 7), busy=2, busy_type=layout.TYPE_U64, generation=0x5F5E1000000009)
    w.add("websrv_new", new)
    fam = w.families.families[0]
    assert list(fam.left_out) == ["websrv_new"]
    w.remove("websrv_old")
    assert list(fam.members) == ["websrv_new"] and fam.left_out == {}
    assert w.fetch("requests") == {0: 5 + 7, 1: 5 + 7}  # the departed one's counts kept
    assert w.fetch("busy") == {PM_IN_NULL: 2}


def test_a_file_left_out_of_a_family_is_logged_escaped(tmp_path: Path) -> None:
    """A NOPREFIX file (served whatever its name) whose name matches the family's glob and
    holds a terminal escape, left out for disagreeing: the log line naming it is escaped,
    as every line about a file (the agent logs the family's lines as they come)."""
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((1, 1)))
    name = "websrv_\x1b[2J"
    b = member(busy_type=layout.TYPE_U64)
    b.flags = layout.FLAG_NOPREFIX
    w.add(name, b)
    status = w.families.status(name)
    assert status is not None and status[1].startswith("metric busy: type u64")
    [line] = [x for x in w.log if "not in family" in x]
    assert "\x1b" not in line
    assert f"{tmp_path}/websrv_\\x1b[2J: not in family websrv: metric busy" in line


def test_a_departed_members_value_that_is_not_finite_is_not_credited(tmp_path: Path) -> None:
    """A double counter at +inf: saved as ``Infinity`` (not JSON), it kept the family's
    total at inf for ever, also across restarts."""
    path = str(tmp_path / "identity.json")
    registry = Registry(path)
    w = World(tmp_path, "websrv=websrv_*", registry)
    b = member((4, 8))
    b.metrics.append(Metric("seconds", 3, layout.TYPE_DOUBLE, layout.SEM_COUNTER, COUNT))
    b.values.append(Value("seconds", None, float("inf")))
    w.add("websrv_a", b)
    w.remove("websrv_a")
    assert w.fetch("requests") == {0: 4, 1: 8}
    assert "seconds" not in w.families.families[0].totals
    assert [line for line in w.log if "seconds: a value that is not finite" in line], w.log
    assert registry.save()
    json.loads(Path(path).read_text(), parse_constant=lambda c: pytest.fail(c))


def test_a_summed_u64_counter_past_its_range_wraps_as_a_counter(tmp_path: Path) -> None:
    """Two members near 2^63: the sum is served modulo 2^64, a counter wrap that PCP's rate
    conversion counts as one (docs/families.md)."""
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((1 << 63, 1)))
    w.add("websrv_b", member(((1 << 63) + 10, 2), generation=0x5F5E1000000002))
    assert w.fetch("requests") == {0: 10, 1: 3}


def test_a_member_credited_as_it_departed_is_counted_once_also_across_a_restart(
    tmp_path: Path,
) -> None:
    """The departures thread credits a member from its last values before the agent's
    thread unserves it: the live value is no longer added, its leave adds nothing, and a
    restarted agent's look at the file left behind credits nothing again."""
    path = str(tmp_path / "identity.json")
    registry = Registry(path)
    w = World(tmp_path, "websrv=websrv_*", registry)
    w.add("websrv_a", member((4, 8)))
    w.add("websrv_b", member((1, 1), generation=0x5F5E1000000002))
    held = MmvFile.open(str(tmp_path / "websrv_a"))
    with w.families.lock:
        assert w.families.credit_departed(held, held.last_snapshot())
        assert not w.families.credit_departed(held, held.last_snapshot())  # once
    assert w.fetch("requests") == {0: 5, 1: 9}  # not 4 more for the live one
    w.remove("websrv_a")
    assert w.fetch("requests") == {0: 5, 1: 9}
    assert registry.save()
    again = Registry(path)
    again.load()
    w2 = World(tmp_path, "websrv=websrv_*", again)
    assert not w2.families.credit_departed(held, held.last_snapshot())
    w2.add("websrv_c", member((2, 2), generation=0x5F5E1000000003))
    assert w2.fetch("requests") == {0: 6, 1: 10}
    held.close()


def test_departed_doubles_whose_sum_is_not_finite_keep_the_total_and_the_registry(
    tmp_path: Path,
) -> None:
    """Two members' finite DOUBLE counters of 1.5e308 depart: their sum was inf, the
    registry's JSON encoder raised half way through the credit, and from then on every
    request's refresh failed until the agent restarted."""
    path = str(tmp_path / "identity.json")
    registry = Registry(path)
    w = World(tmp_path, "websrv=websrv_*", registry)
    for k, name in enumerate(("websrv_a", "websrv_b")):
        b = member((1, 2), generation=0x5F5E1000000001 + k)
        b.metrics.append(Metric("seconds", 3, layout.TYPE_DOUBLE, layout.SEM_COUNTER, COUNT))
        b.values.append(Value("seconds", None, 1.5e308))
        w.add(name, b)
    w.remove("websrv_a")
    w.remove("websrv_b")
    assert w.fetch("requests") == {0: 2, 1: 4}
    assert w.families.families[0].totals["seconds"] == {PM_IN_NULL: 1.5e308}
    assert [line for line in w.log if "past the largest double, not credited" in line], w.log
    assert registry.save()
    json.loads(Path(path).read_text(), parse_constant=lambda c: pytest.fail(c))
    again = Registry(path)
    again.load()
    assert not again.problem, again.problem
