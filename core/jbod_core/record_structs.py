"""The fields of Kafka's coordinator records (the keys and values of `__consumer_offsets` and
`__transaction_state`), as Kafka's generated message classes lay them out: big-endian integers,
and strings, bytes and arrays in the classic form (an int16 or int32 length, -1 for null) or, in
a flexible version, the compact form (an unsigned varint of the length + 1, 0 for null) followed
by tagged fields.

Guarantees (pure, no I/O):
* What `StructWriter` writes, `StructReader` in the same form reads back.
* `StructReader` raises ValueError, never anything else, for bytes that end inside a field, a
  varint longer than 5 bytes, a negative length other than null's, a null where a value is
  required, a string that is not UTF-8, tagged fields out of order, or bytes after the structure
  (`end`). A classic bytes field of length -1 reads as empty, as Kafka's readers take it.
* `StructWriter` raises ValueError for a classic string longer than an int16 length allows.
"""

from __future__ import annotations

import struct
from typing import Final

I8: Final = struct.Struct(">b")
I16: Final = struct.Struct(">h")
I32: Final = struct.Struct(">i")
I64: Final = struct.Struct(">q")


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint of `value` (>= 0)."""
    if value < 0:
        raise ValueError(f"An unsigned varint of {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class StructWriter:
    """One structure's fields, in the classic form or (`flexible`) the compact one."""

    __slots__ = ("flexible", "parts")

    def __init__(self, *, flexible: bool = False) -> None:
        self.flexible = flexible
        self.parts: list[bytes] = []

    def i8(self, value: int) -> None:
        self.parts.append(I8.pack(value))

    def i16(self, value: int) -> None:
        self.parts.append(I16.pack(value))

    def i32(self, value: int) -> None:
        self.parts.append(I32.pack(value))

    def i64(self, value: int) -> None:
        self.parts.append(I64.pack(value))

    def length(self, count: int | None) -> None:
        """An array's count (None: null)."""
        if self.flexible:
            self.parts.append(uvarint(0 if count is None else count + 1))
        else:
            self.i32(-1 if count is None else count)

    def string(self, value: str | None) -> None:
        if value is None:
            self.parts.append(uvarint(0) if self.flexible else I16.pack(-1))
            return
        data = value.encode("utf-8")
        if self.flexible:
            self.parts.append(uvarint(len(data) + 1))
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"A string of {len(data)} bytes does not fit an int16 length")
            self.i16(len(data))
        self.parts.append(data)

    def bytes_(self, value: bytes) -> None:
        if self.flexible:
            self.parts.append(uvarint(len(value) + 1))
        else:
            self.i32(len(value))
        self.parts.append(value)

    def tags(self, tags: list[tuple[int, bytes]]) -> None:
        """The tagged fields (tag, raw value), in tag order; nothing in the classic form."""
        if not self.flexible:
            return
        self.parts.append(uvarint(len(tags)))
        for tag, data in sorted(tags):
            self.parts.append(uvarint(tag))
            self.parts.append(uvarint(len(data)))
            self.parts.append(data)

    def done(self) -> bytes:
        return b"".join(self.parts)


class StructReader:
    """Reads one structure's fields from `data`; `flexible` may be set once the version is read."""

    __slots__ = ("data", "flexible", "position")

    def __init__(self, data: bytes, *, flexible: bool = False) -> None:
        self.data = data
        self.position = 0
        self.flexible = flexible

    def take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise ValueError(f"{len(self.data)} bytes end inside a field at byte {self.position}")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def i8(self) -> int:
        return int(I8.unpack(self.take(1))[0])

    def i16(self) -> int:
        return int(I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        return int(I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 28:
                raise ValueError(f"An unsigned varint longer than 5 bytes at byte {self.position}")
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self) -> int | None:
        """An array's count (None: null)."""
        size = self.uvarint() - 1 if self.flexible else self.i32()
        if size < -1:
            raise ValueError(f"An array length of {size}")
        return None if size == -1 else size

    def nullable_string(self) -> str | None:
        at = self.position
        size = self.uvarint() - 1 if self.flexible else self.i16()
        if size == -1:
            return None
        if size < 0:
            raise ValueError(f"A string length of {size} at byte {at}")
        try:
            return self.take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"A string that is not UTF-8: {exc}") from None

    def string(self) -> str:
        at = self.position
        value = self.nullable_string()
        if value is None:
            raise ValueError(f"A null string where one is required, at byte {at}")
        return value

    def bytes_(self) -> bytes:
        size = self.uvarint() - 1 if self.flexible else self.i32()
        if size < 0:  # Kafka's readers take a classic -1 as an empty array here
            if size != -1 or self.flexible:
                raise ValueError(f"A bytes length of {size}")
            return b""
        return self.take(size)

    def tags(self) -> list[tuple[int, bytes]]:
        """The tagged fields (tag, raw value); none in the classic form."""
        if not self.flexible:
            return []
        tags: list[tuple[int, bytes]] = []
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if tags and tag <= tags[-1][0]:
                raise ValueError(f"Tagged field {tag} is not after tag {tags[-1][0]}")
            tags.append((tag, self.take(self.uvarint())))
        return tags

    def end(self) -> None:
        if self.position != len(self.data):
            raise ValueError(f"{len(self.data) - self.position} bytes after the structure")
