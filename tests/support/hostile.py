"""Hostile MMV populations, built with the byte builder tests/support/mmvbuild.py.

Each builder is general in its size: the tests and benchmarks/hostile.py use other sizes
and other constructions of the same kinds than the issue's.  Every function writes into
``directory`` and returns the paths it wrote.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

from pmda_mmv.mmvfile import layout, limits
from tests.support.mmvbuild import Indom, Instance, Label, Metric, MmvBuilder, Value

Population = Callable[[Path], list[Path]]

ESCAPES = "\x1b]0;owned\x07\x1b[2J\n\x9b31m\u202eevil\u2066\x7f"
"""Terminal escapes a name or text may hold: OSC title, clear screen, newline, C1 CSI,
bidirectional overrides and isolates, DEL."""


def _one(cluster: int) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster)
    b.metrics.append(Metric("v", 1, layout.TYPE_U64))
    b.values.append(Value("v", None, 7))
    return b


def many_sections(directory: Path, count: int, *, overlap: bool = False) -> list[Path]:
    """One file whose TOC lists ``count`` more one-entry VALUES sections after its own (in
    a tail of value entries pointing at no metric); with ``overlap`` every other section
    lies on the one before it."""
    b = _one(cluster=201)
    base = _one(cluster=201).build()
    tail_at = len(base.data) + count * layout.TOC_SIZE
    step = layout.VALUE_SIZE // 2 if overlap else layout.VALUE_SIZE
    b.extra_toc = [(layout.TOC_VALUES, 1, tail_at + k * step) for k in range(count)]
    b.tail = bytes(step * count + layout.VALUE_SIZE)
    path = directory / f"sections{count}"
    b.write(path)
    return [path]


def fan_out(directory: Path, indoms: int, instances: int) -> list[Path]:
    """One file: ``indoms`` instance domains whose entries all point at the same
    ``instances`` instance entries (those of the first), and a metric over each."""
    b = MmvBuilder(cluster=202, version=2)
    b.indoms.append(Indom(1, [Instance(i, f"i{i}") for i in range(instances)]))
    b.indoms += [Indom(s) for s in range(2, indoms + 1)]
    b.metrics += [Metric(f"m{s}", s, indom=s) for s in range(1, min(indoms, 1000) + 1)]
    first = b.build().entries["instances"][0]
    for d in b.indoms[1:]:
        d.raw = {"count": instances, "offset": first}
    path = directory / f"fanout{indoms}x{instances}"
    b.write(path)
    return [path]


def orphan_values(directory: Path, count: int, *, instance: bool = False) -> list[Path]:
    """One file of ``count`` value entries pointing at no metric entry, or (``instance``)
    at a metric of an indom but at no instance of it."""
    b = MmvBuilder(cluster=203)
    b.indoms.append(Indom(1, [Instance(0, "only")]))
    b.metrics.append(Metric("m", 1, layout.TYPE_U64, indom=1))
    b.values.append(Value("m", 0, 1))
    bad = {"instance": 8} if instance else {"metric": 8}
    b.values += [Value("m", 0, k, raw=bad) for k in range(count)]
    path = directory / f"orphans{count}{'i' if instance else 'm'}"
    b.write(path)
    return [path]


def empty_files(directory: Path, count: int) -> list[Path]:
    """``count`` empty files (what libpcp_mmv leaves between create and ftruncate)."""
    paths = [directory / f"empty{k}" for k in range(count)]
    for p in paths:
        p.touch()
    return paths


def escapes(directory: Path) -> list[Path]:
    """A file named with terminal escapes (refused: not a name component), and a served
    file whose help text, instance name and labels hold them."""
    b = MmvBuilder(cluster=204, version=3)
    b.indoms.append(Indom(1, [Instance(0, "x" + ESCAPES)], shorthelp=ESCAPES))
    b.metrics.append(Metric("m", 1, indom=1, shorthelp=ESCAPES, longhelp=ESCAPES))
    b.values.append(Value("m", 0, 5))
    text = json.dumps({"t": ESCAPES.replace("\n", "")[:40]}, ensure_ascii=False)
    b.labels.append(Label(layout.LABEL_CLUSTER, 204, text))
    served = directory / "escapes"
    b.write(served)
    named = directory / f"name{ESCAPES}"
    _one(cluster=205).write(named)
    return [served, named]


def label_flood(
    directory: Path, labels: int, *, nested: bool = False, cluster: int = 206
) -> list[Path]:
    """A file whose cluster labels, each valid, merge into one set libpcp rejects:
    ``labels`` distinct names over as many LABELS sections of at most 255 as needed, or
    (``nested``) maps of 20 names each merging into one map of ``labels`` names."""
    b = _one(cluster)
    b.version = 3
    entries = []
    for k in range(labels if not nested else -(-labels // 20)):
        if nested:
            names = {f"n{j}": j for j in range(k * 20, min(labels, k * 20 + 20))}
            payload = json.dumps({"m": names}, separators=(",", ":"))
        else:
            payload = json.dumps({f"l{k}": k})
        entries.append(Label(layout.LABEL_CLUSTER, cluster, payload))
    _labels_in_sections(b, entries)
    path = directory / f"labels{labels}{'n' if nested else ''}"
    b.write(path)
    return [path]


def empty_maps(directory: Path, maps: int, plain: int, *, cluster: int = 209) -> list[Path]:
    """A file whose item labels are ``maps`` empty maps (``{"e0":{}}``) and ``plain``
    plain labels, each valid: libpcp counts an empty map as a label."""
    b = _one(cluster)
    b.version = 3
    payloads = [json.dumps({f"e{k}": {}}) for k in range(maps)]
    payloads += [json.dumps({f"l{k}": k}) for k in range(plain)]
    _labels_in_sections(b, [Label(layout.LABEL_ITEM, 1, p) for p in payloads])
    path = directory / f"emptymaps{maps}x{plain}"
    b.write(path)
    return [path]


def instance_labels(directory: Path, instances: int, labels: int) -> list[Path]:
    """A valid file: one indom of ``instances`` instances and a metric over it, and
    ``labels`` instance labels (one each for the first instances), over as many LABELS
    sections as needed."""
    b = MmvBuilder(cluster=208, version=3)
    b.indoms.append(Indom(1, [Instance(i, f"i{i}") for i in range(instances)]))
    b.metrics.append(Metric("m", 1, indom=1))
    payloads = (json.dumps({"row": k}) for k in range(labels))
    _labels_in_sections(b, [Label(layout.LABEL_INSTANCES, 1, p, k) for k, p in enumerate(payloads)])
    path = directory / f"instlabels{instances}x{labels}"
    b.write(path)
    return [path]


def _labels_in_sections(b: MmvBuilder, labels: list[Label]) -> None:
    """Give ``b`` these labels: the first MAX_LABELS in its own LABELS section, the others in
    more sections of at most MAX_LABELS, listed in the TOC and packed in the tail."""
    b.labels = labels[: limits.MAX_LABELS]
    rest = labels[limits.MAX_LABELS :]
    if not rest:
        return
    at = len(b.build().data) + -(-len(rest) // limits.MAX_LABELS) * layout.TOC_SIZE
    tail = bytearray()
    for k in range(0, len(rest), limits.MAX_LABELS):
        chunk = rest[k : k + limits.MAX_LABELS]
        b.extra_toc.append((layout.TOC_LABELS, len(chunk), at + len(tail)))
        for lab in chunk:
            payload = str(lab.payload).encode()
            tail += layout.LABEL.pack(lab.flags, lab.identity, lab.internal, payload)
    b.tail = bytes(tail)


def many_files(directory: Path, count: int, *, per_cluster: int = 200) -> list[Path]:
    """``count`` small valid files (5 U64 metrics over an indom of 4 instances), each
    ``per_cluster`` of them sharing a header cluster at distinct items, so that every one
    can be served (4,095 clusters would not do for one each)."""
    images: dict[int, bytearray] = {}
    paths = []
    for k in range(count):
        slot = k % per_cluster
        if slot not in images:
            b = MmvBuilder(cluster=1)
            b.indoms.append(Indom(1, [Instance(i, f"i{i}") for i in range(4)]))
            b.metrics += [Metric(f"m{j}", slot * 5 + j, layout.TYPE_U64, indom=1) for j in range(5)]
            b.values += [Value(f"m{j}", i, 10 * j + i) for j in range(5) for i in range(4)]
            images[slot] = b.build().data
        data = images[slot]
        struct.pack_into("=i", data, CLUSTER_AT, 2000 + k // per_cluster)
        path = directory / f"many{k:05d}"
        path.write_bytes(data)
        paths.append(path)
    return paths


def flat_names(directory: Path, files: int, names: int) -> list[Path]:
    """``files`` NOPREFIX files of ``names`` singular metrics each, every name directly
    below the prefix (one flat namespace node)."""
    return _named(directory, "flat", 300, files, names, lambda f, j: f"flat{f}_{j}", 1)


def prefixed_names(directory: Path, files: int, names: int) -> list[Path]:
    """``files`` files ``f000``... of ``names`` singular metrics each, under the file's
    name (``mmv.f000.m0``...)."""
    return _named(directory, "f", 300, files, names, lambda f, j: f"m{j}", 2, flags=0)


def _named(
    directory: Path,
    stem: str,
    cluster: int,
    files: int,
    names: int,
    name: Callable[[int, int], str],
    version: int,
    flags: int = layout.FLAG_NOPREFIX,
) -> list[Path]:
    """``files`` files ``stem000``... of clusters from ``cluster``, each of ``names``
    singular U64 metrics named ``name(file, k)``."""
    paths = []
    for f in range(files):
        b = MmvBuilder(cluster=cluster + f, flags=flags, version=version)
        for j in range(names):
            b.metrics.append(Metric(name(f, j), j + 1, layout.TYPE_U64))
            b.values.append(Value(name(f, j), None, j))
        path = directory / f"{stem}{f:03d}"
        b.write(path)
        paths.append(path)
    return paths


def big_files(directory: Path, count: int, metrics: int, instances: int) -> list[Path]:
    """``count`` valid files of ``metrics`` x ``instances`` values each, written by
    libpcp_mmv (80 x 12,000 is about 30 MiB, under limits.MAX_ENTRIES), all at once."""
    from tests.support.writers.libpcp_mmv import Registry, library

    lib = library()
    paths = []
    for k in range(count):
        path = directory / f"big{k}"
        r = Registry(path, 400 + k, lib=lib)
        try:
            r.indom(1, ((i, f"i{i}") for i in range(instances)), "big")
            for j in range(metrics):
                r.metric(f"m{j}", j + 1, layout.TYPE_U64, layout.SEM_COUNTER, 0, 1)
            r.start()
        finally:
            r.free()
        paths.append(path)
    return paths


def shared_cluster(directory: Path, count: int) -> list[Path]:
    """``count`` tiny NOPREFIX files that agree (same owner, cluster, metric and indom
    serial), each adding its one instance to the one shared metric: the processes of one
    application (PCP QA 648), in their thousands."""
    paths = []
    for k in range(count):
        b = MmvBuilder(cluster=210, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(Indom(1, [Instance(k, f"w{k}")]))
        b.metrics.append(Metric("shared.v", 1, layout.TYPE_U64, indom=1))
        b.values.append(Value("shared.v", k, k))
        path = directory / f"worker{k:05d}"
        b.write(path)
        paths.append(path)
    return paths


def deep_names(directory: Path, files: int, metrics: int, depth: int) -> list[Path]:
    """``files`` files of ``metrics`` metrics each, every name ``depth`` components long
    (one-letter components: a v2 name holds 255 bytes)."""
    stem = ".".join(["d"] * (depth - 1))
    return _named(directory, "deep", 220, files, metrics, lambda f, j: f"{stem}.m{j}", 2, 0)


def hard_links(directory: Path, links: int, metrics: int, instances: int) -> list[Path]:
    """One valid file of ``metrics`` x ``instances`` values written by libpcp_mmv (80 x
    12,000 is about 30 MiB) and ``links`` more hard links to it."""
    (first,) = big_files(directory, 1, metrics, instances)
    paths = [first]
    for k in range(links):
        paths.append(directory / f"link{k:04d}")
        os.link(first, paths[-1])
    return paths


def past_limits(directory: Path) -> list[Path]:
    """Valid files written by libpcp_mmv just past the per-file entry limits
    (limits.MAX_ENTRIES), refused from their TOC: 21 metrics x 50,000 instances (values)
    and one metric over 50,001 instances (instances)."""
    paths = []
    for name, metrics, instances in (("values", 21, 50_000), ("instances", 1, 50_001)):
        (path,) = big_files(directory, 1, metrics, instances)
        paths.append(path.rename(directory / f"past-{name}"))
    return paths


def bad_magic(directory: Path, count: int) -> list[Path]:
    """``count`` small files whose first bytes are not an MMV magic."""
    data = b"NOTMMV\0\0" + bytes(layout.HEADER_SIZE)
    paths = [directory / f"junk{k:05d}" for k in range(count)]
    for p in paths:
        p.write_bytes(data)
    return paths


CLUSTER_AT: Final = 36
"""Offset of the header's cluster field (layout.HEADER: magic, version, g1, g2, tocs, flags,
process, cluster)."""

ATTACKS: dict[str, Population] = {
    "40,000 one-entry VALUES sections (past the TOC cap)": lambda d: many_sections(d, 40_000),
    "1,000 sections, each on the one before": lambda d: many_sections(d, 1_000, overlap=True),
    "250 indoms sharing 4,000 instance entries": lambda d: fan_out(d, 250, 4_000),
    "150,000 values at no metric": lambda d: orphan_values(d, 150_000),
    "80,000 values at no instance of their indom": lambda d: orphan_values(
        d, 80_000, instance=True
    ),
    "3,000 empty files": lambda d: empty_files(d, 3_000),
    "700 cluster labels over three LABELS sections": lambda d: label_flood(d, 700),
    "15 map labels merging into a map of 300 names": lambda d: label_flood(d, 300, nested=True),
    "terminal escapes in a file name, help, instance name, label": escapes,
    "40,000 instances with 8,000 instance labels (valid)": lambda d: instance_labels(
        d, 40_000, 8_000
    ),
    "6,000 small valid files at once": lambda d: many_files(d, 6_000),
    "60 NOPREFIX files of 800 names directly below mmv": lambda d: flat_names(d, 60, 800),
    "six valid 30 MiB files at once": lambda d: big_files(d, 6, 80, 12_000),
    "a valid file just under every per-file entry limit": lambda d: big_files(d, 1, 20, 50_000),
    "files past the per-file entry limits": past_limits,
    "6,000 tiny NOPREFIX files sharing one cluster and metric": lambda d: shared_cluster(d, 6_000),
    "150 files of 200 names 100 components deep": lambda d: deep_names(d, 150, 200, 100),
    "a valid 30 MiB file and 8 hard links to it": lambda d: hard_links(d, 8, 80, 12_000),
    "20,000 files of a bad magic": lambda d: bad_magic(d, 20_000),
}
"""Each attack kind, in other sizes and constructions than its first form: what
tests/system/test_budget.py puts beside a good file, and benchmarks/hostile.py times."""


def every_limit(
    directory: Path,
    name: str = "limits",
    counts: tuple[int, int, int, int, int] = (10_000, 50_000, 4096, 25, 16_384),
    mtype: int = layout.TYPE_STRING,
) -> list[Path]:
    """One valid version 3 file at every per-file entry limit at once (limits.MAX_ENTRIES):
    10,000 indoms and 50,000 instances (one indom of 40,001, the others of one each), 4,096
    STRING metrics (items 1 to 1,023 four times over: three quarters of them spill), 25 of
    them over the big indom, the others over one small indom each (the indoms past them
    used by no metric), 1,004,096 values all pointing at one 255-byte string, and 16,384
    instance labels: about 52 MB.  Packed with ``struct`` directly (the
    byte builder's objects would take minutes at this size).  ``counts`` (indoms,
    instances, metrics, metrics over the big indom, labels) and ``mtype`` (the metrics'
    type) give other shapes of the same construction."""
    indoms, instances, metrics, big, labels = counts
    first = instances - (indoms - 1)  # instances of indom 1
    sizes = [first] + [1] * (indoms - 1)
    nvalues = big * first + (metrics - big)
    nlabel_tocs = -(-labels // limits.MAX_LABELS)
    strings = metrics + instances + 1  # names, instance names, the one value string
    tocs = 5 + nlabel_tocs
    at = layout.HEADER_SIZE + tocs * layout.TOC_SIZE
    sections: list[tuple[int, int, int]] = []
    for kind, count, size in (
        (layout.TOC_INDOMS, indoms, layout.INDOM.size),
        (layout.TOC_INSTANCES, instances, layout.INSTANCE_V2.size),
        (layout.TOC_METRICS, metrics, layout.METRIC_V2.size),
        (layout.TOC_VALUES, nvalues, layout.VALUE_SIZE),
        (layout.TOC_STRINGS, strings, layout.STRING_SIZE),
    ):
        sections.append((kind, count, at))
        at += count * size
    for k in range(nlabel_tocs):
        count = min(limits.MAX_LABELS, labels - k * limits.MAX_LABELS)
        sections.append((layout.TOC_LABELS, count, at))
        at += count * layout.LABEL.size
    data = bytearray(at)
    layout.HEADER.pack_into(data, 0, layout.MAGIC, 3, 1, 1, tocs, 0, 0, 230)
    for k, toc in enumerate(sections):
        layout.TOC.pack_into(data, layout.HEADER_SIZE + k * layout.TOC_SIZE, *toc)
    d_at, i_at, m_at, v_at, s_at = (s[2] for s in sections[:5])
    string = iter(range(s_at, s_at + strings * layout.STRING_SIZE, layout.STRING_SIZE))
    instance_at: list[list[int]] = []
    k = 0
    for d, size in enumerate(sizes):
        layout.INDOM.pack_into(data, d_at + d * 32, d + 1, size, i_at + k * 24, 0, 0)
        ats = []
        for j in range(size):
            here, text = i_at + k * 24, next(string)
            layout.INSTANCE_V2.pack_into(data, here, d_at + d * 32, j, text)
            data[text : text + 8] = f"i{k}".encode().ljust(8, b"\0")
            ats.append(here)
            k += 1
        instance_at.append(ats)
    one = next(string)
    data[one : one + 255] = b"s" * 255
    values = bytearray()
    for j in range(metrics):
        here, text, indom = m_at + j * 48, next(string), 0 if j < big else j - big + 1
        data[text : text + 8] = f"m{j}".encode().ljust(8, b"\0")
        item = j % limits.MAX_ITEM + 1
        layout.METRIC_V2.pack_into(data, here, text, item, mtype, 3, 0, indom + 1, 0, 0)
        values += b"".join(layout.VALUE.pack(b"", one, here, i) for i in instance_at[indom])
    data[v_at : v_at + len(values)] = values
    for k in range(labels):
        toc_at = sections[5 + k // limits.MAX_LABELS][2]
        payload = json.dumps({"row": k}).encode()
        at = toc_at + (k % limits.MAX_LABELS) * layout.LABEL.size
        layout.LABEL.pack_into(data, at, layout.LABEL_INSTANCES, 1, k, payload)
    path = directory / name
    path.write_bytes(data)
    return [path]


def empty_indoms(directory: Path, files: int, indoms: int) -> list[Path]:
    """``files`` valid files of ``indoms`` instance domains each, with no instances and no
    metric over them (and one singular metric, so that the file is served): 200 x 2,047 is
    13 MB."""
    paths = []
    for f in range(files):
        b = MmvBuilder(cluster=400 + f, version=2)
        b.indoms += [Indom(s) for s in range(1, indoms + 1)]
        b.metrics.append(Metric("v", 1, layout.TYPE_U64))
        b.values.append(Value("v", None, f))
        paths.append(directory / f"empty{f:03d}")
        b.write(paths[-1])
    return paths
