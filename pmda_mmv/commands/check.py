"""``pmda-mmv check``: the agent's verdict on MMV files, without pmcd.

``check [--json] [--owners USERS] [--prefix P] [--max-size MIB] FILE|DIR...`` judges each
file as the agent does, in its directory, with the agent's own Scanner and Catalogue (a
directory: every entry, sorted; one file of a directory: beside the entries that can change
the verdict on it, :mod:`~.checkscope`): ``ok`` (all of it served), ``partial`` (part of it
skipped), ``not-ready``, ``refused``, ``exited`` (a PROCESS file whose writer has exited),
``no-writer`` (its writer not found, or its PID reused: :mod:`~.liveness`) or ``ignored``
(a dot-file), with every problem as field, byte offset and message.  ``--json`` prints a
list of ``{"file", "status", "problems": [{"field", "offset", "message"[, "limit"]}],
"served": [names], "cluster", "conflicts": [{"name" or "cluster", "winner"[, "why", "taken"]}],
"writer", "spills": [{"name", "metric", "pmid", "why"}]}`` (``writer``: a served PROCESS
file's ``{"pid", "agent_pid", "confirmed"[, "container", "cgroup"]}``, else null;
``spills``: every metric served under a spill cluster, one the C agent drops for its item,
docs/spill.md: notes, not problems; the text lists as many as the report's line bound
leaves room for).

Bounded and terminal-safe, as ``dump`` (:mod:`~.dump`): at most ``limits.MAX_PROBLEMS``
problems per file are listed (then one line counting the others), and every control and
bidirectional character of a name, help text or label is escaped
(:func:`~.rules.printable`; ``\\uXXXX`` in JSON).  Exit status: 0 when every file is
``ok``, 1 when any is not, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from pmda_mmv.agent.assembly import RegistryChoice, assemble
from pmda_mmv.agent.options import ServingOptions, add_serving_options, serving_options
from pmda_mmv.commands.checkscope import scope
from pmda_mmv.commands.pcpenv import tmp_dir, var_dir
from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.filestate import (
    IGNORED,
    OK,
    REFUSED,
    ignore_reason,
    status_of,
)
from pmda_mmv.directory.policy import resolve
from pmda_mmv.mmvfile import limits
from pmda_mmv.mmvfile.errors import Changed, MmvError, Problem, bounded
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import printable
from pmda_mmv.namespace.served import FileEntry, ServedMetric

Doc = dict[str, Any]


class Directory:
    """The agent's judgement of one directory: a :class:`~.scanner.Scanner` and
    :class:`~.catalogue.Catalogue` built with the agent's options, after one full scan
    (with ``one``, of the entries that can change the agent's verdict on entry ``one``
    only: :mod:`~.checkscope`).  :meth:`verdict` is what the agent does with one entry,
    and why."""

    def __init__(self, directory: str, options: ServingOptions, one: str | None = None) -> None:
        self.directory = directory
        self.domain = options.domain
        self.owners = set(options.owners) if options.owners is not None else None
        # read only: check never changes it; the agent's only for the agent's directory
        agent_directory = os.path.join(tmp_dir(), options.prefix)
        built = assemble(options, directory, RegistryChoice(var_dir(), agent_directory))
        self.registry, self.catalogue = built.registry, built.catalogue
        self.families, self.scanner = built.families, built.scanner
        if one is not None:
            self.scanner.only = scope(directory, one, options, self.registry)
        self.scanner.refresh(force=True)

    @property
    def scoped(self) -> bool:
        """Whether only some entries were judged (:mod:`~.checkscope`)."""
        return self.scanner.only is not None

    def settled(self, name: str) -> bool:
        """Whether the verdict on entry ``name`` is the same whatever files beside it were
        left out of the scope: it was not moved to another cluster than the one it asked
        for, and no metric of it spilled (those take free clusters, which every file of
        the directory decides)."""
        state = self.scanner.states.get(name)
        entry = state.entry if state is not None else None
        if entry is None:
            return True
        moved = entry.identity or entry.cluster != entry.mf.header.cluster
        return not moved and not any(sm.metric.spill for sm in entry.metrics)

    def close(self) -> None:
        """Close the served files (a scoped judgement given up for the whole one)."""
        for entry in self.scanner.served():
            entry.mf.close()

    def entries(self) -> list[str]:
        """Every entry of the directory, ignored ones too, sorted."""
        return sorted(os.listdir(self.directory))

    def verdict(self, name: str, shown: str) -> Doc:
        """``{"file", "status", "problems", "served", "cluster", "conflicts"}`` of entry
        ``name`` (``shown`` as ``file``): the agent's state, problems and served names;
        ``conflicts`` names the file that won each metric or cluster this one asked for."""
        path = os.path.join(self.directory, name)
        ignored = ignore_reason(name)
        state = self.scanner.states.get(name)
        if ignored is not None:
            return _doc(shown, IGNORED, [Problem(path=path, message=ignored)])
        if state is None:  # not in the listing: gone, or never there
            return _doc(shown, REFUSED, _not_listed(path))
        entry = state.entry
        if entry is None:
            return _doc(
                shown,
                state.state,
                state.problems,
                conflicts=self._lost(path)[: limits.MAX_PROBLEMS],
            )
        mf = entry.mf
        status = state.state
        try:
            mf.snapshot()  # what a fetch reads: a file changed underneath must be reloaded
        except Changed as e:
            return _doc(shown, status_of(e), [e.problem])
        served = [m.name for m in entry.metrics]
        conflicts = self._cluster_lost(entry)
        conflicts += self._names_lost(mf, set(served), entry.cluster)
        conflicts = conflicts[: limits.MAX_PROBLEMS]  # bounded, as the problems
        writer = state.writer.as_dict() if state.writer is not None else None
        spills = [
            {"name": sm.name, "metric": sm.metric.name, "pmid": self._pmid(sm), "why": why}
            for sm in entry.metrics
            if (why := sm.metric.spill)
        ]
        return _doc(
            shown,
            status,
            state.problems,
            served=served,
            cluster=entry.cluster,
            conflicts=conflicts,
            writer=writer,
            spills=spills,
            family=self._family(name),
        )

    def _family(self, name: str) -> Doc | None:
        """The family entry ``name`` is (or is not) a member of, with why not; None."""
        member = self.families.status(name)
        return {"name": member[0], "member": not member[1], "why": member[1]} if member else None

    def _pmid(self, sm: ServedMetric) -> str:
        return f"{self.domain}.{sm.cluster}.{sm.item}"

    def _cluster_lost(self, entry: FileEntry) -> list[Doc]:
        """The conflict over the cluster ``entry``'s file asked for (the file or departed
        name that won it), or over the evicted name's cluster a cluster-0 file was given."""
        mf = entry.mf
        if mf.header.cluster and entry.cluster != mf.header.cluster:
            holder = self.catalogue.served_to(mf.header.cluster)  # "?": none served
            departed = self.registry.holders(mf.header.cluster, (mf.name, mf.uid))
            winner = holder if holder != "?" else (departed[0][0] if departed else None)
            lost: Doc = {"cluster": mf.header.cluster, "winner": winner}
            if entry.identity:
                lost["why"] = entry.identity
            return [lost]
        if entry.identity:  # a cluster-0 file given an evicted name's cluster
            return [{"cluster": entry.cluster, "winner": None, "why": entry.identity}]
        return []

    def _names_lost(self, mf: MmvFile, served: set[str], cluster: int | None) -> list[Doc]:
        """The names of ``mf`` not served for a conflict, each with why (the catalogue's
        reason now) and the file serving it instead (None when reserved for the agent)."""
        lost = []
        for metric, full in zip(mf.metrics, self.catalogue.names_of(mf), strict=True):
            if full in served:
                continue
            item = -1 if metric.spill else metric.item  # not at its item in the cluster
            winner = self.catalogue.holder(full, cluster, item)
            why = self.catalogue.name_conflict(full)
            if winner is not None or why is not None:
                taken = full in self.catalogue.tree.leaves  # else a leaf above, names below
                lost.append({"name": full, "winner": winner, "why": why, "taken": taken})
        return lost

    def _lost(self, path: str) -> list[Doc]:
        """For a file refused after it was read (none of its metrics served): who serves
        the names it asked for.  Empty when it cannot be read now, or is not read at all
        (a symlink out of the directory, an owner not trusted: :func:`~.policy.resolve`,
        the agent's own rule; check as root never reads what the agent would not)."""
        try:
            target, _ = resolve(self.directory, path, os.lstat(path), self.owners)
            with MmvFile.open(target, name=os.path.basename(path)) as mf:
                return self._names_lost(mf, set(), None)
        except (MmvError, OSError):
            return []


