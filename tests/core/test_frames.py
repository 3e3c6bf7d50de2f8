"""`jbod_core.frames`: the frame codec of the controller's log files and the torn-tail rule, on
byte strings built here (the controller's recovery and the pipeline's reader both use it; their
own tests run it on real files)."""

from __future__ import annotations

import zlib

import orjson
import pytest

from jbod_core import frames


def _entry(offset: int) -> bytes:
    return frames.frame(orjson.dumps({"offset": offset, "type": "T", "data": {"n": offset}}))


LOG = b"".join(_entry(n) for n in range(5))
STARTS = [sum(len(_entry(n)) for n in range(k)) for k in range(6)]


def test_scan_yields_positions_and_payloads_then_the_first_damage() -> None:
    scanned = list(frames.scan(LOG, entries=True))
    assert [position for position, _ in scanned] == STARTS[:5]
    assert list(frames.iter_frames(LOG, entries=True)) == [_entry(n)[frames.HEADER.size :] for n in range(5)]
    assert frames.find_damage(LOG, entries=True) is None
    cut = LOG[: STARTS[3] + 5]
    assert frames.find_damage(cut, entries=True) == frames.Damage(4, STARTS[3], "frame header cut short")
    snapshot = frames.frame(b'{"type":"T"}')
    assert frames.find_damage(snapshot, entries=False) is None
    assert frames.find_damage(snapshot, entries=True) == frames.Damage(1, 0, "payload is not a log entry")


def test_a_torn_tail_is_what_one_interrupted_append_leaves() -> None:
    # Cut anywhere inside the last frames: a prefix of the appended frames, always a torn tail.
    for end in range(STARTS[3] + 1, len(LOG)):
        damage = frames.find_damage(LOG[:end], entries=True)
        if damage is not None:
            assert frames.tail_damage(LOG[:end], damage.position) is None, end
    # A whole last frame with a bad checksum, or zero-filled blocks after a cut frame.
    flipped = bytearray(LOG)
    flipped[STARTS[4] + frames.HEADER.size + 3] ^= 0x01
    assert frames.tail_damage(bytes(flipped), STARTS[4]) is None
    zeros = LOG[: STARTS[4] + 12] + bytes(4096)
    assert frames.tail_damage(zeros, STARTS[4]) is None


def test_damage_with_acknowledged_frames_after_it_is_corruption() -> None:
    flipped = bytearray(LOG)
    flipped[STARTS[1] + frames.HEADER.size + 3] ^= 0x01  # frame 2's payload
    damage = frames.find_damage(bytes(flipped), entries=True)
    assert damage == frames.Damage(2, STARTS[1], "CRC mismatch")
    assert frames.tail_damage(bytes(flipped), damage.position) == (
        f"an intact record frame follows at byte {STARTS[2]}"
    )
    garbage = LOG[: STARTS[4]] + b"\x01" * 300  # not frames, not zeros, after the last intact one
    damage = frames.find_damage(garbage, entries=True)
    assert damage is not None and damage.position == STARTS[4]
    assert frames.tail_damage(garbage, damage.position) is None  # reads as a frame cut at the end


def test_the_frame_layout_is_length_crc32_payload_big_endian() -> None:
    payload = b'{"offset":7}'
    expected = len(payload).to_bytes(4, "big") + zlib.crc32(payload).to_bytes(4, "big") + payload
    assert frames.frame(payload) == expected
    buffer = bytearray(b"before")
    assert frames.append_frame(buffer, payload) == frames.checksum(payload) == zlib.crc32(payload)
    assert bytes(buffer) == b"before" + expected


def test_entries_round_trip_and_a_snapshot_entry_is_served_as_a_log_entry() -> None:
    entry = frames.encode_entry(41, "TopicRecord", {"name": "t"})
    assert entry == b'{"offset":41,"type":"TopicRecord","data":{"name":"t"}}'
    assert entry.startswith(frames.ENTRY_PREFIX) and entry.startswith(frames.log_entry_prefix(41))
    assert frames.decode_entry(entry) == (41, "TopicRecord", {"name": "t"})
    snapshot_entry = frames.encode_snapshot_entry("TopicRecord", {"name": "t"})
    assert frames.decode_snapshot_entry(snapshot_entry) == ("TopicRecord", {"name": "t"})
    assert frames.log_entry_prefix(41) + snapshot_entry[1:] == entry


def test_a_snapshot_is_used_only_when_intact_and_its_header_matches() -> None:
    entries = [frames.encode_snapshot_entry("T", {"n": n}) for n in range(3)]
    data = frames.frame(frames.snapshot_header(offset=10, records=3)) + b"".join(map(frames.frame, entries))
    assert frames.snapshot_entries(data, offset=10) == entries
    assert frames.snapshot_count(data, offset=10) == 3
    for bad in (data[:-1], data + frames.frame(entries[0]), b""):
        assert frames.snapshot_entries(bad, offset=10) is None
        assert frames.snapshot_count(bad, offset=10) is None
    assert frames.snapshot_entries(data, offset=11) is None
    assert frames.snapshot_count(data, offset=11) is None
    not_an_object = frames.frame(b"[10, 3]") + b"".join(map(frames.frame, entries))
    with pytest.raises(ValueError, match="not a JSON object"):
        frames.snapshot_entries(not_an_object, offset=10)
    with pytest.raises(ValueError, match="not a JSON object"):
        frames.snapshot_count(not_an_object, offset=10)
