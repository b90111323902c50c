"""``pmda-mmv prune [--dry-run] [-v] [--max-size MIB] [DIR]``: remove the files that
departed MMV_FLAG_PROCESS writers left behind.

libpcp_mmv removes a PROCESS file when its writer stops (``mmv_stats_stop``); a writer that
is killed or crashes leaves its file behind, and the agent serves it no more.  ``prune``
removes such files from ``DIR`` (default ``$PCP_TMP_DIR/mmv``, as PCP resolves it).  An
entry is removed only when every one of these holds, checked in this order:

1. not a dot-file (the agent ignores those);
2. a regular file, by ``lstat``: a symlink is neither followed nor removed;
3. owned by the invoking user (any owner when run as root);
4. a valid MMV file as the agent reads it (:meth:`~.reader.MmvFile.open`, with the agent's
   ``--max-size``; a file not ready yet is kept);
5. MMV_FLAG_PROCESS with a pid other than 0;
6. its writer is gone, by the agent's own judgement (:meth:`~.liveness.Writers.open`):
   the process has exited, or its pid belongs to a process started after the file (a
   reused pid);
7. prune runs in the initial PID namespace (in a child one, a container sharing the
   directory, the host's writers cannot be seen: their files are kept);
8. just before ``unlink``: the name still holds the inode that was judged and the file's
   header (generation, flags, pid) is unchanged; otherwise it is kept (a writer restarted
   under the same name in between).

Output: one line per file removed (``removed PATH: why``; ``would remove`` with
``--dry-run``), per file that changed before it could be removed or could not be removed,
and with ``--verbose`` per file kept (``kept PATH: why``); then one summary line.  Every
line is terminal-safe (:func:`~.rules.printable`).

Exit status: 0 when every departed writer's file was removed (with ``--dry-run``: found),
none found included; 1 when one could not be removed; 2 on a usage error or when ``DIR``
cannot be read.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from pmda_mmv.agent.options import add_max_size
from pmda_mmv.directory.filestate import ignore_reason
from pmda_mmv.directory.liveness import NoWriter, Writers
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import MmvError
from pmda_mmv.mmvfile.opener import kind
from pmda_mmv.mmvfile.reader import DEFAULT_MAX_SIZE, MmvFile
from pmda_mmv.mmvfile.rules import printable

# why a file was kept, as the summary counts them (in this order)
LIVE, NOT_PROCESS, NOT_MMV, NOT_REGULAR, OTHER_OWNER, IGNORED, CHANGED, UNSEEN = range(8)
INIT_PID_NS = 0xEFFFFFFC  # the inode of the initial PID namespace (PROC_PID_INIT_INO)
KEPT_WORDS = {  # category -> (one, several)
    LIVE: ("with a live writer", "with a live writer"),
    NOT_PROCESS: ("not PROCESS", "not PROCESS"),
    NOT_MMV: ("not a valid MMV file", "not valid MMV files"),
    NOT_REGULAR: ("not a regular file", "not regular files"),
    OTHER_OWNER: ("another user's", "other users'"),
    IGNORED: ("dot-file", "dot-files"),
    CHANGED: ("changed underneath", "changed underneath"),
    UNSEEN: ("whose writer may be outside this PID namespace",) * 2,
}


@dataclass
class Report:
    """What one prune did: removed (or would remove) and kept files, and failures."""

    removed: list[str] = field(default_factory=list)
    kept: Counter[int] = field(default_factory=Counter)
    failed: int = 0


class Pruner:
    """Prune ``directory``, writing one line per file (and the summary) to ``out``."""

    def __init__(
        self, directory: str, out: TextIO, *, dry_run: bool, verbose: bool, max_size: int
    ) -> None:
        self.directory = directory
        self.out = out
        self.dry_run = dry_run
        self.verbose = verbose
        self.max_size = max_size
        self.uid = os.geteuid()
        self.writers = Writers()  # the agent's liveness judgement; nothing is watched
        self.nested = not initial_pid_namespace()
        self.report = Report()

    def say(self, line: str) -> None:
        self.out.write(printable(line) + "\n")

    def run(self) -> Report:
        """Judge every entry of the directory, in name order (raises OSError when it
        cannot be opened or listed)."""
        dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in sorted(os.listdir(dfd)):
                self.entry(dfd, name)
        finally:
            os.close(dfd)
        return self.report

    def keep(self, path: str, why: str, category: int) -> None:
        self.report.kept[category] += 1
        if self.verbose or category == CHANGED:
            self.say(f"kept {path}: {why}")

    def entry(self, dfd: int, name: str) -> None:
        """Judge one entry (rules 1 to 7), then remove it (rule 8)."""
        path = os.path.join(self.directory, name)
        ignored = ignore_reason(name)
        if ignored is not None:
            return self.keep(path, ignored, IGNORED)
        try:
            lst = os.lstat(name, dir_fd=dfd)
        except OSError as e:
            return self.keep(path, f"cannot stat: {e.strerror}", CHANGED)
        if not stat.S_ISREG(lst.st_mode):
            return self.keep(path, f"not a regular file ({kind(lst.st_mode)})", NOT_REGULAR)
        if self.uid != 0 and lst.st_uid != self.uid:
            return self.keep(path, f"owned by uid {lst.st_uid}, not by you", OTHER_OWNER)
        try:
            mf = MmvFile.open(path, max_size=self.max_size)
        except MmvError as e:
            return self.keep(path, f"not a valid MMV file: {e.field}: {e.message}", NOT_MMV)
        with mf:
            st = os.fstat(mf.fd)
            if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
                return self.keep(path, "replaced while it was read", CHANGED)
            pid = mf.header.process
            if not mf.header.process_flag:
                why = "no MMV_FLAG_PROCESS: its writer is not watched"
                return self.keep(path, why, NOT_PROCESS)
            if pid == 0:
                return self.keep(path, "MMV_FLAG_PROCESS with pid 0: no writer named", NOT_PROCESS)
            try:
                writer = self.writers.open(mf)
            except NoWriter as gone:  # liveness's own words when it has them, else ours
                why = gone.reason or _departed(pid)
                if self.nested:  # a writer of the host (or a parent container) is not seen
                    why += ", but prune runs in a child PID namespace: not judged"
                    return self.keep(path, why, UNSEEN)
                self.remove(dfd, name, mf, f"{why} (MMV_FLAG_PROCESS)")
                return None
            if writer is not None:
                writer.close()
            return self.keep(path, f"writer process {pid} is running", LIVE)

    def remove(self, dfd: int, name: str, mf: MmvFile, why: str) -> None:
        """Unlink ``name`` if it still is the file judged (rule 8)."""
        path = os.path.join(self.directory, name)
        changed = _changed(dfd, name, mf)
        if changed is not None:
            return self.keep(path, f"{changed} since it was judged, not removed", CHANGED)
        if self.dry_run:
            self.report.removed.append(name)
            return self.say(f"would remove {path}: {why}")
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return self.keep(path, "removed by someone else meanwhile", CHANGED)
        except OSError as e:
            self.report.failed += 1
            return self.say(f"cannot remove {path}: {e.strerror} ({why})")
        self.report.removed.append(name)
        return self.say(f"removed {path}: {why}")

    def summary(self) -> str:
        r = self.report
        n = len(r.removed)
        verb = "would be removed" if self.dry_run else "removed"
        kept = sum(r.kept.values())
        detail = ", ".join(
            f"{r.kept[c]} {words[r.kept[c] != 1]}" for c, words in KEPT_WORDS.items() if r.kept[c]
        )
        line = f"{self.directory}: {n} file{'s' if n != 1 else ''} {verb}, {kept} kept"
        line += f" ({detail})" if detail else ""
        if r.failed:
            line += f", {r.failed} could not be removed"
        return line


def initial_pid_namespace() -> bool:
    """Whether this process is in the initial PID namespace, where every writer can be
    seen: in a child one (a container sharing the directory) a writer outside it is "not
    found" and its PID may be another process's, so no verdict of exit holds."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NS
    except OSError:
        return True  # no namespaces (a kernel without CONFIG_PID_NS): one, the initial


