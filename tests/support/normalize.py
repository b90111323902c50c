"""Parse and compare what PCP clients print about the ``mmv`` tree, for the differential tests.

The same client commands are run against two agents (PCP's C pmdammv in a local context, and
pmda-mmv under a private pmcd); this module turns their output into comparable structures and
lists the differences, field by field.  Normalisation removes only what neither agent controls:

* context and host labels (``hostname``, ``domainname``, ``machineid`` added by pmcd or by the
  local context; ``userid``/``groupid`` added by a local context only);
* the order of names, instances and labels (JSON key order is kept inside a label set, but sets
  are compared as mappings).

Values that change on their own (running ELAPSED timers) are not normalised here: the tests
classify such differences, with a bound, instead of hiding them.

Parsers (each takes the text a client printed on stdout):

* :func:`parse_info`: ``pminfo -dfTlt`` / ``pminfo -f`` / ``pminfo -x`` -> {name: :class:`Block`}
* :func:`parse_pmids`: ``pminfo -m`` -> {name: PMID text ``70.C.I``}
* :func:`parse_probe`: ``pmprobe -I`` -> {name: ``N "inst" ...`` or ``-E message``}
* :func:`parse_indom_help`: ``pminfo -tT INDOM...`` -> {indom: (oneline, help)}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

CONTEXT_LABELS = frozenset({"hostname", "domainname", "machineid", "userid", "groupid"})
"""Labels that come from the host or the client context, never from the agent."""

NO_TEXT = "Error: One-line or help text is not available"
BAD_PMID = "Error: Unknown or illegal metric identifier"
BAD_INDOM = "Error: Unknown or illegal instance domain identifier"

_HEAD = re.compile(r"^(\S+)(?: (?:\[(.*)\]|One-line Help: (Error: .*)))?$")
_DESC = re.compile(r"^    Data Type: (.*)  InDom: (\S+) 0x[0-9a-f]+$")
_SEM = re.compile(r"^    Semantics: (.*)  Units: (.*)$")
_INST = r'inst \[(-?\d+) or "(.*)"\] '
_VALUE = re.compile(rf"^    (?:{_INST})?value (.*)$")
_INST_LABELS = re.compile(rf"^    {_INST}labels (.*)$")
_INDOM_HEAD = re.compile(r"^InDom: (\S+) 0x[0-9a-f]+ (?:\[(.*)\]|One-line Help: (Error: .*))$")


class _Raw(str):
    """A JSON number token kept as written (``-1.5e3`` stays so)."""


def labels(text: str) -> dict[str, Any]:
    """A ``labels {...}`` JSON object without the context/host labels; numbers stay strings
    as spelled, nested maps stay nested."""
    parsed: dict[str, Any] = json.loads(text, parse_float=_Raw, parse_int=_Raw)
    return {k: v for k, v in parsed.items() if k not in CONTEXT_LABELS}


Instance = tuple[int, str] | None
"""(internal id, external name), or None for a singular value."""


@dataclass
class Block:
    """One metric as a pminfo command showed it.  Text fields hold the text or the pminfo
    ``Error: ...`` line; ``values`` is None when pminfo printed no value lines (then
    ``fetch_error`` says why: ``Error: ...`` or ``No value(s) available!``)."""

    name: str
    oneline: str | None = None
    type: str | None = None
    indom: str | None = None
    semantics: str | None = None
    units: str | None = None
    labels: dict[str, Any] | None = None
    help: str | None = None
    values: dict[Instance, str] | None = None
    fetch_error: str | None = None
    instance_labels: dict[Instance, dict[str, Any]] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The comparable fields, by name."""
        return {k: v for k, v in vars(self).items() if k != "name"}


def _inst(m: re.Match[str]) -> Instance:
    return None if m.group(1) is None else (int(m.group(1)), m.group(2))


def parse_info(text: str) -> dict[str, Block]:
    """``pminfo`` output (any of -d -f -x -t -T -l) -> {name: Block}."""
    blocks: dict[str, Block] = {}
    for chunk in _paragraphs(text):
        blocks_from_lines(chunk.split("\n"), blocks)
    return blocks


def _paragraphs(text: str) -> list[str]:
    """The paragraphs of pminfo output, one per metric: a blank line followed by a line that
    is not a metric's first line is inside a help text (PCP 7's ``mmv.control.debug`` help
    has blank lines), and is kept with its blank lines."""
    parts = re.split(r"(\n\n+)", text.strip("\n"))
    chunks: list[str] = []
    for i in range(0, len(parts), 2):
        if chunks and not _HEAD.match(parts[i].split("\n")[0]):
            chunks[-1] += parts[i - 1] + parts[i]
        elif parts[i]:
            chunks.append(parts[i])
    return chunks


