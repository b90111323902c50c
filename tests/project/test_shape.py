"""The package's shape, as its design asks: no module over 400 lines, no function over 50,
and python3-pcp's private attributes touched in one module (``agent/pcpcompat.py``, the
adapter), so that a python3-pcp release that renames them breaks one place.  Each check
is a function run on the package and, to prove it bites, on a planted source text."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pmda_mmv"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
ADAPTER = "agent/pcpcompat.py"
PMDA_SUBCLASS = "agent/pmda.py"  # its ``self`` is python3-pcp's PMDA


def modules() -> dict[str, str]:
    """Every module of the package by its path below it."""
    return {str(p.relative_to(PACKAGE)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def long_modules(sources: dict[str, str]) -> list[str]:
    return [
        f"{m}: {n} lines"
        for m, s in sources.items()
        if (n := len(s.splitlines())) > MAX_MODULE_LINES
    ]


def long_functions(sources: dict[str, str]) -> list[str]:
    found = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{module}:{node.lineno} {node.name}: {length} lines")
    return found


def pmda_private_names() -> set[str]:
    """The private attributes python3-pcp's PMDA sets on itself (``self._x = ...`` in
    ``pcp/pmda.py`` of this installation)."""
    spec = importlib.util.find_spec("pcp.pmda")
    assert spec is not None and spec.origin is not None, "python3-pcp not found"
    names = set(re.findall(r"self\.(_[A-Za-z]\w*)\s*=", Path(spec.origin).read_text()))
    assert "_metrics" in names, sorted(names)  # the reading itself works
    return names


def private_uses(sources: dict[str, str], names: set[str]) -> list[str]:
    """Uses of ``names`` outside the adapter: on any object but ``self``, and on ``self``
    in the PMDA subclass (other classes may have attributes of the same names)."""
    found = []
    for module, source in sources.items():
        if module == ADAPTER:
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Attribute) or node.attr not in names:
                continue
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not on_self or module == PMDA_SUBCLASS:
                found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_module_is_over_400_lines() -> None:
    assert long_modules(modules()) == []
    assert long_modules({"planted.py": "x = 1\n" * 401}) == ["planted.py: 401 lines"]


def test_no_function_is_over_50_lines() -> None:
    assert long_functions(modules()) == []
    body = "".join(f"    x{i} = {i}\n" for i in range(50))
    assert long_functions({"planted.py": f"def f():\n{body}"}) == ["planted.py:1 f: 51 lines"]


def test_python3_pcp_private_attributes_are_touched_in_the_adapter_only() -> None:
    names = pmda_private_names()
    assert private_uses(modules(), names) == []
    planted = {
        "agent/serving.py": "def f(pmda):\n    return pmda._metrics\n",
        PMDA_SUBCLASS: "class P:\n    def f(self):\n        return self._indoms\n",
        "directory/resources.py": "class R:\n    def f(self):\n        return self._indoms\n",
    }
    assert private_uses(planted, names) == [
        "agent/serving.py:2 pmda._metrics",
        f"{PMDA_SUBCLASS}:3 self._indoms",
    ]
