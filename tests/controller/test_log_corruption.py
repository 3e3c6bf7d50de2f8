"""Corruption inside the controller's metadata log is refused, never truncated (protocol §3.7).

Covers (issue 12, item 1): one flipped byte in the middle of the only segment, in a frame's
payload or in its length field, makes `jbod-controller` refuse to start with one line naming the
segment and the offset, exit non-zero, and leave every byte of the log as it was; a damaged last
frame with zero padding after it (a torn append after a power loss) and a multi-frame append cut
anywhere (kill -9 mid-write) are still torn tails and are truncated with every whole frame kept.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from tests.controller.conftest import Api, bring_up
from tests.controller.test_cli import assert_one_line_error, run_controller
from tests.harness import ControllerProcess

HEADER = struct.Struct(">II")


def _frames(segment: Path) -> list[tuple[int, int]]:
    """(position, length) of every frame of a clean segment."""
    data = segment.read_bytes()
    out = []
    position = 0
    while position < len(data):
        length, _crc = HEADER.unpack_from(data, position)
        out.append((position, length))
        position += HEADER.size + length
    assert position == len(data)
    return out


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _fill(api: Api) -> int:
    bring_up(api, [1, 2, 3])
    for i in range(6):
        api.create_topic(f"t{i}", numPartitions=50, replicationFactor=3)
    return api.end_offset()


@pytest.mark.parametrize("where", ["payload", "length-high-byte", "length-low-byte", "checksum"])
def test_a_flipped_byte_mid_log_refuses_to_start_and_changes_nothing(
    controller: ControllerProcess, api: Api, where: str
) -> None:
    end = _fill(api)
    controller.stop()
    metadata = controller.data_dir / "metadata"
    [segment] = sorted(metadata.glob("*.log"))
    frames = _frames(segment)
    assert len(frames) == end
    victim = len(frames) // 2
    position, length = frames[victim]
    spot = {
        "payload": position + HEADER.size + length // 2,
        "length-high-byte": position,
        "length-low-byte": position + 3,
        "checksum": position + 5,
    }[where]
    data = bytearray(segment.read_bytes())
    data[spot] ^= 0x5A
    segment.write_bytes(bytes(data))
    before = _digest(metadata)

    result = run_controller(*controller.command()[1:])
    line = assert_one_line_error(result, segment.name, f"byte {position}", f"offset {victim}")
    assert "corrupt" in line
    assert _digest(metadata) == before, "a refused recovery must not touch the log"


def test_torn_tails_are_still_truncated(controller: ControllerProcess, api: Api) -> None:
    """A damaged last frame followed by zeros, and a multi-frame append cut short, are torn tails."""
    end = _fill(api)
    controller.stop()
    [segment] = sorted((controller.data_dir / "metadata").glob("*.log"))
    clean = segment.read_bytes()
    frames = _frames(segment)

    # The last 40 frames stand for one batch whose write was cut 17 bytes into its 31st frame.
    cut_frame = len(frames) - 10
    cut_at = frames[cut_frame][0] + 17
    segment.write_bytes(clean[:cut_at])
    controller.start()
    assert api.end_offset() == cut_frame
    assert segment.read_bytes() == clean[: frames[cut_frame][0]]
    controller.stop()

    # A last frame whose checksum is bad, followed by zero-filled blocks (power loss).
    kept = segment.read_bytes()
    last_position, last_length = frames[cut_frame - 1]
    damaged = bytearray(kept)
    damaged[last_position + HEADER.size + last_length // 2] ^= 0x01
    segment.write_bytes(bytes(damaged) + bytes(8192))
    controller.start()
    assert api.end_offset() == cut_frame - 1
    assert segment.read_bytes() == clean[:last_position]
    assert end > cut_frame
