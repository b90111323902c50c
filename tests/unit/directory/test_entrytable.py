"""pmda_mmv.directory.entrytable, directly: the entry table is the only writer of the
directory's state, and its methods keep that state consistent.  Every name queued, not
ready or starved has a state; a name is not ready exactly while its state is NOT_READY; a
name found and not looked at yet (PENDING, not served) is queued; the queue keeps its order
through a take and a put back, a listing and a requeue; a requeue and a retry due look at a
file again whatever its stat; a resource freed (a file unserved, a cluster or an indom
serial released by the catalogue) is one notification, which the scanner's retry of the
starved files follows."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pmda_mmv.directory.entrytable import EntryTable
from pmda_mmv.directory.filestate import NOT_READY, OK, PENDING, REFUSED, UNSEEN, Changes
from pmda_mmv.directory.loader import Loader
from pmda_mmv.directory.resources import Limits, Resources
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile.errors import Problem
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import single

NAMES = ["a", "b", "c", "d", "e"]


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def table(limits: Limits | None = None, clock: Clock | None = None) -> EntryTable:
    return EntryTable(
        Catalogue(),
        Resources(limits or Limits()),
        not_ready_grace=1.0,
        log=None,
        clock=clock or Clock(),
        pidfd=True,
    )


def queued(entries: EntryTable) -> list[str]:
    """The queue's names in order, read through a take and a put back of all of it."""
    queue = entries.take_queue()
    order = list(queue)
    entries.put_back(queue)
    return order


def problem(name: str, why: str = "refused") -> Problem:
    return Problem(path=f"/d/{name}", field="", message=why)


def check_invariants(entries: EntryTable) -> None:
    states = entries.states
    order = queued(entries)
    assert set(order) <= set(states)
    assert set(entries.not_ready) == {n for n, s in states.items() if s.state == NOT_READY}
    # a starved name is refused, or pending while the search for its writer goes on (a
    # retry of it found the file, not yet its writer: it keeps its turn among the starved)
    assert all(states[n].state in (REFUSED, PENDING) for n in entries.starved)
    assert all(n in order for n in entries.starved if states[n].state == PENDING)
    for name, state in states.items():
        if state.state == PENDING and state.entry is None:
            assert name in order, f"{name} is pending for ever: not queued"
    assert entries.pending == bool(order or entries.not_ready)
    assert entries.queued == len(order)


OPS = st.sampled_from(
    ["enqueue", "requeue", "forget", "not_ready", "refuse", "starve", "await", "due", "drain"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(OPS, st.sampled_from(NAMES), st.integers(0, 3)), max_size=40))
def test_every_sequence_of_operations_keeps_the_invariants(
    steps: list[tuple[str, str, int]],
) -> None:
    """Random sequences of the table's operations (no file opened): the invariants hold
    after each, and the queue is the order a plain list model of it says."""
    clock = Clock()
    entries, model = table(clock=clock), []
    for op, name, k in steps:
        known = name in entries.states
        changes = Changes()
        if op == "enqueue" or (op in ("requeue", "await") and known):
            model += [] if name in model else [name]
        if op == "enqueue":
            entries.enqueue([name])
        elif op == "requeue":
            entries.requeue([name])
        elif op == "forget" and known:
            entries.forget(name)
            model = [n for n in model if n != name]
        elif op == "not_ready" and known:
            entries.set_state(entries.states[name], NOT_READY, problem(name, "empty"), changes)
        elif op == "refuse" and known:
            entries.set_state(entries.states[name], REFUSED, problem(name), changes)
        elif op == "starve" and known:
            entries.refuse_starved(entries.states[name], problem(name, "max_total"), changes)
        elif op == "await" and known:
            entries.await_writer(entries.states[name], changes)
        elif op == "due":
            clock.now += k
            for due in entries.due({name}, clock.now, force=k == 3):
                assert entries.states[due].key == UNSEEN
        elif op == "drain":  # loading the first k queued: each refused
            queue = entries.take_queue()
            for loaded in list(queue)[:k]:
                del queue[loaded]
                entries.set_state(entries.states[loaded], REFUSED, problem(loaded), changes)
            entries.put_back(queue)
            model = model[k:]
        check_invariants(entries)
        assert queued(entries) == model


