"""Every difference between the PCP and python3-pcp versions pmda-mmv runs on, in one place.

The agent is a drop-in for the C ``pmdammv`` of the PCP it is installed with (tested on
6.0.3, 6.3.8 and 7.2.2).  What differs between those versions is decided here, by probing
the installed libpcp for a feature wherever one shows the difference:

* :func:`debug_options`: libpcp has ``pmGetDebug`` (PCP 7, ``libpcp.so.4``).  The C agent
  of such a PCP serves ``mmv.control.debug`` as a string of debug options (pmdbg(1)) and
  has ``mmv.control.metrics``; before, ``mmv.control.debug`` is an int and there are three
  control metrics.  Both changed in one rewrite of the C agent (7.0.0, "dynamic map
  resets"), so one probe decides both (the definitions are data in
  :func:`pmda_mmv.agent.control.control_metrics`).
* :func:`pmid_hash_defect`: libpcp's ``__pmHashWalkCB`` leaves the node count of a hash
  as it was after deleting every node (fixed in 7.0.1, upstream 737a18aca2): only then is
  :mod:`pmda_mmv.agent.pmidhash` used, through :class:`PmidHashReset` (``--no-pmid-hash-reset``
  switches it off).  Probed on a hash of its own.
* The python3-pcp tables the agent edits directly (metric, help text and indom tables, the
  same private attributes in 6.0.3, 6.3.8 and 7.2.2): :class:`PmdaTables`, the one place in
  the package that touches python3-pcp's private attributes; :func:`instid`, a
  ``pmdaInstid`` whose name need not be UTF-8.
* :func:`version`: the installed PCP's version, for what no feature shows (only tests use
  it: expectations on PCP bugs fixed in a known release, such as PCP issue #2418).
* :func:`count_scale_named`, :func:`extra_units`: the installed ``pmUnitsStr`` names
  ``count`` for a count scale without dimensions (PCP 7), and reads the former pad bits of
  a pmUnits (PCP 7.2's extraUnit/extraScale: temperature, voltage, power...).  The agent
  needs nothing for them (the on-disk word is handed to pmcd bit for bit, and clients
  print it with their own libpcp); ``pmda-mmv check``/``dump`` print units with the
  installed ``pmUnitsStr`` too; only their fallback without python3-pcp
  (:func:`pmda_mmv.mmvfile.pmunits.format_units`) ignores the extra units and prints PCP 7's names.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final

import cpmapi as c_api
import cpmda
from pcp import pmapi
from pcp.pmda import pmdaIndom, pmdaInstid, pmdaMetric

from pmda_mmv.agent.pmidhash import PmHashCtl, PmidHashCount, locate
from pmda_mmv.mmvfile.pcpdefs import PM_HASH_WALK_DELETE_NEXT

LIBPCP: Final = pmapi.LIBPCP
_LIBC: Final = ctypes.CDLL(None)


@functools.cache
def version() -> tuple[int, ...]:
    """PCP_VERSION of the installed PCP, e.g. (6, 0, 3)."""
    text = pmapi.pmContext.pmGetConfig("PCP_VERSION") or "0"
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


# -- mmv.control.*: what the C agent of the installed PCP serves ------------------------


@functools.cache
def debug_options() -> bool:
    """The installed libpcp reports its debug options as a string (``pmGetDebug``, PCP 7):
    the C agent's ``mmv.control.debug`` is that string, and it has ``mmv.control.metrics``."""
    return hasattr(LIBPCP, "pmGetDebug")


def get_debug() -> str | int:
    """``mmv.control.debug`` as the C agent serves it: this process's libpcp debug options
    (pmGetDebug(3), PCP 7), or libpcp's legacy ``pmDebug`` bits (PCP 6)."""
    if not debug_options():
        return ctypes.c_int.in_dll(LIBPCP, "pmDebug").value
    get = LIBPCP.pmGetDebug
    get.restype = ctypes.c_void_p  # malloc'd at every call: freed here
    get.argtypes = []
    text = get()
    if not text:
        return ""
    try:
        return ctypes.string_at(text).decode("utf-8", "replace")
    finally:
        _LIBC.free(ctypes.c_void_p(text))


def store_debug(value: str | int) -> int:
    """A pmstore into ``mmv.control.debug``, applied to this process's libpcp as the C
    agent applies it to its own (to pmcd's, as a DSO): PCP 6 sets ``pmDebug`` to the
    int; PCP 7 replaces the debug options by the string (:func:`set_debug`)."""
    if debug_options():
        return set_debug(str(value))
    ctypes.c_int.in_dll(LIBPCP, "pmDebug").value = int(value)
    return 0


