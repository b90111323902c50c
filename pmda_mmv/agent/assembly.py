"""The composition root: :func:`assemble` builds the identity registry, catalogue, families
and scanner of one directory (and, for the agent with ``--containers``, the containers'
directories), the one place that does, for the agent, ``check`` and ``debug`` alike: what
the serving options decide reaches all three here, so the commands judge as the agent
serves.  No PCP import.

The identity registry is chosen here too (:class:`RegistryChoice`): the agent's own is read
and written; a command judging a directory reads a registry only, and the agent's only for
the agent's own directory, whose files the agent numbered (``--registry`` or
:data:`~.options.REGISTRY_ENV` naming another, ``none`` for none, docs/identity.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pmda_mmv.agent.options import REGISTRY_ENV, ServingOptions
from pmda_mmv.directory import containers
from pmda_mmv.directory.resources import Limits
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.namespace import registry as identity
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families

RESERVED = ("control",)
"""The subtree of the namespace the agent serves its own metrics under (``mmv.control``):
no file is served there."""


@dataclass(frozen=True)
class RegistryChoice:
    """Which identity registry numbers the files.

    ``agent_directory`` None: the agent's own (``--registry``, else
    :data:`~.options.REGISTRY_ENV`, else the default path under ``var_dir``), read and
    written, its problems logged.  Else a command judges a directory as the agent whose
    directory is ``agent_directory`` would: the registry is read only (never changed, its
    problems the agent's to log), and the default one is read only for that directory."""

    var_dir: str
    agent_directory: str | None = None

    @property
    def agent(self) -> bool:
        """Whether this is the agent's own registry (else a command judges)."""
        return self.agent_directory is None


@dataclass(frozen=True)
class Assembly:
    """What serves (or judges) one directory: built by :func:`assemble` only."""

    registry: identity.Registry
    catalogue: Catalogue
    families: Families
    scanner: Scanner


def assemble(
    options: ServingOptions,
    directory: str,
    choice: RegistryChoice,
    log: Log | None = None,
    info: Log | None = None,
) -> Assembly:
    """The registry (loaded), catalogue, families and scanner of ``directory`` under the
    serving ``options``; ``log`` receives refusals and faults, ``info`` benign events."""
    registry = open_registry(options, choice, directory, log)
    reserved = (*RESERVED, containers.SCOPE) if options.containers else RESERVED
    catalogue = Catalogue(options.prefix, reserved, log, info=info, registry=registry)
    families = Families(catalogue, options.families, info)
    scanner = Scanner(
        directory,
        catalogue,
        owners=options.owners,
        limits=Limits(
            options.max_size,
            options.max_total,
            options.max_names,
            options.max_indoms,
            options.max_instances,
        ),
        log=log,
        info=info,
    )
    if options.containers and choice.agent:
        # the agent's only: check judges the paths it is given (docs/containers.md)
        scanner.containers = containers.Containers(directory, log=info)
    return Assembly(registry, catalogue, families, scanner)


def registry_option(registry: str | None) -> str | None:
    """``--registry`` as given, else :data:`~.options.REGISTRY_ENV` (None: neither is set)."""
    return registry if registry is not None else os.environ.get(REGISTRY_ENV)


def registry_path(registry: str | None, domain: int, var_dir: str) -> str | None:
    """The registry file for ``--registry`` (or :data:`~.options.REGISTRY_ENV`; None: in
    memory only)."""
    registry = registry_option(registry)
    if registry is None:
        return identity.default_path(var_dir, domain)
    return None if registry in identity.NONE else registry


def open_registry(
    options: ServingOptions, choice: RegistryChoice, directory: str, log: Log | None = None
) -> identity.Registry:
    """The registry ``choice`` says numbers ``directory``'s files, loaded: the agent's own
    (``log`` receives its problems), or one read only: ``--registry`` (or
    :data:`~.options.REGISTRY_ENV`) when given, else the agent's default one when
    ``directory`` is the agent's, and none (in memory only) for any other directory, whose
    files the agent never numbered."""
    registry = registry_option(options.registry)
    judged = choice.agent_directory
    if judged is not None and registry is None and not _same_directory(directory, judged):
        registry = identity.NONE[0]
    path = registry_path(registry, options.domain, choice.var_dir)
    if choice.agent:
        loaded = identity.Registry(path, options.registry_cap, log=log)
    else:
        loaded = identity.Registry(path, options.registry_cap, readonly=True)
    loaded.load()
    return loaded


def _same_directory(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one directory (symlinks followed)."""
    return os.path.realpath(a) == os.path.realpath(b)
