"""pmda_mmv.namespace.indomnumbers: PCP indom serials for the files' indoms, without PCP.  The C
agent's number whenever it is free; a number of one's own, derived from the file name and
serial, when it is not; the number a name had before, kept; a lossless pair wins its C
number over a pair that overflows; none only when every number is taken."""

from __future__ import annotations

import hashlib

import pytest

from pmda_mmv.agent.control import STATES_SERIAL, STATUS_SERIAL
from pmda_mmv.namespace.indomnumbers import (
    AGENT_SERIALS,
    INDOM_MASK,
    PROBES,
    c_indom,
    choose_indom,
    derived_indom,
    packs,
)
from pmda_mmv.namespace.indomserial import indom_serial
from pmda_mmv.namespace.registry import Registry

SECRET = b"sixteen byte key"


class Everything:
    """``used``: every number but the ones given."""

    def __init__(self, *free: int) -> None:
        self.free = set(free)

    def __contains__(self, number: object) -> bool:
        return number not in self.free


def test_c_indom_packs_cluster_and_serial_as_the_c_agent_does() -> None:
    assert c_indom(1, 2) == (1 << 11) | 2
    assert c_indom(0, 7) == 7
    assert c_indom(2047, 2047) == 0x3FFFFF == INDOM_MASK
    # past 2047 the pairs alias: C's numbers collide
    assert c_indom(2048, 5) == c_indom(0, 5)
    assert c_indom(0, 2048) == c_indom(1, 0)


@pytest.mark.parametrize(
    ("cluster", "serial", "lossless"),
    [(0, 0, True), (2047, 2047, True), (2048, 1, False), (1, 2048, False), (4095, 5000, False)],
)
def test_packs_says_which_pairs_keep_their_c_number(
    cluster: int, serial: int, lossless: bool
) -> None:
    assert packs(cluster, serial) is lossless


def test_derived_indom_is_stable_and_within_the_serials() -> None:
    """The same for the same secret (a keyed BLAKE2b of name and serial), another under
    another secret (no other user can predict it), never 0 (the status indom's), at most
    INDOM_MASK."""
    digest = hashlib.blake2b(b"app\x003", digest_size=8, key=SECRET).digest()
    assert derived_indom("app", 3, SECRET) == int.from_bytes(digest, "little") % INDOM_MASK + 1
    assert derived_indom("app", 3, b"another key") != derived_indom("app", 3, SECRET)
    numbers = {derived_indom(f"f{k}", s, SECRET) for k in range(200) for s in (0, 1, 4095)}
    assert all(1 <= n <= INDOM_MASK for n in numbers)
    assert len(numbers) > 590  # spread: 600 pairs, hardly any alike
    assert derived_indom("caf\udce9", 1, SECRET) == derived_indom(
        "caf\udce9", 1, SECRET
    )  # undecodable names


def test_the_c_number_when_free() -> None:
    assert choose_indom("app", 3, 5, None, set(), set(), SECRET) == c_indom(3, 5)


def test_the_number_held_before_wins_over_the_c_number() -> None:
    assert choose_indom("app", 3, 5, 777, set(), set(), SECRET) == 777


def test_a_number_held_before_but_taken_is_not_kept() -> None:
    assert choose_indom("app", 3, 5, 777, {777}, set(), SECRET) == c_indom(3, 5)


def test_a_taken_c_number_gives_the_derived_number() -> None:
    taken = {c_indom(3, 5)}
    assert choose_indom("app", 3, 5, None, taken, set(), SECRET) == derived_indom("app", 5, SECRET)


def test_an_overflowing_pair_yields_the_c_number_a_lossless_pair_wants() -> None:
    """cluster 2051 serial 5 aliases cluster 3 serial 5: the lossless pair keeps it."""
    wanted = {c_indom(3, 5)}
    assert c_indom(2051, 5) == c_indom(3, 5)
    assert choose_indom("big", 2051, 5, None, set(), wanted, SECRET) == derived_indom(
        "big", 5, SECRET
    )
    assert choose_indom("small", 3, 5, None, set(), wanted, SECRET) == c_indom(3, 5)


def test_c_number_zero_is_never_given() -> None:
    """Serial 0 is the agent's own (the status indom): cluster 0 serial 0 gets another."""
    assert choose_indom("app", 0, 0, None, set(), set(), SECRET) == derived_indom("app", 0, SECRET)


def test_the_search_probes_on_from_the_derived_number() -> None:
    start = derived_indom("app", 5, SECRET)
    taken = {c_indom(3, 5), start, start % INDOM_MASK + 1}
    assert choose_indom("app", 3, 5, None, taken, set(), SECRET) == (start + 1) % INDOM_MASK + 1


def test_past_the_probes_any_free_number_is_given() -> None:
    """Another user's files can fill the window a name predicts: any free number then."""
    start = derived_indom("app", 5, SECRET)
    far = (start - 1 + PROBES + 10) % INDOM_MASK + 1
    assert choose_indom("app", 3, 5, None, Everything(far), set(), SECRET) == far


def test_a_wanted_number_is_given_last() -> None:
    start = derived_indom("app", 5, SECRET)
    only = (start - 1 + PROBES + 20) % INDOM_MASK + 1
    assert choose_indom("app", 3, 5, None, Everything(only), {only}, SECRET) == only


def test_none_when_every_number_is_taken() -> None:
    assert choose_indom("app", 3, 5, None, Everything(), set(), SECRET) is None


def test_the_agents_own_serials_are_never_a_files() -> None:
    """Serials 0 (the status indom) and 1 (the states indom, ``mmv.control.files_by_state``)
    are the agent's: not a file's C number (cluster 2048 serial 1 packs to 1), nor the
    number a registry from before remembers for it."""
    assert {STATUS_SERIAL, STATES_SERIAL} == AGENT_SERIALS
    registry = Registry()
    assert c_indom(2048, 1) == 1
    got = indom_serial(registry, {}, ("app", 0), (2048, 1), set())
    assert got is not None and got not in AGENT_SERIALS
    registry.serve(("old", 0), 7, 7, False, {3: 1})  # remembered from before: 1
    got = indom_serial(registry, {}, ("old", 0), (7, 3), set())
    assert got is not None and got not in AGENT_SERIALS
