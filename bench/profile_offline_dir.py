"""In-process reproduction of benchmark 1's offline-dir heartbeat, for finding where time goes.

Builds the same cluster as `bench.offline_dir` (3 brokers x 2 dirs, N partitions with RF 3, every
placement confirmed) with the real decision code (`jbod_core.topics`, `jbod_core.assignments`) and
the real `FileRecordLog`, then runs the heartbeat that reports broker 1's dir A offline the way the
controller's writer does (decide, encode + replay each record, append, fsync), timing each phase,
the garbage collector's pauses (through `gc.callbacks`), and once more under cProfile.

    python -m bench.profile_offline_dir [--partitions 100000] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import io
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from jbod_controller.record_log import FileRecordLog
from jbod_core import assignments, brokers, records, topics
from jbod_core.frames import encode_entry
from jbod_core.ids import random_uuid
from jbod_core.image import ClusterImage
from jbod_core.messages import (
    AssignReplicasToDirsRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    RegisterBrokerRequest,
)
from jbod_core.sessions import Session

TOPIC_PARTITIONS = 10_000
Decide = Callable[[ClusterImage], tuple[list[records.Record], Any]]


class GcTimer:
    """Total time spent in the cyclic garbage collector, per generation, while installed."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)

    def text(self) -> str:
        return (
            ", ".join(f"gen{g}: {len(p)} x = {sum(p) * 1000:.0f} ms" for g, p in self.pauses.items() if p)
            or "none"
        )


def _right_sized_encode(offset: int, record_type: str, data: dict[str, Any]) -> bytes:
    """Experiment: `encode_entry` copied into an exactly sized bytes object. orjson >= 3.12 returns
    bytes whose allocation is ~4 KiB however short the JSON (see `malloc_usable_size`), so keeping
    100,000 of them in a batch touches ~400 MiB."""
    return bytes(memoryview(encode_entry(offset, record_type, data)))


class Controller:
    """The writer's loop without asyncio: decide, encode + replay, append, fsync."""

    def __init__(self, directory: Path, *, right_size: bool = False) -> None:
        self.encode = _right_sized_encode if right_size else encode_entry
        self.image = ClusterImage()
        self.log = FileRecordLog(directory)
        self.log.recover()
        self.sessions: dict[int, Session] = {}
        self.phases: dict[str, float] = {}

    def commit(self, decide: Decide) -> Any:
        t0 = time.perf_counter()
        produced, reply = decide(self.image)
        t1 = time.perf_counter()
        entries = []
        for record in produced:
            offset = self.image.end_offset
            entries.append(self.encode(offset, record.TYPE, record.to_data()))
            self.image.replay(record, offset)
        t2 = time.perf_counter()
        self.log.append(entries)
        self.log.flush()
        t3 = time.perf_counter()
        self.phases = {"decide": t1 - t0, "encode+replay": t2 - t1, "write+fsync": t3 - t2}
        return reply, len(produced)


