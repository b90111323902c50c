"""``check`` and ``debug`` judge a directory as the agent serves it: they are built by the
agent's composition root (:func:`~.assembly.assemble`) from the same serving options, so
the subtrees the agent keeps from the files (``mmv.control``, and ``mmv.containers`` with
``--containers``) are kept from them by the commands too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pmda_mmv.agent.options import ServingOptions, parse_args
from pmda_mmv.commands import check, debug
from pmda_mmv.directory.filestate import OK, REFUSED
from tests.support.mmvbuild import single

SERVING = ["--containers", "--registry", "none"]


def test_check_and_debug_keep_the_containers_subtree_as_the_agent_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host file named ``containers`` asks for ``mmv.containers.v``: with
    ``--containers`` the agent refuses it (the subtree is the containers'), and so do
    ``check`` and ``debug`` given the same option; without it all three serve it."""
    single().write(tmp_path / "containers")
    d = str(tmp_path)
    assert check.main(["--json", *SERVING, d]) == 1
    [verdict] = json.loads(capsys.readouterr().out)
    assert verdict["status"] == REFUSED
    assert verdict["conflicts"] == [
        {
            "name": "mmv.containers.v",
            "winner": None,
            "why": "mmv.containers.v is reserved for the agent",
            "taken": False,
        }
    ]
    assert debug.main(["--dir", d, "--once", *SERVING]) == 0
    assert "mmv.containers.v is reserved for the agent" in capsys.readouterr().out

    assert check.main(["--json", "--registry", "none", d]) == 0
    [verdict] = json.loads(capsys.readouterr().out)
    assert verdict["status"] == OK
    assert verdict["served"] == ["mmv.containers.v"]


def test_check_is_built_with_the_subtrees_the_agent_reserves(tmp_path: Path) -> None:
    """The catalogue ``check`` judges with keeps the agent's subtrees from the files."""
    from pmda_mmv.agent.assembly import RegistryChoice, assemble

    d = str(tmp_path)
    agent = assemble(parse_args([*SERVING, "--dir", d]), d, RegistryChoice(d)).catalogue
    judged = check.Directory(d, ServingOptions(containers=True, registry="none")).catalogue
    assert judged.reserved == agent.reserved == {"mmv.control", "mmv.containers"}
    plain = check.Directory(d, ServingOptions(registry="none")).catalogue
    assert plain.reserved == {"mmv.control"}


def test_check_refuses_a_family_in_the_containers_subtree_as_the_agent_does() -> None:
    """``--family containers=...`` with ``--containers`` is a usage error for all three."""
    argv = [*SERVING, "--family", "containers=app_*"]
    with pytest.raises(SystemExit) as agent:
        parse_args(argv)
    assert agent.value.code == check.main([*argv, "."]) == 2
