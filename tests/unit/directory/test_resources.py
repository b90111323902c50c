"""pmda_mmv.directory.resources, directly: what the served files take of the limits, and
why one more file would not fit (hard links, ``max_total``, the descriptor budget).  The
same refusals through real files: tests/unit/directory/test_loader.py and
test_scanner_bounds.py."""

from __future__ import annotations

from pmda_mmv.directory.resources import Limits, Resources


def test_a_hard_link_is_refused_naming_its_holder_and_remembered_once() -> None:
    resources = Resources(Limits())
    inode = (1, 2)
    assert resources.linked("a", "/d/a", inode, {inode: "a"}) is None  # its own inode
    why = str(resources.linked("b", "/d/b", inode, {inode: "a"}))
    assert why == "/d/b: file: same file as a (hard link), file not served"
    assert resources.linked("c", "/d/c", (1, 3), {inode: "a"}) is None
    assert resources.links(inode) == ["b"]
    assert resources.links(inode) == []  # looked at again once, then forgotten


def test_max_total_counts_the_files_this_scan_opened() -> None:
    resources = Resources(Limits(max_size=1000, max_total=100))
    assert resources.over_total("/d/a", 60, None) is None
    resources.opened(60, None)
    why = str(resources.over_total("/d/b", 50, None))
    assert "would hold more than 100 bytes (--max-total)" in why
    assert resources.over_total("/d/big", 1001, None) is None  # max_size refuses it
    resources.scanned()  # nothing the scan opened was served
    assert resources.over_total("/d/b", 50, None) is None


def test_the_descriptor_budget_counts_a_file_and_its_pidfd() -> None:
    resources = Resources(Limits())
    resources.max_files = 5
    assert resources.over_files("/d/a", None, (2, 1)) is None  # 3 + 2 <= 5
    why = str(resources.over_files("/d/a", None, (3, 1)))
    assert why == (
        "/d/a: file: 3 files served, the most the descriptor limit allows (RLIMIT_NOFILE),"
        " file not served"
    )
    resources.opened(10, None)
    assert resources.over_files("/d/b", None, (1, 1)) is not None  # 2 + 2 + 2 > 5


def test_every_refusal_for_a_limit_carries_the_limit_as_data() -> None:
    """``check --json`` shows ``limit`` from the problem: --max-total, the descriptor
    budget and --max-names each name the bound they broke (the message unchanged)."""
    resources = Resources(Limits(max_size=1000, max_total=100))
    resources.max_files = 5
    total = resources.over_total("/d/a", 150, None)
    files = resources.over_files("/d/a", None, (3, 1))
    assert total is not None and total.limit == 100
    assert files is not None and files.limit == 5
    assert str(total) == (
        "/d/a: file size 150: the served files would hold more than 100 bytes (--max-total),"
        " file not served"
    )
    # a problem of the whole file (its size), no phrase in ``field``: ``check`` shows it
    # as the whole file's, as it does the descriptor budget's
    assert (total.field, files.field) == ("", "file")
    assert total.as_dict()["field"] == "file"
    assert total.message.startswith("file size 150: the served files would hold more than")


def test_a_hard_link_gone_is_no_longer_remembered() -> None:
    resources = Resources(Limits())
    inode, other = (1, 2), (1, 3)
    assert resources.linked("b", "/d/b", inode, {inode: "a"}) is not None
    assert resources.linked("c", "/d/c", inode, {inode: "a"}) is not None
    assert resources.linked("c", "/d/c", other, {other: "x"}) is not None  # now x's link
    resources.gone("b")
    resources.gone("nothing")
    assert resources.links(inode) == []  # b gone, c moved on
    assert resources.links(other) == ["c"]
