"""pmda_mmv.mmvfile.reader: one test per validation rule (builder files), values, live changes, and
files from real writers (pcp.mmv, libpcp_mmv, pcp-testsuite captures)."""

from __future__ import annotations

import json
import math
import os
import string
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout, limits, pcpdefs
from pmda_mmv.mmvfile.decode import NO_VALUE, UNSUPPORTED
from pmda_mmv.mmvfile.errors import Changed, Corrupt, MmvError, NotReady, Refused
from pmda_mmv.mmvfile.parsed import Label as EntryLabel
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import label_set_problem, merge_labels
from tests.support import mmvbuild as mb
from tests.support.mmvbuild import Image, Indom, Instance, Label, Metric, MmvBuilder, Value, sample

# -- helpers ----------------------------------------------------------------------------------


Loader = Callable[..., tuple[MmvFile, Image]]


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Loader]:
    """load(builder or image) -> (MmvFile, Image): write to tmp_path and open."""
    opened: list[MmvFile] = []

    def _load(what: MmvBuilder | Image, name: str = "f") -> tuple[MmvFile, Image]:
        image = what.build() if isinstance(what, MmvBuilder) else what
        path = image.write(tmp_path / name)
        mf = MmvFile.open(str(path))
        opened.append(mf)
        return mf, image

    yield _load
    for mf in opened:
        mf.close()


def refuse(tmp_path: Path, image: Image | bytes, kind: type[MmvError]) -> MmvError:
    path = tmp_path / "bad"
    path.write_bytes(bytes(image.data if isinstance(image, Image) else image))
    with pytest.raises(kind) as info:
        MmvFile.open(str(path))
    assert type(info.value) is kind
    return info.value


def only_problem(mf: MmvFile, field: str) -> Corrupt:
    """The single problem recorded for ``field``; the file is partial, not refused."""
    found = [p for p in mf.problems if p.field == field]
    assert len(found) == 1, [str(p) for p in mf.problems]
    assert mf.status == "partial"
    assert all(isinstance(p, Corrupt) for p in mf.problems)
    return found[0]


def values_of(mf: MmvFile) -> dict[tuple[str, int | None], object]:
    return {(m.name, i.internal if i else None): v for m, i, v in mf.values()}


def expected_values(b: MmvBuilder) -> dict[tuple[str, int | None], object]:
    return {(str(v.metric), v.instance): v.value for v in b.values}


def metric_index(b: MmvBuilder, name: str) -> int:
    return [m.name for m in b.metrics].index(name)


def item_off(image: Image, index: int, name: str) -> int:
    return image.at("metrics", index, name)


VERSIONS = pytest.mark.parametrize("version", [1, 2, 3])


# -- valid files ------------------------------------------------------------------------------


@VERSIONS
def test_sample_loads_every_type_and_value(load: Loader, version: int) -> None:
    b = sample(version)
    mf, _ = load(b)
    assert mf.status == "ok" and mf.problems == []
    assert mf.header.version == version and mf.header.cluster == 12
    assert [m.name for m in mf.metrics] == [m.name for m in b.metrics]
    assert [i.external for i in mf.indoms[3].instances] == ["zero", "one", "seven"]
    assert mf.indoms[3].shorthelp == "indom short" and mf.indoms[3].longhelp == "indom\nlong"
    assert values_of(mf) == expected_values(b)
    assert mf.value_count == len(b.values)
    assert len(mf.labels) == len(b.labels)


def test_section_order_does_not_matter(load: Loader) -> None:
    b = sample(3)
    b.order = tuple(reversed(mb.DEFAULT_ORDER))
    mf, image = load(b)
    assert image.toc_index[layout.TOC_LABELS] == 0
    assert mf.status == "ok"
    assert values_of(mf) == expected_values(b)
    assert [lab.payload for lab in mf.labels] == [str(lab.payload) for lab in b.labels]


def test_labels_are_honoured_in_a_v1_file(load: Loader) -> None:
    mf, _ = load(sample(1, labels=True))
    assert mf.status == "ok"
    kinds = [(lab.kind, lab.identity, lab.internal, lab.optional) for lab in mf.labels]
    assert kinds == [
        (layout.LABEL_CLUSTER, 12, -1, False),
        (layout.LABEL_INDOM, 3, -1, False),
        (layout.LABEL_ITEM, 1, -1, True),
        (layout.LABEL_INSTANCES, 3, 7, False),
    ]


def test_limits_themselves_are_accepted(load: Loader) -> None:
    b = MmvBuilder(cluster=limits.MAX_CLUSTER)
    b.indoms.append(Indom(limits.MAX_SERIAL, [Instance(-(2**31), "min"), Instance(2**31 - 1, "x")]))
    b.metrics += [Metric("a", limits.MAX_ITEM, indom=limits.MAX_SERIAL), Metric("b" * 63, 0)]
    b.values += [Value("a", -(2**31), 1), Value("a", 2**31 - 1, 2), Value("b" * 63, None, 3)]
    mf, _ = load(b)
    assert mf.status == "ok"
    assert values_of(mf) == {("a", -(2**31)): 1, ("a", 2**31 - 1): 2, ("b" * 63, None): 3}


def test_empty_indom_and_metric_without_values(load: Loader) -> None:
    b = MmvBuilder()
    b.indoms.append(Indom(4))
    b.metrics += [Metric("on.empty", 1, indom=4), Metric("lonely", 2)]
    mf, _ = load(b)
    assert mf.status == "ok"
    assert mf.indoms[4].instances == []
    assert [m.value_count for m in mf.metrics] == [0, 0]
    assert list(mf.values()) == []


def test_header_fields_and_created_time(load: Loader) -> None:
    g1 = (1_700_000_000 << 32) | 250_000
    b = MmvBuilder(version=2, flags=layout.FLAG_PROCESS, process=4321, cluster=7, generation=g1)
    mf, _ = load(b)
    h = mf.header
    assert (h.version, h.g1, h.g2, h.tocs, h.flags, h.process, h.cluster) == (
        2,
        g1,
        g1,
        2,
        layout.FLAG_PROCESS,
        4321,
        7,
    )
    assert h.process_flag and not h.noprefix and not h.sentinel
    assert h.created == pytest.approx(1_700_000_000.25)


# -- header rules (the file is refused or not ready) --------------------------------------------


def test_file_smaller_than_header(tmp_path: Path) -> None:
    e = refuse(tmp_path, sample().build().data[: layout.HEADER_SIZE - 1], Refused)
    assert (e.field, e.offset, e.limit) == ("file.size", 0, layout.HEADER_SIZE)


def test_empty_file_is_not_ready(tmp_path: Path) -> None:
    # libpcp_mmv creates the file, then sizes it: an empty file is a writer mid-creation
    e = refuse(tmp_path, b"", NotReady)
    assert (e.field, e.offset) == ("file.size", 0)


