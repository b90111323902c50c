"""A used machine's identity registry: the names the tests give their files (every string
literal of the test modules that could be a file name), for root and the PCP user, each
remembered at a cluster of its own, the clusters from 1 up, as the agent leaves them after
demos, installs and earlier test runs: every cluster a test asks for is held by another
name.  Planted where the agent keeps its registry (:func:`plant`), it moves every number a
test would read from it.

Run as a script, ``python -m tests.support.usedmachine PATH`` plants one at PATH."""

from __future__ import annotations

import ast
import pwd
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.registryfile import MAX_CLUSTER

TESTS = Path(__file__).resolve().parent.parent
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}")
"""A string literal that names a test's file."""
FIRST_CLUSTER = 1
"""Where the planted registry numbers its names from."""


def test_names() -> list[str]:
    """Every string literal of the test modules that could be a file name, sorted."""
    names: set[str] = set()
    for module in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and FILE_NAME.fullmatch(value):
                names.add(value)
    return sorted(names)


def owners() -> list[int]:
    """The owners of the tests' files: root, and the PCP user where there is one."""
    try:
        return [0, pwd.getpwnam("pcp").pw_uid]
    except KeyError:
        return [0]


def used_records() -> Iterator[tuple[tuple[str, int], int]]:
    """``((name, uid), cluster)`` of every remembered name, clusters from FIRST_CLUSTER on
    (wrapping after PCP's last cluster)."""
    span = MAX_CLUSTER + 1 - FIRST_CLUSTER
    keys = [(name, uid) for uid in owners() for name in test_names()]
    for n, key in enumerate(keys):
        yield key, FIRST_CLUSTER + n % span


def plant(path: Path) -> int:
    """Write a used machine's registry at ``path`` (all its names departed); the count."""
    registry = Registry(str(path))
    count = 0
    for key, cluster in used_records():
        registry.serve(key, cluster, cluster, False, {})
        registry.depart(key)
        count += 1
    registry.save()
    return count


if __name__ == "__main__":
    print(plant(Path(sys.argv[1])), "names planted in", sys.argv[1])
