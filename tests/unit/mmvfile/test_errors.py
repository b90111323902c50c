"""Problems as data (pmda_mmv/mmvfile/errors.py): a problem's text and JSON forms, the bound
on how many are listed, with the count of the others kept as data, and one field order: a
problem and an error (which carries one) are built from the same keywords, by keyword only."""

from __future__ import annotations

from typing import Any

import pytest

from pmda_mmv.mmvfile import limits
from pmda_mmv.mmvfile.errors import (
    Changed,
    Corrupt,
    MmvError,
    NotReady,
    Problem,
    Refused,
    bounded,
    problem_count,
    unlisted,
)

MAX = limits.MAX_PROBLEMS


def problems(n: int) -> list[Problem]:
    return [
        Problem(path="f", field=f"metrics[{i}].name", message="bad", offset=40 + i, limit=64)
        for i in range(n)
    ]


def test_a_problem_renders_its_field_offset_and_limit() -> None:
    p = Corrupt(path="/d/f", field="metrics[0].name", offset=40, message="bad", limit=64).problem
    assert str(p) == "/d/f: metrics[0].name at offset 40: bad"
    assert p.as_dict() == {"field": "metrics[0].name", "offset": 40, "message": "bad", "limit": 64}
    assert p.kind == "corrupt" and p.count == 1
    assert Problem(path="/d/f", message="gone").as_dict() == {
        "field": "file",
        "offset": -1,
        "message": "gone",
    }


def test_up_to_the_bound_every_problem_is_listed() -> None:
    assert bounded(problems(MAX), "f") == problems(MAX)


def test_past_the_bound_one_summary_counts_the_others() -> None:
    out = bounded(problems(MAX + 5), "f")
    assert out[:MAX] == problems(MAX)
    assert out[-1].count == 5 and out[-1].as_dict()["count"] == 5
    assert out[-1].message == f"5 more problems not listed (the first {MAX} are)"
    assert problem_count(out) == MAX + 5


def test_a_summary_already_made_is_counted_not_listed() -> None:
    # the reader bounds its own problems: bounding them again with the catalogue's keeps
    # the count of those the reader left out (a summary is not one problem)
    reader = [*problems(MAX), unlisted("f", 8).problem]
    catalogue = [
        Problem(path="f", field="cluster", message="asked for cluster 7, served as cluster 8")
    ]
    out = bounded(reader + catalogue, "f")
    assert len(out) == MAX + 1 and out[-1].count == 9
    assert problem_count(out) == problem_count(reader + catalogue) == MAX + 9


KINDS = (MmvError, NotReady, Refused, Corrupt, Changed)


def test_a_problem_is_built_by_keyword_only() -> None:
    positional: Any = Problem  # a positional call, refused when it runs
    with pytest.raises(TypeError):
        positional("/d/f", "header.g1", "generation 0")
    p = Problem(path="/d/f", message="gone")
    assert (p.field, p.offset, p.limit, p.kind, p.count) == ("", -1, None, "error", 1)


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_carries_one_problem_built_from_the_same_keywords(kind: type[MmvError]) -> None:
    fields = {"path": "/d/f", "field": "toc", "message": "too costly", "offset": 16, "limit": 9}
    error = kind(**fields)
    assert error.problem == Problem(**fields, kind=kind.kind)
    assert (error.path, error.field, error.offset, error.message, error.limit) == (
        "/d/f",
        "toc",
        16,
        "too costly",
        9,
    )
    assert str(error) == str(error.problem) == "/d/f: toc at offset 16: too costly"
    assert error.as_dict() == error.problem.as_dict()
    positional: Any = kind
    with pytest.raises(TypeError):
        positional("/d/f", "toc", 16, "too costly")
