"""Spark's Kafka source without a JVM: which connector the installed PySpark needs, the options
that log in as a client properties file says, and Java's failures as one line. The real read is
tests/pipeline/test_kafka_source_live.py."""

from __future__ import annotations

import importlib.metadata

from jbod_client import kafka_config
from jbod_local import kafka_clients
from jbod_pipeline import kafka_source


def test_the_connector_is_of_the_installed_spark_and_its_scala() -> None:
    assert kafka_source.scala_version(["py4j-0.10.jar", "spark-core_2.13-4.2.0.jar"]) == "2.13"
    assert kafka_source.scala_version(["spark-sql_2.13-4.2.0.jar"]) is None
    build = kafka_source.installed_spark()
    assert build.version == importlib.metadata.version("pyspark")
    assert str(build.connector()) == f"org.apache.spark:spark-sql-kafka-0-10_{build.scala}:{build.version}"
    assert build.jar_set().artifacts == (build.connector(),)


def test_options_read_the_whole_topic_as_the_user_of_the_properties_file() -> None:
    """The file `jbodctl local client-properties` prints, with a password JAAS must escape."""
    password = 'to"ken\\x'
    text = kafka_clients.client_properties(password)
    security = kafka_config.security_from_properties(kafka_config.parse_properties(text), source="f")
    options = kafka_source.read_options(
        bootstrap=("127.0.0.1:1", "127.0.0.1:2"), security=security, topic="t"
    )
    jaas = options.pop("kafka.sasl.jaas.config")
    assert options == {
        "kafka.bootstrap.servers": "127.0.0.1:1,127.0.0.1:2",
        "subscribe": "t",
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
    }
    assert jaas.startswith("org.apache.kafka.common.security.scram.ScramLoginModule required ")
    assert kafka_config.parse_jaas_options(jaas) == {"username": "admin", "password": password}
    plain = kafka_config.KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "pw")
    assert (
        kafka_source.read_options(bootstrap=("h:1",), security=plain, topic="t")["kafka.sasl.jaas.config"]
        == 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="pw";'
    )
    unsecured = kafka_source.read_options(
        bootstrap=("h:1",), security=kafka_config.KafkaSecurity("PLAINTEXT"), topic="t"
    )
    assert unsecured["kafka.security.protocol"] == "PLAINTEXT" and "kafka.sasl.mechanism" not in unsecured


def _describe(text: str) -> str | None:
    return kafka_source.describe_failure(text, topic="orders", bootstrap=("h:1", "h:2"), who="alice")


def test_java_failures_are_one_line() -> None:
    unknown = (
        "An error occurred while calling o51.parquet.\n: java.util.concurrent.ExecutionException: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host "
        "this topic-partition.\n\tat org.apache.kafka..."
    )
    assert _describe(unknown) == "topic 'orders' does not exist (asked h:1,h:2)"
    refused = (
        "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.SaslAuthenticationException: "
        "Authentication failed: Invalid username or password\n\tat ..."
    )
    assert (
        _describe(refused)
        == "login as alice refused by h:1,h:2: Authentication failed: Invalid username or password"
    )
    timeout = "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment.\n"
    assert (
        _describe(timeout) == "no Kafka broker answered at h:1,h:2: Timed out waiting for a node assignment."
    )
    missing = "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: kafka. SQLSTATE: 42K02"
    assert _describe(missing) == "Spark's Kafka source is not on Spark's class path (spark.jars)"
    assert _describe("java.lang.OutOfMemoryError: Java heap space") is None
