"""``pmda-mmv remove``: take pmda-mmv out of the system pmcd and put the stock C mmv agent
back (see :mod:`~.install`); needs neither a running pmcd nor an intact PMNS."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from pmda_mmv.commands import pmieconf
from pmda_mmv.commands.install import (
    AGENT_FILES,
    NAMES,
    PYTHON_LINK,
    STOCK,
    need_root,
    pmns_file,
)
from pmda_mmv.commands.pmcdctl import (
    InstallError,
    local_conf,
    mmv_line,
    pcp_config,
    pmcd_running,
    put_mmv_line,
    reload_pmcd,
    run,
    say,
)
from pmda_mmv.commands.undo import recover


def remove() -> None:
    """Take pmda-mmv out of the system pmcd and put the stock mmv agent back: its files,
    its pmcd.conf line as it was, the PMNS file install added removed; pmcd (when it runs)
    told to read pmcd.conf again.  Needs neither a running pmcd nor an intact PMNS."""
    need_root()
    cfg = pcp_config()
    recover(cfg)
    mmvdir = Path(cfg["PCP_PMDAS_DIR"]) / "mmv"
    stock = mmvdir / STOCK
    if not stock.is_dir():
        say(f"pmda-mmv is not installed (no {stock}); nothing to do")
        return
    say(f"restoring the stock {mmvdir}")
    line = (stock / "pmcd.line").read_text().strip()
    pmns_absent = (stock / "pmns.absent").exists()
    _restore_stock_files(mmvdir, stock)
    running = pmcd_running()
    _put_line_back(cfg, line, running)
    if pmns_absent:  # pmdaproc.sh's Install left it; the PMNS root's mmv subtree is the same
        pmns_file(cfg).unlink(missing_ok=True)
    local = stock / "local.line"
    if local.is_file() and local_conf(cfg).is_file():
        put_mmv_line(local_conf(cfg), local.read_text().strip())
        say(f"{local_conf(cfg)}: the mmv line is back (local-context clients)")
    shutil.rmtree(stock)
    pmieconf.drop_rules(cfg["PCP_VAR_DIR"])  # pmda-mmv: pmieconf rules
    if not running:
        say("pmcd is not running: it starts the stock mmv agent when it starts")
    elif not _agents_gone(cfg):
        say("warning: pmda-mmv's agent still runs; pmcd stops it when it reads pmcd.conf")
    say("pmda-mmv is removed")


def _put_line_back(cfg: dict[str, str], line: str, running: bool) -> None:
    """The stock mmv line back: with pmcd running and a DSO line, by the stock ``Install``
    (it also puts the names back in the PMNS); otherwise, or when that fails, written
    into pmcd.conf as it was, and pmcd (when it runs) told to read it."""
    mmvdir = Path(cfg["PCP_PMDAS_DIR"]) / "mmv"
    pmcdconf = Path(cfg["PCP_PMCDCONF_PATH"])
    if running and line.split()[2:3] == ["dso"]:
        say(f"putting the stock mmv line back: running the stock {mmvdir}/Install")
        try:
            run(["./Install"], mmvdir)
            say(f"pmcd.conf: {mmv_line(pmcdconf)}")
            return
        except InstallError as e:
            say(f"warning: {e}; writing the stock line into pmcd.conf instead")
    put_mmv_line(pmcdconf, line)
    say(f"pmcd.conf: {mmv_line(pmcdconf) or '(no mmv line, as before install)'}")
    if running:
        reload_pmcd(cfg)


def _agents_gone(cfg: dict[str, str]) -> bool:
    """Whether the system pmcd runs no pmda-mmv agent (a child named as the agent run by a
    Python interpreter); waits up to 10 s for pmcd to stop it."""
    import psutil

    try:
        pid = int(Path(cfg["PCP_RUN_DIR"], "pmcd.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return True  # no pmcd to run it
    for _ in range(100):
        try:
            children = psutil.Process(pid).children()
            ours = [p for p in children if p.name() in NAMES and "python" in p.exe()]
        except psutil.Error:
            ours = []
        if not ours:
            return True
        time.sleep(0.1)
    return False


def _restore_stock_files(mmvdir: Path, stock: Path) -> None:
    """The agent's files out of ``mmvdir``, the saved stock ones back (copies: a remove
    interrupted here can run again)."""
    for name in (*AGENT_FILES, PYTHON_LINK):
        (mmvdir / name).unlink(missing_ok=True)
    for entry in (stock / "files").iterdir():
        dest = mmvdir / entry.name
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.is_dir():
            shutil.rmtree(dest)
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, dest, symlinks=True)
        else:
            shutil.copy2(entry, dest, follow_symlinks=False)
