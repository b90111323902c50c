"""pmda-mmv: a Performance Co-Pilot agent serving MMV (Memory Mapped Values) files.

Layers, each importing only those above it; importing the package has no side effects:

* :mod:`pmda_mmv.layout`: the on-disk records (``struct`` formats, sizes, field offsets),
  constants and names of mmv(5), and the rendering of pmUnits; no PCP imports.
* :mod:`pmda_mmv.errors`: the reader's typed errors; :mod:`pmda_mmv.entries`: the parsed
  entries (header, TOC, indoms, instances, metrics, labels).
* :mod:`pmda_mmv.rules`: the shared name and label rules and :func:`~.rules.printable`.
* :mod:`pmda_mmv.parse`: the pure parse of one file's bytes, one module per on-disk concept
  (``header``, ``strings``, ``indoms``, ``metrics``, ``values``, ``labels``; ``state``,
  ``ranges``).
* :mod:`pmda_mmv.decode`: value snapshots and their decoders; :mod:`pmda_mmv.reader`: one
  open file (``MmvFile``: ``pread`` I/O, snapshots).
* :mod:`pmda_mmv.nametree` and :mod:`pmda_mmv.indoms`: the catalogue's name rules and PCP
  indom numbering; :mod:`pmda_mmv.catalogue`: many files to one PCP namespace (pure).
* :mod:`pmda_mmv.ratelimit`: the log-line limiter.
* :mod:`pmda_mmv.filestate` (file states, changes), :mod:`pmda_mmv.dirpolicy`,
  :mod:`pmda_mmv.backoff`, :mod:`pmda_mmv.liveness` and :mod:`pmda_mmv.loader` (one entry),
  under :mod:`pmda_mmv.scanner` (the directory's lifecycle and request budget);
  :mod:`pmda_mmv.watcher`: its events.
* :mod:`pmda_mmv.control` (the agent's own metrics as data), :mod:`pmda_mmv.options` and
  :mod:`pmda_mmv.serving` (the serving model, PCP-free).
* :mod:`pmda_mmv.pcpcompat` (the python3-pcp adapter, the only user of its private
  attributes and of :mod:`pmda_mmv.pmidhash`); :mod:`pmda_mmv.pcpenv`: what the commands
  ask of an optional PCP (``PCP_TMP_DIR``, units).
* :mod:`pmda_mmv.pmda`: the ``pcp.pmda.PMDA`` glue.
* :mod:`pmda_mmv.verdict` (``check``), :mod:`pmda_mmv.dump`, :mod:`pmda_mmv.debug` and
  :mod:`pmda_mmv.cli` (the command line).
"""

__version__ = "0.1.0"