def _changed(dfd: int, name: str, mf: MmvFile) -> str | None:
    """What changed of ``name`` since ``mf`` was judged (None: nothing): the inode under
    the name, or the header's generation, flags or pid."""
    try:
        lst = os.lstat(name, dir_fd=dfd)
        st = os.fstat(mf.fd)
        header = os.pread(mf.fd, layout.HEADER_SIZE, 0)
    except OSError:
        return "gone"
    if (lst.st_dev, lst.st_ino) != (st.st_dev, st.st_ino):
        return "replaced"
    if len(header) != layout.HEADER_SIZE:
        return "truncated"
    now = layout.HEADER.unpack(header)
    h = mf.header
    at = layout.HEADER.names.index
    was = (h.g1, h.g2, h.flags, h.process)
    if tuple(now[at(f)] for f in ("g1", "g2", "flags", "process")) != was:
        return "rewritten"
    return None


def _departed(pid: int) -> str:
    """Why a PROCESS file's writer is judged gone, in words (the judgement itself is
    :meth:`~.liveness.Writers.open`'s)."""
    import psutil

    try:
        process = psutil.Process(pid)
        zombie = process.status() == psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):  # ValueError: a negative pid
        return f"writer process {pid} has exited"
    if zombie:
        return f"writer process {pid} has exited, not yet reaped"
    return (
        f"writer process {pid} has exited: PID {pid} now belongs to a process started "
        "after the file (PID reused)"
    )


