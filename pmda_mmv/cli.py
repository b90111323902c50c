"""``pmda-mmv``: the command line.

Subcommands: ``pmda`` (the agent pmcd runs), ``debug`` (standalone, no pmcd), ``check`` and
``dump`` (inspect files), ``prune`` (remove departed PROCESS writers' files), ``install``
and ``remove`` (switch the system pmcd's mmv agent).  Each subcommand's module is imported
only when it runs, so ``check`` and ``dump`` work without python3-pcp.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

EPILOG = """\
commands:
  pmda     run as PCP's mmv agent under pmcd (what pmcd.conf starts; see pmda --help)
  debug    serve the directory standalone and print what the agent sees (no pmcd)
  check    judge MMV files as the agent does: ok, partial, not-ready, refused, exited,
           no-writer or ignored, with every problem and what decided
  dump     print every header field, TOC entry, indom, instance, metric, value and label
  prune    remove the files of MMV_FLAG_PROCESS writers that have exited (see prune --help)
  install  as root: make this pmda-mmv the system pmcd's mmv agent (the stock one saved)
  remove   as root: take pmda-mmv out of pmcd and put the stock C mmv agent back

Files are MMV files (mmv(5)) as written by libpcp_mmv, pcp.mmv, Parfait, Speed or Hornet
into $PCP_TMP_DIR/mmv.
"""


COMMANDS = ["pmda", "debug", "check", "dump", "prune", "install", "remove"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pmda-mmv`` console script; returns the exit status.  Output
    cut short by a closed pipe (``| head``) ends the command quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="pmda-mmv",
        description="Performance Co-Pilot agent for MMV (Memory Mapped Values) files.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    ns = parser.parse_args(args[:1])
    rest = args[1:]
    if ns.command == "pmda":
        from pmda_mmv.agent.pmda import main as run_pmda

        return run_pmda(rest)
    if ns.command in ("install", "remove"):
        from pmda_mmv.commands.install import main as run_install

        return run_install(ns.command, rest)
    if ns.command == "debug":
        from pmda_mmv.commands.debug import main as run_debug

        return run_debug(rest)
    if ns.command == "check":
        from pmda_mmv.commands.check import main as run_check

        return run_check(rest)
    if ns.command == "prune":
        from pmda_mmv.commands.prune import main as run_prune

        return run_prune(rest)
    from pmda_mmv.commands.dump import main as run_dump

    return run_dump(rest)


if __name__ == "__main__":
    sys.exit(main())
