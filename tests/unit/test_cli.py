"""The ``pmda-mmv`` command line as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.mmvbuild import sample


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


def test_agent_options() -> None:
    from pmda_mmv.agent.options import Options, parse_args

    assert parse_args([]) == Options()
    opts = parse_args(["-d", "4", "--prefix", "pmproxy", "--max-size", "2", "--no-pmid-hash-reset"])
    assert (opts.domain, opts.prefix, opts.logfile) == (4, "pmproxy", "pmproxy.log")
    assert opts.max_size == 2 << 20 and not opts.pmid_hash_reset
    assert parse_args(["--owners", "root"]).owners == (0,)


def test_agent_options_refuse_an_unknown_owner(capsys: pytest.CaptureFixture[str]) -> None:
    from pmda_mmv.agent.options import parse_args

    with pytest.raises(SystemExit) as done:
        parse_args(["--owners", "no-such-user-here"])
    assert done.value.code == 2
    assert "no-such-user-here" in capsys.readouterr().err
