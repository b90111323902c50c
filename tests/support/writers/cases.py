"""The cases of the real-writer corpus: each one directory of MMV files written by one writer.

A case's :attr:`Case.write` runs in a child process of its own (``python -m
tests.support.writers.cases CASE MMVDIR ...``, started by :mod:`tests.support.writers.corpus`) with
``PCP_TMP_DIR`` at the case directory, and the child exits before anything reads the files:
a file with MMV_FLAG_PROCESS names an exited writer unless the case sets
:attr:`Case.process`, which is written into the header afterwards (1, init, is always alive;
2147483647 is never a PID).

Writers (:attr:`Case.writer`):

* ``capi``: libpcp_mmv's registry API (:class:`tests.support.writers.libpcp_mmv.Registry`);
* ``capi1``, ``capi2``: libpcp_mmv's legacy ``mmv_stats_init`` and ``mmv_stats2_init``;
* ``pcp.mmv``: python3-pcp's ``MemoryMappedValues``, called as an application calls it (so
  the file is what the installed python3-pcp writes: 6.x drops the semantics and copies the
  one-line help into the long help, 7.x does not);
* ``perl``: Perl's ``PCP::MMV`` (libpcp-mmv-perl), ``tests/support/writers/pcp_mmv.pl``;
* ``captured``: the files the pcp-testsuite package ships (two Parfait, one pcp.mmv).
"""

from __future__ import annotations

import argparse
import lzma
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pmda_mmv.mmvfile import layout, limits, pmunits
from tests.support.writers.libpcp_mmv import (
    LABEL_ARRAY,
    LABEL_BOOLEAN,
    LABEL_MAP,
    LABEL_NULL,
    LABEL_NUMBER,
    LABEL_STRING,
    LegacyIndom,
    LegacyMetric,
    Registry,
    legacy_init,
)

TESTSUITE_MMV = Path("/var/lib/pcp/testsuite/mmv")
"""Where the pcp-testsuite package installs its captured MMV files (``NAME.xz``)."""
CAPTURES = {"KeyboardReader": "parfait", "large-parfait": "parfait", "pytest": "pcp.mmv"}
"""The captures, by name, with the writer that made each."""
PERL_WRITER = Path(__file__).with_name("pcp_mmv.pl")

I32, U32, I64, U64 = layout.TYPE_I32, layout.TYPE_U32, layout.TYPE_I64, layout.TYPE_U64
FLOAT, DOUBLE, STRING, ELAPSED = (
    layout.TYPE_FLOAT,
    layout.TYPE_DOUBLE,
    layout.TYPE_STRING,
    layout.TYPE_ELAPSED,
)
COUNTER, INSTANT, DISCRETE = layout.SEM_COUNTER, layout.SEM_INSTANT, layout.SEM_DISCRETE
NOPREFIX, PROCESS, SENTINEL = layout.FLAG_NOPREFIX, layout.FLAG_PROCESS, layout.FLAG_SENTINEL
ALIVE, NEVER = 1, 2147483647  # header process values: init, and a number no PID reaches

UNITS = [  # a pmUnits word per item, cycled
    0,
    pmunits.units_word(dim_count=1),
    pmunits.units_word(dim_space=1),
    pmunits.units_word(dim_space=1, scale_space=2),
    pmunits.units_word(dim_time=1, scale_time=2),
    pmunits.units_word(dim_time=1, scale_time=1),
    pmunits.units_word(dim_space=1, dim_time=-1, scale_space=1, scale_time=3),
    pmunits.units_word(dim_time=-1, dim_count=1, scale_time=4, scale_count=3),
]
COUNT = UNITS[1]
USEC = pmunits.UNITS_ELAPSED

