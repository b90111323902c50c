"""pmda-mmv: a Performance Co-Pilot agent serving MMV (Memory Mapped Values) files.

The subpackages are the layers, each importing only those below it (import-linter
contracts in ``pyproject.toml``, run in CI); importing the package has no side effects:

* :mod:`pmda_mmv.cli`: the command line, on top.
* :mod:`pmda_mmv.commands`: ``check``, ``dump``, ``debug``, ``prune``, ``install``.
* :mod:`pmda_mmv.agent`: the serving options and model, control metrics, and the
  ``pcp.pmda.PMDA`` glue with python3-pcp behind one adapter.
* :mod:`pmda_mmv.directory`: the scanner, loader, liveness, backoff and watcher.
* :mod:`pmda_mmv.namespace`: names, numbering, the identity registry and the catalogue.
* :mod:`pmda_mmv.mmvfile`: the on-disk format, its parse and the reader.
"""

__version__ = "0.1.0"
