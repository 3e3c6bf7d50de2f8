"""The metadata log as a typed Parquet export (`jbodctl metadata export --format parquet`).

Layout (one row per record, in the order given):
* `offset` (int64) and `type` (string): the record's, null when the record has none of that type;
* one typed column per field of the seven record types of protocol §3.5 and of the admin
  extensions (docs/api.md: `ConfigRecord`, the SCRAM credential records, `ProducerIdsRecord`,
  `BrokerConfigRecord`, the ACL records)
  (`FIELDS`: `brokerId` int32, `logDirs` list<string>, `listeners` list<struct<name, host,
  port>>, `configs` map<string, string>, `salt` string (base64), `nextProducerId` int64, ...),
  null where the record does not carry the field; list elements are declared required (never
  null);
* `data` (string): null when the record's `data` fitted the typed columns; otherwise the `data`
  value as JSON text (`null` when absent) and every typed column null.

Guarantees:
* A record is typed only when its `data` is an object and every known field it carries has exactly
  its column's type (an int in range, not a bool; a list without nulls; `rack` and a
  ConfigRecord's `value`, null for a deleted config, alone may be null).
  Anything else — a field of the wrong JSON type, a null, a number out of range — is kept verbatim
  as JSON text, so a reader checks it exactly as it checks a JSON-lines export: the typed layout
  never turns a bad record into a good one, nor loses one.
* Fields the columns do not know are dropped from typed rows (§3.5: readers ignore them).
* Writing streams: `write` holds one batch (`BATCH` records) in memory at a time. `read` gives
  the records back (a typed row: the fields it carries, `rack: null` and `value: null` dropped;
  `jbod_core.records` reads a ConfigRecord without `value` as a deleted config).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

BATCH: Final = 50_000
_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63 - 1)


def _list(element: pa.DataType) -> pa.DataType:
    """A list whose elements are never null (Parquet: a required element), so that a reader knows
    it without looking at the values."""
    return pa.list_(pa.field("element", element, nullable=False))


LISTENER: Final = pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])

#: The union of the `data` fields of the record types (§3.5), as typed columns.
FIELDS: Final = pa.schema(
    [
        ("brokerId", pa.int32()),
        ("brokerEpoch", pa.int64()),
        ("incarnationId", pa.string()),
        ("logDirs", _list(pa.string())),
        ("offlineLogDirs", _list(pa.string())),
        ("cordonedLogDirs", _list(pa.string())),
        ("hasOfflineLogDirs", pa.bool_()),
        ("fenced", pa.bool_()),
        ("inControlledShutdown", pa.bool_()),
        ("listeners", _list(LISTENER)),
        ("rack", pa.string()),
        ("name", pa.string()),
        ("topicId", pa.string()),
        ("configs", pa.map_(pa.string(), pa.string())),
        ("partitionId", pa.int32()),
        ("replicas", _list(pa.int32())),
        ("isr", _list(pa.int32())),
        ("leader", pa.int32()),
        ("leaderEpoch", pa.int32()),
        ("partitionEpoch", pa.int32()),
        ("directories", _list(pa.string())),
        ("addingReplicas", _list(pa.int32())),
        ("removingReplicas", _list(pa.int32())),
        ("value", pa.string()),
        ("mechanism", pa.int32()),
        ("salt", pa.string()),
        ("storedKey", pa.string()),
        ("serverKey", pa.string()),
        ("iterations", pa.int32()),
        ("nextProducerId", pa.int64()),
        ("broker", pa.string()),
        ("id", pa.string()),
        ("resourceType", pa.int32()),
        ("resourceName", pa.string()),
        ("patternType", pa.int32()),
        ("principal", pa.string()),
        ("host", pa.string()),
        ("operation", pa.int32()),
        ("permissionType", pa.int32()),
    ]
)
SCHEMA: Final = pa.schema([("offset", pa.int64()), ("type", pa.string()), ("data", pa.string()), *FIELDS])
NULLABLE: Final = frozenset({"rack", "value"})


def _is_int(value: object, bounds: tuple[int, int]) -> bool:
    return type(value) is int and bounds[0] <= value <= bounds[1]


def _fits(value: object, kind: pa.DataType) -> bool:  # noqa: PLR0911  a return per Arrow type of the schema
    """Whether `value` (decoded JSON) has exactly the type `kind`."""
    if pa.types.is_int32(kind):
        return _is_int(value, _INT32)
    if pa.types.is_int64(kind):
        return _is_int(value, _INT64)
    if pa.types.is_string(kind):
        return type(value) is str
    if pa.types.is_boolean(kind):
        return type(value) is bool
    if pa.types.is_map(kind):
        return type(value) is dict and all(type(v) is str for v in value.values())
    if pa.types.is_list(kind):
        element = kind.value_type
        return type(value) is list and all(_fits(v, element) for v in value)
    if pa.types.is_struct(kind):
        return type(value) is dict and all(
            value.get(member.name) is None or _fits(value[member.name], member.type) for member in kind
        )
    raise AssertionError(f"no rule for {kind}")


def _typed(data: object) -> bool:
    if type(data) is not dict:
        return False
    for column in FIELDS:
        if column.name in data:
            value = data[column.name]
            if value is None and column.name in NULLABLE:
                continue
            if not _fits(value, column.type):
                return False
    return True


def _batch(records: list[Mapping[str, Any]]) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for record in records:
        offset, kind, data = record.get("offset"), record.get("type"), record.get("data")
        columns["offset"].append(offset if _is_int(offset, _INT64) else None)
        columns["type"].append(kind if type(kind) is str else None)
        typed = _typed(data)
        columns["data"].append(None if typed else json.dumps(data, separators=(",", ":")))
        for column in FIELDS:
            value = data.get(column.name) if typed else None  # type: ignore[union-attr]
            if value is not None and pa.types.is_map(column.type):
                value = list(value.items())
            columns[column.name].append(value)
    return pa.RecordBatch.from_pydict(columns, schema=SCHEMA)


def write(records: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write `records` (`{offset, type, data}` as exported) to `path`; the number written."""
    count = 0
    batch: list[Mapping[str, Any]] = []
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for record in records:
            batch.append(record)
            if len(batch) == BATCH:
                writer.write_batch(_batch(batch))
                count += len(batch)
                batch = []
        if batch:
            writer.write_batch(_batch(batch))
            count += len(batch)
    return count


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a typed export as `{offset, type, data}` (a typed row's `data` holds the
    fields it carries; a row kept as JSON text gives that JSON back): the inverse of `write`."""
    records = []
    for row in pq.read_table(path).to_pylist():
        text = row["data"]
        data = (
            json.loads(text)
            if text is not None
            else {f.name: row[f.name] for f in FIELDS if row[f.name] is not None}
        )
        if text is None:
            if "configs" in data:
                data["configs"] = dict(data["configs"])
            if "listeners" in data:
                data["listeners"] = [
                    {k: v for k, v in entry.items() if v is not None} for entry in data["listeners"]
                ]
        records.append({"offset": row["offset"], "type": row["type"], "data": data})
    return records