SAMPLES: dict[int, list[float | str]] = {  # per type, values at the edges of its range
    I32: [-2147483648, 2147483647, 0, -1, 1000],
    U32: [4294967295, 0, 1, 2147483648, 99],
    I64: [-9223372036854775808, 9223372036854775807, 0, -(1 << 33), 7],
    U64: [18446744073709551615, 0, 1 << 63, 123456789012, 3],
    FLOAT: [3.4028234663852886e38, -0.5, 1.401298464324817e-45, 0.0, 0.1],
    DOUBLE: [1.7976931348623157e308, -0.25, 5e-324, math.e, 0.0],
    STRING: ["", "plain", "ünïcödé ✓ text", "y" * 254, "with\ttab and\nnewline"],
    ELAPSED: [0, 2500000, 31536000000000],
}
TYPES = list(SAMPLES)
SIX = [(0, "zero"), (1, "one"), (2, "two"), (100, "hundred"), (-5, "minus-five"),
       (2147483647, "int-max")]  # fmt: skip


@dataclass(frozen=True)
class Params:
    """Sizes: ``large``: instances of ``capi-large`` (2 metrics; ``capi-large-v2`` has
    ``2 * large // 5`` instances of 5 metrics), ``many``: files of ``capi-many-files``."""

    large: int = 50000
    many: int = 100


@dataclass(frozen=True)
class Case:
    name: str
    writer: str
    about: str
    write: Callable[[Path, Params], None]
    process: int | None = None


CASES: dict[str, Case] = {}


def case(
    name: str, writer: str, about: str, process: int | None = None
) -> Callable[[Callable[[Path, Params], None]], Callable[[Path, Params], None]]:
    def register(write: Callable[[Path, Params], None]) -> Callable[[Path, Params], None]:
        CASES[name] = Case(name, writer, about, write, process)
        return write

    return register


# -- libpcp_mmv, registry API --------------------------------------------------------------


def every_type(
    path: Path,
    cluster: int,
    flags: int = 0,
    instances: Sequence[tuple[int, str]] = (),
    helped: bool = True,
    shift: int = 0,
    more: Callable[[Registry], None] | None = None,
) -> Registry:
    """One metric of each type, ``single.<type>``, and over an indom of ``instances`` (when
    given) ``multi.<type>``; semantics and units cycle with the item; values from SAMPLES
    starting at index ``shift``.  ``more`` adds metrics before the start."""
    r = Registry(path, cluster, flags)
    if instances:
        r.indom(7, instances, *(("indom seven", "Indom seven,\nin two lines.") if helped else ()))
    metrics: list[tuple[str, int, int | None]] = []
    for mtype in TYPES:
        for serial in (None, 7) if instances else (None,):
            name = f"{'multi' if serial else 'single'}.{layout.TYPE_NAMES[mtype]}"
            item = len(metrics) + 1
            sem = (COUNTER, INSTANT, DISCRETE)[item % 3]
            units = USEC if mtype == ELAPSED else UNITS[item % len(UNITS)]
            texts = (f"{name} one-line", f"{name} long help\nsecond line") if helped else ()
            r.metric(name, item, mtype, sem, units, serial, *texts)
            metrics.append((name, mtype, serial))
    if more:
        more(r)
    r.start()
    for name, mtype, serial in metrics:
        samples = SAMPLES[mtype]
        if serial is None:
            r.set(name, None, samples[shift % len(samples)])
        for k, (_, inst) in enumerate(instances if serial else ()):
            r.set(name, inst, samples[(shift + k) % len(samples)])
    return r


@case("capi-v1-types", "capi", "every type, singular and over 6 instances, help, cluster 123")
def _types(d: Path, p: Params) -> None:
    every_type(d / "types", 123, 0, SIX)


@case("capi-v1-types-nohelp", "capi", "every type, no help text at all")
def _types_nohelp(d: Path, p: Params) -> None:
    every_type(d / "nohelp", 5, 0, SIX, helped=False, shift=2)


@case("capi-v1-cluster0", "capi", "cluster 0 (the agent assigns one), singular metrics")
def _cluster0(d: Path, p: Params) -> None:
    every_type(d / "cluster0", 0, shift=3)


