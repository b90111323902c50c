"""``pmda-mmv check`` and ``pmda-mmv dump``: inspect MMV files without pmcd.

``check [--json] FILE|DIR...`` validates each file (every regular non-dot file of a
directory, sorted) with :class:`pmda_mmv.reader.MmvFile` and reads every value once.  Each
file gets a status: ``ok``, ``not-ready`` (generation 0 or in flux, or changed while read),
``partial`` (some sections or entries skipped) or ``refused``; every problem is reported as
field, byte offset and message.  ``--json`` prints a list of
``{"file", "status", "problems": [{"field", "offset", "message"[, "limit"]}]}``.

``dump [--json] FILE...`` prints every header field, TOC entry, indom, instance, metric,
value, string and label the reader accepted, plus its problems: what PCP's ``mmvdump``
shows.  ``--json`` prints one list with one object per file (see :func:`describe`).

Both are bounded and terminal-safe: at most ``format.MAX_PROBLEMS`` problems per file are
listed (then one line counting the others), and every control and bidirectional character
of a name, help text or label is escaped (:func:`~.reader.printable`; ``\\uXXXX`` in JSON).

Exit status of both: 0 when every file is ``ok``, 1 when any is not, 2 on a usage error.
Units are formatted as PCP's ``pmUnitsStr(3)`` does, through python3-pcp when it is
installed and with :func:`format_units` otherwise, so neither command needs python3-pcp.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from . import format as fmt
from .reader import (
    NO_VALUE,
    UNSUPPORTED,
    Changed,
    MmvError,
    MmvFile,
    NotReady,
    Snapshot,
    printable,
)

Doc = dict[str, Any]

OK, NOT_READY, PARTIAL, REFUSED = "ok", "not-ready", "partial", "refused"

TYPE_TEXT = {
    fmt.TYPE_NOSUPPORT: "not supported",
    fmt.TYPE_I32: "32-bit int",
    fmt.TYPE_U32: "32-bit unsigned int",
    fmt.TYPE_I64: "64-bit int",
    fmt.TYPE_U64: "64-bit unsigned int",
    fmt.TYPE_FLOAT: "float",
    fmt.TYPE_DOUBLE: "double",
    fmt.TYPE_STRING: "string",
    fmt.TYPE_ELAPSED: "elapsed (served as 64-bit int, microsec)",
}
SEMANTICS_TEXT = {
    fmt.SEM_UNSET: "unset (served as counter)",
    fmt.SEM_COUNTER: "counter",
    fmt.SEM_INSTANT: "instant",
    fmt.SEM_DISCRETE: "discrete",
}
FLAG_TEXT = {
    fmt.FLAG_NOPREFIX: "noprefix",
    fmt.FLAG_PROCESS: "process",
    fmt.FLAG_SENTINEL: "sentinel",
}


# -- units ----------------------------------------------------------------------------------

_SPACE = ("byte", "Kbyte", "Mbyte", "Gbyte", "Tbyte", "Pbyte", "Ebyte", "Zbyte", "Ybyte")
_TIME = ("nanosec", "microsec", "millisec", "sec", "min", "hour")


def format_units(word: int, count_scale_named: bool = True) -> str:
    """A pmUnits word (the MMV metric ``dimension`` field) as ``pmUnitsStr(3)`` prints it,
    e.g. ``"byte / sec"``, ``"count x 10^6 / hour"``; ``""`` for no units.  A count scale
    without dimensions is ``"count x 10^6"`` as in PCP 7 (``count_scale_named``), ``"x
    10^6"`` as in PCP 6.  The low 8 bits (pad; PCP 7.2's extraUnit/extraScale) are
    ignored, as PCP 6 does."""
    dspace, dtime, dcount, sspace, stime, scount = fmt.units_fields(word)
    space = _SPACE[sspace] if sspace < len(_SPACE) else f"space-{sspace}"
    time_ = _TIME[stime] if stime < len(_TIME) else f"time-{stime}"
    count = {0: "count", 1: "count x 10"}.get(scount, f"count x 10^{scount}")
    dims = ((dspace, space), (dtime, time_), (dcount, count))

    def power(dim: int, name: str) -> str:
        return name if abs(dim) == 1 else f"{name}^{abs(dim)}"

    up = [power(d, n) for d, n in dims if d > 0]
    down = [power(d, n) for d, n in dims if d < 0]
    text = " ".join(up + (["/", *down] if down else []))
    if text:
        return text
    alone = {0: "", 1: "x 10"}.get(scount, f"x 10^{scount}")
    return f"count {alone}" if alone and count_scale_named else alone


@functools.cache
def _pcp_units_str() -> Callable[[int], str] | None:
    """python3-pcp's pmUnitsStr over a native pmUnits word, or None without python3-pcp."""
    try:
        from pcp import pmapi
    except Exception:  # ImportError, or OSError when libpcp cannot be loaded
        return None

    def units_str(word: int) -> str:
        return str(pmapi.pmUnits.from_buffer_copy(struct.pack("=I", word)))

    return units_str


