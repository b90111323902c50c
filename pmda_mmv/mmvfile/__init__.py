"""The on-disk format, the lowest layer: one MMV file's bytes to checked entries.

:mod:`.layout` (the ``struct`` records, sizes, field offsets and constants of mmv(5); no
PCP imports), :mod:`.limits` and :mod:`.loadcost` (what one file may hold and cost),
:mod:`.pmunits` (pmUnits words as text), :mod:`.generation` (a generation number as a
time), :mod:`.pcpdefs` (PCP's numbers and the ``Log`` type), :mod:`.errors` (typed errors
carrying path, field, offset and limit), :mod:`.parsed` (the parsed entries), :mod:`.rules`
(name and label rules, :func:`~.rules.printable`), :mod:`.parse` (the pure parse, one
module per on-disk concept), :mod:`.decode` (value snapshots and decoders), :mod:`.opener`
(the one way a path a local user controls is opened) and :mod:`.reader` (one open file:
``pread`` I/O).  Imports nothing of the layers above.
"""
