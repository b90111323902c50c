"""``pmda-mmv debug``: the agent's view of a directory, without pmcd.

Runs the same :class:`~.scanner.Scanner` and :class:`~.catalogue.Catalogue` as the agent (with
its serving options, the identity registry read only) and
prints every file accepted, refused (with the reason), changed or gone as it happens.  Press
Enter for the full table of names, descriptors, instances, help, labels and current values
(what ``pminfo -dfTlt mmv`` would show), ``q`` then Enter to quit; ``--once`` prints the table
after one scan and exits.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from pmda_mmv.agent.assembly import RegistryChoice, assemble
from pmda_mmv.agent.options import add_serving_options, serving_options
from pmda_mmv.agent.ratelimit import LogLimit
from pmda_mmv.commands.pcpenv import tmp_dir, units_text, var_dir
from pmda_mmv.directory.filestate import Changes
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.directory.watcher import Watcher
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.decode import NO_VALUE, UNSUPPORTED
from pmda_mmv.mmvfile.errors import MmvError, problem_count
from pmda_mmv.mmvfile.parsed import Instance
from pmda_mmv.mmvfile.rules import printable
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.served import FileEntry, ServedMetric


def say(out: TextIO, line: str = "") -> None:
    """Print one line made terminal-safe (:func:`~.rules.printable`): names, help text and
    labels come from files anyone can write."""
    print(printable(line), file=out, flush=True)


def describe(sm: ServedMetric, domain: int) -> list[str]:
    """One metric as lines: name, PMID, descriptor, help, labels."""
    indom = f"{domain}.{sm.indom.serial}" if sm.indom else "PM_INDOM_NULL"
    lines = [
        f"{sm.name}  PMID {domain}.{sm.cluster}.{sm.item}  [{sm.oneline or 'no one-line help'}]",
        f"    Data Type: {layout.TYPE_NAMES.get(sm.type, sm.type)}  InDom: {indom}",
        f"    Semantics: {layout.SEM_NAMES.get(sm.semantics, sm.semantics)}  Units: "
        f"{units_text(sm.units) or 'none'}",
    ]
    if sm.metric.spill:
        lines.append(f"    Spilled: {sm.metric.spill} (served under a spill cluster)")
    if sm.helptext:
        lines.append(f"    Help: {sm.helptext}")
    lines += labelled("    labels", sm.labels, sm.notes)
    if sm.indom:
        lines += labelled("    indom labels", sm.indom.labels, sm.indom.notes)
    return lines


def labelled(what: str, labels: str, notes: str) -> list[str]:
    """A line of one level's labels and notes as the agent serves them (JSON object
    texts, "" when none), merged into one set; none when there are none."""
    both = ",".join(x[1:-1] for x in (labels, notes) if x[1:-1])
    return [f"{what} {{{both}}}"] if both else []


def instance_words(sm: ServedMetric, inst: Instance | None) -> str:
    """What a value's line says of its instance: ids, then labels; "" for none."""
    if inst is None:
        return ""
    marks = sm.indom.instance_labels.get(inst.internal, ("", "")) if sm.indom else ("", "")
    labels = "".join(f"{line} " for line in labelled("labels", *marks))
    return f"inst [{inst.internal} or {inst.external!r}] {labels}"


def table(entries: Sequence[FileEntry], domain: int, out: TextIO) -> None:
    """Print every served metric with its current values."""
    for entry in entries:
        try:
            snap = entry.mf.snapshot()
        except MmvError as e:
            say(out, f"# {entry.name}: {e}")
            continue
        say(out, f"# {entry.mf.path}: cluster {entry.cluster}, version {entry.mf.header.version}")
        for line in labelled("  cluster labels", entry.labels, entry.notes):
            say(out, line)
        for sm in entry.metrics:
            for line in describe(sm, domain):
                say(out, line)
            decode = entry.mf.decoder(sm.metric.type)
            insts = sm.indom.indom.instances if sm.indom else [None]
            for pos, slot in enumerate(sm.metric.slots):
                where = instance_words(sm, insts[pos])
                if slot < 0:
                    say(out, f"    {where}no value")
                    continue
                value = decode(snap, slot)
                shown = {NO_VALUE: "no value (sentinel)", UNSUPPORTED: "not supported"}.get(
                    value, repr(value)
                )  # type: ignore[call-overload]
                say(out, f"    {where}value {shown}")
        say(out)


