"""The directory: which files exist, which are served, and when to look again.

:mod:`.policy` (what a directory entry may be), :mod:`.fdlimit` (the descriptor budget),
:mod:`.liveness` (MMV_FLAG_PROCESS writers, namespaces included), :mod:`.filestate` (file
states and changes), :mod:`.backoff` (retrying refused files), :mod:`.resources` (the limits
and what the served files take), :mod:`.entrytable` (the entries' states, serving and
unserving), :mod:`.loader` (one entry opened and validated, or refused), :mod:`.scanner`
(the directory's lifecycle under the request budget, :mod:`.budget`) and :mod:`.watcher`
(inotify or watchdog events).  No PCP imports.
"""
