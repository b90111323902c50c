"""``pmda-mmv check`` and ``pmda-mmv dump``: the command line, units, agreement with PCP's C
``mmvdump`` and with the names the C reference agent serves, on every corpus file."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmda_mmv.agent import pcpcompat
from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check as check_cmd
from pmda_mmv.commands import dump, pcpenv
from pmda_mmv.mmvfile import layout, pmunits
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support import mmvbuild as mb
from tests.support.mmvbuild import FIELDS, Image, Indom, Instance, Metric, MmvBuilder, Value, sample
from tests.support.writers import reference

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path(sys.executable).parent / "pmda-mmv"


def run_cli(*args: str, python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run the installed console script (or ``python -m pmda_mmv`` with extra flags)."""
    if python_flags:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        cmd = [sys.executable, *python_flags, "-m", "pmda_mmv", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


COMMANDS = {"check": check_cmd.main, "dump": dump.main}


def main(capsys: pytest.CaptureFixture[str], command: str, *args: str) -> tuple[int, str]:
    rc = COMMANDS[command](list(args))
    return rc, capsys.readouterr().out


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """One file per status: ok, partial, not-ready, refused."""
    partial = sample(2)
    partial.metrics[0].raw["type"] = (
        42  # (an item past 1023 spills: served, tests/system/test_spill)
    )
    partial.build().write(tmp_path / "partial")
    sample(3).build().write(tmp_path / "ok")
    sample().build().patch("header", 0, "g2", 0).write(tmp_path / "notready")
    sample().build().patch("header", 0, "version", 9).write(tmp_path / "refused")
    names = {"ok": "ok", "partial": "partial", "not-ready": "notready", "refused": "refused"}
    return {status: tmp_path / name for status, name in names.items()}


# -- check ------------------------------------------------------------------------------------


def test_check_json_statuses_and_problems(capsys: pytest.CaptureFixture[str], files) -> None:
    rc, out = main(capsys, "check", "--json", *map(str, files.values()))
    assert rc == 1
    results = json.loads(out)
    assert [r["file"] for r in results] == [str(p) for p in files.values()]
    assert [r["status"] for r in results] == list(files)
    for r in results:
        assert set(r) == {
            "file",
            "status",
            "problems",
            "served",
            "cluster",
            "conflicts",
            "writer",
            "spills",
            "family",
        }
        assert r["family"] is None  # no --family given: no file is a member
        for p in r["problems"]:
            assert (
                {"field", "offset", "message"} <= set(p) <= {"field", "offset", "message", "limit"}
            )
    by_status = {r["status"]: r["problems"] for r in results}
    assert by_status["ok"] == []
    image = sample(2).build()
    assert by_status["partial"] == [
        {
            "field": "metrics[0].type",
            "offset": image.at("metrics", 0, "type"),
            "message": "unknown type 42",
        }
    ]
    assert [(p["field"], p["offset"]) for p in by_status["not-ready"]] == [("header.g2", 16)]
    assert [(p["field"], p["offset"]) for p in by_status["refused"]] == [("header.version", 4)]


def test_check_problems_are_the_readers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    b = sample(3)
    b.metrics[2].raw["type"] = 42
    b.labels[1].raw["flags"] = 1
    b.indoms[0].instances.append(Instance(0, "dup"))
    path = b.build().write(tmp_path / "many")
    rc, out = main(capsys, "check", "--json", str(path))
    with MmvFile.open(str(path)) as mf:
        expected = [p.as_dict() for p in mf.problems]
    assert rc == 1 and len(expected) == 3
    [r] = json.loads(out)
    assert (r["file"], r["status"], r["problems"]) == (str(path), "partial", expected)
    assert r["cluster"] == 12 and r["conflicts"] == []
    assert r["served"] == [f"mmv.many.{m.name}" for m in mf.metrics]


def test_check_exit_zero_when_all_ok(capsys: pytest.CaptureFixture[str], files) -> None:
    rc, out = main(capsys, "check", str(files["ok"]))
    assert rc == 0
    assert out == f"{files['ok']}: ok\n"


@pytest.mark.parametrize("status", ["partial", "not-ready", "refused"])
def test_check_exit_one_when_any_not_ok(capsys: pytest.CaptureFixture[str], files, status) -> None:
    rc, out = main(capsys, "check", str(files["ok"]), str(files[status]))
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == f"{files['ok']}: ok"
    assert lines[1] == f"{files[status]}: {status} (1 problem)"
    assert re.fullmatch(r"  [a-z.\[\]0-9]+ at offset \d+: .+", lines[2])


def test_check_text_shows_field_offset_and_message(capsys, tmp_path: Path) -> None:
    b = sample()
    b.metrics[3].raw["semantics"] = 9
    path = b.build().write(tmp_path / "f")
    _, out = main(capsys, "check", str(path))
    at = b.build().at("metrics", 3, "semantics")
    assert out.splitlines()[1] == f"  metrics[3].semantics at offset {at}: unknown semantics 9"


def test_check_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every entry, in name order, as the agent judges it."""
    d = tmp_path / "mmv"
    d.mkdir()
    for name in ("b", "a", ".hidden", "c"):
        sample().write(d / name)
    (d / "sub").mkdir()
    (d / "link").symlink_to(d / "a")
    (d / "away").symlink_to(tmp_path)
    os.mkfifo(d / "fifo")
    rc, out = main(capsys, "check", "--json", str(d))
    assert rc == 1
    got = {Path(r["file"]).name: (r["status"], r["problems"][-1]["message"] if r["problems"]
           else "") for r in json.loads(out)}  # fmt: skip
    assert list(got) == sorted(os.listdir(d))
    assert got == {
        ".hidden": ("ignored", "dot-file, ignored"),
        "a": ("ok", ""),
        "away": ("refused", "symlink out of the directory, not followed"),
        "b": ("ok", ""),
        "c": ("ok", ""),
        "fifo": ("refused", "not a regular file (FIFO)"),
        "link": ("ok", ""),  # a symlink to a file beside it is served under its own name
        "sub": ("refused", "not a regular file (directory)"),
    }


def test_check_empty_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = main(capsys, "check", "--json", str(tmp_path))
    assert (rc, json.loads(out)) == (0, [])


def test_check_missing_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = main(capsys, "check", "--json", str(tmp_path / "nope"))
    [r] = json.loads(out)
    assert rc == 1 and r["status"] == "refused" and r["problems"][0]["field"] == "file"


@pytest.mark.parametrize("command", ["check", "dump"])
@pytest.mark.parametrize("args", [[], ["--bogus", "x"], ["--json"]])
def test_usage_errors_exit_two(capsys, command: str, args: list[str]) -> None:
    assert COMMANDS[command](args) == 2
    assert "usage: pmda-mmv " + command in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_cmd.main(["--help"]) == 0
    assert "FILE|DIR" in capsys.readouterr().out


def test_console_script_exit_statuses(files) -> None:
    assert run_cli("check", str(files["ok"])).returncode == 0
    assert run_cli("check", str(files["ok"]), str(files["refused"])).returncode == 1
    assert run_cli("check").returncode == 2
    proc = run_cli("dump", "--json", str(files["partial"]))
    assert proc.returncode == 1 and json.loads(proc.stdout)[0]["status"] == "partial"


# -- dump -------------------------------------------------------------------------------------


def dump_json(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[Any]]:
    rc, out = main(capsys, "dump", "--json", *map(str, paths))
    return rc, json.loads(out)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_dump_json_has_every_field(capsys, tmp_path: Path, version: int) -> None:
    b = sample(version)
    image = b.write(tmp_path / "f")
    rc, [doc] = dump_json(capsys, tmp_path / "f")
    assert rc == 0 and doc["status"] == "ok" and doc["problems"] == []
    assert doc["size"] == len(image.data)
    h = doc["header"]
    assert (h["magic"], h["version"], h["g1"], h["g2"]) == (
        "MMV\0",
        version,
        b.generation,
        b.generation,
    )
    assert (h["tocs"], h["flags"], h["process"], h["cluster"]) == (
        len(image.entries["toc"]),
        0,
        0,
        12,
    )
    toc = [(t["index"], t["at"], t["type"], t["count"], t["offset"]) for t in doc["toc"]]
    assert toc == [
        (k, at, *(layout.TOC.unpack_from(image.data, at)))
        for k, at in enumerate(image.entries["toc"])
    ]
    [indom] = doc["indoms"]
    assert (indom["serial"], indom["offset"], indom["count"]) == (3, image.at("indoms", 0), 3)
    assert (indom["shorthelp"], indom["longhelp"]) == ("indom short", "indom\nlong")
    assert [(i["internal"], i["external"], i["offset"]) for i in indom["instances"]] == [
        (i.internal, i.external, image.at("instances", k))
        for k, i in enumerate(b.indoms[0].instances)
    ]
    metrics = [
        (m["name"], m["item"], m["type"], m["semantics"], m["dimension"], m["units"], m["indom"])
        for m in doc["metrics"]
    ]
    assert metrics == [
        (m.name, m.item, m.type, m.semantics, m.dimension, "count", m.indom) for m in b.metrics
    ]
    assert [(m["shorthelp"], m["longhelp"], m["offset"]) for m in doc["metrics"]] == [
        (m.shorthelp, m.longhelp, image.at("metrics", k)) for k, m in enumerate(b.metrics)
    ]
    values = [
        (v["offset"], v["metric"], v["instance"], v["value"], v["state"]) for v in doc["values"]
    ]
    assert values == [
        (image.at("values", k), v.metric, v.instance, v.value, "ok") for k, v in enumerate(b.values)
    ]
    assert [s["offset"] for s in doc["strings"]] == image.entries["strings"]
    assert {s["text"] for s in doc["strings"]} == {t.decode() for t in image.string_at}
    labels = [
        (x["offset"], x["flags"], x["identity"], x["internal"], x["payload"]) for x in doc["labels"]
    ]
    assert labels == [
        (image.at("labels", k), x.flags, x.identity, x.internal, x.payload)
        for k, x in enumerate(b.labels)
    ]


def test_dump_json_absent_values_and_raw_bytes(capsys, tmp_path: Path) -> None:
    b = MmvBuilder(flags=layout.FLAG_SENTINEL)
    b.metrics += [
        Metric("u", 1, layout.TYPE_U64),
        Metric("d", 2, layout.TYPE_DOUBLE),
        Metric("n", 3, layout.TYPE_NOSUPPORT),
        Metric("e", 4, layout.TYPE_ELAPSED),
    ]
    b.values += [
        Value("u", None, b"\xff" * 8),
        Value("d", None, math.inf),
        Value("n", None, b"\1\2\3\4\5\6\7\x08"),
        Value("e", None, 10, extra=0),
    ]
    b.write(tmp_path / "f")
    _, [doc] = dump_json(capsys, tmp_path / "f")
    got = {v["metric"]: (v["state"], v["value"], v["raw"], v["extra"]) for v in doc["values"]}
    assert got == {
        "u": ("no-value", None, 2**64 - 1, 0),
        "d": ("ok", "inf", "inf", 0),
        "n": ("unsupported", None, "0102030405060708", 0),
        "e": ("ok", 10, 10, 0),
    }
    assert doc["header"]["flag_names"] == ["sentinel"]


def test_dump_refused_and_not_ready_show_the_raw_header(capsys, files) -> None:
    rc, docs = dump_json(capsys, files["not-ready"], files["refused"])
    assert rc == 1
    assert [d["status"] for d in docs] == ["not-ready", "refused"]
    assert docs[0]["header"]["g2"] == 0 and docs[1]["header"]["version"] == 9
    assert all("metrics" not in d for d in docs)


def test_dump_of_unreadable_paths(capsys, tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"MMV\0")
    rc, docs = dump_json(capsys, tmp_path / "short", tmp_path / "missing", tmp_path)
    assert rc == 1
    assert [(d["status"], d["header"]) for d in docs] == [("refused", None)] * 3


def test_dump_partial_file_lists_what_was_accepted(capsys, tmp_path: Path) -> None:
    b = sample()
    b.metrics[1].raw["type"] = 99
    image = b.write(tmp_path / "f")
    rc, [doc] = dump_json(capsys, tmp_path / "f")
    assert rc == 1 and doc["status"] == "partial"
    assert doc["problems"][0]["field"] == "metrics[1].type"
    assert doc["problems"][0]["offset"] == image.at("metrics", 1, "type")
    assert "m.t32" not in {m["name"] for m in doc["metrics"]}
    assert len(doc["values"]) == len(b.values) - 3


def test_dump_text_is_readable(capsys, tmp_path: Path) -> None:
    b = sample(3)
    b.metrics[0].longhelp = "two\nlines"
    image = b.write(tmp_path / "f")
    rc, out = main(capsys, "dump", str(tmp_path / "f"))
    assert rc == 0
    assert out.startswith(f"{tmp_path / 'f'}: ok\nheader:\n")
    for m in b.metrics:
        assert f"\n  {m.name} at " in out
    assert '    longhelp  "two\\nlines"\n' in out  # newlines visible, not raw
    assert f'  m.tstring[7 "seven"] = "text"  at {image.at("values", 27)}\n' in out
    assert "    units count (0x00100000), indom 3\n" in out
    assert f'  instances 3 instance 7 at {image.at("labels", 3)}: {{"inst":"seven"}}\n' in out
    for section in ("toc:", "indoms:", "metrics:", "values:", "strings:", "labels:"):
        assert f"\n{section}\n" in out


def test_dump_text_of_refused_file(capsys, files) -> None:
    rc, out = main(capsys, "dump", str(files["refused"]))
    assert rc == 1
    assert out.splitlines()[:3] == [
        f"{files['refused']}: refused (1 problem)",
        "  header.version at offset 4: version 9 unsupported",
        "header:",
    ]


# -- units ------------------------------------------------------------------------------------

UNITS_WORDS = st.builds(
    pmunits.units_word,
    st.integers(-8, 7),
    st.integers(-8, 7),
    st.integers(-8, 7),
    st.integers(0, 15),
    st.integers(0, 15),
    st.integers(-8, 7),
)


@pytest.fixture(scope="module")
def pcp_units():
    units = pcpenv._pcp_units_str()
    if units is None:
        pytest.fail("python3-pcp not available")
    return units


@settings(max_examples=500, deadline=None)
@given(word=UNITS_WORDS, pad=st.integers(0, 255))
def test_fallback_units_match_pmUnitsStr(pcp_units, word: int, pad: int) -> None:
    """The fallback prints what PCP 6 prints; where the installed libpcp reads the low 8
    bits (PCP 7.2's extra units, pcpcompat.extra_units) the fallback still ignores them."""
    named = pcpcompat.count_scale_named()
    assert pmunits.format_units(word | pad, named) == pmunits.format_units(word, named)
    shown = pcp_units(word | pad) if not pcpcompat.extra_units() else pcp_units(word)
    assert pmunits.format_units(word | pad, named) == shown


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({}, ""),
        ({"dim_count": 1}, "count"),
        ({"dim_space": 1, "scale_space": 1}, "Kbyte"),
        ({"dim_space": 1, "dim_time": -1, "scale_time": 3}, "byte / sec"),
        (
            {"dim_time": -1, "dim_count": 1, "scale_time": 5, "scale_count": 6},
            "count x 10^6 / hour",
        ),
        ({"dim_time": 1, "scale_time": 1}, "microsec"),
        ({"scale_count": 1}, "x 10"),
        ({"scale_count": -3}, "x 10^-3"),
        ({"dim_space": 2, "scale_space": 9}, "space-9^2"),
    ],
)
def test_fallback_units_examples(kwargs: dict[str, int], text: str) -> None:
    """PCP 6's texts; PCP 7 names ``count`` for a count scale alone."""
    assert pmunits.format_units(pmunits.units_word(**kwargs), count_scale_named=False) == text
    pcp7 = f"count {text}" if text.startswith("x 10") else text
    assert pmunits.format_units(pmunits.units_word(**kwargs)) == pcp7


