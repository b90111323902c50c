"""install's undo copy (:mod:`pmda_mmv.commands.undo`): what it saved comes back byte for
byte (contents, symlinks, modes, owners; what was absent is removed), a copy left by an
interrupted run is found and an unfinished one dropped; SIGTERM inside raises."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from pmda_mmv.commands.undo import UNDO, Interrupted, Undo, pending, signals_raise


def state(*roots: Path) -> list[tuple[str, ...]]:
    """Every path under ``roots``: type, mode, owner, link target or content digest."""
    found = []
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))] if root.exists() else []:
            st = path.lstat()
            what = (
                os.readlink(path)
                if path.is_symlink()
                else hashlib.sha256(path.read_bytes()).hexdigest()
                if path.is_file()
                else "dir"
            )
            found.append((str(path), oct(st.st_mode), str(st.st_uid), str(st.st_gid), what))
    return found


def setup(tmp_path: Path) -> tuple[dict[str, str], list[Path]]:
    pmdas = tmp_path / "pmdas"
    (pmdas / "mmv").mkdir(parents=True)
    (pmdas / "mmv" / "Install").symlink_to("/usr/lib/pcp/pmdas/mmv/Install")
    (pmdas / "mmv" / "data").write_bytes(b"stock\n")
    (pmdas / "mmv" / "data").chmod(0o640)
    os.chown(pmdas / "mmv" / "data", 0, 1)
    conf = tmp_path / "pmcd.conf"
    conf.write_text("mmv\t70\tdso\tmmv_init\t/x/pmda_mmv.so\n")
    cfg = {"PCP_PMDAS_DIR": str(pmdas)}
    return cfg, [conf, pmdas / "mmv", tmp_path / "local.conf"]


def test_restore_puts_back_byte_for_byte_and_removes_what_was_absent(tmp_path: Path) -> None:
    cfg, paths = setup(tmp_path)
    before = state(*paths)
    undo = Undo(cfg, paths)
    undo.take()
    assert pending(cfg)
    paths[0].write_text("mmv 70 pipe binary notready /x/pmdammv\n")
    (paths[1] / "Install").unlink()
    (paths[1] / "Install").write_text("ours\n")
    (paths[1] / "data").chmod(0o755)
    (paths[1] / ".pmda-mmv-stock").mkdir()
    paths[2].write_text("# was absent\n")
    assert state(*paths) != before
    Undo(cfg).restore()  # as the next run finds it
    assert state(*paths) == before
    assert not pending(cfg)


def test_an_unfinished_copy_is_dropped_not_restored(tmp_path: Path) -> None:
    cfg, _ = setup(tmp_path)
    unfinished = Path(cfg["PCP_PMDAS_DIR"]) / (UNDO + ".tmp")
    unfinished.mkdir()
    assert not pending(cfg)
    assert not unfinished.exists()


def test_sigterm_inside_raises_and_the_handler_is_put_back() -> None:
    old = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="SIGTERM"), signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 1)
    assert signal.getsignal(signal.SIGTERM) == old
