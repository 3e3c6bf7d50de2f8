"""Reading the controller's metadata log files directly: `--metadata` on a controller's data dir.

The files (`controller/jbod_controller/record_log.py`, docs/decisions.md; their codec is
`jbod_core.frames`, the controller's own): the dir
`<data dir>/metadata/` holds segments `<base offset>.log`, each a sequence of frames
`u32 length | u32 crc32(payload) | payload` (big endian) whose payload is the JSON object
`{"offset", "type", "data"}` — exactly one line of `jbodctl metadata export` — and snapshots
`<offset>.snapshot`: a header frame `{"offset", "records"}`, then `records` frames `{"type", "data"}`.

Guarantees:
* The records are the ones `jbodctl metadata export` (from offset 0) of the same controller
  serves: every record from offset 0 while the segments still start at 0; otherwise the newest
  snapshot whose frames and header verify — its entries carrying offset `S - 1`, as
  `GET /v1/metadata` sends them — then the segment records from its offset `S` on. A log that
  starts after 0 with no verified snapshot reaching its start is a `LogError` (one line).
* Damage is judged as the controller's recovery judges it. A frame is damaged when its header is
  cut short, its length runs past the end of the file (or over 64 MiB), its CRC does not match, or
  (in a segment) its payload is not a log entry. The first damaged frame of the *last* segment and
  everything after it are a torn tail — never acknowledged, cut without a bad line, counted in a
  warning — when `jbod_core.frames.tail_damage` says one interrupted append could have left them
  (the rule the controller's recovery applies before it truncates). Any other damaged frame, in
  the last segment or another, is a bad line (the controller refuses to start on it); the rest of
  that segment cannot be framed and is skipped (the problem says how many bytes). A segment whose frames do not end
  where the next segment starts is a bad line too (the log has a gap or an overlap there).
* A line's number is the 1-based number of its frame in its file (a snapshot's header is frame
  1), so a bad line names the file and the frame. The end-of-segment problem above takes the
  number after the segment's last frame.
* The files are decoded in Spark tasks (packed as Spark's file scan packs splits, a file never
  split) by the pure functions here, into the rows the JSON-lines reader starts from: `file`
  (URI), `_pid` (null: `pos` is the line number itself), `pos`, `value` (the payload as JSON text;
  null for a damaged frame) and `framing` (the problem of a damaged frame, else null).
* The driver only lists the dir, verifies the snapshot it uses and finds the torn tail of the
  last segment (reading those two files); the executors read the files by the same path (a local
  dir in local mode, a shared mount on a cluster). The last segment is read up to where the
  driver found its intact frames to end, so a running controller's appends after that are left
  out; a segment its retention deletes during the run fails the run (read a stopped controller's
  files, or a copy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T  # noqa: N812 (the PySpark convention)

from jbod_core import frames
from jbod_pipeline.paths import local_path

SEGMENT_SUFFIX: Final = ".log"
SNAPSHOT_SUFFIX: Final = ".snapshot"
_BATCH_ROWS: Final = 8192

#: The rows of `read` (and of `segment_rows` / `snapshot_rows`, in this order).
LINE_SCHEMA: Final = T.StructType(
    [
        T.StructField("file", T.StringType()),
        T.StructField("_pid", T.IntegerType()),
        T.StructField("pos", T.LongType()),
        T.StructField("value", T.StringType()),
        T.StructField("framing", T.StringType()),
    ]
)
#: One row per Spark task: the `FileTask`s it decodes.
_TASKS_SCHEMA: Final = T.StructType(
    [
        T.StructField(
            "files",
            T.ArrayType(
                T.StructType(
                    [
                        T.StructField("kind", T.StringType()),
                        T.StructField("path", T.StringType()),
                        T.StructField("file", T.StringType()),
                        T.StructField("size", T.LongType()),
                        T.StructField("base_offset", T.LongType()),
                        T.StructField("keep_from", T.LongType()),
                        T.StructField("next_base", T.LongType()),
                        T.StructField("end", T.LongType()),
                        T.StructField("last", T.BooleanType()),
                    ]
                )
            ),
        )
    ]
)
#: Spark's defaults for packing files into scan tasks (spark.sql.files.maxPartitionBytes and
#: spark.sql.files.openCostInBytes).
MAX_TASK_BYTES: Final = 128 * 1024 * 1024
OPEN_COST_BYTES: Final = 4 * 1024 * 1024

#: (file, pos, value, framing): one row of `LINE_SCHEMA` without `_pid`.
Row = tuple[str, int, str | None, str | None]


class LogError(Exception):
    """The log cannot be read as a whole (no files, a gap at its start); `str()` is one line."""


# -- pure decoding -------------------------------------------------------------------------------


def snapshot_records(data: bytes, offset: int) -> int | None:
    """The number of entries of a snapshot file taken at `offset`, or None unless every frame is
    intact and the header frame says `{"offset": offset, "records": <the entry count>}` (the
    controller's rule for a snapshot it may use: `jbod_core.frames.snapshot_count`)."""
    try:
        return frames.snapshot_count(data, offset=offset)
    except ValueError:  # a header that is not a JSON object: no snapshot to use
        return None


def segment_rows(data: bytes, task: FileTask) -> Iterator[Row]:
    """The rows of one segment: its frames from offset `keep_from` on (frame k holds offset
    `base_offset + k - 1`). A damaged frame ends the segment: silently in the `last` segment
    (a torn tail), as a bad row elsewhere. `next_base`: where the next segment starts."""
    file, keep_from, next_base, last = task.file, task.keep_from, task.next_base, task.last
    offset = task.base_offset
    number = 0
    for item in frames.iter_frames(data, entries=True):
        if isinstance(item, frames.Damage):
            if not last:
                rest = len(data) - item.position
                yield (
                    file,
                    item.frame,
                    None,
                    f"damaged frame at offset {offset} ({item.reason}): the remaining {rest} byte(s) "
                    "of the segment cannot be framed and were skipped",
                )
            return
        number += 1
        if offset >= keep_from:
            yield file, number, item.decode("utf-8", "replace"), None
        offset += 1
    if next_base is not None and offset != next_base:
        if offset < next_base:
            problem = (
                f"offsets {offset}-{next_base - 1} are missing: the segment ends before offset {offset} "
                f"and the next one starts at {next_base}"
            )
        else:
            problem = f"the segment runs to offset {offset - 1} but the next one starts at {next_base}"
        yield file, number + 1, None, problem


def snapshot_rows(data: bytes, *, file: str, offset: int) -> Iterator[Row]:
    """The entries of a (verified) snapshot taken at `offset`, each as the log entry
    `{"offset": offset - 1, "type", "data"}` that `GET /v1/metadata` serves for it."""
    prefix = frames.log_entry_prefix(offset - 1).decode("ascii")
    for number, item in enumerate(frames.iter_frames(data, entries=False), start=1):
        if isinstance(item, frames.Damage):  # the snapshot changed after it was verified
            yield file, item.frame, None, f"damaged snapshot frame ({item.reason})"
            return
        if number > 1:  # frame 1 is the header
            yield file, number, prefix + item.decode("utf-8", "replace")[1:], None


# -- the files of a log --------------------------------------------------------------------------


def _numbered(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """The files `<digits><suffix>` of `directory`, by number (the controller's naming)."""
    found = []
    for path in directory.glob(f"*{suffix}"):
        stem = path.name[: -len(suffix)]
        if path.is_file() and stem.isascii() and stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def log_directory(path: str) -> Path | None:
    """The dir holding the log files when `path` is a local controller metadata dir (one holding
    segment or snapshot files) or a controller data dir (one with a `metadata/` subdir); absolute."""
    local = local_path(path)
    if local is None or not local.is_dir():
        return None
    local = local.absolute()  # the files' URIs name them to the executors
    if (local / "metadata").is_dir():
        return local / "metadata"
    if _numbered(local, SEGMENT_SUFFIX) or _numbered(local, SNAPSHOT_SUFFIX):
        return local
    return None


def is_controller_log(path: str) -> bool:
    """Whether `--metadata PATH` names the controller's log files rather than an export."""
    return log_directory(path) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class FileTask:
    """One file for one Spark task to decode (`segment_rows` / `snapshot_rows` arguments)."""

    kind: Literal["segment", "snapshot"]
    path: str
    file: str  # the URI reported as the line's file
    size: int  # bytes to decode
    base_offset: int  # segment: offset of its first frame; snapshot: its offset S
    keep_from: int = 0
    next_base: int | None = None
    end: int | None = None  # decode bytes [0, end) only (the last segment: its intact frames)
    last: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReadPlan:
    """What to decode: `snapshot_offset` is the snapshot used (None: the log from offset 0)."""

    directory: Path
    snapshot_offset: int | None
    tasks: tuple[FileTask, ...]
    warnings: tuple[str, ...]


def _newest_snapshot(snapshots: Iterable[tuple[int, Path]]) -> tuple[int, Path] | None:
    for offset, path in sorted(snapshots, reverse=True):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if snapshot_records(data, offset) is not None:
            return offset, path
    return None


def plan(path: str) -> ReadPlan:
    """Choose the files to decode (driver side: lists the dir, reads the snapshot it verifies and
    the last segment). Raises `LogError` for a log that cannot give every record from offset 0."""
    directory = log_directory(path)
    if directory is None:
        raise LogError(f"{path} is not a controller data dir or metadata dir")
    found = _numbered(directory, SEGMENT_SUFFIX)
    if not found and not _numbered(directory, SNAPSHOT_SUFFIX):
        raise LogError(f"the controller log {directory} holds no segment or snapshot files")
    tasks: list[FileTask] = []
    snapshot_offset: int | None = None
    if not found or found[0][0] > 0:
        snapshot = _newest_snapshot(_numbered(directory, SNAPSHOT_SUFFIX))
        start = f"offset {found[0][0]} ({found[0][1].name})" if found else "no segment"
        if snapshot is None:
            raise LogError(
                f"the controller log {directory} starts at {start} and no valid snapshot covers the "
                "offsets below it"
            )
        snapshot_offset, snapshot_path = snapshot
        if found and found[0][0] > snapshot_offset:
            raise LogError(
                f"the controller log {directory} starts at {start}, after its newest valid snapshot "
                f"({snapshot_offset}): offsets {snapshot_offset}-{found[0][0] - 1} are missing"
            )
        tasks.append(
            FileTask(
                kind="snapshot",
                path=str(snapshot_path),
                file=snapshot_path.as_uri(),
                size=snapshot_path.stat().st_size,
                base_offset=snapshot_offset,
            )
        )
    keep_from = snapshot_offset or 0
    warnings: list[str] = []
    for number, (base, segment) in enumerate(found):
        next_base = found[number + 1][0] if number + 1 < len(found) else None
        if next_base is not None and next_base <= keep_from:
            continue  # wholly below the snapshot: an export does not read it either
        end = None
        corrupt = False
        size = segment.stat().st_size
        if next_base is None:
            data = segment.read_bytes()
            damage = frames.find_damage(data, entries=True)
            corrupt = damage is not None and frames.tail_damage(data, damage.position) is not None
            end = size = len(data) if damage is None or corrupt else damage.position
            if damage is not None and not corrupt:
                warnings.append(
                    f"cut a torn tail of {len(data) - damage.position} byte(s) from frame {damage.frame} of "
                    f"the last segment {segment.name} ({damage.reason}; never acknowledged, the "
                    "controller's recovery cuts it too)"
                )
        tasks.append(
            FileTask(
                kind="segment",
                path=str(segment),
                file=segment.as_uri(),
                size=size,
                base_offset=base,
                keep_from=keep_from,
                next_base=next_base,
                end=end,
                # A corrupt last segment is read as any other: its damaged frame is a bad line.
                last=next_base is None and not corrupt,
            )
        )
    return ReadPlan(directory, snapshot_offset, tuple(tasks), tuple(warnings))


# -- Spark ---------------------------------------------------------------------------------------


def decode_task(task: FileTask) -> Iterator[Row]:
    """The rows of one file (runs in an executor: reads the file)."""
    data = Path(task.path).read_bytes()
    if task.end is not None and task.end < len(data):
        data = data[: task.end]  # the last segment as the driver saw it: its torn tail cut
    if task.kind == "snapshot":
        return snapshot_rows(data, file=task.file, offset=task.base_offset)
    return segment_rows(data, task)


_ARROW_SCHEMA: Final = pa.schema(
    [
        ("file", pa.string()),
        ("_pid", pa.int32()),
        ("pos", pa.int64()),
        ("value", pa.string()),
        ("framing", pa.string()),
    ]
)


def _arrow_batch(rows: list[Row]) -> pa.RecordBatch:
    files, positions, values, problems = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(files, pa.string()),
            pa.nulls(len(rows), pa.int32()),
            pa.array(positions, pa.int64()),
            pa.array(values, pa.string()),
            pa.array(problems, pa.string()),
        ],
        schema=_ARROW_SCHEMA,
    )