def set_debug(options: str) -> int:
    """Replace this process's libpcp debug options by ``options`` (pmSetDebug(3) syntax), as
    the C agent of PCP 7 does on a store: cleared first, so that a bad ``options`` leaves
    none; 0, or PM_ERR_CONV for options libpcp does not accept."""
    for name in ("pmClearDebug", "pmSetDebug"):
        getattr(LIBPCP, name).argtypes = [ctypes.c_char_p]
        getattr(LIBPCP, name).restype = ctypes.c_int
    LIBPCP.pmClearDebug(b"all")
    if options and LIBPCP.pmSetDebug(options.encode()) < 0:
        LIBPCP.pmClearDebug(b"all")
        return int(c_api.PM_ERR_CONV)
    return 0


@functools.cache
def extra_units() -> bool:
    """The installed pmUnitsStr prints the former pad bits (PCP 7.2's extra units)."""
    return str(pmapi.pmUnits.from_buffer_copy(struct.pack("=I", 9))) != ""


@functools.cache
def count_scale_named() -> bool:
    """The installed pmUnitsStr names ``count`` for a count scale without dimensions
    (PCP 7: ``count x 10^6``; PCP 6: ``x 10^6``)."""
    return str(pmapi.pmUnits(0, 0, 0, 0, 0, 6)).startswith("count")


# -- the PMID hash defect (pmidhash.py) ---------------------------------------------------


_WALK_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


@functools.cache
def pmid_hash_defect() -> bool:
    """libpcp's walk-based delete keeps the hash's node count (PCP < 7.0.1): two nodes
    added to a hash of our own, both deleted by ``__pmHashWalkCB``; the count must be 0."""
    ctl = PmHashCtl()
    LIBPCP.__pmHashInit(ctypes.byref(ctl))
    for key in (1, 2):
        LIBPCP.__pmHashAdd(ctypes.c_uint(key), None, ctypes.byref(ctl))
    delete: Callable[[Any, Any], int] = lambda node, arg: PM_HASH_WALK_DELETE_NEXT  # noqa: E731
    LIBPCP.__pmHashWalkCB(_WALK_CB(delete), None, ctypes.byref(ctl))
    nodes = ctl.nodes
    LIBPCP.__pmHashClear(ctypes.byref(ctl))
    return bool(nodes)


HASH_NOTE: Final = "with PCP < 7.0.1 each metric-table change will cost more than the last"


class PmidHashReset:
    """The PMID-hash workaround of one agent (:mod:`pmda_mmv.agent.pmidhash`), only where it is
    needed: ``enabled`` (not ``--no-pmid-hash-reset``) and libpcp has the defect
    (:func:`pmid_hash_defect`, PCP < 7.0.1).  Construct before dropping privileges (it
    opens ``/proc/self/mem``); elsewhere it does nothing at all.

    ``problem`` says why a reset that is needed cannot be done (logged at startup)."""

    def __init__(self, domain: int, enabled: bool) -> None:
        self.count: PmidHashCount | None = None
        self.problem = ""
        if enabled and pmid_hash_defect():
            found = locate(domain, cpmda.__file__)
            if isinstance(found, str):
                self.problem = f"PMID hash node count not found ({found}): {HASH_NOTE}"
            else:
                self.count = found

    def reset(self) -> str | None:
        """Before python3-pcp rebuilds its tables (pmdaRehash): set the count right.
        Returns a line to log when the reset failed (it is not tried again)."""
        if self.count is None:
            return None
        try:
            self.count.reset()
        except OSError as e:
            self.count.close()
            self.count = None
            self.problem = f"PMID hash node count: reset failed: {e}: {HASH_NOTE}"
            return self.problem
        return None


# -- python3-pcp's own tables (the same private attributes in 6.0.3 to 7.2.2) ------------