def test_check_and_dump_work_without_python3_pcp(files) -> None:
    """``python -S`` leaves out every site directory, so python3-pcp is not importable."""
    probe = run_cli("dump", "--json", str(files["ok"]), python_flags=("-S",))
    assert probe.returncode == 0, probe.stderr
    units = {m["units"] for m in json.loads(probe.stdout)[0]["metrics"]}
    assert units == {"count"}
    check = subprocess.run(
        [sys.executable, "-S", "-c", "import pcp"], capture_output=True, timeout=60
    )
    assert check.returncode != 0  # the premise: no python3-pcp here
    assert run_cli("check", str(files["ok"]), python_flags=("-S",)).returncode == 0


# -- the corpus: dump agrees with mmvdump ----------------------------------------------------


def corpus_files(corpus: Path) -> list[Path]:
    return sorted(corpus.glob("*/mmv/*"))


@pytest.fixture(scope="module")
def corpus_dump(mmv_corpus: Path) -> dict[str, dict[str, Any]]:
    """``pmda-mmv dump --json`` of every corpus file (one run of the console script)."""
    proc = run_cli("dump", "--json", *map(str, corpus_files(mmv_corpus)))
    assert proc.returncode in (0, 1), proc.stderr
    return {d["file"]: d for d in json.loads(proc.stdout)}


