"""The system pmcd as ``pmda-mmv install`` and ``remove`` drive it: PCP's configuration,
its scripts' environment, pmcd.conf's mmv line, and pmcd answering, started, stopped and
told to read its configuration again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: the caller's variables PCP's scripts (and the pmcd they start) must not inherit
CALLER_ONLY = ("PCP_ENV_DONE", "PMDA_MMV_REGISTRY")
PATH = "/usr/lib/pcp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class InstallError(Exception):
    """Why install or remove stopped (printed as ``pmda-mmv: ...``, exit 1)."""


def say(text: str) -> None:
    print(f"== {text}", flush=True)


def pcp_config() -> dict[str, str]:
    """PCP's configuration (pmGetConfig) for the variables used here."""
    from pcp.pmapi import pmContext

    names = ("PCP_PMDAS_DIR", "PCP_PMCDCONF_PATH", "PCP_RC_DIR", "PCP_LOG_DIR", "PCP_VAR_DIR")
    return {n: str(pmContext.pmGetConfig(n)) for n in (*names, "PCP_RUN_DIR", "PCP_SYSCONF_DIR")}


def local_conf(cfg: dict[str, str]) -> Path:
    """``$PCP_SYSCONF_DIR/local.conf`` (PCP 7.2+): the DSO agents local-context clients
    (``pminfo -L``) load, the C mmv agent among them."""
    return Path(cfg["PCP_SYSCONF_DIR"]) / "local.conf"


def script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of PCP's scripts: the caller's less :data:`CALLER_ONLY`, system PATH
    first (a pyenv python3 lacks python3-pcp); without systemd as init, pmcd is
    (re)started through $PCP_RC_DIR."""
    env = {k: v for k, v in os.environ.items() if k not in CALLER_ONLY}
    env["PATH"] = PATH
    if not os.path.isdir("/run/systemd/system"):
        env["PCP_SYSTEMDUNIT_DIR"] = "/nonexistent-pmda-mmv"
    env.update(extra or {})
    return env


STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""The signals that stop install: held while a script is being started."""


def _unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def run(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run a PCP script with no stdin, its output passed through; fail on a non-zero exit.
    It is started with the stopping signals held (a signal never leaves it running unknown
    to us) in our process group (what kills the group kills it); a signal that stops us
    kills it before we put anything back."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env or script_env(),
            stdin=subprocess.DEVNULL,
            preexec_fn=_unblock,
        )
        # a signal that came while held is raised here, as it is let through: the script
        # has started and is stopped with the rest below
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        status = proc.wait()
    except BaseException:
        if proc is not None:
            _kill_tree(proc)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if status:
        raise InstallError(f"{' '.join(argv)} in {cwd} exited {status}")


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill a script and every process it started (a subshell of PCP's Install survives
    its parent's SIGKILL and went on running ./pmdammv after the rollback): each is
    stopped first, so that none starts another while they are collected, then killed."""
    import psutil

    try:
        top = psutil.Process(proc.pid)
        top.suspend()
        tree = [top, *top.children(recursive=True)]
        for p in tree[1:]:
            p.suspend()
        tree += [c for c in top.children(recursive=True) if c not in tree]
    except psutil.Error:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()
    proc.kill()
    proc.wait()


def mmv_line(pmcdconf: Path) -> str:
    """The mmv line of pmcd.conf ('' when there is none)."""
    for line in pmcdconf.read_text().splitlines():
        if line.split()[:1] == ["mmv"]:
            return line
    return ""


def pmcd_running() -> bool:
    done = subprocess.run(
        ["pmcd_wait", "-h", "local:", "-t", "2"], env=script_env(), capture_output=True
    )
    return done.returncode == 0


def pmcd_answering_or_startable() -> bool:
    """Whether the system pmcd answers; when it does not, whether it may be started here:
    refused (before anything changes) when other pmcd processes run (its rc script would
    stop them all)."""
    if pmcd_running():
        return True
    others = subprocess.run(["pgrep", "-x", "pmcd"], capture_output=True, text=True).stdout
    if others.split():
        raise InstallError(
            f"the system pmcd is not answering but other pmcd processes run "
            f"({' '.join(others.split())}); start it yourself (service pmcd start)"
        )
    return False


def pmcd_rc(cfg: dict[str, str], action: str) -> int:
    """``$PCP_RC_DIR/pmcd ACTION`` (start, stop), all its output on stdout (stderr keeps
    the one line that says why install or remove stopped); its exit status."""
    env = script_env() | {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"}
    argv = [f"{cfg['PCP_RC_DIR']}/pmcd", action]
    return subprocess.run(
        argv, cwd="/", env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT
    ).returncode


def start_pmcd(cfg: dict[str, str]) -> None:
    """Start the system pmcd through its rc script (InstallError when it does not answer)."""
    say("starting pmcd")
    pmcd_rc(cfg, "start")
    wait = ["pmcd_wait", "-h", "local:", "-t", "60"]
    done = subprocess.run(wait, env=script_env(), stderr=subprocess.STDOUT)
    if done.returncode:
        raise InstallError(f"pmcd did not start; see {cfg['PCP_LOG_DIR']}/pmcd/pmcd.log")


def reload_pmcd(cfg: dict[str, str]) -> None:
    """SIGHUP the system pmcd (its pid file): it reads pmcd.conf and the PMNS again."""
    pid = Path(cfg["PCP_RUN_DIR"], "pmcd.pid").read_text().split()[0]
    os.kill(int(pid), signal.SIGHUP)


def put_mmv_line(pmcdconf: Path, line: str) -> None:
    """pmcd.conf with its mmv line replaced by ``line`` ('' removes it), written
    atomically, mode and owner kept; in the [access] section's absence the line ends the
    agents' part (before any ``[`` section)."""
    lines = pmcdconf.read_text().splitlines()
    kept = [x for x in lines if x.split()[:1] != ["mmv"]]
    if line:
        at = next((n for n, x in enumerate(kept) if x.startswith("[")), len(kept))
        old = next((n for n, x in enumerate(lines) if x.split()[:1] == ["mmv"]), None)
        at = min(at, old) if old is not None else at
        kept.insert(at, line)
    tmp = pmcdconf.with_name(pmcdconf.name + ".pmda-mmv")
    tmp.write_text("".join(x + "\n" for x in kept))
    st = pmcdconf.stat()
    os.chown(tmp, st.st_uid, st.st_gid)
    tmp.chmod(st.st_mode & 0o7777)
    tmp.rename(pmcdconf)