def test_enqueue_makes_new_names_pending_and_keeps_a_queued_name_in_its_place() -> None:
    entries = table()
    assert entries.enqueue(["b", "a"]).states
    assert entries.enqueue(["a", "c"]).states  # c is new: a state change
    assert not entries.enqueue(["b", "c"]).states  # both known and queued: nothing changes
    assert queued(entries) == ["b", "a", "c"]
    assert [entries.states[n].state for n in "abc"] == [PENDING] * 3


def test_requeue_resets_the_key_and_queues_known_names_only() -> None:
    entries = table()
    entries.enqueue(["a", "b"])
    loaded = entries.take_queue()
    for name in loaded:
        entries.states[name].key = (1, 2, 3, 4)  # the loader's: looked at with this stat
    entries.requeue(["b", "unknown", "a"])
    assert queued(entries) == ["b", "a"]
    assert entries.states["a"].key == UNSEEN and entries.states["b"].key == UNSEEN
    assert "unknown" not in entries.states


def test_take_and_put_back_keep_the_order_and_what_was_queued_meanwhile_goes_after() -> None:
    """The scanner takes the queue, loads the names its budget reaches, and puts the rest
    back: the rest first, in order; a name of the rest queued again meanwhile keeps its
    place; the names queued meanwhile go after."""
    entries = table()
    entries.enqueue(NAMES)
    queue = entries.take_queue()
    assert entries.queued == 0 and list(queue) == NAMES
    entries.enqueue(["new"])  # found while loading
    entries.requeue(["d"])  # d is not reached: its place is kept
    entries.requeue(["a"])  # a was loaded: queued again, after
    del queue["a"], queue["b"]
    entries.put_back(queue)
    assert queued(entries) == ["c", "d", "e", "new", "a"]


def test_a_listing_queues_new_names_first_then_the_queued_then_the_rest() -> None:
    entries = table()
    entries.enqueue(["b", "d"])
    entries.take_queue()
    entries.enqueue(["x"])  # queued, not reached yet
    changes = entries.relist(["a", "b", "c", "d", "x"])
    assert changes.states  # a and c are new
    assert queued(entries) == ["a", "c", "x", "b", "d"]


def test_forget_drops_a_name_from_the_queue_and_the_not_ready_and_starved() -> None:
    entries, changes = table(), Changes()
    entries.enqueue(["a", "b", "c"])
    entries.set_state(entries.states["a"], NOT_READY, problem("a", "empty"), changes)
    entries.refuse_starved(entries.states["b"], problem("b", "max_total"), changes)
    for name in ("a", "b", "c"):
        assert entries.forget(name).states
    assert queued(entries) == [] and not entries.not_ready and not entries.starved
    assert dict(entries.states) == {}


def test_a_name_is_not_ready_until_another_state_and_starved_until_its_next_state() -> None:
    entries, changes = table(), Changes()
    entries.enqueue(["a"])
    state = entries.states["a"]
    entries.set_state(state, NOT_READY, problem("a", "empty"), changes)
    assert set(entries.not_ready) == {"a"} and entries.pending
    entries.refuse_starved(state, problem("a", "max_total"), changes)
    assert not entries.not_ready and set(entries.starved) == {"a"}
    entries.set_state(state, REFUSED, problem("a", "bad magic"), changes)
    assert not entries.starved  # refused for another reason: no free serves it


def test_the_search_for_a_writer_that_goes_on_leaves_the_name_queued_and_pending() -> None:
    entries, changes = table(), Changes()
    entries.enqueue(["a"])
    entries.take_queue()
    state = entries.states["a"]
    entries.set_state(state, REFUSED, problem("a"), changes)
    state.key = (1, 2, 3, 4)
    entries.await_writer(state, changes)
    assert state.state == PENDING and state.key == UNSEEN and state.problems == []
    assert queued(entries) == ["a"] and changes.states