@dataclass
class CDump:
    """What PCP's C mmvdump printed for one file, keyed by entry offset."""

    header: dict[str, str] = field(default_factory=dict)
    toc: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    empty_toc: dict[int, int] = field(default_factory=dict)  # "Bad TOC[k]: ... count 0"
    indoms: dict[int, dict[str, Any]] = field(default_factory=dict)
    instances: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    values: dict[int, tuple[int, str]] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)
    labels: dict[int, dict[str, Any]] = field(default_factory=dict)


HEAD_RE = re.compile(r"^(MMV file|Version|Generated|TOC count|Cluster|Process|Flags)\s*= (.*)$")
BADTOC_RE = re.compile(r"^Bad TOC\[(\d+)\]: invalid entry count (\d+)$")
TOC_RE = re.compile(r"^TOC\[(\d+)\]: (?:toc )?offset (\d+), (\w+) offset (\d+) \((\d+) entries\)$")
INDOM_RE = re.compile(r"^  \[(\d+)/(\d+)\] (\d+) instances, starting at offset (\d+)$")
INST_RE = re.compile(r'^  \[(\d+)/(\d+)\] instance = \[(-?\d+) or "(.*)"\]$')
ENTRY_RE = re.compile(r"^  \[(\d+)/(\d+)\] (.*)$")
TEXT_RE = re.compile(r"^       (shorttext|helptext)=(.*)$")
NOTEXT_RE = re.compile(r"^       \(no (shorttext|helptext)\)$")
TYPE_RE = re.compile(r"^       type=.*\((0x[0-9a-f]+)\), sem=.*\((0x[0-9a-f]+)\), pad=0x[0-9a-f]+$")
UNITS_RE = re.compile(r"^       units=(.*)$")
INDOMREF_RE = re.compile(r"^       (?:indom=(\d+)|\(no indom\))$")
LFLAGS_RE = re.compile(r"^        flags=(0x[0-9a-f]+), identity=(0x[0-9a-f]+)$")
LINTERNAL_RE = re.compile(r"^        internal=(0x[0-9a-f]+)$")


