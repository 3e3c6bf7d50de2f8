"""Uuid and the reserved directory ids of KIP-858 (protocol §1).

Guarantees:
* A `Uuid` is an immutable pair of signed 64-bit integers (msb, lsb); its text form is the 16 bytes
  (msb big-endian, then lsb big-endian) in base64url without padding, always 22 characters.
* `Uuid.parse` accepts exactly the strings that decode to 16 bytes with the base64url alphabet and
  raises `ValueError` naming the problem for anything else.
* Ordering compares msb as a signed integer, then lsb as a signed integer (Kafka's order);
  hashing and comparisons run in C (a tuple subclass), which the hot paths rely on.
* The reserved dir ids UNASSIGNED (0, 0), LOST (0, 1) and MIGRATING (0, 2) are defined here once,
  with their text forms (`UNASSIGNED_DIR_TEXT` …), which every package uses rather than spelling them.
* `random_directory_id` never returns a reserved id, an id in `avoid`, or one whose text starts
  with `-`; it takes its randomness as a parameter.
"""

from __future__ import annotations

import base64
import binascii
import random as _random
from collections.abc import Collection, Sequence
from typing import Final

_MASK64: Final = (1 << 64) - 1
_SIGN64: Final = 1 << 63
RESERVED_LSB_LIMIT: Final = 100


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value & _SIGN64 else value


class Uuid(tuple[int, int]):
    """A 128-bit identifier: the pair (msb, lsb) of signed 64-bit integers.

    A tuple subclass, so hashing, equality and the contract's ordering (signed msb, then signed
    lsb) run in C; it hashes and compares like the plain tuple (msb, lsb).
    """

    __slots__ = ()

    def __new__(cls, msb: int, lsb: int) -> Uuid:
        return tuple.__new__(cls, (_signed64(msb), _signed64(lsb)))

    @property
    def msb(self) -> int:
        return self[0]

    @property
    def lsb(self) -> int:
        return self[1]

    @classmethod
    def from_bytes(cls, data: bytes) -> Uuid:
        if len(data) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(data)}")
        return cls(int.from_bytes(data[:8], "big", signed=True), int.from_bytes(data[8:], "big", signed=True))

    @classmethod
    def parse(cls, text: str) -> Uuid:
        """Parse the 22-character base64url text form (padding tolerated, as Kafka does)."""
        if not isinstance(text, str):
            raise ValueError("a Uuid must be a string")
        cached = _PARSE_CACHE.get(text)
        if cached is not None:
            return cached
        if len(text) > 24:
            raise ValueError(f"'{text[:24]}...' is too long to be a base64url Uuid")
        if len(text) != 22 and not (len(text) == 24 and text.endswith("==")):
            raise ValueError(f"'{text}' is not 22 base64url characters")
        if any(c in "+/" for c in text):
            raise ValueError(f"'{text}' is not base64url (uses '+' or '/')")
        padded = text + "=" * (-len(text) % 4)
        try:
            data = base64.urlsafe_b64decode(padded.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise ValueError(f"'{text}' is not valid base64url") from exc
        if len(data) != 16:
            raise ValueError(f"'{text}' decodes to {len(data)} bytes, not the 16 bytes of a Uuid")
        value = cls.from_bytes(data)
        if str(value) != text.rstrip("="):
            # Non-canonical trailing bits: refuse so that every Uuid has one text form.
            raise ValueError(f"'{text}' is not the canonical text of a Uuid")
        if len(_PARSE_CACHE) < _CACHE_LIMIT:
            _PARSE_CACHE[text] = value
        return value

    def to_bytes(self) -> bytes:
        return (self[0] & _MASK64).to_bytes(8, "big") + (self[1] & _MASK64).to_bytes(8, "big")

    def __str__(self) -> str:
        text = _TEXT_CACHE.get(self)
        if text is None:
            text = base64.urlsafe_b64encode(self.to_bytes()).decode("ascii").rstrip("=")
            if len(_TEXT_CACHE) < _CACHE_LIMIT:
                _TEXT_CACHE[self] = text
        return text

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"Uuid({self})"

    def __reduce__(self) -> tuple[type[Uuid], tuple[int, int]]:
        return (Uuid, (self[0], self[1]))

    def __copy__(self) -> Uuid:
        return self

    def __deepcopy__(self, memo: object) -> Uuid:
        return self

    @property
    def is_reserved(self) -> bool:
        """True for the first 100 ids (msb 0, 0 <= lsb < 100), which include the three named ones."""
        return self[0] == 0 and 0 <= self[1] < RESERVED_LSB_LIMIT


_CACHE_LIMIT: Final = 200_000
_PARSE_CACHE: dict[str, Uuid] = {}
_TEXT_CACHE: dict[Uuid, str] = {}

UNASSIGNED_DIR: Final = Uuid(0, 0)
LOST_DIR: Final = Uuid(0, 1)
MIGRATING_DIR: Final = Uuid(0, 2)
ZERO: Final = UNASSIGNED_DIR
#: The text forms of the reserved dir ids, as the wire, the log and the pipeline's tables carry them.
UNASSIGNED_DIR_TEXT: Final = str(UNASSIGNED_DIR)  # "AAAAAAAAAAAAAAAAAAAAAA"
LOST_DIR_TEXT: Final = str(LOST_DIR)  # "AAAAAAAAAAAAAAAAAAAAAQ"
MIGRATING_DIR_TEXT: Final = str(MIGRATING_DIR)  # "AAAAAAAAAAAAAAAAAAAAAg"


def random_uuid(rng: _random.Random, *, avoid: Collection[Uuid] = ()) -> Uuid:
    """A fresh random id that is not reserved, not in `avoid` and whose text does not start with '-'."""
    while True:
        candidate = Uuid(rng.getrandbits(64), rng.getrandbits(64))
        if candidate.is_reserved or candidate in avoid or str(candidate).startswith("-"):
            continue
        return candidate


random_directory_id = random_uuid


def is_online(directory: Uuid, online_dirs: Collection[Uuid]) -> bool:
    """Protocol §1 `isOnline`: UNASSIGNED and MIGRATING are online, LOST is offline, otherwise
    online iff `directory` is one of the broker's current online dirs."""
    if directory in (UNASSIGNED_DIR, MIGRATING_DIR):
        return True
    if directory == LOST_DIR:
        return False
    return directory in online_dirs


def sorted_ids(ids: Sequence[Uuid] | Collection[Uuid]) -> tuple[Uuid, ...]:
    """The ids in the contract's signed order."""
    return tuple(sorted(ids))
