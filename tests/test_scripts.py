"""Every shell script of the repository parses (``sh -n`` / ``bash -n`` by its shebang):
a syntax error in scripts/setup would stop CI and every README command before any test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]


def shell_scripts() -> list[Path]:
    tracked = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in tracked:
        path = CHECKOUT / name
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                first = f.readline(100)
            if first.startswith(b"#!") and (b"sh\n" in first or b"bash" in first):
                found.append(path)
    return found


SCRIPTS = shell_scripts()


def test_the_scripts_are_found() -> None:
    names = {p.relative_to(CHECKOUT).as_posix() for p in SCRIPTS}
    assert {"scripts/setup", "scripts/test", "scripts/matrix", ".ci/run", "Install"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_script_parses(script: Path) -> None:
    shell = "bash" if b"bash" in script.read_bytes().split(b"\n", 1)[0] else "sh"
    done = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
