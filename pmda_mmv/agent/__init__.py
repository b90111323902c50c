"""The agent: the serving model and its thin ``pcp.pmda.PMDA`` glue.

:mod:`.options` (the serving options the agent and the commands share), :mod:`.control`
(the agent's own ``mmv.control.*`` metrics as data), :mod:`.ratelimit` (the log limiter),
:mod:`.serving` (the pure serving model) with :mod:`.aggregate` (a family metric's values),
:mod:`.pmidhash` and :mod:`.pcpcompat` (the
python3-pcp adapter: the only user of its private attributes) and :mod:`.pmda` (the glue).
"""