def test_file_shorter_than_a_header(tmp_path: Path) -> None:
    e = refuse(tmp_path, b"MMV\0", Refused)
    assert (e.field, e.offset, e.limit) == ("file.size", 0, 40)


def test_bad_magic(tmp_path: Path) -> None:
    image = sample().build()
    for magic in (b"MMV\1", b"mmv\0", b"\0\0\0\0"):
        e = refuse(tmp_path, image.patch("header", 0, "magic", magic), Refused)
        assert (e.field, e.offset) == ("header.magic", image.at("header", 0, "magic"))


@pytest.mark.parametrize("version", [0, 4, -1, 0x7FFFFFFF])
def test_bad_version(tmp_path: Path, version: int) -> None:
    image = sample().build().patch("header", 0, "version", version)
    e = refuse(tmp_path, image, Refused)
    assert (
        (e.field, e.offset)
        == ("header.version", image.at("header", 0, "version"))
        == (
            "header.version",
            4,
        )
    )


def test_generation_zero_is_not_ready(tmp_path: Path) -> None:
    image = sample().build().patch("header", 0, "g1", 0).patch("header", 0, "g2", 0)
    e = refuse(tmp_path, image, NotReady)
    assert (e.field, e.offset) == ("header.g1", image.at("header", 0, "g1")) == ("header.g1", 8)


def test_generation_in_flux_is_not_ready(tmp_path: Path) -> None:
    image = sample().build().patch("header", 0, "g2", 0)
    e = refuse(tmp_path, image, NotReady)
    assert (e.field, e.offset) == ("header.g2", image.at("header", 0, "g2")) == ("header.g2", 16)


@pytest.mark.parametrize("tocs", [1, 0, -1, -(2**31)])
def test_fewer_than_two_tocs(tmp_path: Path, tocs: int) -> None:
    image = sample().build().patch("header", 0, "tocs", tocs)
    e = refuse(tmp_path, image, Refused)
    assert (e.field, e.offset, e.limit) == ("header.tocs", 24, 2)
    assert e.offset == image.at("header", 0, "tocs")


def test_toc_past_end_of_file(tmp_path: Path) -> None:
    image = MmvBuilder().build()  # header + 2 TOC entries, empty sections: 72 bytes
    assert len(image.data) == 72
    e = refuse(tmp_path, image.patch("header", 0, "tocs", 3), Refused)
    assert (e.field, e.offset, e.limit) == ("header.tocs", 24, 2)
    e = refuse(tmp_path, bytes(image.patch("header", 0, "tocs", 2).data[:71]), Refused)
    assert (e.field, e.offset) == ("header.tocs", 24)


@pytest.mark.parametrize("cluster", [-1, limits.MAX_CLUSTER + 1, -(2**31)])
def test_cluster_out_of_range(tmp_path: Path, cluster: int) -> None:
    image = sample().build().patch("header", 0, "cluster", cluster)
    e = refuse(tmp_path, image, Refused)
    assert (e.field, e.offset, e.limit) == ("header.cluster", 36, limits.MAX_CLUSTER)


def test_unknown_flag_bits_are_reported_not_refused(load: Loader) -> None:
    b = sample()
    b.header["flags"] = layout.FLAG_SENTINEL | 0x40
    mf, image = load(b)
    p = only_problem(mf, "header.flags")
    assert p.offset == image.at("header", 0, "flags") == 28
    assert mf.header.sentinel
    assert values_of(mf) == expected_values(b)


def test_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path, tmp_path / "fifo"):
        with pytest.raises(Refused) as info:
            MmvFile.open(str(path))
        assert (info.value.field, info.value.offset) == ("file", -1)


