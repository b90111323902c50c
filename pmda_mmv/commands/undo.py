"""What ``pmda-mmv install`` changes, kept so that a failure puts it back byte for byte:
:class:`Undo` copies pmcd.conf, ``$PCP_PMDAS_DIR/mmv``, the PMNS directory and PCP 7.2's
``local.conf`` and the pmieconf rules (each path's content, mode and owner, or its absence) into
``$PCP_PMDAS_DIR/.pmda-mmv-undo`` before the first change.  The copy is complete or absent
(made under a temporary name, then renamed): while it exists an install is under way or was
interrupted, and the next install or remove puts it back first (:func:`recover`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from pmda_mmv.commands import pmieconf
from pmda_mmv.commands.pmcdctl import local_conf, pmcd_rc, pmcd_running, reload_pmcd, say

UNDO = ".pmda-mmv-undo"


class Interrupted(Exception):
    """A signal (SIGTERM, SIGHUP) stopped the change."""


def watched(cfg: dict[str, str]) -> list[Path]:
    """What install may change: pmcd.conf, the agent directory, the PMNS, local.conf, the
    pmieconf rules."""
    return [
        Path(cfg["PCP_PMCDCONF_PATH"]),
        Path(cfg["PCP_PMDAS_DIR"]) / "mmv",
        Path(cfg["PCP_VAR_DIR"]) / "pmns",
        local_conf(cfg),
        pmieconf.rules_dir(cfg["PCP_VAR_DIR"]),
    ]


def undo_dir(cfg: dict[str, str]) -> Path:
    return Path(cfg["PCP_PMDAS_DIR"]) / UNDO


def _clone(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` (absent) with its symlinks, modes, times and owners."""
    if src.is_dir() and not src.is_symlink():
        dest.mkdir()
        for entry in src.iterdir():
            _clone(entry, dest / entry.name)
        shutil.copystat(src, dest)
    else:
        shutil.copy2(src, dest, follow_symlinks=False)
    st = os.lstat(src)
    os.lchown(dest, st.st_uid, st.st_gid)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class Undo:
    """The saved copy of :func:`watched` (see the module doc)."""

    def __init__(self, cfg: dict[str, str], paths: list[Path] | None = None) -> None:
        self.dir = undo_dir(cfg)
        self.paths = paths  # None: watched(cfg), read when the copy is taken
        self.cfg = cfg

    def take(self) -> None:
        tmp = self.dir.with_name(UNDO + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        paths = watched(self.cfg) if self.paths is None else self.paths
        for n, path in enumerate(paths):
            if path.exists() or path.is_symlink():
                _clone(path, tmp / str(n))
        (tmp / "paths").write_text(json.dumps([str(p) for p in paths]) + "\n")
        tmp.rename(self.dir)

    def restore(self) -> None:
        """Put every saved path back as it was (those absent before: removed); idempotent
        until it ends by removing the copy."""
        paths = json.loads((self.dir / "paths").read_text())
        for n, name in enumerate(paths):
            path, saved = Path(name), self.dir / str(n)
            _delete(path)
            if saved.exists() or saved.is_symlink():
                _clone(saved, path)
        shutil.rmtree(self.dir)

    def drop(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def pending(cfg: dict[str, str]) -> bool:
    """Whether an interrupted install left its copy (a copy not finished is dropped)."""
    shutil.rmtree(undo_dir(cfg).with_name(UNDO + ".tmp"), ignore_errors=True)
    return (undo_dir(cfg) / "paths").is_file()


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"interrupted by {signal.Signals(signum).name}")


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` (SIGINT: KeyboardInterrupt) inside."""
    old: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def roll_back(cfg: dict[str, str], saved: Undo, was_running: bool) -> None:
    """Put back what install changed; pmcd as it was (stopped again when install started
    it, else told to read pmcd.conf and the PMNS again)."""
    say("putting back pmcd.conf, the agent directory and the PMNS as they were")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # not stopped halfway again
        signal.signal(sig, signal.SIG_IGN)
    saved.restore()
    if not was_running:
        if pmcd_running():
            pmcd_rc(cfg, "stop")
    elif pmcd_running():
        reload_pmcd(cfg)


def recover(cfg: dict[str, str]) -> None:
    """Put back what an interrupted install left half changed (its undo copy)."""
    if pending(cfg):
        say(f"an interrupted install left {undo_dir(cfg)}: putting back what was there")
        Undo(cfg).restore()
        if pmcd_running():
            reload_pmcd(cfg)
