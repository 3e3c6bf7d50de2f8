"""A local copy of the metadata image in `metadata.log.dir`, so a restart fetches only the tail.

Guarantees:
* `encode` / `decode` are pure: a header line (format version, cluster id, the offset of the last
  applied record, its checksum, the record count) and one JSON line per record that rebuilds the
  image (`ClusterImage.iter_records`, the records the controller's own snapshots hold).
* `save` replaces `metadata.cache` atomically (temporary file, fsync, rename, fsync of the dir): a
  crash leaves the previous copy or none, never a torn one. `load` returns None when there is no
  copy, and None with a WARNING when it is damaged, of another version or of another cluster.
* A copy is only a starting point, never trusted over the controller: the first fetch sends the
  copy's checksum, and a controller whose log holds another record at that offset (or ends before
  it) answers OFFSET_OUT_OF_RANGE, upon which the broker replays the log from offset 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from jbod_core import records
from jbod_core.image import ClusterImage
from jbod_runtime.durable_files import write_atomically

log = logging.getLogger("jbod_agent")

FILE: Final = "metadata.cache"
VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class CachedMetadata:
    image: ClusterImage
    offset: int  # of the last record the image holds
    checksum: int | None  # of that record, as the controller reported it


def encode(image: ClusterImage, *, cluster_id: str, offset: int, checksum: int | None) -> bytes:
    lines = [orjson.dumps({"type": r.TYPE, "data": r.to_data()}) for r in image.iter_records()]
    header = {"version": VERSION, "clusterId": cluster_id, "offset": offset, "checksum": checksum}
    header["records"] = len(lines)
    return b"\n".join([orjson.dumps(header), *lines]) + b"\n"


def decode(data: bytes, *, cluster_id: str) -> CachedMetadata:
    """The cached image (ValueError naming what is wrong when it cannot be used)."""
    lines = data.split(b"\n")
    if len(lines) < 2 or lines[-1] != b"":
        raise ValueError("the file does not end with a complete line")
    try:
        header = orjson.loads(lines[0])
        if not isinstance(header, dict):
            raise ValueError("the header is not an object")
        if header.get("version") != VERSION:
            raise ValueError(f"format version {header.get('version')!r}, expected {VERSION}")
        if header.get("clusterId") != cluster_id:
            raise ValueError(f"cluster id {header.get('clusterId')!r}, expected {cluster_id!r}")
        offset, checksum, count = header["offset"], header.get("checksum"), header["records"]
        if not isinstance(offset, int) or offset < 0 or not isinstance(count, int):
            raise ValueError("the header's offset or record count is not a number")
        if checksum is not None and not isinstance(checksum, int):
            raise ValueError("the header's checksum is not a number")
        body = lines[1:-1]
        if len(body) != count:
            raise ValueError(f"{len(body)} records where the header says {count}")
        image = ClusterImage()
        for line in body:
            entry = orjson.loads(line)
            image.replay(records.decode(entry["type"], entry["data"]), offset)
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable: {exc}") from exc
    except records.RecordError as exc:
        raise ValueError(f"a record does not decode: {exc}") from exc
    image.end_offset = offset + 1
    return CachedMetadata(image, offset, checksum)


def load(directory: Path, *, cluster_id: str) -> CachedMetadata | None:
    path = directory / FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("Cannot read the metadata cache %s (%s); fetching the whole log", path, exc.strerror)
        return None
    try:
        return decode(data, cluster_id=cluster_id)
    except ValueError as exc:
        log.warning("Ignored the metadata cache %s: %s; fetching the whole log", path, exc)
        return None


def save(directory: Path, data: bytes) -> None:
    write_atomically(directory / FILE, data)