def blocks_from_lines(lines: list[str], out: dict[str, Block]) -> None:
    """Add the Block of one pminfo paragraph (its lines) to ``out``."""
    head = _HEAD.match(lines[0])
    if head is None:
        raise ValueError(f"unexpected pminfo line {lines[0]!r}")
    b = out[head.group(1)] = Block(head.group(1))
    if head.group(2) is not None or head.group(3) is not None:
        b.oneline = head.group(2) if head.group(2) is not None else head.group(3)
    help_lines: list[str] | None = None
    for line in lines[1:]:
        if help_lines is not None and not _value_line(line):
            help_lines.append(line)
            continue
        if help_lines is not None:
            b.help, help_lines = "\n".join(help_lines), None
        _one_line(b, line)
        if line == "Help:":
            help_lines = []
    if help_lines is not None:
        b.help = "\n".join(help_lines)


def _value_line(line: str) -> bool:
    return bool(
        _VALUE.match(line)
        or _INST_LABELS.match(line)
        or line.startswith("Error: ")
        or line.startswith("No value(s)")
    )


def _one_line(b: Block, line: str) -> None:
    if m := _DESC.match(line):
        b.type, b.indom = m.group(1), m.group(2)
    elif m := _SEM.match(line):
        b.semantics, b.units = m.group(1), m.group(2)
    elif line.startswith("    labels "):
        b.labels = labels(line[len("    labels ") :])
    elif line.startswith("Full Help: "):
        b.help = line[len("Full Help: ") :]
    elif line.startswith("Help: "):
        b.help = line[len("Help: ") :]  # "Help: <empty entry>"
    elif m := _INST_LABELS.match(line):
        b.instance_labels[_inst(m)] = labels(m.group(3))
    elif m := _VALUE.match(line):
        b.values = b.values or {}
        b.values[_inst(m)] = m.group(3)
    elif line.startswith("Error: ") or line.startswith("No value(s)"):
        b.fetch_error = line
    elif b.values and line != "Help:":  # a string value with a newline in it
        last = next(reversed(b.values))
        b.values[last] += "\n" + line
    elif line != "Help:":
        raise ValueError(f"unexpected pminfo line {line!r}")


def parse_pmids(text: str) -> dict[str, str]:
    """``pminfo -m`` -> {name: "70.C.I"}."""
    out = {}
    for line in text.splitlines():
        name, sep, pmid = line.partition(" PMID: ")
        if sep:
            out[name] = pmid.strip()
    return out


def parse_probe(text: str) -> dict[str, str]:
    """``pmprobe -I`` -> {name: the rest of its line (count and instances, or error)}."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name:
            out[name] = rest
    return out


def parse_indom_help(text: str) -> dict[str, tuple[str, str | None]]:
    """``pminfo -tT INDOM...`` -> {indom "70.S": (oneline or error, long help or error)}."""
    out: dict[str, tuple[str, str | None]] = {}
    for chunk in re.split(r"\n\n+", text.strip("\n")):
        lines = chunk.split("\n")
        m = _INDOM_HEAD.match(lines[0])
        if m is None:
            continue
        oneline = m.group(2) if m.group(2) is not None else m.group(3)
        rest = lines[1:]
        if rest and rest[0].startswith("Full Help: "):
            long: str | None = rest[0][len("Full Help: ") :]
        elif rest and rest[0] == "Help:":
            long = "\n".join(rest[1:])
        else:
            long = rest[0][len("Help: ") :] if rest else None
        out[m.group(1)] = (oneline, long)
    return out


@dataclass(frozen=True)
class Diff:
    """One difference: ``command`` (what was run), ``name`` (metric, indom or "<tree>"),
    ``field`` and the two sides (None when the side has no such name)."""

    command: str
    name: str
    field: str
    c: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.command}: {self.name} {self.field}: C={self.c!r} ours={self.ours!r}"


def diff_blocks(command: str, c: dict[str, Block], ours: dict[str, Block]) -> list[Diff]:
    """Field-by-field differences of two ``parse_info`` results."""
    diffs = []
    for name in sorted(set(c) | set(ours)):
        cb, ob = c.get(name), ours.get(name)
        if cb is None or ob is None:
            diffs.append(Diff(command, name, "presence", cb, ob))
            continue
        cf, of = cb.fields(), ob.fields()
        for key in cf:
            if cf[key] != of[key]:
                diffs.append(Diff(command, name, key, cf[key], of[key]))
    return diffs


def diff_maps(command: str, fieldname: str, c: dict[str, Any], ours: dict[str, Any]) -> list[Diff]:
    """Differences of two {name: value} results (pmids, pmprobe lines, indom help)."""
    return [
        Diff(command, name, fieldname, c.get(name), ours.get(name))
        for name in sorted(set(c) | set(ours))
        if c.get(name) != ours.get(name)
    ]
