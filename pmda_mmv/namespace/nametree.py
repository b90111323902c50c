"""The served metric names as a tree of name components, for the catalogue's name rules.

Every operation walks a name's components once, so it costs O(length of the name) however
deep the name is (the prefixes of a name of d components, built as strings, cost O(d^2)).
No PCP imports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import Any, Final

from pmda_mmv.mmvfile.parse.strings import shared

MAX_CHILDREN: Final = 12_000
"""Names directly below one namespace node.  libpcp builds the agent's namespace anew at
every change, walking all siblings at each insert: a node of k names costs k^2 / 2 steps
(10,000: about 0.45 s here; 40,000: 7.6 s, past pmcd's timeout)."""


class _Node:
    """A component with names below it (a served name's own component is its leaf value,
    not a node)."""

    __slots__ = ("below", "leaves")

    def __init__(self) -> None:
        self.below: dict[str, Any] = _NONE  # the next component -> its node or leaf value
        self.leaves = 0  # served names below this node


_NONE: Final[dict[str, Any]] = {}
"""The ``below`` of a node with nothing below it: one empty dict, never written."""

LEAF: Final = object()
"""The leaf value of a name claimed without one."""


def _find(root: _Node, name: str) -> Any:
    """The node or leaf value at ``name``, or None."""
    node: Any = root
    for part in name.split("."):
        if not isinstance(node, _Node):
            return None
        node = node.below.get(part)
        if node is None:
            return None
    return node


class _Leaves(Set[str]):
    """The served names, read from the tree (no set of its own: one entry per name)."""

    def __init__(self, root: _Node) -> None:
        self._root = root

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        found = _find(self._root, name)
        return found is not None and not isinstance(found, _Node)

    def __len__(self) -> int:
        return sum(n.leaves if isinstance(n, _Node) else 1 for n in self._root.below.values())

    def __iter__(self) -> Iterator[str]:
        stack = list(self._root.below.items())
        while stack:
            prefix, node = stack.pop()
            if not isinstance(node, _Node):
                yield prefix
            else:
                stack.extend((f"{prefix}.{part}", below) for part, below in node.below.items())


class _Values(Mapping[str, Any]):
    """Each served name's leaf value (the catalogue's: its PMID), read from the tree (no
    dictionary by name of its own)."""

    def __init__(self, root: _Node, leaves: _Leaves) -> None:
        self._root, self._leaves = root, leaves

    def __getitem__(self, name: str) -> Any:
        found = _find(self._root, name)
        if found is None or isinstance(found, _Node):
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._leaves)

    def __len__(self) -> int:
        return len(self._leaves)


class NameTree:
    """Served names (``a.b.c``): which are leaves, which non-leaves, how many names lie
    directly below each node, and each name's leaf value (:attr:`values`).  The first
    component's node (the agent's prefix) is capped like the others; the root, above it,
    is not."""

    def __init__(self) -> None:
        self._root = _Node()
        leaves = _Leaves(self._root)
        self.leaves: Set[str] = leaves
        self.values: Mapping[str, Any] = _Values(self._root, leaves)

    def __bool__(self) -> bool:
        return bool(self._root.below)

    def conflict(self, name: str) -> str | None:
        """Why ``name`` cannot be a leaf now (already served, a non-leaf of served names,
        below a leaf, or new below a full node), or None."""
        if name in self.leaves:
            return f"{name} is already served"
        parts = name.split(".")
        node = self._root
        for depth, part in enumerate(parts):
            below = node.below.get(part)
            if below is None:  # a new node below ``node``: is there room for it?
                if depth >= 1 and len(node.below) >= MAX_CHILDREN:
                    return (
                        f"{'.'.join(parts[:depth])} has {MAX_CHILDREN} names directly below "
                        "it, the most served (libpcp's namespace rebuild grows with their "
                        "square)"
                    )
                return None
            if not isinstance(below, _Node):
                return f"{'.'.join(parts[: depth + 1])} is already a leaf"
            node = below
        return f"{name} is a non-leaf of names already served"

    def claim(self, name: str, value: object = LEAF) -> None:
        """Serve ``name`` (``conflict`` said None), its leaf value ``value`` (any object
        but a node: one object a name, the caller's)."""
        *path, last = name.split(".")
        node = self._root
        for part in path:
            below = node.below.get(part)
            if below is None:
                if node.below is _NONE:
                    node.below = {}
                below = node.below[shared(part)] = _Node()
            below.leaves += 1
            node = below
        if node.below is _NONE:
            node.below = {}
        node.below[shared(last)] = value

    def release(self, name: str) -> None:
        """Stop serving ``name``; nodes left with no name below them go."""
        if name not in self.leaves:
            return
        node = self._root
        for part in name.split("."):
            below = node.below[part]
            if not isinstance(below, _Node) or below.leaves == 1:
                del node.below[part]  # and everything below it: no name is left there
                if not node.below:
                    node.below = _NONE
                return
            below.leaves -= 1
            node = below

    def blocking(self, name: str) -> list[str]:
        """The served names that keep ``name`` from being a leaf: itself, the leaf above
        it, or every name below it (empty when none); one walk down, then the names below."""
        if name in self.leaves:
            return [name]
        parts = name.split(".")
        node = self._root
        for depth, part in enumerate(parts):
            below = node.below.get(part)
            if below is None:
                return []
            if not isinstance(below, _Node):
                return [".".join(parts[: depth + 1])]
            node = below
        found: list[str] = []
        stack = [(name, node)]
        while stack:
            prefix, at = stack.pop()
            for part, below in at.below.items():
                full = f"{prefix}.{part}"
                if not isinstance(below, _Node):
                    found.append(full)
                else:
                    stack.append((full, below))
        return found
