"""The C reference: PCP's own ``pmda_mmv.so`` and ``mmvdump`` of this installation.

They come from the pcp package's ``$PCP_PMDASADM_DIR/mmv`` (``/usr/lib/pcp/pmdas/mmv`` on
Debian), which ``./Install`` never touches (it lays pmda-mmv over ``$PCP_PMDAS_DIR/mmv``).
The C agent is loaded into the client (a local context, ``pminfo -L``) with a private PMNS,
so every command scans ``$PCP_TMP_DIR/mmv`` afresh and no pmcd is involved.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.pmcd import pcp_config

C_AGENT_DIR = Path(pcp_config("PCP_PMDASADM_DIR", "/usr/lib/pcp/pmdas")) / "mmv"
C_DSO = C_AGENT_DIR / "pmda_mmv.so"
MMVDUMP = C_AGENT_DIR / "mmvdump"
PMNS = "root {\n    mmv\t70:*:*\n}\n"
"""A PMNS of the mmv agent's dynamic root alone: results do not depend on the system PMNS,
which PMDA Install and Remove scripts rewrite."""


def write_pmns(path: Path) -> Path:
    path.write_text(PMNS)
    return path


def local_context(pmns: Path) -> list[str]:
    """Client options that load the C agent in a local context over ``pmns``."""
    return ["-n", str(pmns), "-L", "-Kclear", f"-Kadd,70,{C_DSO},mmv_init"]


def missing() -> list[str]:
    """The parts of the reference this installation lacks (the pcp package's files)."""
    return [str(p) for p in (C_DSO, MMVDUMP) if not os.access(p, os.R_OK)]


def write_references(case: Path, pmns: Path, timeout: float = 300) -> None:
    """The C reference's view of one corpus case (``case/mmv``), next to it:

    * ``mmvdump.out``: ``mmvdump`` of each file; with several files, each part is headed by
      a line ``### <file name>``;
    * ``pminfo.out``, ``pminfo.err``, ``pminfo.rc``: ``pminfo -dfTlt mmv`` from the C agent
      with ``PCP_TMP_DIR`` at the case."""
    files = sorted(p.name for p in (case / "mmv").iterdir())
    dumps = []
    for name in files:
        done = subprocess.run([str(MMVDUMP), f"mmv/{name}"], cwd=case, capture_output=True,
                              timeout=timeout)  # fmt: skip
        dumps.append((f"### {name}\n".encode() if len(files) > 1 else b"") + done.stdout)
    (case / "mmvdump.out").write_bytes(b"".join(dumps))
    env = {k: v for k, v in os.environ.items() if k not in ("PMCD_HOST", "PMCD_PORT")}
    argv = ["pminfo", *local_context(pmns), "-dfTlt", "mmv"]
    done = subprocess.run(argv, capture_output=True, timeout=timeout,
                          env=dict(env, PCP_TMP_DIR=str(case)))  # fmt: skip
    (case / "pminfo.out").write_bytes(done.stdout)
    (case / "pminfo.err").write_bytes(done.stderr)
    (case / "pminfo.rc").write_text(f"{done.returncode}\n")
