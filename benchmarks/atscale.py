"""The phases at scale, optional in ``benchmarks/run``: ``--scale`` (``scale.py``: RSS per
name, a new file and a rewrite among 100,000 names), ``--check`` (``check.py``: ``pmda-mmv
check`` on one of 6,000 files), ``--appear`` (``appear.py``: 1,000 files x 1,000 metrics
appearing at once), ``--at-scale`` for all three.  Each standalone script runs in the same
run (``--quick`` and ``--candidate`` passed on), its JSON document kept in the run's
(``at_scale``), and its figures shown as rows against C and the python3-pcp floor
(:func:`rows`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import appear, check, scale

PHASES: dict[str, Callable[[list[str] | None], int]] = {
    "scale": scale.main,
    "check": check.main,
    "appear": appear.main,
}
QUICK = {"scale": ["--quick"], "check": ["--files", "600", "--repeats", "1"], "appear": ["--quick"]}


def run(selected: list[str], quick: bool, candidate: Path | None, workdir: Path) -> dict[str, Any]:
    """Run the ``selected`` phases; their JSON documents by phase."""
    docs: dict[str, Any] = {}
    for phase in selected:
        out = workdir / f"{phase}.json"
        argv = [*(QUICK[phase] if quick else []), "--out", str(out)]
        argv += ["--candidate", str(candidate)] if candidate else []
        PHASES[phase](argv)
        docs[phase] = json.loads(out.read_text())
    return docs


Row = tuple[str, str, str, str, str]  # figure, pmda-mmv, C, python3-pcp floor, ratios


def rows(docs: dict[str, Any]) -> list[Row]:
    """The figures at scale: pmda-mmv's, C's, the python3-pcp floor's, and the ratios."""
    out: list[Row] = []
    if "check" in docs:
        for row, secs in docs["check"]["rows"].items():
            out.append((row, f"{secs['pmda-mmv']:.2f} s", "-", "-", "-"))
    if "scale" in docs:
        out += _scale_rows(docs["scale"])
    if "appear" in docs:
        out += _appear_rows(docs["appear"])
    return out


def _ratio(ours: float, other: float | None, what: str) -> str:
    return f"{ours / other:.2f}x {what}" if other else ""


def _scale_rows(doc: dict[str, Any]) -> list[Row]:
    a, floor = doc["agents"], doc["floor"]["change_ms"]
    names = f"{doc['files'] * doc['metrics']:,} names"
    out: list[Row] = []
    for pop, label in (("plain", "RSS per name"), ("help", "RSS per name, help text")):
        ours, c = a["ours"][pop]["bytes_per_name"], a["c"][pop]["bytes_per_name"]
        py = a["pyfloor"][pop]["bytes_per_name"]
        ratios = f"{_ratio(ours, c, 'C')}, {_ratio(ours, py, 'floor')}"
        out.append((f"{label} ({names})", f"{ours} B", f"{c} B", f"{py} B", ratios))
    for key, label in (
        ("new_file_ms", "a new one-metric file: writing to first value"),
        ("rewrite_next_request_ms", "a file rewritten: the next request"),
    ):
        ours, c = a["ours"]["plain"][key], a["c"]["plain"][key]
        ratios = f"{_ratio(ours, c, 'C')}, {_ratio(ours, floor, 'floor')}"
        out.append((f"{label} ({names})", f"{ours} ms", f"{c} ms", f"{floor} ms", ratios))
    return out


def _appear_rows(doc: dict[str, Any]) -> list[Row]:
    a, floor = doc["agents"], doc["floor"]["change_ms"]
    ours, c = a["ours"], a["c"]
    what = f"{doc['files']:,} x {doc['metrics']:,} appearing"
    drop = "dropped" if c["dropped"] else "not dropped"
    ratios = f"{_ratio(ours['worst_ms'], c['worst_ms'], 'C')}, "
    ratios += _ratio(ours["worst_ms"], floor, "floor")
    return [
        (
            f"{what}: a good file's worst request",
            f"{ours['worst_ms']:.0f} ms ({ours['over_1s']} over 1 s)",
            f"{c['worst_ms']:.0f} ms ({drop})",
            f"{floor:.0f} ms (one rebuild)",
            ratios,
        ),
        (
            f"{what}: peak RSS",
            f"{ours['rss_peak'] / 1e6:.0f} MB ({ours['names_served']:,} names)",
            f"{c['rss_peak'] / 1e6:.0f} MB ({c['names_served']:,} names)",
            "-",
            _ratio(ours["rss_peak"], c["rss_peak"], "C"),
        ),
    ]


def table(docs: dict[str, Any]) -> str:
    lines = ["", "At scale (benchmarks/run --scale --check --appear):"]
    head: Row = ("figure", "pmda-mmv", "C pmdammv", "python3-pcp floor", "ratios")
    for r in [head, *rows(docs)]:
        lines.append(f"  {r[0]:<62} {r[1]:>24} {r[2]:>22} {r[3]:>20}  {r[4]}")
    return "\n".join(lines)