class PmdaTables:
    """python3-pcp's own metric and indom tables of one ``PMDA``, edited through an index.

    python3-pcp keeps them in lists and dicts it shares with libpcp_pmda; its
    ``add_indom``, ``remove_metric`` and ``replace_indom`` search a whole list, so a change
    would cost as much as everything served.  This keeps each indom's position instead and
    removes by moving the last entry into the hole (libpcp_pmda looks entries up by hash,
    not position); the metric table is written whole from :attr:`entries` at a commit
    that changes it (a list copy, where cpmda then copies and rehashes all of it anyway).
    Absent help text (None) is left out, so it is PM_ERR_TEXT; "" is served as ""
    (python3-pcp itself serves "" for both).

    Kept a name: the table entry (32 bytes of C structure), the name by PMID (cpmda builds
    libpcp_pmda's namespace from it at each rebuild) and the help text by PMID (cpmda's
    text callback looks it up in these dicts at each request, with ``PyDict_GetItem``: no
    callback of ours can answer it, so they are real dicts; their texts are shared).

    Any change makes cpmda rebuild its whole namespace and metric table at the next
    request (``set_need_refresh``): so a batch of edits is told to cpmda once, by
    :meth:`commit`, and only when it changed what cpmda copies (names, PMIDs, descriptors,
    indoms): a file written again with the same metrics costs no rebuild.  Help text is
    read from the dicts at each request, and needs none."""

    def __init__(self, pmda: Any) -> None:
        self.pmda = pmda
        self.entries: dict[int, bytes] = {}  # PMID -> its metric table entry
        self.indom_slots: dict[int, int] = {}  # indom -> its index in _indomtable
        self.removed: dict[int, tuple[str, bytes]] = {}  # since commit: PMID -> (name, desc)
        self.changed = False  # since commit: a change cpmda must copy

    def names(self) -> list[str]:
        """The metric names served, sorted."""
        return sorted(self.pmda._metric_names.values())

    def add_metric(self, name: str, metric: bytes, oneline: str | None, text: str | None) -> None:
        """Serve ``metric`` (from :func:`metric`) as ``name`` (the caller keeps names
        unique: the catalogue's name rules).  Only what cpmda reads is kept: the table
        entry, the name by PMID and the help text; python3-pcp's own dictionaries by name
        and of entries by PMID stay empty (cpmda never reads them)."""
        p, pmid = self.pmda, pmid_of(metric)
        if pmid in p._metric_names:
            raise KeyError(f"metric {name}: its PMID is already served")
        old = self.removed.pop(pmid, None)
        if old is not None and old == (name, metric):
            metric = old[1]  # the entry still in the table: not a second copy
        else:
            self.changed = True
        self.entries[pmid] = metric
        p._metric_names[pmid] = name
        _put(p._metric_oneline, pmid, oneline)
        _put(p._metric_helptext, pmid, text)

    def metrics(self) -> int:
        """How many metrics are served."""
        return len(self.entries)

    def remove_metric(self, pmid: int) -> None:
        """Stop serving the metric of ``pmid`` (if it is served)."""
        p = self.pmda
        name = p._metric_names.pop(pmid, None)
        if name is None:
            return
        old = self.entries.pop(pmid)
        if pmid not in self.removed:
            self.removed[pmid] = (name, old)
        for table in (p._metric_oneline, p._metric_helptext):
            table.pop(pmid, None)

    def serve_instances(
        self, indom: int, insts: list[Any], oneline: str | None, text: str | None
    ) -> None:
        """Serve ``indom`` with the pmdaInstids ``insts`` (from :class:`Instids`), in place
        of the one of that number: when it holds the same pmdaInstids already, only its
        help text is set (no rebuild)."""
        current = self.pmda._indoms.get(indom)
        if current is not None and _same(current.instids, insts):
            _put(self.pmda._indom_oneline, indom, oneline)
            _put(self.pmda._indom_helptext, indom, text)
            return
        self.put_indom(Instids.indom(insts, indom), oneline, text)

    def put_indom(self, indom: Any, oneline: str | None, text: str | None) -> None:
        """Serve the ``pmdaIndom`` ``indom`` (replacing the one of that number)."""
        p, key = self.pmda, indom.it_indom
        self.drop_indom(key)
        self.indom_slots[key] = len(p._indomtable)
        p._indomtable.append(indom)
        p._indoms[key] = indom
        _put(p._indom_oneline, key, oneline)
        _put(p._indom_helptext, key, text)
        self.changed = True

    def drop_indom(self, indom: int) -> None:
        """Remove an instance domain (python3-pcp has no remove_indom)."""
        p = self.pmda
        if _take(p._indomtable, self.indom_slots, indom, lambda e: int(e.it_indom)) is not None:
            self.changed = True
        for table in (p._indoms, p._indom_oneline, p._indom_helptext):
            table.pop(indom, None)

    def commit(self) -> bool:
        """Tell cpmda of the edits since the last commit when they changed what it copies
        (it rebuilds its namespace and metric table at the next request); True if so."""
        changed = self.changed or bool(self.removed)
        self.changed, self.removed = False, {}
        if changed:
            self.pmda._metrictable[:] = self.entries.values()
            cpmda.set_need_refresh()
        return changed


