"""The broker follows the admin extensions' records (docs/api.md): config changes, SCRAM
credentials and producer-id blocks reach its image through the metadata log, and survive its
local copy of the image across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from jbod_agent.lifecycle import metadata_cache
from jbod_core import records
from jbod_core.image import ClusterImage, ScramCredential
from tests.agent.runtime_support import FakeClock, InProcessController, make_harness
from tests.agent.support import CLUSTER, NODE
from tests.agent.test_metadata_cache import TOPIC, image_with_topic

CREDENTIAL = records.UserScramCredentialRecord(
    name="alice", mechanism=2, salt=b"salt", stored_key=b"s" * 64, server_key=b"k" * 64, iterations=4096
)


def _check(image: ClusterImage) -> None:
    assert image.topics[TOPIC].configs == {"segment.bytes": "8192"}
    assert image.scram_credential("alice", 2) == ScramCredential(b"salt", b"s" * 64, b"k" * 64, 4096)
    assert image.scram_credential("bob", 2) is None
    assert image.next_producer_id == 2000


@pytest.mark.asyncio
async def test_the_broker_replays_the_extension_records_and_keeps_them_in_its_cache(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = InProcessController(clock)
    controller.apply(list(image_with_topic(3).iter_records()))  # retention.ms=1000
    controller.apply(
        [
            records.ConfigRecord(topic_id=TOPIC, name="retention.ms", value=None),
            records.ConfigRecord(topic_id=TOPIC, name="segment.bytes", value="8192"),
            CREDENTIAL,
            records.UserScramCredentialRecord(
                name="bob", mechanism=2, salt=b"x", stored_key=b"x", server_key=b"x", iterations=4096
            ),
            records.RemoveUserScramCredentialRecord(name="bob", mechanism=2),
            records.ProducerIdsRecord(broker_id=NODE, broker_epoch=0, next_producer_id=1000),
            records.ProducerIdsRecord(broker_id=NODE, broker_epoch=0, next_producer_id=2000),
        ]
    )
    harness = make_harness(tmp_path, controller=controller, clock=clock)
    harness.start()
    await harness.until(lambda: harness.agent.state.applied_offset + 1 >= len(controller.log), within=10.0)
    _check(harness.agent.state.image)
    harness.agent.request_stop()
    assert await harness.exit_code(within=10.0) == 0
    saved = metadata_cache.load(harness.metadata_dir, cluster_id=CLUSTER)
    assert saved is not None
    _check(saved.image)
