"""The broker's local copy of the metadata image: exact round trip, damaged copies ignored, and a
restart that fetches only the tail."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jbod_agent.lifecycle import metadata_cache
from jbod_core import records
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage
from tests.agent.runtime_support import FakeClock, InProcessController, make_harness
from tests.agent.support import CLUSTER, NODE

TOPIC = Uuid(0x0123_4567_89AB_CDEF, 0x2222)


def image_with_topic(partitions: int) -> ClusterImage:
    image = ClusterImage()
    produced: list[records.Record] = [
        records.TopicRecord(name="t", topic_id=TOPIC, configs={"retention.ms": "1000"})
    ]
    for index in range(partitions):
        produced.append(
            records.PartitionRecord(
                topic_id=TOPIC,
                partition_id=index,
                replicas=(NODE, 2),
                isr=(NODE,),
                leader=NODE,
                leader_epoch=3,
                partition_epoch=4,
                directories=(Uuid(0x5001, 0x78), Uuid(0, 0)),
            )
        )
    for offset, record in enumerate(produced):
        image.replay(record, offset)
    return image


def as_data(image: ClusterImage) -> list[dict[str, object]]:
    return [{"type": r.TYPE, "data": r.to_data()} for r in image.iter_records()]


def test_round_trip_is_exact() -> None:
    image = image_with_topic(50)
    data = metadata_cache.encode(image, cluster_id=CLUSTER, offset=image.end_offset - 1, checksum=12345)
    cached = metadata_cache.decode(data, cluster_id=CLUSTER)
    assert (cached.offset, cached.checksum) == (image.end_offset - 1, 12345)
    assert cached.image.end_offset == image.end_offset
    assert as_data(cached.image) == as_data(image)
    cached.image.check_indexes()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d[:-7], "complete line"),
        (lambda d: d.replace(b'"version":1', b'"version":9'), "format version 9"),
        (lambda d: d.replace(CLUSTER.encode(), b"other-cluster"), "cluster id 'other-cluster'"),
        (lambda d: b"\n".join(d.split(b"\n")[:-3]) + b"\n", "records where the header says"),
        (lambda d: d.replace(b'"type":"PartitionRecord"', b'"type":"NoSuchRecord"', 1), "does not decode"),
        (lambda d: d.replace(b"{", b"[", 2), "unreadable"),
    ],
)
def test_a_damaged_copy_is_refused_with_a_reason(damage, message: str) -> None:  # type: ignore[no-untyped-def]
    image = image_with_topic(5)
    data = metadata_cache.encode(image, cluster_id=CLUSTER, offset=5, checksum=None)
    with pytest.raises(ValueError, match=message):
        metadata_cache.decode(damage(data), cluster_id=CLUSTER)


def test_load_ignores_a_damaged_copy_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert metadata_cache.load(tmp_path, cluster_id=CLUSTER) is None  # no copy: silent
    (tmp_path / metadata_cache.FILE).write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING):
        assert metadata_cache.load(tmp_path, cluster_id=CLUSTER) is None
    assert "Ignored the metadata cache" in caplog.text


@pytest.mark.asyncio
async def test_a_restart_fetches_only_the_tail(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = InProcessController(clock)
    controller.apply(list(image_with_topic(30).iter_records()))
    first = make_harness(tmp_path, controller=controller, clock=clock)
    first.start()
    await first.until(lambda: first.agent.state.fenced is False, within=10.0)
    first.agent.request_stop()
    assert await first.exit_code(within=10.0) == 0
    saved = metadata_cache.load(first.metadata_dir, cluster_id=CLUSTER)
    assert saved is not None and saved.offset == first.agent.state.applied_offset

    # The same broker starts again on the same disks; the controller's log grew meanwhile.
    controller.apply([records.TopicRecord(name="later", topic_id=Uuid(0x77, 0x77), configs={})])
    fetched: list[int] = []
    original = controller.metadata

    async def recording(**kwargs):  # type: ignore[no-untyped-def]
        fetched.append(kwargs["from_offset"])
        return await original(**kwargs)

    controller.metadata = recording  # type: ignore[method-assign]
    second = make_harness(tmp_path, controller=controller, clock=clock, reuse=True)
    second.start()
    await second.until(lambda: second.agent.state.fenced is False, within=10.0)
    assert fetched[0] == saved.offset + 1  # not offset 0
    assert "later" in second.agent.state.image.topic_ids_by_name
    await second.until(lambda: second.agent.state.applied_offset + 1 == len(controller.log), within=10.0)
    assert as_data(second.agent.state.image) == as_data(controller.image)
    await second.stop()
