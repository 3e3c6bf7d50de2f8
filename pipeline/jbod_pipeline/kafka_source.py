"""Spark's own Kafka source (`spark-sql-kafka-0-10`) on the brokers' Kafka listeners: its jars,
the options that read one topic as a Kafka client properties file says, and its failures as one
line. The read itself (`spark.read.format("kafka")`) is `jobs.run_topic_stats`'s.

Guarantees:
* The connector is `org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark>` for the installed
  PySpark (`installed_spark`: its version from the package metadata, its Scala binary version
  from the name of its `spark-core` jar), because the connector must be of the Spark that runs
  it. Nothing here imports PySpark.
* `ensure_jars` resolves the connector and its runtime dependencies with Maven from Maven Central
  once (`jbod_runtime.maven_jars`: a lock, a verified marker) into `<cache>/<spark>/libs/`, where
  `<cache>` is `$JBOD_SPARK_CACHE` or `~/.cache/jbod-spark`; a run passes those local files as
  `spark.jars`, so Spark itself fetches nothing at run time (no `spark.jars.packages`). A jar that
  cannot be resolved is a `ConnectorError` of one line.
* `read_options` is a batch read of the whole topic (`startingOffsets` earliest, `endingOffsets`
  latest) logging in as the `KafkaSecurity` read from the properties file: the Java client's
  settings of `jbod_client.kafka_config` prefixed `kafka.` (`kafka.security.protocol`,
  `kafka.sasl.mechanism`, `kafka.sasl.jaas.config` with Kafka's own login module).
* `describe_failure` turns the Java exception behind a failed read (in a Py4J or Spark error's
  text) into one line: an unknown topic, a refused login, no broker answering, the connector
  missing; anything else is None (left to the caller).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from jbod_client import kafka_config
from jbod_pipeline import errors
from jbod_runtime import maven_jars

GROUP: Final = "org.apache.spark"
CONNECTOR: Final = "spark-sql-kafka-0-10"
# Kafka's rule for topic names (org.apache.kafka.common.internals.Topic).
TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class ConnectorError(errors.PipelineError):
    """Spark's Kafka source cannot be put on the class path (not resolvable, Maven missing)."""


class TopicReadError(errors.PipelineError):
    """Reading the topic failed for a reason the user can fix (unknown topic, refused login)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SparkBuild:
    """The installed Spark: its version and the Scala binary version it was built for."""

    version: str
    scala: str

    def connector(self) -> maven_jars.Artifact:
        return maven_jars.Artifact(GROUP, f"{CONNECTOR}_{self.scala}", self.version)

    def jar_set(self) -> maven_jars.JarSet:
        return maven_jars.JarSet((self.connector(),))


def scala_version(jar_names: Iterable[str]) -> str | None:
    """The Scala binary version in the name of Spark's core jar (`spark-core_2.13-4.2.0.jar`)."""
    for name in jar_names:
        match = re.fullmatch(r"spark-core_(\d+\.\d+)-.+\.jar", name)
        if match:
            return match.group(1)
    return None


def installed_spark() -> SparkBuild:
    """The Spark that `jbod-pipeline` runs: PySpark's version, the Scala of its jars (those of
    `$SPARK_HOME/jars` when `SPARK_HOME` is set, as PySpark's launcher uses them)."""
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise errors.MissingRuntimeError(
            "Spark's Kafka source needs PySpark (the pipeline extra): pip install 'jbod-operator[pipeline]'"
        ) from None
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        jars = Path(spark_home) / "jars"
    else:
        spec = importlib.util.find_spec("pyspark")
        origin = spec.origin if spec else None
        jars = Path(origin).parent / "jars" if origin else Path("pyspark-not-found")
    scala = scala_version(p.name for p in jars.glob("spark-core_*.jar"))
    if scala is None:
        raise ConnectorError(f"cannot tell PySpark {version}'s Scala version: no spark-core jar in {jars}")
    return SparkBuild(version, scala)


def cache_root() -> Path:
    """`$JBOD_SPARK_CACHE` or `~/.cache/jbod-spark`."""
    override = os.environ.get("JBOD_SPARK_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "jbod-spark"


def ensure_jars(build: SparkBuild, cache: Path | None = None) -> maven_jars.Resolved:
    """The connector's jars for `build`, resolved into the cache unless already there."""
    cache = cache or cache_root()
    try:
        return maven_jars.ensure(build.jar_set(), cache / build.version, maven_repo=cache / "m2")
    except maven_jars.ResolutionError as exc:
        raise ConnectorError(f"Spark's Kafka source {build.connector()} is not available: {exc}") from None


def read_options(
    *, bootstrap: Sequence[str], security: kafka_config.KafkaSecurity, topic: str
) -> dict[str, str]:
    """The options of `spark.read.format("kafka")` reading all of `topic` as `security`."""
    return {
        "kafka.bootstrap.servers": ",".join(bootstrap),
        "subscribe": topic,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        **{f"kafka.{key}": value for key, value in security.java_config().items()},
    }


def _message(text: str, exception: str) -> str:
    """The message after the last `...<exception>: ` in `text` (its first line), or ''."""
    found = re.findall(rf"{re.escape(exception)}: ([^\n]*)", text)
    return found[-1].strip() if found else ""


def describe_failure(text: str, *, topic: str, bootstrap: Sequence[str], who: str) -> str | None:
    """One line for a failed read whose error text is `text` (the module's guarantee)."""
    servers = ",".join(bootstrap)
    if "UnknownTopicOrPartitionException" in text:
        return f"topic {topic!r} does not exist (asked {servers})"
    for exception in ("SaslAuthenticationException", "AuthenticationException"):
        if exception in text:
            detail = _message(text, exception)
            return f"login as {who} refused by {servers}" + (f": {detail}" if detail else "")
    if "TopicAuthorizationException" in text:
        return f"{who} may not read topic {topic!r}"
    if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source: kafka" in text:
        return "Spark's Kafka source is not on Spark's class path (spark.jars)"
    if "org.apache.kafka.common.errors.TimeoutException" in text:
        detail = _message(text, "org.apache.kafka.common.errors.TimeoutException")
        return f"no Kafka broker answered at {servers}" + (f": {detail}" if detail else "")
    return None