def test_a_not_ready_name_named_by_an_event_is_due_at_once_the_others_as_they_wait() -> None:
    clock, changes = Clock(), Changes()
    entries = table(clock=clock)
    entries.enqueue(["a", "b"])
    for name in ("a", "b"):
        entries.set_state(entries.states[name], NOT_READY, problem(name, "empty"), changes)
        entries.states[name].key = (1, 2, 3, 4)
    assert entries.due(set(), clock.now, force=False) == {"a", "b"}  # the next request
    for name in ("a", "b"):  # still not ready: they wait RETRY_FIRST now
        entries.states[name].key = (1, 2, 3, 4)
        entries.set_state(entries.states[name], NOT_READY, problem(name, "empty"), changes)
    assert entries.due(set(), clock.now, force=False) == set()
    assert entries.due({"b", "unknown"}, clock.now, force=False) == {"b"}
    assert entries.states["b"].key == UNSEEN and entries.states["a"].key == (1, 2, 3, 4)
    assert entries.due(set(), clock.now, force=True) == {"a", "b"}
    assert entries.retries == 3


def loaded_table(directory: Path, limits: Limits | None = None) -> tuple[EntryTable, Loader]:
    entries = table(limits)
    return entries, Loader(str(directory), entries, owners=None, clock=Clock())


def test_a_file_unserved_or_a_cluster_released_is_one_notification(tmp_path: Path) -> None:
    """Unserving a file frees what it took; the catalogue releasing a cluster or an
    indom serial is told to the table too: both set :attr:`freed` until it is seen."""
    single(5).write(tmp_path / "a")
    entries, loader = loaded_table(tmp_path)
    assert not entries.freed
    assert [e.name for e in loader.consider(["a"])[0].added] == ["a"]
    assert not entries.freed  # serving frees nothing
    entries.saw_freed()
    entries.catalogue.remove("x")  # nothing served under that name: nothing freed
    assert not entries.freed
    calls: list[int] = []
    entries.catalogue.freed_listeners.append(lambda: calls.append(1))
    (tmp_path / "a").unlink()
    assert [e.name for e in loader.consider(["a"])[0].removed] == ["a"]
    assert entries.freed and calls == [1]  # cluster 5 is released
    entries.saw_freed()
    assert not entries.freed
    for mf in entries.closing:
        mf.close()


def test_a_starved_file_is_retried_in_the_refresh_that_frees_what_it_lacks(
    tmp_path: Path,
) -> None:
    """Past max_total b is refused, starved; a leaves: the listing that forgets a unserves
    it, and the same request retries b (in name order), which is now served."""
    size = len(single(5).build().data)
    single(5).write(tmp_path / "a")
    single(6).write(tmp_path / "b")
    scanner = Scanner(str(tmp_path), Catalogue(), limits=Limits(max_total=size), budget=None)
    try:
        scanner.refresh()
        assert scanner.states["b"].state == REFUSED and set(scanner.entries.starved) == {"b"}
        assert scanner.refresh().added == []  # nothing freed: not retried
        (tmp_path / "a").unlink()
        scanner.mark_dirty()
        changes = scanner.refresh()
        assert [e.name for e in changes.removed] == ["a"]
        assert [e.name for e in changes.added] == ["b"]
        assert scanner.states["b"].state == OK and not scanner.entries.starved
        assert not scanner.entries.freed  # seen by the retry
    finally:
        for entry in scanner.served():
            entry.mf.close()
        for mf in scanner.entries.closing:
            mf.close()


def test_unserved_files_close_at_least_the_budget_then_until_the_deadline(
    tmp_path: Path,
) -> None:
    names = [f"f{k}" for k in range(5)]
    for k, name in enumerate(names):
        single(k + 1).write(tmp_path / name)
    entries, loader = loaded_table(tmp_path)
    loader.consider(names)
    for name in names:
        os.unlink(tmp_path / name)
        entries.forget(name)
    closing: list[MmvFile] = list(entries.closing)
    assert len(closing) == 5
    entries.close_unserved(deadline=0.0, at_least=2)  # the deadline is past: 2 closed
    assert list(entries.closing) == closing[2:]
    entries.close_unserved(deadline=None, at_least=0)
    assert list(entries.closing) == []
