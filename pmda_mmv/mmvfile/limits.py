"""Limits on what one MMV file may hold: the C reference's (``mmv.c``, from the widths of
PCP's PMID and indom fields) and the agent's own (bounded work per file).  A file past one
is refused, or its excess entries are, as each limit says."""

from __future__ import annotations

from typing import Final

from pmda_mmv.mmvfile.layout import TOC_INDOMS, TOC_INSTANCES, TOC_LABELS, TOC_METRICS, TOC_VALUES

# -- limits of the C reference (mmv.c) -----------------------------------------------------
MAX_ITEM: Final = 1023  # 10-bit PMID item; also the count limit of a METRICS section
MAX_CLUSTER: Final = 4095  # 12-bit PMID cluster
MAX_SERIAL: Final = (1 << 22) - 1  # 22-bit pmInDom serial; also an INDOMS count limit
MAX_LABELS: Final = 255  # count limit of a LABELS section


# -- limits of ours (bounded work per file) ------------------------------------------------
MAX_TOCS: Final = 1024
"""TOC entries accepted in one file; libpcp_mmv writes at most 6, other writers as few.
More refuse the file (header.tocs), so no file makes its validation cost grow without end."""
MAX_ENTRIES: Final = {
    TOC_INDOMS: 10_000,
    TOC_INSTANCES: 50_000,
    TOC_METRICS: 4 * (MAX_ITEM + 1),
    TOC_VALUES: 1 << 20,
    TOC_LABELS: 16_384,
}
"""Entries of one kind accepted in one file, over all its sections (from the TOC counts,
before any section is read): past one, the file is refused, so that no single file costs
one request more than about a second to load and index, whatever it holds.  The values
limit also bounds the value slots (metrics x instances of their indoms).  Real writers
stay far below: libpcp_mmv's largest test files hold a few hundred instances; the
benchmarks' largest file holds 1,000,000 values over 10,000 instances."""
MAX_PROBLEMS: Final = 32
"""Problems recorded (and logged) per file load: the first ones, then one summary line
with the count of the others."""