@case("capi-v1-cluster-max", "capi", "cluster 4095, the largest a PMID holds")
def _cluster_max(d: Path, p: Params) -> None:
    every_type(d / "clustermax", limits.MAX_CLUSTER, 0, SIX[:2], shift=4)


@case("capi-v1-noprefix", "capi", "MMV_FLAG_NOPREFIX: names not under the file's name")
def _noprefix(d: Path, p: Params) -> None:
    every_type(d / "noprefix", 77, NOPREFIX, SIX[:3], shift=1)


@case("capi-v1-sentinel", "capi", "MMV_FLAG_SENTINEL: instance a holds each type's sentinel")
def _sentinel(d: Path, p: Params) -> None:
    sentinel: dict[int, float | str] = {I32: -1, U32: 0xFFFFFFFF, I64: -1, U64: (1 << 64) - 1,
                                        FLOAT: math.nan, DOUBLE: math.nan, STRING: "",
                                        ELAPSED: -1}  # fmt: skip
    # (a 32-bit -1 leaves the upper half of the 8-byte value zero: not all bits set)
    r = Registry(d / "sentinel", 9, SENTINEL).indom(1, [(1, "a"), (2, "b")], "a and b")
    for item, mtype in enumerate(TYPES, start=1):
        r.metric(f"s.{layout.TYPE_NAMES[mtype]}", item, mtype, INSTANT, 0, 1)
    r.start()
    for mtype in TYPES:
        r.set(f"s.{layout.TYPE_NAMES[mtype]}", "a", sentinel[mtype])
        r.set(f"s.{layout.TYPE_NAMES[mtype]}", "b", SAMPLES[mtype][1])


@case("capi-v1-empty-indom", "capi", "an indom without instances, and a metric over it")
def _empty_indom(d: Path, p: Params) -> None:
    r = Registry(d / "emptyindom", 11).indom(3, [], "nobody here", "an indom with no instances")
    r.indom(4, [(0, "only")])
    r.metric("on.empty", 1, U32, INSTANT, 0, 3, "over the empty indom")
    r.metric("on.one", 2, U32, INSTANT, 0, 4).metric("single", 3, U32)
    r.start().set("on.one", "only", 5).set("single", None, 6)


@case("capi-v1-name63", "capi", "metric and instance names of 63 bytes, the most v1 holds")
def _name63(d: Path, p: Params) -> None:
    name, inst = "n" * 31 + "." + "m" * 31, "i" * 63
    r = Registry(d / "n63", 1).indom(1, [(1, inst), (2, "short")])
    r.metric(name, 1, U64, COUNTER, COUNT, None, "a 63-byte name")
    r.metric("x." + "c" * 61, 2, U32, INSTANT, 0, 1)
    r.start().set(name, None, 63).set("x." + "c" * 61, inst, 1)


@case("capi-v2-name64", "capi", "64-byte metric and instance names: the library writes v2")
def _name64(d: Path, p: Params) -> None:
    name, inst = "n" * 32 + "." + "m" * 31, "j" * 64
    r = Registry(d / "n64", 2).indom(1, [(1, inst), (2, "short")], "indom one-line")
    r.metric(name, 1, U64, COUNTER, COUNT, None, "a 64-byte name")
    r.metric("x.inst", 2, U32, INSTANT, 0, 1)
    r.start().set(name, None, 64).set("x.inst", inst, 2)


@case("capi-v2-longnames", "capi", "names of up to 255 bytes, every type, help text")
def _longnames(d: Path, p: Params) -> None:
    longest = "long." + "z" * 250

    def more(r: Registry) -> None:
        r.metric(longest, 99, DOUBLE, INSTANT, 0, None, "a 255-byte name")

    insts = [(1, "inst-" + "L" * 250), (2, "i2-" + "k" * 100), (3, "short")]
    every_type(d / "longnames", 31, 0, insts, more=more).set(longest, None, 255.0)