def _decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body: task rows in, line rows out in batches of at most `_BATCH_ROWS`."""
    for tasks in batches:
        for spec in (spec for row in tasks.to_pylist() for spec in row["files"]):
            rows: list[Row] = []
            for row in decode_task(FileTask(**spec)):
                rows.append(row)
                if len(rows) == _BATCH_ROWS:
                    yield _arrow_batch(rows)
                    rows = []
            if rows:
                yield _arrow_batch(rows)


@dataclasses.dataclass(frozen=True, slots=True)
class LogLines:
    """`lines` (`LINE_SCHEMA`, lazy: decoded when an action runs) and the warnings of `plan`."""

    lines: DataFrame
    plan: ReadPlan

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.plan.warnings


def pack(sizes: Sequence[int], *, parallelism: int) -> list[list[int]]:
    """Consecutive files (indexes into `sizes`) grouped into Spark tasks as Spark's file scan packs
    splits: up to min(`MAX_TASK_BYTES`, max(`OPEN_COST_BYTES`, bytes per core)) each, a file
    counting its size plus `OPEN_COST_BYTES`; a file is never split."""
    total = sum(sizes) + len(sizes) * OPEN_COST_BYTES
    limit = min(MAX_TASK_BYTES, max(OPEN_COST_BYTES, total // max(1, parallelism)))
    groups: list[list[int]] = []
    used = 0
    for index, size in enumerate(sizes):
        cost = size + OPEN_COST_BYTES
        if not groups or used + cost > limit:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += cost
    return groups


def read(spark: SparkSession, path: str) -> LogLines:
    """The frames of the controller log at `path` as lines (lazy), its files packed into tasks."""
    chosen = plan(path)
    groups = pack([t.size for t in chosen.tasks], parallelism=spark.sparkContext.defaultParallelism)
    rows = [([dataclasses.astuple(chosen.tasks[i]) for i in group],) for group in groups]
    # One row per partition: `parallelize` slices a list of n items into n partitions of one.
    tasks = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), _TASKS_SCHEMA)
    return LogLines(lines=tasks.mapInArrow(_decode_batches, LINE_SCHEMA), plan=chosen)
