"""``pmda-mmv install`` and ``pmda-mmv remove``: make the running interpreter's pmda-mmv PCP's
mmv agent (domain 70) under the system pmcd, and put the stock C agent back.

The one implementation of the switch-over: the checkout's ``./Install`` and ``./Remove``, a
pip-installed venv and the Debian package all run it.

install (idempotent, as root), all or nothing: every check that can fail (the agent's
modules importable by the named interpreter, pmcd.conf, the agent directory and the PMNS
writable, pmcd answering or startable) runs before anything changes; then
:class:`~.undo.Undo` copies what may change, and any failure after that (a step below, a
signal) puts it back byte for byte and pmcd as it was.  A copy left by an interrupted
install (SIGKILL, a power cut) is put back by the next install or remove.

1. names the interpreter ``pmdammv`` so that pmdaproc.sh's Remove finds the agent by name:
   in a venv ``<venv>/bin/pmdammv -> python`` (python still finds the venv's pyvenv.cfg);
   outside a venv ``<prefix>/libexec/pmda-mmv/pmdammv``, which the Debian package ships;
2. starts pmcd when it is not running;
3. the first time, saves the stock ``$PCP_PMDAS_DIR/mmv`` (symlinks into the pcp package)
   and the stock pmcd.conf mmv line in ``$PCP_PMDAS_DIR/mmv/.pmda-mmv-stock``;
4. lays the agent's files (launcher ``pmdammv``, ``Install``, ``Remove``, ``root_mmv``,
   ``domain.h``) over ``$PCP_PMDAS_DIR/mmv`` with ``pmda-mmv-python``, a symlink to the named
   interpreter of step 1: no machine-wide record, the agent directory says which venv runs;
5. runs that directory's ``Install`` (pmdaproc.sh), which replaces the mmv line in pmcd.conf
   by ``mmv 70 pipe binary notready $PCP_PMDAS_DIR/mmv/pmdammv -d 70 --notready [OPTION..]``;
6. waits until pmcd serves ``mmv.control.files`` from it.
7. lays the agent's pmieconf rules (disabled) in ``$PCP_VAR_DIR/config/pmieconf/mmv``
   (:mod:`.pmieconf`).

install --refresh (the Debian package's postinst, after an upgrade of it or of pcp) installs
again with the current line's options, only when installed from this interpreter.

remove (idempotent, as root) needs neither a running pmcd nor an intact PMNS: it restores
the saved stock files and pmcd.conf line (as it was), removes ``$PCP_VAR_DIR/pmns/mmv``
when pmdaproc.sh's Install added it (the PMNS root's mmv subtree is the C agent's too) and,
when pmcd runs, tells it to read pmcd.conf again (it stops the agent, starts the stock
one); the pmieconf rules go.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pmda_mmv.commands import pmieconf
from pmda_mmv.commands.pmcdctl import (
    InstallError,
    local_conf,
    mmv_line,
    pcp_config,
    pmcd_answering_or_startable,
    put_mmv_line,
    run,
    say,
    script_env,
    start_pmcd,
)
from pmda_mmv.commands.undo import (
    Interrupted,
    Undo,
    recover,
    roll_back,
    signals_raise,
    watched,
)

#: the agent's files, laid over $PCP_PMDAS_DIR/mmv (see deploy/pmdas/mmv)
AGENT_FILES = ("Install", "Remove", "pmdammv", "root_mmv", "domain.h")
#: in the agent directory: symlink to the interpreter the launcher runs
PYTHON_LINK = "pmda-mmv-python"
EXECUTABLES = ("Install", "Remove", "pmdammv")
STOCK = ".pmda-mmv-stock"
#: the process names of the agent (the launcher's two names)
NAMES = ("pmdammv", "pmdapmproxy")


def agent_source() -> Path:
    """The agent's files: package data in a wheel (``pmda_mmv/pmdadir``), else the checkout's
    ``deploy/pmdas/mmv`` (an editable install)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "pmdadir", here.parent / "deploy" / "pmdas" / "mmv"):
        if all((candidate / f).is_file() for f in AGENT_FILES):
            return candidate
    raise InstallError(f"the agent's files ({', '.join(AGENT_FILES)}) are not installed in {here}")