def _same(old: list[Any], new: list[Any]) -> bool:
    """Whether two lists hold the same objects in the same order."""
    return len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))


def _put(table: dict[int, str], key: int, text: str | None) -> None:
    if text is None:
        table.pop(key, None)
    else:
        table[key] = text


_DESC_AT: Final = pmdaMetric.m_desc.offset
_DESC: Final = struct.Struct("=IiIi4s")  # pmDesc: pmid, type, indom, sem, units
_METRIC_SIZE: Final = ctypes.sizeof(pmdaMetric)
_PMID: Final = struct.Struct("=I")


def metric(pmid: int, mtype: int, indom: int, sem: int, units: bytes) -> bytes:
    """A ``pmdaMetric`` as the bytes of the C structure (``units``: the 4 bytes of its
    pmUnits; ``m_user`` NULL): cpmda copies each entry of the metric table through the
    buffer protocol and needs nothing else of it, so one ``bytes`` object of 32 bytes stands
    for python3-pcp's ``pmdaMetric``, whose constructor sets each field through a temporary
    pmDesc and keeps the pmUnits given alive in a dict of the metric's (four objects and
    about 400 bytes a name more)."""
    made = bytearray(_METRIC_SIZE)
    _DESC.pack_into(made, _DESC_AT, pmid, mtype, indom, sem, units)
    return bytes(made)


def pmid_of(metric: bytes) -> int:
    """The PMID of a metric made by :func:`metric`."""
    return int(_PMID.unpack_from(metric, _DESC_AT)[0])


def instid(internal: int, external: str) -> Any:
    """A ``pmdaInstid`` naming the instance with the file's bytes (``pmdaInstid`` itself
    encodes strictly, and an external name need not be UTF-8)."""
    inst = pmdaInstid(internal, "")
    inst.i_name = external.encode("utf-8", "surrogateescape")
    return inst


class Instids:
    """One ``pmdaInstid`` per key (a file name, a (file, instance) pair...), made once and
    made again only when its instance id or name changes, and the indoms built from them:
    a change to one instance of a large indom costs one construction, not one per instance.
    ``made`` counts the constructions."""

    def __init__(self) -> None:
        self.cache: dict[Hashable, tuple[int, str, Any]] = {}
        self.made = 0

    def get(self, key: Hashable, internal: int, external: str) -> Any:
        """The pmdaInstid of ``key``, naming ``internal`` ``external``."""
        got = self.cache.get(key)
        if got is None or got[0] != internal or got[1] != external:
            got = (internal, external, instid(internal, external))
            self.cache[key] = got
            self.made += 1
        return got[2]

    def many(
        self, pairs: Iterable[tuple[Hashable, int]], external: Callable[[Any], str]
    ) -> list[Any]:
        """The pmdaInstids of ``(key, internal)`` pairs, where a key's name is
        ``external(key)`` (called only for a key not made yet or whose id changed)."""
        cache, out = self.cache, []
        for k, internal in pairs:
            hit = cache.get(k)
            if hit is not None and hit[0] == internal:
                out.append(hit[2])
            else:
                out.append(self.get(k, internal, external(k)))
        return out

    def keep(self, keys: Iterable[Hashable]) -> None:
        """Forget every key but ``keys``."""
        self.cache = {k: self.cache[k] for k in keys if k in self.cache}

    @staticmethod
    def indom(insts: list[Any], indom: int) -> Any:
        """A ``pmdaIndom`` of the pmdaInstids ``insts`` (from :meth:`get`), their array
        filled in one ctypes copy (python3-pcp's own fills it one field at a time)."""
        served = pmdaIndom(indom, None)
        array = (pmdaInstid * len(insts))(*insts)
        served.it_set = array
        served.it_numinst = len(insts)
        served.instids = insts  # the names' bytes stay alive as long as the indom
        return served


def _take(table: list[Any], slots: dict[int, int], key: int, key_of: Callable[[Any], int]) -> Any:
    """Remove ``key``'s element from ``table`` (its index in ``slots``); returns it, or
    None when it is not there."""
    at = slots.pop(key, None)
    if at is None:
        return None
    last = table.pop()
    if at < len(table):
        table[at], last = last, table[at]
        slots[key_of(table[at])] = at
    return last
