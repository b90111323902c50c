"""``pmda-mmv dump``: everything the reader accepted in MMV files, without pmcd.

``dump [--json] FILE...`` prints every header field, TOC entry, indom, instance, metric,
value, string and label the reader accepted, plus its problems: what PCP's ``mmvdump``
shows.  ``--json`` prints one list with one object per file (see :func:`describe`).

Bounded and terminal-safe as ``check`` (:mod:`~.check`); the same exit status.  Units
are formatted as PCP's ``pmUnitsStr(3)`` does, through python3-pcp when it is installed
and with :func:`~.pmunits.format_units` otherwise (:func:`~.pcpenv.units_text`), so the
command does not need python3-pcp.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands.check import (
    Doc,
    exit_status,
    json_text,
    judge,
    write_lines,
)
from pmda_mmv.commands.dumptext import render_dump
from pmda_mmv.commands.pcpenv import units_text
from pmda_mmv.directory.filestate import OK, PARTIAL, status_of
from pmda_mmv.mmvfile import generation, layout
from pmda_mmv.mmvfile.decode import NO_VALUE, UNSUPPORTED, Snapshot
from pmda_mmv.mmvfile.errors import Changed, MmvError
from pmda_mmv.mmvfile.opener import open_regular, read_head
from pmda_mmv.mmvfile.reader import MmvFile

SEMANTICS_TEXT = {layout.SEM_UNSET: "unset (served as counter)", **layout.SEM_NAMES}
FLAG_TEXT = {
    layout.FLAG_NOPREFIX: "noprefix",
    layout.FLAG_PROCESS: "process",
    layout.FLAG_SENTINEL: "sentinel",
}


def describe(path: str) -> Doc:
    """Everything known about ``path`` as one JSON-ready dict.

    Keys: ``file``, ``status``, ``problems`` (as in check), ``header`` (raw header fields
    even for a refused or not-ready file when 40 bytes can be read, else None), and for an
    ok or partial file ``size``, ``toc``, ``indoms`` (each with ``instances``), ``metrics``,
    ``values`` (file order), ``strings`` and ``labels``.  Offsets are absolute byte offsets
    of the entries in the file."""
    try:
        mf = MmvFile.open(path)
    except MmvError as e:
        return {
            "file": path,
            "status": status_of(e),
            "problems": [e.as_dict()],
            "header": _raw_header(path),
        }
    with mf:
        try:
            values = _values(mf, mf.snapshot())
        except Changed as e:
            return {"file": path, "status": status_of(e), "problems": [e.as_dict()], "header": None}
        return {
            "file": path,
            "status": PARTIAL if mf.problems else OK,
            "problems": [p.as_dict() for p in mf.problems],
            "size": mf.size,
            "header": _header(mf),
            "toc": _toc(mf),
            "indoms": _indoms(mf),
            "metrics": _metrics(mf),
            "values": values,
            "strings": _strings(mf),
            "labels": _labels(mf),
        }


def _header_doc(
    magic: bytes, version: int, g1: int, g2: int, tocs: int, flags: int, process: int, cluster: int
) -> Doc:
    return {
        "magic": magic.decode("latin-1"),
        "version": version,
        "g1": g1,
        "g2": g2,
        "created": _created(g1),
        "tocs": tocs,
        "flags": flags,
        "flag_names": [name for bit, name in FLAG_TEXT.items() if flags & bit],
        "process": process,
        "cluster": cluster,
    }


def _created(g1: int) -> str | None:
    """The creation time g1 encodes (:func:`~.generation.generation_time`), or None."""
    seconds = generation.generation_time(g1, time.time())
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")


def _raw_header(path: str) -> Doc | None:
    """The header fields of a file the reader did not accept, or None if unreadable."""
    try:
        fd, _ = open_regular(path)
    except OSError:
        return None
    try:
        raw = read_head(fd, layout.HEADER_SIZE)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) < layout.HEADER_SIZE:
        return None
    return _header_doc(*layout.HEADER.unpack(raw))


def _header(mf: MmvFile) -> Doc:
    h = mf.header
    return _header_doc(layout.MAGIC, h.version, h.g1, h.g2, h.tocs, h.flags, h.process, h.cluster)


def _toc(mf: MmvFile) -> list[Doc]:
    return [
        {
            "index": t.index,
            "at": t.at,
            "type": t.type,
            "section": layout.TOC_NAMES.get(t.type),
            "count": t.count,
            "offset": t.offset,
        }
        for t in mf.toc
    ]


def _indoms(mf: MmvFile) -> list[Doc]:
    return [
        {
            "serial": indom.serial,
            "offset": indom.offset,
            "count": len(indom.instances),
            "shorthelp": indom.shorthelp,
            "longhelp": indom.longhelp,
            "instances": [
                {"internal": i.internal, "external": i.external, "offset": i.offset}
                for i in indom.instances
            ],
        }
        for indom in mf.indoms.values()
    ]


def _metrics(mf: MmvFile) -> list[Doc]:
    return [
        {
            "name": m.name,
            "item": m.item,
            "offset": m.offset,
            "type": m.type,
            "type_name": layout.TYPE_NAMES.get(m.type),
            "semantics": m.semantics,
            "semantics_name": SEMANTICS_TEXT.get(m.semantics),
            "dimension": m.dimension,
            "units": units_text(m.dimension),
            "indom": m.indom,
            "shorthelp": m.shorthelp,
            "longhelp": m.longhelp,
            "spill": m.spill or None,
        }
        for m in mf.metrics
    ]


def _jsonable(value: object) -> object:
    """Values as JSON allows them: non-finite floats become "nan", "inf" or "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _raw_value(mf: MmvFile, mtype: int, raw: bytes, extra: int) -> object:
    """The stored value, ignoring SENTINEL: number, string text, or hex for other types."""
    if mtype == layout.TYPE_STRING:
        return mf.read_string(extra)
    if mtype in layout.VALUE_FORMAT:
        return _jsonable(layout.VALUE_FORMAT[mtype].unpack_from(raw)[0])
    return raw.hex()


