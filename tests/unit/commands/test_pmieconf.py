"""The pmieconf rule group ``pmda-mmv install`` lays and ``remove`` takes out: laid into a
PCP_VAR_DIR of the test's own, read by PCP's real pmieconf (its global group beside ours),
and each rule's state codes are the agent's (:func:`~pmda_mmv.directory.filestate.state_code`).
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

from pmda_mmv.commands import pmieconf
from pmda_mmv.directory.filestate import STATES, state_code
from tests.support.pmcd import CHECKOUT, pcp_config

SHIPPED = CHECKOUT / "deploy" / "pmieconf" / "mmv"


def pcp_rules(var_dir: Path) -> Path:
    """``var_dir``'s pmieconf rules: PCP's global group and the agent's group laid there."""
    rules = var_dir / "config" / "pmieconf"
    system = Path(pcp_config("PCP_VAR_DIR", "/var/lib/pcp")) / "config" / "pmieconf"
    shutil.copytree(system / "global", rules / "global")
    pmieconf.lay_rules(pmieconf.rules_source(), var_dir)
    return rules


def test_lay_rules_writes_each_rule_0644_and_drop_rules_takes_them_out(tmp_path: Path) -> None:
    laid = pmieconf.lay_rules(pmieconf.rules_source(), tmp_path)
    assert laid == tmp_path / "config" / "pmieconf" / "mmv"
    assert sorted(p.name for p in laid.iterdir()) == sorted(pmieconf.RULES)
    for name in pmieconf.RULES:
        assert (laid / name).read_bytes() == (SHIPPED / name).read_bytes()
        assert stat.S_IMODE((laid / name).stat().st_mode) == 0o644
    (laid / "refused").write_text("an older rule")
    pmieconf.lay_rules(pmieconf.rules_source(), tmp_path)  # again: replaced, nothing left over
    assert (laid / "refused").read_bytes() == (SHIPPED / "refused").read_bytes()
    assert sorted(p.name for p in laid.iterdir()) == sorted(pmieconf.RULES)
    pmieconf.drop_rules(tmp_path)
    assert not laid.exists()
    pmieconf.drop_rules(tmp_path)  # idempotent


def test_drop_rules_leaves_a_file_it_did_not_lay(tmp_path: Path) -> None:
    laid = pmieconf.lay_rules(pmieconf.rules_source(), tmp_path)
    (laid / "local").write_text("#pmieconf-rules 1\n")
    pmieconf.drop_rules(tmp_path)
    assert [p.name for p in laid.iterdir()] == ["local"]


def test_the_wheel_ships_every_rule() -> None:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert project["package-dir"]["pmda_mmv.pmieconf"] == "deploy/pmieconf/mmv"
    assert sorted(project["package-data"]["pmda_mmv.pmieconf"]) == sorted(pmieconf.RULES)
    assert sorted(p.name for p in SHIPPED.iterdir()) == sorted(pmieconf.RULES)


def test_each_rule_reads_the_agents_state_codes() -> None:
    """Every ``state_code ... == N`` of a predicate has its state named in the rule's help
    as ``state code N, <state>``, and N is that state's code."""
    compared = 0
    for name in pmieconf.RULES:
        text = (SHIPPED / name).read_text()
        named = dict(re.findall(r"state\s+code\s+(\d+),\s+([a-z-]+)", text))
        for code in re.findall(r"mmv\.control\.file\.state_code \$hosts\$[^=\n]*== (\d+)", text):
            assert code in named, (name, code)
            assert named[code] in STATES and state_code(named[code]) == int(code), name
            compared += 1
    assert compared == 4  # refused, partial, exited, no-writer


def test_pmieconf_lists_the_group_disabled(tmp_path: Path) -> None:
    rules = pcp_rules(tmp_path)
    run = ["pmieconf", "-r", str(rules), "-f", str(tmp_path / "pmie.conf")]
    groups = subprocess.run([*run, "groups"], capture_output=True, text=True, check=True)
    assert re.search(r"(?m)^\s*mmv\b", groups.stdout), groups.stdout
    listed = subprocess.run([*run, "rules", "disabled"], capture_output=True, text=True)
    shown = set(re.findall(r"(?m)^\s*(mmv\.\w+)", listed.stdout))
    assert shown == {f"mmv.{r}" for r in pmieconf.RULES}, listed.stdout + listed.stderr
    helped = subprocess.run([*run, "help", "mmv.no_writer"], capture_output=True, text=True)
    assert "no live writer" in helped.stdout and "held" in helped.stdout, helped.stdout
