"""A pre-fork server's metrics, one MMV file per worker, summed by PCP (docs/multiprocess.md).

The master forks ``--workers`` processes, as gunicorn, uwsgi or PHP-FPM do; each worker
"serves requests" and, once it has served ``--max-requests`` (0: never), exits and is
replaced in its slot, as those servers recycle workers.  Each worker writes its own file
with python3-pcp's ``pcp.mmv``, laid out so that PCP sees one application (PCP QA 648):

* file ``<app>_w<slot>``: a stable name per slot, so a replacement worker takes over its
  predecessor's file instead of leaving one more behind;
* flags MMV_FLAG_NOPREFIX | MMV_FLAG_PROCESS: the metrics are named ``mmv.<app>.*`` whatever
  the file name, and a worker's file is served only while the worker runs;
* the same explicit ``--cluster`` in every worker (python3-pcp asks for cluster 42 unless
  told otherwise, as every other pcp.mmv writer does);
* one instance per worker, ``w<slot>``, in indom serial 1: ``mmv.<app>.requests`` has one
  value per worker, and ``sum(mmv.<app>.requests)`` is the server's total.

``--layout family`` writes plain per-worker files instead (no NOPREFIX, no instances, any
free cluster) for an agent given ``--family '<app>=<app>_w*'`` (docs/families.md), which
serves ``mmv.<app>.requests`` as the server's total, never falling back at a recycle.

Run with a Python that has python3-pcp (/usr/bin/python3)::

    /usr/bin/python3 examples/prefork_server.py [--app websrv] [--workers 4]
        [--cluster 451] [--max-requests 0] [--rate 20] [--tmp-dir DIR]

then ``pminfo -f mmv.websrv.requests``.  SIGTERM or ^C stops the workers, which remove
their files; a worker killed with SIGKILL leaves its file behind until its slot's next
worker replaces it (``pmda-mmv prune`` removes it if none does).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import time
from typing import Any


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--app", default="websrv", help="application name: mmv.APP.* (websrv)")
    p.add_argument("--workers", type=int, default=4, help="worker processes (4)")
    p.add_argument("--cluster", type=int, default=451, help="MMV cluster of every worker (451)")
    p.add_argument(
        "--max-requests", type=int, default=0, help="recycle a worker after N requests (0: never)"
    )
    p.add_argument("--rate", type=float, default=20.0, help="requests per second per worker")
    p.add_argument("--tmp-dir", help="PCP_TMP_DIR to write into (default: PCP's)")
    p.add_argument(
        "--layout",
        choices=("noprefix", "family"),
        default="noprefix",
        help="noprefix: one instance per worker in shared metrics (default); family: plain "
        "per-worker files for the agent's --family 'APP=APP_w*' (docs/families.md)",
    )
    return p.parse_args()


def start_file(args: argparse.Namespace, slot: int) -> Any:
    """The worker's own MMV file, created in the worker (after fork: a file started in the
    master would name the master's pid, and every worker would write the same values)."""
    import cmmv  # type: ignore[import-not-found]
    import cpmapi
    from pcp import mmv, pmapi

    family = args.layout == "family"  # plain names, no instance: the agent aggregates
    workers = mmv.mmv_indom(serial=1, shorttext="worker slots")
    workers.set_instances([mmv.mmv_instance(slot, f"w{slot}")])
    count = pmapi.pmUnits(0, 0, 1, 0, 0, cpmapi.PM_COUNT_ONE)
    none = pmapi.pmUnits(0, 0, 0, 0, 0, 0)
    spec = [  # name, item, type, semantics, units, one-line help
        ("requests", 1, cmmv.MMV_TYPE_U64, cmmv.MMV_SEM_COUNTER, count, "Requests served"),
        ("busy", 2, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_INSTANT, none, "1 while serving a request"),
        ("pid", 3, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_DISCRETE, none, "Worker process id"),
    ]
    metrics = []
    for name, item, mtype, sem, units, short in spec:
        full, indom = (name, 0) if family else (f"{args.app}.{name}", 1)
        m = mmv.mmv_metric(full, item, mtype, sem, units, indom, short, short)
        m.semantics, m.dimension = sem, units  # python3-pcp 6.0.x does not set them
        metrics.append(m)
    flags = cmmv.MMV_FLAG_PROCESS if family else cmmv.MMV_FLAG_NOPREFIX | cmmv.MMV_FLAG_PROCESS
    cluster = 0 if family else args.cluster  # a family member's own cluster: any free one
    writer = mmv.MemoryMappedValues(f"{args.app}_w{slot}", flags=flags, cluster=cluster)
    if not family:
        writer.add_indoms([workers])
    writer.add_metrics(metrics)
    writer.start()
    if not writer.started():
        raise SystemExit(f"prefork_server: worker {slot}: pcp.mmv could not start its file")
    return writer


def worker(args: argparse.Namespace, slot: int, master: int) -> None:
    """Serve requests until --max-requests, SIGTERM, or the master's death."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches the master, which stops us
    writer = start_file(args, slot)
    inst: str | None = f"w{slot}"
    prefix = f"{args.app}."
    if args.layout == "family":
        inst, prefix = None, ""
    requests = writer.lookup_mapping(f"{prefix}requests", inst)
    busy = writer.lookup_mapping(f"{prefix}busy", inst)
    writer.set(writer.lookup_mapping(f"{prefix}pid", inst), os.getpid())
    served = 0
    try:
        while os.getppid() == master and (args.max_requests <= 0 or served < args.max_requests):
            time.sleep(random.expovariate(args.rate))
            writer.set(busy, 1)
            served += 1
            writer.inc(requests)
            writer.set(busy, 0)
    finally:
        writer.stop()  # a PROCESS file: libpcp_mmv removes it


def spawn(args: argparse.Namespace, slot: int) -> int:
    master = os.getpid()
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            worker(args, slot, master)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except BaseException:
            status = 1
        finally:
            os._exit(status)  # never run the master's cleanup in a worker
    return pid


def main() -> None:
    args = parse_args()
    if args.tmp_dir:
        os.environ["PCP_TMP_DIR"] = args.tmp_dir  # before libpcp reads its configuration
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children: dict[int, int] = {}  # pid -> slot
    try:
        for slot in range(args.workers):
            children[spawn(args, slot)] = slot
        print(f"prefork_server: master {os.getpid()}, workers {sorted(children)}", flush=True)
        while True:
            pid, _ = os.wait()
            slot = children.pop(pid, None)
            if slot is not None:  # a worker recycled or died: a new one takes its slot
                children[spawn(args, slot)] = slot
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already
        for pid in children:
            with contextlib.suppress(ProcessLookupError):  # a worker that died meanwhile
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
