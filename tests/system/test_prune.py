"""``pmda-mmv prune``: the files of departed MMV_FLAG_PROCESS writers, and only
those, are removed.

The writers are real: python3-pcp's ``pcp.mmv`` run by /usr/bin/python3, killed with
SIGKILL so that their file stays behind, as after a crash.  A reused pid is made by writing
into a dead writer's header the pid of a process started after the file.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import pmda_mmv
from pmda_mmv.commands import prune
from pmda_mmv.directory.liveness import PID_SLACK
from pmda_mmv.mmvfile import generation, layout
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support.mmvbuild import sample
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent

pytestmark = pytest.mark.host_pid_namespace  # prune prunes nothing outside it (by design)
SYSTEM_PYTHON = "/usr/bin/python3"  # python3-pcp is built for it
NOBODY = 65534

WRITER = """
import sys
from pcp import mmv, pmapi
path, flags, cluster = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w = mmv.MemoryMappedValues(path, flags=flags, cluster=cluster)
w.add_metrics([mmv.mmv_metric("count", 1, 1, 3, pmapi.pmUnits(), 0xFFFFFFFF)])
w.start()
w.lookup_set("count", "", 7)
print("ready", flush=True)
sys.stdin.read()
"""


class Writers:
    """Real pcp.mmv writers, one process each; every one still running is killed at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, path: Path, *, flags: int = layout.FLAG_PROCESS, user: int | None = None
    ) -> subprocess.Popen[str]:
        cluster = 100 + len(self.procs)
        proc = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", WRITER, str(path), str(flags), str(cluster)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            user=user,
        )
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert path.exists()
        return proc

    def crash(self, path: Path, **kw: int) -> int:
        """A writer of ``path`` killed with SIGKILL (its file stays); its pid."""
        proc = self.start(path, **kw)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert path.exists()
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


@pytest.fixture
def writers() -> Iterator[Writers]:
    w = Writers()
    yield w
    w.stop()


@pytest.fixture
def later() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Factory of processes (``sleep``) to give a reused pid to; killed at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", "300"])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(30)


def set_pid(path: Path, pid: int) -> None:
    """Write ``pid`` into the header of ``path`` (``header.process``)."""
    with open(path, "r+b") as f:
        f.seek(layout.HEADER.at["process"])
        f.write(struct.pack("=i", pid))


BTIME_GRAIN = 1.0
"""How much earlier than it did a process may seem to start: its start time is the boot time
(/proc/stat ``btime``, whole seconds, truncated) plus its start in ticks (a reader started
2.5 s after a file was seen as started 1.5-2.5 s after it, a timely writer, on a machine
booted at x.9 s)."""


def created(path: Path) -> float:
    """When ``path`` was created, from its generation number (as the agent reads it)."""
    g1 = struct.unpack_from("=Q", path.read_bytes(), layout.HEADER.at["g1"])[0]
    when = generation.generation_time(g1, time.time())
    assert when is not None
    return when


