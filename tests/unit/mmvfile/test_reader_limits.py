"""Per-file entry limits of the reader (a single file too expensive to load within a
request's budget is refused with a reason, not retried):
:data:`pmda_mmv.mmvfile.limits.MAX_ENTRIES`, checked from the TOC counts before any section
is read, and the value slots (metrics x instances of their indoms).  Files from libpcp_mmv
where it can write them, from the test byte builder where it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.errors import Refused
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support import hostile
from tests.support.mmvbuild import Indom, Instance, Metric, MmvBuilder

INSTANCES = limits.MAX_ENTRIES[layout.TOC_INSTANCES]
SLOTS = limits.MAX_ENTRIES[layout.TOC_VALUES]


def _refused(path: Path) -> Refused:
    with pytest.raises(Refused) as info:
        MmvFile.open(str(path))
    return info.value


def test_instances_up_to_the_limit_are_served(tmp_path: Path) -> None:
    (path,) = hostile.big_files(tmp_path, 1, 1, INSTANCES)  # libpcp_mmv
    mf = MmvFile.open(str(path))
    try:
        assert sum(len(d.instances) for d in mf.indoms.values()) == INSTANCES
        assert not mf.problems
    finally:
        mf.close()


def test_one_instance_past_the_limit_refuses_the_file(tmp_path: Path) -> None:
    (path,) = hostile.big_files(tmp_path, 1, 1, INSTANCES + 1)
    err = _refused(path)
    assert err.field.startswith("toc[") and err.field.endswith("].count")
    assert err.limit == INSTANCES
    assert f"{INSTANCES + 1} entries, more than {INSTANCES}" in err.message
    assert err.offset > 0  # the TOC entry's count field


def test_value_slots_past_the_limit_refuse_the_file(tmp_path: Path) -> None:
    """Metrics x instances: 21 metrics over 50,000 instances want 1,050,000 slots, though
    the file has no value entries at all (libpcp_mmv would write one per slot)."""
    b = MmvBuilder(cluster=7)
    b.indoms.append(Indom(1, [Instance(i, f"i{i}") for i in range(INSTANCES)]))
    b.metrics += [Metric(f"m{j}", j + 1, indom=1) for j in range(SLOTS // INSTANCES + 1)]
    path = tmp_path / "slots"
    b.write(path)
    err = _refused(path)
    assert err.field == "metric.indom"
    assert err.limit == SLOTS and "value slots" in err.message


def test_value_slots_up_to_the_limit_are_served(tmp_path: Path) -> None:
    metrics = SLOTS // INSTANCES
    (path,) = hostile.big_files(tmp_path, 1, metrics, INSTANCES)
    mf = MmvFile.open(str(path))
    try:
        assert len(mf.metrics) == metrics and not mf.problems
    finally:
        mf.close()


def test_indoms_past_the_limit_refuse_the_file(tmp_path: Path) -> None:
    limit = limits.MAX_ENTRIES[layout.TOC_INDOMS]
    for count, refused in ((limit, False), (limit + 1, True)):
        b = MmvBuilder(cluster=7)
        b.indoms += [Indom(s) for s in range(1, count + 1)]
        b.metrics.append(Metric("m", 1, indom=1))
        path = tmp_path / f"indoms{count}"
        b.write(path)
        if refused:
            assert _refused(path).limit == limit
        else:
            MmvFile.open(str(path)).close()


def test_labels_past_the_limit_refuse_the_file(tmp_path: Path) -> None:
    limit = limits.MAX_ENTRIES[layout.TOC_LABELS]
    (path,) = hostile.label_flood(tmp_path, limit + 1)
    err = _refused(path)
    assert err.limit == limit and "labels sections hold" in err.message