def parse_mmvdump(text: str) -> CDump:
    """Parse mmvdump's output; lines matching nothing continue the last text field (help
    text, string values and strings may hold newlines)."""
    c = CDump()
    section = ""
    last: tuple[dict[Any, Any], Any] | None = None  # (container, key) of the open text

    def keep(container: dict[Any, Any], key: Any) -> None:
        nonlocal last
        last = (container, key)

    for line in text.split("\n"):
        if m := TOC_RE.match(line):
            section = m[3]
            c.toc.append((int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5])))
            last = None
        elif m := BADTOC_RE.match(line):
            c.empty_toc[int(m[1])] = int(m[2])
        elif not section and (m := HEAD_RE.match(line)):
            c.header[m[1]] = m[2]
        elif section == "indoms" and (m := INDOM_RE.match(line)):
            entry = {"serial": int(m[1]), "count": int(m[3]), "first": int(m[4])}
            c.indoms[int(m[2])] = entry
        elif section == "instances" and (m := INST_RE.match(line)):
            c.instances[int(m[2])] = (int(m[1]), int(m[3]), m[4])
        elif section in ("indoms", "metrics") and (m := TEXT_RE.match(line)):
            entry = (c.indoms if section == "indoms" else c.metrics)[max_key(c, section)]
            entry[m[1]] = m[2]
            keep(entry, m[1])
        elif section in ("indoms", "metrics") and (m := NOTEXT_RE.match(line)):
            (c.indoms if section == "indoms" else c.metrics)[max_key(c, section)][m[1]] = None
            last = None
        elif section == "metrics" and (m := TYPE_RE.match(line)):
            c.metrics[max_key(c, section)].update(type=int(m[1], 16), sem=int(m[2], 16))
        elif section == "metrics" and (m := UNITS_RE.match(line)):
            c.metrics[max_key(c, section)]["units"] = m[1]
        elif section == "metrics" and (m := INDOMREF_RE.match(line)):
            c.metrics[max_key(c, section)]["indom"] = int(m[1]) if m[1] else None
        elif section == "labels" and (m := LFLAGS_RE.match(line)):
            c.labels[max_key(c, section)].update(flags=int(m[1], 16), identity=int(m[2], 16))
        elif section == "labels" and (m := LINTERNAL_RE.match(line)):
            c.labels[max_key(c, section)]["internal"] = int(m[1], 16)
        elif section and (m := ENTRY_RE.match(line)):
            key, offset, rest = int(m[1]), int(m[2]), m[3]
            if section == "metrics":
                c.metrics[offset] = {"item": key, "name": rest}
            elif section == "values":
                c.values[offset] = (key, rest)
                keep(c.values, offset)
            elif section == "string":
                c.strings[offset] = rest
                keep(c.strings, offset)
            elif section == "labels":
                c.labels[offset] = {"payload": rest}
        elif last is not None:
            container, key = last
            if isinstance(container[key], tuple):
                container[key] = (container[key][0], container[key][1] + "\n" + line)
            else:
                container[key] += "\n" + line
    _strip_trailing_newlines(c)
    return c


def max_key(c: CDump, section: str) -> int:
    """The entry being described: the last one started in ``section``."""
    table: dict[int, Any] = getattr(c, section)
    return next(reversed(table))


def _strip_trailing_newlines(c: CDump) -> None:
    """The blank line before each TOC header was taken as a continuation: undo that."""
    for table in (c.strings, c.indoms, c.metrics):
        for k, v in table.items():
            if isinstance(v, str):
                table[k] = v.rstrip("\n")
            else:
                for f in ("shorttext", "helptext"):
                    if v.get(f):
                        v[f] = v[f].rstrip("\n")
    c.values = {k: (item, rest.rstrip("\n")) for k, (item, rest) in c.values.items()}


