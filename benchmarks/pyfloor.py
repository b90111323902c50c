"""pmdapyfloor: a python3-pcp PMDA whose fetch callback does no work.

The floor of any Python PMDA: pmcd, libpcp_pmda's pmdaFetch and python3-pcp's per-value
glue (cpmda builds an argument tuple, calls the callback, parses the returned list), with a
callback that returns one constant.  Shapes and names as ``pmdafloor.c``, under the root
``pyfloor``: one NAME:METRICS:INSTANCES argument per file.

usage: python pyfloor.py DOMAIN LOGFILE NAME:METRICS:INSTANCES ...
"""

from __future__ import annotations

import sys

import cpmapi as c_api
from pcp.pmapi import pmUnits
from pcp.pmda import PMDA, pmdaIndom, pmdaInstid, pmdaMetric

ROOT = "pyfloor"
VALUE = [0, 1]


def no_work(cluster: int, item: int, inst: int) -> list[int]:
    return VALUE


def main(argv: list[str]) -> int:
    domain, logfile, shapes = int(argv[0]), argv[1], argv[2:]
    pmda = PMDA(ROOT, domain, logfile, "/nonexistent/pyfloor/help")
    none = pmUnits(0, 0, 0, 0, 0, 0)
    for k, arg in enumerate(shapes, start=1):
        name, metrics, instances = arg.split(":")
        indom = pmda.indom(k)
        insts = [pmdaInstid(i, f"i{i:05d}") for i in range(int(instances))]
        pmda.add_indom(pmdaIndom(indom, insts))
        for j in range(int(metrics)):
            ptype = c_api.PM_TYPE_U64 if j % 2 == 0 else c_api.PM_TYPE_DOUBLE
            sem = c_api.PM_SEM_COUNTER if j % 2 == 0 else c_api.PM_SEM_INSTANT
            metric = pmdaMetric(pmda.pmid(k, j), ptype, indom, sem, none)
            pmda.add_metric(f"{ROOT}.{name}.m{j:03d}", metric)
    pmda.set_fetch_callback(no_work)
    pmda.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