def test_symlink_is_not_followed(tmp_path: Path) -> None:
    sample().write(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(Refused) as info:
        MmvFile.open(str(tmp_path / "link"))
    assert info.value.field == "file"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(Refused) as info:
        MmvFile.open(str(tmp_path / "nope"))
    assert info.value.field == "file" and "No such file" in info.value.message


def test_file_larger_than_max_size(tmp_path: Path) -> None:
    size = len(sample().write(tmp_path / "f").data)
    with pytest.raises(Refused) as info:
        MmvFile.open(str(tmp_path / "f"), max_size=size - 1)
    assert (info.value.field, info.value.offset, info.value.limit) == ("file.size", 0, size - 1)


# -- section rules (the section is skipped, the rest stays usable) ------------------------------


def test_bad_toc_type(load: Loader) -> None:
    b = sample()
    b.extra_toc.append((7, 1, layout.HEADER_SIZE))
    mf, image = load(b)
    k = len(image.entries["toc"]) - 1
    p = only_problem(mf, f"toc[{k}].type")
    assert p.offset == image.at("toc", k, "type") == image.at("toc", k)
    assert values_of(mf) == expected_values(b)


@pytest.mark.parametrize(
    ("toc_type", "limit"),
    [  # METRICS: no count limit of its own (past 1023 they spill), tests/system/test_spill.py
        (layout.TOC_INDOMS, limits.MAX_SERIAL),
        (layout.TOC_LABELS, limits.MAX_LABELS),
    ],
)
@pytest.mark.parametrize("over", [1, 2**32 - 1])  # 2**32 - 1: a count of -1 read unsigned
def test_section_count_over_limit(load: Loader, toc_type: int, limit: int, over: int) -> None:
    b = sample(3)
    image = b.build()
    count = limit + 1 if over == 1 else over
    k = image.toc_index[toc_type]
    image.patch("toc", k, "count", count)
    mf, _ = load(image)
    p = [q for q in mf.problems if q.field == f"toc[{k}].count"]
    assert len(p) == 1 and p[0].offset == image.toc_at(toc_type, "count")
    assert p[0].limit == limit
    if toc_type == layout.TOC_LABELS:  # nothing depends on labels: everything else is served
        assert mf.problems == p and values_of(mf) == expected_values(b) and mf.labels == []


@pytest.mark.parametrize("toc_type", [layout.TOC_VALUES, layout.TOC_INSTANCES, layout.TOC_STRINGS])
def test_section_count_minus_one_is_out_of_file(load: Loader, toc_type: int) -> None:
    image = sample(2).build()
    k = image.toc_index[toc_type]
    image.patch("toc", k, "count", 2**32 - 1)
    mf, _ = load(image)
    p = only_problem(mf, f"toc[{k}].offset")
    assert p.offset == image.toc_at(toc_type, "offset")
    assert p.limit == len(image.data)


def test_section_offset_past_end_of_file(load: Loader) -> None:
    b = sample()
    image = b.build()
    k = image.toc_index[layout.TOC_VALUES]
    image.patch("toc", k, "offset", len(image.data))
    mf, _ = load(image)
    p = only_problem(mf, f"toc[{k}].offset")
    assert p.offset == image.toc_at(layout.TOC_VALUES, "offset")
    assert [m.name for m in mf.metrics] == [m.name for m in b.metrics]  # metrics stay
    assert list(mf.values()) == []


def test_section_range_that_wraps_64_bits(load: Loader) -> None:
    """offset + count * size wraps to a small number in 64-bit arithmetic (the C adds
    unchecked): it must still be outside the file."""
    image = sample().build()
    k = image.toc_index[layout.TOC_VALUES]
    image.patch("toc", k, "offset", 2**64 - 2 * layout.VALUE_SIZE)
    image.patch("toc", k, "count", 4)
    wrapped = (2**64 - 2 * layout.VALUE_SIZE + 4 * layout.VALUE_SIZE) % 2**64
    assert wrapped < len(image.data)
    mf, _ = load(image)
    assert only_problem(mf, f"toc[{k}].offset").offset == image.toc_at(layout.TOC_VALUES, "offset")


@pytest.mark.parametrize("offset", [0, layout.HEADER_SIZE, layout.HEADER_SIZE + layout.TOC_SIZE])
def test_section_overlapping_header_or_toc(load: Loader, offset: int) -> None:
    image = sample().build()
    k = image.toc_index[layout.TOC_STRINGS]
    image.patch("toc", k, "offset", offset)
    mf, _ = load(image)
    p = only_problem(mf, f"toc[{k}].offset")
    assert p.offset == image.toc_at(layout.TOC_STRINGS, "offset")
    assert "outside the data area" in p.message


def test_section_overlapping_another_section(load: Loader) -> None:
    image = sample().build()
    k = image.toc_index[layout.TOC_STRINGS]  # later in the TOC than values: it is the one skipped
    image.patch("toc", k, "offset", image.at("values", 1))
    mf, _ = load(image)
    p = only_problem(mf, f"toc[{k}].offset")
    assert p.offset == image.toc_at(layout.TOC_STRINGS, "offset")
    assert f"overlaps toc[{image.toc_index[layout.TOC_VALUES]}]" in p.message
    assert mf.value_count == len(sample().values)


# -- indom and instance rules -----------------------------------------------------------------


def test_duplicate_indom_serial(load: Loader) -> None:
    b = sample()
    b.indoms.append(Indom(3, [Instance(50, "fifty")]))
    mf, image = load(b)
    p = only_problem(mf, "indoms[1].serial")
    assert p.offset == image.at("indoms", 1, "serial") == image.at("indoms", 1)
    assert [i.external for i in mf.indoms[3].instances] == ["zero", "one", "seven"]
    assert values_of(mf) == expected_values(b)


def test_indom_serial_over_22_bits(load: Loader) -> None:
    b = sample()
    b.indoms.append(Indom(limits.MAX_SERIAL + 1, [Instance(1, "x")]))
    mf, image = load(b)
    p = only_problem(mf, "indoms[1].serial")
    assert (p.offset, p.limit) == (image.at("indoms", 1, "serial"), limits.MAX_SERIAL)
    assert sorted(mf.indoms) == [3]


@VERSIONS
def test_indom_instances_out_of_file(load: Loader, version: int) -> None:
    b = sample(version)
    b.indoms.append(Indom(4, [Instance(1, "x")], raw={"offset": 10**9}))
    mf, image = load(b)
    p = only_problem(mf, "indoms[1].offset")
    assert p.offset == image.at("indoms", 1, "offset") == image.at("indoms", 1) + 8
    assert 4 not in mf.indoms and values_of(mf) == expected_values(b)


def test_v1_instance_name_not_nul_terminated(load: Loader) -> None:
    b = sample(1)
    b.indoms[0].instances.append(Instance(9, b"n" * layout.NAME_SIZE))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].external")
    assert (p.offset, p.limit) == (image.at("instances", 3, "external"), layout.NAME_SIZE)
    assert p.offset == image.at("instances", 3) + 16
    assert [i.internal for i in mf.indoms[3].instances] == [0, 1, 7]


def test_v1_instance_name_of_63_bytes_is_fine(load: Loader) -> None:
    b = sample(1)
    b.indoms[0].instances.append(Instance(9, "n" * 63))
    mf, _ = load(b)
    assert mf.status == "ok" and mf.indoms[3].instances[-1].external == "n" * 63


@pytest.mark.parametrize(
    ("external", "why"),
    [(10**9, "outside the file"), (0, "offset 0"), (8, "outside the file")],
)
def test_v2_instance_name_offset_bad(load: Loader, external: int, why: str) -> None:
    b = sample(2)
    b.indoms[0].instances.append(Instance(9, "nine", raw={"external": external}))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].external")
    assert p.offset == image.at("instances", 3, "external") == image.at("instances", 3) + 16
    assert why in p.message
    assert [i.internal for i in mf.indoms[3].instances] == [0, 1, 7]


def test_v2_instance_name_not_nul_terminated(load: Loader) -> None:
    b = sample(2)
    b.indoms[0].instances.append(Instance(9, b"n" * layout.STRING_SIZE))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].external")
    assert (p.offset, p.limit) == (image.at("instances", 3, "external"), layout.STRING_SIZE)
    assert "NUL" in p.message


@VERSIONS
def test_instance_back_reference_to_wrong_indom(load: Loader, version: int) -> None:
    b = sample(version)
    b.indoms[0].instances.append(Instance(9, "nine", raw={"indom": 12345}))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].indom")
    assert p.offset == image.at("instances", 3, "indom") == image.at("instances", 3)


@VERSIONS
def test_duplicate_instance_id(load: Loader, version: int) -> None:
    b = sample(version)
    b.indoms[0].instances.append(Instance(1, "another one"))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].internal")
    assert p.offset == image.at("instances", 3, "internal") == image.at("instances", 3) + 12
    assert [i.external for i in mf.indoms[3].instances] == ["zero", "one", "seven"]


@VERSIONS
def test_duplicate_instance_name(load: Loader, version: int) -> None:
    b = sample(version)
    b.indoms[0].instances.append(Instance(99, "one"))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].external")
    assert p.offset == image.at("instances", 3, "external")
    assert "duplicate" in p.message


@VERSIONS
def test_empty_instance_name(load: Loader, version: int) -> None:
    b = sample(version)
    b.indoms[0].instances.append(Instance(99, ""))
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].instances[3].external")
    assert p.offset == image.at("instances", 3, "external")
    assert "empty" in p.message


def test_same_instance_name_in_two_indoms_is_fine(load: Loader) -> None:
    b = sample()
    b.indoms.append(Indom(4, [Instance(0, "zero")]))
    mf, _ = load(b)
    assert mf.status == "ok"


