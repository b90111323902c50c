"""The shared name and label rules: what a servable metric name is, what a label payload
PCP accepts is, how label payloads merge into PCP label sets, and :func:`printable`, the
one escaping function of the agent, ``check``, ``dump`` and ``debug``.

Pure functions of their arguments: no I/O and no PCP imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final

from pmda_mmv.mmvfile import pcpdefs
from pmda_mmv.mmvfile.parsed import Label, Metric

_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a servable metric name, or None when it is valid.

    The reference's character rule (``[A-Za-z0-9_.]``, mmv.c verify_metric_name) plus one
    of ours: no empty component (``a..b``, a leading or trailing dot), which no PMNS
    lookup could reach."""
    if not name:
        return "empty name"
    for i, ch in enumerate(name):
        if ch not in _NAME_CHARS:
            return f"invalid character {ch!r} at position {i}"
    for part in name.split("."):
        if not part:
            return "empty name component"
    return None


def first_named(metrics: Iterable[Metric]) -> dict[str, Metric]:
    """The first metric entry (in file order) of each name among ``metrics``: a file's
    later entry with the same name, spilled or not, is not served (the catalogue refuses it,
    naming both offsets)."""
    first: dict[str, Metric] = {}
    for m in metrics:
        first.setdefault(m.name, m)
    return first


def _no_constants(token: str) -> object:
    raise ValueError(f"{token} is not JSON")


_STRICT: Final = json.JSONDecoder(parse_constant=_no_constants)
"""JSON as PCP reads it: no NaN, Infinity or -Infinity."""


def label_problem(payload: str) -> str | None:
    """Why PCP would reject this label payload (pmLookupLabels(3)), or None."""
    try:
        # json.loads only to say what it says of a byte order mark
        obj = json.loads(payload) if payload.startswith("\ufeff") else _STRICT.decode(payload)
    except ValueError as e:
        return f"payload is not JSON: {e}"
    if not isinstance(obj, dict) or not obj:
        return "payload is not a non-empty JSON object"
    return _label_names_problem(obj)


def _label_names_problem(obj: dict[str, object]) -> str | None:
    for name, value in obj.items():
        if not LABEL_NAME.fullmatch(name):
            return f"label name {name!r} is not [A-Za-z][A-Za-z0-9_]*"
        if isinstance(value, dict):
            why = _label_names_problem(value)
            if why:
                return why
    return None


LABEL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def merge_labels(labels: Iterable[Label]) -> tuple[str, str]:
    """Merge label payloads in file order (later names override, maps merge) into
    (labels, notes) JSON object texts, split by the on-disk OPTIONAL flag; "" for none.
    Numbers keep the writer's spelling (``-1.5e3`` stays so); text is not re-escaped, but
    for a lone surrogate (:func:`_text`): the result always encodes to UTF-8."""
    required, optional = _merged(labels)
    return (_dump(required) if required else "", _dump(optional) if optional else "")


def _merged(labels: Iterable[Label]) -> tuple[dict[str, object], dict[str, object]]:
    """The (labels, notes) objects that :func:`merge_labels` writes out."""
    required: dict[str, object] = {}
    optional: dict[str, object] = {}
    for lb in labels:
        target = optional if lb.optional else required
        _deep_update(target, _AS_WRITTEN.decode(lb.payload))
    return required, optional


def with_labels(labels: str, extra: dict[str, str]) -> str:
    """A merged label set's JSON text (``labels``, "" for none) with ``extra`` set over it
    (the agent's own labels, e.g. a container writer's ``container``: a file cannot forge
    them); numbers keep the writer's spelling."""
    if not extra:
        return labels
    merged: dict[str, object] = _AS_WRITTEN.decode(labels) if labels else {}
    merged.update(extra)
    return _dump(merged)


def label_set_problem(labels: Iterable[Label]) -> str | None:
    """Why libpcp would reject the label set(s) these labels merge into, or None: as many
    labels as PM_MAXLABELS or more (``__pmAddLabels``: "Argument list too long"), where a
    map's names count and the map itself does not, an empty map counts as one (found with
    pminfo against PCP 6.0.3: 254 names pass, flat or in one map; 255 fail).  libpcp's
    JSON length limit (PM_MAXLABELJSONLEN, 65535) cannot be reached first: a name costs at
    most its 244-byte payload, and 254 of them take under 62,000 bytes."""
    labels = list(labels)
    if sum(len(lb.payload) for lb in labels) < _MIN_LABEL_TEXT * pcpdefs.PM_MAXLABELS:
        return None  # too little text to hold that many labels: not parsed again
    for merged in _merged(labels):
        count = _label_count(merged)
        if count >= pcpdefs.PM_MAXLABELS:
            return (
                f"they merge into {count} labels, libpcp accepts at most {pcpdefs.PM_MAXLABELS - 1}"
            )
    return None


_MIN_LABEL_TEXT: Final = 6
"""The fewest characters of payload one counted label takes: ``"a":1`` and a comma or a
brace (a payload of ``n`` labels is at least ``6 * n + 1`` characters long)."""


def _label_count(obj: dict[str, object]) -> int:
    """Labels libpcp counts in a merged set: every name whose value is not a map, and every
    empty map (``{"e":{}}`` is one label to libpcp)."""
    return sum((_label_count(v) or 1) if isinstance(v, dict) else 1 for v in obj.values())


def _deep_update(target: dict[str, object], new: dict[str, object]) -> None:
    """Merge ``new`` into ``target`` as PCP merges label sets: maps merge name by name
    (``{"m":{"a":1}}`` then ``{"m":{"b":2}}`` gives ``m.a`` and ``m.b``), anything else
    is replaced."""
    for name, value in new.items():
        old = target.get(name)
        if isinstance(old, dict) and isinstance(value, dict):
            _deep_update(old, value)
        else:
            target[name] = value


class _Raw(str):
    """A JSON number token, kept as written."""


_AS_WRITTEN: Final = json.JSONDecoder(parse_float=_Raw, parse_int=_Raw)
"""JSON with its numbers kept as written (:class:`_Raw`)."""


def _dump(value: object) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        items = (f"{_text(k)}:{_dump(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, str):
        return _text(value)
    return json.dumps(value)


def _text(value: str) -> str:
    """A JSON string as written, non-ASCII text unescaped; a string holding a lone
    surrogate (``"\\ud800"`` escaped in the payload: no UTF-8 encodes it) stays escaped,
    so that every label set can be sent to pmcd as UTF-8."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return text


def printable(text: str) -> str:
    """``text`` safe for one log line, a PCP string or a terminal: undecodable bytes of a
    file name (surrogates) and every character that is not printable (C0 and C1 controls
    such as ESC and U+009B, DEL, newlines, which could forge a log line, and the
    bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069) are escaped.  The
    one escaping function of the agent, ``check``, ``dump`` and ``debug``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # os.fsdecode's surrogateescape of a byte
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)
