"""examples/demo_writer.py (README command 1's writer) served by pmda-mmv under a private
pmcd: instances, help text and labels of both files, and cleanup when the writer ends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.pmcd import PrivatePmcd, our_agent

pytestmark = pytest.mark.pmcd


def test_demo_metrics_have_instances_help_and_labels(
    demo_writer: subprocess.Popen[bytes],
    private_pmcd: Callable[..., PrivatePmcd],
    private_mmv_dir: Path,
) -> None:
    pmcd = private_pmcd(our_agent(private_mmv_dir))
    assert set(pmcd.fetch("mmv.demo.requests")) == {"/", "/api", "/login"}
    assert set(pmcd.fetch("mmv.demo_rooms.temperature")) == {"kitchen", "office", "attic"}
    status = pmcd.fetch("mmv.demo.status")[None]
    assert status.strip('"') in ("ok", "busy", "idle")
    help_text = pmcd.run("pminfo", "-T", "mmv.demo.uptime").stdout
    assert "Seconds since the demo writer started." in help_text
    labels = pmcd.run("pminfo", "-l", "mmv.demo_rooms.temperature").stdout
    assert '"app":"pmda-mmv demo"' in labels and '"units":"celsius"' in labels
    assert '"floor":2' in labels and '"sensor":"thermometer"' in labels


def test_demo_counters_move_and_files_leave_with_the_writer(
    demo_writer: subprocess.Popen[bytes],
    private_pmcd: Callable[..., PrivatePmcd],
    private_mmv_dir: Path,
) -> None:
    pmcd = private_pmcd(our_agent(private_mmv_dir))
    first = int(pmcd.fetch("mmv.demo_rooms.readings")["kitchen"])
    deadline = time.monotonic() + 30
    while int(pmcd.fetch("mmv.demo_rooms.readings")["kitchen"]) == first:
        assert time.monotonic() < deadline, "mmv.demo_rooms.readings never moved"
        time.sleep(0.2)
    demo_writer.terminate()
    demo_writer.wait(10)
    assert list(private_mmv_dir.iterdir()) == []
    assert pmcd.run("pmstore", "mmv.control.reload", "1").returncode == 0
    assert pmcd.fetch("mmv.control.files") == {None: "0"}
