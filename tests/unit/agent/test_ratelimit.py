"""pmda_mmv.agent.ratelimit: the agent's log is bounded per file and cause, per file and in
total, and says how many lines it suppressed, whatever the files do."""

from __future__ import annotations

from pmda_mmv.agent.ratelimit import LogLimit


def test_log_limit_counts_what_it_suppresses() -> None:
    """Per file and cause: PER_CAUSE lines, then a count once the window has passed."""
    lines: list[str] = []
    now = [0.0]
    limit = LogLimit(lines.append, window=10, per_cause=2, per_file=3, clock=lambda: now[0])
    for k in range(50):
        limit(f"/d/a: values[{k}].metric at offset {k * 32}: offset 8 is not a metric")
    limit("/d/a: header.flags at offset 28: unknown flag bits 0x8 ignored")
    limit("/d/a: toc[1].type at offset 56: bad TOC type 0x9")  # past per_file
    limit("/d/b: values[0].metric at offset 0: offset 8 is not a metric")  # another file
    assert len(lines) == 4
    now[0] = 11
    limit.flush()
    assert lines[-1].startswith("/d/a: 49 more log lines about this file suppressed")
    assert len(lines) == 5


def test_log_limit_bounds_the_lines_of_all_files() -> None:
    """Many files, one line each: at most ``total`` lines a window, then one count."""
    lines: list[str] = []
    now = [0.0]
    limit = LogLimit(lines.append, window=10, total=100, clock=lambda: now[0])
    for k in range(1000):
        limit(f"/d/empty{k}: file.size at offset 0: size 0, not written yet")
    assert len(lines) == 100
    now[0] = 10
    limit("/d/next: header.g1 at offset 8: generation 0, no data yet")
    assert lines[-2] == "900 more log lines suppressed (at most 100 every 10 s)"
    assert lines[-1].startswith("/d/next: ")


def test_the_log_limit_holds_in_total_with_the_per_file_counts() -> None:
    """50 new files a second, each with 40 bad entries: the per-file counts
    ("N more log lines about this file suppressed") went around the total (500 files/s:
    ~150 MB of log an hour where 1,000 lines a minute were promised).  Every window now
    has at most ``total`` lines, counts included, plus the total's one count."""
    lines: list[tuple[float, str]] = []
    now = [0.0]
    limit = LogLimit(
        lambda line: lines.append((now[0], line)),
        window=10,
        per_cause=2,
        per_file=5,
        total=100,
        clock=lambda: now[0],
    )
    for second in range(100):
        now[0] = float(second)
        for f in range(50):
            for k in range(40):
                limit(f"/d/f{second}_{f}: values[{k}].metric at offset {k}: cause {k % 7}")
    now[0] = 100.0
    limit.flush()
    for start in range(0, 100, 10):
        window = [ln for t, ln in lines if start <= t < start + 10]
        assert len(window) <= 100 + 1, (start, len(window))
    assert any("more log lines suppressed" in ln for _, ln in lines)
