"""Fleet-scale test parts: a libpcp_mmv writer with labels at every level, and
private runs of Redis, pmproxy, pmlogger and pmseries for tests/system/test_fleet.py and
tests/system/test_pmproxy_variant.py."""
