"""pmda-mmv: a Performance Co-Pilot agent serving MMV (Memory Mapped Values) files.

Layers, each importing only those above it: :mod:`pmda_mmv.format` (on-disk layout),
:mod:`pmda_mmv.reader` (one file), :mod:`pmda_mmv.catalogue` (many files to one PCP
namespace), :mod:`pmda_mmv.watcher` (change events and process liveness) and
:mod:`pmda_mmv.pmda` (the ``pcp.pmda.PMDA`` glue).  Importing the package has no side effects.
"""

__version__ = "0.1.0"
