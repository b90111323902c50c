"""The cost model of a file load: what each entry costs the agent at worst, and the most
one file may cost, judged from the TOC counts before any section is read."""

from __future__ import annotations

from typing import Final

from pmda_mmv.mmvfile.layout import TOC_INDOMS, TOC_INSTANCES, TOC_LABELS, TOC_METRICS, TOC_VALUES

LOAD_COST: Final = {
    TOC_INDOMS: 10.0,
    TOC_INSTANCES: 5.0,
    TOC_METRICS: 100.0,
    TOC_VALUES: 0.6,
    TOC_LABELS: 22.0,
}
"""What one entry of each kind costs a load at worst, in microseconds of the agent's work
(parse, catalogue and python3-pcp's tables), measured on the reference machine (2 cores,
docs/bounded.md): a metric over an indom of its own (its PCP indom and descriptor), an
instance served, a value entry out of instance order (one at a time; in order they cost a
third of it), an instance label.  Strings cost nothing here: they are read when used."""
MAX_LOAD_COST: Final = 1_000_000
"""Most a file's entries may cost to load, by :data:`LOAD_COST` (about a second at worst
on the reference machine, half of it for files written in instance order): each entry kind
at its own limit fits (1M values over 1,024 instances: 0.71M; 20 metrics x 50,000
instances: 0.85M), a file at every limit at once (1.7M) does not, and is refused from its
TOC counts before any section is read, so that no single load stalls a request for long."""