# -- metric rules -----------------------------------------------------------------------------


def add_metric(version: int, metric: Metric, value: object = 5) -> MmvBuilder:
    b = sample(version)
    b.metrics.append(metric)
    b.values.append(Value(metric.name, None, value))
    return b


@VERSIONS
@pytest.mark.parametrize("name", ["bad-name", "sp ace", "caf\u00e9", "a/b", "tab\t"])
def test_metric_name_with_invalid_character(load: Loader, version: int, name: str) -> None:
    b = add_metric(version, Metric(name, 100))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].name")
    assert p.offset == image.at("metrics", k, "name") == image.at("metrics", k)
    assert "invalid character" in p.message
    assert values_of(mf) == expected_values(sample(version))  # its value is dropped silently


@VERSIONS
@pytest.mark.parametrize("name", ["a..b", ".a", "a.", "."])
def test_metric_name_with_empty_component(load: Loader, version: int, name: str) -> None:
    b = add_metric(version, Metric(name, 100))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].name")
    assert p.offset == image.at("metrics", k)
    assert "empty name component" in p.message


@VERSIONS
def test_metric_name_empty(load: Loader, version: int) -> None:
    b = add_metric(version, Metric("", 100))
    mf, image = load(b)
    k = len(b.metrics) - 1
    assert only_problem(mf, f"metrics[{k}].name").offset == image.at("metrics", k)


def test_v1_metric_name_not_nul_terminated(load: Loader) -> None:
    b = add_metric(1, Metric(b"m" * layout.NAME_SIZE, 0))
    b.metrics[0].item = 100  # keep item 0 free: a NUL byte right after the name
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].name")
    assert (p.offset, p.limit) == (image.at("metrics", k, "name"), layout.NAME_SIZE)
    assert image.get("metrics", k, "item") == 0


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize(
    ("name_offset", "why"),
    [(0, "offset 0"), (10**9, "outside the file"), (2**64 - 1, "outside the file")],
)
def test_v2_metric_name_offset_bad(load: Loader, version: int, name_offset: int, why: str) -> None:
    b = add_metric(version, Metric("extra", 100, raw={"name": name_offset}))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].name")
    assert p.offset == image.at("metrics", k, "name")
    assert why in p.message


def test_v2_metric_name_string_near_end_of_file(load: Loader) -> None:
    """A name string that starts inside the file but whose 256 bytes do not fit."""
    b = add_metric(2, Metric("extra", 100))
    image = b.build()
    k = len(b.metrics) - 1
    image.patch("metrics", k, "name", len(image.data) - 4)
    mf, _ = load(image)
    p = only_problem(mf, f"metrics[{k}].name")
    assert p.limit == len(image.data) - layout.STRING_SIZE


def test_v2_metric_name_not_nul_terminated(load: Loader) -> None:
    b = add_metric(2, Metric(b"m" * layout.STRING_SIZE, 100))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].name")
    assert (p.offset, p.limit) == (image.at("metrics", k, "name"), layout.STRING_SIZE)


@VERSIONS
@pytest.mark.parametrize("item", [limits.MAX_ITEM + 1, 2**32 - 1])
def test_item_over_10_bits(load: Loader, version: int, item: int) -> None:
    """Kept, not skipped: served under a spill cluster (the C agent drops it)."""
    b = add_metric(version, Metric("big", item))
    mf, _ = load(b)
    assert not mf.problems and mf.status == "ok"
    [big] = [m for m in mf.metrics if m.name == "big"]
    assert (big.item, big.spill) == (item, f"item {item} > {limits.MAX_ITEM}")
    assert [m.name for m in mf.metrics if m.spill] == ["big"]


@VERSIONS
def test_duplicate_item(load: Loader, version: int) -> None:
    """The first at the item keeps it (as in the C agent); the later one is kept too,
    marked to spill, naming the metric that has its item."""
    b = add_metric(version, Metric("dup", 1))
    mf, _ = load(b)
    assert not mf.problems
    assert mf.metrics[0].name == b.metrics[0].name and not mf.metrics[0].spill
    k, first = next((k, m.name) for k, m in enumerate(b.metrics) if m.item == 1)
    [dup] = [m for m in mf.metrics if m.name == "dup"]
    assert dup.spill == f"duplicate item 1: metrics[{k}] {first!r} has it"


@VERSIONS
@pytest.mark.parametrize("mtype", [7, 8, 10, -2, 2**31 - 1])
def test_unknown_type(load: Loader, version: int, mtype: int) -> None:
    b = add_metric(version, Metric("odd", 100, type=mtype), value=b"\1" * 8)
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].type")
    assert p.offset == image.at("metrics", k, "type")


@VERSIONS
@pytest.mark.parametrize("sem", [2, 5, 2**32 - 1])
def test_unknown_semantics(load: Loader, version: int, sem: int) -> None:
    b = add_metric(version, Metric("odd", 100, semantics=sem))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].semantics")
    assert p.offset == image.at("metrics", k, "semantics")


def test_semantics_zero_is_accepted(load: Loader) -> None:
    mf, _ = load(add_metric(1, Metric("zero.sem", 100, semantics=layout.SEM_UNSET)))
    assert mf.status == "ok" and mf.metrics[-1].semantics == 0


@VERSIONS
def test_metric_indom_not_defined(load: Loader, version: int) -> None:
    b = sample(version)
    b.metrics.append(Metric("orphan", 100, indom=42))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].indom")
    assert p.offset == image.at("metrics", k, "indom")
    assert p.offset == image.at("metrics", k) + (80 if version == 1 else 24)


@pytest.mark.parametrize("indom", [0, -1])
def test_metric_indom_0_or_minus_1_is_singular(load: Loader, indom: int) -> None:
    mf, _ = load(add_metric(1, Metric("single", 100, raw={"indom": indom})))
    assert mf.status == "ok" and mf.metrics[-1].indom is None
    assert values_of(mf)[("single", None)] == 5


@VERSIONS
def test_help_text_offset_out_of_file_keeps_the_metric(load: Loader, version: int) -> None:
    b = add_metric(version, Metric("helpless", 100, raw={"shorthelp": 10**9}))
    mf, image = load(b)
    k = len(b.metrics) - 1
    p = only_problem(mf, f"metrics[{k}].shorthelp")
    assert p.offset == image.at("metrics", k, "shorthelp")
    assert mf.metrics[-1].name == "helpless" and mf.metrics[-1].shorthelp is None


