"""The line ``pmda-mmv install`` ends with names ``remove`` as install was run: the
``pmda-mmv`` on PATH, a venv's console script by its path, or the checkout's ./Remove for
``python -m pmda_mmv`` (what ./Install runs)."""

from __future__ import annotations

from pathlib import Path

from pmda_mmv.commands.install import remove_command


def script(directory: Path) -> str:
    directory.mkdir(parents=True)
    path = directory / "pmda-mmv"
    path.write_text("#!/usr/bin/python3\n")
    return str(path)


def test_the_command_on_path_is_named_by_its_name(tmp_path: Path) -> None:
    ran = script(tmp_path / "usr" / "bin")
    assert remove_command(ran, ran, "/usr/bin/python3") == "'pmda-mmv remove'"


def test_a_venv_script_not_on_path_is_named_by_its_path(tmp_path: Path) -> None:
    ran = script(tmp_path / "opt" / "pmda-mmv" / "bin")
    other = script(tmp_path / "usr" / "bin")
    assert remove_command(ran, other, "/x/python") == f"'{ran} remove'"
    assert remove_command(ran, None, "/x/python") == f"'{ran} remove'"


def test_python_m_names_the_checkouts_remove() -> None:
    how = remove_command("/c/pmda_mmv/__main__.py", "/usr/bin/pmda-mmv", "/c/.venv/bin/python")
    assert how == "'./Remove' in a checkout ('/c/.venv/bin/python -m pmda_mmv remove')"