def named_interpreter() -> Path:
    """The interpreter as ``pmdammv`` (made here for a venv; shipped by the Debian package)."""
    prefix = Path(sys.prefix)
    if sys.prefix != sys.base_prefix:  # a venv
        for name in NAMES:
            link = prefix / "bin" / name
            if not (link.is_symlink() and os.readlink(link) == "python"):
                link.unlink(missing_ok=True)
                link.symlink_to("python")
        return prefix / "bin" / "pmdammv"
    named = prefix / "libexec" / "pmda-mmv" / "pmdammv"
    if not named.exists():
        raise InstallError(
            f"{sys.executable} is not a venv's and {named} is missing: install pmda-mmv in a venv "
            "(python3 -m venv --system-site-packages) or from the Debian package"
        )
    return named


def pmns_file(cfg: dict[str, str]) -> Path:
    """``$PCP_VAR_DIR/pmns/mmv``: pmdaproc.sh's Install writes it (and merges it into the
    PMNS root), the stock pcp package has none."""
    return Path(cfg["PCP_VAR_DIR"]) / "pmns" / "mmv"


def need_root() -> None:
    if os.geteuid() != 0:
        raise InstallError("must be run as root (it changes the system pmcd)")


def install(agent_options: Sequence[str]) -> None:
    """Make this interpreter's pmda-mmv the system pmcd's mmv agent (see the module doc):
    every check that can fail first, then the change, undone on any failure."""
    need_root()
    source = agent_source()
    try:  # pmda-mmv: pmieconf rules (checked before anything changes)
        pmieconf.rules_source()
    except FileNotFoundError as e:
        raise InstallError(str(e)) from None
    named = named_interpreter()
    check = subprocess.run(
        [named, "-P", "-c", "import pcp.pmda, watchdog, psutil, pmda_mmv.agent.pmda"],
        capture_output=True,
        text=True,
    )
    if check.returncode:
        raise InstallError(f"{named} cannot import the agent's modules:\n{check.stderr}")
    cfg = pcp_config()
    mmvdir = Path(cfg["PCP_PMDAS_DIR"]) / "mmv"
    if not mmvdir.is_dir():
        raise InstallError(f"{mmvdir} is missing: is the pcp package installed?")
    recover(cfg)
    writable(cfg)
    was_running = pmcd_answering_or_startable()
    saved = Undo(cfg)
    saved.take()
    try:
        with signals_raise():
            _switch(cfg, source, named, agent_options, was_running)
    except (InstallError, Interrupted, OSError, KeyboardInterrupt) as e:
        roll_back(cfg, saved, was_running)
        why = str(e) or type(e).__name__
        raise InstallError(f"{why}; pmcd.conf, {mmvdir} and the PMNS are as before") from e
    saved.drop()
    how = remove_command(sys.argv[0], shutil.which("pmda-mmv"), sys.executable)
    say(f"pmda-mmv is installed; {how} puts the stock mmv agent back")


def writable(cfg: dict[str, str]) -> None:
    """InstallError unless pmcd.conf, the agent directory and the PMNS can be changed."""
    for path in watched(cfg)[:3]:
        target = path if path.is_dir() else path.parent
        if not os.access(target, os.W_OK) or (path.is_file() and not os.access(path, os.W_OK)):
            raise InstallError(f"{path} cannot be changed (read-only?); nothing was changed")


