"""Real MMV writers for the tests, benchmarks and fuzzer: the project's own corpus.

* :mod:`tests.support.writers.libpcp_mmv`: the typed ctypes binding of libpcp_mmv (registry API,
  legacy ``mmv_stats_init``/``mmv_stats2_init``, value calls);
* :mod:`tests.support.writers.cases`: the corpus cases (libpcp_mmv, python3-pcp ``pcp.mmv``, Perl
  ``PCP::MMV``, the pcp-testsuite captures), each written in a child process;
* :mod:`tests.support.writers.corpus`: writes the corpus
  (``python -m tests.support.writers.corpus OUTDIR``);
* :mod:`tests.support.writers.reference`: the C ``pmda_mmv.so`` and ``mmvdump`` of this
  installation, which give each case's reference outputs.
"""
