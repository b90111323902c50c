"""Where pmda-mmv's fetch time goes: py-spy during a full-fetch loop, summarised.

``py-spy record --native`` samples every thread of the agent; only the main thread's
samples count here (those under ``pmdaMain``; the watchdog threads sleep).  Each sample is
charged to its innermost frame and put in one category: the agent's Python code (by file
and line), python3-pcp's C glue (cpmda), libpcp_pmda, libpcp (PDU encode/decode),
system calls, allocator, interpreter.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.client import Client, median_ms
from benchmarks.writer import Shape

PY_SPY = Path(sys.executable).parent / "py-spy"
DURATION = 8
RATE = 250
SYSCALLS = ("read", "write", "pread64", "poll", "recv", "send", "__pmXmitPDU")
CATEGORIES = (
    ("pmda-mmv Python code", re.compile(r"\(pmda_mmv/")),
    ("python3-pcp glue (cpmda)", re.compile(r"\(cpmda\.")),
    ("libpcp_pmda (pmdaFetch, instance walk)", re.compile(r"\(libpcp_pmda\.")),
    ("libpcp (PDU encode/send)", re.compile(r"\(libpcp\.so")),
    ("system calls (read/write/pread)", re.compile(r"^({}) \(libc".format("|".join(SYSCALLS)))),
    ("allocator (malloc/free)", re.compile(r"^(malloc|free|_int_\w+|cfree|realloc)")),
    ("Python interpreter", re.compile(r"\(python3|\(libpython")),
)


def record(pid: int, client: Client, shape: Shape, out: Path) -> dict[str, Any]:
    """Run py-spy on ``pid`` while ``client`` fetches ``shape`` in a loop; write py-spy's
    raw (collapsed stacks) output to ``out`` and return the summary."""
    pmids = client.lookup(shape.metric_names("mmv"))
    cmd = [str(PY_SPY), "record", "--native", "-r", str(RATE), "-d", str(DURATION)]
    cmd += ["-p", str(pid), "-f", "raw", "-o", str(out)]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    samples = []
    while spy.poll() is None:
        samples.append(client.fetch_checked(pmids, shape, False))
    _, err = spy.communicate()
    if spy.returncode != 0 or not out.exists():
        return {"error": f"py-spy failed ({spy.returncode}): {err.strip()[-400:]}"}
    summary = summarise(out.read_text())
    summary["fetches_while_sampled"] = len(samples)
    summary["median_ms_while_sampled"] = median_ms(samples) if samples else None
    summary["raw"] = out.name
    return summary


def summarise(raw: str) -> dict[str, Any]:
    """Categories and top lines (percent of the main thread's samples) from py-spy raw
    output: one ``frame;frame;...;leaf COUNT`` line per distinct stack."""
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    keys = ("pmdaFetch", "fetch_callback", "refresh_cluster", "refresh_metrics", "__pmSendResult")
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if "pmdaMain" not in stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        total += n
        leaves[frames[-1]] += n
        names = {_function(f) for f in frames}
        for key in keys:
            if any(name.endswith(key) for name in names):
                inclusive[key] += n
    if total == 0:
        return {"error": "no main-thread samples"}
    cats: Counter[str] = Counter()
    for leaf, n in leaves.items():
        cats[_category(leaf)] += n

    def pct(n: int) -> float:
        return round(100.0 * n / total, 1)

    return {
        "samples": total,
        "categories": {c: pct(n) for c, n in cats.most_common()},
        "top_lines": [[_short(f), pct(n)] for f, n in leaves.most_common(15)],
        "inclusive": {k: pct(inclusive[k]) for k in keys},
    }


def _category(leaf: str) -> str:
    for name, pattern in CATEGORIES:
        if pattern.search(leaf):
            return name
    return "other (libc internals)"


def _function(frame: str) -> str:
    return frame.split(" (", 1)[0]


def _short(frame: str) -> str:
    return re.sub(r"^0x[0-9a-f]+ ", "", frame).replace("-x86_64-linux-gnu", "")
