"""Demo MMV writer: two files of changing metrics written with the real libpcp_mmv.

``demo``: through python3-pcp's ``pcp.mmv`` (MMV v1, mmv_stats_init): a web service's
``requests`` (counter) and ``latency`` (instant, milliseconds) per endpoint instance, plus
singular ``queue``, ``uptime`` and ``status`` (a string), all with one-line and long help.

``demo_rooms``: through libpcp_mmv's registry API via ctypes, because ``pcp.mmv`` cannot
write labels (the library then writes MMV v3): ``temperature`` and ``readings`` per room,
with registry, indom, metric and instance labels.

Both files carry MMV_FLAG_PROCESS, so their metrics go away when this writer exits; it
also removes them when it ends (SIGTERM, ^C or ``--count`` updates done).
Run with a Python that has python3-pcp (the project venv or /usr/bin/python3)::

    python examples/demo_writer.py [--interval 1] [--count 0] [--tmp-dir DIR]

then ``pminfo -dfTlt mmv.demo mmv.demo_rooms``.  Writes into ``$PCP_TMP_DIR/mmv``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

ENDPOINTS = ["/", "/api", "/login"]
ROOMS = [(0, "kitchen", 0), (1, "office", 1), (2, "attic", 2)]  # internal, name, floor


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=1.0, help="seconds between updates")
    p.add_argument("--count", type=int, default=0, help="updates before exiting (0: forever)")
    p.add_argument("--tmp-dir", help="PCP_TMP_DIR to write into (default: PCP's)")
    return p.parse_args()


def pcp_mmv_file() -> tuple[Any, dict[str, Any]]:
    """Start ``demo`` with pcp.mmv; return (writer, {"metric[inst]": value handle})."""
    import cmmv  # type: ignore[import-not-found]
    import cpmapi
    from pcp import mmv, pmapi

    endpoints = mmv.mmv_indom(serial=1, shorttext="HTTP endpoints")
    endpoints.helptext = b"Request paths served by the demo web service."  # 6.0.3 copies short
    endpoints.set_instances([mmv.mmv_instance(i, n) for i, n in enumerate(ENDPOINTS)])
    count = pmapi.pmUnits(0, 0, 1, 0, 0, cpmapi.PM_COUNT_ONE)
    msec = pmapi.pmUnits(0, 1, 0, 0, cpmapi.PM_TIME_MSEC, 0)
    sec = pmapi.pmUnits(0, 1, 0, 0, cpmapi.PM_TIME_SEC, 0)
    none = pmapi.pmUnits(0, 0, 0, 0, 0, 0)
    null = 0xFFFFFFFF  # PM_INDOM_NULL: a singular metric
    spec = [  # name, item, type, semantics, units, indom, one-line help, long help
        ("requests", 1, cmmv.MMV_TYPE_U64, cmmv.MMV_SEM_COUNTER, count, 1,
         "Requests served", "Requests served per endpoint since the writer started."),
        ("latency", 2, cmmv.MMV_TYPE_DOUBLE, cmmv.MMV_SEM_INSTANT, msec, 1,
         "Latency of the last request", "Time taken by the most recent request, per endpoint."),
        ("queue", 3, cmmv.MMV_TYPE_U32, cmmv.MMV_SEM_INSTANT, count, null,
         "Requests waiting", "Requests queued and not yet served."),
        ("uptime", 4, cmmv.MMV_TYPE_U64, cmmv.MMV_SEM_COUNTER, sec, null,
         "Writer uptime", "Seconds since the demo writer started."),
        ("status", 5, cmmv.MMV_TYPE_STRING, cmmv.MMV_SEM_DISCRETE, none, null,
         "Service status", "ok, busy (queue above 5) or idle (no requests last interval)."),
    ]  # fmt: skip
    metrics = []
    for name, item, mtype, sem, units, indom, short, long in spec:
        m = mmv.mmv_metric(name, item, mtype, sem, units, indom, short, long)
        # python3-pcp 6.0.3 never sets semantics and dimension and copies the one-line
        # help into the long help (python-pmda-api.md P15): set them after construction
        m.semantics, m.dimension, m.helptext = sem, units, long.encode()
        metrics.append(m)
    writer = mmv.MemoryMappedValues("demo", flags=cmmv.MMV_FLAG_PROCESS, cluster=71)
    writer.add_indoms([endpoints])
    writer.add_metrics(metrics)
    writer.start()
    if not writer.started():
        raise SystemExit("demo_writer: pcp.mmv could not start the demo file")
    handles = {f"{n}[{e}]": writer.lookup_mapping(n, e) for n in ("requests", "latency")
               for e in ENDPOINTS}  # fmt: skip
    handles.update({n: writer.lookup_mapping(n, None) for n in ("queue", "uptime", "status")})
    return writer, handles


class Registry:
    """``demo_rooms`` through libpcp_mmv's registry API (ctypes), with labels."""

    def __init__(self) -> None:
        import cmmv
        import cpmapi
        from pcp import pmapi

        lib = ctypes.CDLL(ctypes.util.find_library("pcp_mmv") or "libpcp_mmv.so.1")
        vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        for fn, res, args in [
            ("mmv_stats_registry", vp, [cp, ci, ci]),
            ("mmv_stats_add_indom", ci, [vp, ci, cp, cp]),
            ("mmv_stats_add_instance", ci, [vp, ci, ci, cp]),
            ("mmv_stats_add_metric", ci, [vp, cp, ci, ci, ci, pmapi.pmUnits, ci, cp, cp]),
            ("mmv_stats_add_registry_label", ci, [vp, cp, cp, ci, ci]),
            ("mmv_stats_add_indom_label", ci, [vp, ci, cp, cp, ci, ci]),
            ("mmv_stats_add_metric_label", ci, [vp, ci, cp, cp, ci, ci]),
            ("mmv_stats_add_instance_label", ci, [vp, ci, ci, cp, cp, ci, ci]),
            ("mmv_stats_start", vp, [vp]),
            ("mmv_lookup_value_desc", vp, [vp, cp, cp]),
            ("mmv_set_value", None, [vp, vp, ctypes.c_double]),
            ("mmv_inc_value", None, [vp, vp, ctypes.c_double]),
        ]:
            getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args
        self.lib = lib
        s, n = cmmv.MMV_STRING_TYPE, cmmv.MMV_NUMBER_TYPE
        reg = lib.mmv_stats_registry(b"demo_rooms", 72, cmmv.MMV_FLAG_PROCESS)
        if not reg:
            raise SystemExit("demo_writer: mmv_stats_registry failed")
        lib.mmv_stats_add_indom(reg, 1, b"Rooms", b"Rooms with a temperature sensor.")
        # the registry keeps pointers to these strings until mmv_stats_start: keep them alive
        self.keep = [(name.encode(), str(floor).encode()) for _, name, floor in ROOMS]
        for (internal, _, _), (name, floor) in zip(ROOMS, self.keep, strict=True):
            # libpcp_mmv 6.0.x returns -1 here even on success: the result is not checked
            lib.mmv_stats_add_instance(reg, 1, internal, name)
            lib.mmv_stats_add_instance_label(reg, 1, internal, b"floor", floor, n, 0)
        celsius = pmapi.pmUnits(0, 0, 0, 0, 0, 0)
        count = pmapi.pmUnits(0, 0, 1, 0, 0, cpmapi.PM_COUNT_ONE)
        lib.mmv_stats_add_metric(reg, b"temperature", 1, cmmv.MMV_TYPE_DOUBLE,
                                 cmmv.MMV_SEM_INSTANT, celsius, 1, b"Room temperature",
                                 b"Temperature in degrees Celsius, per room.")  # fmt: skip
        lib.mmv_stats_add_metric(reg, b"readings", 2, cmmv.MMV_TYPE_U64,
                                 cmmv.MMV_SEM_COUNTER, count, 1, b"Sensor readings",
                                 b"Readings taken from each room's sensor.")  # fmt: skip
        for rc in (
            lib.mmv_stats_add_registry_label(reg, b"app", b'"pmda-mmv demo"', s, 0),
            lib.mmv_stats_add_indom_label(reg, 1, b"sensor", b'"thermometer"', s, 0),
            lib.mmv_stats_add_metric_label(reg, 1, b"units", b'"celsius"', s, 0),
        ):
            if rc < 0:
                raise SystemExit("demo_writer: adding a label failed")
        self.addr = lib.mmv_stats_start(reg)
        if not self.addr:
            raise SystemExit("demo_writer: mmv_stats_start failed for demo_rooms")
        self.handles = {
            (m, name): lib.mmv_lookup_value_desc(self.addr, m.encode(), name.encode())
            for m in ("temperature", "readings")
            for _, name, _ in ROOMS
        }

    def update(self, tick: int) -> None:
        for k, (_, name, floor) in enumerate(ROOMS):
            celsius = 19 + 2 * floor + 1.5 * math.sin(tick / 10 + k)
            self.lib.mmv_set_value(self.addr, self.handles[("temperature", name)], celsius)
            self.lib.mmv_inc_value(self.addr, self.handles[("readings", name)], 1)


def main() -> None:
    args = parse_args()
    if args.tmp_dir:
        os.environ["PCP_TMP_DIR"] = args.tmp_dir  # before libpcp reads its configuration
    from pcp.pmapi import pmContext

    mmv_dir = Path(pmContext.pmGetConfig("PCP_TMP_DIR")) / "mmv"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    writer, h = pcp_mmv_file()
    try:
        rooms = Registry()
        start = time.monotonic()
        tick = 0
        while args.count == 0 or tick < args.count:
            served = 0
            for e in ENDPOINTS:
                n = random.randint(0, 20)
                served += n
                writer.add(h[f"requests[{e}]"], n)
                writer.set(h[f"latency[{e}]"], round(random.uniform(0.5, 40.0), 3))
            queue = random.randint(0, 10)
            writer.set(h["queue"], queue)
            writer.set(h["uptime"], int(time.monotonic() - start))
            writer.set_string(h["status"], "idle" if not served else "busy" if queue > 5 else "ok")
            rooms.update(tick)
            tick += 1
            time.sleep(args.interval)
    finally:  # also on SIGTERM or ^C: take the files away with the writer
        for name in ("demo", "demo_rooms"):
            (mmv_dir / name).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
