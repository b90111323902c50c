"""The package's shape, as its design asks: no function over 50 lines, no two modules of one
file name, PCP's numbers and the log-callback type defined in one module
(``mmvfile/pcpdefs.py``), and python3-pcp's private attributes touched in one module
(``agent/pcpcompat.py``, the adapter), so that a python3-pcp release that renames them
breaks one place.  Each check is a function run on
the package and, to prove it bites, on a planted source text.  A module over 400 lines is
reported as a warning, not a failure: a module holds one responsibility, whatever its
length."""

from __future__ import annotations

import ast
import importlib.util
import re
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pmda_mmv"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
ADAPTER = "agent/pcpcompat.py"
PMDA_SUBCLASS = "agent/pmda.py"  # its ``self`` is python3-pcp's PMDA
PCP_DEFINITIONS = "mmvfile/pcpdefs.py"
PCP_NAME = re.compile(r"PM(DA)?_[A-Z0-9_]+|Log")


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


def pcp_definitions(sources: dict[str, str]) -> list[str]:
    """Names of PCP's numbers (``PM_*``, ``PMDA_*``) and the ``Log`` alias bound outside
    :data:`PCP_DEFINITIONS`, by assignment with or without an annotation."""
    found = []
    for module, source in sources.items():
        if module == PCP_DEFINITIONS:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and PCP_NAME.fullmatch(name.id):
                        found.append(f"{module}:{node.lineno} {name.id}")
    return found


def shared_file_names(paths: list[str]) -> list[str]:
    """The file names (``__init__.py`` aside) that more than one module has."""
    seen: dict[str, list[str]] = {}
    for path in paths:
        name = Path(path).name
        if name != "__init__.py":
            seen.setdefault(name, []).append(path)
    return [f"{name}: {', '.join(p)}" for name, p in sorted(seen.items()) if len(p) > 1]


def test_no_two_modules_share_a_file_name() -> None:
    """One name, one module: ``entries`` in two layers meant two things."""
    assert shared_file_names(list(modules())) == []
    planted = ["mmvfile/entries.py", "directory/entries.py", "a/__init__.py", "b/__init__.py"]
    assert shared_file_names(planted) == ["entries.py: mmvfile/entries.py, directory/entries.py"]


def test_a_module_over_400_lines_is_reported_not_refused() -> None:
    """The 400-line mark is a prompt to look for a second responsibility, not a rule."""
    for line in long_modules(modules()):
        warnings.warn(f"{line}: does it hold one responsibility?", stacklevel=1)
    assert long_modules({"planted.py": "x = 1\n" * 401}) == ["planted.py: 401 lines"]


def test_pcp_numbers_and_the_log_alias_are_defined_in_one_module() -> None:
    assert pcp_definitions(modules()) == []
    planted = {
        "namespace/served.py": "PM_SEM_COUNTER: Final = 1\nPM_X, y = 1, 2\n",
        "agent/serving.py": "Log = Callable[[str], None]\nLogger = None\n",
        "agent/pmidhash.py": "PMDA_EXT_FLAG_HASHED = 2\nSEM_COUNTER = 1\n",
        PCP_DEFINITIONS: "PM_IN_NULL = 0xFFFFFFFF\nLog = None\n",
    }
    assert pcp_definitions(planted) == [
        "namespace/served.py:1 PM_SEM_COUNTER",
        "namespace/served.py:2 PM_X",
        "agent/serving.py:1 Log",
        "agent/pmidhash.py:1 PMDA_EXT_FLAG_HASHED",
    ]


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
