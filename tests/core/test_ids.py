"""Uuid text form, signed ordering, reserved ids, generation and `isOnline` (protocol §1)."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import ids
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR, Uuid

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@pytest.mark.parametrize(
    ("msb", "lsb", "text"),
    [
        (0, 0, "AAAAAAAAAAAAAAAAAAAAAA"),
        (0, 1, "AAAAAAAAAAAAAAAAAAAAAQ"),
        (0, 2, "AAAAAAAAAAAAAAAAAAAAAg"),
        (0, 99, "AAAAAAAAAAAAAAAAAAAAYw"),
        (0, 100, "AAAAAAAAAAAAAAAAAAAAZA"),
        (-1, -1, "_____________________w"),
    ],
)
def test_text_form(msb: int, lsb: int, text: str) -> None:
    value = Uuid(msb, lsb)
    assert str(value) == text
    assert len(text) == 22
    assert Uuid.parse(text) == value


def test_named_reserved_ids() -> None:
    assert (UNASSIGNED_DIR.msb, UNASSIGNED_DIR.lsb) == (0, 0)
    assert (LOST_DIR.msb, LOST_DIR.lsb) == (0, 1)
    assert (MIGRATING_DIR.msb, MIGRATING_DIR.lsb) == (0, 2)
    assert str(UNASSIGNED_DIR) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert str(LOST_DIR) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert str(MIGRATING_DIR) == "AAAAAAAAAAAAAAAAAAAAAg"


def test_bits_are_held_as_signed_64_bit_halves() -> None:
    value = Uuid(1 << 63, (1 << 64) - 1)
    assert (value.msb, value.lsb) == (-(2**63), -1)
    assert value == Uuid(-(2**63), -1)
    assert hash(value) == hash(Uuid(-(2**63), -1))
    assert value.to_bytes() == b"\x80" + b"\x00" * 7 + b"\xff" * 8
    assert Uuid.from_bytes(value.to_bytes()) == value


def test_uuid_is_immutable() -> None:
    value = Uuid(1, 2)
    for name in ("msb", "lsb"):
        with pytest.raises(AttributeError):
            setattr(value, name, 3)
    assert value == Uuid(1, 2)


@given(INT64, INT64)
def test_text_round_trip(msb: int, lsb: int) -> None:
    value = Uuid(msb, lsb)
    text = str(value)
    assert len(text) == 22
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert Uuid.parse(text) == value
    assert base64.urlsafe_b64decode(text + "==") == value.to_bytes()


# -- ordering --------------------------------------------------------------------------------


def test_ordering_is_signed_msb_then_signed_lsb() -> None:
    top_bit = Uuid(1 << 63, 0)  # msb negative as a signed integer
    assert top_bit < Uuid(0, 5)
    assert Uuid(-1, 0) < Uuid(0, 0) < Uuid(0, 1) < Uuid(1, -5)
    assert Uuid(0, -1) < Uuid(0, 0)  # lsb signed too
    assert Uuid(0, 1 << 63) < Uuid(0, -1) < Uuid(0, 0)
    assert sorted([Uuid(0, 5), Uuid(5, -1), top_bit, Uuid(0, -3), Uuid(-1, 7)]) == [
        top_bit,
        Uuid(-1, 7),
        Uuid(0, -3),
        Uuid(0, 5),
        Uuid(5, -1),
    ]
    # Not the order of the text form: the text of a negative msb starts with a late letter.
    assert str(top_bit) > str(Uuid(0, 5))


@given(INT64, INT64, INT64, INT64)
def test_ordering_matches_signed_pairs(a: int, b: int, c: int, e: int) -> None:
    x, y = Uuid(a, b), Uuid(c, e)
    assert (x < y) == ((a, b) < (c, e))
    assert (x == y) == ((a, b) == (c, e))
    assert ids.sorted_ids([y, x]) == tuple(sorted([x, y], key=lambda u: (u.msb, u.lsb)))


# -- reserved ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("lsb", range(100))
def test_first_hundred_ids_are_reserved(lsb: int) -> None:
    assert Uuid(0, lsb).is_reserved


@pytest.mark.parametrize(("msb", "lsb"), [(0, 100), (0, 101), (1, 0), (-1, 5), (-(2**63), 0), (1, 99)])
def test_other_ids_are_not_reserved(msb: int, lsb: int) -> None:
    assert not Uuid(msb, lsb).is_reserved


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "AAAA",
        "AAAAAAAAAAAAAAAAAAAAA",  # 21 characters
        "AAAAAAAAAAAAAAAAAAAAAAA",  # 23 characters: 17 bytes
        "AAAAAAAAAAAAAAAAAAAAAAAA",  # 24 characters: 18 bytes
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # more than 24 characters
        "AAAAAAAAAAAAAAAAAAAAA+",  # standard base64 alphabet
        "AAAAAAAAAAAAAAAAAAAAA/",
        "+AAAAAAAAAAAAAAAAAAAAA",
        "AAAAAAAAAAAAAAAAAAAA*A",
        "AAAAAAAAAAAAAAAAAAAA.A",
        "AAAAAAAAAAAAAAAAAAAA A",
        " AAAAAAAAAAAAAAAAAAAAAA",
        "AAAAAAAAAAAAAAAAAAAAAA\n",
        "AAAAAAAAAAAAAAAAAAAA\u00e9A",
        "AAAAAAAAAAAAAAAAAAAAAB",  # non-canonical: trailing bits beyond the 128
        "AAAAAAAAAAAAAAAAAAAAAR",
        "AAAAAAAAAAAAAAAAAAAAYx",
        "AAAAAAAAAA==AAAAAAAAAA",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        Uuid.parse(text)


def test_parse_rejects_long_input_naming_its_prefix() -> None:
    text = "A" * 30
    with pytest.raises(ValueError, match="too long"):
        Uuid.parse(text)


def test_parse_rejects_standard_alphabet_even_where_it_would_decode() -> None:
    # '-' and '+' decode to the same 6 bits in the two alphabets: only the url-safe one is accepted.
    value = Uuid(-1, -1)
    standard = base64.b64encode(value.to_bytes()).decode().rstrip("=")
    assert "/" in standard
    with pytest.raises(ValueError, match="base64url"):
        Uuid.parse(standard)
    assert Uuid.parse(standard.replace("/", "_").replace("+", "-")) == value


def test_parse_accepts_padded_form() -> None:
    assert Uuid.parse("AAAAAAAAAAAAAAAAAAAAAQ==") == LOST_DIR


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(ValueError):
        Uuid.parse(12)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Uuid.from_bytes(b"\x00" * 15)


# -- generation ------------------------------------------------------------------------------


class ScriptedRandom(random.Random):
    """A `random.Random` whose `getrandbits(64)` returns scripted (msb, lsb) halves in turn."""

    def __init__(self, pairs: list[tuple[int, int]]) -> None:
        super().__init__(0)
        self.bits = [half & ((1 << 64) - 1) for pair in pairs for half in pair]
        self.draws = 0

    def getrandbits(self, k: int) -> int:
        assert k == 64
        self.draws += 1
        return self.bits.pop(0)


def _leading_dash_msb() -> int:
    # '-' is 62 = 0b111110 in the url-safe alphabet: the text starts with '-' iff the top 6 bits are that.
    return (0b111110 << 58) | 12345


def test_random_uuid_rerolls_reserved_avoided_and_leading_dash() -> None:
    dash = Uuid(_leading_dash_msb(), 1)
    assert str(dash).startswith("-")
    avoided = Uuid(7, 7)
    wanted = Uuid(8, 8)
    rng = ScriptedRandom(
        [
            (0, 0),  # UNASSIGNED
            (0, 1),  # LOST
            (0, 99),  # last reserved
            (dash.msb, dash.lsb),
            (avoided.msb, avoided.lsb),
            (wanted.msb, wanted.lsb),
        ]
    )
    assert ids.random_uuid(rng, avoid={avoided}) == wanted
    assert rng.draws == 12
    assert rng.bits == []


def test_random_uuid_accepts_first_good_candidate() -> None:
    rng = ScriptedRandom([(0, 100), (9, 9)])
    assert ids.random_uuid(rng) == Uuid(0, 100)
    assert rng.bits == [9, 9]


def test_random_directory_id_is_random_uuid() -> None:
    assert ids.random_directory_id is ids.random_uuid


def test_random_uuid_with_seeded_random_is_deterministic_and_valid() -> None:
    first = [ids.random_uuid(random.Random(42)) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    rng = random.Random(7)
    seen: set[Uuid] = set()
    for _ in range(2000):
        value = ids.random_uuid(rng, avoid=seen)
        assert not value.is_reserved
        assert value not in seen
        assert not str(value).startswith("-")
        seen.add(value)


# -- isOnline --------------------------------------------------------------------------------

REAL_A = Uuid(0x1234, 0x5678)
REAL_B = Uuid(-0x1234, 0x5678)


@pytest.mark.parametrize(
    ("directory", "online_dirs", "expected"),
    [
        (UNASSIGNED_DIR, [], True),
        (UNASSIGNED_DIR, [REAL_A], True),
        (MIGRATING_DIR, [], True),
        (MIGRATING_DIR, [REAL_A], True),
        (LOST_DIR, [], False),
        (LOST_DIR, [REAL_A, LOST_DIR], False),
        (REAL_A, [REAL_A], True),
        (REAL_A, [REAL_B, REAL_A], True),
        (REAL_A, [REAL_B], False),
        (REAL_A, [], False),  # every registered dir offline: the replica is offline (not Kafka's quirk)
        (Uuid(0, 50), [Uuid(0, 50)], True),  # other reserved ids are plain ids for isOnline
        (Uuid(0, 50), [], False),
    ],
)
def test_is_online(directory: Uuid, online_dirs: list[Uuid], expected: bool) -> None:
    assert ids.is_online(directory, online_dirs) is expected
    assert ids.is_online(directory, tuple(online_dirs)) is expected
    assert ids.is_online(directory, frozenset(online_dirs)) is expected
