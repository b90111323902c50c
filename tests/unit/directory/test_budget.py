"""The request budget (pmda_mmv.directory.budget): what a request spent before loading is
charged to the scanner's loading."""

from __future__ import annotations

import itertools
from pathlib import Path

from pmda_mmv.directory import budget
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import single as one


def test_a_request_charged_its_budget_loads_one_file(tmp_path: Path) -> None:
    """Found by benchmarks/appear.py: a request that registered 57,000 held names (0.2-0.7
    s) went on loading for its whole budget, and python3-pcp's rebuild of 500,000 names
    (0.9 s) came on top: 1.8 s.  What the request spent is charged now: loading gets the
    budget less the charge, and past it one file (the least a request loads)."""
    for k in range(40):
        one(cluster=k + 1).write(tmp_path / f"f{k:02d}")
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 0.001)
    free = len(scanner.refresh().added)
    assert free > 2
    charged = budget.charge(0.002, 500_000, rebuilt=True)
    assert charged > budget.BUDGET
    assert len(scanner.refresh(charged=charged).added) == 1
    assert len(scanner.refresh(charged=budget.BUDGET / 2).added) < free


def test_the_rebuild_is_charged_only_when_the_tables_changed() -> None:
    assert budget.charge(0.01, 500_000, rebuilt=False) == 0.01
    assert budget.charge(0.01, 500_000, rebuilt=True) == 0.01 + 500_000 * budget.REBUILD_COST
    assert budget.HELD_NAMES * budget.REGISTER_COST <= budget.BUDGET / 2
