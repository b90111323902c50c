"""The file states and the agent's own metrics, as the code has them, are the ones the
README and pmda-mmv(1) name: every state of :data:`pmda_mmv.directory.filestate.STATES` in
each list of ``mmv.control.file.state``'s values, every verdict of ``pmda-mmv check`` (the
states but ``pending``, and ``ignored``) in the check lists, and every control metric of
:mod:`pmda_mmv.agent.control` in the man page's METRICS (a state or a metric added to the
code without the docs following fails here)."""

from __future__ import annotations

import re

from pmda_mmv.agent.control import BY_STATE, FILE_STATUS, control_metrics
from pmda_mmv.directory.filestate import IGNORED, PENDING, STATES, state_code
from tests.support.pmcd import CHECKOUT

README = (CHECKOUT / "README.md").read_text()
MANPAGE = (CHECKOUT / "man" / "pmda-mmv.1").read_text().replace("\\-", "-")
CHECK_VERDICTS = [s for s in STATES if s != PENDING] + [IGNORED]


def named(text: str) -> set[str]:
    """The words of ``text`` (state names: letters and hyphens)."""
    return set(re.findall(r"[a-z]+(?:-[a-z]+)*", text))


def after(text: str, marker: str, length: int = 160) -> str:
    """The ``length`` characters of ``text`` after its one ``marker``."""
    assert text.count(marker) == 1, marker
    start = text.index(marker) + len(marker)
    return text[start : start + length]


def test_the_states_are_the_help_texts() -> None:
    state = FILE_STATUS[10].metric
    assert state.name == "control.file.state"
    assert set(STATES) <= named(state.oneline)
    assert len(STATES) == len(set(STATES))


def test_the_readme_names_every_state() -> None:
    listed = re.search(r"`mmv\.control\.file\.state`\s*\(([^)]*)\)", README)
    assert listed is not None
    assert named(listed.group(1)) == set(STATES)
    table = after(README, "| verdict | the agent serves | when |", 3000).split("\n\n")[0]
    verdicts = set(re.findall(r"(?m)^\| `([a-z-]+)`(?:, `([a-z-]+)`)? \|", table))
    assert {s for pair in verdicts for s in pair if s} == {*STATES, IGNORED}


def test_the_manpage_names_every_state() -> None:
    listed = re.search(r"mmv\.control\.file\.state \" \(([^)]*)\)", MANPAGE)
    assert listed is not None
    assert named(listed.group(1)) - {"or"} == set(STATES)
    check = after(MANPAGE, '.SS "pmda-mmv check"\n', 200).split("with every problem")[0]
    assert set(re.findall(r"(?m)^\.BR? ([a-z-]+)", check)) == set(CHECK_VERDICTS)


def test_check_names_its_verdicts_in_its_help() -> None:
    from pmda_mmv import cli

    listed = after(cli.EPILOG, "judge MMV files as the agent does:", 120).split("with every")[0]
    assert named(listed) - {"or"} == set(CHECK_VERDICTS)


def test_the_manpage_names_every_control_metric() -> None:
    metrics = {m.name for m in control_metrics(True, True).values()}
    metrics |= {s.metric.name for s in FILE_STATUS.values()} | {BY_STATE.name}
    section = MANPAGE.split(".SH METRICS\n", 1)[1].split(".SH ", 1)[0]
    missing = sorted(m for m in metrics if f"mmv.{m}" not in section)
    assert len(metrics) > len(FILE_STATUS) and not missing, missing


def test_the_readme_names_every_status_metric() -> None:
    """The README's status metrics item names each ``mmv.control.file.*`` (``.x`` after the
    first)."""
    item = after(README, "2. **`pminfo -f mmv.control`**", 800).split("\n3. ")[0]
    missing = [
        s.metric.name
        for s in FILE_STATUS.values()
        if f"`.{s.metric.name.rsplit('.', 1)[1]}`" not in item
        and f"`mmv.{s.metric.name}`" not in item
    ]
    assert f"`mmv.{BY_STATE.name}`" in item
    assert not missing, missing


CODED = re.compile(r"(\d+) ([a-z]+(?:\\?-[a-z]+)*)")
"""A state's code and name as the docs list them (``4 refused``; roff's ``not\\-ready``)."""


def codes_in(text: str) -> dict[str, int]:
    """The ``code state`` pairs of ``text`` whose name is a state."""
    pairs = ((name.replace("\\-", "-"), int(code)) for code, name in CODED.findall(text))
    return {name: code for name, code in pairs if name in STATES}


def test_every_list_of_codes_is_the_states_order() -> None:
    """The codes of ``mmv.control.file.state_code`` in its help text, docs/watching.md's
    table and the man page are each state's position in STATES, every state listed."""
    wanted = {state: state_code(state) for state in STATES}
    help_text = FILE_STATUS[19].metric.helptext
    watching = (CHECKOUT / "docs" / "watching.md").read_text()
    readme_row = after(watching, "| `mmv.control.file.state_code` |", 400).split("\n")[0]
    manpage = after(MANPAGE, ".B mmv.control.file.state_code\n", 400)
    for where, text in (("help", help_text), ("watching", readme_row), ("man", manpage)):
        assert codes_in(text) == wanted, where
