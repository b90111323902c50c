"""The crafted directory every verdict is met in (:func:`crafted`): the files ``check`` is
compared with the agent on (tests/system/test_check.py) and ``check FILE`` with
``check DIR`` (tests/system/test_check_one.py)."""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pmda_mmv.mmvfile import layout
from tests.support import hostile
from tests.support.mmvbuild import Metric, MmvBuilder, Value, sample

DATA = Path(__file__).parents[1] / "data"
UID = os.getuid()
WRITERS: list[mmap.mmap] = []  # this process, the writer of proc_live: its mapping of it


def single(name: str, *, cluster: int, flags: int = 0, mtype: int = layout.TYPE_U32) -> MmvBuilder:
    """A file of one singular metric ``name`` (item 1) in ``cluster``."""
    b = MmvBuilder(cluster=cluster, flags=flags)
    b.metrics.append(Metric(name, 1, mtype))
    b.values.append(Value(name, None, 3))
    return b


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def crafted(d: Path) -> None:
    """The crafted files: the issue's table, each policy of the scanner, test_inspect's
    four statuses, every tests/support/hostile.py shape (small) and tests/data/hardening."""
    sample(3).write(d / "ok")
    partial = sample(2)
    partial.metrics[0].item = 5000
    partial.write(d / "partial")
    sample().build().patch("header", 0, "g2", 0).write(d / "notready")
    sample().build().patch("header", 0, "version", 9).write(d / "refused")
    sample().write(d / "client-123")  # not a name component (Speed's issue #53)
    sample().write(d / ".hidden")
    gone = sample()
    gone.flags, gone.process = layout.FLAG_PROCESS, dead_pid()
    gone.write(d / "proc_gone")
    minus = sample()
    minus.flags, minus.process = layout.FLAG_PROCESS, -1
    minus.write(d / "proc_minus")
    live = sample()
    live.flags, live.process = layout.FLAG_PROCESS, os.getpid()
    live.write(d / "proc_live")
    with open(d / "proc_live", "rb") as f:  # a live writer maps its file
        WRITERS.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    clash = single("a.b", cluster=31)
    clash.metrics.append(Metric("a.b.c", 2))
    clash.values.append(Value("a.b.c", None, 4))
    clash.write(d / "clash")
    single("shared.m", cluster=32, flags=layout.FLAG_NOPREFIX).write(d / "np_first")
    single("shared.m", cluster=33, flags=layout.FLAG_NOPREFIX, mtype=layout.TYPE_U64).write(
        d / "np_second"
    )
    single("control.x", cluster=34, flags=layout.FLAG_NOPREFIX).write(d / "np_control")
    help256 = sample()
    help256.metrics[0].shorthelp = b"s" * layout.STRING_SIZE  # as Speed writes
    help256.write(d / "help256")
    (d / "empty").touch()
    os.mkfifo(d / "fifo")
    (d / "sub").mkdir()
    (d / "link").symlink_to("ok")
    (d / "away").symlink_to(d.parent)
    stranger = single("m", cluster=35)
    stranger.write(d / "stranger")
    if UID == 0:
        os.chown(d / "stranger", 65534, 65534)  # not an owner --owners names
    hostile.many_sections(d, 40)
    hostile.many_sections(d, 40, overlap=True)
    hostile.fan_out(d, 20, 5)
    hostile.orphan_values(d, 40)
    hostile.orphan_values(d, 40, instance=True)
    hostile.empty_files(d, 2)
    hostile.escapes(d)
    hostile.label_flood(d, 300)
    hostile.label_flood(d, 300, nested=True, cluster=207)
    hostile.instance_labels(d, 10, 10)
    for path in sorted((DATA / "hardening").glob("*.mmv")):
        shutil.copyfile(path, d / path.name)  # as named: not a name component
        shutil.copyfile(path, d / ("hard_" + path.stem.replace("-", "_")))
