"""The agent's own metrics (``<prefix>.control.*``, cluster 0), as data, without PCP.

The C agent's control metrics of the installed PCP (:func:`control_metrics`; which PCP
it is, :func:`pmda_mmv.agent.pcpcompat.debug_options` decides) and the per-file status metrics
of ``--status-metrics`` (:data:`FILE_STATUS`): names below the prefix, items, types,
semantics and help text.  :mod:`pmda_mmv.agent.pmda` registers them, :mod:`pmda_mmv.agent.serving`
serves their values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from pmda_mmv.directory.filestate import STATES, FileState, state_code
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import problem_count
from pmda_mmv.mmvfile.rules import printable


class ControlMetric(NamedTuple):
    """One of the agent's own metrics: name below the prefix, PM_TYPE, PM_SEM, help."""

    name: str
    type: int
    semantics: int
    oneline: str
    helptext: str


RELOAD, DEBUG, FILES, METRICS = 0, 1, 2, 3
"""Items of the C agent's control metrics."""

_RELOAD: Final = ControlMetric(
    "control.reload",
    layout.TYPE_I32,
    layout.SEM_INSTANT,
    "Control maps reloading",
    "Writing anything other then 0 to this metric will result in\n"
    "re-reading directory and re-mapping files.",
)
_FILES: Final = ControlMetric(
    "control.files",
    layout.TYPE_I32,
    layout.SEM_INSTANT,
    "Memory mapped file count",
    "Count of currently mapped and exported statistics files.",
)
_STATUS_FILES: Final = _FILES._replace(
    helptext="Count of files served (state ok or partial, see mmv.control.file.state); the C\n"
    "pmdammv counts the files it mapped, refused ones too."
)
"""``control.files`` with ``--status-metrics``: what it counts, in its own text (the strict
drop-in keeps the C text, which PCP QA compares)."""
_DEBUG_INT: Final = ControlMetric(
    "control.debug",
    layout.TYPE_I32,
    layout.SEM_INSTANT,
    "Debug flag",
    "See pmdbg(1).  pmstore into this metric to change the debug value.",
)
_DEBUG_STRING: Final = ControlMetric(
    "control.debug",
    layout.TYPE_STRING,
    layout.SEM_INSTANT,
    "Debug options",
    "See pmdbg(1).  pmstore into this metric to change the debug option(s)\n"
    "\n"
    "Note that if this PMDA is installed as a DSO agent, the debug options\n"
    "are shared with pmcd(1)",
)
_METRICS: Final = ControlMetric(
    "control.metrics",
    layout.TYPE_I32,
    layout.SEM_INSTANT,
    "Memory mapped metric count",
    "Count of currently mapped and exported metrics.\nExcludes the mmv.control.* metrics.",
)


def control_metrics(status_metrics: bool, debug_options: bool) -> dict[int, ControlMetric]:
    """The control metrics by item: the C agent's of the installed PCP (``debug_options``:
    its libpcp has pmGetDebug, PCP 7: ``control.debug`` is a string and there is
    ``control.metrics``; :func:`pmda_mmv.agent.pcpcompat.debug_options`), plus
    ``control.metrics`` with ``--status-metrics`` where C has none."""
    control = {RELOAD: _RELOAD, DEBUG: _DEBUG_STRING if debug_options else _DEBUG_INT}
    control[FILES] = _STATUS_FILES if status_metrics else _FILES
    if debug_options or status_metrics:
        control[METRICS] = _METRICS
    return control


STATUS_SERIAL: Final = 0
"""The indom serial of the per-file status metrics (``--status-metrics``)."""
STATES_SERIAL: Final = 1
"""The indom serial of the states (``mmv.control.files_by_state``): one instance per state,
its code the instance id."""
STATUS_INDOM_HELP: Final = (
    "MMV files in the directory",
    "One instance per directory entry the agent has looked at, named by "
    "file name, whether it is served or not.",
)


