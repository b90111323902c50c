"""STRINGS entries (mmv(5) "Strings"): 256-byte slots of NUL-terminated text, referenced by
offset from metric names (v2, v3), instance names (v2, v3), help texts and string values."""

from __future__ import annotations

from typing import Final, TypeVar

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parse.state import State

SHARED_MAX: Final = 16_384
"""Texts, and numbers, :func:`shared` and :func:`shared_number` remember at most (then
they forget them all at once): a bound on what they keep alive, whatever the names served."""
_SHARED: dict[str, str] = {}
_NUMBERS: dict[int, int] = {}
_Value = TypeVar("_Value", str, int)


def shared(text: str) -> str:
    """The one ``str`` of ``text``'s value met lately: the metric names, name components
    and help text that many files repeat (the processes of one application) are kept
    once, not once per file."""
    return _one(_SHARED, text)


def shared_number(number: int) -> int:
    """The one ``int`` of ``number``'s value met lately (Python shares only -5 to 256):
    the items, units words and entry and value offsets that the files of one application
    repeat, metric for metric, are kept once (28 to 32 bytes each, a name)."""
    return _one(_NUMBERS, number)


def _one(table: dict[_Value, _Value], value: _Value) -> _Value:
    got = table.get(value)
    if got is None:
        if len(table) >= SHARED_MAX:
            table.clear()
        got = table[value] = value
    return got


def cstring(raw: bytes, errors: str = "replace") -> str | None:
    """The NUL-terminated text at the start of ``raw`` (None without a NUL).  Text PCP
    passes on as a Python str (help, strings, labels) replaces bytes that are not UTF-8;
    instance names keep them (``errors="surrogateescape"``) to be served byte for byte."""
    end = raw.find(b"\0")
    return None if end < 0 else raw[:end].decode("utf-8", errors)


def string(
    st: State, offset: int, where: str, at: int, optional: bool, errors: str = "replace"
) -> str | None:
    """Text of the string entry at ``offset``; problems are recorded, None returned."""
    if offset == 0:
        if not optional:
            st.problem(where, at, "string offset 0 (absent) where a string is required")
        return None
    if offset < layout.HEADER_SIZE or offset + layout.STRING_SIZE > st.size:
        why = f"string offset {offset} outside the file (needs {layout.STRING_SIZE} bytes)"
        st.problem(where, at, why, st.size - layout.STRING_SIZE)
        return None
    text = cstring(st.data[offset : offset + layout.STRING_SIZE], errors)
    if text is None:
        why = f"string at {offset} not NUL-terminated within {layout.STRING_SIZE} bytes"
        st.problem(where, at, why, layout.STRING_SIZE)
    return text


def string_ok(st: State, offset: int) -> bool:
    """Whether :func:`string` would accept the string entry at ``offset`` (nothing is
    recorded): inside the file and NUL-terminated within its slot."""
    if offset < layout.HEADER_SIZE or offset + layout.STRING_SIZE > st.size:
        return False
    return st.data.find(b"\0", offset, offset + layout.STRING_SIZE) >= 0


def help_text(st: State, offset: int, where: str, at: int) -> str | None:
    """Help text; a slot filled to its last byte with no NUL (as Speed writes) is served
    as its first STRING_SIZE - 1 bytes, as the C agent does, and noted (partial)."""
    inside = offset >= layout.HEADER_SIZE and offset + layout.STRING_SIZE <= st.size
    raw = st.data[offset : offset + layout.STRING_SIZE] if inside else b""
    if raw and b"\0" not in raw:
        st.problem(
            where,
            at,
            f"string at {offset} not NUL-terminated within {layout.STRING_SIZE} bytes, "
            f"served as its first {layout.STRING_SIZE - 1} bytes (as the C agent)",
            layout.STRING_SIZE,
        )
        return cstring(raw[:-1] + b"\0")
    return string(st, offset, where, at, optional=True)