def judge(paths: Iterable[str], options: ServingOptions) -> list[Doc]:
    """The agent's verdict on each path: a directory's every entry (sorted), or one
    entry judged in its own directory with the files beside it (when it is the only one
    of its directory given, with only those that can change its verdict: :mod:`~.checkscope`)."""
    paths = list(paths)
    dirs: dict[str, Directory | Doc] = {}
    given: dict[str, int] = {}
    for path in paths:
        key = os.path.realpath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
        given[key] = given.get(key, 0) + (1 if not os.path.isdir(path) else 2)

    def directory(d: str, one: str | None = None) -> Directory | Doc:
        key = os.path.realpath(d)
        if key not in dirs:
            try:
                os.listdir(d)
                return _directory(d, options, one if given[key] == 1 else None, dirs, key)
            except OSError as e:
                problem = {"field": "file", "offset": -1, "message": f"cannot list: {e.strerror}"}
                dirs[key] = {"status": REFUSED, "problems": [problem]}
        return dirs[key]

    results: list[Doc] = []
    for path in paths:
        if os.path.isdir(path):
            d = directory(path)
            if isinstance(d, dict):
                results.append({"file": path, **d})
                continue
            results += [d.verdict(n, os.path.join(path, n)) for n in d.entries()]
            continue
        parent = os.path.dirname(path) or "."
        d = directory(parent, os.path.basename(path))
        if isinstance(d, dict):
            results.append({"file": path, **d})
        else:
            results.append(d.verdict(os.path.basename(path), path))
    return results


