"""Reading the pipeline's inputs: the metadata log export and the agents' telemetry (protocol §6).

Guarantees:
* `--metadata` is a JSON-lines export (`jbodctl metadata export`, plain or .gz), a Parquet export
  (`jbodctl metadata export --format parquet`: `offset`, `type` and one typed column per record
  field, read without parsing JSON; `data` as JSON text for the records that did not fit the
  columns, and for every row of the earlier layout, which is read too),
  a directory of such files, or the controller's log files read directly (its data dir or
  `metadata/` dir: `segments`, the same records as an export; a line is a frame and its number
  the frame's number in its file). `--telemetry` is JSON lines (a file or a directory).
* Every line is parsed against a declared schema (`schemas`). A line that is not a JSON object,
  misses a required field, carries a known field of the wrong type or a malformed Uuid, or names an
  unknown record type is a *bad line*: it never reaches a job; it is counted and reported with its
  file and line number (row number for Parquet). Blank lines are ignored.
* Line numbers are exact: a line's number is its row position in the scan
  (`monotonically_increasing_id`) plus the row counts of the file's earlier scan partitions, which
  holds because Spark scans the splits of one file in order of their byte offset. They are
  computed (one more pass over the cached lines) only when there are bad lines to report.
* Good records keep their order key `(offset, file, pos)` (`pos` grows with the line number in a
  file): records are replayed in offset order, and records sharing an offset (a snapshot at the
  start of an export) in file and line order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql import types as T  # noqa: N812

from jbod_pipeline import errors, schemas, segments
from jbod_pipeline.paths import local_path

#: The canonical text of a Uuid: 22 base64url characters whose last one carries 2 bits (protocol §1).
UUID_PATTERN: Final = r"^[A-Za-z0-9_-]{21}[AQgw]$"
EXAMPLES: Final = 20
_ROW_BITS: Final = 33  # monotonically_increasing_id: partition index above bit 33, row number below


class InputError(errors.PipelineError):
    """An input that cannot be read at all (missing path, no files); `str()` is one line."""


@dataclass(frozen=True, slots=True)
class BadLine:
    file: str
    line: int | None
    offset: int | None
    problem: str


@dataclass(slots=True)
class InputReport:
    """What was skipped while reading one input."""

    source: str
    bad_lines: int = 0
    examples: list[BadLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what was dropped without being bad lines

    def summary(self) -> str:
        notes = "".join(f"; {w}" for w in self.warnings)
        if not self.bad_lines:
            return f"{self.source}: no bad lines{notes}"
        first = "; ".join(_describe(b) for b in self.examples[:3])
        return f"{self.source}: skipped {self.bad_lines} bad line(s): {first}{notes}"


def _describe(bad: BadLine) -> str:
    where = f"line {bad.line}" if bad.line is not None else f"offset {bad.offset}"
    return f"{_short(bad.file)} {where}: {bad.problem}"


def _short(uri: str) -> str:
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme in ("", "file") else uri


# -- files and line numbers ------------------------------------------------------------------


def is_parquet(path: str) -> bool:
    """Parquet if the path ends in .parquet or is a local directory holding .parquet files."""
    if path.rstrip("/").endswith(".parquet"):
        return True
    local = local_path(path)
    if local is not None and local.is_dir():
        return any(p.suffix == ".parquet" for p in local.iterdir())
    return False


def check_exists(path: str, *, what: str) -> None:
    local = local_path(path)
    if local is None:
        return  # a remote file system: Spark reports it
    if not local.exists():
        raise InputError(f"{what} {path} does not exist")
    if local.is_dir() and not any(
        p.is_file() and not p.name.startswith((".", "_")) for p in local.rglob("*")
    ):
        raise InputError(f"{what} {path} is an empty directory")
    if local.is_file() and not os.access(local, os.R_OK):
        raise InputError(f"{what} {path} is not readable")


def _scanned(df: DataFrame) -> DataFrame:
    """`df` (straight from a file scan) with `file`, `_pid` (scan partition) and `pos` (increasing
    in file order within a file: `monotonically_increasing_id`). Line numbers are derived from
    these only when a bad line must be reported (`_line_numbers`)."""
    return (
        df.withColumn("file", F.input_file_name())
        .withColumn("_pid", F.spark_partition_id())
        .withColumn("pos", F.monotonically_increasing_id())
    )


def _line_numbers(scanned: DataFrame) -> dict[tuple[str, int], int]:
    """(file, scan partition) -> the number to add to `pos` to get the 1-based line number.
    Rows whose `_pid` is null (the controller's log files) carry their line number in `pos`."""
    stats = (
        scanned.where(F.col("_pid").isNotNull())
        .groupBy("file", "_pid")
        .agg(F.count(F.lit(1)).alias("n"), F.min("pos").alias("first"))
        .collect()
    )
    bases: dict[tuple[str, int], int] = {}
    seen: dict[str, int] = {}
    for row in sorted(stats, key=lambda r: (r["file"], r["_pid"])):
        before = seen.get(row["file"], 0)
        bases[(row["file"], row["_pid"])] = before - int(row["first"]) + 1
        seen[row["file"]] = before + int(row["n"])
    return bases


def _first_problem(checks: Sequence[tuple[Column, str | Column]]) -> Column:
    """The message of the first check that holds, else null."""
    return F.coalesce(*[F.when(cond, msg if isinstance(msg, Column) else F.lit(msg)) for cond, msg in checks])


def _has_null_element(column: Column) -> Column:
    """True if the array holds a null (false for an empty or null array). `sort_array` puts nulls
    first; not `F.exists` nor `F.array_compact` (a `filter`): higher-order functions run
    interpreted, and were most of the cost of checking a million records."""
    return F.when(F.size(column) > 0, F.sort_array(column).getItem(0).isNull()).otherwise(F.lit(False))


#: A comma-joined list of canonical Uuids (or nothing).
UUID_LIST_PATTERN: Final = r"^([A-Za-z0-9_-]{21}[AQgw](,[A-Za-z0-9_-]{21}[AQgw])*)?$"


def _bad_lines(df: DataFrame, source: str, *, with_offset: bool) -> InputReport:
    """Count the rows of `df` (every scanned line, blank ones included) with a `problem` and
    number the first ones."""
    bad = df.where(F.col("problem").isNotNull())
    count = bad.count()
    report = InputReport(source=source, bad_lines=count)
    if count:
        bases = _line_numbers(df)
        cols = ["file", "_pid", "pos", "problem"] + (["offset"] if with_offset else [])
        rows = bad.select(*cols).orderBy("file", "pos").limit(EXAMPLES).collect()
        report.examples = [
            BadLine(
                file=r["file"],
                line=r["pos"] if r["_pid"] is None else r["pos"] + bases[(r["file"], r["_pid"])],
                offset=r["offset"] if with_offset else None,
                problem=r["problem"],
            )
            for r in rows
        ]
    return report


# -- the metadata log --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataInput:
    """`records`: one row per good record — `offset`, `type`, `file`, `line`, then the fields of
    `schemas.RECORD_DATA` (null where the record does not carry them), read from a persisted
    cache: `unpersist` when done."""

    records: DataFrame
    report: InputReport
    cache: DataFrame  # the persisted parsed lines behind `records`

    def unpersist(self) -> None:
        self.cache.unpersist()


def _presence(value: Column, record_type: Column) -> Column:
    """The optional fields of the row's record type whose key appears in the line (`"name":`):
    to tell a field that is absent (unchanged) from one of the wrong type (an error)."""
    by_type = None
    for name, optional in schemas.OPTIONAL_FIELDS.items():
        if not optional:
            continue
        found = F.array_compact(
            F.array(*[F.when(value.rlike(f'"{field}"\\s*:'), F.lit(field)) for field in optional])
        )
        is_type = record_type == name
        by_type = F.when(is_type, found) if by_type is None else by_type.when(is_type, found)
    assert by_type is not None
    return by_type.otherwise(F.array().cast("array<string>"))


def _metadata_lines(spark: SparkSession, path: str) -> tuple[DataFrame, list[str]]:
    """`file`, `_pid`, `pos`, `blank`, `framing` (the problem of a damaged frame of the
    controller's log files, else null), `offset`, `type`, `d` (the typed data), and `present`
    of every line (or Parquet row, or log frame); and the warnings of reading them."""
    warnings: list[str] = []
    if segments.is_controller_log(path):
        try:
            log = segments.read(spark, path)
        except segments.LogError as exc:
            raise InputError(f"metadata {path}: {exc}") from None
        lines, warnings = log.lines, list(log.warnings)
    elif is_parquet(path):
        return _parquet_lines(spark, path), warnings
    else:
        lines = _scanned(spark.read.text(path)).withColumn("framing", F.lit(None).cast("string"))
    top = F.from_json("value", schemas.METADATA_RECORD)
    blank = F.coalesce(F.trim("value") == "", F.lit(False))  # a damaged frame has no value
    parsed = lines.select("file", "_pid", "pos", blank.alias("blank"), "framing", top.alias("top"), "value")
    return (
        parsed.select(
            "file",
            "_pid",
            "pos",
            "blank",
            "framing",
            F.col("top.offset").alias("offset"),
            F.col("top.type").alias("type"),
            F.col("top.data").alias("d"),
            _presence(F.col("value"), F.col("top.type")).alias("present"),
        ),
        warnings,
    )


def _parquet_lines(spark: SparkSession, path: str) -> DataFrame:
    """The rows of a Parquet export as `_metadata_lines` gives them. The typed layout
    (`jbod_cli.metadata_parquet`: one column per field) is read as it is, no JSON parsed; a
    row whose `data` column holds JSON text (a record that did not fit the columns, or every row
    of the earlier layout: `offset`, `type`, `data` only) is parsed and checked as a JSON line."""
    raw = spark.read.parquet(path)
    missing = [c for c in ("offset", "type", "data") if c not in raw.columns]
    typed_columns = [f.name for f in schemas.RECORD_DATA.fields if f.name in raw.columns]
    if typed_columns:
        missing += [
            f.name
            for f in schemas.RECORD_DATA.fields
            if f.name not in raw.columns and f.name not in schemas.LATER_FIELDS
        ]
    if missing:
        raise InputError(f"metadata {path}: the Parquet export has no column {missing[0]}")
    data = F.col("data").cast("string")
    # Only an object is a record's data (`from_json` makes a row of nulls of a JSON `null`).
    parsed = F.when(F.ltrim(data).startswith("{"), F.from_json(data, schemas.RECORD_DATA))
    presence = _presence(data, F.col("type"))
    if typed_columns:
        typed = F.struct(
            *[
                (F.col(f.name) if f.name in typed_columns else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in schemas.RECORD_DATA.fields
            ]
        )
        parsed = F.when(F.col("data").isNull(), typed).otherwise(parsed)
        # A typed row carries no field of the wrong type: nothing to look for in its text.
        presence = F.when(F.col("data").isNull(), F.array().cast("array<string>")).otherwise(presence)
    return _scanned(raw.select("offset", "type", "data", *typed_columns)).select(
        "file",
        "_pid",
        "pos",
        F.lit(False).alias("blank"),
        F.lit(None).cast("string").alias("framing"),
        F.col("offset").cast("long").alias("offset"),
        F.col("type").cast("string").alias("type"),
        parsed.alias("d"),
        presence.alias("present"),
    )


def _has(keys: str, name: str) -> Column:
    return F.coalesce(F.array_contains(keys, name), F.lit(False))


def _record_problem(present: str, typed: str) -> Column:
    """The first problem of `data` for its record type (null if none): only the checks of the
    row's own type are evaluated."""
    by_type = None
    for record_type, fields in schemas.FIELDS_BY_TYPE.items():
        required = schemas.REQUIRED_FIELDS[record_type]
        checks: list[tuple[Column, str | Column]] = []
        for name in fields:
            value = F.col(f"{typed}.{name}")
            if name in required:
                checks.append((value.isNull(), f"{record_type} field {name} is missing or malformed"))
            elif name not in schemas.NULLABLE_FIELDS:
                checks.append(
                    (_has(present, name) & value.isNull(), f"{record_type} field {name} has the wrong type")
                )
            if isinstance(schemas.RECORD_DATA[name].dataType, T.ArrayType):
                checks.append(
                    (
                        F.coalesce(_has_null_element(value), F.lit(False)),
                        f"{record_type} field {name} has the wrong type",
                    )
                )
            if name in schemas.UUID_FIELDS:
                checks.append((~value.rlike(UUID_PATTERN), f"{record_type} field {name} is not a Uuid"))
            if name in schemas.UUID_LIST_FIELDS:
                checks.append(
                    (
                        ~F.array_join(value, ",").rlike(UUID_LIST_PATTERN),
                        f"{record_type} field {name} holds a value that is not a Uuid",
                    )
                )
        if record_type == "PartitionRecord":
            checks.append(
                (
                    F.size(f"{typed}.directories") != F.size(f"{typed}.replicas"),
                    "PartitionRecord directories and replicas differ in length",
                )
            )
        is_type = F.col("type") == record_type
        problem = _first_problem(checks)
        by_type = F.when(is_type, problem) if by_type is None else by_type.when(is_type, problem)
    assert by_type is not None
    return by_type


def read_metadata(spark: SparkSession, path: str) -> MetadataInput:
    """The good records of a metadata export and the report of its bad lines.

    The checked lines are persisted, so that the parsing and the checks run once however often
    the records are read. Spark parses each line once for all the checks (it does not inline the
    `from_json` into each field it reads: `tests/pipeline/test_inputs.py` checks the plan).
    """
    check_exists(path, what="metadata")
    parsed, warnings = _metadata_lines(spark, path)
    known = F.col("type").isin(*schemas.RECORD_TYPES)
    checks: list[tuple[Column, str | Column]] = [
        (
            F.col("offset").isNull() & F.col("type").isNull() & F.col("d").isNull(),
            "not a JSON object with offset, type and data",
        ),
        (F.col("offset").isNull() | (F.col("offset") < 0), "offset is missing or not a non-negative integer"),
        (F.col("type").isNull(), "type is missing or not a string"),
        (~known, F.concat(F.lit("unknown record type '"), F.col("type"), F.lit("'"))),
        (F.col("d").isNull(), "data is missing or not a JSON object"),
        (F.lit(True), _record_problem("present", "d")),
    ]
    # A second cache after the checks, so that they run once however often the records are read.
    checked = (
        parsed.withColumn("problem", F.when(~F.col("blank"), F.coalesce("framing", _first_problem(checks))))
        .select(
            "file",
            "_pid",
            "pos",
            "blank",
            "problem",
            "offset",
            "type",
            *[F.col(f"d.{f.name}").alias(f.name) for f in schemas.RECORD_DATA.fields],
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    report = _bad_lines(checked, f"metadata {path}", with_offset=True)
    report.warnings.extend(warnings)
    good = checked.where(F.col("problem").isNull() & ~F.col("blank")).select(
        "offset", "type", "file", "pos", *[f.name for f in schemas.RECORD_DATA.fields]
    )
    return MetadataInput(records=good, report=report, cache=checked)


# -- telemetry ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TelemetryInput:
    """`samples`: every good sample (`schemas.TELEMETRY_SAMPLE` plus `file`, `line`)."""

    samples: DataFrame
    report: InputReport
    cache: DataFrame

    def unpersist(self) -> None:
        self.cache.unpersist()


def read_telemetry(spark: SparkSession, path: str) -> TelemetryInput:
    """The good samples and the report of the bad lines. Telemetry lines are long (a dir's
    replicas), so each is parsed once: a required field that is absent, null or of the wrong type
    is reported as "missing or malformed"."""
    check_exists(path, what="telemetry")
    parsed = (
        _scanned(spark.read.text(path))
        .select(
            "file",
            "_pid",
            "pos",
            (F.trim("value") == "").alias("blank"),
            F.from_json("value", schemas.TELEMETRY_SAMPLE).alias("s"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    required = schemas.TELEMETRY_REQUIRED
    checks: list[tuple[Column, str | Column]] = [
        (
            F.col("s").isNull() | _all_null([F.col(f"s.{n}") for n in required]),
            "not a JSON object with the sample fields",
        ),
        *[(F.col(f"s.{name}").isNull(), f"missing or malformed field {name}") for name in required],
        (
            _has_null_element(F.col("s.replicas"))
            | _has_null_element(F.col("s.replicas.topic"))
            | _has_null_element(F.col("s.replicas.partition"))
            | _has_null_element(F.col("s.replicas.sizeBytes")),
            "field replicas has the wrong type",
        ),
        (~F.col("s.directoryId").rlike(UUID_PATTERN), "field directoryId is not a Uuid"),
        (
            ~F.col("s.state").isin(*schemas.TELEMETRY_STATES),
            F.concat(F.lit("state '"), F.col("s.state"), F.lit("' is not online, offline or full")),
        ),
        ((F.col("s.totalBytes") < 0) | (F.col("s.usableBytes") < 0), "byte counts must not be negative"),
    ]
    checked = parsed.withColumn("problem", F.when(~F.col("blank"), _first_problem(checks)))
    report = _bad_lines(checked, f"telemetry {path}", with_offset=False)
    good = checked.where(F.col("problem").isNull() & ~F.col("blank")).select("file", "pos", "s.*")
    return TelemetryInput(samples=good, report=report, cache=parsed)


def _all_null(columns: Sequence[Column]) -> Column:
    result = columns[0].isNull()
    for column in columns[1:]:
        result = result & column.isNull()
    return result


def latest_samples(samples: DataFrame) -> DataFrame:
    """The current sample of every (brokerId, directoryId): the latest `ts`, then the last line."""
    from pyspark.sql.window import Window

    order = Window.partitionBy("brokerId", "directoryId").orderBy(
        F.col("ts").desc(), F.col("file").desc(), F.col("pos").desc()
    )
    return samples.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1).drop("_n")


def re_fullmatch(pattern: str, text: str) -> bool:
    """`re.fullmatch` for the Spark regexes here (they are plain Java/Python-compatible patterns)."""
    import re

    return re.fullmatch(pattern, text) is not None