def test_indom_help_not_nul_terminated(load: Loader) -> None:
    b = sample()
    b.indoms[0].longhelp = b"h" * layout.STRING_SIZE
    mf, image = load(b)
    p = only_problem(mf, "indoms[0].longhelp")
    assert p.offset == image.at("indoms", 0, "longhelp")
    assert "served as its first 255 bytes" in p.message  # as the C agent (Speed writes such)
    assert mf.indoms[3].longhelp == "h" * (layout.STRING_SIZE - 1)
    assert len(mf.indoms[3].instances) == 3 and mf.status == "partial"


def test_metric_help_filling_its_slot_is_served_as_255_bytes(load: Loader) -> None:
    b = sample()
    b.metrics[0].shorthelp = b"s" * layout.STRING_SIZE
    mf, image = load(b)
    p = only_problem(mf, "metrics[0].shorthelp")
    assert p.offset == image.at("metrics", 0, "shorthelp") and p.limit == layout.STRING_SIZE
    assert mf.metrics[0].shorthelp == "s" * (layout.STRING_SIZE - 1)


# -- value rules ------------------------------------------------------------------------------


@VERSIONS
@pytest.mark.parametrize("target", ["indoms", "instances", "values", "nowhere"])
def test_value_metric_offset_not_a_metric_entry(load: Loader, version: int, target: str) -> None:
    b = sample(version)
    image = b.build()
    bad = 10**9 if target == "nowhere" else image.at(target, 0)
    image.patch("values", 2, "metric", bad)
    mf, _ = load(image)
    p = only_problem(mf, "values[2].metric")
    assert p.offset == image.at("values", 2, "metric") == image.at("values", 2) + 16
    assert mf.value_count == len(b.values) - 1


def test_value_metric_offset_inside_a_metric_entry(load: Loader) -> None:
    image = sample(2).build()
    image.patch("values", 0, "metric", image.at("metrics", 0) + 8)
    mf, _ = load(image)
    assert only_problem(mf, "values[0].metric").offset == image.at("values", 0, "metric")


@VERSIONS
@pytest.mark.parametrize("target", ["other indom", "not an instance", "zero"])
def test_value_instance_offset_wrong(load: Loader, version: int, target: str) -> None:
    b = sample(version)
    b.indoms.append(Indom(4, [Instance(0, "zero")]))
    image = b.build()
    k = next(n for n, v in enumerate(b.values) if v.instance is not None)
    bad = {
        "other indom": image.at("instances", 3),
        "not an instance": image.at("metrics", 0),
        "zero": 0,
    }[target]
    image.patch("values", k, "instance", bad)
    mf, _ = load(image)
    p = only_problem(mf, f"values[{k}].instance")
    assert p.offset == image.at("values", k, "instance") == image.at("values", k) + 24


def test_singular_value_ignores_its_instance_offset(load: Loader) -> None:
    """The C reference ignores the instance field of a singular metric's value too."""
    image = sample().build()
    image.patch("values", 0, "instance", 123456)
    mf, _ = load(image)
    assert mf.status == "ok" and values_of(mf)[("s.t32", None)] == -42


@VERSIONS
def test_duplicate_value(load: Loader, version: int) -> None:
    b = sample(version)
    b.values.append(Value("m.t32", 1, 999))
    mf, image = load(b)
    k = len(b.values) - 1
    p = only_problem(mf, f"values[{k}]")
    assert p.offset == image.at("values", k)
    assert values_of(mf)[("m.t32", 1)] == -42  # the first one wins


@VERSIONS
@pytest.mark.parametrize("extra", ["past end", "zero", "near end", "header"])
def test_string_value_offset_bad(load: Loader, version: int, extra: str) -> None:
    b = sample(version)
    image = b.build()
    k = next(n for n, v in enumerate(b.values) if v.metric == "s.tstring")
    size = len(image.data)
    bad = {"past end": size, "zero": 0, "near end": size - 4, "header": 8}[extra]
    image.patch("values", k, "extra", bad)
    mf, _ = load(image)
    p = only_problem(mf, f"values[{k}].extra")
    assert p.offset == image.at("values", k, "extra") == image.at("values", k) + 8
    assert ("s.tstring", None) not in values_of(mf)


def test_string_value_not_nul_terminated(load: Loader) -> None:
    b = sample(1)
    b.strings.append(b"s" * layout.STRING_SIZE)
    image = b.build()
    k = next(n for n, v in enumerate(b.values) if v.metric == "s.tstring")
    image.patch("values", k, "extra", image.string_at[b"s" * layout.STRING_SIZE])
    mf, _ = load(image)
    p = only_problem(mf, f"values[{k}].extra")
    assert p.limit == layout.STRING_SIZE


def test_values_of_a_skipped_metric_are_not_reported_again(load: Loader) -> None:
    b = sample()
    b.metrics[1].item = 1000
    b.metrics[1].raw["type"] = 77
    mf, _ = load(b)
    assert [p.field for p in mf.problems] == ["metrics[1].type"]
    assert all(name != "m.t32" for name, _ in values_of(mf))


# -- label rules ------------------------------------------------------------------------------


def add_label(label: Label) -> MmvBuilder:
    b = sample(3)
    b.labels.append(label)
    return b


@pytest.mark.parametrize(
    "flags", [0, 0x1, 0x2, layout.LABEL_OPTIONAL, layout.LABEL_INDOM | layout.LABEL_ITEM, 0x40]
)
def test_label_flags_bad(load: Loader, flags: int) -> None:
    b = add_label(Label(flags, 3, '{"a":1}'))
    mf, image = load(b)
    p = only_problem(mf, "labels[4].flags")
    assert p.offset == image.at("labels", 4, "flags") == image.at("labels", 4)
    assert len(mf.labels) == 4


def test_label_payload_not_nul_terminated(load: Loader) -> None:
    payload = '{"a":"' + "x" * (layout.LABEL_PAYLOAD_SIZE - 8) + '"}'
    assert len(payload) == layout.LABEL_PAYLOAD_SIZE
    mf, image = load(add_label(Label(layout.LABEL_INDOM, 3, payload)))
    p = only_problem(mf, "labels[4].payload")
    assert (p.offset, p.limit) == (image.at("labels", 4, "payload"), layout.LABEL_PAYLOAD_SIZE)
    assert p.offset == image.at("labels", 4) + 12


@pytest.mark.parametrize("payload", ["{", "not json", '{"a":1', "\udcff"])
def test_label_payload_not_json(load: Loader, payload: str) -> None:
    raw = payload.encode("utf-8", "surrogateescape")
    mf, image = load(add_label(Label(layout.LABEL_INDOM, 3, raw)))
    p = only_problem(mf, "labels[4].payload")
    assert p.offset == image.at("labels", 4, "payload")


@pytest.mark.parametrize("payload", ["[1,2]", "1", '"s"', "null", "{}"])
def test_label_payload_not_an_object(load: Loader, payload: str) -> None:
    mf, image = load(add_label(Label(layout.LABEL_INDOM, 3, payload)))
    p = only_problem(mf, "labels[4].payload")
    assert p.offset == image.at("labels", 4, "payload")
    assert "object" in p.message