def _directory(
    d: str, options: ServingOptions, one: str | None, dirs: dict[str, Directory | Doc], key: str
) -> Directory:
    """The judgement of directory ``d`` (for entry ``one`` only, when given), kept in
    ``dirs``: the whole directory's when the scoped verdict is not :meth:`Directory.settled`."""
    judged = Directory(d, options, one)
    if one is not None and judged.scoped and not judged.settled(one):
        judged.close()
        judged = Directory(d, options)
    dirs[key] = judged
    return judged


# -- text rendering ------------------------------------------------------------------------


def _problem_lines(problems: Sequence[Doc]) -> list[str]:
    lines = []
    for p in problems:
        where = f" at offset {p['offset']}" if p["offset"] >= 0 else ""
        limit = f" (limit {p['limit']})" if "limit" in p else ""
        lines.append(f"  {p['field']}{where}: {p['message']}{limit}")
    return lines


def render_check(result: Doc) -> list[str]:
    """Text lines of one check (or dump) result: status, problems, and for check the
    file that won each conflict."""
    n = sum(p.get("count", 1) for p in result["problems"])
    extra = f" ({n} problem{'s' if n != 1 else ''})" if n else ""
    lines = [f"{result['file']}: {result['status']}{extra}", *_problem_lines(result["problems"])]
    room = max(limits.MAX_PROBLEMS + 2 - n, 0)  # the report stays within MAX_PROBLEMS + 3 lines
    for c in result.get("conflicts", ())[:room]:
        if "cluster" in c and c.get("why"):
            lines.append(f"  cluster: {c['why']}")
            continue
        what = c["name"] if "name" in c else f"cluster {c['cluster']}"
        if c.get("taken", True):  # the winner serves this very name (or cluster)
            lines.append(f"  {what}: served by {c['winner'] or 'the agent (reserved)'}")
        else:  # served by no one: a leaf above it, names below it, reserved, or its PMID
            why = c["why"] or "its cluster and item are another metric's"
            by = f" (served by {c['winner']})" if c["winner"] else ""
            lines.append(f"  {what}: not served: {why}{by}")
    family = result.get("family")
    if family:  # a file matching a --family: a member, or left out and why
        left = f"left out: {family['why']}" if family["why"] else "member"
        lines.append(f"  family {family['name']}: {left}")
    writer = result.get("writer")
    if writer and "container" in writer:  # a writer in another PID namespace
        lines.append(
            f"  writer: process {writer['pid']} (PID {writer['agent_pid']} here), "
            f"container {writer['container']}"
        )
    return lines + _spill_lines(result.get("spills", ()), limits.MAX_PROBLEMS + 3 - len(lines))


