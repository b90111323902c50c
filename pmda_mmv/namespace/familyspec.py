"""A ``--family`` option as data: :class:`FamilySpec` and its parser (docs/families.md).

``NAME=GLOB[:owner=USER][:mode=MODE][:mode.METRIC=MODE]``: the family's name (one name
component), the fnmatch pattern of its members' file names, the owner it takes files of
(a user name or uid; default: remembered, else the first member's, :mod:`.family`), and
how instant and discrete metrics are aggregated.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass
from typing import Final

from pmda_mmv.mmvfile.rules import name_problem

MODES: Final = ("sum", "min", "max", "mostrecent")


@dataclass(frozen=True)
class FamilySpec:
    """One ``--family NAME=GLOB[:owner=USER][:mode=MODE][:mode.METRIC=MODE]``."""

    name: str
    glob: str
    owner: int | None = None
    mode: str = "sum"
    modes: tuple[tuple[str, str], ...] = ()

    def mode_of(self, metric: str) -> str:
        """The aggregation mode of instant/discrete ``metric`` (its own, else the family's)."""
        return dict(self.modes).get(metric, self.mode)


def parse_family(text: str) -> FamilySpec:
    """A ``--family`` value as :class:`FamilySpec`; ValueError saying what is wrong."""
    name, sep, rest = text.partition("=")
    glob, *extras = rest.split(":")
    if not sep or not name or not glob:
        raise ValueError(f"--family {text!r}: not NAME=GLOB")
    why = name_problem(name)
    if why or "." in name:
        raise ValueError(f"--family {text!r}: {name!r} is not a name component ({why or 'a dot'})")
    if name == "control":
        raise ValueError(f"--family {text!r}: {name!r} is reserved for the agent (mmv.control)")
    owner, mode, modes = None, "sum", []
    for extra in extras:
        k, _, v = extra.partition("=")
        if k == "owner":
            owner = int(v) if v.isdigit() else _uid(v, text)
            if owner >= (1 << 32) - 1:
                raise ValueError(f"--family {text!r}: uid {v} is out of range")
        elif k == "mode" or k.startswith("mode."):
            if v not in MODES:
                raise ValueError(f"--family {text!r}: mode {v!r} is not one of {', '.join(MODES)}")
            if k == "mode":
                mode = v
            elif not k[5:]:
                raise ValueError(f"--family {text!r}: {extra!r} names no metric")
            else:
                modes.append((k[5:], v))
        else:
            raise ValueError(f"--family {text!r}: {extra!r} is not owner=USER or mode=MODE")
    return FamilySpec(name, glob, owner, mode, tuple(modes))


def _uid(user: str, text: str) -> int:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--family {text!r}: no user {user!r}") from None
