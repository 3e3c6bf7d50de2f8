"""confluent-kafka (librdkafka) as this project's tools use it: one configuration, librdkafka's
errors collected instead of printed, a topic's partitions found before anything is sent, and
errors named on one line.

librdkafka retries everything itself (connections, metadata, produce requests) and reports
trouble through callbacks served by `poll`; a command-line tool wants the opposite: to know at
once that a topic does not exist or a password is wrong, and to say so on one line.

Guarantees:
* `create` makes a client, a configuration librdkafka refuses being one `ClientError` line;
  `client_config` never lets librdkafka write to stderr: its log lines go to the
  `jbod_client.rdkafka.librdkafka` logger (a `NullHandler`, so nothing shows unless an
  application configures logging) and its errors to an `ErrorLog`.
* `ErrorLog` keeps the last error of each broker address, the last error overall (not replaced by
  librdkafka's summary "N/N brokers are down") and the first authentication or fatal error, as
  one-line texts.
* `topic_partitions` answers within `timeout` seconds: the partitions of a topic and their
  leaders' ids and addresses, or `UnknownTopicError` (the brokers still said so after
  `UNKNOWN_TOPIC_GRACE_SECONDS`: a topic created a moment ago reaches every broker's metadata a
  few milliseconds after the controller confirmed it), or `KafkaAuthenticationError` as soon as a
  login is refused, or `KafkaUnreachableError` naming the bootstrap servers and the last error
  from them: once every one of them refused the connection (after
  `REFUSED_GRACE_SECONDS`, the time librdkafka takes to try each; the error's `address` is the
  first, and its cause a `ConnectionRefusedError`, so that jbodctl's hints can name a stopped
  local broker), else when `timeout` ends.
* `ProducerStatistics` (a producer's `stats_cb`) keeps its idempotence state, its producer id and
  the requests it retried, from librdkafka's statistics: an idempotent producer that never got a
  producer id is told apart from one whose records timed out for other reasons.
* `error_text` is `NAME (errorCode N): message` for a librdkafka error, the shape of every other
  error line of jbodctl.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from jbod_client.controller import ClientError
from jbod_client.kafka_config import KafkaTarget
from jbod_client.kafka_errors import KafkaAuthenticationError, KafkaUnreachableError
from jbod_client.metadata import UnknownTopicError

T = TypeVar("T")

#: librdkafka's log lines, when an application wants them (jbodctl does not configure logging).
LIBRDKAFKA_LOG: Final = logging.getLogger("jbod_client.rdkafka.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())

# librdkafka's local error codes this module reacts to (confluent_kafka.KafkaError constants).
_AUTHENTICATION: Final = -169
_ALL_BROKERS_DOWN: Final = -187
_UNKNOWN_TOPIC: Final = 3
_LOCAL_UNKNOWN_TOPIC: Final = -188
#: How long an unknown topic is asked for again before it is called unknown.
UNKNOWN_TOPIC_GRACE_SECONDS: Final = 1.0
#: How long every bootstrap server may refuse connections before the listeners are called down
#: (librdkafka tries each within about half a second).
REFUSED_GRACE_SECONDS: Final = 1.0
#: `sasl_plaintext://127.0.0.1:9092/1: message` or `127.0.0.1:9092/bootstrap: message`.
_BROKER_PREFIX: Final = re.compile(r"^(?:[a-z_]+://)?(?P<address>[^/\s]+)/(?P<node>\w+): ")


def error_text(error: Any) -> str:
    """`NOT_ENOUGH_REPLICAS (errorCode 19): Broker: Not enough in-sync replicas` of a
    `confluent_kafka.KafkaError`."""
    return f"{error.name()} (errorCode {error.code()}): {error.str()}"


@dataclass
class ErrorLog:
    """librdkafka's `error_cb` (the module's guarantee); served by the client's `poll`."""

    last: str | None = None
    authentication: str | None = None
    fatal: str | None = None
    by_address: dict[str, str] = field(default_factory=dict)

    def __call__(self, error: Any) -> None:
        text = str(error.str())
        if error.code() != _ALL_BROKERS_DOWN or self.last is None:
            self.last = text  # "1/1 brokers are down" says less than the error before it
        match = _BROKER_PREFIX.match(text)
        if match is not None:
            self.by_address[match.group("address")] = text
        if error.code() == _AUTHENTICATION and self.authentication is None:
            self.authentication = text
        if error.fatal() and self.fatal is None:
            self.fatal = error_text(error)

    def refused(self, address: str) -> bool:
        """Whether the last error from `address` (`host:port`) was a refused connection."""
        return "Connection refused" in self.by_address.get(address, "")


