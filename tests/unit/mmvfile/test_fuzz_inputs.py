"""Hostile bytes through the reader and the catalogue without pmcd (fuzz/target.py, the
oracle fuzz/run shares): the kept regression inputs of tests/data/hardening/, a bounded
hypothesis fuzz of mutated real-writer files, and the oracle accepting every real writer's
file.  Each input may only be refused with an MMV error, never raise anything else.  And
``fuzz/run`` in a checkout whose venv lacks atheris (as ``scripts/setup --test`` makes it)."""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.target import check_bytes, check_file
from pmda_mmv.mmvfile import layout
from tests.support import mmvbuild
from tests.support.mmvbuild import sample

DATA = Path(__file__).parents[2] / "data"


REGRESSION = sorted((DATA / "hardening").glob("*.mmv"))


@pytest.mark.parametrize(
    "path",
    REGRESSION,
    ids=[p.name for p in REGRESSION],
)
def test_regression_input(path: Path, tmp_path: Path) -> None:
    """Inputs that broke the fuzz oracle (fuzz/target.py), from the atheris run or found
    under pmcd; the README beside them says which bug each one shows."""
    check_bytes(path.read_bytes(), str(tmp_path / "f"))


SEEDS = [bytes(sample(v, labels).build().data) for v in layout.VERSIONS for labels in (False, True)]


def mutable_spans(data: bytes) -> list[tuple[int, int]]:
    """Header, TOC and every section of a valid file (offsets from its own TOC)."""
    tocs = struct.unpack_from("=i", data, 24)[0]
    version = struct.unpack_from("=i", data, 4)[0]
    spans = [(0, layout.HEADER_SIZE + tocs * layout.TOC_SIZE)]
    for k in range(tocs):
        ttype, count, offset = layout.TOC.unpack_from(
            data, layout.HEADER_SIZE + k * layout.TOC_SIZE
        )
        spans.append(
            (offset, offset + count * layout.ENTRY_SIZE[(ttype, layout.entry_layout(version))])
        )
    return spans


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    spans = mutable_spans(bytes(data))
    for _ in range(draw(st.integers(1, 4))):
        start, end = draw(st.sampled_from(spans))
        width = draw(st.sampled_from([1, 4, 8]))
        at = draw(st.integers(start, max(start, end - width)))
        word = draw(
            st.sampled_from([0, 1, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 31, 40, 1 << 40])
            | st.integers(0, (1 << (8 * width)) - 1)
        )
        data[at : at + width] = (word & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=mutated())
def test_bounded_fuzz_of_reader_and_catalogue(data: bytes) -> None:
    """The atheris oracle (fuzz/target.py) on structured mutations of valid files."""
    with tempfile.TemporaryDirectory() as tmp:
        check_bytes(data, os.path.join(tmp, "f"))


def test_oracle_accepts_real_writer_files(tmp_path: Path) -> None:
    written = mmvbuild.write_capi(tmp_path / "capi")
    assert check_file(str(written.path)) == "ok"
    img = sample(3).build()
    assert check_bytes(bytes(img.data), str(tmp_path / "s")) == "ok"


def test_fuzz_run_without_atheris_says_what_to_install(tmp_path: Path) -> None:
    """fuzz/run in a checkout whose venv python cannot import atheris (Debian's python
    without site-packages; fuzz/'s files linked): one line saying how to install it, exit 2,
    no traceback, nothing made (no seeds, corpus or results)."""
    fuzz = Path(__file__).parents[3] / "fuzz"
    files = sorted(p.name for p in fuzz.iterdir() if p.is_file())
    (tmp_path / "fuzz").mkdir()
    for name in files:
        (tmp_path / "fuzz" / name).symlink_to(fuzz / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n')
    python.chmod(0o755)
    done = subprocess.run([str(tmp_path / "fuzz" / "run"), "5"], capture_output=True, text=True)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == "fuzz/run: atheris is not installed: .venv/bin/pip install -e '.[fuzz]'\n"
    assert done.returncode == 2 and done.stdout == ""
    assert sorted(p.name for p in (tmp_path / "fuzz").iterdir()) == files
