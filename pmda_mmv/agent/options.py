"""The command line of ``pmda-mmv pmda`` (the agent pmcd runs): :class:`Options`.

The C agent's options (``-D``, ``-d``, ``-l``, ``-U``) plus ours.  No PCP import: parsed
(and tested, ``tests/unit/test_cli.py``) without python3-pcp.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from pmda_mmv.directory.filestate import parse_owners
from pmda_mmv.directory.resources import MAX_INDOMS, MAX_INSTANCES, MAX_NAMES, MAX_TOTAL
from pmda_mmv.mmvfile.reader import DEFAULT_MAX_SIZE
from pmda_mmv.namespace import registry as identity
from pmda_mmv.namespace.familyspec import FamilySpec, parse_family


@dataclass(frozen=True)
class ServingOptions:
    """The options that decide what is served and under which numbers, defined once for the
    agent, ``check`` and ``debug`` (:func:`add_serving_options`, :func:`serving_options`):
    they judge as the agent serves."""

    domain: int = 70
    prefix: str = "mmv"
    owners: tuple[int, ...] | None = None
    max_size: int = DEFAULT_MAX_SIZE
    max_total: int = MAX_TOTAL
    max_names: int = MAX_NAMES
    max_indoms: int = MAX_INDOMS
    max_instances: int = MAX_INSTANCES
    registry: str | None = None  # None: the default path; "" or "none": memory only
    registry_cap: int = identity.CAP
    families: tuple[FamilySpec, ...] = ()
    containers: bool = False


@dataclass(frozen=True)
class Options(ServingOptions):
    """Command line of ``pmda-mmv pmda``: the serving options and the agent's own."""

    logfile: str = "mmv.log"
    username: str | None = None
    debug: str | None = None
    directory: str | None = None
    status_metrics: bool = False
    polling: bool = False
    notready: bool = False
    pmid_hash_reset: bool = True


def add_max_size(p: argparse.ArgumentParser, text: str) -> None:
    """``--max-size`` in MiB, as the agent takes it (``prune`` judges files by it too)."""
    p.add_argument("--max-size", type=int, default=DEFAULT_MAX_SIZE // (1 << 20), help=text)


def add_serving_options(p: argparse.ArgumentParser) -> None:
    """The options that decide what is served and under which numbers: one definition for
    the agent, ``check`` and ``debug`` (they must judge as the agent does)."""
    p.add_argument("-d", "--domain", type=int, default=70, help="PMDA domain (default 70)")
    p.add_argument("--prefix", default="mmv", help="name prefix and PMNS root (default mmv)")
    p.add_argument(
        "--owners",
        help="serve only files owned by these users (comma-separated "
        "names or uids); default: any owner, as the C agent",
    )
    add_max_size(p, "largest file served, in MiB (default 64)")
    _add_totals(p)
    p.add_argument(
        "--registry",
        help="identity registry file (default $PMDA_MMV_REGISTRY, else $PCP_VAR_DIR/config/"
        f"pmda/<domain>{identity.SUFFIX}, which check and debug read only for the agent's "
        "directory; '' or 'none': in memory only; docs/identity.md)",
    )
    p.add_argument(
        "--registry-cap",
        type=int,
        default=identity.CAP,
        help=f"names the identity registry remembers per owner (default {identity.CAP})",
    )
    p.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME=GLOB[:owner=USER][:mode=MODE]",
        help="serve the files matching GLOB (one owner's, agreeing) also as one tree "
        "<prefix>.NAME.*, each metric aggregated over them: counters summed (departed "
        "members' counts kept), others by MODE (sum, min, max, mostrecent; "
        ":mode.METRIC=MODE for one metric); repeatable (docs/families.md)",
    )
    p.add_argument(
        "--containers",
        action="store_true",
        help="also serve the MMV directories inside containers' own filesystems, as "
        "mmv.containers.<container>.*, a subtree no host file is served under; the agent "
        "then stays root (check and debug judge the host's files so, docs/containers.md)",
    )


