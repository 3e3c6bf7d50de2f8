"""What a topic holds, from its records as Spark's Kafka source reads them (`topic-stats`,
an extension): pure DataFrame → DataFrame transforms over `schemas.KAFKA_RECORD` rows.

Guarantees:
* `sized` keeps what the other two read, each key and value replaced by its size in bytes (a null
  key or value counts 0), so a run persists no values.
* `partitions`: one row per partition holding records in the read range
  (`schemas.TOPIC_PARTITIONS`): the records, the bytes of keys and values, the distinct non-null
  keys, the first and last offset read, the earliest and latest record timestamp.
* `keys`: one row per key (`schemas.TOPIC_KEYS`; the key as UTF-8 text, null for records without
  one): the records, the bytes of their values, the partitions they are in; most records first.
* Keys are grouped as the bytes they are, before any conversion to text.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.types import StructType

from jbod_pipeline import schemas


def _bytes(column: str) -> Column:
    return F.coalesce(F.length(column), F.lit(0)).cast("long")


def _typed(frame: DataFrame, schema: StructType) -> DataFrame:
    return frame.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def sized(records: DataFrame) -> DataFrame:
    """The columns the transforms read: the values replaced by their sizes (`keyBytes`,
    `valueBytes`), so that what a run keeps in memory does not grow with the values."""
    return records.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        _bytes("key").alias("keyBytes"),
        _bytes("value").alias("valueBytes"),
    )


def partitions(sized_records: DataFrame) -> DataFrame:
    """Per partition (the module's guarantee), from `sized(records)`."""
    grouped = sized_records.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("keyBytes").alias("keyBytes"),
        F.sum("valueBytes").alias("valueBytes"),
        F.countDistinct("key").alias("keys"),
        F.min("offset").alias("firstOffset"),
        F.max("offset").alias("lastOffset"),
        F.min("timestamp").alias("firstTimestamp"),
        F.max("timestamp").alias("lastTimestamp"),
    )
    return _typed(grouped, schemas.TOPIC_PARTITIONS).orderBy("topic", "partition")


def keys(sized_records: DataFrame) -> DataFrame:
    """Per key (the module's guarantee), from `sized(records)`."""
    grouped = sized_records.groupBy("topic", "key").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("valueBytes").alias("valueBytes"),
        F.countDistinct("partition").alias("partitions"),
    )
    texts = grouped.withColumn("key", F.col("key").cast("string"))
    return _typed(texts, schemas.TOPIC_KEYS).orderBy(
        F.col("records").desc(), F.col("topic"), F.col("key").asc_nulls_first()
    )