def _spill_lines(spills: Sequence[Doc], room: int) -> list[str]:
    """The spilled metrics as lines (``spilled: NAME PMID D.C.I: why``), at most ``room``:
    the last one then counts those not listed."""
    if not spills or room <= 0:
        return []
    shown = spills if len(spills) <= room else spills[: room - 1]
    lines = [f"  spilled: {s['name']} PMID {s['pmid']}: {s['why']}" for s in shown]
    if len(shown) < len(spills):
        lines.append(f"  ... {len(spills) - len(shown)} more spilled metrics (--json lists all)")
    return lines


# -- commands ------------------------------------------------------------------------------


def json_text(obj: object) -> str:
    """JSON text; ``\\uXXXX`` escapes only when a string holds a character a terminal
    would act on (see :func:`~.rules.printable`) or bytes that are not UTF-8."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    if printable(text.replace("\n", " ")) != text.replace("\n", " "):
        text = json.dumps(obj, indent=1)
    return text


def write_lines(out: TextIO, lines: Iterable[str]) -> None:
    """Write ``lines``, each made terminal-safe by :func:`~.rules.printable` (control and
    bidirectional characters, and bytes of names that are not UTF-8, escaped)."""
    out.write("".join(printable(line) + "\n" for line in lines))


def exit_status(results: Sequence[Doc]) -> int:
    return 0 if all(r["status"] == OK for r in results) else 1


def check(
    paths: Sequence[str], as_json: bool, out: TextIO, options: ServingOptions | None = None
) -> int:
    """``pmda-mmv check``: print each file's verdict and problems; return the exit status."""
    results = judge(paths, options or ServingOptions())
    if as_json:
        out.write(json_text(results) + "\n")
    else:
        for r in results:
            write_lines(out, render_check(r))
    return exit_status(results)


def main(argv: Sequence[str]) -> int:
    """Run ``check`` with ``argv``; returns the exit status (2: usage error)."""
    parser = argparse.ArgumentParser(
        prog="pmda-mmv check", description=(__doc__ or "").split("\n\n")[1]
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_serving_options(parser)
    parser.add_argument("paths", nargs="+", metavar="FILE|DIR")
    try:
        ns = parser.parse_args(list(argv))
        options = serving_options(parser, ns)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 for --help
        return e.code if isinstance(e.code, int) else 2
    fdlimit.raise_soft_limit()  # as the agent does: the same descriptor budget
    return check(ns.paths, ns.json, sys.stdout, options)


def _doc(shown: str, status: str, problems: list[Problem], **decided: object) -> Doc:
    """A verdict of the entry ``shown``: what was not ``decided`` is empty."""
    found = {
        "served": [],
        "cluster": None,
        "conflicts": [],
        "writer": None,
        "spills": [],
        "family": None,
        **decided,
    }
    listed = [p.as_dict() for p in bounded(problems, shown)]
    return {"file": shown, "status": status, "problems": listed, **found}


def _not_listed(path: str) -> list[Problem]:
    """The problem of an entry not in the directory's listing: gone, or never there."""
    try:
        os.lstat(path)
        why = "not in the directory's listing"
    except OSError as e:
        why = f"cannot stat: {e.strerror}"
    return [Problem(path=path, message=why)]
