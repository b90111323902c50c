"""No module imports a test module (``test_*.py``): what tests share lives in tests/support/
(fixtures in a conftest.py), so a test module can be moved, renamed or run alone, and pytest
never collects one module's tests or fixtures through another.  Found by reading every
Python file's imports (ast: import statements, ``importlib.import_module`` and
``pytest_plugins``), and proved to bite on a tree with one planted import."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "build", "dist", "node_modules", "__pycache__"}


def is_test_module(name: str) -> bool:
    """Whether the dotted module ``name`` (or a relative one, ``.test_x``) is a test module."""
    return any(part.startswith("test_") for part in name.split("."))


def named_modules(node: ast.AST) -> list[str]:
    """The module names given as strings to ``importlib.import_module`` or
    ``pytest_plugins``."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args = node.args[:1] if name == "import_module" else []
    elif isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        plugins = any(getattr(t, "id", "") == "pytest_plugins" for t in targets)
        args = [node.value] if plugins and node.value is not None else []
    else:
        return []
    return [
        c.value
        for arg in args
        for c in ast.walk(arg)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    ]


def imported_test_modules(source: str) -> list[str]:
    """The test modules the Python ``source`` imports, or imports names from."""
    found = []
    for node in ast.walk(ast.parse(source)):
        found += [m for m in named_modules(node) if is_test_module(m)]
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if is_test_module(module):
                found.append(module)
            else:  # from tests.system import test_identity; from . import test_x
                found += [f"{module}.{a.name}" for a in node.names if is_test_module(a.name)]
    return found


def cross_imports(top: Path) -> list[str]:
    """``path: module`` for every import of a test module by a Python file below ``top``."""
    found = []
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(root) / name
                rel = path.relative_to(top).as_posix()
                found += [f"{rel}: {m}" for m in imported_test_modules(path.read_text())]
    return found


def test_no_module_imports_a_test_module() -> None:
    assert cross_imports(CHECKOUT) == []


@pytest.mark.parametrize(
    "line",
    [
        "from tests.system.test_identity import Writers",
        "from tests.unit.namespace.test_family import World as W",
        "import tests.system.test_containers",
        "from tests.system import conftest, test_identity",
        "from .test_family import member",
        "from . import test_family",
        "def f():\n    from tests.system.test_identity import served",
        'pytest_plugins = ["tests.support.pmcd", "tests.system.test_identity"]',
        'm = importlib.import_module("tests.unit.namespace.test_family")',
    ],
)
def test_a_planted_import_of_a_test_module_is_found(tmp_path: Path, line: str) -> None:
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_one.py").write_text(f"import os\n{line}\n")
    (tmp_path / "tests" / "unit" / "test_two.py").write_text("from tests.support import x\n")
    assert len(cross_imports(tmp_path)) == 1
    assert cross_imports(tmp_path)[0].startswith("tests/unit/test_one.py: ")


def test_imports_of_support_modules_are_not_found() -> None:
    source = (
        "import pytest\nfrom tests.support.family import World\nfrom tests.support import pmcd\n"
        "from pmda_mmv.directory.containers import tmp_dir\nimport tests.conftest\n"
        'pytest_plugins = ["tests.support.pmcd"]\nimportlib.import_module("pmda_mmv.cli")\n'
    )
    assert imported_test_modules(source) == []
