"""Ratios, targets (docs/performance.md), the printed table and the JSON document of one run."""

from __future__ import annotations

from typing import Any

from benchmarks.agents import LABELS

MB = 1024.0  # kB per MB
RATIOS = (
    ("ours/c", "ours", "c"),
    ("ours/floor", "ours", "floor"),
    ("cand/c", "cand", "c"),
    ("cand/floor", "cand", "floor"),
    ("c/floor", "c", "floor"),
    ("pyfloor/floor", "pyfloor", "floor"),
    ("pyfloor/c", "pyfloor", "c"),
)


def fmt_ms(ms: dict[str, float]) -> str:
    return ", ".join(f"{LABELS.get(a, a)} {v:.3g} ms" for a, v in ms.items())


def ratios(ms: dict[str, float]) -> dict[str, float]:
    """Every figure against the C pmdammv and the C no-work floor of the same run."""
    return {
        name: round(ms[a] / ms[b], 3) for name, a, b in RATIOS if a in ms and b in ms and ms[b] > 0
    }


def document(
    results: dict[str, Any], mode: str, env: dict[str, Any], date: str, secs: float, cmd: str
) -> dict[str, Any]:
    for row in results["fetch"].values():
        row["ratio"] = ratios(row["ms"])
    if results["new_file"]:
        results["new_file"]["ratio"] = ratios(results["new_file"]["ms"])
    for row in results["scan"].values():
        for key in ("add", "add_max", "reload", "startup", "fetch", "fetch_mean", "fetch_idle"):
            row[f"{key}_ratio"] = ratios(row[f"{key}_ms"])
    rss_summary(results["rss"])
    doc = {
        "date": date,
        "command": cmd,
        "mode": mode,
        "seconds": round(secs, 1),
        "environment": env,
        **results,
        "targets": targets(results, "ours"),
    }
    if "cand" in results["fetch"].get("1k", {}).get("ms", {}):
        doc["targets_candidate"] = targets(results, "cand")
    return doc


def rss_summary(rss: dict[str, Any]) -> None:
    """Derived RSS figures (MB) per pmda-mmv agent: the 1M file's increment over the
    1k+10k+100k files, per 100k values (/10), and the totals once it is loaded (indexed,
    one metric fetched) and once all its values were fetched in one pmFetch."""
    for a in ("ours", "cand"):
        have = {k: v[a] for k, v in rss.items() if isinstance(v, dict) and a in v}
        if "with_1M_loaded" in have and "fetch_files" in have:
            delta = have["with_1M_loaded"] - have["fetch_files"]
            rss[f"{a}_per_100k_values_mb"] = round(delta / MB / 10, 2)
            rss[f"{a}_total_1M_loaded_mb"] = round(have["with_1M_loaded"] / MB, 1)
        if "with_1M_fetched" in have:
            rss[f"{a}_total_1M_fetched_mb"] = round(have["with_1M_fetched"] / MB, 1)


