"""Every shell script of the repository parses (``sh -n`` / ``bash -n`` by its shebang):
a syntax error in scripts/setup would stop CI and every README command before any test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def shell_scripts() -> list[Path]:
    """The repository's files that start with a sh or bash shebang (no git needed: the
    matrix roots have none), outside .git, virtual environments and build output."""
    skip = {".git", ".venv", "build", "dist", "node_modules", "__pycache__"}
    found = []
    for top, dirs, files in os.walk(CHECKOUT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        for name in files:
            path = Path(top) / name
            if path.is_symlink() or not path.is_file():
                continue
            with path.open("rb") as f:
                first = f.readline(100)
            if first.startswith(b"#!") and (b"sh\n" in first or b"bash" in first):
                found.append(path)
    return sorted(found)


SCRIPTS = shell_scripts()


def test_the_scripts_are_found() -> None:
    names = {p.relative_to(CHECKOUT).as_posix() for p in SCRIPTS}
    assert {"scripts/setup", "scripts/test", "scripts/matrix", ".ci/run", "Install"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_script_parses(script: Path) -> None:
    shell = "bash" if b"bash" in script.read_bytes().split(b"\n", 1)[0] else "sh"
    done = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
