"""The ``pmda-mmv`` command line as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.mmvbuild import sample


def test_output_cut_by_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # Regression: `pmda-mmv debug --once | head` printed a BrokenPipeError traceback, exit 1.
    for n in range(40):  # output well past a pipe's 64 KiB buffer
        b = sample()
        b.cluster = 0
        b.write(tmp_path / f"app{n:02d}")
    cmd = f"{sys.executable} -m pmda_mmv debug --once --dir {tmp_path} | head -1"
    run = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and run.stdout.count("\n") == 1


def test_help_lists_the_commands() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0
    for command in ("pmda", "debug", "check", "dump"):
        assert f"  {command} " in run.stdout
