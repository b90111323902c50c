"""One soak writer process: ``slots`` MMV writers (python3-pcp ``pcp.mmv``, libpcp_mmv).

Run by soak/soak.py, not by hand.  The first ``permanent`` slots keep one file each for the
whole run (``perm_<proc>_<slot>``) and update it continuously.  The other slots churn: each
creates a file, updates it for a random lifetime, then stops and unlinks it and starts again,
half the time under the same name (``churn_<proc>_<slot>``), half under a new one
(``churn_<proc>_<slot>_<n>``), with a random mix of explicit and zero clusters and the
PROCESS flag.

Protocol on stdin/stdout: prints ``ready`` once the permanent files exist; churns after
reading ``go`` until ``--seconds`` have passed; then removes every churn file, prints
``quiet`` plus a JSON line of counts, and keeps updating the permanent files until stdin
closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import sys
import time
from dataclasses import dataclass

from pcp import mmv, pmapi

TYPE_U64, TYPE_I32, TYPE_DOUBLE, TYPE_STRING = 3, 0, 5, 6
SEM_COUNTER, SEM_INSTANT = 1, 3
FLAG_PROCESS = 2
INSTANCES = ("red", "green", "blue")


@dataclass
class Slot:
    name: str
    writer: mmv.MemoryMappedValues | None = None
    expires: float = float("inf")
    count: int = 0


def make_writer(path: str, cluster: int, flags: int) -> mmv.MemoryMappedValues:
    """A file with a counter, a per-instance gauge, a double and a string."""
    w = mmv.MemoryMappedValues(path, flags=flags, cluster=cluster)
    indom = mmv.mmv_indom(serial=1, shorttext="colours", helptext="colours")
    indom.set_instances([mmv.mmv_instance(i, n) for i, n in enumerate(INSTANCES)])
    none = 0xFFFFFFFF
    w.add_indoms([indom])
    w.add_metrics(
        [
            mmv.mmv_metric("counter", 1, TYPE_U64, SEM_COUNTER, pmapi.pmUnits(), none),
            mmv.mmv_metric("gauge", 2, TYPE_I32, SEM_INSTANT, pmapi.pmUnits(), 1),
            mmv.mmv_metric("ratio", 3, TYPE_DOUBLE, SEM_INSTANT, pmapi.pmUnits(), none),
            mmv.mmv_metric("label", 4, TYPE_STRING, SEM_INSTANT, pmapi.pmUnits(), none),
        ]
    )
    w.start()
    if not w.started():
        raise RuntimeError(f"pcp.mmv could not start {path}")
    w.lookup_set_string("label", "", os.path.basename(path))
    return w


def update(slot: Slot) -> None:
    assert slot.writer is not None
    slot.count += 1
    slot.writer.lookup_set("counter", "", slot.count)
    slot.writer.lookup_set("gauge", INSTANCES[slot.count % 3], slot.count % 1000)
    slot.writer.lookup_set("ratio", "", slot.count / 7.0)


def retire(directory: str, slot: Slot) -> None:
    if slot.writer is not None:
        slot.writer.stop()
        slot.writer = None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, slot.name))


def stdin_line(timeout: float) -> str | None:
    """A line from stdin if one arrives within ``timeout`` s ("" at EOF), else None."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return sys.stdin.readline() if ready else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--proc", type=int, required=True)
    p.add_argument("--slots", type=int, default=20)
    p.add_argument("--permanent", type=int, default=2)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rnd = random.Random(a.seed * 1000 + a.proc)
    perm = [Slot(f"perm_{a.proc}_{k}") for k in range(a.permanent)]
    for k, slot in enumerate(perm):
        slot.writer = make_writer(os.path.join(a.dir, slot.name), 100 + 10 * a.proc + k, 0)
    churn = [Slot(f"churn_{a.proc}_{k}") for k in range(a.slots - a.permanent)]
    stats = {"created": 0, "deleted": 0, "renamed": 0, "updates": 0}
    print("ready", flush=True)
    while (line := stdin_line(1.0)) is None or line.strip() != "go":
        for slot in perm:
            update(slot)
        if line == "":
            return 0
    deadline = time.monotonic() + a.seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        for k, slot in enumerate(churn):
            if now >= slot.expires:
                retire(a.dir, slot)
                stats["deleted"] += 1
                if rnd.random() < 0.5:
                    slot.name = f"churn_{a.proc}_{k}_{stats['created']}"
                    stats["renamed"] += 1
            if slot.writer is None:
                cluster = rnd.choice([0, 0, 1000 + 50 * a.proc + k])
                flags = rnd.choice([0, FLAG_PROCESS])
                slot.writer = make_writer(os.path.join(a.dir, slot.name), cluster, flags)
                slot.expires = now + rnd.uniform(0.2, 6.0)
                stats["created"] += 1
            update(slot)
        for slot in perm:
            update(slot)
        stats["updates"] += len(churn) + len(perm)
        time.sleep(0.05)
    for slot in churn:
        retire(a.dir, slot)
        stats["deleted"] += 1
    print("quiet", flush=True)
    print(json.dumps(stats), flush=True)
    while stdin_line(0.2) is None:
        for slot in perm:
            update(slot)
    for slot in perm:
        retire(a.dir, slot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
