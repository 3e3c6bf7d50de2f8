"""What a broker applies of the dynamic broker configs (`jbod_agent.dynamic_configs`) and which
replicas its replication quotas throttle (`jbod_agent.replication.replication_quota`): pure reads of a
config and an image built from records, on a fake clock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jbod_agent import config, dynamic_configs
from jbod_agent.config import ConfigError
from jbod_agent.replication.replication_quota import ReplicationQuota
from jbod_agent.state import AgentState, LogDirState
from jbod_core import broker_configs, records, topic_configs
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage
from jbod_core.messages import AlterConfigOp
from tests.agent.test_config import BASE, parse, text

A, B = Uuid(1, 1), Uuid(2, 2)
TOPIC = Uuid(7, 7)
CORDONED = broker_configs.CORDONED_LOG_DIRS
FOLLOWER_RATE = broker_configs.FOLLOWER_THROTTLED_RATE


def _image(*configs: records.BrokerConfigRecord) -> ClusterImage:
    image = ClusterImage()
    for offset, record in enumerate(configs):
        image.replay(record, offset)
    return image


def test_the_broker_value_wins_over_the_default_which_wins_over_server_properties() -> None:
    static = parse(
        follower_replication_throttled_rate="10", replica_alter_log_dirs_io_max_bytes_per_second="7"
    )
    image = _image(
        records.BrokerConfigRecord(broker="", name=FOLLOWER_RATE, value="20"),
        records.BrokerConfigRecord(broker="1", name=FOLLOWER_RATE, value="30"),
        records.BrokerConfigRecord(broker="2", name=broker_configs.ALTER_LOG_DIRS_RATE, value="99"),
    )
    assert dynamic_configs.rate(static, image, FOLLOWER_RATE) == 30
    default_only = _image(records.BrokerConfigRecord(broker="", name=FOLLOWER_RATE, value="20"))
    assert dynamic_configs.rate(static, default_only, FOLLOWER_RATE) == 20
    assert dynamic_configs.rate(static, ClusterImage(), FOLLOWER_RATE) == 10
    assert (
        dynamic_configs.rate(static, image, broker_configs.ALTER_LOG_DIRS_RATE) == 7
    )  # broker 2's is not ours
    assert dynamic_configs.rate(parse(), ClusterImage(), FOLLOWER_RATE) is None


def test_cordoned_paths_resolve_to_this_brokers_dir_ids() -> None:
    cfg = parse()
    dirs = {A: Path("/data/a"), B: Path("/data/b")}
    named = _image(records.BrokerConfigRecord(broker="1", name=CORDONED, value="/data/b/,/elsewhere/c"))
    assert dynamic_configs.cordoned_dirs(cfg, named, dirs) == [B]
    every = _image(records.BrokerConfigRecord(broker="", name=CORDONED, value="*"))
    assert dynamic_configs.cordoned_dirs(cfg, every, dirs) == sorted([A, B])
    assert dynamic_configs.cordoned_dirs(parse(cordoned_log_dirs="/data/a"), ClusterImage(), dirs) == [A]
    assert dynamic_configs.cordoned_dirs(cfg, ClusterImage(), dirs) == []


def test_a_static_cordon_must_name_the_brokers_own_log_dirs() -> None:
    with pytest.raises(ConfigError, match=re.escape("cordoned.log.dirs: /data/z is not one of log.dirs")):
        config.parse_config(text({**BASE, CORDONED: "/data/z"}))
    with pytest.raises(ConfigError, match=re.escape("'*' cannot be listed")):
        config.parse_config(text({**BASE, CORDONED: "*,/data/a"}))


def test_a_change_of_the_own_cordon_must_name_own_paths() -> None:
    cfg = parse()
    ok = [
        AlterConfigOp(name=CORDONED, op="SET", value="/data/a"),
        AlterConfigOp(name=CORDONED, op="SUBTRACT", value="/x"),
    ]
    assert dynamic_configs.cordoned_paths_error(cfg, ok) is None
    bad = [AlterConfigOp(name=CORDONED, op="APPEND", value="/data/a,/data/z")]
    assert "/data/z is not one of this broker's log dirs" in (
        dynamic_configs.cordoned_paths_error(cfg, bad) or ""
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def _state(image: ClusterImage) -> AgentState:
    cfg = parse()
    meta = LogDirState(path=Path("/data/meta"), directory_id=Uuid(9, 9), device=0)
    state = AgentState(
        config=cfg, cluster_id="c", incarnation=Uuid(5, 5), dirs={}, startup_offline=[], metadata_dir=meta
    )
    state.image = image
    return state


def _follower_quota(image: ClusterImage, clock: _Clock) -> ReplicationQuota:
    return ReplicationQuota(
        _state(image),
        clock=clock,  # type: ignore[arg-type]  # the quota reads monotonic() only
        rate_key=FOLLOWER_RATE,
        replicas_key=topic_configs.FOLLOWER_THROTTLED_REPLICAS,
    )


def test_a_quota_throttles_only_listed_replicas_out_of_the_isr_while_a_rate_is_set() -> None:
    image = _image(records.BrokerConfigRecord(broker="", name=FOLLOWER_RATE, value="1000"))
    image.replay(
        records.TopicRecord(
            name="t", topic_id=TOPIC, configs={topic_configs.FOLLOWER_THROTTLED_REPLICAS: "0:1"}
        ),
        image.end_offset,
    )
    for index, isr in ((0, (2,)), (1, (2,)), (2, (1, 2))):
        image.replay(
            records.PartitionRecord(
                topic_id=TOPIC, partition_id=index, replicas=(1, 2), isr=isr, leader=2,
                leader_epoch=0, partition_epoch=0, directories=(A, B),
            ),
            image.end_offset,
        )  # fmt: skip
    clock = _Clock()
    quota = _follower_quota(image, clock)
    assert quota.throttled((TOPIC, 0), 1)  # listed, broker 1 out of the ISR
    assert not quota.throttled((TOPIC, 1), 1)  # not listed
    assert not quota.throttled((TOPIC, 0), 2)  # in the ISR
    quota.record(2000)  # a burst (1000) and 1000 in debt
    assert quota.exceeded() and quota.wait_s() > 0.9
    clock.now = 1.01
    assert not quota.exceeded()
    assert quota.throttled_bytes == 2000
    # The rate deleted: nothing is throttled once the quota reads the configs again.
    image.replay(records.BrokerConfigRecord(broker="", name=FOLLOWER_RATE, value=None), image.end_offset)
    clock.now = 2.0
    assert not quota.throttled((TOPIC, 0), 1) and quota.rate is None


def test_a_rate_set_just_before_a_reassignment_applies_to_its_first_fetch() -> None:
    """`kafka-reassign-partitions.sh --throttle` sets the rates milliseconds before the
    reassignment: the quota must not keep an older reading for any time at all."""
    image = _image(records.BrokerConfigRecord(broker="", name="leader.replication.throttled.rate", value="1"))
    clock = _Clock()
    quota = _follower_quota(image, clock)
    assert quota.rate is None  # read once: no follower rate yet
    image.replay(records.BrokerConfigRecord(broker="1", name=FOLLOWER_RATE, value="500"), image.end_offset)
    assert quota.rate == 500  # the same instant: no refresh period
    image.replay(records.BrokerConfigRecord(broker="", name=FOLLOWER_RATE, value="100"), image.end_offset)
    assert quota.rate == 500  # the broker's own value still wins over the default
    image.replay(records.BrokerConfigRecord(broker="1", name=FOLLOWER_RATE, value=None), image.end_offset)
    assert quota.rate == 100