def build(controller: Controller, partitions: int, rng: random.Random) -> dict[int, tuple[Any, Any]]:
    sessions = controller.sessions

    def register(request: RegisterBrokerRequest) -> Decide:
        return lambda image: brokers.register_broker(
            image, sessions, request, cluster_id="bench", now=0.0, session_timeout=1e9
        )

    def heartbeat(request: BrokerHeartbeatRequest) -> Decide:
        return lambda image: brokers.broker_heartbeat(image, sessions, request)

    def create(request: CreateTopicRequest) -> Decide:
        return lambda image: topics.create_topic(image, request, rng=rng)

    def assign(request: AssignReplicasToDirsRequest) -> Decide:
        return lambda image: assignments.assign_replicas_to_dirs(image, request)

    dirs = {b: (random_uuid(rng), random_uuid(rng)) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        controller.commit(
            register(
                RegisterBrokerRequest(
                    broker_id=b, cluster_id="bench", incarnation_id=random_uuid(rng), log_dirs=list(dirs[b])
                )
            )
        )
        sessions[b] = Session(last_contact=0.0)
        epoch = controller.image.brokers[b].broker_epoch
        controller.commit(
            heartbeat(BrokerHeartbeatRequest(broker_id=b, broker_epoch=epoch, current_metadata_offset=10**9))
        )
    topic_ids = []
    for t in range(-(-partitions // TOPIC_PARTITIONS)):
        count = min(TOPIC_PARTITIONS, partitions - t * TOPIC_PARTITIONS)
        assignment = [[(t * TOPIC_PARTITIONS + p + k) % 3 + 1 for k in range(3)] for p in range(count)]
        reply, _ = controller.commit(
            create(CreateTopicRequest(name=f"bench-{t}", replica_assignment=assignment))
        )
        topic_ids.append(str(reply.topic_id))
    for b in (1, 2, 3):
        epoch = controller.image.brokers[b].broker_epoch
        a, other = (str(d) for d in dirs[b])
        for start in range(0, partitions, 2250):
            grouped: dict[str, dict[str, list[dict[str, int]]]] = {}
            for index in range(start, min(partitions, start + 2250)):
                if b == 1:
                    d = a
                elif b == 2:
                    d = other if index >= partitions - partitions // 10 else a
                else:
                    d = a if index % 2 == 0 else other
                topic, part = divmod(index, TOPIC_PARTITIONS)
                grouped.setdefault(d, {}).setdefault(topic_ids[topic], []).append({"partitionIndex": part})
            body = {
                "brokerId": b,
                "brokerEpoch": epoch,
                "directories": [
                    {"id": d, "topics": [{"topicId": t, "partitions": p} for t, p in ts.items()]}
                    for d, ts in grouped.items()
                ],
            }
            controller.commit(assign(AssignReplicasToDirsRequest.model_validate(body)))
    return dirs


def offline_heartbeat(controller: Controller, broker_id: int, directory: Any) -> Callable[[], Any]:
    epoch = controller.image.brokers[broker_id].broker_epoch
    request = BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=10**9, offline_log_dirs=[directory]
    )
    return lambda: controller.commit(
        lambda image: brokers.broker_heartbeat(image, controller.sessions, request)
    )


def orjson_allocation() -> str:
    """How many bytes the allocator really holds for one encoded record (glibc only)."""
    entry = encode_entry(
        123_456,
        "PartitionChangeRecord",
        {
            "topicId": "AAAAAAAAAAAAAAAAAAAAAA",
            "partitionId": 7,
            "partitionEpoch": 3,
            "isr": [2, 3],
            "leader": 2,
        },
    )
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_usable_size.restype = ctypes.c_size_t
        libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
        held = f"{libc.malloc_usable_size(id(entry)):,} bytes held by malloc"
    except (OSError, AttributeError):
        held = "malloc_usable_size unavailable"
    return f"orjson {orjson.__version__}: an encoded record of {len(entry)} bytes -> {held}"


def profile_offline_dir(partitions: int, *, top: int = 25) -> None:
    print(f"\n-- in-process reproduction: {partitions:,} partitions x RF 3, broker 1 dir A offline")
    print(f"   ({orjson_allocation()})")
    rng = random.Random(858)
    with tempfile.TemporaryDirectory(prefix="jbod-bench-profile-") as tmp:
        modes = (
            "as the controller does it",
            "experiment: gc.freeze() first",
            "experiment: right-sized entries",
            "experiment: both",
            "cProfile",
        )
        for number, mode in enumerate(modes):
            controller = Controller(
                Path(tmp) / str(number), right_size="right-sized" in mode or "both" in mode
            )
            started = time.perf_counter()
            dirs = build(controller, partitions, rng)
            built = time.perf_counter() - started
            cases = [
                (
                    f"broker 2 dir B ({partitions // 10:,} replicas)",
                    offline_heartbeat(controller, 2, dirs[2][1]),
                ),
                (f"broker 1 dir A ({partitions:,} replicas)", offline_heartbeat(controller, 1, dirs[1][0])),
            ]
            if "freeze" in mode or "both" in mode:
                gc.collect()
                gc.freeze()
            print(f"   [{mode}] cluster built in {built:.1f} s")
            for label, heartbeat in cases:
                if mode == "cProfile":
                    profiler = cProfile.Profile()
                    profiler.enable()
                    heartbeat()
                    profiler.disable()
                    out = io.StringIO()
                    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
                    print(f"     cProfile of the heartbeat for {label} (by own time, top {top}):")
                    print("\n".join("       " + line for line in out.getvalue().splitlines() if line.strip()))
                    continue
                with GcTimer() as gc_timer:
                    started, cpu = time.perf_counter(), time.process_time()
                    _, count = heartbeat()
                    total, cpu = time.perf_counter() - started, time.process_time() - cpu
                phases = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in controller.phases.items())
                print(
                    f"     {label}: {total * 1000:.0f} ms (CPU {cpu * 1000:.0f} ms) for {count:,} records "
                    f"({phases}); gc pauses: {gc_timer.text()}"
                )
            gc.unfreeze()
            controller.log.close()
            del controller
            gc.collect()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    profile_offline_dir(args.partitions, top=args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