def _values(mf: MmvFile, snap: Snapshot) -> list[Doc]:
    out = []
    for m in mf.metrics:
        decode = mf.decoder(m.type)
        insts = mf.indoms[m.indom].instances if m.indom is not None else None
        for pos, slot in enumerate(m.slots):
            if slot < 0:
                continue
            raw, extra, _, _ = layout.VALUE.unpack_from(snap.data, slot)
            value = decode(snap, slot)
            state = "no-value" if value is NO_VALUE else OK
            state = "unsupported" if value is UNSUPPORTED else state
            out.append(
                {
                    "offset": mf.base + slot,
                    "metric": m.name,
                    "item": m.item,
                    "instance": insts[pos].internal if insts else None,
                    "external": insts[pos].external if insts else None,
                    "state": state,
                    "value": _jsonable(value) if state == OK else None,
                    "raw": _raw_value(mf, m.type, raw, extra),
                    "extra": extra,
                }
            )
    return sorted(out, key=lambda v: int(v["offset"]))


def _strings(mf: MmvFile) -> list[Doc]:
    """Entries of every STRINGS section that lies inside the file and was not rejected."""
    out = []
    for t in mf.sections:  # accepted: inside the data area, no overlap
        if t.type != layout.TOC_STRINGS:
            continue
        for k in range(t.count):
            at = t.offset + k * layout.STRING_SIZE
            out.append({"toc": t.index, "index": k, "offset": at, "text": mf.read_string(at)})
    return out


def _labels(mf: MmvFile) -> list[Doc]:
    return [
        {
            "offset": lab.offset,
            "kind": layout.LABEL_KINDS[lab.kind],
            "flags": lab.kind | (layout.LABEL_OPTIONAL if lab.optional else 0),
            "identity": lab.identity,
            "internal": lab.internal,
            "optional": lab.optional,
            "payload": lab.payload,
        }
        for lab in mf.labels
    ]


def dump(paths: Sequence[str], as_json: bool, out: TextIO) -> int:
    """``pmda-mmv dump``: print everything in each file; return the exit status."""
    docs = [describe(p) for p in paths]
    for d in docs:
        _spill_pmids(d)
    if as_json:
        out.write(json_text(docs) + "\n")
    else:
        write_lines(
            out,
            [line for k, d in enumerate(docs) for line in ([""] if k else []) + render_dump(d)],
        )
    return exit_status(docs)


def _spill_pmids(d: Doc) -> None:
    """Give each spilled metric of dump ``d`` the PMID the agent serves it under, as
    ``check`` judges the file (in its directory, the agent's identity registry read only)."""
    spilled = [m for m in d.get("metrics", ()) if m.get("spill")]
    if not spilled:
        return
    [verdict] = judge([d["file"]], ServingOptions())
    pmids = {s["metric"]: s["pmid"] for s in verdict.get("spills", ())}
    for m in spilled:
        m["pmid"] = pmids.get(m["name"])


def main(argv: Sequence[str]) -> int:
    """Run ``dump`` with ``argv``; returns the exit status (2: usage error)."""
    parser = argparse.ArgumentParser(
        prog="pmda-mmv dump", description=(__doc__ or "").split("\n\n")[1]
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("paths", nargs="+", metavar="FILE")
    try:
        ns = parser.parse_args(list(argv))
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 for --help
        return e.code if isinstance(e.code, int) else 2
    return dump(ns.paths, ns.json, sys.stdout)
