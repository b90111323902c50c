"""One composition root: the identity registry, catalogue, families and scanner are
constructed in :mod:`pmda_mmv.agent.assembly` only (the modules defining them aside), so
the agent, ``check`` and ``debug`` cannot build them differently; and proved to bite."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from pmda_mmv.agent import assembly
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.registry import Registry

PACKAGE = Path(__file__).resolve().parents[2] / "pmda_mmv"
BUILT = (Registry, Catalogue, Families, Scanner)


def _file_of(module: str) -> Path:
    return Path(str(importlib.import_module(module).__file__)).resolve()


ALLOWED = {_file_of(assembly.__name__), *(_file_of(cls.__module__) for cls in BUILT)}


def constructions(source: str) -> list[tuple[int, str]]:
    """The line and class of every call of one of the four classes in ``source`` (by name
    or as a module's attribute)."""
    names = {cls.__name__ for cls in BUILT}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in names:
            found.append((node.lineno, str(name)))
    return found


def test_registry_catalogue_families_and_scanner_are_built_in_the_composition_root() -> None:
    outside = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}("
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() not in ALLOWED
        for line, name in constructions(path.read_text())
    ]
    assert outside == []
    root = constructions(Path(str(assembly.__file__)).read_text())
    assert {name for _, name in root} == {cls.__name__ for cls in BUILT}


def test_a_construction_outside_the_root_is_found() -> None:
    planted = "from x import identity\nc = Catalogue('mmv')\nr = identity.Registry(None)\n"
    assert constructions(planted) == [(2, "Catalogue"), (3, "Registry")]