@case("capi-v1-utf8-instances", "capi", "UTF-8 instance names and help text (v1)")
def _utf8(d: Path, p: Params) -> None:
    insts = [(1, "café"), (2, "日本語"), (3, "šđčćž"), (4, "emoji-😀"), (5, "plain")]
    r = Registry(d / "utf8", 12).indom(1, insts, "instänces", "hélp tëxt — UTF-8")
    r.metric("utf8.count", 1, U64, COUNTER, COUNT, 1, "cöunt", "löng hélp")
    r.metric("utf8.label", 2, STRING, DISCRETE, 0, 1).start()
    for k, (_, inst) in enumerate(insts):
        r.set("utf8.count", inst, 11 * k).set("utf8.label", inst, f"välue-{inst}")


@case("capi-v2-utf8-long", "capi", "UTF-8 instance names over 63 bytes; a UTF-8 metric name")
def _utf8_long(d: Path, p: Params) -> None:
    insts = [(1, "é" * 40), (2, "日" * 30), (3, "x")]
    r = Registry(d / "utf8long", 13).indom(1, insts)
    r.metric("utf8.long", 1, I32, INSTANT, 0, 1).metric("utf8.näme", 2, I32).start()
    for k, (_, inst) in enumerate(insts):
        r.set("utf8.long", inst, -k)
    r.set("utf8.näme", None, 8)


LABEL_VALUES = [  # (name, JSON value, type): every mmv_value_type_t
    ("s", '"strïng"', LABEL_STRING),
    ("n", "42", LABEL_NUMBER),
    ("f", "-1.5e3", LABEL_NUMBER),
    ("b", "true", LABEL_BOOLEAN),
    ("bf", "false", LABEL_BOOLEAN),
    ("z", "null", LABEL_NULL),
    ("a", '[1,"two",null]', LABEL_ARRAY),
    ("m", '{"k":"v","n":{"x":1}}', LABEL_MAP),
]


@case("capi-v3-labels", "capi", "labels at every level, of every value type, some optional")
def _labels(d: Path, p: Params) -> None:
    r = Registry(d / "labels", 321).indom(1, [(0, "zero"), (1, "one"), (2, "two")], "labelled")
    r.indom(2, [(5, "five")])
    r.metric("lab.single", 1, U64, COUNTER, COUNT, None, "singular, labelled")
    r.metric("lab.multi", 2, DOUBLE, INSTANT, UNITS[2], 1, "per instance, labelled")
    r.metric("lab.other", 3, STRING, DISCRETE, 0, 2).metric("lab.none", 4, I32)
    for k, (name, value, vtype) in enumerate(LABEL_VALUES):
        odd = bool(k % 2)
        r.registry_label(f"reg_{name}", value, vtype, odd)
        r.indom_label(1, f"dom_{name}", value, vtype, odd)
        r.metric_label(1 + k % 3, f"met_{name}", value, vtype, not odd)
        r.instance_label(1, k % 3, f"ins_{name}", value, vtype, odd)
    r.instance_label(2, 5, "ins_solo", '"five"', LABEL_STRING)
    r.metric_label(1, "dup", '"item-level"', LABEL_STRING)
    r.registry_label("dup", '"cluster-level"', LABEL_STRING)
    r.start().set("lab.single", None, 1).set("lab.other", "five", "5").set("lab.none", None, -4)
    for k, inst in enumerate(("zero", "one", "two")):
        r.set("lab.multi", inst, k / 4)


@case("capi-v3-onelabel", "capi", "one registry label makes an otherwise v1 file v3")
def _onelabel(d: Path, p: Params) -> None:
    r = Registry(d / "onelabel", 14).metric("x", 1, U32)
    r.registry_label("app", '"corpus"', LABEL_STRING).start().set("x", None, 1)


