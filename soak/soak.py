"""Soak test of pmda-mmv under a private pmcd: 100 writers churn files while a client fetches.

    soak/run [--minutes 10] [--procs 5] [--slots 20] [--permanent 2] [--keep]
             [--sighup SECONDS] [--agent ours|c]

Steps: start a private pmcd (tests/support/pmcd.py) with pmda-mmv serving its own MMV directory;
start ``--procs`` writer processes (soak/writer.py, python3-pcp ``pcp.mmv`` on libpcp_mmv)
of ``--slots`` writers each, ``--permanent`` of which keep one file for the whole run; fetch
until the permanent files are served and sample the agent (open descriptors, mappings in
/proc/PID/maps, RSS); let the writers churn for ``--minutes`` while a client loop runs
``pmprobe -v mmv`` back to back; stop the churn (its files are deleted), fetch again and
sample the agent a second time.

Passes (exit 0) when the agent is the same process, no fetch failed or missed a value of a
permanent file, the permanent counters kept moving, and descriptors, mappings and RSS are
back near their start (limits below).  Prints and writes a JSON summary to
soak/results/soak-<date>.json.  Each agent start logs to its own ``mmv.<pid>.log``, so that
if pmcd restarts a dead agent the dead one's log is kept; ``--sighup`` also SIGHUPs pmcd as
PCP's Install scripts do; ``--agent c`` runs PCP's C pmdammv instead, for comparison.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from tests.support.pmcd import AgentSpec, PrivatePmcd, c_agent, make_dir, our_agent  # noqa: E402

FD_SLACK = 2  # descriptors: the directory watch may be re-armed
MAPS_SLACK = 8  # mappings: late imports, the allocator's arenas
RSS_SLACK = 16 << 20  # bytes: allocator fragmentation, interned names, stable-id tables


@dataclass
class Sample:
    fds: int
    maps: int
    rss: int

    @classmethod
    def of(cls, pid: int) -> Sample | None:
        """The process's descriptors, mappings and RSS; None when it is gone."""
        try:
            proc = psutil.Process(pid)
            with open(f"/proc/{pid}/maps") as f:
                maps = sum(1 for _ in f)
            return cls(proc.num_fds(), maps, proc.memory_info().rss)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return None


@dataclass
class Client:
    """``pmprobe -v mmv`` in a loop; counts per outcome, failures of permanent files."""

    pmcd: PrivatePmcd
    permanent: list[str]
    fetches: int = 0
    values: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    last: dict[str, int] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)

    def fetch_once(self) -> None:
        out = probe(self.pmcd, "mmv")
        self.fetches += 1
        seen: dict[str, str] = {}
        if out.stderr.startswith("not UTF-8:"):
            self.failures.append(f"fetch {self.fetches}: {out.stderr[:300]}")
        for line in out.stdout.splitlines():
            name, _, rest = line.partition(" ")
            seen[name] = rest
            count = rest.split(" ", 1)[0]
            self.values["ok" if count.lstrip("-").isdigit() and int(count) > 0 else "error"] += 1
        if out.returncode != 0:
            self.failures.append(f"pmprobe exit {out.returncode}: {out.stderr.strip()}")
        for stem in self.permanent:
            for metric, want in (("counter", 1), ("gauge", 3), ("ratio", 1), ("label", 1)):
                got = seen.get(f"mmv.{stem}.{metric}", "missing")
                if not got.startswith(f"{want} "):
                    self.failures.append(f"fetch {self.fetches}: mmv.{stem}.{metric}: {got}")
            counter = seen.get(f"mmv.{stem}.counter", "").split(" ")
            if len(counter) == 2 and counter[1].isdigit():
                value = int(counter[1])
                if stem in self.last and value != self.last[stem]:
                    self.moved.add(stem)
                self.last[stem] = value

    def loop(self) -> None:
        while not self.done.is_set():
            self.fetch_once()


def probe(pmcd: PrivatePmcd, *metrics: str) -> subprocess.CompletedProcess[str]:
    """``pmprobe -v`` whose output is decoded with backslash escapes, so that bytes which
    are not UTF-8 (which pmcd should never send) are kept and reported, not fatal."""
    raw = subprocess.run(
        ["pmprobe", "-h", pmcd.host, "-v", *metrics], capture_output=True, timeout=120
    )
    stdout = raw.stdout.decode("utf-8", "backslashreplace")
    stderr = raw.stderr.decode("utf-8", "backslashreplace")
    try:
        raw.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.stdout[: e.start].count(b"\n")
        stderr = f"not UTF-8: line {stdout.splitlines()[line]!r}\n{stderr}"
    return subprocess.CompletedProcess(raw.args, raw.returncode, stdout, stderr)


