"""Generation numbers read as times: when a file was created, where its writer encoded it."""

from __future__ import annotations

from typing import Final

TIME_SINCE: Final = 946684800  # 2000-01-01: no MMV file was written before
TIME_AHEAD: Final = 86400  # clocks may disagree by this much


def generation_time(g1: int, now: float) -> float | None:
    """When a file was created, read from its generation number, or None when the number
    is not a time.  Writers disagree on the encoding, so it is decided by plausibility (a
    time since 2000, at most a day after ``now``): libpcp_mmv (C, python3-pcp, Perl) writes
    ``(tv_sec << 32) | tv_usec`` (microseconds below 10**6), Speed, Parfait and Hornet plain
    Unix seconds; anything else (a counter) is no time.  The two readings cannot both be
    plausible: the first is above 4 * 10**18."""
    seconds, usec = g1 >> 32, g1 & 0xFFFFFFFF
    if TIME_SINCE <= seconds <= now + TIME_AHEAD and usec < 1_000_000:
        return seconds + usec / 1e6
    if TIME_SINCE <= g1 <= now + TIME_AHEAD:
        return float(g1)
    return None