@pytest.mark.parametrize(
    "label",
    [
        Label(layout.LABEL_CLUSTER, 13, '{"a":1}'),  # file's cluster is 12
        Label(layout.LABEL_ITEM, 999, '{"a":1}'),
        Label(layout.LABEL_INDOM, 4, '{"a":1}'),
        Label(layout.LABEL_INSTANCES, 4, '{"a":1}', internal=0),
        Label(layout.LABEL_INSTANCES, 3, '{"a":1}', internal=2),
    ],
    ids=["cluster", "item", "indom", "instances-indom", "instances-instance"],
)
def test_label_identity_unknown(load: Loader, label: Label) -> None:
    mf, image = load(add_label(label))
    p = only_problem(mf, "labels[4].identity")
    assert p.offset == image.at("labels", 4, "identity") == image.at("labels", 4) + 4
    assert len(mf.labels) == 4


def test_item_label_for_a_skipped_metric_is_unknown(load: Loader) -> None:
    b = add_label(Label(layout.LABEL_ITEM, 2000, '{"a":1}'))
    b.metrics[1].item, b.metrics[1].type = 2000, 99
    mf, _ = load(b)
    assert {p.field for p in mf.problems} == {"metrics[1].type", "labels[4].identity"}


def test_item_label_of_a_spilled_metric_is_its_own(load: Loader) -> None:
    """A metric past item 1023 is kept (it spills): the labels of its item are its own."""
    b = add_label(Label(layout.LABEL_ITEM, 2000, '{"a":1}'))
    b.metrics[1].item = 2000
    mf, _ = load(b)
    assert mf.problems == [] and mf.metrics[1].spill == "item 2000 > 1023"
    assert merge_labels(mf.labels_for(layout.LABEL_ITEM, 2000))[0] == '{"a":1}'


@pytest.mark.parametrize(
    "payload",
    [r'{"sur":"\ud800"}', r'{"sur":["x\udfff",1]}', r'{"sur":{"b":"\udc80\u00e9"}}'],
    ids=["high", "low-in-list", "in-map"],
)
def test_label_lone_surrogate_stays_escaped(load: Loader, payload: str) -> None:
    """A lone surrogate escaped in a payload (which no UTF-8 encodes) stays escaped in the
    merged label set, so that the set encodes to UTF-8: the label is served, and so is the
    rest of the file (it raised UnicodeEncodeError at every label request in the agent;
    found by a breaker run)."""
    mf, _ = load(add_label(Label(layout.LABEL_INDOM, 3, payload)))
    assert mf.problems == [] and len(mf.labels) == 5
    labels, notes = merge_labels(mf.labels_for(layout.LABEL_INDOM, 3))
    labels.encode("utf-8")
    notes.encode("utf-8")
    assert json.loads(labels)["sur"] == json.loads(payload)["sur"]


def test_label_text_stays_unescaped(load: Loader) -> None:
    """Text that UTF-8 encodes, a surrogate pair too, is not re-escaped."""
    mf, _ = load(add_label(Label(layout.LABEL_INDOM, 3, r'{"sur":"\u00e9\ud83d\ude00"}')))
    labels, _ = merge_labels(mf.labels_for(layout.LABEL_INDOM, 3))
    assert '"sur":"\u00e9\U0001f600"' in labels


# -- values -----------------------------------------------------------------------------------

ALL_ONES = b"\xff" * 8
NAN32 = struct.pack("=f", math.nan).ljust(8, b"\0")
NAN64 = struct.pack("=d", math.nan)


def sentinel_file(flags: int) -> MmvBuilder:
    b = MmvBuilder(flags=flags)
    specs = [
        (layout.TYPE_I32, ALL_ONES),
        (layout.TYPE_U32, ALL_ONES),
        (layout.TYPE_I64, ALL_ONES),
        (layout.TYPE_U64, ALL_ONES),
        (layout.TYPE_FLOAT, NAN32),
        (layout.TYPE_DOUBLE, NAN64),
        (layout.TYPE_ELAPSED, ALL_ONES),
        (layout.TYPE_STRING, ""),
    ]
    for item, (mtype, raw) in enumerate(specs, 1):
        name = f"v.{layout.TYPE_NAMES[mtype]}"
        b.metrics.append(Metric(name, item, mtype))
        b.values.append(Value(name, None, raw))
    b.metrics.append(Metric("v.i32low", 20, layout.TYPE_I32))
    b.values.append(Value("v.i32low", None, -1))  # upper 4 bytes zero: not a sentinel
    return b


def test_sentinel_means_no_value_for_every_type(load: Loader) -> None:
    mf, _ = load(sentinel_file(layout.FLAG_SENTINEL))
    got = {name: v for (name, _), v in values_of(mf).items()}
    assert got.pop("v.i32low") == -1
    assert set(got.values()) == {NO_VALUE}


def test_without_sentinel_the_same_bytes_are_values(load: Loader) -> None:
    mf, _ = load(sentinel_file(0))
    got = {name: v for (name, _), v in values_of(mf).items()}
    assert got["v.32"] == -1 and got["v.u32"] == 2**32 - 1 and got["v.64"] == -1
    assert got["v.u64"] == 2**64 - 1 and got["v.elapsed"] == -1 and got["v.string"] == ""
    assert math.isnan(got["v.float"]) and math.isnan(got["v.double"])


def test_sentinel_flag_is_read_live(load: Loader, tmp_path: Path) -> None:
    mf, image = load(sentinel_file(0))
    assert NO_VALUE not in values_of(mf).values()
    with open(tmp_path / "f", "r+b") as f:
        f.seek(image.at("header", 0, "flags"))
        f.write(struct.pack("=I", layout.FLAG_SENTINEL))
    assert NO_VALUE in values_of(mf).values()


def test_nosupport_metric_has_no_value(load: Loader) -> None:
    b = add_metric(1, Metric("ns", 100, type=layout.TYPE_NOSUPPORT), value=b"\x07" * 8)
    mf, _ = load(b)
    assert mf.status == "ok"
    assert values_of(mf)[("ns", None)] is UNSUPPORTED


def test_elapsed_with_an_interval_in_progress(load: Loader) -> None:
    import time

    started = int(time.time() * 1e6) - 5_000_000  # a timed section opened 5 s ago
    b = MmvBuilder()
    b.metrics.append(Metric("timer", 1, layout.TYPE_ELAPSED))
    b.values.append(Value("timer", None, 1000, extra=-started))
    mf, _ = load(b)
    value = values_of(mf)[("timer", None)]
    assert isinstance(value, int)
    assert 1000 + 5_000_000 <= value < 1000 + 5_000_000 + 3_600_000_000


