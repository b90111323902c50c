"""The namespace: many files' entries to one PCP namespace (pure: no I/O but the registry's
and a departing family member's last values).

:mod:`.nametree` (the component tree of names and its rules), :mod:`.indomnumbers` (PCP indom
serial numbering), :mod:`.indomserial` (which indoms are served, and each one's serial),
:mod:`.registry` (the persistent identity registry: a name's clusters
and indoms never move or go to another file), :mod:`.catalogue` (the catalogue of served
files, PMIDs and indoms) and :mod:`.family` with :mod:`.familyspec` (families: one owner's
agreeing files served once more as one tree, departed members' counts kept).  Imports
only :mod:`pmda_mmv.mmvfile`.
"""
