"""Producer and consumer run inside the kind cluster (a pod of the project's image), as a client would.

Copied into a ConfigMap and run as `python /workload/inpod.py produce|consume`; imports only the
image's own packages. Talks to the controller's Service for metadata and to the brokers through
their Service's per-pod DNS names. Writes one JSON object per line on stdout:

* produce (until the file /tmp/stop exists, then drains): {"e": "send", "s": seq, "p": partition},
  {"e": "ack", "s": seq, "o": offset}, {"e": "fail", "s": seq, "err": "..."},
  {"e": "retry", "s": [pending seqs of the partition]}, finally {"e": "done"};
* consume (every record up to each partition's high watermark at start):
  {"e": "rec", "p": partition, "o": offset, "v": "<value, latin-1>"}, finally {"e": "done"}.

Environment: CONTROLLER_URL, JBOD_TOKEN, TOPIC, PARTITIONS, RUN, RATE (records/s).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx

from jbod_client.consumer import Consumer
from jbod_client.controller import ControllerClient
from jbod_client.history import make_value
from jbod_client.producer import ProduceError, Producer, RecordMetadata

URL = os.environ["CONTROLLER_URL"]
TOKEN = os.environ["JBOD_TOKEN"]
TOPIC = os.environ["TOPIC"]
PARTITIONS = int(os.environ.get("PARTITIONS", "6"))
RUN = os.environ.get("RUN", "kind")
RATE = float(os.environ.get("RATE", "200"))
STOP = Path("/tmp/stop")


def emit(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def produce() -> None:
    producer = Producer(URL, token=TOKEN, acks=-1, delivery_timeout_ms=60_000, request_timeout_ms=5_000)
    pending: dict[int, dict[int, None]] = {}

    def on_retry(_topic: str, partition: int, _code: int) -> None:
        emit(e="retry", s=list(pending.get(partition, {})))

    producer.on_retry.append(on_retry)

    def done(seq: int, partition: int) -> object:
        def callback(future: asyncio.Future[RecordMetadata]) -> None:
            pending.get(partition, {}).pop(seq, None)
            if future.cancelled():
                emit(e="fail", s=seq, err="cancelled")
            elif (error := future.exception()) is not None:
                emit(e="fail", s=seq, err=str(error)[:160])
            else:
                emit(e="ack", s=seq, o=future.result().offset)

        return callback

    loop = asyncio.get_running_loop()
    tick = 0.05
    per_tick = max(1, round(RATE * tick))
    seq = 0
    next_tick = loop.time()
    try:
        while not STOP.exists():
            for _ in range(per_tick):
                partition = seq % PARTITIONS
                emit(e="send", s=seq, p=partition)
                pending.setdefault(partition, {})[seq] = None
                try:
                    future = await producer.send(TOPIC, make_value(RUN, seq, 100), partition=partition)
                except ProduceError as exc:
                    pending[partition].pop(seq, None)
                    emit(e="fail", s=seq, err=str(exc)[:160])
                else:
                    future.add_done_callback(done(seq, partition))  # type: ignore[arg-type]
                seq += 1
            next_tick = max(next_tick + tick, loop.time() - 1.0)
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
    finally:
        await producer.close()
        await asyncio.sleep(0)
    emit(e="done")


def high_watermarks() -> dict[int, int]:
    with ControllerClient(URL, token=TOKEN, timeout=10) as client:
        brokers = {b["brokerId"]: b for b in client.brokers()}
        partitions = client.describe_topic(TOPIC)["partitions"]
    out: dict[int, int] = {}
    for partition in partitions:
        listener = brokers[partition["leader"]]["listeners"][0]
        reply = httpx.get(
            f"http://{listener['host']}:{listener['port']}/v1/fetch",
            params={"topic": TOPIC, "partition": partition["partitionIndex"], "offset": 0, "maxBytes": 1},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        ).json()
        out[partition["partitionIndex"]] = int(reply["highWatermark"])
    return out


async def consume() -> None:
    until = high_watermarks()
    async with Consumer(URL, token=TOKEN, topic=TOPIC, start="earliest", max_wait_ms=200) as consumer:
        while not all(consumer.positions().get(p, 0) >= end for p, end in until.items()):
            for record in await consumer.poll(0.5):
                value = record.value.decode("latin-1") if record.value is not None else None
                emit(e="rec", p=record.partition, o=record.offset, v=value)
    emit(e="done")


if __name__ == "__main__":
    asyncio.run(produce() if sys.argv[1] == "produce" else consume())
