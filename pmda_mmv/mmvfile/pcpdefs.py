"""PCP's numbers and the one log-callback type, without a PCP import.

The constants are PCP's own (``pmapi.h``, ``pmda.h``, ``libpcp.h``), spelled as PCP spells
them, for the modules that must not import python3-pcp; the unit tests compare them with
python3-pcp's ``cpmapi``.  Every module takes them from here, and :data:`Log` likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

Log = Callable[[str], None]
"""Where a module sends its log lines: one line per call, without a newline."""

# -- pmapi.h: error codes a fetch answers with
PM_ERR_PMID: Final = -12358
PM_ERR_AGAIN: Final = -12389
PM_ERR_VALUE: Final = -12351
PM_ERR_APPVERSION: Final = -12350

# -- pmapi.h: descriptors and instances
PM_IN_NULL: Final = 0xFFFFFFFF
"""The instance id of a singular metric's one value."""
PM_TYPE_64: Final = 2
PM_SEM_COUNTER: Final = 1
PM_MAXLABELS: Final = 255
"""libpcp (labels.c) refuses a label set of this many labels or more."""

# -- pmda.h, libpcp.h: the PMID hash of libpcp_pmda (agent/pmidhash.py)
PMDA_EXT_FLAG_HASHED: Final = 1 << 1
PM_HASH_WALK_DELETE_NEXT: Final = 3  # __pmHashWalkState