def split_mmvdump(case: Path) -> dict[str, str]:
    """mmvdump.out of a case: per file name (multi-file cases have '### name' headers)."""
    text = (case / "mmvdump.out").read_text(errors="surrogateescape")
    files = sorted(p.name for p in (case / "mmv").iterdir())
    if len(files) == 1:
        return {files[0]: text}
    parts = re.split(r"^### (\S+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


class Mismatches:
    """Collects disagreements so one test reports every file and field at once."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.compared = 0

    def eq(self, where: str, ours: object, theirs: object) -> None:
        self.compared += 1
        if ours != theirs:
            self.found.append(f"{where}: ours {ours!r} != mmvdump {theirs!r}")

    def check(self, where: str, ok: bool, detail: str) -> None:
        self.compared += 1
        if not ok:
            self.found.append(f"{where}: {detail}")


def within_problem(doc: dict[str, Any], start: int, size: int) -> bool:
    """A problem was reported for some field of the entry [start, start + size)."""
    return any(start <= p["offset"] < start + size for p in doc["problems"])


def compare_header(bad: Mismatches, where: str, doc: dict[str, Any], c: CDump) -> None:
    h = doc["header"]
    bad.eq(f"{where} version", str(h["version"]), c.header["Version"])
    bad.eq(f"{where} generation", str(h["g1"]), c.header["Generated"])
    bad.eq(f"{where} tocs", str(h["tocs"]), c.header["TOC count"])
    bad.eq(f"{where} cluster", str(h["cluster"]), c.header["Cluster"])
    bad.eq(f"{where} process", str(h["process"]), c.header["Process"])
    bad.eq(f"{where} flags", h["flags"], int(c.header["Flags"].split()[0], 16))
    names = {"string": "strings"}
    theirs = [(k, at, names.get(s, s), off, n) for k, at, s, off, n in c.toc]
    ours = [
        (t["index"], t["at"], t["section"], t["offset"], t["count"])
        for t in doc["toc"]
        if t["index"] not in c.empty_toc  # mmvdump shows only the count of empty sections
    ]
    bad.eq(f"{where} toc", ours, theirs)
    empty = {t["index"]: t["count"] for t in doc["toc"] if t["index"] in c.empty_toc}
    bad.eq(f"{where} empty toc entries", empty, c.empty_toc)


def v2_instance_offsets(doc: dict[str, Any], c: CDump) -> dict[int, tuple[int, int, str]]:
    """mmvdump 6.0.3 prints the k-th instance of a v2/v3 file at offset start + 80k (the
    v1 entry size) although entries are 24 bytes (its names are right): re-place them."""
    if doc["header"]["version"] == 1:
        return c.instances
    starts = [off for _, _, s, off, _ in c.toc if s == "instances"]
    v1, v2 = layout.INSTANCE_V1.size, layout.INSTANCE_V2.size
    out = {}
    for off, inst in c.instances.items():
        start = max(s for s in starts if s <= off)
        out[start + (off - start) // v1 * v2] = inst
    return out


def compare_indoms(bad: Mismatches, where: str, doc: dict[str, Any], c: CDump) -> None:
    c.instances = v2_instance_offsets(doc, c)
    ours_at = {d["offset"]: d for d in doc["indoms"]}
    for off, d in ours_at.items():
        cd = c.indoms.get(off, {})
        first = d["instances"][0]["offset"] if d["instances"] else cd.get("first")
        bad.eq(
            f"{where} indom@{off}",
            (d["serial"], d["count"], first, d["shorthelp"], d["longhelp"]),
            (
                cd.get("serial"),
                cd.get("count"),
                cd.get("first"),
                cd.get("shorttext"),
                cd.get("helptext"),
            ),
        )
        for i in d["instances"]:
            bad.eq(
                f"{where} instance@{i['offset']}",
                (d["serial"], i["internal"], i["external"]),
                c.instances.get(i["offset"]),
            )
    isize = layout.ENTRY_SIZE[(layout.TOC_INSTANCES, layout.entry_layout(doc["header"]["version"]))]
    ours_inst = {i["offset"] for d in doc["indoms"] for i in d["instances"]}
    for off in set(c.instances) - ours_inst:
        bad.check(f"{where} instance@{off}", within_problem(doc, off, isize), "dropped silently")
    for off in set(c.indoms) - set(ours_at):
        bad.check(f"{where} indom@{off}", within_problem(doc, off, layout.INDOM.size), "dropped")


def compare_metrics(bad: Mismatches, where: str, doc: dict[str, Any], c: CDump) -> set[int]:
    """Returns the items of the metrics we rejected (their values are not ours either)."""
    msize = layout.ENTRY_SIZE[(layout.TOC_METRICS, layout.entry_layout(doc["header"]["version"]))]
    ours = {m["offset"]: m for m in doc["metrics"]}
    for off, m in ours.items():
        cm = c.metrics.get(off, {})
        bad.eq(
            f"{where} metric@{off}",
            (
                m["item"],
                m["name"],
                m["type"] & 0xFFFFFFFF,
                m["semantics"],
                m["units"],
                m["indom"],
                m["shorthelp"],
                m["longhelp"],
            ),
            (
                cm.get("item"),
                cm.get("name"),
                cm.get("type"),
                cm.get("sem"),
                cm.get("units"),
                cm.get("indom"),
                cm.get("shorttext"),
                cm.get("helptext"),
            ),
        )
    rejected = set(c.metrics) - set(ours)
    for off in rejected:
        bad.check(f"{where} metric@{off}", within_problem(doc, off, msize), "dropped silently")
    return {c.metrics[off]["item"] for off in rejected}


def value_text(bad: Mismatches, where: str, v: dict[str, Any], text: str) -> None:
    """Compare one value with mmvdump's text after the metric name and instance."""
    mtype = v["mtype"]
    if mtype == layout.TYPE_NOSUPPORT:
        bad.eq(where, text, f"Unknown type {mtype}")
        return
    if not text.startswith(" = "):
        bad.check(where, False, f"cannot parse {text!r}")
        return
    shown = text[3:]
    if mtype == layout.TYPE_ELAPSED:
        m = re.fullmatch(r"-?\d+ \(value=(-?\d+)/extra=(-?\d+)\)", shown)
        bad.eq(where, (v["raw"], v["extra"]), (int(m[1]), int(m[2])) if m else shown)
    elif mtype == layout.TYPE_STRING:
        bad.eq(where, f'"{v["raw"]}"', shown)
    elif mtype in (layout.TYPE_FLOAT, layout.TYPE_DOUBLE):
        ours = float(v["raw"])
        theirs = float(shown)
        same = (math.isnan(ours) and math.isnan(theirs)) or math.isclose(
            ours, theirs, rel_tol=1e-6, abs_tol=1e-6
        )
        bad.check(where, same, f"ours {ours!r} != mmvdump {shown!r}")
    else:
        bad.eq(where, str(v["raw"]), shown)


def compare_values(
    bad: Mismatches, where: str, doc: dict[str, Any], c: CDump, rejected_items: set[int]
) -> None:
    types = {m["name"]: m["type"] for m in doc["metrics"]}
    ours = {v["offset"]: v for v in doc["values"]}
    for off, v in ours.items():
        if off not in c.values:
            bad.check(f"{where} value@{off}", False, "not in mmvdump")
            continue
        item, text = c.values[off]
        prefix = v["metric"]
        if v["instance"] is not None:
            prefix += f'[{v["instance"]} or "{v["external"]}"]'
        bad.eq(f"{where} value@{off} item", v["item"], item)
        if not text.startswith(prefix):
            bad.check(f"{where} value@{off}", False, f"{text!r} does not start with {prefix!r}")
            continue
        value_text(
            bad, f"{where} value@{off}", {**v, "mtype": types[v["metric"]]}, text[len(prefix) :]
        )
    for off in set(c.values) - set(ours):
        item = c.values[off][0]
        explained = item in rejected_items or within_problem(doc, off, layout.VALUE_SIZE)
        bad.check(f"{where} value@{off}", explained, "dropped silently")


def compare_strings_labels(bad: Mismatches, where: str, doc: dict[str, Any], c: CDump) -> None:
    for s in doc["strings"]:
        if s["text"] is not None:
            bad.eq(f"{where} string@{s['offset']}", s["text"], c.strings.get(s["offset"]))
    ours = {x["offset"]: x for x in doc["labels"]}
    for off, x in ours.items():
        cl = c.labels.get(off, {})
        bad.eq(
            f"{where} label@{off}",
            (x["payload"], x["flags"], x["identity"], x["internal"] & 0xFFFFFFFF),
            (cl.get("payload"), cl.get("flags"), cl.get("identity"), cl.get("internal")),
        )
    for off in set(c.labels) - set(ours):
        bad.check(f"{where} label@{off}", within_problem(doc, off, layout.LABEL.size), "dropped")


def test_dump_agrees_with_mmvdump_on_every_corpus_file(mmv_corpus: Path, corpus_dump) -> None:
    bad = Mismatches()
    compared = 0
    for case in sorted(p.parent for p in mmv_corpus.glob("*/mmvdump.out")):
        for name, text in split_mmvdump(case).items():
            doc = corpus_dump[str(case / "mmv" / name)]
            where = f"{case.name}/{name}"
            bad.check(where, doc["status"] in ("ok", "partial"), f"status {doc['status']}")
            if "toc" not in doc:
                continue
            c = parse_mmvdump(text)
            compare_header(bad, where, doc, c)
            compare_indoms(bad, where, doc, c)
            rejected = compare_metrics(bad, where, doc, c)
            compare_values(bad, where, doc, c, rejected)
            compare_strings_labels(bad, where, doc, c)
            compared += 1
    assert compared == len(corpus_files(mmv_corpus)) and compared > 100
    assert bad.found == []
    assert bad.compared > 200_000  # every value of the two 100k-value files was compared


def test_mmvdump_parser_reads_multiline_text() -> None:
    """The comparison above is only as good as this parser: check it on known output."""
    text = (
        "MMV file   = f\nVersion    = 1\nGenerated  = 5\nTOC count  = 2\nCluster    = 1\n"
        "Process    = 9\nFlags      = 0x4 (sentinel)\n\n"
        "TOC[0]: toc offset 40, metrics offset 72 (1 entries)\n"
        "  [3/72] a.b\n       type=32-bit int (0x0), sem=instant (0x3), pad=0x0\n"
        "       units=count\n       (no indom)\n       shorttext=one\n       helptext=two\n"
        "lines\n\nTOC[1]: offset 56, values offset 176 (1 entries)\n"
        '  [3/176] a.b = "x\ny"\n'
    )
    c = parse_mmvdump(text)
    assert c.header["Flags"] == "0x4 (sentinel)"
    assert c.toc == [(0, 40, "metrics", 72, 1), (1, 56, "values", 176, 1)]
    assert c.metrics[72] == {
        "item": 3,
        "name": "a.b",
        "type": 0,
        "sem": 3,
        "units": "count",
        "indom": None,
        "shorttext": "one",
        "helptext": "two\nlines",
    }
    assert c.values == {176: (3, 'a.b = "x\ny"')}


# -- the corpus: check agrees with what the C reference serves ---------------------------------

# Where the C reference serves a metric that we refuse, because the C is wrong.  None of
# these occur in the corpus (real writers do not produce them); test_c_reference_defects
# below builds one file per defect and shows the C serving it.
C_DEFECTS = {
    "v1-name-not-terminated": "C strcat()s a v1 name with no NUL inside 64 bytes",
    "v2-name-offset-0": "C reads the header as a v2 name when its offset is 0",
    "string-value-4-byte-check": "C bounds-checks 4 of the 256 bytes of a string value",
    "unchecked-instance-offset": "C dereferences v2 instance name offsets unchecked",
}


def pminfo_names(text: str) -> set[str]:
    """Metric names in ``pminfo -dfTlt`` output: the first word of each block."""
    names = set()
    for block in re.split(r"\n\n+", text.strip()):
        first = block.split("\n", 1)[0].split(" ", 1)[0]
        if first.startswith("mmv.") and not first.startswith("mmv.control."):
            names.add(first)
    return names


def our_names(corpus_dump: dict[str, dict[str, Any]], case: Path, served: bool = False) -> set[str]:
    """Names of the metrics we accept in a case (``served``: only from files the C agent
    serves at all, i.e. not those whose PROCESS flag names a dead writer)."""
    names = set()
    for path in sorted((case / "mmv").iterdir()):
        doc = corpus_dump[str(path)]
        if "metrics" not in doc:
            continue
        h = doc["header"]
        if (
            served
            and h["flags"] & layout.FLAG_PROCESS
            and not os.path.exists(f"/proc/{h['process']}")
        ):
            continue
        prefix = "mmv." if h["flags"] & layout.FLAG_NOPREFIX else f"mmv.{path.name}."
        names |= {prefix + m["name"] for m in doc["metrics"]}
    return names


def test_check_accepts_every_metric_the_c_reference_serves(mmv_corpus: Path, corpus_dump) -> None:
    missing = {}
    served = 0
    for case in sorted(p.parent for p in mmv_corpus.glob("*/pminfo.out")):
        theirs = pminfo_names((case / "pminfo.out").read_text(errors="replace"))
        served += len(theirs)
        if theirs - our_names(corpus_dump, case):
            missing[case.name] = sorted(theirs - our_names(corpus_dump, case))
    assert served > 500
    assert missing == {}


def test_the_c_reference_serves_every_metric_we_accept(mmv_corpus: Path, corpus_dump) -> None:
    """The other direction, with the C's file-level reasons named: a file whose PROCESS
    flag names a dead writer is skipped (mmv.c create_client_stat), and a case where
    pminfo failed is the C's PMNS breaking on a leaf/non-leaf name clash (reference 5.1)."""
    extra = {}
    for case in sorted(p.parent for p in mmv_corpus.glob("*/pminfo.out")):
        if (case / "pminfo.rc").read_text().strip() != "0":
            continue
        theirs = pminfo_names((case / "pminfo.out").read_text(errors="replace"))
        if our_names(corpus_dump, case, served=True) - theirs:
            extra[case.name] = sorted(our_names(corpus_dump, case, served=True) - theirs)
    # capi-items' item 1024, which C drops, is served under a spill cluster (docs/spill.md)
    assert extra == {"capi-items": ["mmv.items.item.big"]}
    failed = {c.parent.name for c in mmv_corpus.glob("*/pminfo.rc") if c.read_text() != "0\n"}
    assert failed == {"capi-name-clash", "captured-large-parfait"}


def test_check_statuses_on_the_corpus(mmv_corpus: Path) -> None:
    """Every real-writer file is accepted, as the agent judges it in its directory (the two
    with an item over 1023, which the C reference drops, are ok: it spills); the non-ASCII
    metric name and
    the two with a name that is a leaf and a non-leaf (``a.b``, ``a.b.c``) are partial; the
    PROCESS files, whose writers are gone, are no-writer (pid 1's too: init is alive but
    does not map them)."""
    proc = run_cli("check", "--json", *map(str, sorted(mmv_corpus.glob("*/mmv"))))
    results = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert len(results) == len(corpus_files(mmv_corpus))
    fields = {r["file"]: [p["field"] for p in r["problems"]] for r in results}
    verdicts = {
        str(Path(r["file"]).relative_to(mmv_corpus)): (r["status"], fields[r["file"]])
        for r in results
        if r["status"] != "ok"
    }
    exited = {}
    for path in corpus_files(mmv_corpus):
        head = layout.HEADER.unpack(path.read_bytes()[: layout.HEADER_SIZE])
        flags, pid = head[5], head[6]
        if flags & layout.FLAG_PROCESS and pid != 0:
            exited[str(path.relative_to(mmv_corpus))] = ("no-writer", ["header.process"])
    assert len(exited) > 3
    assert verdicts == {
        "capi-name-clash/mmv/clash": ("partial", ["metrics"]),
        "capi-v2-utf8-long/mmv/utf8long": ("partial", ["metrics[1].name"]),
        "captured-large-parfait/mmv/large-parfait": ("partial", ["metrics"]),
        **exited,
    }
    for case, theirs in (("capi-items", "invalid item 1024"), ("capi-v2-utf8-long", "name")):
        assert theirs in (mmv_corpus / case / "pminfo.err").read_text(errors="replace")


# -- the C reference's defects: it serves these, we refuse them --------------------------------


def serve_with_c(c_reference: tuple[str, str], top: Path) -> subprocess.CompletedProcess[str]:
    """The C agent's view of ``top/mmv`` in a local context (``pminfo -L``), as the corpus's
    references are taken (:mod:`tests.support.writers.reference`)."""
    pminfo, _ = c_reference
    cmd = [pminfo, *reference.local_context(reference.write_pmns(top / "pmns")), "-f", "mmv"]
    env = dict(os.environ, PCP_TMP_DIR=str(top))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def defect_file(defect: str) -> tuple[MmvBuilder | Image, list[str], str]:
    """A file showing one C defect: (file, the problem fields we report, a regex that the C
    agent's ``pminfo -f`` output matches because it served bytes it should not trust)."""
    if defect == "v1-name-not-terminated":
        b = MmvBuilder()  # item 0 follows the name: its first byte ends the C's strcat
        b.metrics += [Metric(b"n" * layout.NAME_SIZE, 0), Metric("ok", 1)]
        b.values += [Value(b"n" * layout.NAME_SIZE, None, 7), Value("ok", None, 8)]
        return b, ["metrics[0].name"], r"(?m)^mmv\.bad\.n{64}\n    value 7$"
    if defect == "v2-name-offset-0":
        b = MmvBuilder(version=2)
        b.metrics += [Metric("zero", 1, raw={"name": 0}), Metric("ok", 2)]
        b.values += [Value("zero", None, 7), Value("ok", None, 8)]
        return b, ["metrics[0].name"], r"(?m)^mmv\.bad\.MMV\n    value 7$"  # the magic
    if defect == "string-value-4-byte-check":
        b = MmvBuilder()
        b.metrics += [Metric("text", 1, layout.TYPE_STRING), Metric("ok", 2)]
        b.values += [Value("text", None, "hello"), Value("ok", None, 8)]
        image = b.build()
        image.patch("values", 0, "extra", len(image.data) - 8)  # 248 bytes past EOF
        return image, ["values[0].extra"], r'(?m)^mmv\.bad\.text\n    value "'
    b = MmvBuilder(version=2)
    b.indoms.append(Indom(1, [Instance(5, "five", raw={"external": 0}), Instance(6, "six")]))
    b.metrics += [Metric("multi", 1, indom=1), Metric("ok", 2)]
    b.values += [Value("multi", 5, 7), Value("multi", 6, 9), Value("ok", None, 8)]
    fields = ["indoms[0].instances[0].external"]  # its value is skipped, not reported again
    return b, fields, r'inst \[5 or "MMV"\] value 7'  # instance named by the header


@pytest.mark.parametrize("defect", sorted(C_DEFECTS))
def test_c_reference_defects(c_reference, tmp_path: Path, defect: str) -> None:
    """C_DEFECTS: each file is served by the C agent from bytes it should not trust, and
    our check reports the exact field instead; the rest of the file is served by both."""
    what, fields, c_shows = defect_file(defect)
    (tmp_path / "mmv").mkdir()
    path = tmp_path / "mmv" / "bad"
    (what.build() if isinstance(what, MmvBuilder) else what).write(path)
    c = serve_with_c(c_reference, tmp_path)
    assert c.returncode == 0, c.stderr
    assert re.search(c_shows, c.stdout), c.stdout
    assert re.search(r"(?m)^mmv\.bad\.ok\n    value 8$", c.stdout)
    with MmvFile.open(str(path)) as mf:
        assert mf.status == "partial"
        assert [p.field for p in mf.problems] == fields
        values = {(m.name, i.internal if i else None): v for m, i, v in mf.values()}
    assert values[("ok", None)] == 8
    assert not any(name in ("MMV", "n" * layout.NAME_SIZE) for name, _ in values)
    assert ("text", None) not in values and ("multi", 5) not in values


def test_field_names_cover_every_struct() -> None:
    """mmvbuild names every field of every layout.py struct (the builder's premise)."""
    for st_, names in FIELDS.items():
        assert len(st_.unpack(bytes(st_.size))) == len(names)


def test_layout_offsets_agree_with_the_builder() -> None:
    """The layout's field offsets (what the parser and every message use) are those the
    builder computes on its own from the same formats, for every record, and the offsets
    the old messages typed by hand."""
    for st_, names in FIELDS.items():
        assert isinstance(st_, layout.Record)
        assert st_.names == names and st_.at == mb.field_offsets(st_)
    assert (layout.HEADER.at["process"], layout.HEADER.at["cluster"]) == (32, 36)
    assert layout.header_field("cluster") == "header.cluster at offset 36"
    assert layout.METRIC_V2.offset(1000, "indom") == 1024 and layout.TOC.offset(40, "offset") == 48


def test_check_never_says_a_name_below_a_leaf_is_served(tmp_path: Path) -> None:
    """A Go Speed file whose metric ``a`` is a leaf while ``a.b`` is defined too: neither
    agent serves ``a.b``; check said "mmv.leafconflict.a.b: served by leafconflict"."""
    b = MmvBuilder(cluster=5)
    b.metrics += [Metric("a", 1, layout.TYPE_U64), Metric("a.b", 2, layout.TYPE_U64)]
    b.values += [Value("a", None, 1), Value("a.b", None, 2)]
    path = tmp_path / "leafconflict"
    b.write(path)
    (result,) = check_cmd.judge([str(path)], ServingOptions(registry="none"))
    assert result["served"] == ["mmv.leafconflict.a"]
    (lost,) = result["conflicts"]
    assert lost["name"] == "mmv.leafconflict.a.b" and lost["taken"] is False
    text = check_cmd.render_check(result)
    assert "  mmv.leafconflict.a.b: served by leafconflict" not in text
    assert (
        "  mmv.leafconflict.a.b: not served: mmv.leafconflict.a is already a leaf "
        "(served by leafconflict)"
    ) in text


def test_check_as_root_never_opens_a_symlinks_target_out_of_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's symlinks to a root-only file outside the directory: the agent never
    follows them, and check (run as root) opened the target once for each (check DIR: who
    serves its names; check FILE: the outlines of the files beside it)."""
    outside = tmp_path / "secret"
    mb.single(60).write(outside)
    outside.chmod(0o600)
    d = tmp_path / "mmv"
    d.mkdir()
    mb.single(61).write(d / "good")
    for k in range(20):
        (d / f"link{k:02d}").symlink_to(outside)
    opened: list[str] = []
    real_open = os.open

    def recording_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fsdecode(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    options = ServingOptions(registry="none")
    results = {Path(r["file"]).name: r for r in check_cmd.judge([str(d)], options)}
    one = check_cmd.judge([str(d / "good")], options)
    monkeypatch.undo()
    assert results["link00"]["status"] == "refused"
    assert (
        results["link00"]["problems"][0]["message"] == "symlink out of the directory, not followed"
    )
    assert one[0]["status"] == "ok"
    assert not [p for p in opened if p.endswith("secret")], opened
