"""The agents under test, each in a private pmcd of its own (tests/support/pmcd.py PrivatePmcd).

* ``c``: PCP's C pmdammv (the reference), :func:`tests.support.pmcd.c_agent` (it runs as
  ``pmdammv-reference``, out of reach of PCP's Install/Remove scripts run elsewhere).
* ``ours``: pmda-mmv from this checkout, :func:`tests.support.pmcd.our_agent`.
* ``floor``: ``pmdafloor.c`` (built here with gcc), a C PMDA whose fetch does no work.
* ``pyfloor``: ``pyfloor.py``, a python3-pcp PMDA whose fetch callback does no work.

One pmcd per agent keeps each agent's PDUs, names and restarts apart, and lets the
benchmark interleave its samples across agents (the machine is shared and noisy).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.writer import Shape
from tests.support.pmcd import AgentSpec, PrivatePmcd, make_dir

HERE = Path(__file__).resolve().parent
LABELS = {
    "c": "C pmdammv",
    "ours": "pmda-mmv",
    "cand": "candidate",
    "floor": "C floor",
    "pyfloor": "py floor",
}
PREFIX = {"c": "mmv", "ours": "mmv", "cand": "mmv", "floor": "floor", "pyfloor": "pyfloor"}
FLOOR_DOMAIN, PYFLOOR_DOMAIN = 72, 73


def build_floor(bindir: Path) -> Path:
    """Compile pmdafloor.c into ``bindir``; raises RuntimeError with gcc's output."""
    out = bindir / "pmdafloor"
    cmd = ["gcc", "-O2", "-Wall", "-o", str(out), str(HERE / "pmdafloor.c")]
    done = subprocess.run([*cmd, "-lpcp_pmda", "-lpcp"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"building pmdafloor failed (apt-get install libpcp3-dev libpcp-pmda3-dev?):\n"
            f"{done.stdout}{done.stderr}"
        )
    return out


def floor_spec(floor_bin: Path, shapes: Sequence[Shape]) -> AgentSpec:
    argv = (str(floor_bin), "-d", str(FLOOR_DOMAIN), "-l", "floor.log")
    return AgentSpec("floor", FLOOR_DOMAIN, (*argv, *(s.floor_arg for s in shapes)))


def pyfloor_spec(shapes: Sequence[Shape]) -> AgentSpec:
    argv = (sys.executable, "-P", str(HERE / "pyfloor.py"), str(PYFLOOR_DOMAIN), "pyfloor.log")
    return AgentSpec("pyfloor", PYFLOOR_DOMAIN, (*argv, *(s.floor_arg for s in shapes)))


def start(workdir: Path, spec: AgentSpec) -> PrivatePmcd:
    """A started PrivatePmcd under ``workdir`` serving ``spec`` alone."""
    pmcd = PrivatePmcd(workdir, [spec], timeout=60.0)
    pmcd.start()
    return pmcd


def agent_pid(pmcd: PrivatePmcd, wait: float = 5.0) -> int:
    """The one agent process of ``pmcd`` (the wrapper script execs it), waiting up to
    ``wait`` seconds while there are none or two (pmcd is restarting it)."""
    deadline = time.monotonic() + wait
    while True:
        pids = pmcd.agent_processes()
        if len(pids) == 1:
            return pids[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"expected one agent under pmcd {pmcd.host}, found pids {pids}")
        time.sleep(0.05)


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return make_dir(path)
