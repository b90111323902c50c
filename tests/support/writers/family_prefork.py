"""A pre-fork writer for the family tests (run by /usr/bin/python3, python3-pcp ``pcp.mmv``).

The master forks ``--workers`` workers and forks a new one into a worker's slot whenever
one exits, as pre-fork servers do.  Each worker writes its own file ``<app>_w<slot>``
(MMV_FLAG_PROCESS, cluster ``--cluster``) with:

* ``requests`` (u64 counter, indom 1: instances 0 "get" and 1 "post"): +1 and +2 per request;
* ``busy`` (u32 instant, singular): slot + 1;
* ``slot`` (u32 discrete, singular): the worker's slot;
* ``hits`` (u32 counter, singular): +1 per request.

SIGTERM: the worker stops counting, writes what it counted to ``--reports``/<pid>.json and
exits at once, leaving its file behind (as a killed worker does; a new worker of the slot
replaces it).  SIGUSR1: the same report, then the worker stays, frozen.  So the test
knows exactly what every worker counted.

``--jobs LO:HI``, a pool of short-lived workers: each counts a random number of requests
between LO and HI, reports, then ends stopped cleanly (``stop()``: libpcp_mmv unlinks its
PROCESS file) or killed (SIGKILL of itself: its file stays), by its PID's parity.
SIGUSR2 to the master holds the pool (no new worker: the test waits for the last to end),
and again resumes it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

STOP = {"term": False, "freeze": False}


def start_file(args: argparse.Namespace, slot: int) -> Any:
    import cmmv  # type: ignore[import-not-found]
    import cpmapi
    from pcp import mmv, pmapi

    kinds = mmv.mmv_indom(serial=1, shorttext="request kinds")
    kinds.set_instances([mmv.mmv_instance(0, "get"), mmv.mmv_instance(1, "post")])
    count = pmapi.pmUnits(0, 0, 1, 0, 0, cpmapi.PM_COUNT_ONE)
    none = pmapi.pmUnits(0, 0, 0, 0, 0, 0)
    spec = [
        ("requests", 1, cmmv.MMV_TYPE_U64, cmmv.MMV_SEM_COUNTER, count, 1),
        ("busy", 2, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_INSTANT, none, 0),
        ("slot", 3, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_DISCRETE, none, 0),
        ("hits", 4, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_COUNTER, count, 0),
    ]
    metrics = []
    for name, item, mtype, sem, units, indom in spec:
        m = mmv.mmv_metric(name, item, mtype, sem, units, indom, name, name)
        m.semantics, m.dimension = sem, units  # python3-pcp 6.0.x does not set them
        metrics.append(m)
    writer = mmv.MemoryMappedValues(
        f"{args.app}_w{slot}", flags=cmmv.MMV_FLAG_PROCESS, cluster=args.cluster
    )
    writer.add_indoms([kinds])
    writer.add_metrics(metrics)
    writer.start()
    if not writer.started():
        raise SystemExit(f"family_prefork: worker {slot}: pcp.mmv could not start its file")
    return writer


def report(args: argparse.Namespace, slot: int, served: int) -> None:
    path = os.path.join(args.reports, f"{os.getpid()}.json")
    doc = {"slot": slot, "get": served, "post": 2 * served, "hits": served}
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.rename(path + ".tmp", path)


def worker(args: argparse.Namespace, slot: int, master: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(term=True))
    signal.signal(signal.SIGUSR1, lambda *_: STOP.update(freeze=True))
    writer = start_file(args, slot)
    get = writer.lookup_mapping("requests", "get")
    post = writer.lookup_mapping("requests", "post")
    hits = writer.lookup_mapping("hits", None)
    writer.set(writer.lookup_mapping("busy", None), slot + 1)
    writer.set(writer.lookup_mapping("slot", None), slot)
    served = 0
    if args.jobs:
        return short_lived(args, slot, writer, (get, post, hits))
    while not (STOP["term"] or STOP["freeze"]) and os.getppid() == master:
        time.sleep(1.0 / args.rate)
        if STOP["term"] or STOP["freeze"]:
            break
        writer.inc(get)
        writer.add(post, 2)
        writer.inc(hits)
        served += 1
    report(args, slot, served)
    while STOP["freeze"] and not STOP["term"] and os.getppid() == master:
        time.sleep(0.2)
    os._exit(0)  # no writer.stop(): the file stays behind, as a killed worker's


def short_lived(args: argparse.Namespace, slot: int, writer: Any, counters: Any) -> None:
    """A pool worker (``--jobs``): counts, reports, then stops cleanly or is killed."""
    import random

    get, post, hits = counters
    low, high = (int(n) for n in args.jobs.split(":"))
    jobs = random.randint(low, high)
    for _ in range(jobs):
        time.sleep(1.0 / args.rate)
        writer.inc(get)
        writer.add(post, 2)
        writer.inc(hits)
    report(args, slot, jobs)
    if os.getpid() % 2:
        os.kill(os.getpid(), signal.SIGKILL)  # its file stays behind
    writer.stop()  # libpcp_mmv unlinks a PROCESS file
    os._exit(0)


def spawn(args: argparse.Namespace, slot: int) -> int:
    master = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            worker(args, slot, master)
        finally:
            os._exit(1)
    return pid


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--app", default="websrv")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--cluster", type=int, default=452)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--tmp-dir", required=True)
    p.add_argument("--reports", required=True)
    p.add_argument("--jobs", default="", help="LO:HI: a pool of short-lived workers")
    args = p.parse_args()
    os.environ["PCP_TMP_DIR"] = args.tmp_dir
    hold = {"on": False}
    signal.signal(signal.SIGUSR2, lambda *_: hold.update(on=not hold["on"]))
    children = {spawn(args, slot): slot for slot in range(args.workers)}
    idle: list[int] = []  # slots whose worker ended while the pool was held
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the test kills the group
    while True:
        pid = 0
        if children:
            pid, _ = os.waitpid(-1, os.WNOHANG if idle else 0)
        slot = children.pop(pid, None)
        if slot is not None:
            idle.append(slot)
        while idle and not hold["on"]:
            slot = idle.pop()
            children[spawn(args, slot)] = slot
        if not pid:
            time.sleep(0.01)


if __name__ == "__main__":
    main()