@dataclass
class ProducerStatistics:
    """librdkafka's `stats_cb` of a producer (`statistics.interval.ms` sets how often)."""

    idempotence: str | None = None  # librdkafka's idemp_state: "Assigned" once it has a producer id
    producer_id: int = -1
    retries: int = 0  # requests retried, over every broker

    def __call__(self, text: str) -> None:
        stats = json.loads(text)
        eos = stats.get("eos") or {}
        self.idempotence = eos.get("idemp_state")
        self.producer_id = int(eos.get("producer_id", -1))
        self.retries = sum(int(b.get("txretries", 0)) for b in (stats.get("brokers") or {}).values())

    @property
    def waiting_for_producer_id(self) -> bool:
        """An idempotent producer that has no producer id yet (librdkafka holds its records)."""
        return self.idempotence not in (None, "Init", "Assigned") and self.producer_id < 0


def create(factory: Callable[[dict[str, Any]], T], config: dict[str, Any]) -> T:
    """`factory(config)` (confluent-kafka's Producer or Consumer), a configuration librdkafka
    refuses raised as one `ClientError` line instead of its KafkaException."""
    from confluent_kafka import KafkaException

    try:
        return factory(config)
    except KafkaException as exc:
        raise ClientError(f"librdkafka refused its configuration: {exc.args[0].str()}") from None


def client_config(target: KafkaTarget, errors: ErrorLog, **settings: Any) -> dict[str, Any]:
    """librdkafka configuration for `target`, reporting into `errors`, with `settings` on top."""
    return {
        "bootstrap.servers": ",".join(target.bootstrap),
        **target.security.librdkafka_config(),
        "client.id": "jbodctl",
        "error_cb": errors,
        "logger": LIBRDKAFKA_LOG,
        **settings,
    }


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """What Metadata says of a topic: partition → leader id (-1: none), broker id → address."""

    leaders: dict[int, int]
    brokers: dict[int, str]

    def leader_address(self, partition: int) -> str | None:
        leader = self.leaders.get(partition, -1)
        return self.brokers.get(leader) if leader >= 0 else None


def topic_partitions(
    client: Any, topic: str, *, target: KafkaTarget, errors: ErrorLog, timeout: float
) -> TopicLayout:
    """The topic's partitions as Metadata says (the module's guarantee); `client` is a
    confluent-kafka Producer or Consumer made with `client_config(target, errors)`."""
    from confluent_kafka import KafkaException

    started = time.monotonic()
    deadline = started + timeout
    unknown_since: float | None = None
    while True:
        client.poll(0)  # serves error_cb
        if errors.authentication is not None:
            raise KafkaAuthenticationError(
                f"the Kafka listener refused {target.security.describe()}: {errors.authentication}"
            )
        try:
            metadata = client.list_topics(topic, timeout=max(0.05, min(0.5, deadline - time.monotonic())))
        except KafkaException:
            metadata = None
        if metadata is not None:
            found = metadata.topics.get(topic)
            error = None if found is None else found.error
            if error is not None and error.code() in (_UNKNOWN_TOPIC, _LOCAL_UNKNOWN_TOPIC):
                now = time.monotonic()
                unknown_since = now if unknown_since is None else unknown_since
                if now >= min(deadline, unknown_since + UNKNOWN_TOPIC_GRACE_SECONDS):
                    raise UnknownTopicError(topic)
            if found is not None and error is None:
                return TopicLayout(
                    leaders={int(p): int(meta.leader) for p, meta in found.partitions.items()},
                    brokers={int(b): f"{meta.host}:{meta.port}" for b, meta in metadata.brokers.items()},
                )
        if time.monotonic() - started >= REFUSED_GRACE_SECONDS and all(map(errors.refused, target.bootstrap)):
            servers = ",".join(target.bootstrap)
            every = "it" if len(target.bootstrap) == 1 else "each"
            raise KafkaUnreachableError(
                f"no Kafka listener of {servers} answered: {every} refused the connection ({errors.last})",
                address=target.bootstrap[0],
            ) from ConnectionRefusedError(errno.ECONNREFUSED, str(errors.last))
        if time.monotonic() >= deadline:
            client.poll(0)  # the errors librdkafka queued meanwhile say why
            # Nothing librdkafka reported: the login may well have worked, Metadata was not answered.
            why = errors.last or f"no answer to Metadata for {topic} (as {target.security.describe()})"
            raise KafkaUnreachableError(
                f"no Kafka listener of {','.join(target.bootstrap)} answered within {timeout:g} s: {why}"
            )
        client.poll(0.1)


def describe_partition_trouble(layout: TopicLayout, partition: int, errors: ErrorLog) -> str | None:
    """Why a partition may not be served, for a one-line error: it has no leader, or the last error
    librdkafka had from its leader's address; None when nothing says it is in trouble (a slow
    answer is not one)."""
    if layout.leaders.get(partition, -1) < 0:
        return "it has no leader"
    address = layout.leader_address(partition)
    return errors.by_address.get(address) if address is not None else None
