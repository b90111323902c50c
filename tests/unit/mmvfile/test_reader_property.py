"""Property tests: mutated and truncated MMV files (from the builder and from real writers)
never make the reader raise anything but its own errors (MmvError subclasses), neither
when opening nor when reading values, nor when ``pmda-mmv dump`` describes them."""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pmda_mmv.commands import dump
from pmda_mmv.mmvfile.errors import Corrupt, MmvError
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support import mmvbuild as mb

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def builder_bases() -> list[tuple[bytes, list[int]]]:
    """Valid builder files and the offsets of every entry in them (mutation targets and
    values: a field set to another entry's offset makes a plausible wrong reference)."""
    out = []
    for version in (1, 2, 3):
        image = mb.sample(version, labels=True).build()
        offsets = sorted({o for entries in image.entries.values() for o in entries})
        out.append((bytes(image.data), offsets))
    return out


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, list[int]]]:
    """Builder files plus files from real writers: pcp.mmv, libpcp_mmv and the smallest
    pcp-testsuite capture, when available."""
    found = builder_bases()
    tmp = tmp_path_factory.mktemp("bases")
    writers = [("pcp", mb.write_pcp_mmv), ("capi", mb.write_capi)]
    for name, write in writers:
        try:
            written = write(tmp / name)
        except (ImportError, OSError):
            continue
        found.append((written.path.read_bytes(), []))
    pytest_capture = Path("/var/lib/pcp/testsuite/mmv/pytest.xz")
    if pytest_capture.exists():
        import lzma

        found.append((lzma.decompress(pytest_capture.read_bytes()), []))
    return found


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutants")


def interesting(size: int, offsets: list[int]) -> st.SearchStrategy[int]:
    edges = [0, 1, 2, 40, 255, 256, 1023, 1024, 4095, 4096, 2**22 - 1, 2**22]
    edges += [size - 256, size - 8, size - 1, size, size + 1, 2**31 - 1, 2**32 - 1]
    edges += [2**63, 2**64 - 1, 2**64 - 32]
    return st.sampled_from([e % 2**64 for e in edges] + offsets)


@st.composite
def mutants(draw: st.DrawFn, bases: list[tuple[bytes, list[int]]]) -> bytes:
    """A base file with a few bytes or 4/8-byte fields overwritten, maybe truncated."""
    base, offsets = draw(st.sampled_from(bases))
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 6))):
        pos = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["byte", "u32", "u64"]))
        if kind == "byte":
            data[pos] = draw(st.integers(0, 255))
            continue
        fmt_, width = ("=I", 4) if kind == "u32" else ("=Q", 8)
        pos -= pos % width  # fields are aligned to their size
        if pos + width <= len(data):
            value = draw(interesting(len(base), offsets)) % (2 ** (8 * width))
            struct.pack_into(fmt_, data, pos, value)
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def exercise(mf: MmvFile) -> None:
    """Read everything an agent or ``pmda-mmv dump`` would read."""
    assert all(isinstance(p, Corrupt) for p in mf.problems)
    assert all(isinstance(p.offset, int) and p.field for p in mf.problems)
    snap = mf.snapshot()
    for _ in mf.values(snap):
        pass
    for t in (-1, 0, 1, 2, 3, 4, 5, 6, 9, 42):
        mf.decoder(t)
    for metric in mf.metrics:
        if metric.shorthelp is not None:
            assert isinstance(metric.shorthelp, str)


@SETTINGS
@given(data=st.data())
def test_mutated_files_raise_only_mmv_errors(bases, scratch: Path, data: st.DataObject) -> None:
    raw = data.draw(mutants(bases))
    path = scratch / "mutant"
    path.write_bytes(raw)
    with contextlib.suppress(MmvError), MmvFile.open(str(path)) as mf:
        exercise(mf)
    doc = dump.describe(str(path))  # the dump of any file is a document, not a crash
    assert doc["status"] in ("ok", "partial", "not-ready", "refused")
    event(doc["status"])


@SETTINGS
@given(data=st.data())
def test_files_changed_after_loading_raise_only_mmv_errors(
    bases, scratch: Path, data: st.DataObject
) -> None:
    """Open a valid file, then mutate or truncate it in place before reading values."""
    base, _ = data.draw(st.sampled_from(bases))
    path = scratch / "live"
    path.write_bytes(base)
    with MmvFile.open(str(path)) as mf:
        changed = data.draw(mutants([(base, [])]))
        with open(path, "r+b") as f:
            f.write(changed)
            f.truncate(len(changed))
        with contextlib.suppress(MmvError):
            exercise(mf)


SAMPLE_V3 = bytes(mb.sample(3).build().data)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, len(SAMPLE_V3)))
def test_truncations_of_a_builder_file(scratch: Path, cut: int) -> None:
    path = scratch / "cut"
    path.write_bytes(SAMPLE_V3[:cut])
    try:
        with MmvFile.open(str(path)) as mf:
            exercise(mf)
    except MmvError as e:
        assert isinstance(e.offset, int) and e.field


def test_exercise_sees_values(scratch: Path) -> None:
    """The property tests' premise: an unmutated base file opens and yields its values."""
    path = scratch / "base"
    for raw, _ in builder_bases():
        path.write_bytes(raw)
        with MmvFile.open(str(path)) as mf:
            assert mf.status == "ok" and len(list(mf.values())) == 32
    assert os.path.getsize(path) > 0