def agent_spec(mmv_dir: Path, heaptrack: Path | None = None) -> AgentSpec:
    """our_agent, logging to mmv.<pid>.log: if pmcd restarts a dead agent (it does on any
    SIGHUP), the dead one's log is kept.  With ``heaptrack``, run under heaptrack(1),
    its profile written to ``heaptrack/heaptrack.mmv.<pid>.zst``."""
    spec = our_agent(mmv_dir, "--status-metrics")
    argv = [a if a != "mmv.log" else "mmv.$$.log" for a in spec.argv]
    if heaptrack is not None:  # heaptrack talks on stdout: the agent gets pmcd's pipe as fd 3
        boot = "import os,runpy; os.dup2(3,1); os.close(3); runpy.run_module('pmda_mmv', "
        boot += "run_name='__main__', alter_sys=True)"
        out = str(heaptrack / "heaptrack.mmv.$$")
        argv = ["heaptrack", "-o", out, argv[0], "-P", "-c", boot, *argv[4:]]
    script = " ".join(a if "$$" in a else shlex.quote(a) for a in argv)
    if heaptrack is not None:
        script = f"3>&1 1>&2 {script}"
    return AgentSpec(spec.name, spec.domain, ("/bin/sh", "-c", f"exec {script}"), notready=True)


def rss_loop(pid: int, every: float, client: Client, series: list[int]) -> None:
    """Sample the agent's RSS (KiB) every ``every`` seconds while the client runs."""
    while not client.done.wait(every):
        try:
            series.append(psutil.Process(pid).memory_info().rss >> 10)
        except psutil.Error:
            return


def sighup_loop(pmcd: PrivatePmcd, every: float, client: Client) -> None:
    """SIGHUP this pmcd every ``every`` seconds, as PCP's Install/Remove scripts
    (``pmsignal -a -s HUP pmcd``) do to every pmcd on the machine."""
    while not client.done.wait(every):
        if pmcd.proc is not None:
            pmcd.proc.send_signal(signal.SIGHUP)


def agent_restarts(pmcd: PrivatePmcd) -> list[str]:
    """pmcd's log lines about agents it cleaned up (an agent that died or misbehaved)."""
    return [ln for ln in pmcd.pmcd_log().splitlines() if ln.startswith("Cleanup ")]


def served_files(pmcd: PrivatePmcd) -> str:
    """mmv.control.files, or pminfo's complaint when the agent does not answer."""
    try:
        return pmcd.fetch("mmv.control.files")[None]
    except AssertionError as e:
        return str(e).strip()[-200:]


def agent_pid(pmcd: PrivatePmcd) -> int:
    """The agent's PID (exactly one agent runs)."""
    pids = agent_pids(pmcd)
    assert len(pids) == 1, pids
    return pids.pop()


def agent_pids(pmcd: PrivatePmcd) -> set[int]:
    """The agents' PIDs: pmcd's children, or their descendants when run under heaptrack."""
    candidates = [psutil.Process(p) for p in pmcd.agent_processes()]
    candidates += [c for p in list(candidates) for c in p.children(recursive=True)]
    pids = {
        p.pid
        for p in candidates
        if p.name() == "pmdammv-reference"
        or (p.name().startswith("python") and "pmda_mmv" in " ".join(p.cmdline()))
    }
    return pids