def _switch(
    cfg: dict[str, str], source: Path, named: Path, options: Sequence[str], running: bool
) -> None:
    """The change itself: pmcd started, the stock saved, the agent laid and installed."""
    mmvdir = Path(cfg["PCP_PMDAS_DIR"]) / "mmv"
    pmcdconf = Path(cfg["PCP_PMCDCONF_PATH"])
    if not running:
        start_pmcd(cfg)
    if not (mmvdir / STOCK).is_dir():
        _save_stock(mmvdir, pmcdconf, cfg)
    _lay_agent(source, mmvdir, named)
    words = " ".join(options)
    say(f"running {mmvdir}/Install (agent options: '{words}')")
    run(["./Install"], mmvdir, script_env({"PMDA_MMV_OPTIONS": words}))
    line = mmv_line(pmcdconf)
    if f"{mmvdir}/pmdammv" not in line:
        raise InstallError(f"pmcd.conf has no pmda-mmv line after Install (mmv line: '{line}')")
    if local_conf(cfg).is_file() and mmv_line(local_conf(cfg)):
        put_mmv_line(local_conf(cfg), "")
        say(f"{local_conf(cfg)}: the C agent's mmv line taken out (docs/install.md)")
    probe = wait_served(cfg)
    say(f"pmcd.conf: {line}")
    say(f"pmprobe: {probe.strip()}")
    laid = pmieconf.lay_rules(pmieconf.rules_source(), cfg["PCP_VAR_DIR"])
    say(f"pmieconf rules (disabled; 'pmieconf enable {pmieconf.GROUP}'): {laid}")


def remove_command(argv0: str, on_path: str | None, python: str) -> str:
    """``remove`` as install was run (``argv0``): ``pmda-mmv remove`` when that console
    script is the ``pmda-mmv`` on PATH (``on_path``), its own path otherwise (a wheel's
    venv); run as ``python -m pmda_mmv`` (the checkout's ./Install), the checkout's
    ./Remove or the same module."""
    if Path(argv0).name != "pmda-mmv":
        return f"'./Remove' in a checkout ('{python} -m pmda_mmv remove')"
    if on_path and Path(on_path).resolve() == Path(argv0).resolve():
        return "'pmda-mmv remove'"
    return f"'{argv0} remove'"


def _save_stock(mmvdir: Path, pmcdconf: Path, cfg: dict[str, str]) -> None:
    """Keep the stock ``mmvdir`` and pmcd.conf's mmv line in ``mmvdir/{STOCK}``."""
    stock = mmvdir / STOCK
    say(f"saving the stock {mmvdir} and pmcd.conf mmv line in {stock}")
    tmp = stock.with_name(STOCK + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "files").mkdir(parents=True)
    for entry in mmvdir.iterdir():
        if not entry.name.startswith(STOCK):
            dest = tmp / "files" / entry.name
            if entry.is_symlink() or not entry.is_dir():
                shutil.copy2(entry, dest, follow_symlinks=False)
            else:
                shutil.copytree(entry, dest, symlinks=True)
    line = mmv_line(pmcdconf)
    (tmp / "pmcd.line").write_text(line + "\n" if line else "")
    if not pmns_file(cfg).exists():  # pmdaproc.sh's Install leaves it: remove drops it
        (tmp / "pmns.absent").touch()
    if local_conf(cfg).is_file():  # PCP 7.2+: the DSO local-context clients load
        (tmp / "local.line").write_text(mmv_line(local_conf(cfg)) + "\n")
    tmp.rename(stock)


def _lay_agent(source: Path, mmvdir: Path, named: Path) -> None:
    """Copy the agent's files from ``source`` over ``mmvdir``, run by ``named``."""
    say(f"laying {source} over {mmvdir} (interpreter {named})")
    for name in AGENT_FILES:
        src, dest = source / name, mmvdir / name
        dest.unlink(missing_ok=True)
        shutil.copyfile(src, dest)
        os.chown(dest, 0, 0)
        dest.chmod(0o755 if name in EXECUTABLES else 0o644)
    link = mmvdir / PYTHON_LINK
    link.unlink(missing_ok=True)
    link.symlink_to(named)


def wait_served(cfg: dict[str, str]) -> str:
    """pmprobe's line once pmcd serves mmv.control.files (InstallError after 30 s)."""
    # the agent starts, scans, then tells pmcd it is ready: allow it some time
    for _ in range(30):
        probe = subprocess.run(
            ["pmprobe", "-v", "mmv.control.files"], capture_output=True, text=True, env=script_env()
        ).stdout
        if probe.startswith("mmv.control.files 1 "):
            break
        time.sleep(1)
    else:
        raise InstallError(
            f"pmcd does not serve mmv.control.files; see {cfg['PCP_LOG_DIR']}/pmcd/mmv.log"
        )
    return probe