@case("capi-v3-labels-longnames", "capi", "v3: long names, labels, NOPREFIX and SENTINEL")
def _labels_long(d: Path, p: Params) -> None:
    big, inst = "corpus_lablong." + "q" * 100, "I" * 100
    r = Registry(d / "lablong", 15, NOPREFIX | SENTINEL).indom(9, [(1, inst), (2, "two")])
    r.metric(big, 1, I64, INSTANT, 0, 9).metric("corpus_lablong.s", 2, STRING, DISCRETE)
    r.instance_label(9, 1, "which", '"long"', LABEL_STRING)
    r.metric_label(1, "big", "1e308", LABEL_NUMBER)
    r.start().set(big, inst, 100).set("corpus_lablong.s", None, "")  # "": the sentinel


@case("capi-elapsed", "capi", "ELAPSED: a set value, a closed interval, mmv_inc_value")
def _elapsed(d: Path, p: Params) -> None:
    r = Registry(d / "elapsed", 16).indom(1, [(0, "set"), (1, "interval"), (2, "inc")])
    r.metric("timer.multi", 1, ELAPSED, COUNTER, USEC, 1, "elapsed time")
    r.metric("timer.single", 2, ELAPSED, COUNTER, UNITS[4]).start()
    m = r.started
    m.set("timer.multi", "set", 123456789)
    interval = m.interval_start(m.lookup("timer.multi", "interval"))
    time.sleep(0.002)
    m.interval_end(interval)
    for step in (1000, 234):
        m.inc_value(m.lookup("timer.multi", "inc"), step)
    m.set("timer.single", None, 7)


@case("capi-elapsed-running", "capi", "ELAPSED with an interval left open: readers add now")
def _elapsed_running(d: Path, p: Params) -> None:
    r = Registry(d / "running", 17).metric("timer.open", 1, ELAPSED, COUNTER, USEC)
    r.metric("timer.closed", 2, ELAPSED, COUNTER, USEC).start().set("timer.closed", None, 5)
    r.started.interval_start(metric="timer.open")


@case("capi-process-live", "capi", "MMV_FLAG_PROCESS, header process 1 (alive)", ALIVE)
def _process_live(d: Path, p: Params) -> None:
    every_type(d / "proclive", 18, PROCESS, SIX[:2])


@case("capi-process-dead", "capi", "MMV_FLAG_PROCESS, header process 2147483647", NEVER)
def _process_dead(d: Path, p: Params) -> None:
    every_type(d / "procdead", 19, PROCESS, SIX[:2])


@case("capi-process-exited", "capi", "MMV_FLAG_PROCESS|NOPREFIX, the exited writer's PID")
def _process_exited(d: Path, p: Params) -> None:
    every_type(d / "procexited", 20, PROCESS | NOPREFIX, SIX[:2])


@case("capi-noflag-pidlive", "capi", "no MMV_FLAG_PROCESS: the exited writer's PID is ignored")
def _noflag(d: Path, p: Params) -> None:
    every_type(d / "noflag", 21)


@case("capi-units-pad", "capi", "pmUnits with the pad byte set, odd dimensions, NOSUPPORT")
def _units_pad(d: Path, p: Params) -> None:
    odd = pmunits.units_word(-1, -2, 3, 4, 5, -3)
    r = Registry(d / "unitspad", 22).metric("pad.ff", 1, U32, INSTANT, COUNT | 0xFF)
    r.metric("pad.01", 2, U32, INSTANT, UNITS[2] | 0x01).metric("dims.neg", 3, DOUBLE, INSTANT, odd)
    r.metric("sem.zero", 4, U32, layout.SEM_UNSET).metric(
        "type.nosupport", 5, layout.TYPE_NOSUPPORT
    )
    r.start().set("pad.ff", None, 1).set("pad.01", None, 2).set("dims.neg", None, 3.0)
    r.set("sem.zero", None, 4)


