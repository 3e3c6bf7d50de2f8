"""Producer id blocks (`jbod_core.producer_ids`, Kafka's AllocateProducerIds): exact records, then
replay; the watermark only moves up, in the log and in snapshots."""

from __future__ import annotations

import pytest

from jbod_core import producer_ids, records
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, ReplayError
from jbod_core.messages import INT64_MAX, AllocateProducerIdsReply, AllocateProducerIdsRequest
from tests.core.support import Cluster, d


def _allocate(
    cluster: Cluster, broker_id: int, epoch: int | None = None
) -> tuple[list[records.Record], AllocateProducerIdsReply]:
    request = AllocateProducerIdsRequest(
        broker_id=broker_id, broker_epoch=cluster.epoch(broker_id) if epoch is None else epoch
    )
    return producer_ids.allocate_producer_ids(cluster.image, request)


def test_blocks_of_1000_follow_each_other_across_brokers() -> None:
    cluster = Cluster()
    one = cluster.add_broker(1, [d(1)])
    two = cluster.add_broker(2, [d(2)], unfence=False)  # fencing is no obstacle (as Kafka)
    produced, reply = _allocate(cluster, 1)
    assert produced == [records.ProducerIdsRecord(broker_id=1, broker_epoch=one, next_producer_id=1000)]
    assert (reply.error_code, reply.producer_id_start, reply.producer_id_len) == (0, 0, 1000)
    cluster.apply(produced)
    produced, reply = _allocate(cluster, 2)
    assert produced == [records.ProducerIdsRecord(broker_id=2, broker_epoch=two, next_producer_id=2000)]
    assert (reply.producer_id_start, reply.producer_id_len) == (1000, 1000)
    cluster.apply(produced)
    assert cluster.image.next_producer_id == 2000
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_an_unknown_broker_is_102_and_a_wrong_epoch_77() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)])
    for broker_id, broker_epoch, code in ((7, 0, ErrorCode.BROKER_ID_NOT_REGISTERED), (1, epoch + 1, 77)):
        produced, reply = _allocate(cluster, broker_id, broker_epoch)
        assert produced == []
        assert (reply.error_code, reply.producer_id_start, reply.producer_id_len) == (code, -1, 0)
        assert reply.error_message
    assert cluster.image.next_producer_id == 0


def test_a_block_past_the_int64_limit_is_refused() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)])
    last = INT64_MAX - producer_ids.BLOCK_SIZE
    cluster.apply([records.ProducerIdsRecord(broker_id=1, broker_epoch=epoch, next_producer_id=last)])
    produced, reply = _allocate(cluster, 1)
    assert reply.producer_id_start == last and produced[0].next_producer_id == INT64_MAX  # type: ignore[union-attr]
    cluster.apply(produced)
    produced, reply = _allocate(cluster, 1)
    assert (produced, reply.error_code) == ([], ErrorCode.UNKNOWN_SERVER_ERROR)


@pytest.mark.parametrize("next_id", [999, 1000])
def test_replay_refuses_a_watermark_that_does_not_move_up(next_id: int) -> None:
    image = ClusterImage()
    image.replay(records.ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000), 0)
    with pytest.raises(ReplayError, match="not above"):
        image.replay(records.ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=next_id), 1)
    assert image.next_producer_id == 1000


def test_a_snapshot_keeps_the_watermark() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    assert not any(isinstance(r, records.ProducerIdsRecord) for r in cluster.image.to_records())
    for _ in range(3):
        cluster.apply(_allocate(cluster, 1)[0])
    snapshot = cluster.image.to_records()
    assert snapshot[-1] == records.ProducerIdsRecord(
        broker_id=1, broker_epoch=cluster.epoch(1), next_producer_id=3000
    )
    restored = ClusterImage()
    for record in snapshot:
        restored.replay(record, 9)
    assert restored.canonical() == cluster.image.canonical()
    assert (
        producer_ids.allocate_producer_ids(
            restored, AllocateProducerIdsRequest(broker_id=1, broker_epoch=cluster.epoch(1))
        )[1].producer_id_start
        == 3000
    )