def start_writers(a: argparse.Namespace, mmv_dir: Path) -> list[subprocess.Popen[str]]:
    writers = []
    for proc in range(a.procs):
        argv = [sys.executable, str(CHECKOUT / "soak" / "writer.py"), "--dir", str(mmv_dir)]
        argv += ["--proc", str(proc), "--slots", str(a.slots)]
        argv += ["--permanent", str(a.permanent), "--seconds", str(a.minutes * 60)]
        writers.append(
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for w in writers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    return writers


def tell(writers: list[subprocess.Popen[str]], word: str) -> None:
    for w in writers:
        assert w.stdin is not None
        w.stdin.write(word + "\n")
        w.stdin.flush()


def run(a: argparse.Namespace, work: Path) -> dict[str, object]:
    mmv_dir = make_dir(work / "tmp" / "mmv")
    spec = c_agent(mmv_dir.parent) if a.agent == "c" else agent_spec(mmv_dir, a.heaptrack)
    pmcd = PrivatePmcd(work / "pmcd", [spec])
    pmcd.start()
    writers: list[subprocess.Popen[str]] = []
    try:
        pid = agent_pid(pmcd)
        writers = start_writers(a, mmv_dir)
        permanent = [f"perm_{p}_{k}" for p in range(a.procs) for k in range(a.permanent)]
        client = Client(pmcd, permanent)
        for _ in range(20):  # warm-up: every permanent file served, caches filled
            client.fetch_once()
        client.failures.clear()
        start = Sample.of(pid)
        assert start is not None, "the agent died during the warm-up"
        thread = threading.Thread(target=client.loop, daemon=True)
        rss_series: list[int] = []
        sampler = threading.Thread(
            target=rss_loop, args=(pid, 30.0, client, rss_series), daemon=True
        )
        hups = threading.Thread(target=sighup_loop, args=(pmcd, a.sighup, client), daemon=True)
        began = time.monotonic()
        tell(writers, "go")
        thread.start()
        sampler.start()
        if a.sighup:
            hups.start()
        churn = []
        for w in writers:
            assert w.stdout is not None
            while (line := w.stdout.readline().strip()) != "quiet":
                assert line, "a writer died"
            churn.append(json.loads(w.stdout.readline()))
        client.done.set()
        thread.join(300)
        churned = time.monotonic() - began
        for _ in range(20):  # the agent drops the deleted files at these requests
            client.fetch_once()
        end = Sample.of(pid)
        log = "".join(p.read_text(errors="replace") for p in pmcd.log_dir.glob("mmv.*.log"))
        summary: dict[str, object] = {
            "minutes": a.minutes,
            "writers": a.procs * a.slots,
            "writer_processes": a.procs,
            "permanent_files": len(permanent),
            "churn_seconds": round(churned, 1),
            "files_created": sum(c["created"] for c in churn),
            "files_deleted": sum(c["deleted"] for c in churn),
            "new_names": sum(c["renamed"] for c in churn),
            "writer_updates": sum(c["updates"] for c in churn),
            "fetches": client.fetches,
            "values": dict(client.values),
            "permanent_failures": len(client.failures),
            "first_failures": client.failures[:10],
            "permanent_moved": f"{len(client.moved)}/{len(permanent)}",
            "agent_same_pid": agent_pids(pmcd) == {pid},
            "pmcd_cleanups": agent_restarts(pmcd)[:10],
            "pmcd_sighups": pmcd.pmcd_log().count("pmcd RESTARTED"),
            "rss_kib_every_30s": rss_series,
            "start": asdict(start),
            "end": asdict(end) if end else None,
            "served_files_end": served_files(pmcd),
            "agent_log_lines": len(log.splitlines()),
            "agent_log_errors": Counter(
                ln.split(" Error: ", 1)[1].split(":")[-1].strip()[:60]
                for ln in log.splitlines()
                if " Error: " in ln
            ).most_common(8),
        }
        summary["pass"] = verdict(summary, start, end, len(permanent), len(client.moved))
        return summary
    finally:
        for w in writers:
            if w.stdin:
                w.stdin.close()
        for w in writers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        pmcd.stop()


def verdict(s: dict[str, object], start: Sample, end: Sample | None, perm: int, moved: int) -> bool:
    checks = {
        "same agent process": s["agent_same_pid"] is True,
        "no failed fetch of a permanent file": s["permanent_failures"] == 0,
        "permanent counters moved": moved == perm,
        "only permanent files served at the end": s["served_files_end"] == str(perm),
    }
    if end is None:
        checks["the agent is still running (its resources can be compared)"] = False
    else:
        checks |= {
            f"descriptors back (start {start.fds}, end {end.fds})": end.fds <= start.fds + FD_SLACK,
            f"mappings back (start {start.maps}, end {end.maps})": end.maps
            <= start.maps + MAPS_SLACK,
            f"RSS back (start {start.rss >> 10} KiB, end {end.rss >> 10} KiB)": end.rss
            <= start.rss + RSS_SLACK,
        }
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    return all(checks.values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--procs", type=int, default=5, help="writer processes")
    p.add_argument("--slots", type=int, default=20, help="writers per process")
    p.add_argument("--permanent", type=int, default=2, help="permanent files per process")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--agent",
        choices=["ours", "c"],
        default="ours",
        help="the agent: pmda-mmv (default) or PCP's C pmdammv, for comparison",
    )
    p.add_argument(
        "--sighup", type=float, default=0, help="also SIGHUP pmcd every N seconds (default: no)"
    )
    p.add_argument(
        "--heaptrack",
        type=Path,
        metavar="DIR",
        help="run pmda-mmv under heaptrack(1), its profile written to DIR",
    )
    a = p.parse_args()
    work = make_dir(Path(tempfile.mkdtemp(prefix="pmda-mmv-soak-", dir="/tmp")))
    summary = run(a, work)
    text = json.dumps(summary, indent=2)
    print(text)
    results = make_dir(CHECKOUT / "soak" / "results")
    (results / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text + "\n")
    if a.keep or not summary["pass"]:
        print(f"work directory kept: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
