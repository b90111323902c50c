"""The layer order of ``pmda_mmv`` (pyproject.toml ``[tool.importlinter]``), checked by
import-linter as .ci/run does, and proved to bite: a copy of the package with one planted
wrong-way import breaks the contract it should."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(top: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the package found in ``top``, with the checkout's contracts."""
    env = {**os.environ, "PYTHONPATH": str(top)}
    argv = [str(LINT_IMPORTS), "--config", str(CHECKOUT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(argv, cwd=top, env=env, capture_output=True, text=True, check=False)


def planted(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of pmda_mmv in ``tmp_path`` whose ``module`` (a path below it) ends with
    ``line``."""
    shutil.copytree(CHECKOUT / "pmda_mmv", tmp_path / "pmda_mmv")
    with (tmp_path / "pmda_mmv" / module).open("a") as f:
        f.write(f"\n{line}\n")
    return tmp_path


def test_the_package_keeps_its_layers() -> None:
    out = lint_imports(CHECKOUT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("mmvfile/layout.py", "from pmda_mmv.namespace import catalogue", "subpackages:"),
        ("mmvfile/parse/metrics.py", "from pmda_mmv.mmvfile import reader", "mmvfile:"),
        ("namespace/catalogue.py", "from pmda_mmv.directory import scanner", "subpackages:"),
        ("directory/scanner.py", "from pmda_mmv.agent import serving", "subpackages:"),
        ("directory/liveness.py", "from pmda_mmv.directory import loader", "directory:"),
        ("namespace/registry.py", "from pmda_mmv.namespace import catalogue", "namespace:"),
        ("agent/control.py", "from pmda_mmv.agent import serving", "agent:"),
        ("commands/pcpenv.py", "from pmda_mmv.commands import dump", "commands:"),
        ("agent/serving.py", "import cpmapi", "python3-pcp only"),
    ],
)
def test_a_wrong_way_import_breaks_the_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    out = lint_imports(planted(tmp_path, module, line))
    assert out.returncode != 0, out.stdout
    broken = [s for s in out.stdout.splitlines() if s.endswith("BROKEN")]
    # the contract named breaks (a chain through another subpackage may break others too)
    assert any(b.startswith(contract) for b in broken), out.stdout