def test_values_follow_writes_in_place(load: Loader, tmp_path: Path) -> None:
    b = sample()
    mf, image = load(b)
    k = next(n for n, v in enumerate(b.values) if v.metric == "m.tu64" and v.instance == 7)
    with open(tmp_path / "f", "r+b") as f:
        f.seek(image.at("values", k, "value"))
        f.write(struct.pack("=Q", 123456789))
    assert values_of(mf)[("m.tu64", 7)] == 123456789


def test_read_string_bounds(load: Loader) -> None:
    mf, image = load(sample(2))
    first = image.entries["strings"][0]
    assert mf.read_string(first) == "zero"
    for bad in (0, 39, len(image.data) - 255, len(image.data), -1, 2**63):
        assert mf.read_string(bad) is None


# -- the file changes underneath ----------------------------------------------------------------


def test_truncated_after_loading_is_changed(load: Loader, tmp_path: Path) -> None:
    mf, _ = load(sample())
    os.truncate(tmp_path / "f", 100)
    with pytest.raises(Changed):
        mf.snapshot()
    with pytest.raises(Changed):
        list(mf.values())
    with pytest.raises(Changed):
        mf.check_generation()


def test_truncated_to_nothing_is_changed(load: Loader, tmp_path: Path) -> None:
    mf, _ = load(sample())
    os.truncate(tmp_path / "f", 0)
    with pytest.raises(Changed):
        mf.snapshot()


def test_truncated_after_values_is_changed(load: Loader, tmp_path: Path) -> None:
    mf, _ = load(sample())
    os.truncate(tmp_path / "f", mf.base + mf.span)
    with pytest.raises(Changed):
        mf.snapshot()


def test_grown_file_is_changed_for_check_generation(load: Loader, tmp_path: Path) -> None:
    mf, image = load(sample())
    os.truncate(tmp_path / "f", len(image.data) + 4096)
    with pytest.raises(Changed):
        mf.check_generation()


def test_new_generation_written_in_place_is_changed(load: Loader, tmp_path: Path) -> None:
    b = sample()
    mf, _ = load(b)
    b.generation += 1
    with open(tmp_path / "f", "r+b") as f:
        f.write(bytes(b.build().data))
    with pytest.raises(Changed) as info:
        mf.snapshot()
    assert info.value.field == "header.generation"
    assert info.value.offset == layout.GENERATION_OFFSET
    with pytest.raises(Changed):
        mf.check_generation()


def test_writer_restarting_midway_is_changed(load: Loader, tmp_path: Path) -> None:
    """g2 zeroed while the writer rewrites the file: the loaded view is stale."""
    mf, image = load(sample())
    with open(tmp_path / "f", "r+b") as f:
        f.seek(image.at("header", 0, "g2"))
        f.write(bytes(8))
    with pytest.raises(Changed):
        mf.snapshot()


def test_closed_file_is_changed(load: Loader) -> None:
    mf, _ = load(sample())
    mf.close()
    with pytest.raises(Changed):
        mf.snapshot()
    assert mf.read_string(layout.HEADER_SIZE) is None


# -- real writers -----------------------------------------------------------------------------


def check_written(mf: MmvFile, w: mb.Written) -> None:
    """The reader sees exactly what the writer was asked to write."""
    assert mf.status == "ok", [str(p) for p in mf.problems]
    assert mf.header.cluster == w.cluster and mf.header.flags == w.flags
    got = {
        m.name: (m.item, m.type, m.semantics, m.dimension, m.indom, m.shorthelp, m.longhelp)
        for m in mf.metrics
    }
    assert got == w.metrics
    insts = {s: [(i.internal, i.external) for i in d.instances] for s, d in mf.indoms.items()}
    assert insts == w.instances
    vals = {(m.name, i.external if i else None): v for m, i, v in mf.values()}
    assert vals == w.values


def test_pcp_mmv_file(pcp_mmv_file: mb.Written) -> None:
    with MmvFile.open(str(pcp_mmv_file.path)) as mf:
        assert mf.header.version == 1
        check_written(mf, pcp_mmv_file)


def test_pcp_mmv_updates_in_place_are_seen(pcp_mmv_file: mb.Written) -> None:
    writer = pcp_mmv_file.handle
    with MmvFile.open(str(pcp_mmv_file.path)) as mf:
        writer.lookup_set("py.gauge", "green", 1234)
        writer.lookup_inc("py.counter", "")
        writer.lookup_set_string("py.name", "", "changed")
        vals = {(m.name, i.external if i else None): v for m, i, v in mf.values()}
        assert vals[("py.gauge", "green")] == 1234
        assert vals[("py.counter", None)] == 42
        assert vals[("py.name", None)] == "changed"


def test_pcp_mmv_restart_writes_a_new_generation(pcp_mmv_file: mb.Written) -> None:
    with MmvFile.open(str(pcp_mmv_file.path)) as mf:
        before = mf.header.g1
    pcp_mmv_file.handle.restart()
    with MmvFile.open(str(pcp_mmv_file.path)) as mf:
        assert mf.status == "ok" and mf.header.g1 != before
        assert {m.name for m in mf.metrics} == set(pcp_mmv_file.metrics)
        fresh = {v for _, _, v in mf.values()}  # a restarted writer starts from zero
        assert fresh == {0, ""}


def test_pcp_mmv_restart_makes_the_loaded_file_changed(pcp_mmv_file: mb.Written) -> None:
    with MmvFile.open(str(pcp_mmv_file.path)) as mf:
        pcp_mmv_file.handle.restart()
        with pytest.raises(Changed):
            mf.snapshot()


def test_libpcp_mmv_registry_file_with_labels(capi_file: mb.Written) -> None:
    with MmvFile.open(str(capi_file.path)) as mf:
        assert mf.header.version == 3
        check_written(mf, capi_file)
        got = [
            (lab.kind | (0x80 if lab.optional else 0), lab.identity, lab.internal, lab.payload)
            for lab in mf.labels
        ]
        assert got == capi_file.labels


def test_libpcp_mmv_long_names(tmp_path: Path) -> None:
    try:
        w = mb.write_capi(tmp_path / "long", long_names=True)
    except OSError:
        pytest.skip("libpcp_mmv not available")
    with MmvFile.open(str(w.path)) as mf:
        assert mf.header.version == 3
        check_written(mf, w)


EXPECTED_CAPTURES = {
    "KeyboardReader": ("ok", []),
    "pytest": ("ok", []),
    # Parfait wrote an item 1024; the C reference drops it ("invalid item 1024"), we
    # serve it under a spill cluster (tests/system/test_spill.py)
    "large-parfait": ("ok", []),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_CAPTURES))
