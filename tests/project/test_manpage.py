"""pmda-mmv(1) (man/pmda-mmv.1) against the argparse definitions: every command has its
section and synopsis, every option of every command is documented in both, and nothing
documented is not an option.  The parsers are the ones each command really builds: its
``main`` runs until it asks argparse to parse, where the test takes the parser."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from typing import Any

import pytest

from pmda_mmv import cli
from tests.support.pmcd import CHECKOUT

MANPAGE = CHECKOUT / "man" / "pmda-mmv.1"


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def command_parser(command: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``pmda-mmv <command>`` builds (taken when it parses)."""
    original = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        if self.prog == f"pmda-mmv {command}":
            raise Captured(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)
    with pytest.raises(Captured) as got:
        cli.main([command, "x"])
    return got.value.parser


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")}


def roff_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--?[A-Za-z][a-z-]*", text.replace(r"\-", "-")))


def sections() -> dict[str, str]:
    """``.SS "pmda-mmv X"`` -> the option items (.TP lines) of its section."""
    found: dict[str, str] = {}
    for block in re.split(r"^\.S[SH] ", MANPAGE.read_text(), flags=re.M):
        m = re.match(r'"pmda-mmv (\w+)"\n', block)
        if m:
            items = re.findall(r"^\.TP\n(.*)$", block, flags=re.M)
            found[m.group(1)] = "\n".join(items)
    return found


def synopses() -> dict[str, str]:
    """Command -> its SYNOPSIS lines (up to .br)."""
    text = MANPAGE.read_text()
    synopsis = text.split(".SH SYNOPSIS\n", 1)[1].split(".SH ", 1)[0]
    found = {}
    for part in synopsis.split(".br\n"):
        m = re.match(r"\.B pmda-mmv(?:\n\.B | )(\w+)", part)
        assert m, part
        found[m.group(1)] = part
    return found


def test_every_command_has_a_section_and_a_synopsis() -> None:
    assert sorted(sections()) == sorted(cli.COMMANDS)
    assert sorted(synopses()) == sorted(cli.COMMANDS)


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_the_options_documented_are_the_options(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = command_parser(command, monkeypatch)
    want = options_of(parser)
    assert roff_options(sections()[command]) == want
    # the synopsis names each option once, by one of its spellings, and nothing else
    synopsis = roff_options(synopses()[command])
    assert synopsis <= want
    for action in parser._actions:
        if action.option_strings and "-h" not in action.option_strings:
            assert synopsis & set(action.option_strings), action.option_strings


def test_pmda_parser_is_the_one_the_agent_parses_with(monkeypatch: pytest.MonkeyPatch) -> None:
    from pmda_mmv.agent.options import parser

    assert options_of(command_parser("pmda", monkeypatch)) == options_of(parser())
    assert "--max-total" in options_of(parser())


def test_the_page_renders_without_warnings() -> None:
    man = shutil.which("man")
    assert man, "man-db is needed to check the page (scripts/setup --test installs it)"
    done = subprocess.run(
        [man, "--warnings", "-l", str(MANPAGE)],
        capture_output=True,
        text=True,
        env={"MANWIDTH": "80", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "pmda-mmv install" in done.stdout
