"""Write the real-writer corpus: every case of :mod:`tests.support.writers.cases`, with the C
reference's view of each (:mod:`tests.support.writers.reference`).

    .venv/bin/python -m tests.support.writers.corpus OUTDIR [--no-references] [--large N] [--many N]
                                             [--only CASE ...]

Layout of OUTDIR (``PCP_TMP_DIR=OUTDIR/<case>`` serves a case)::

    <case>/mmv/<file>       the MMV files the case's writer wrote
    <case>/mmvdump.out      the C mmvdump of each file (with several: '### <file>' headings)
    <case>/pminfo.out       pminfo -dfTlt mmv from the C agent (and pminfo.err, pminfo.rc)

Each case is written by a child process of its own (:func:`write_case`), which has exited
before the files are read; cases are written, and referenced, a few at a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import field_offsets
from tests.support.writers import reference
from tests.support.writers.cases import CASES, Case, Params

CHECKOUT = Path(__file__).resolve().parents[3]
PROCESS_OFFSET = field_offsets(layout.HEADER)["process"]


class CorpusError(RuntimeError):
    """A writer failed, wrote nothing, or the C reference is missing."""


def write_case(out: Path, case: Case, params: Params) -> Path:
    """Write ``case`` into ``out/<case>/mmv`` with a child (this Python, ``-m
    tests.support.writers.cases``); afterwards set the header process field if the case says so."""
    top = out / case.name
    shutil.rmtree(top, ignore_errors=True)
    (top / "mmv").mkdir(parents=True)
    argv = [sys.executable, "-m", "tests.support.writers.cases", case.name, str(top / "mmv"),
            "--large", str(params.large), "--many", str(params.many)]  # fmt: skip
    done = subprocess.run(argv, cwd=CHECKOUT, capture_output=True, text=True, timeout=600)
    files = sorted((top / "mmv").iterdir())
    if done.returncode != 0 or not files:
        raise CorpusError(f"{case.name} ({case.writer}): writer failed\n{done.stderr}")
    for path in files if case.process is not None else ():
        with path.open("r+b") as f:
            f.seek(PROCESS_OFFSET)
            f.write(struct.pack("=i", case.process))
    return top


def write_corpus(
    out: Path,
    params: Params | None = None,
    references: bool = True,
    only: Iterable[str] | None = None,
) -> list[Path]:
    """Write the cases (all, or ``only``) into ``out``; with ``references``, the C
    reference's outputs next to each.  Returns the case directories."""
    if references and reference.missing():
        raise CorpusError(f"the C reference is missing: {reference.missing()} (package pcp)")
    params = params or Params()
    out.mkdir(parents=True, exist_ok=True)
    pmns = reference.write_pmns(out / ".pmns")
    chosen = [CASES[name] for name in only] if only is not None else list(CASES.values())

    def one(case: Case) -> Path:
        top = write_case(out, case, params)
        if references:
            reference.write_references(top, pmns)
        return top

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, chosen))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--no-references", action="store_true", help="MMV files only")
    ap.add_argument("--large", type=int, default=Params.large, help="capi-large instances")
    ap.add_argument("--many", type=int, default=Params.many, help="capi-many-files files")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), metavar="CASE")
    a = ap.parse_args(argv)
    try:
        tops = write_corpus(a.outdir, Params(a.large, a.many), not a.no_references, a.only)
    except CorpusError as e:
        print(e, file=sys.stderr)
        return 1
    files = sum(len(list((top / "mmv").iterdir())) for top in tops)
    print(f"{files} files in {len(tops)} cases under {a.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