def family_table(families: Families, domain: int, out: TextIO) -> None:
    """Every family served: its members and metrics (values: ``pmval`` through pmcd)."""
    for fam in families.families:
        if not fam.cluster:
            continue
        members = ", ".join(sorted(fam.members)) or "none"
        say(out, f"# family {fam.spec.name}: cluster {fam.cluster}, members {members}")
        for sm in fam.metrics.values():
            for line in describe(sm, domain):
                say(out, line)
            say(out, f"    Aggregated: {fam.mode(sm)} over the members")
        say(out)


def report(
    changes: Changes, scanner: Scanner, out: TextIO, families: Families | None = None
) -> None:
    """One line per file gone or served, with the agent's verdict (``ok`` or ``partial``,
    as ``mmv.control.file.state`` and ``pmda-mmv check`` say), and its family's word
    (``family NAME: member``, or why it is left out), as ``check`` gives it."""
    stamp = time.strftime("%H:%M:%S")
    for entry in changes.removed:
        say(out, f"{stamp} gone     {entry.mf.path}")
    for entry in changes.added:
        mf = entry.mf
        state = scanner.states.get(entry.name)
        verdict = state.state if state is not None else "?"
        n = problem_count(state.problems) if state is not None else 0
        problems = f" ({n} problem{'s' if n != 1 else ''})" if n else ""
        say(
            out,
            f"{stamp} served   {mf.path}: v{mf.header.version}, cluster {entry.cluster}, "
            f"{len(entry.metrics)} metrics, {mf.value_count} values, {verdict}{problems}",
        )
        member = families.status(entry.name) if families is not None else None
        if member is not None:
            word = f"left out: {member[1]}" if member[1] else "member"
            say(out, f"{stamp} family   {mf.path}: family {member[0]}: {word}")


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="pmda-mmv debug",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", help="directory of MMV files (default $PCP_TMP_DIR/mmv)")
    p.add_argument("--once", action="store_true", help="scan once, print the table, exit")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between checks")
    add_serving_options(p)
    a = p.parse_args(argv)
    options = serving_options(p, a)
    directory = a.dir or os.path.join(tmp_dir(), options.prefix)
    out = sys.stdout

    def log(line: str) -> None:
        say(out, f"{time.strftime('%H:%M:%S')} problem  {line}")

    def info(line: str) -> None:
        say(out, f"{time.strftime('%H:%M:%S')} info     {line}")

    limited = LogLimit(log, info=info)
    # the agent's numbers, read only: debug saves nothing
    agent_directory = os.path.join(tmp_dir(), options.prefix)
    choice = RegistryChoice(var_dir(), agent_directory)
    built = assemble(options, directory, choice, limited, limited.info)
    families, scanner = built.families, built.scanner
    report(scanner.refresh(force=True), scanner, out, families)
    if a.once:
        table(scanner.served(), options.domain, out)
        family_table(families, options.domain, out)
        return 0
    watcher = Watcher(directory, scanner.mark_dirty)
    say(out, f"watching {directory}; Enter prints the table, q quits")
    while True:
        watcher.ensure()
        report(scanner.refresh(), scanner, out, families)
        out.flush()
        ready, _, _ = select.select([sys.stdin], [], [], a.interval)
        if ready:
            line = sys.stdin.readline()
            if not line or line.strip() == "q":
                watcher.stop()
                return 0
            table(scanner.served(), options.domain, out)
            family_table(families, options.domain, out)
