"""The agent's pmieconf rule group (``mmv``): its rule files, laid into
``$PCP_VAR_DIR/config/pmieconf/mmv`` by ``pmda-mmv install`` and taken out by ``pmda-mmv
remove`` (:mod:`.install`).

The rules (``deploy/pmieconf/mmv``; package data ``pmda_mmv/pmieconf`` in a wheel) are
disabled, as PCP's rules for optional agents are: ``pmieconf enable mmv`` (or one rule of
it) turns them on.  They read ``mmv.control.file.state_code`` (``--status-metrics``) and
``pmcd.agent.status``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

GROUP = "mmv"
"""The rule group, as ``pmieconf groups`` lists it: its directory's name."""
RULES = ("agent", "no_writer", "partial", "refused")
"""The group's rule files (rule ``mmv.<file>`` each)."""


def rules_source() -> Path:
    """The rule files: package data in a wheel (``pmda_mmv/pmieconf``), else the checkout's
    ``deploy/pmieconf/mmv`` (an editable install); FileNotFoundError when neither has them."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "pmieconf", here.parent / "deploy" / "pmieconf" / GROUP):
        if all((candidate / name).is_file() for name in RULES):
            return candidate
    raise FileNotFoundError(f"the pmieconf rules ({', '.join(RULES)}) are not installed in {here}")


def rules_dir(var_dir: str | Path) -> Path:
    """``$PCP_VAR_DIR/config/pmieconf/mmv``: where pmieconf finds the group."""
    return Path(var_dir) / "config" / "pmieconf" / GROUP


def lay_rules(source: Path, var_dir: str | Path) -> Path:
    """Copy the rule files from ``source`` into the group's directory under ``var_dir``
    (made when missing), each written aside and renamed over its name, mode 0644; returns
    the directory."""
    target = rules_dir(var_dir)
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    for name in RULES:
        tmp = target / f".{name}.pmda-mmv.tmp"
        tmp.write_bytes((source / name).read_bytes())
        tmp.chmod(0o644)
        os.replace(tmp, target / name)
    return target


def drop_rules(var_dir: str | Path) -> None:
    """Remove the rule files from the group's directory under ``var_dir``, and the
    directory when nothing else is left in it (idempotent)."""
    target = rules_dir(var_dir)
    for name in RULES:
        (target / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # gone already, or holding files of another's
        target.rmdir()
