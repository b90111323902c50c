"""pmda_mmv.mmvfile.parse.ranges: the overlap check of a file's sections and entries finds
the overlap a plain scan of every pair finds, for any spans (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pmda_mmv.mmvfile.parse.ranges import Ranges


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 60)), max_size=400))
def test_ranges_find_the_overlap_a_scan_finds(spans: list[tuple[int, int]]) -> None:
    """The reader's sorted ranges (sections, indoms' instances) answer as a scan of every
    accepted range would, in whatever order ranges come; blocks (of 2 here) split often."""
    ranges = Ranges[int](block=2)
    accepted: list[tuple[int, int, int]] = []
    for k, (start, length) in enumerate(spans):
        end = start + length
        found = ranges.overlapping(start, end)
        clash = [a for a in accepted if a[0] < end and start < a[1]]
        assert (found is None) == (not clash)
        assert found is None or found in clash
        if found is None:
            ranges.add(start, end, k)
            accepted.append((start, end, k))
