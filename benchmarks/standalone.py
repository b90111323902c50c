"""What the benchmarks run on their own (``notready.py``, ``scale.py``) share: a scratch
work directory, and the JSON document of a run (when, the command, the load average)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support.pmcd import make_dir

T = TypeVar("T")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def in_workdir(prefix: str, run: Callable[[Path], T]) -> T:
    """``run(workdir)`` in a new directory under /tmp, removed afterwards."""
    workdir = make_dir(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")))
    try:
        return run(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def document(
    script: str, argv: list[str] | None, before: list[float], candidate: Path | None, **fields: Any
) -> dict[str, Any]:
    """A run's JSON document: when, the command line of ``script``, the load average
    ``before`` the run and now, the candidate's directory, then ``fields``."""
    return {
        "when": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([script, *(sys.argv[1:] if argv is None else argv)]),
        "load": before,
        "load_after": load(),
        "candidate": str(candidate) if candidate else None,
        **fields,
    }


def write(doc: dict[str, Any], out: Path) -> None:
    make_dir(out.parent)
    out.write_text(json.dumps(doc, indent=2) + "\n")


def parser(script: str, doc: str, out: Path) -> argparse.ArgumentParser:
    """A standalone benchmark's command line: ``--candidate DIR`` and ``--out FILE``
    (default ``out``), the description the first line of ``doc``."""
    p = argparse.ArgumentParser(prog=script, description=doc.splitlines()[0])
    p.add_argument("--candidate", type=Path, help="also run the pmda_mmv package in DIR")
    p.add_argument("--out", type=Path, default=out)
    return p
