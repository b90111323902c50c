"""Shared pytest fixtures.  Each block belongs to the tests named in its heading."""

from __future__ import annotations

# ==== reader / check / dump fixtures (issue 2: test_reader*.py, test_inspect.py) ==========
import lzma
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import mmvbuild

MMV_CORPUS_TOOL = Path(__file__).resolve().parents[2] / "shared" / "tools" / "mmv-corpus"
TESTSUITE_MMV = Path("/var/lib/pcp/testsuite/mmv")
CAPTURES = ("KeyboardReader", "large-parfait", "pytest")


def have_pcp_mmv() -> bool:
    try:
        from pcp import mmv  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def mmv_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUTDIR of ``../shared/tools/mmv-corpus``: real files from libpcp_mmv, pcp.mmv and
    pcp-testsuite captures, each case with the C reference's mmvdump and pminfo output."""
    if not MMV_CORPUS_TOOL.exists() or not os.path.exists("/usr/bin/python3"):
        pytest.skip("mmv-corpus tool or /usr/bin/python3 not available")
    out = tmp_path_factory.mktemp("corpus")
    proc = subprocess.run(
        ["/usr/bin/python3", str(MMV_CORPUS_TOOL), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def captured_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pcp-testsuite captures (two Parfait, one pcp.mmv), decompressed."""
    if not all((TESTSUITE_MMV / f"{n}.xz").exists() for n in CAPTURES):
        pytest.skip("pcp-testsuite MMV captures not installed")
    out = tmp_path_factory.mktemp("captured")
    files = {}
    for name in CAPTURES:
        with lzma.open(TESTSUITE_MMV / f"{name}.xz") as f:
            files[name] = out / name
            files[name].write_bytes(f.read())
    return files


@pytest.fixture
def pcp_mmv_file(tmp_path: Path) -> Iterator[mmvbuild.Written]:
    """A file written by python3-pcp's pcp.mmv in tmp_path; the writer stays live."""
    if not have_pcp_mmv():
        pytest.skip("python3-pcp (pcp.mmv) not available")
    written = mmvbuild.write_pcp_mmv(tmp_path / "pywriter")
    yield written
    written.handle.stop()


@pytest.fixture
def capi_file(tmp_path: Path) -> mmvbuild.Written:
    """A v3 file with labels written by libpcp_mmv's registry API (ctypes) in tmp_path."""
    try:
        return mmvbuild.write_capi(tmp_path / "capi")
    except OSError:
        pytest.skip("libpcp_mmv not available")


@pytest.fixture(scope="session")
def c_reference() -> tuple[str, str]:
    """(pminfo, path of the C pmda_mmv.so): the C reference agent loaded in a local context."""
    pminfo = shutil.which("pminfo")
    dsos = [
        "/var/lib/pcp/pmdas/mmv/pmda_mmv.so",
        "/usr/lib/pcp/pmdas/mmv/pmda_mmv.so",
        "/usr/libexec/pcp/pmdas/mmv/pmda_mmv.so",
    ]
    dso = next((d for d in dsos if os.path.exists(d)), None)
    if pminfo is None or dso is None:
        pytest.skip("pminfo or the C pmda_mmv.so not available")
    return pminfo, dso


# ==== end of reader / check / dump fixtures ================================================