def units_text(word: int) -> str:
    """``pmUnitsStr`` of ``word``: PCP's own when python3-pcp is installed, else
    :func:`format_units`."""
    pcp = _pcp_units_str()
    return pcp(word) if pcp is not None else format_units(word)


# -- per-file results -----------------------------------------------------------------------


def status_of(error: MmvError) -> str:
    """The check status of a file whose open or read raised ``error``: ``not-ready`` for
    NotReady and Changed (transient: try again), ``refused`` for anything else."""
    return NOT_READY if isinstance(error, NotReady | Changed) else REFUSED


def expand(paths: Iterable[str]) -> tuple[list[str], list[Doc]]:
    """Files to inspect: each path, a directory replaced by its regular non-dot files
    (sorted).  Returns (files, results for directories that could not be listed)."""
    files: list[str] = []
    failed: list[Doc] = []
    for path in paths:
        if not os.path.isdir(path):
            files.append(path)
            continue
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            problem = {"field": "file", "offset": -1, "message": f"cannot list: {e.strerror}"}
            failed.append({"file": path, "status": REFUSED, "problems": [problem]})
            continue
        files += [os.path.join(path, n) for n in names if _regular(os.path.join(path, n))]
    return files, failed


def _regular(path: str) -> bool:
    """A regular file (not followed through a symlink) whose name does not start with '.'."""
    try:
        return not os.path.basename(path).startswith(".") and stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def check_file(path: str) -> Doc:
    """Validate ``path`` and read all its values once: ``{"file", "status", "problems"}``."""
    try:
        with MmvFile.open(path) as mf:
            for _ in mf.values():
                pass
            problems = [p.as_dict() for p in mf.problems]
            return {"file": path, "status": mf.status, "problems": problems}
    except MmvError as e:
        return {"file": path, "status": status_of(e), "problems": [e.as_dict()]}


