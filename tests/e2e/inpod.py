"""Kafka clients run inside the kind cluster (pods of the project's image), as an application runs them.

Copied into a ConfigMap and run as `python /workload/inpod.py produce|consume`; imports only the
image's own packages (confluent-kafka, and `jbod_client.history` for the record values). Both log
in with the client Secret's `librdkafka.properties` (mounted at /etc/kafka-client: the cluster's
bootstrap Service and the user `client`). Each writes one JSON object per line on stdout:

* produce: an idempotent producer (acks=all) until the file /tmp/stop exists, then it flushes:
  {"e": "send", "s": seq, "p": partition}, {"e": "ack", "s": seq, "o": offset},
  {"e": "fail", "s": seq, "err": "..."}, finally {"e": "done"}; each error librdkafka reports
  to its error callback (the reason of a fatal one included) as {"e": "error", "err": "...",
  "fatal": bool}. It reports no retries: with idempotence a record is never written twice, so any
  duplicate read back is a problem;
* consume: a member of the consumer group GROUP (cooperative-sticky), committing after each batch
  it emits; once /tmp/stop exists it reads on until the group's committed offsets reach every
  partition's high watermark as it was then: {"e": "assigned", "p": [partitions]} after each
  rebalance, {"e": "rec", "p": partition, "o": offset, "v": "<value, latin-1>"}, finally
  {"e": "done"}.

Environment: TOPIC, PARTITIONS, RUN, RATE (records/s), GROUP.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from jbod_client.history import make_value

TOPIC = os.environ["TOPIC"]
PARTITIONS = int(os.environ.get("PARTITIONS", "6"))
RUN = os.environ.get("RUN", "kind")
RATE = float(os.environ.get("RATE", "200"))
GROUP = os.environ.get("GROUP", "kind-readers")
STOP = Path("/tmp/stop")
PROPERTIES = Path("/etc/kafka-client/librdkafka.properties")


def emit(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def client_config() -> dict[str, Any]:
    lines = PROPERTIES.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def report_error(error: KafkaError) -> None:
    """librdkafka's error callback: why the client failed, which a fatal error's later
    `produce()` exceptions no longer say."""
    emit(e="error", err=str(error)[:300], fatal=error.fatal())


def produce() -> None:
    producer = Producer(
        {
            **client_config(),
            "enable.idempotence": True,
            "acks": "all",
            "delivery.timeout.ms": 120_000,
            "error_cb": report_error,
        }
    )
    pending: set[int] = set()

    def delivered(seq: int) -> Any:
        def callback(error: KafkaError | None, message: Message) -> None:
            pending.discard(seq)
            if error is not None:
                emit(e="fail", s=seq, err=str(error)[:160])
            else:
                emit(e="ack", s=seq, o=message.offset())

        return callback

    tick = 0.05
    per_tick = max(1, round(RATE * tick))
    seq = 0
    next_tick = time.monotonic()
    while not STOP.exists():
        for _ in range(per_tick):
            partition = seq % PARTITIONS
            emit(e="send", s=seq, p=partition)
            pending.add(seq)
            while True:
                try:
                    producer.produce(
                        TOPIC, make_value(RUN, seq, 100), partition=partition, on_delivery=delivered(seq)
                    )
                    break
                except BufferError:  # the local queue is full while brokers catch up
                    producer.poll(0.1)
                except KafkaException:
                    # A fatal error: its reason reaches the error callback at the next poll.
                    producer.poll(1.0)
                    raise
            seq += 1
        producer.poll(0)
        next_tick = max(next_tick + tick, time.monotonic() - 1.0)
        # fixed wait: the producer's pace (RATE records a second, in ticks), not a wait for an event
        time.sleep(max(0.0, next_tick - time.monotonic()))
    producer.flush(180)
    for seq in sorted(pending):
        emit(e="fail", s=seq, err="not delivered when the producer stopped")
    emit(e="done")


def consume() -> None:
    consumer = Consumer(
        {
            **client_config(),
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    assigned: set[int] = set()

    def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned.update(p.partition for p in partitions)
        emit(e="assigned", p=sorted(assigned))

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned.difference_update(p.partition for p in partitions)
        emit(e="assigned", p=sorted(assigned))

    consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
    ends: dict[int, int] | None = None
    checked = 0.0
    while True:
        messages = consumer.consume(num_messages=500, timeout=0.5)
        for message in messages:
            if message.error() is None:
                value = message.value()
                emit(
                    e="rec",
                    p=message.partition(),
                    o=message.offset(),
                    v=value.decode("latin-1") if value else None,
                )
        if messages:
            # A rebalance in between refuses the commit: the next owner reads these again, at the
            # same offsets (the history counts an offset read twice once).
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)
        if ends is None and STOP.exists():
            ends = {
                p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                for p in range(PARTITIONS)
            }
        if ends is not None and time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                break
    consumer.close()
    emit(e="done")


if __name__ == "__main__":
    produce() if sys.argv[1] == "produce" else consume()