STATES_INDOM_HELP: Final = (
    "States of the MMV files in the directory",
    "One instance per state of mmv.control.file.state, its instance id the state's code\n"
    "(mmv.control.file.state_code).",
)
CODES: Final = ", ".join(f"{code} {state}" for code, state in enumerate(STATES))
"""The states' codes, as the help texts list them."""


def _metrics(s: FileState) -> int:
    return len(s.entry.metrics) if s.entry else 0


def _values(s: FileState) -> int:
    return s.entry.mf.value_count if s.entry else 0


def _generation(s: FileState) -> int:
    return s.entry.mf.header.g1 if s.entry else 0


def _pid(s: FileState) -> int:
    return s.entry.mf.header.process if s.entry else 0


def _cluster(s: FileState) -> int:
    return s.entry.cluster if s.entry else 0


def _identity(s: FileState) -> str:
    return s.entry.identity if s.entry else ""


class StatusMetric(NamedTuple):
    """A per-file status metric: ``metric`` and the reader of its value in a
    :class:`~.filestate.FileState`."""

    metric: ControlMetric
    read: Callable[[FileState], object]


def _last_problem(state: FileState) -> str:
    """The last problem of ``state`` as one escaped line ("" when it has none)."""
    problem = state.last_problem
    return printable(str(problem)) if problem is not None else ""


def _status(
    name: str, ptype: int, oneline: str, read: Callable[[FileState], object]
) -> StatusMetric:
    return StatusMetric(ControlMetric(name, ptype, layout.SEM_INSTANT, oneline, oneline), read)


FILE_STATUS: Final = {
    10: _status(
        "control.file.state",
        layout.TYPE_STRING,
        f"State of the file: {', '.join(STATES[:-1])} or {STATES[-1]}",
        lambda s: s.state,
    ),
    11: _status(
        "control.file.problems",
        layout.TYPE_U32,
        "Number of problems found in the file when it was last read",
        lambda s: problem_count(s.problems),
    ),
    12: _status(
        "control.file.last_problem",
        layout.TYPE_STRING,
        "The last problem found: file, field, byte offset and reason",
        lambda s: _last_problem(s),
    ),
    13: _status(
        "control.file.metrics", layout.TYPE_U32, "Number of metrics served from the file", _metrics
    ),
    14: _status("control.file.values", layout.TYPE_U32, "Number of values the file holds", _values),
    15: _status(
        "control.file.generation",
        layout.TYPE_U64,
        "Generation number of the file served",
        _generation,
    ),
    16: _status(
        "control.file.pid", layout.TYPE_I32, "Writer process id from the file header", _pid
    ),
    17: _status(
        "control.file.cluster", layout.TYPE_U32, "PMID cluster assigned to the file", _cluster
    ),
    18: _status(
        "control.file.identity",
        layout.TYPE_STRING,
        "Why the file is not served under the cluster it asked for, naming the file that "
        "holds that cluster (empty when it is)",
        _identity,
    ),
    19: StatusMetric(
        ControlMetric(
            "control.file.state_code",
            layout.TYPE_U32,
            layout.SEM_INSTANT,
            "State of the file as a number (mmv.control.file.state's code)",
            f"State of the file as a number: {CODES}.\n"
            "The same state as mmv.control.file.state, as a number for pmie and for\n"
            "pmproxy's OpenMetrics export (which leaves strings out).",
        ),
        lambda s: state_code(s.state),
    ),
}
"""Per-file status metrics (``--status-metrics``) by item, over the status indom."""

FILES_BY_STATE: Final = 20
"""Item of ``control.files_by_state``, over the states indom (``--status-metrics``)."""
BY_STATE: Final = ControlMetric(
    "control.files_by_state",
    layout.TYPE_U32,
    layout.SEM_INSTANT,
    "Number of files in each state",
    "Number of directory entries in each state of mmv.control.file.state, one\n"
    f"instance per state (instance id the state's code: {CODES}).",
)


def state_counts(states: Mapping[str, FileState]) -> list[int]:
    """How many of ``states`` are in each state, by code (every state, 0 for none)."""
    counts = [0] * len(STATES)
    for s in states.values():
        counts[state_code(s.state)] += 1
    return counts
