"""PMAPI client side of the benchmark: one host context per private pmcd, timed requests.

Every timed figure is wall time (``time.perf_counter``) around PMAPI calls made from this
process through python3-pcp (``pcp.pmapi.pmContext``); results are checked outside the timed
region so that an agent answering with errors can never look fast.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import cpmapi as c_api
from pcp.pmapi import pmContext, pmErr

from benchmarks.writer import Shape, expected_double, expected_u64, metric_type
from pmda_mmv.mmvfile import layout


class BenchError(RuntimeError):
    """An agent did not answer as the benchmark requires (wrong count, value or error)."""


class Client:
    """A PMAPI host context on ``host`` (``localhost:PORT``) named ``label`` in messages."""

    def __init__(self, label: str, host: str) -> None:
        self.label = label
        self.host = host
        self.ctx = pmContext(c_api.PM_CONTEXT_HOST, host)

    # -- names

    def lookup(self, names: Sequence[str]) -> Any:
        """pmLookupName: the pmID array; raises pmErr when any name is unknown."""
        return self.ctx.pmLookupName(list(names))

    def try_lookup(self, names: Sequence[str]) -> Any | None:
        try:
            return self.lookup(names)
        except pmErr:
            return None

    # -- fetch

    def fetch_once(self, pmids: Any) -> tuple[float, Any]:
        """One timed pmFetch: (seconds, result); the caller frees the result."""
        t0 = time.perf_counter()
        res = self.ctx.pmFetch(pmids)
        return time.perf_counter() - t0, res

    def fetch_checked(self, pmids: Any, shape: Shape, check_values: bool) -> float:
        """One timed pmFetch of all PMIDs of a file of ``shape``; every PMID must carry
        ``shape.instances`` values, and with ``check_values`` the first and last value of
        the first two metrics must be what the writer wrote."""
        seconds, res = self.fetch_once(pmids)
        try:
            self.check_result(res, shape, check_values)
        finally:
            self.ctx.pmFreeResult(res)
        return seconds

    def check_result(self, res: Any, shape: Shape, check_values: bool) -> None:
        r = res.contents
        if r.numpmid != shape.metrics:
            raise BenchError(f"{self.label}: {r.numpmid} PMIDs back, asked {shape.metrics}")
        for k in range(r.numpmid):
            numval = r.get_numval(k)
            if numval != shape.instances:
                raise BenchError(
                    f"{self.label} {shape.name}: metric {k} has numval {numval}"
                    f" ({_error(numval)}), expected {shape.instances}"
                )
        if check_values:
            for j in range(min(2, shape.metrics)):
                for pos in (0, shape.instances - 1):
                    self._check_value(r, j, pos)

    def _check_value(self, r: Any, j: int, pos: int) -> None:
        vlist = r.get_vlist(j, pos)
        inst = vlist.inst
        if metric_type(j) == layout.TYPE_U64:
            got: object = self.ctx.pmExtractValue(
                r.get_valfmt(j), vlist, c_api.PM_TYPE_U64, c_api.PM_TYPE_U64
            ).ull
            want: object = expected_u64(j, inst)
        else:
            got = self.ctx.pmExtractValue(
                r.get_valfmt(j), vlist, c_api.PM_TYPE_DOUBLE, c_api.PM_TYPE_DOUBLE
            ).d
            want = expected_double(j, inst)
        if got != want:
            raise BenchError(f"{self.label}: m{j:03d}[{inst}] = {got!r}, writer wrote {want!r}")

    def fetch_int(self, pmids: Any) -> int:
        """The single 32-bit value of a one-PMID fetch (mmv.control.files)."""
        res = self.ctx.pmFetch(pmids)
        try:
            r = res.contents
            if r.get_numval(0) != 1:
                raise BenchError(f"{self.label}: no value ({_error(r.get_numval(0))})")
            return int(r.get_vlist(0, 0).value.lval)
        finally:
            self.ctx.pmFreeResult(res)

    # -- store

    def store_int(self, pmids: Any, value: int) -> None:
        """pmStore of a 32-bit ``value`` into the one PMID (as pmstore(1): fetch, change
        the value in the result, store it)."""
        res = self.ctx.pmFetch(pmids)
        try:
            if res.contents.get_numval(0) != 1:
                raise BenchError(f"{self.label}: cannot store, no current value")
            res.contents.get_vlist(0, 0).value.lval = value
            self.ctx.pmStore(res)
        finally:
            self.ctx.pmFreeResult(res)


def _error(numval: int) -> str:
    if numval >= 0:
        return "ok"
    try:
        return str(pmErr(numval))
    except Exception:
        return f"error {numval}"


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000.0


def poll(request: Callable[[], bool], timeout: float = 30.0) -> tuple[float, int]:
    """Call ``request`` until it returns True: (seconds since the call, requests made)."""
    t0 = time.perf_counter()
    n = 0
    while True:
        n += 1
        if request():
            return time.perf_counter() - t0, n
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"still not answered after {n} requests and {timeout:.0f} s")