# -- dump document --------------------------------------------------------------------------


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
            return {"file": path, "status": NOT_READY, "problems": [e.as_dict()], "header": None}
        return {
            "file": path,
            "status": mf.status,
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
    """The creation time g1 encodes (:func:`~.format.generation_time`), or None."""
    seconds = fmt.generation_time(g1, time.time())
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")


def _raw_header(path: str) -> Doc | None:
    """The header fields of a file the reader did not accept, or None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.pread(fd, fmt.HEADER_SIZE, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) < fmt.HEADER_SIZE:
        return None
    return _header_doc(*fmt.HEADER.unpack(raw))


def _header(mf: MmvFile) -> Doc:
    h = mf.header
    return _header_doc(fmt.MAGIC, h.version, h.g1, h.g2, h.tocs, h.flags, h.process, h.cluster)


def _toc(mf: MmvFile) -> list[Doc]:
    return [
        {
            "index": t.index,
            "at": t.at,
            "type": t.type,
            "section": fmt.TOC_NAMES.get(t.type),
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
            "type_name": fmt.TYPE_NAMES.get(m.type),
            "semantics": m.semantics,
            "semantics_name": SEMANTICS_TEXT.get(m.semantics),
            "dimension": m.dimension,
            "units": units_text(m.dimension),
            "indom": m.indom,
            "shorthelp": m.shorthelp,
            "longhelp": m.longhelp,
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
    if mtype == fmt.TYPE_STRING:
        return mf.read_string(extra)
    if mtype in fmt.VALUE_FORMAT:
        return _jsonable(fmt.VALUE_FORMAT[mtype].unpack_from(raw)[0])
    return raw.hex()


def _values(mf: MmvFile, snap: Snapshot) -> list[Doc]:
    out = []
    for m in mf.metrics:
        decode = mf.decoder(m.type)
        insts = mf.indoms[m.indom].instances if m.indom is not None else None
        for pos, slot in enumerate(m.slots):
            if slot < 0:
                continue
            raw, extra, _, _ = fmt.VALUE.unpack_from(snap.data, slot)
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
        if t.type != fmt.TOC_STRINGS:
            continue
        for k in range(t.count):
            at = t.offset + k * fmt.STRING_SIZE
            out.append({"toc": t.index, "index": k, "offset": at, "text": mf.read_string(at)})
    return out


def _labels(mf: MmvFile) -> list[Doc]:
    return [
        {
            "offset": lab.offset,
            "kind": fmt.LABEL_KINDS[lab.kind],
            "flags": lab.kind | (fmt.LABEL_OPTIONAL if lab.optional else 0),
            "identity": lab.identity,
            "internal": lab.internal,
            "optional": lab.optional,
            "payload": lab.payload,
        }
        for lab in mf.labels
    ]


# -- text rendering -------------------------------------------------------------------------


def _q(text: str | None) -> str:
    """A string shown unambiguously: JSON-quoted (newlines visible), or ``(none)``."""
    return "(none)" if text is None else json.dumps(text, ensure_ascii=False)


def _problem_lines(problems: Sequence[Doc]) -> list[str]:
    lines = []
    for p in problems:
        where = f" at offset {p['offset']}" if p["offset"] >= 0 else ""
        limit = f" (limit {p['limit']})" if "limit" in p else ""
        lines.append(f"  {p['field']}{where}: {p['message']}{limit}")
    return lines


def render_check(result: Doc) -> list[str]:
    """Text lines of one check result."""
    n = len(result["problems"])
    extra = f" ({n} problem{'s' if n != 1 else ''})" if n else ""
    return [f"{result['file']}: {result['status']}{extra}", *_problem_lines(result["problems"])]


def _render_header(h: Doc) -> list[str]:
    names = "|".join(h["flag_names"]) or "none"
    created = f" (created {h['created']})" if h["created"] else ""
    return [
        "header:",
        f"  magic      {h['magic']!r}",
        f"  version    {h['version']}",
        f"  generation g1={h['g1']} g2={h['g2']}{created}",
        f"  tocs       {h['tocs']}",
        f"  flags      {h['flags']:#x} ({names})",
        f"  process    {h['process']}",
        f"  cluster    {h['cluster']}",
    ]


def _render_toc(toc: list[Doc]) -> list[str]:
    lines = ["toc:"]
    for t in toc:
        name = t["section"] or f"unknown type {t['type']:#x}"
        lines.append(
            f"  [{t['index']}] at {t['at']}: {name}, {t['count']} entries at offset {t['offset']}"
        )
    return lines


def _render_indoms(indoms: list[Doc]) -> list[str]:
    lines = ["indoms:"]
    for d in indoms:
        lines += [
            f"  indom {d['serial']} at {d['offset']}: {d['count']} instances",
            f"    shorthelp {_q(d['shorthelp'])}",
            f"    longhelp  {_q(d['longhelp'])}",
        ]
        lines += [
            f"    instance {i['internal']} {_q(i['external'])} at {i['offset']}"
            for i in d["instances"]
        ]
    return lines


def _render_metrics(metrics: list[Doc]) -> list[str]:
    lines = ["metrics:"]
    for m in metrics:
        indom = "none (singular)" if m["indom"] is None else str(m["indom"])
        lines += [
            f"  {m['name']} at {m['offset']}",
            f"    item {m['item']}, type {TYPE_TEXT.get(m['type'], '?')} ({m['type']}), "
            f"semantics {m['semantics_name'] or '?'} ({m['semantics']})",
            f"    units {m['units'] or 'none'} ({m['dimension']:#010x}), indom {indom}",
            f"    shorthelp {_q(m['shorthelp'])}",
            f"    longhelp  {_q(m['longhelp'])}",
        ]
    return lines


def _render_value(v: Doc) -> str:
    inst = "" if v["instance"] is None else f"[{v['instance']} {_q(v['external'])}]"
    if v["state"] == OK:
        shown = _q(v["value"]) if isinstance(v["value"], str) else str(v["value"])
    else:
        shown = f"({v['state']}; stored {v['raw']!r})"
    extra = f" (extra {v['extra']})" if v["extra"] and not isinstance(v["value"], str) else ""
    return f"  {v['metric']}{inst} = {shown}{extra}  at {v['offset']}"


def _render_dump(doc: Doc) -> list[str]:
    lines = render_check(doc)
    if doc.get("header"):
        lines += _render_header(doc["header"])
    if "toc" not in doc:
        return lines
    lines += _render_toc(doc["toc"]) + _render_indoms(doc["indoms"])
    lines += _render_metrics(doc["metrics"])
    lines += ["values:", *map(_render_value, doc["values"])]
    lines += ["strings:"] + [
        f"  [{s['toc']}.{s['index']}] at {s['offset']}: {_q(s['text'])}" for s in doc["strings"]
    ]
    lines += ["labels:"] + [
        f"  {lab['kind']} {lab['identity']}"
        + (f" instance {lab['internal']}" if lab["kind"] == "instances" else "")
        + f"{' (optional)' if lab['optional'] else ''} at {lab['offset']}: {lab['payload']}"
        for lab in doc["labels"]
    ]
    return lines


# -- commands -------------------------------------------------------------------------------


def _json(obj: object) -> str:
    """JSON text; ``\\uXXXX`` escapes only when a string holds a character a terminal
    would act on (see :func:`~.reader.printable`) or bytes that are not UTF-8."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    if printable(text.replace("\n", " ")) != text.replace("\n", " "):
        text = json.dumps(obj, indent=1)
    return text


def _write(out: TextIO, lines: Iterable[str]) -> None:
    """Write ``lines``, each made terminal-safe by :func:`~.reader.printable` (control and
    bidirectional characters, and bytes of names that are not UTF-8, escaped)."""
    out.write("".join(printable(line) + "\n" for line in lines))


def _exit_status(results: Sequence[Doc]) -> int:
    return 0 if all(r["status"] == OK for r in results) else 1


def check(paths: Sequence[str], as_json: bool, out: TextIO) -> int:
    """``pmda-mmv check``: print each file's status and problems; return the exit status."""
    files, results = expand(paths)
    results += [check_file(f) for f in files]
    if as_json:
        out.write(_json(results) + "\n")
    else:
        for r in results:
            _write(out, render_check(r))
    return _exit_status(results)


def dump(paths: Sequence[str], as_json: bool, out: TextIO) -> int:
    """``pmda-mmv dump``: print everything in each file; return the exit status."""
    docs = [describe(p) for p in paths]
    if as_json:
        out.write(_json(docs) + "\n")
    else:
        _write(
            out,
            [line for k, d in enumerate(docs) for line in ([""] if k else []) + _render_dump(d)],
        )
    return _exit_status(docs)


def main(command: str, argv: Sequence[str]) -> int:
    """Run ``check`` or ``dump`` with ``argv``; returns the exit status (2: usage error)."""
    what = "FILE|DIR" if command == "check" else "FILE"
    parser = argparse.ArgumentParser(
        prog=f"pmda-mmv {command}",
        description=(__doc__ or "").split("\n\n")[1 if command == "check" else 2],
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("paths", nargs="+", metavar=what)
    try:
        ns = parser.parse_args(list(argv))
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 for --help
        return e.code if isinstance(e.code, int) else 2
    run = check if command == "check" else dump
    return run(ns.paths, ns.json, sys.stdout)