@case("capi-name-clash", "capi", "metrics a.b and a.b.c in one file (a leaf and a non-leaf)")
def _name_clash(d: Path, p: Params) -> None:
    r = Registry(d / "clash", 23)
    for item, name in enumerate(("a.b", "a.b.c", "ok"), start=1):
        r.metric(name, item, U32)
    r.start()
    for item, name in enumerate(("a.b", "a.b.c", "ok"), start=1):
        r.set(name, None, item)


@case("capi-minimal", "capi", "one singular metric, no help, no indom")
def _minimal(d: Path, p: Params) -> None:
    Registry(d / "minimal", 1).metric("only", 1, U64, COUNTER).start().set("only", None, 1)


@case("capi-nometrics", "capi", "a registry without metrics")
def _nometrics(d: Path, p: Params) -> None:
    Registry(d / "nometrics", 1).start()


@case("capi-items", "capi", "items 0, 1023 and 1024 (one too many bits); indom serial 2^22-1")
def _items(d: Path, p: Params) -> None:
    r = Registry(d / "items", 24).indom(limits.MAX_SERIAL, [(0, "a")])
    r.metric("item.zero", 0, U32).metric("item.max", limits.MAX_ITEM, U32)
    r.metric("item.big", limits.MAX_ITEM + 1, U32).metric(
        "item.indom", 5, U32, indom=limits.MAX_SERIAL
    )
    r.start().set("item.zero", None, 10).set("item.max", None, 11).set("item.big", None, 12)
    r.set("item.indom", "a", 13)


@case("capi-stats-wrappers", "capi", "values through mmv_stats_inc/add/set/set_string")
def _wrappers(d: Path, p: Params) -> None:
    r = Registry(d / "wrappers", 25).indom(1, [(1, "x"), (2, "y")])
    r.metric("w.count", 1, U64, COUNTER, COUNT, 1).metric("w.float", 2, FLOAT, INSTANT, 0, 1)
    m = r.metric("w.str", 3, STRING, DISCRETE).start().started
    for _ in range(3):
        m.stats_inc("w.count", "x")
    m.stats_add("w.count", "y", 1e6)
    m.stats_add("w.float", "x", 0.25)
    m.stats_set("w.float", "y", -8.5)
    m.stats_set_string("w.str", None, "first")
    m.stats_set_string("w.str", None, "2nd")  # shorter: the rest of the first is cleared


def fill(r: Registry) -> None:
    """Every value of a started file, through its mapping in file order (a lookup per value
    would be quadratic): metric k's values are the k-th run of one metric offset."""
    mapping = r.started
    metric_types = list(r.types.values())
    runs: dict[int, int] = {}
    for n, entry in enumerate(mapping.values()):
        k = runs.setdefault(entry.metric, len(runs))
        mtype = metric_types[k]
        value = (n * 7 + k) & 0xFFFFFFFF if mtype in (U32, U64, I64) else n / 3 + k
        mapping.set_at(entry.desc, mtype, value)


@case("capi-large", "capi", "one indom of Params.large instances x 2 metrics")
def _large(d: Path, p: Params) -> None:
    r = Registry(d / "large", 26).indom(1, [(i, f"inst{i:06d}") for i in range(p.large)], "big")
    r.metric("big.u64", 1, U64, COUNTER, COUNT, 1, "a big counter")
    fill(r.metric("big.double", 2, DOUBLE, INSTANT, 0, 1).start())