def _add_totals(p: argparse.ArgumentParser) -> None:
    """The bounds on what all served files hold together (docs/bounded.md)."""
    p.add_argument(
        "--max-total",
        type=int,
        default=MAX_TOTAL >> 20,
        help="most bytes of all served files together, in MiB (default 1024)",
    )
    p.add_argument(
        "--max-names",
        type=int,
        default=MAX_NAMES,
        help=f"most metric names of all served files together (default {MAX_NAMES})",
    )
    p.add_argument(
        "--max-indoms",
        type=int,
        default=MAX_INDOMS,
        help="most instance domains of all served files together, those a metric is over "
        f"(default {MAX_INDOMS})",
    )
    p.add_argument(
        "--max-instances",
        type=int,
        default=MAX_INSTANCES,
        help=f"most instances of those indoms together (default {MAX_INSTANCES})",
    )


def parse_families(p: argparse.ArgumentParser, values: Sequence[str]) -> tuple[FamilySpec, ...]:
    """The ``--family`` options as specs (a usage error exits, as argparse does)."""
    specs = []
    for value in values:
        try:
            specs.append(parse_family(value))
        except ValueError as e:
            p.error(str(e))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        p.error("--family: a family NAME given twice")
    return tuple(specs)


REGISTRY_ENV: Final = "PMDA_MMV_REGISTRY"
"""The environment variable that stands for ``--registry`` when the option is not given."""


def serving_options(p: argparse.ArgumentParser, a: argparse.Namespace) -> ServingOptions:
    """:class:`ServingOptions` from the arguments of :func:`add_serving_options` (a usage
    error exits 2, through argparse)."""
    try:
        owners = parse_owners(a.owners)
    except ValueError as e:
        p.error(str(e))
    if a.containers and any(f.partition("=")[0] == "containers" for f in a.family):
        p.error("--containers: mmv.containers is the containers' subtree, no family of that name")
    return ServingOptions(
        domain=a.domain,
        prefix=a.prefix,
        owners=owners,
        max_size=a.max_size << 20,
        max_total=a.max_total << 20,
        max_names=a.max_names,
        max_indoms=a.max_indoms,
        max_instances=a.max_instances,
        registry=a.registry,
        registry_cap=a.registry_cap,
        families=parse_families(p, a.family),
        containers=a.containers,
    )


def _fields(options: ServingOptions) -> dict[str, Any]:
    """The fields of ``options`` as they are (``asdict`` would turn the families into
    dictionaries)."""
    return {f.name: getattr(options, f.name) for f in fields(ServingOptions)}


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``pmda-mmv pmda``."""
    p = argparse.ArgumentParser(
        prog="pmda-mmv pmda",
        description="Serve MMV files to pmcd as PCP's mmv agent. pmcd starts it: "
        "'pmda-mmv install' (as root) registers it with pmcd; run it by hand only to debug.",
    )
    p.add_argument("-D", "--debug", help="PCP debug options (pmdbg(1))")
    p.add_argument("-l", "--log", default=None, help="log file (default <prefix>.log)")
    p.add_argument("-U", "--username", help="run as this user (default: the PCP user)")
    p.add_argument("--dir", help="directory of MMV files (default $PCP_TMP_DIR/<prefix>)")
    p.add_argument(
        "--status-metrics",
        action="store_true",
        help="also serve mmv.control.metrics and the per-file mmv.control.file.*",
    )
    p.add_argument("--polling", action="store_true", help="poll instead of using inotify")
    p.add_argument(
        "--no-pmid-hash-reset",
        dest="pmid_hash_reset",
        action="store_false",
        help="do not keep libpcp_pmda's PMID-hash node count down (PCP < 7.0.1 only; "
        "later PCPs never need it)",
    )
    add_serving_options(p)
    p.add_argument(
        "--notready",
        action="store_true",
        help="pmcd.conf has 'notready': report ready to pmcd after the first scan",
    )
    return p


def parse_args(argv: Sequence[str]) -> Options:
    """Parse the command line; exits 2 on usage errors (argparse)."""
    p = parser()
    a = p.parse_args(argv)
    if a.containers and a.username:
        p.error("--containers: the agent stays root to open containers' directories, no -U")
    return Options(
        **_fields(serving_options(p, a)),
        logfile=a.log or f"{a.prefix}.log",
        username=a.username,
        debug=a.debug,
        directory=a.dir,
        status_metrics=a.status_metrics,
        polling=a.polling,
        notready=a.notready,
        pmid_hash_reset=a.pmid_hash_reset,
    )
