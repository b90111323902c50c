"""What ``check``, ``dump`` and ``debug`` print of hostile files: terminal safe (names, help,
instance names and labels holding terminal controls and invalid UTF-8 come out escaped by
pmda_mmv.mmvfile.rules.printable, in text and JSON alike), and naming the limit a file
broke."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pmda_mmv.mmvfile import layout, limits
from tests.support import hostile
from tests.support.commands import assert_terminal_safe, pmda_mmv

INSTANCES = limits.MAX_ENTRIES[layout.TOC_INSTANCES]


def test_check_dump_and_debug_escape_terminal_controls(tmp_path: Path) -> None:
    """check DIR, dump FILE and debug --once show file names, help text, instance names
    and labels with every control and bidirectional character escaped."""
    served, named = hostile.escapes(tmp_path)
    outputs = {
        "check": pmda_mmv("check", str(tmp_path)),
        "check --json": pmda_mmv("check", "--json", str(tmp_path)),
        "dump": pmda_mmv("dump", str(served), str(named)),
        "dump --json": pmda_mmv("dump", "--json", str(served)),
        "debug": pmda_mmv("debug", "--once", "--dir", str(tmp_path)),
    }
    for what, text in outputs.items():
        assert_terminal_safe(text)
        assert "\\x1b" in text or "\\u001b" in text, what  # shown, escaped
    assert "\\u202e" in outputs["dump"] and "\\x9b" in outputs["dump"]


def test_check_names_the_limit(tmp_path: Path) -> None:
    """`check` gives the agent's verdict: the same refusal, field and limit."""
    (path,) = hostile.big_files(tmp_path, 1, 1, INSTANCES + 1)
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"more than {INSTANCES} in one file" in done.stdout