def test_pcp_testsuite_captures(captured_files: dict[str, Path], name: str) -> None:
    status, fields = EXPECTED_CAPTURES[name]
    with MmvFile.open(str(captured_files[name])) as mf:
        assert mf.status == status
        assert [p.field for p in mf.problems] == fields
        assert mf.metrics and mf.value_count > 0
        values = list(mf.values())
        assert len(values) == mf.value_count
        assert all(v is not UNSUPPORTED for m, _, v in values if m.type != layout.TYPE_NOSUPPORT)


# -- bulk reads (MmvFile.column) ----------------------------------------------------------------


def test_metric_on_an_empty_indom_loads_with_an_empty_column(load: Loader) -> None:
    # Regression: an empty value index made the stride check index an empty array.
    b = MmvBuilder(cluster=3)
    b.indoms.append(Indom(4, []))
    b.metrics += [Metric("empty", 1, indom=4), Metric("one", 2)]
    b.values.append(Value("one", None, 9))
    mf, _ = load(b)
    empty, one = mf.metrics
    assert (empty.stride, mf.column(mf.snapshot(), empty)) == (0, [])
    assert mf.column(mf.snapshot(), one) == [9]


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("sentinel", [False, True], ids=["plain", "sentinel"])
def test_column_equals_one_by_one_decoding(load: Loader, version: int, sentinel: bool) -> None:
    b = sample(version)
    b.flags = layout.FLAG_SENTINEL if sentinel else 0
    mf, _ = load(b)
    snap = mf.snapshot()
    strided = [m for m in mf.metrics if m.stride]
    assert strided, "the sample's metrics should take the bulk path"
    for m in mf.metrics:
        decode = mf.decoder(m.type)
        one_by_one = [decode(snap, s) for s in m.slots]
        assert mf.column(snap, m) == one_by_one, m.name


def test_column_with_scattered_and_missing_values(load: Loader) -> None:
    b = MmvBuilder(cluster=3)
    b.indoms.append(Indom(4, [Instance(0, "a"), Instance(1, "b"), Instance(2, "c")]))
    b.metrics += [Metric("m", 1, layout.TYPE_I64, indom=4), Metric("n", 2, indom=4)]
    # values interleaved across metrics, and no value for m[b]
    b.values += [
        Value("m", 2, -3),
        Value("n", 0, 1),
        Value("m", 0, -1),
        Value("n", 1, 2),
        Value("n", 2, 3),
    ]
    mf, _ = load(b)
    m, n = mf.metrics
    from pmda_mmv.mmvfile.decode import MISSING

    assert m.stride == 0 and mf.column(mf.snapshot(), m) == [-1, MISSING, -3]
    assert mf.column(mf.snapshot(), n) == [1, 2, 3]


def _shortest_labels(count: int) -> list[EntryLabel]:
    """Cluster labels merging into ``count`` labels with the least text: maps named by one
    letter, each of up to 52 one-letter names."""
    letters = string.ascii_letters
    out = []
    for k in range(-(-count // len(letters))):
        inner = letters[: min(len(letters), count - k * len(letters))]
        payload = f'{{"{letters[k]}":{{' + ",".join(f'"{x}":1' for x in inner) + "}}"
        out.append(EntryLabel(layout.LABEL_CLUSTER, 12, -1, payload, False, 0))
    return out


def test_label_set_shortest_text_is_still_counted() -> None:
    """The shortcut that skips counting a set with too little text for PM_MAXLABELS
    labels skips no set libpcp rejects: the shortest payloads of 255 labels are refused,
    of 254 served."""
    assert label_set_problem(_shortest_labels(pcpdefs.PM_MAXLABELS - 1)) is None
    why = label_set_problem(_shortest_labels(pcpdefs.PM_MAXLABELS))
    assert why is not None and f"into {pcpdefs.PM_MAXLABELS} labels" in why


def test_files_repeating_names_and_help_text_keep_one_string_of_each(load: Loader) -> None:
    """Regression: each file's metric names and help text were strings of their own, so
    the processes of one application (the same names and help in every file) paid for
    them once per file; they are one string each, and what is remembered stays bounded."""
    from pmda_mmv.mmvfile.parse import strings

    def app() -> MmvBuilder:
        b = MmvBuilder(cluster=5)
        b.metrics.append(Metric("requests", 1, shorthelp="requests served", longhelp="all"))
        b.values.append(Value("requests", None, 1))
        return b

    (one, _), (two, _) = load(app(), "one"), load(app(), "two")
    first, second = one.metrics[0], two.metrics[0]
    assert (first.name, first.shorthelp, first.longhelp) == ("requests", "requests served", "all")
    assert first.name is second.name and first.shorthelp is second.shorthelp
    assert first.longhelp is second.longhelp
    for n in range(strings.SHARED_MAX + 10):
        strings.shared(f"text {n}")
    assert 0 < len(strings._SHARED) <= strings.SHARED_MAX


def test_files_of_one_layout_share_their_ints_and_index_a_singular_value_by_an_int(
    load: Loader,
) -> None:
    """Regression: a singular metric's value index was an array of one offset (88 bytes),
    and its item, units word and entry and value offsets ints of each file's own (past
    256, 28 to 32 bytes each): the files of one application (the same layout in every
    file) paid for them once per metric per file.  The offset is the index itself and
    the ints are one object each across files, and what is remembered stays bounded."""
    from pmda_mmv.mmvfile.parse import strings

    def app() -> MmvBuilder:
        b = MmvBuilder(cluster=5)
        b.indoms.append(Indom(4, [Instance(0, "a"), Instance(1, "b")]))
        b.metrics += [Metric(f"m{i}", 300 + i, dimension=0x100000 + i) for i in range(3)]
        b.metrics.append(Metric("many", 400, indom=4))
        b.values += [Value(f"m{i}", None, i) for i in range(3)]
        b.values += [Value("many", 0, 7), Value("many", 1, 8)]
        return b

    (one, _), (two, _) = load(app(), "one"), load(app(), "two")
    for first, second in zip(one.metrics, two.metrics, strict=True):
        assert first.item is second.item and first.dimension is second.dimension
        assert first.offset is second.offset
        assert first.item > 256 and first.offset > 256
    singular, many = one.metrics[0], one.metrics[3]
    assert isinstance(singular.index, int) and singular.index is two.metrics[0].index
    assert list(singular.slots) == [singular.index] and singular.value_count == 1
    assert list(many.slots) == list(many.index) and many.value_count == 2
    snap = one.snapshot()
    assert [one.column(snap, m) for m in one.metrics] == [[0], [1], [2], [7, 8]]
    for n in range(strings.SHARED_MAX + 10):
        strings.shared_number(1000 + n)
    assert 0 < len(strings._NUMBERS) <= strings.SHARED_MAX