def run_prune(*args: str, user: int | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``pmda-mmv prune ARGS``; as ``user`` (not root): Debian's python3 with a copy of the
    package that user can read (the checkout may be under /root, mode 0700)."""
    python = [sys.executable]
    if user is not None:
        python = [SYSTEM_PYTHON]
        env = {**env, "PYTHONPATH": str(readable_package())}
    return subprocess.run(
        [*python, "-m", "pmda_mmv", "prune", *args],
        capture_output=True,
        text=True,
        timeout=60,
        user=user,
        env={**os.environ, **env},
    )


@functools.cache
def readable_package() -> Path:
    """A directory every user can read holding copies of pmda_mmv and psutil (removed at
    exit)."""
    top = Path(tempfile.mkdtemp(prefix="pmda-mmv-prune-package-"))
    atexit.register(shutil.rmtree, top, True)
    top.chmod(0o755)
    for module in (pmda_mmv, psutil):
        source = Path(module.__file__ or "").parent
        shutil.copytree(source, top / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    return top


def populate(
    d: Path, writers: Writers, later: Callable[[], subprocess.Popen[bytes]]
) -> dict[str, int]:
    """Every kind of entry in ``d``; the pid each kept or removed writer file names."""
    pids = {}
    reused = d / "reused"
    writers.crash(reused)  # first: the process given its pid must start PID_SLACK s later
    pids["exited"] = writers.crash(d / "exited")
    pids["live"] = writers.start(d / "live").pid
    pids["plain"] = writers.crash(d / "plain", flags=0)  # not PROCESS: kept, writer gone
    writers.crash(d / ".hidden")  # a dot-file: the agent ignores it, so does prune
    outside = d.parent / "outside"
    writers.crash(outside)
    (d / "link").symlink_to(outside)  # a symlink to a departed writer's file
    (d / "junk").write_bytes(b"not an MMV file" * 4)
    dead = sample()
    dead.flags, dead.process = layout.FLAG_PROCESS, 0
    dead.write(d / "pid0")  # PROCESS with no pid: served as the C agent does, kept
    minus = sample()
    minus.flags, minus.process = layout.FLAG_PROCESS, -1
    minus.write(d / "minus")  # no such process: the agent calls it exited, so does prune
    time.sleep(max(0.0, created(reused) + PID_SLACK + BTIME_GRAIN + 0.5 - time.time()))
    newcomer = later()
    set_pid(reused, newcomer.pid)
    pids["reused"] = newcomer.pid
    return pids


def said(line: str, start: str, pid: int) -> bool:
    """``line`` starts with ``start`` and gives the reason of a departed writer ``pid``
    (liveness's words: pmda_mmv.directory.liveness)."""
    return line.startswith(start) and f" {pid} " in line and "(MMV_FLAG_PROCESS)" in line


KEPT = {"live", "plain", ".hidden", "link", "junk", "pid0"}


def test_prune_removes_exactly_the_files_of_departed_writers(
    tmp_path: Path, writers: Writers, later: Callable[[], subprocess.Popen[bytes]]
) -> None:
    d = make_dir(tmp_path / "mmv")
    pids = populate(d, writers, later)
    every = {p.name for p in d.iterdir()}

    dry = run_prune("--dry-run", str(d))
    assert dry.returncode == 0, dry.stderr
    assert {p.name for p in d.iterdir()} == every  # nothing removed
    # the reasons are liveness's words (pmda_mmv.directory.liveness): the facts are checked here
    *removals, summary = dry.stdout.splitlines()
    assert [ln.split(": ", 1)[0] for ln in removals] == [
        f"would remove {d}/{n}" for n in ("exited", "minus", "reused")
    ]
    for line, pid in zip(removals, (pids["exited"], -1, pids["reused"]), strict=True):
        assert f" {pid} " in line and line.endswith(" (MMV_FLAG_PROCESS)"), line
    assert "reused" in removals[2].lower(), removals
    assert summary == (
        f"{d}: 3 files would be removed, 6 kept (1 with a live writer, 2 not PROCESS, "
        "1 not a valid MMV file, 1 not a regular file, 1 dot-file)"
    )

    done = run_prune("-v", str(d))
    assert done.returncode == 0, done.stderr
    assert {p.name for p in d.iterdir()} == KEPT
    lines = done.stdout.splitlines()
    assert lines[-1] == (
        f"{d}: 3 files removed, 6 kept (1 with a live writer, 2 not PROCESS, "
        "1 not a valid MMV file, 1 not a regular file, 1 dot-file)"
    )
    removed = [f"removed {d}/{n}" for n in ("exited", "minus", "reused")]
    assert sorted(ln.split(":")[0] for ln in lines[:-1]) == sorted(
        removed + [f"kept {d}/{n}" for n in KEPT]
    )
    assert f"kept {d}/live: writer process {pids['live']} is running" in lines
    assert f"kept {d}/link: not a regular file (symlink)" in lines
    assert (d.parent / "outside").exists()  # the symlink was not followed
    os.kill(pids["reused"], 0)  # the process given the reused pid was left alone

    again = run_prune(str(d))
    assert again.returncode == 0 and again.stdout.startswith(f"{d}: 0 files removed, 6 kept")


def test_prune_removes_what_check_calls_exited(
    tmp_path: Path, writers: Writers, later: Callable[[], subprocess.Popen[bytes]]
) -> None:
    # One judgement: prune removes exactly the regular files `check` judges without a live
    # writer ("exited"; "no-writer" too once liveness finds writers across PID namespaces)
    d = make_dir(tmp_path / "mmv")
    populate(d, writers, later)
    check = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "check", "--json", str(d)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    gone = {"exited", "no-writer"}
    exited = {Path(r["file"]).name for r in json.loads(check.stdout) if r["status"] in gone}
    # the symlink's target is outside the directory: the agent refuses it, prune keeps it
    assert exited == {"exited", "minus", "reused"}
    before = {p.name for p in d.iterdir()}
    assert run_prune(str(d)).returncode == 0
    assert before - {p.name for p in d.iterdir()} == exited


def test_prune_keeps_a_file_replaced_between_judgement_and_unlink(
    tmp_path: Path, writers: Writers, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = make_dir(tmp_path / "mmv")
    writers.crash(d / "app")
    changed = prune._changed

    def restart(dfd: int, name: str, mf: MmvFile) -> str | None:
        os.unlink(d / "app")  # a new writer takes the name once the old one is judged
        writers.start(d / "app")
        return changed(dfd, name, mf)

    monkeypatch.setattr(prune, "_changed", restart)
    out = Out()
    assert prune.prune(str(d), out) == 0
    assert (d / "app").exists()
    assert out.lines == [
        f"kept {d}/app: replaced since it was judged, not removed",
        f"{d}: 0 files removed, 1 kept (1 changed underneath)",
    ]


def test_prune_keeps_a_file_whose_header_changed_in_place(
    tmp_path: Path, writers: Writers, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = make_dir(tmp_path / "mmv")
    writers.crash(d / "app")
    live = writers.start(d / "other")
    changed = prune._changed

    def adopt(dfd: int, name: str, mf: MmvFile) -> str | None:
        set_pid(d / "app", live.pid)  # same inode, a live writer's pid now
        return changed(dfd, name, mf)

    monkeypatch.setattr(prune, "_changed", adopt)
    out = Out()
    assert prune.prune(str(d), out) == 0
    assert (d / "app").exists()
    assert out.lines[0] == f"kept {d}/app: rewritten since it was judged, not removed"


class Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += text.splitlines()


def test_another_users_files_are_kept_unless_run_as_root(
    private_dir: Path, writers: Writers
) -> None:
    assert os.geteuid() == 0, "this test runs prune as root and as nobody"
    d = make_dir(private_dir / "mmv", 0o1777)  # as $PCP_TMP_DIR/mmv: sticky, all may write
    writers.crash(d / "roots")
    nobodys = writers.crash(d / "nobodys", user=NOBODY)
    assert (d / "nobodys").stat().st_uid == NOBODY

    as_nobody = run_prune("-v", str(d), user=NOBODY)
    assert as_nobody.returncode == 0, as_nobody.stderr
    removed, *rest = as_nobody.stdout.splitlines()
    assert said(removed, f"removed {d}/nobodys: ", nobodys)
    assert rest == [
        f"kept {d}/roots: owned by uid 0, not by you",
        f"{d}: 1 file removed, 1 kept (1 another user's)",
    ]
    assert (d / "roots").exists()

    writers.crash(d / "nobodys2", user=NOBODY)
    as_root = run_prune(str(d))
    assert as_root.returncode == 0
    assert {p.name for p in d.iterdir()} == set()


def test_exit_status_1_when_a_file_cannot_be_removed(private_dir: Path, writers: Writers) -> None:
    d = make_dir(private_dir / "mmv", 0o755)  # nobody may not unlink in it
    pid = writers.crash(d / "app")
    os.chown(d / "app", NOBODY, -1)
    run = run_prune(str(d), user=NOBODY)
    assert run.returncode == 1
    failed, summary = run.stdout.splitlines()
    assert said(failed, f"cannot remove {d}/app: Permission denied (", pid)
    assert summary == f"{d}: 0 files removed, 0 kept, 1 could not be removed"
    assert (d / "app").exists()


def test_exit_status_2_on_usage_errors_and_unreadable_dirs(tmp_path: Path) -> None:
    assert run_prune("--no-such-option").returncode == 2
    missing = run_prune(str(tmp_path / "missing"))
    assert missing.returncode == 2
    assert missing.stderr == f"pmda-mmv prune: {tmp_path}/missing: No such file or directory\n"


def test_the_default_directory_is_pcp_tmp_dir_mmv(tmp_path: Path, writers: Writers) -> None:
    d = make_dir(tmp_path / "mmv")
    writers.crash(d / "app")
    run = run_prune(PCP_TMP_DIR=str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"removed {d}/app: ")
    assert not (d / "app").exists()


def test_help_lists_prune() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "  prune " in run.stdout


@pytest.mark.pmcd
def test_the_agent_forgets_pruned_files_and_serves_the_live_one(
    private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path, writers: Writers
) -> None:
    d = private_mmv_dir
    pmcd = private_pmcd(our_agent(d, "--status-metrics"))
    writers.start(d / "live")
    crashed = [writers.crash(d / f"worker{n}") for n in range(3)]
    states = pmcd.fetch("mmv.control.file.state")
    assert states == {  # crashed before the agent first looked: never followed
        "live": '"ok"',
        "worker0": '"no-writer"',
        "worker1": '"no-writer"',
        "worker2": '"no-writer"',
    }
    run = run_prune(str(d))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == f"{d}: 3 files removed, 1 kept (1 with a live writer)"
    assert pmcd.fetch("mmv.control.file.state") == {"live": '"ok"'}
    assert pmcd.fetch("mmv.live.count") == {None: "7"}
    # each departed writer's file was logged once, however many requests and rescans
    log = pmcd.agent_log()
    for n, pid in enumerate(crashed):
        line = (
            f"{d}/worker{n}: header.process at offset 32: writer PID {pid} not found in this "
            "PID namespace or any other"
        )
        assert log.count(line) == 1, log


def test_a_live_writer_is_kept_after_the_clock_was_stepped_forward(
    tmp_path: Path, writers: Writers
) -> None:
    # A machine without a battery-backed clock boots, a writer creates its file, then NTP
    # steps the wall clock forward: the file's generation keeps the old time while process
    # start times (boot time + ticks, /proc/stat btime moves with the clock) move forward,
    # so the writer seems to have started after its file.  Made here by moving the file's
    # generation 60 s back.  It maps the file writable: it is the writer, not a reused PID
    # (prune removed it and the agent refused it: "PID N belongs to a process started
    # after this file: PID reused").
    d = make_dir(tmp_path / "mmv")
    proc = writers.start(d / "live")
    with open(d / "live", "r+b") as f:
        at = layout.HEADER.at
        f.seek(at["g1"])
        g1 = struct.unpack("=Q", f.read(8))[0]
        g1 = ((g1 >> 32) - 60) << 32
        for name in ("g1", "g2"):
            f.seek(at[name])
            f.write(struct.pack("=Q", g1))
    assert created(d / "live") < time.time() - 59
    out = run_prune("-v", str(d))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"kept {d}/live: writer process {proc.pid} is running",
        f"{d}: 0 files removed, 1 kept (1 with a live writer)",
    ]
    assert (d / "live").exists()


def test_a_reader_given_a_dead_writers_pid_is_not_its_writer(
    tmp_path: Path, writers: Writers
) -> None:
    # The exemption above is for a process that maps the file writable: one that was given
    # a dead writer's PID and maps its file read-only (a reader) is still a reused PID.
    d = make_dir(tmp_path / "mmv")
    writers.crash(d / "app")
    time.sleep(max(0.0, created(d / "app") + PID_SLACK + BTIME_GRAIN + 0.5 - time.time()))
    reader = subprocess.Popen(
        [SYSTEM_PYTHON, "-c", READER, str(d / "app")], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == b"mapped\n"
        set_pid(d / "app", reader.pid)
        out = run_prune(str(d))
        assert out.returncode == 0, out.stderr
        assert "PID reused" in out.stdout and not (d / "app").exists(), out.stdout
    finally:
        reader.kill()
        reader.wait(30)


READER = """
import mmap, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("mapped", flush=True)
sys.stdin.read()
"""


def test_prune_in_a_child_pid_namespace_removes_nothing(tmp_path: Path, writers: Writers) -> None:
    # A container sharing the directory with the host (a bind mount) cannot see the host's
    # writers: prune run there said "writer PID N not found in this PID namespace or any
    # other" of a live host writer and removed its file.  It now keeps every file it cannot
    # judge, dead writers' included (the host's prune removes those).
    d = make_dir(tmp_path / "mmv")
    live = writers.start(d / "live")
    writers.crash(d / "exited")
    unshare = ["unshare", "--pid", "--fork", "--mount-proc"]
    out = subprocess.run(
        [*unshare, sys.executable, "-m", "pmda_mmv", "prune", "-v", str(d)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert {p.name for p in d.iterdir()} == {"live", "exited"}, out.stdout
    assert f"kept {d}/live: writer PID {live.pid} not found" in out.stdout
    assert out.stdout.splitlines()[-1] == (
        f"{d}: 0 files removed, 2 kept (2 whose writer may be outside this PID namespace)"
    )
    host = run_prune(str(d)).stdout.splitlines()[-1]  # on the host: the dead writer's goes
    assert host == f"{d}: 1 file removed, 1 kept (1 with a live writer)"
