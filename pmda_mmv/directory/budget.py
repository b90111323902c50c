"""A request's budget: how long the agent's own work may make one of pmcd's requests.

Each request (desc, text, instance, fetch, store, pmid, name, children) starts with the
agent bringing its tables up to date; this is what that work may take, in one place:

* :data:`BUDGET`: the seconds of the agent's own work per request: half for loading and
  validating files (the scanner), the other half for cataloguing them and registering
  their names in the tables;
* :data:`STARTUP_BUDGET`: the first scan's, before the agent reports ready;
* :data:`HELD_NAMES`: the names loaded files may hold back from the tables before a
  request registers them (``serving.Held``);
* :func:`charge`: the part of a request's budget spent before loading, by registering what
  was held and by the namespace rebuild python3-pcp then does (:data:`REBUILD_COST` a name
  served), which the scanner's loading gives up.

python3-pcp rebuilds its whole namespace at any change of its tables, after the callback
that made it returns: a request that registers names costs that rebuild whatever the
agent does (0.86 s at 500,000 names here), so such a request loads as little as it may
(one file) and registers at most :data:`HELD_NAMES` names.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

BUDGET: Final = 0.1
"""Seconds of a request the agent spends on loading, cataloguing and registering files
before the rest waits for the next requests."""
STARTUP_BUDGET: Final = 1.0
"""Seconds the first scan spends loading files before the agent reports ready (pmcd sends
nothing to a ``notready`` agent meanwhile, and answers its clients "Try again"): what is
left loads within the budget of the next requests."""
REGISTER_COST: Final = 4e-6
"""Seconds registering one name in the tables takes (the serving model and python3-pcp's
tables; measured: 57,000 names in 0.22 s, 2 CPUs)."""
REBUILD_COST: Final = 1.8e-6
"""Seconds a name served adds to python3-pcp's rebuild of its namespace and metric table at
each change (measured: 0.86 s at 499,000 names, ``benchmarks/appear.py``)."""
HELD_NAMES: Final = int(BUDGET / 2 / REGISTER_COST)
"""Names held back from the tables before a request registers them: their registration
takes half the budget."""


def charge(spent: float, served_names: int, rebuilt: bool) -> float:
    """The seconds of a request's budget gone before it loads: ``spent`` registering what
    was held, and when that changed the tables (``rebuilt``) python3-pcp's rebuild of
    ``served_names``."""
    return spent + (REBUILD_COST * served_names if rebuilt else 0.0)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a request's work: what loading and
    registering allocate (entries, states, tables) lives on, and collections while
    thousands of files are loaded traverse every object served (at 4,000 files they more
    than doubled the catalogue's cost per file; at 500,000 names, 3 million objects, one
    took 0.34 s of a request).  What the work frees, reference counting frees."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
