"""The commands beside the agent: ``check`` (why is my file not served?), ``dump``,
``debug`` (the agent standalone), ``prune`` (departed writers' files) and
``install``/``remove``; :mod:`.pcpenv` is what they ask of an optional PCP.
"""
