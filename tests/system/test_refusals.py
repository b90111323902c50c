"""Refusals under pmcd: corrupt and hostile files never take the agent down, never stop the
good files, and each refusal is explained once.

One private pmcd serves one MMV directory for the whole module, with pmda-mmv as its pipe
agent (tests/support/served.py: ``--status-metrics``).  A real writer (python3-pcp
``pcp.mmv``) keeps the file ``good`` live throughout: after each test the agent must still
be the same process and must serve the good file's counter at the value just written.  A
refused or partly served file must be explained by exactly one agent log line naming the
file, the field and its byte offset, the same text ``mmv.control.file.last_problem``
reports; file names cannot forge log lines.

Reader rules one by one are in tests/unit/mmvfile/test_reader*.py; lifecycle races in
test_lifecycle, special entries and owners in test_policy, name clashes in test_names,
writer liveness in test_liveness.  A bug found here stays as an ``xfail(strict=True)`` test
until it is fixed, then as a plain regression test; inputs are built here or kept in
tests/data/hardening/.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

import pytest

from pmda_mmv.mmvfile import layout
from tests.support import mmvbuild
from tests.support.mmvbuild import Label, Metric, MmvBuilder, Value, sample
from tests.support.mmvbuild import single as one
from tests.support.served import (
    GOOD,
    UNKNOWN_NAME,
    Agent,
    Scratch,
)

pytestmark = pytest.mark.pmcd


# -- the served directory --------------------------------------------------------------------


# -- corrupt and hostile files ---------------------------------------------------------------


def image(b: MmvBuilder, *patches: tuple[str, int, str, object]) -> mmvbuild.Image:
    img = b.build()
    for section, index, name, value in patches:
        img.patch(section, index, name, value)
    return img


def big_endian() -> tuple[bytes, str]:
    """sample(1) with its header written big-endian, as a big-endian writer would."""
    data = bytearray(sample(1).build().data)
    fields = list(layout.HEADER.unpack_from(data))
    struct.pack_into(">" + layout.HEADER.format[1:], data, 0, *fields)
    return bytes(data), "header.version at offset 4"


def corrupt_cases() -> dict[str, tuple[Callable[[], tuple[bytes, str]], str]]:
    """name -> (maker of (bytes, "field at offset N"), expected state)."""

    def header(name: str, value: object, where: str) -> Callable[[], tuple[bytes, str]]:
        def make() -> tuple[bytes, str]:
            b = sample(1)
            b.header[name] = value
            return bytes(b.build().data), where

        return make

    def patched(
        version: int, section: str, index: int, name: str, value: object, report: str = ""
    ) -> Callable[[], tuple[bytes, str]]:
        """Patch one field; the problem is reported at field ``report`` (default: name)."""

        def make() -> tuple[bytes, str]:
            img = image(sample(version))
            if section == "toc":
                index_ = img.toc_index[index]
                img.patch("toc", index_, name, value)
                where = f"toc[{index_}].{report or name}"
                return bytes(img.data), f"{where} at offset {img.at('toc', index_, report or name)}"
            img.patch(section, index, name, value)
            at = img.at(section, index, report or name)
            return bytes(img.data), f"{section}[{index}].{report or name} at offset {at}"

        return make

    def overlapping() -> tuple[bytes, str]:
        img = image(sample(2))
        k = img.toc_index[layout.TOC_VALUES]
        img.patch("toc", k, "offset", img.get("toc", img.toc_index[layout.TOC_METRICS], "offset"))
        return bytes(img.data), f"toc[{k}].offset at offset {img.at('toc', k, 'offset')}"

    def label_not_json() -> tuple[bytes, str]:
        img = image(sample(3))
        img.patch("labels", 1, "payload", mmvbuild.cbytes("{dom: 1}", layout.LABEL_PAYLOAD_SIZE))
        return bytes(img.data), f"labels[1].payload at offset {img.at('labels', 1, 'payload')}"

    def label_unterminated() -> tuple[bytes, str]:
        img = image(sample(3))
        img.patch("labels", 2, "payload", b"{" + b"x" * (layout.LABEL_PAYLOAD_SIZE - 1))
        return bytes(img.data), f"labels[2].payload at offset {img.at('labels', 2, 'payload')}"

    return {
        "hdr_magic": (header("magic", b"MMV\1", "header.magic at offset 0"), "refused"),
        "hdr_version": (header("version", 9, "header.version at offset 4"), "refused"),
        "hdr_tocs_minus1": (header("tocs", -1, "header.tocs at offset 24"), "refused"),
        "hdr_tocs_past_end": (header("tocs", 100000, "header.tocs at offset 24"), "refused"),
        "hdr_cluster": (header("cluster", 4096, "header.cluster at offset 36"), "refused"),
        "big_endian": (big_endian, "refused"),
        "toc_values_past_end": (
            patched(2, "toc", layout.TOC_VALUES, "offset", 1 << 40),
            "partial",
        ),
        "toc_values_count_minus1": (
            patched(1, "toc", layout.TOC_VALUES, "count", 0xFFFFFFFF, report="offset"),
            "partial",
        ),
        "toc_bad_type": (patched(2, "toc", layout.TOC_STRINGS, "type", 77), "partial"),
        "overlapping_sections": (overlapping, "partial"),
        "entry_unknown_type": (patched(1, "metrics", 2, "type", 8), "partial"),
        "entry_v1_name_unterminated": (patched(1, "metrics", 0, "name", b"n" * 64), "partial"),
        "entry_unknown_semantics": (patched(2, "metrics", 3, "semantics", 9), "partial"),
        "entry_string_offset_past_end": (patched(3, "values", 24, "extra", 1 << 62), "partial"),
        "label_not_json": (label_not_json, "partial"),
        "label_unterminated": (label_unterminated, "partial"),
        # an item past 1023 and a duplicate item are not corrupt any more: those metrics
        # are served under a spill cluster of their file (tests/system/test_spill.py)
    }


CORRUPT = corrupt_cases()


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_file_is_explained_once_and_good_files_stay(
    agent: Agent, scratch: Scratch, name: str
) -> None:
    make, state = CORRUPT[name]
    data, where = make()
    path = scratch.put(name, data)
    agent.assert_alive()
    agent.assert_explained(path, state, where)
    agent.assert_alive()  # a second request: still one line, still the same agent


def test_hostile_file_name_in_the_log_is_text_not_a_format(agent: Agent, scratch: Scratch) -> None:
    path = scratch.put("fmt%s%s%s%s%n%n%x", b"MMV\0" + b"%n" * 30)
    agent.assert_alive()
    agent.assert_explained(path, "refused", "header.version at offset 4")


def test_partial_file_serves_what_is_valid(agent: Agent, scratch: Scratch) -> None:
    img = image(sample(2), ("metrics", 0, "type", 99))  # an unknown type: not servable
    scratch.put("partly", bytes(img.data))
    agent.assert_alive()
    got = agent.probe("mmv.partly.s.t32", "mmv.partly.m.t32", "mmv.partly.s.tu32")
    assert got["mmv.partly.s.t32"].startswith(UNKNOWN_NAME)  # the refused entry
    assert got["mmv.partly.m.t32"] == "3 -42 -42 -42"
    assert got["mmv.partly.s.tu32"] == "1 4000000000"


# -- findings of this suite (fixed since; kept as regression tests) --------------------------


def elapsed_overflow() -> MmvBuilder:
    """A running ELAPSED timer whose value plus the elapsed time exceeds int64."""
    b = MmvBuilder(cluster=5)
    b.metrics += [Metric("e", 1, layout.TYPE_ELAPSED), Metric("after", 2, layout.TYPE_U32)]
    b.values += [Value("e", None, (1 << 63) - 1, extra=-1), Value("after", None, 7)]
    return b


def test_elapsed_overflow_does_not_fail_other_files(agent: Agent, scratch: Scratch) -> None:
    scratch.put("elapsed", elapsed_overflow())
    agent.assert_alive()
    value = agent.bump()
    got = agent.probe("mmv.elapsed.e", GOOD, "mmv.elapsed.after")
    assert got[GOOD] == f"1 {value}"
    assert got["mmv.elapsed.after"] == "1 7"
    agent.assert_alive()


LABELS_PCP_REJECTS = {"space": '{"bad key":1}', "digit": '{"9lives":1}', "nan": '{"a":NaN}'}


@pytest.mark.parametrize("case", sorted(LABELS_PCP_REJECTS))
def test_label_pcp_rejects_is_explained(agent: Agent, scratch: Scratch, case: str) -> None:
    b = one(cluster=30, version=3)
    payload = LABELS_PCP_REJECTS[case]
    b.labels += [Label(layout.LABEL_ITEM, 1, '{"ok":1}'), Label(layout.LABEL_ITEM, 1, payload)]
    path = scratch.put(f"badlabel_{case}", b)
    agent.assert_alive()
    at = b.build().at("labels", 1, "payload")
    agent.assert_explained(path, "partial", f"labels[1].payload at offset {at}")
    labels = agent.pmcd.run("pminfo", "-l", f"mmv.{path.name}.v").stdout
    assert '"ok":1' in labels


CASCADES = {  # name: (section, index, field, value, state: refused when no metric is left)
    "metrics_count_minus1": ("toc", layout.TOC_METRICS, "count", 0xFFFFFFFF, "refused"),
    "metrics_past_end": ("toc", layout.TOC_METRICS, "offset", 1 << 40, "refused"),
    "indoms_count_minus1": ("toc", layout.TOC_INDOMS, "count", 0xFFFFFFFF, "partial"),
    "instance_bad_backref": ("instances", 1, "indom", 8, "partial"),
    "instance_duplicate_id": ("instances", 1, "internal", 0, "partial"),
}


@pytest.mark.parametrize("name", list(CASCADES))
def test_one_defect_is_one_log_line(agent: Agent, scratch: Scratch, name: str) -> None:
    section, index, fname, value, state = CASCADES[name]
    img = image(sample(2))
    if section == "toc":
        index = img.toc_index[index]
    img.patch(section, index, fname, value)
    path = scratch.put(name, bytes(img.data))
    agent.assert_alive()
    agent.assert_explained(path, state, f"{section}[{index}].")


def strings_file() -> mmvbuild.Image:
    b = MmvBuilder(cluster=31, version=2)
    b.metrics += [Metric("text", 1, layout.TYPE_STRING), Metric("n", 2)]
    b.values += [Value("text", None, "hello"), Value("n", None, 4)]
    return b.build()


@pytest.mark.parametrize(
    "extra",
    [1 << 40, -1, 0, 8, "unterminated"],
    ids=["past_end", "minus1", "zero", "header", "no_nul"],
)
def test_live_string_offset_tampering(agent: Agent, scratch: Scratch, extra: int | str) -> None:
    """A writer may change values in place without a new generation; a string value whose
    offset now points outside the file, into the header, or at text without a NUL gives an
    error for that value only, never bytes from outside the string entries."""
    img = strings_file()
    path = scratch.put(f"tamper_{extra}".replace("-", "m"), bytes(img.data))
    metric = f"mmv.{path.name}.text"
    assert agent.probe(metric)[metric] == '1 "hello"'
    with open(path, "r+b") as f:
        if extra == "unterminated":
            f.seek(img.get("values", 0, "extra"))
            f.write(b"x" * layout.STRING_SIZE)
        else:
            f.seek(img.at("values", 0, "extra"))
            f.write(struct.pack("=q", extra))
    got = agent.probe(metric, f"mmv.{path.name}.n", GOOD)
    assert not got[metric].startswith("1 "), got
    assert got[f"mmv.{path.name}.n"] == "1 4"
    agent.assert_alive()


# -- lifecycle races while a client fetches in a loop ----------------------------------------


# -- special files and permissions -----------------------------------------------------------


# -- names and identity ----------------------------------------------------------------------


def test_non_utf8_file_name_does_not_stop_the_scan(agent: Agent, scratch: Scratch) -> None:
    bad = os.fsdecode(b"nonutf\xff")  # what os.listdir returns for it
    scratch.put(bad, one(cluster=32, value=1))
    scratch.put("later", one(cluster=33, value=2))  # sorts after it
    assert agent.probe("mmv.later.v")["mmv.later.v"] == "1 2"
    lines = [ln for ln in agent.pmcd.agent_log().splitlines() if f"{agent.dir}/nonutf" in ln]
    assert len(lines) == 1 and "not a valid metric name component" in lines[0], lines
    agent.assert_alive()


def test_file_name_cannot_forge_log_lines(agent: Agent, scratch: Scratch) -> None:
    forged = "x\n[Mon Jan  1 00:00:00] pmdammv(1) Error: good: forged"
    scratch.put(forged, b"junk" * 20)
    agent.assert_alive()
    log = agent.pmcd.agent_log().splitlines()
    assert not [ln for ln in log if ln.startswith("[Mon Jan  1 00:00:00]")], log[-3:]
    assert len([ln for ln in log if f"{agent.dir}/x" in ln]) == 1


# -- process liveness ------------------------------------------------------------------------


# -- identity that strangers cannot borrow ---------------------------------------------------


# -- fuzz findings and a bounded fuzz run ----------------------------------------------------