def targets(res: dict[str, Any], a: str) -> list[dict[str, Any]]:
    """The fetch and discovery targets (docs/performance.md) for agent ``a``, each with
    the measured value and whether it is met."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, shown: str, met: bool | None) -> None:
        out.append({"target": name, "value": value, "shown": shown, "met": met})

    f100 = res["fetch"].get("100k", {}).get("ratio", {})
    if f"{a}/c" in f100:
        x = 1 / f100[f"{a}/c"]
        add("100k values: >= 40x faster than the C pmdammv", x, f"{x:.1f}x faster", x >= 40)
    if f"{a}/floor" in f100:
        x = f100[f"{a}/floor"]
        add("100k values: <= 2.5x the no-work C floor", x, f"{x:.2f}x the floor", x <= 2.5)
    f1k = res["fetch"].get("1k", {}).get("ratio", {})
    if f"{a}/c" in f1k:
        x = f1k[f"{a}/c"]
        add("1k values: no slower than the C pmdammv", x, f"{x:.2f}x the C time", x <= 1.0)
    nf = res.get("new_file", {})
    if nf and a in nf["requests_max"]:
        n = nf["requests_max"][a]
        add("a new file is visible in the next request", n, f"{n} request(s) at most", n == 1)
    scan = res["scan"].get("1000")
    if scan and a in scan["add_ms"]:
        worst = max(scan["add_ms"][a], scan["reload_ms"][a])
        shown = (
            f"new files {scan['add_ms'][a]:.0f} ms, reload {scan['reload_ms'][a]:.0f} ms "
            f"(startup {scan['startup_ms'][a]:.0f} ms)"
        )
        add("1,000 files rescanned in under a second", worst, shown, worst < 1000)
    per_file = registration_ms_per_file(res["scan"])
    for n in ("100", "1000"):
        row = res["scan"].get(n)
        if row and a in row["add_ms"] and "c" in row["add_ms"]:
            x = row["add_ms"][a] / row["add_ms"]["c"]
            shown = f"{x:.2f}x the C time"
            if per_file is not None:
                floor = per_file * int(n) / row["add_ms"]["c"]
                shown += f" (python3-pcp registering them alone {floor:.2f}x)"
            add(f"{n} new files served no later than C", x, shown, x <= 1.0)
            if per_file:
                x = row["add_ms"][a] / (per_file * int(n))
                shown = f"{x:.2f}x python3-pcp registering them alone"
                add(f"{n} new files served within 1.5x the python3-pcp floor", x, shown, x <= 1.5)
    row = res["scan"].get("1000")
    if row and a in row["startup_ms"] and "c" in row["startup_ms"]:
        x = row["startup_ms"][a] / row["startup_ms"]["c"]
        floor = row["startup_ms"].get("pyfloor")
        shown = f"{x:.2f}x the C time" + (
            f" (python3-pcp floor {floor / row['startup_ms']['c']:.2f}x)" if floor else ""
        )
        add("startup with 1,000 files no slower than C", x, shown, x <= 1.0)
    row = res["scan"].get("10000")
    if row and a in row.get("add_max_ms", {}):
        x = row["add_max_ms"][a]
        add("no request over 1 s with 10,000 files appearing", x, f"longest {x:.0f} ms", x < 1000)
    total = res["rss"].get(f"{a}_total_1M_loaded_mb")
    if total is not None:
        fetched = res["rss"].get(f"{a}_total_1M_fetched_mb")
        shown = f"{total:.1f} MB loaded ({fetched:.1f} MB after one 1M-value pmFetch)"
        add("1M mapped values under 100 MB RSS", total, shown, total < 100)
    return out


def registration_ms_per_file(scan: dict[str, Any]) -> float | None:
    """What python3-pcp alone spends registering one more scan file's metrics and indom:
    the py floor's startup with the most files less its startup with the fewest, per
    file; ``None`` without two such figures, or when it is not positive."""
    starts = {
        int(n): row["startup_ms"]["pyfloor"]
        for n, row in scan.items()
        if "pyfloor" in row.get("startup_ms", {})
    }
    if len(starts) < 2:
        return None
    lo, hi = min(starts), max(starts)
    per_file = float(starts[hi] - starts[lo]) / (hi - lo)
    return per_file if per_file > 0 else None  # within the noise of startup (--quick)


# -- the printed table ----------------------------------------------------------------------


def _cell(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"


class _Table:
    def __init__(self, doc: dict[str, Any]) -> None:
        cand = "targets_candidate" in doc
        self.cols = ["c", "ours", *(["cand"] if cand else []), "floor", "pyfloor"]
        self.rcols = ["ours/c", "ours/floor", *(["cand/c", "cand/floor"] if cand else [])]
        self.rcols.append("c/floor")

    def header(self, first: str) -> str:
        names = [LABELS[a] for a in self.cols] + self.rcols
        return f"{first:<14}" + "".join(f"{n:>11}" for n in names)

    def row(self, label: str, ms: dict[str, float], ratio: dict[str, float]) -> str:
        cells = [_cell(ms.get(a)) for a in self.cols]
        cells += [_cell(ratio.get(k), "x") for k in self.rcols]
        return f"{label:<14}" + "".join(f"{c:>11}" for c in cells)


def table(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    t = _Table(doc)
    src = env["source"]
    lines = [
        f"pmda-mmv benchmarks, {doc['date']} ({doc['mode']}, {doc['seconds']:.0f} s; "
        f"{env['cpus']} CPUs, load {env['load_before'][0]:.1f}, PCP {env['pcp']}, "
        f"Python {env['python']}; pmda-mmv at {src['commit']}"
        f"{' + uncommitted pmda_mmv changes' if src['pmda_mmv_modified'] else ''})",
        "",
        "One pmFetch of all PMIDs of one file (median ms)",
        t.header("values"),
    ]
    lines += [t.row(size, row["ms"], row["ratio"]) for size, row in doc["fetch"].items()]
    nf = doc.get("new_file")
    if nf:
        lines += [
            "",
            "New file: writer done -> its names looked up and values fetched (median ms;"
            " C floor: one lookup+fetch)",
            t.header(""),
            t.row("new file", nf["ms"], nf["ratio"]),
            f"  requests needed (max): {nf['requests_max']}",
        ]
    if doc["scan"]:
        lines += [
            "",
            "N files of 100 values (ms): add = first request after they appear; reload ="
            " pmstore mmv.control.reload 1 + fetch; startup = agent restart to ready;"
            " fetch1 = mean of back-to-back fetches of one of them, fetch1 idle = median"
            " fetch of it after 0.1 s without requests (C floor: lookup+fetch / its own"
            " restart / a 100-value fetch)",
            t.header("files"),
        ]
        for n, row in doc["scan"].items():
            lines.append(t.row(f"{n} add", row["add_ms"], row["add_ratio"]))
            if "add_max_ms" in row:
                lines.append(t.row(f"{n} add max", row["add_max_ms"], row["add_max_ratio"]))
            lines.append(t.row(f"{n} reload", row["reload_ms"], row["reload_ratio"]))
            lines.append(t.row(f"{n} startup", row["startup_ms"], row["startup_ratio"]))
            lines.append(t.row(f"{n} fetch1", row["fetch_mean_ms"], row["fetch_mean_ratio"]))
            lines.append(t.row(f"{n} fetch1 idle", row["fetch_idle_ms"], row["fetch_idle_ratio"]))
    lines += ["", "RSS (VmRSS, MB)", *_rss_lines(doc["rss"])]
    for key, title in (("targets", "pmda-mmv"), ("targets_candidate", "candidate")):
        if key in doc:
            lines += ["", f"Targets, {title}"]
            for tg in doc[key]:
                mark = {True: "met", False: "MISSED", None: "?"}[tg["met"]]
                lines.append(f"  [{mark:>6}] {tg['target']}: {tg['shown']}")
    for key, title in (("profile", "pmda-mmv"), ("profile_candidate", "candidate")):
        lines += _profile_lines(doc.get(key), title)
    return "\n".join(lines)


def _rss_lines(rss: dict[str, Any]) -> list[str]:
    out = []
    for key, label in (
        ("no_files", "no file"),
        ("fetch_files", "1k+10k+100k files"),
        ("with_1M_loaded", "+ 1M file loaded"),
        ("with_1M_fetched", "+ 1M values fetched"),
    ):
        if key in rss:
            cells = ", ".join(f"{LABELS[a]} {kb / MB:.1f}" for a, kb in rss[key].items())
            out.append(f"  {label:<22} {cells}")
    for a in ("ours", "cand"):
        if f"{a}_per_100k_values_mb" in rss:
            out.append(
                f"  {LABELS[a]}: {rss[f'{a}_per_100k_values_mb']:.2f} MB per 100k mapped "
                f"values; 1M file visible {rss['big_file_visible_ms'][a]:.0f} ms after its "
                "writer finished"
            )
    return out


def _profile_lines(prof: dict[str, Any] | None, title: str) -> list[str]:
    if not prof or "categories" not in prof:
        return ["", f"py-spy ({title}): {prof['error']}"] if prof else []
    lines = [
        "",
        f"py-spy, {title} main thread during the 100k fetch loop ({prof['samples']} samples)",
    ]
    lines += [f"  {v:5.1f}%  {c}" for c, v in prof["categories"].items()]
    lines += ["  top lines:"] + [f"  {v:5.1f}%  {f}" for f, v in prof["top_lines"][:10]]
    return lines
