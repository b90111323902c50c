"""Running the ``pmda-mmv`` commands as a user does, for the tests of their output."""

from __future__ import annotations

import subprocess
import sys

from pmda_mmv.mmvfile.rules import printable


def pmda_mmv(*args: str) -> str:
    """Run ``python -m pmda_mmv ARGS`` and return its output (stdout, decoded as the
    terminal would: invalid bytes kept as surrogates)."""
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", *args], capture_output=True, timeout=300
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.decode("utf-8", "surrogateescape")


def assert_terminal_safe(text: str) -> None:
    """Nothing in ``text`` but printable characters and line ends."""
    for line in text.splitlines():
        assert printable(line) == line, repr(line)
