"""``pmda-mmv debug`` with ``--family``: each member file says ``family NAME: member`` or why
it is left out, as ``check`` does, and ``--once`` lists the family's metrics (the man page's
promise; it printed neither)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check, debug
from pmda_mmv.namespace.familyspec import parse_family
from tests.support.family import member
from tests.support.mmvbuild import sample

SPEC = "websrv=websrv_*"


def test_debug_says_family_membership_and_lists_the_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    member((1, 2)).write(tmp_path / "websrv_w0")
    member((3, 4)).write(tmp_path / "websrv_w1")
    member(units=0).write(tmp_path / "websrv_x")  # requests without units: disagrees
    argv = ["--dir", str(tmp_path), "--once", "--registry", "none", "--family", SPEC]
    assert debug.main(argv) == 0
    out = capsys.readouterr().out
    said = {
        line.split(": family websrv: ")[0].split()[-1]: line.split(": family websrv: ")[1]
        for line in out.splitlines()
        if " family " in line and ": family websrv: " in line
    }
    odd = str(tmp_path / "websrv_x")
    assert said[str(tmp_path / "websrv_w0")] == "member"
    assert said[str(tmp_path / "websrv_w1")] == "member"
    assert said[odd].startswith("left out: "), said
    # one judgement: check says the same of each
    options = ServingOptions(families=(parse_family(SPEC),), registry="none")
    verdicts = {r["file"]: r["family"] for r in check.judge([str(tmp_path)], options)}
    assert verdicts[odd] is not None and not verdicts[odd]["member"]
    assert said[odd] == f"left out: {verdicts[odd]['why']}"
    assert "# family websrv: cluster " in out and "members websrv_w0, websrv_w1" in out
    assert "mmv.websrv.requests  PMID 70." in out and "Aggregated: sum over the members" in out


def test_debug_shows_the_labels_of_every_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's finding: ``debug --once`` promises the file's labels (README, man page)
    but printed only a metric's own; the cluster, indom and instance labels the agent serves
    (tests/unit/agent/test_serving.py) are shown too, each at its level."""
    sample(version=3).write(tmp_path / "lab")
    assert debug.main(["--dir", str(tmp_path), "--once", "--registry", "none"]) == 0
    out = capsys.readouterr().out
    assert '\n  cluster labels {"app":"sample"}\n' in out
    first = out.split("mmv.lab.s.t32  PMID ")[1].split("\nmmv.lab.")[0]
    assert '\n    labels {"item":true}\n' in first  # item 1, an optional label (a note)
    per_instance = out.split("mmv.lab.m.t32  PMID ")[1].split("\nmmv.lab.")[0]
    assert '\n    indom labels {"dom":1}\n' in per_instance
    assert '\n    inst [7 or \'seven\'] labels {"inst":"seven"} value ' in per_instance
    assert "\n    inst [1 or " in per_instance and "inst [1 or 'one'] labels" not in per_instance