def installed_options(line: str, launcher: Path) -> list[str] | None:
    """The agent options of pmda-mmv's pmcd.conf line (what follows ``-d 70 --notready``),
    or None when ``line`` does not start our launcher."""
    words = line.split()
    if str(launcher) not in words:
        return None
    rest = words[words.index(str(launcher)) + 1 :]
    for fixed in (["-d", "70"], ["--notready"]):
        if rest[: len(fixed)] == fixed:
            rest = rest[len(fixed) :]
    return rest


def refresh() -> None:
    """After an upgrade (of this package, or of pcp, which puts its own files back over
    ``$PCP_PMDAS_DIR/mmv``): install again, with the options of the current pmcd.conf
    line, when pmda-mmv is installed from this interpreter; otherwise do nothing."""
    need_root()
    cfg = pcp_config()
    mmvdir = Path(cfg["PCP_PMDAS_DIR"]) / "mmv"
    link = mmvdir / PYTHON_LINK
    if not (mmvdir / STOCK).is_dir():
        say("pmda-mmv is not installed; nothing to refresh")
        return
    named = named_interpreter()
    if not link.is_symlink() or os.readlink(link) != str(named):
        theirs = os.readlink(link) if link.is_symlink() else "(none)"
        say(f"pmda-mmv is installed from another interpreter ({theirs}); leaving it")
        return
    options = installed_options(mmv_line(Path(cfg["PCP_PMCDCONF_PATH"])), mmvdir / "pmdammv")
    install(options or [])


def parser(command: str) -> argparse.ArgumentParser:
    """The argument parser of ``pmda-mmv install`` or ``pmda-mmv remove``."""
    if command == "install":
        p = argparse.ArgumentParser(
            prog="pmda-mmv install",
            usage="pmda-mmv install [-h] [--refresh | AGENT_OPTION ...]",
            description="As root: make this interpreter's pmda-mmv the system pmcd's mmv agent "
            "(pmcd.conf: mmv 70 pipe binary notready $PCP_PMDAS_DIR/mmv/pmdammv -d 70 "
            "--notready [AGENT_OPTION ...]), saving the stock C agent's files and line.",
            epilog="AGENT_OPTION: options of 'pmda-mmv pmda' for the pmcd.conf line, such as "
            "--status-metrics or --owners USERS. Idempotent; 'pmda-mmv remove' undoes it.",
        )
        p.add_argument(
            "--refresh",
            action="store_true",
            help="only if pmda-mmv is installed from this interpreter: install again with the "
            "agent options of the current pmcd.conf line (after an upgrade of pmda-mmv or pcp)",
        )
    else:
        p = argparse.ArgumentParser(
            prog="pmda-mmv remove",
            description="As root: take pmda-mmv out of the system pmcd and put the stock C mmv "
            "agent (its files and pmcd.conf line) back. Idempotent.",
        )
        p.set_defaults(refresh=False)
    return p


def main(command: str, argv: Sequence[str]) -> int:
    """``pmda-mmv install`` / ``pmda-mmv remove``; returns the exit status."""
    p = parser(command)
    try:
        ns, rest = p.parse_known_args(argv)
        if (command == "remove" or ns.refresh) and rest:
            p.error(f"unrecognized arguments: {' '.join(rest)}")
        if command == "install":
            from pmda_mmv.agent.options import parse_args as agent_args

            # validate the agent options as the agent will read them (exits 2 on an error,
            # --owners and --family included)
            agent_args(["-d", "70", "--notready", *rest])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        if ns.refresh:
            refresh()
        elif command == "install":
            install(rest)
        else:
            from pmda_mmv.commands.remove import remove

            remove()
    except InstallError as e:
        print(f"pmda-mmv {command}: {e}", file=sys.stderr)
        return 1
    return 0