def prune(
    directory: str,
    out: TextIO,
    *,
    dry_run: bool = False,
    verbose: bool = False,
    max_size: int = DEFAULT_MAX_SIZE,
) -> int:
    """``pmda-mmv prune``: remove (or list) the departed writers' files; the exit status."""
    pruner = Pruner(directory, out, dry_run=dry_run, verbose=verbose, max_size=max_size)
    try:
        report = pruner.run()
    except OSError as e:
        sys.stderr.write(printable(f"pmda-mmv prune: {directory}: {e.strerror}") + "\n")
        return 2
    pruner.say(pruner.summary())
    return 1 if report.failed else 0


def main(argv: Sequence[str]) -> int:
    """Run ``prune`` with ``argv``; returns the exit status (2: usage error)."""
    parser = argparse.ArgumentParser(
        prog="pmda-mmv prune",
        description=(
            "Remove the MMV files of MMV_FLAG_PROCESS writers that have exited (killed or "
            "crashed before they could remove them), never a live writer's, another user's "
            "(unless run as root), a symlink or a file that is not MMV. Exit status: 0 done, "
            "1 a file could not be removed, 2 usage error or DIR unreadable."
        ),
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be removed, remove nothing"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also say why each other file is kept"
    )
    add_max_size(
        parser, "the agent's --max-size, in MiB (default 64): larger files are not MMV to it"
    )
    parser.add_argument(
        "dir", nargs="?", metavar="DIR", help="directory of MMV files (default $PCP_TMP_DIR/mmv)"
    )
    try:
        ns = parser.parse_args(list(argv))
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 for --help
        return e.code if isinstance(e.code, int) else 2
    if ns.dir is None:
        from pmda_mmv.commands.pcpenv import tmp_dir

        ns.dir = os.path.join(tmp_dir(), "mmv")
    return prune(
        ns.dir, sys.stdout, dry_run=ns.dry_run, verbose=ns.verbose, max_size=ns.max_size << 20
    )
