"""``pmda-mmv dump``'s text output: a :func:`~.dump.describe` document as lines, each
string JSON-quoted so that what a file holds is shown unambiguously."""

from __future__ import annotations

import json

from pmda_mmv.commands.check import Doc, render_check
from pmda_mmv.directory.filestate import OK
from pmda_mmv.mmvfile import layout

TYPE_TEXT = {
    layout.TYPE_NOSUPPORT: "not supported",
    layout.TYPE_I32: "32-bit int",
    layout.TYPE_U32: "32-bit unsigned int",
    layout.TYPE_I64: "64-bit int",
    layout.TYPE_U64: "64-bit unsigned int",
    layout.TYPE_FLOAT: "float",
    layout.TYPE_DOUBLE: "double",
    layout.TYPE_STRING: "string",
    layout.TYPE_ELAPSED: "elapsed (served as 64-bit int, microsec)",
}


def _q(text: str | None) -> str:
    """A string shown unambiguously: JSON-quoted (newlines visible), or ``(none)``."""
    return "(none)" if text is None else json.dumps(text, ensure_ascii=False)


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
        if m.get("spill"):
            pmid = f"PMID {m['pmid']}" if m.get("pmid") else "not served (see check)"
            lines.append(f"    spilled: {pmid}: {m['spill']}")
    return lines


def _render_value(v: Doc) -> str:
    inst = "" if v["instance"] is None else f"[{v['instance']} {_q(v['external'])}]"
    if v["state"] == OK:
        shown = _q(v["value"]) if isinstance(v["value"], str) else str(v["value"])
    else:
        shown = f"({v['state']}; stored {v['raw']!r})"
    extra = f" (extra {v['extra']})" if v["extra"] and not isinstance(v["value"], str) else ""
    return f"  {v['metric']}{inst} = {shown}{extra}  at {v['offset']}"


def render_dump(doc: Doc) -> list[str]:
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
