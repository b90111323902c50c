"""A problem has one field order, so it is built by keyword only: no ``Problem(...)`` call,
nor one of an error carrying a problem (:class:`~.errors.MmvError` and its kinds,
:class:`~.policy.Skip`, :class:`~.liveness.NoWriter`), passes an argument by position in
``pmda_mmv/`` or ``tests/``; and the check bites on a planted positional call."""

from __future__ import annotations

import ast
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
BUILT_BY_KEYWORD = frozenset(
    {"Problem", "MmvError", "NotReady", "Refused", "Corrupt", "Changed", "Skip", "NoWriter"}
)
"""The classes whose fields are passed by keyword only."""
OTHER_MMV_ERROR = "tests/support/writers/libpcp_mmv.py"
"""The ctypes writer's own ``MmvError`` (libpcp_mmv's failures), not the reader's."""


def positional_calls(source: str, where: str) -> list[str]:
    """``where:line name(...)`` of each call of a :data:`BUILT_BY_KEYWORD` class in
    ``source`` that passes an argument by position (``*args`` included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in BUILT_BY_KEYWORD:
            found.append(f"{where}:{node.lineno} {name}(...)")
    return found


def sources() -> list[Path]:
    files = [*(CHECKOUT / "pmda_mmv").rglob("*.py"), *(CHECKOUT / "tests").rglob("*.py")]
    return [f for f in files if f.relative_to(CHECKOUT).as_posix() != OTHER_MMV_ERROR]


def test_every_problem_is_built_by_keyword() -> None:
    files = sources()
    assert len(files) > 100  # the walk found the tree
    bad = [
        call
        for f in files
        for call in positional_calls(f.read_text(), f.relative_to(CHECKOUT).as_posix())
    ]
    assert bad == [], "\n".join(bad)


def test_a_positional_call_is_found() -> None:
    planted = (
        "from pmda_mmv.mmvfile import errors\n"
        "a = Problem(path='f', message='ok')\n"
        "b = Problem('f', '', 'bad')\n"
        "c = errors.Refused('f', field='file', message='bad')\n"
        "d = Corrupt(*fields)\n"
    )
    assert positional_calls(planted, "x.py") == [
        "x.py:3 Problem(...)",
        "x.py:4 Refused(...)",
        "x.py:5 Corrupt(...)",
    ]
