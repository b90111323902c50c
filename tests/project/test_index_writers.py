"""One writer for each index of the namespace: the catalogue's (served names, PMIDs and
their sources, indom numbers, family subtrees, the watchers told of files) are written in
``namespace/catalogue.py`` only, the held clusters in ``namespace/clusters.py`` only, and
no module keeps a second name for them; the directory's state (entries' states, the load
queue, the names not ready and starved, the closing files) in ``directory/entrytable.py``
only.  Each check is run on the package and, to prove it bites, on a planted source text."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pmda_mmv"
WRITERS = {
    "namespace/catalogue.py": {
        "tree",
        "leaf_pmid",
        "sources",
        "indom_keys",
        "indom_sources",
        "family_trees",
        "on_add",
        "on_remove",
    },
    "namespace/clusters.py": {"held_by", "spill_owner"},
    "directory/entrytable.py": {
        "_states",
        "_queue",
        "_not_ready",
        "_starved",
        "_closing",
        "_backoff",
        "_freed",
        "queue",
        "not_ready",
        "closing",
        "backoff",
    },
}
MUTATORS = {
    "claim",
    "release",
    "pop",
    "popitem",
    "clear",
    "update",
    "setdefault",
    "append",
    "extend",
    "insert",
    "add",
    "discard",
    "remove",
    "link",
    "unlink",
}
"""Methods that change a dict, list, set or name tree."""


def _index(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is ``X.<index>`` or ``X.<index>[k]`` for an ``X`` other than
    ``self`` (another object's index)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute) or node.attr not in names:
        return False
    return not (isinstance(node.value, ast.Name) and node.value.id == "self")


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    elif isinstance(node, ast.Delete):
        found = list(node.targets)
    else:
        return []
    return [e for t in found for e in (t.elts if isinstance(t, ast.Tuple) else [t])]


def _mutated(call: ast.Call, names: set[str]) -> list[ast.AST]:
    """The index ``call`` changes: ``X.<index>.pop(k)``, ``X.<index>.link(k, v)``."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in MUTATORS and _index(func.value, names):
        return [func]
    return []


def writes(module: str, source: str) -> list[str]:
    """Where ``source`` (module ``module``) writes an index it does not own."""
    found: list[tuple[int, str]] = []
    for owner, names in WRITERS.items():
        if module == owner:
            continue
        for node in ast.walk(ast.parse(source)):
            hits = [t for t in _targets(node) if _index(t, names)]
            if isinstance(node, ast.Call):
                hits += _mutated(node, names)
            found += [(h.lineno, f"{module}:{h.lineno} {ast.unparse(h)}") for h in hits]
    return [line for _, line in sorted(found)]


def aliases(module: str, source: str) -> list[str]:
    """Where ``source`` keeps another object's index under a name of its own."""
    owned = set().union(*WRITERS.values())
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and _index(node.value, owned):
            found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def modules() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_only_the_catalogue_and_clusters_write_their_indexes() -> None:
    assert [w for m, s in modules().items() for w in writes(m, s)] == []
    planted = "cat.sources[(1, 2)] = [fsm]\ncat.tree.claim(name)\ndel cat.indom_keys[k]\n"
    planted += "catalogue.on_add, x = f, 1\ncat.indom_sources.link(3, si)\ncat.held_by[4] = 1\n"
    assert writes("namespace/family.py", planted) == [
        "namespace/family.py:1 cat.sources[1, 2]",
        "namespace/family.py:2 cat.tree.claim",
        "namespace/family.py:3 cat.indom_keys[k]",
        "namespace/family.py:4 catalogue.on_add",
        "namespace/family.py:5 cat.indom_sources.link",
        "namespace/family.py:6 cat.held_by[4]",
    ]
    assert writes("namespace/catalogue.py", "self.sources.pop(k)\nx = cat.sources.get(k)\n") == []


def test_no_module_keeps_another_name_for_an_index() -> None:
    assert [a for m, s in modules().items() for a in aliases(m, s)] == []
    planted = "self.held_by = self.clusters.held_by\nfree = not cat.sources\n"
    assert aliases("namespace/catalogue.py", planted) == [
        "namespace/catalogue.py:1 self.held_by = self.clusters.held_by"
    ]


def test_only_the_entry_table_writes_the_directory_state() -> None:
    planted = "entries._queue[name] = None\nscanner.entries.not_ready.add(n)\n"
    planted += "x = scanner.entries.queued\nself._freed = True\nentries._states.pop(n)\n"
    assert writes("directory/scanner.py", planted) == [
        "directory/scanner.py:1 entries._queue[name]",
        "directory/scanner.py:2 scanner.entries.not_ready.add",
        "directory/scanner.py:5 entries._states.pop",
    ]
    assert writes("directory/entrytable.py", "self._queue[name] = None\n") == []