@case("capi-large-v2", "capi", "2 * large // 5 long instance names x 5 metrics (v2)")
def _large_v2(d: Path, p: Params) -> None:
    r = Registry(d / "largev2", 27)
    r.indom(1, [(i, f"instance-{'w' * 50}-{i:08d}") for i in range(max(1, 2 * p.large // 5))])
    for j, mtype in enumerate((U32, I64, FLOAT, DOUBLE, U64), start=1):
        r.metric(f"bigv2.m{j}", j, mtype, INSTANT, 0, 1)
    fill(r.start())


@case("capi-many-files", "capi", "Params.many files in one directory: v1/v2/v3, every flag")
def _many(d: Path, p: Params) -> None:
    kinds = [(U64, 0), (STRING, PROCESS), (DOUBLE, SENTINEL)]
    for i in range(p.many):
        mtype, flags = kinds[i % 3]
        r = Registry(d / f"f{i:03d}", i % (limits.MAX_CLUSTER + 1), flags)
        if i % 5 == 0:
            r.indom(1, [(k, f"i{k}") for k in range(i % 7 + 1)])
            r.metric("m.multi", 2, U32, INSTANT, 0, 1)
        name = "m.long." + "x" * (60 + i % 10) if i % 3 == 0 else "m.single"
        r.metric(name, 1, mtype, COUNTER, COUNT, None, f"file {i}" if i % 2 else None)
        if i % 4 == 0:
            r.registry_label("file", str(i), LABEL_NUMBER)
        value: list[float | str] = [i, f"s{i}", i / 8]
        r.start().set(name, None, value[i % 3])


# -- libpcp_mmv, legacy APIs ----------------------------------------------------------------


@case("capi1-legacy-init", "capi1", "mmv_stats_init (64-byte names, v1), PROCESS|NOPREFIX", ALIVE)
def _legacy(d: Path, p: Params) -> None:
    colours = LegacyIndom(1, [(1, "red"), (2, "green"), (3, "blue")], "colours", "three colours")
    metrics = [
        LegacyMetric("legacy.count", 1, U64, COUNTER, COUNT, 1, "per colour"),
        LegacyMetric("legacy.gauge", 2, DOUBLE, INSTANT, 0, None, None, "only the long help"),
        LegacyMetric("legacy.name", 3, STRING, DISCRETE, 0, None, "name", "a name"),
        LegacyMetric("legacy.time", 4, ELAPSED, COUNTER, USEC, 1),
    ]
    m = legacy_init("mmv_stats_init", d / "legacy", 28, PROCESS | NOPREFIX, metrics, [colours])
    for k, (_, colour) in enumerate(colours.instances, start=1):
        m.stats_add("legacy.count", colour, k)
    m.stats_set("legacy.gauge", None, 0.5)
    m.stats_set_string("legacy.name", None, "legacy writer")
    m.inc_value(m.lookup("legacy.time", "green"), 99)


@case("capi2-legacy-init2", "capi2", "mmv_stats2_init with a 108-byte name: the library picks v2")
def _legacy2(d: Path, p: Params) -> None:
    name = "legacy2." + "n" * 100
    insts = LegacyIndom(4, [(1, "first-" + "f" * 80), (2, "second")])
    metrics = [LegacyMetric(name, 1, I32, INSTANT, 0, 4, "s", "l"),
               LegacyMetric("legacy2.single", 2, U64, COUNTER, COUNT)]  # fmt: skip
    m = legacy_init("mmv_stats2_init", d / "legacy2", 29, 0, metrics, [insts])
    m.stats_set(name, "second", -3)
    m.stats_inc("legacy2.single")


# -- python3-pcp's pcp.mmv --------------------------------------------------------------------


def pcp_mmv_file(name: str, flags: int, cluster: int) -> None:
    """A file written as an application writes it with pcp.mmv (``$PCP_TMP_DIR/mmv/name``):
    the constructors' arguments, nothing patched.  ``py.double`` takes the default indom
    argument (0 in python3-pcp 6.x, MMV_INDOM_NULL in 7.x)."""
    from pcp import mmv, pmapi

    greek = [(0, "alpha"), (1, "beta"), (2, "gämma")]
    indom = mmv.mmv_indom(serial=1, shorttext="greek letters", helptext="one per letter")
    indom.set_instances([mmv.mmv_instance(i, n) for i, n in greek])
    units = pmapi.pmUnits(0, 0, 1, 0, 0, 0)
    null = 0xFFFFFFFF
    metrics = [
        mmv.mmv_metric("py.counter", 1, U64, COUNTER, units, null, "py counter", "counts"),
        mmv.mmv_metric("py.multi", 2, I32, INSTANT, units, 1),
        mmv.mmv_metric("py.string", 3, STRING, DISCRETE, units, null),
        mmv.mmv_metric("py.elapsed", 4, ELAPSED, COUNTER, units, 1),
        mmv.mmv_metric("py.double", 5, DOUBLE, INSTANT, units),
    ]
    writer = mmv.MemoryMappedValues(name, flags=flags, cluster=cluster)
    writer.add_indoms([indom])
    writer.add_metrics(metrics)
    writer.start()
    if not writer.started():
        raise RuntimeError(f"pcp.mmv: {name} not started")
    writer.lookup_add("py.counter", "", 41)
    writer.lookup_inc("py.counter", "")
    for k, (_, letter) in enumerate(greek):
        writer.lookup_set("py.multi", letter, -k)
    writer.lookup_set_string("py.string", "", "from pcp.mmv")
    writer.interval_end(writer.lookup_interval_start("py.elapsed", "beta"))
    writer.lookup_set("py.double", "", 1.25)


@case("pymmv-basic", "pcp.mmv", "python3-pcp's MemoryMappedValues, flags 0, cluster 42")
def _pymmv(d: Path, p: Params) -> None:
    pcp_mmv_file("pymmv", 0, 42)


@case("pymmv-process-noprefix", "pcp.mmv", "pcp.mmv with PROCESS|NOPREFIX", ALIVE)
def _pymmv_np(d: Path, p: Params) -> None:
    pcp_mmv_file("pymmv_np", PROCESS | NOPREFIX, 7)


# -- Perl's PCP::MMV ------------------------------------------------------------------------


def perl_file(d: Path, flags: int) -> None:
    done = subprocess.run(["perl", str(PERL_WRITER), str(d / "perl"), str(flags)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{PERL_WRITER.name} (PCP::MMV, libpcp-mmv-perl): {done.stderr}")


@case("perl-basic", "perl", "PCP::MMV's mmv_stats_init (v1), flags 0")
def _perl(d: Path, p: Params) -> None:
    perl_file(d, 0)


@case("perl-process", "perl", "PCP::MMV with MMV_FLAG_PROCESS: the exited perl's PID")
def _perl_process(d: Path, p: Params) -> None:
    perl_file(d, PROCESS)


# -- pcp-testsuite captures -----------------------------------------------------------------


def capture(name: str) -> bytes:
    """The pcp-testsuite capture ``name``, decompressed."""
    path = TESTSUITE_MMV / f"{name}.xz"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the pcp-testsuite package is not installed")
    return lzma.decompress(path.read_bytes())


def _captured(name: str) -> Callable[[Path, Params], None]:
    def write(d: Path, p: Params) -> None:
        (d / name).write_bytes(capture(name))

    return write


for _name, _writer in CAPTURES.items():
    case(f"captured-{_name}", "captured", f"{TESTSUITE_MMV}/{_name}.xz ({_writer})")(
        _captured(_name)
    )


def main(argv: list[str] | None = None) -> int:
    """The child: write one case into MMVDIR and exit."""
    ap = argparse.ArgumentParser(description="Write one corpus case (a writer child).")
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("mmvdir", type=Path)
    ap.add_argument("--large", type=int, default=Params.large)
    ap.add_argument("--many", type=int, default=Params.many)
    a = ap.parse_args(argv)
    os.environ["PCP_TMP_DIR"] = str(a.mmvdir.parent)  # for writers given a bare file name
    CASES[a.case].write(a.mmvdir, Params(a.large, a.many))
    return 0


if __name__ == "__main__":
    sys.exit(main())
