"""Dynamic broker configs (`jbod_core.broker_configs`): the exact BrokerConfigRecords of a change,
then replay into `ClusterImage.broker_configs`; every refusal and its code, with nothing written;
the effective values a broker applies; snapshots carry them."""

from __future__ import annotations

from typing import Any

import pytest

from jbod_core import broker_configs, records, topic_configs
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, ReplayError
from jbod_core.messages import AlterBrokerConfigsRequest
from tests.core.support import Cluster, d

LEADER = broker_configs.LEADER_THROTTLED_RATE
FOLLOWER = broker_configs.FOLLOWER_THROTTLED_RATE
CORDONED = broker_configs.CORDONED_LOG_DIRS


def _request(*ops: tuple[str, str, str | None], validate_only: bool = False) -> AlterBrokerConfigsRequest:
    return AlterBrokerConfigsRequest.model_validate(
        {
            "configs": [{"name": n, "op": op, "value": v} for n, op, v in ops],
            "validateOnly": validate_only,
        }
    )


def _cluster() -> Cluster:
    cluster = Cluster()
    for b in (1, 2):
        cluster.add_broker(b, [d(b)])
    return cluster


def test_set_writes_one_record_per_changed_key_and_replay_shows_them() -> None:
    cluster = _cluster()
    produced, reply = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((LEADER, "SET", "100000"), (CORDONED, "SET", "/d/a,/d/b"))
    )
    assert produced == [
        records.BrokerConfigRecord(broker="1", name=LEADER, value="100000"),
        records.BrokerConfigRecord(broker="1", name=CORDONED, value="/d/a,/d/b"),
    ]
    assert reply.error_code == 0 and reply.configs == {LEADER: "100000", CORDONED: "/d/a,/d/b"}
    cluster.apply(produced)
    assert cluster.image.broker_configs == {"1": {LEADER: "100000", CORDONED: "/d/a,/d/b"}}
    # A repeat writes nothing.
    again, reply = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((LEADER, "SET", "100000"))
    )
    assert again == [] and reply.error_code == 0


def test_the_broker_value_wins_over_the_cluster_default() -> None:
    cluster = _cluster()
    produced, _ = broker_configs.alter_broker_configs(
        cluster.image, "", _request((LEADER, "SET", "10"), (FOLLOWER, "SET", "20"))
    )
    cluster.apply(produced)
    produced, _ = broker_configs.alter_broker_configs(cluster.image, "2", _request((FOLLOWER, "SET", "5")))
    cluster.apply(produced)
    assert broker_configs.effective(cluster.image, 1) == {LEADER: "10", FOLLOWER: "20"}
    assert broker_configs.effective(cluster.image, 2) == {LEADER: "10", FOLLOWER: "5"}
    assert broker_configs.rate(broker_configs.effective(cluster.image, 2), FOLLOWER) == 5
    assert broker_configs.rate({}, FOLLOWER) is None


def test_delete_removes_the_key_and_an_emptied_resource() -> None:
    cluster = _cluster()
    produced, _ = broker_configs.alter_broker_configs(cluster.image, "1", _request((LEADER, "SET", "7")))
    cluster.apply(produced)
    produced, reply = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((LEADER, "DELETE", None))
    )
    assert produced == [records.BrokerConfigRecord(broker="1", name=LEADER, value=None)]
    assert reply.configs == {}
    cluster.apply(produced)
    assert cluster.image.broker_configs == {}
    # Deleting what is not there writes nothing.
    assert (
        broker_configs.alter_broker_configs(cluster.image, "1", _request((LEADER, "DELETE", None)))[0] == []
    )


def test_append_and_subtract_edit_the_cordoned_list() -> None:
    cluster = _cluster()
    produced, _ = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((CORDONED, "APPEND", "/d/a"))
    )
    cluster.apply(produced)
    produced, _ = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((CORDONED, "APPEND", "/d/b,/d/a"))
    )
    assert produced == [records.BrokerConfigRecord(broker="1", name=CORDONED, value="/d/a,/d/b")]
    cluster.apply(produced)
    produced, _ = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((CORDONED, "SUBTRACT", "/d/a,/d/b"))
    )
    assert produced == [records.BrokerConfigRecord(broker="1", name=CORDONED, value=None)]


@pytest.mark.parametrize(
    ("broker", "ops", "code", "words"),
    [
        ("x1", [(LEADER, "SET", "1")], ErrorCode.INVALID_REQUEST, "Invalid broker name"),
        ("-1", [(LEADER, "SET", "1")], ErrorCode.INVALID_REQUEST, "Invalid broker name"),
        ("1", [(LEADER, "SET", "1"), (LEADER, "SET", "2")], ErrorCode.INVALID_REQUEST, "more than once"),
        (
            "1",
            [("log.retention.hours", "SET", "5")],
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs dynamically: [log.retention.hours]",
        ),
        ("1", [("no.such.key", "SET", "1")], ErrorCode.INVALID_REQUEST, "no.such.key"),
        ("1", [(LEADER, "SET", "-1")], ErrorCode.INVALID_REQUEST, LEADER),
        ("1", [(LEADER, "SET", "1k")], ErrorCode.INVALID_REQUEST, LEADER),
        ("1", [(FOLLOWER, "SET", "9223372036854775808")], ErrorCode.INVALID_REQUEST, FOLLOWER),
        ("1", [(LEADER, "APPEND", "1")], ErrorCode.INVALID_CONFIG, "list configs only"),
        ("1", [(CORDONED, "SET", "relative/dir")], ErrorCode.INVALID_REQUEST, "absolute"),
        ("1", [(CORDONED, "SET", "*,/d/a")], ErrorCode.INVALID_REQUEST, "'*'"),
        ("", [(LEADER, "SET", "1"), (CORDONED, "SET", "x")], ErrorCode.INVALID_REQUEST, CORDONED),
        # The topic defaults and the cleaner's settings under Kafka's names: Kafka's code and message.
        (
            "",
            [("log.cleaner.min.cleanable.ratio", "SET", "2")],
            ErrorCode.INVALID_REQUEST,
            "Invalid value 2.0 for configuration log.cleaner.min.cleanable.ratio: Value must be no more than 1",
        ),
        (
            "1",
            [("log.cleanup.policy", "SET", "foo")],
            ErrorCode.INVALID_REQUEST,
            "Invalid value foo for configuration log.cleanup.policy: String must be one of: compact, delete",
        ),
        ("1", [("log.segment.bytes", "SET", "4095")], ErrorCode.INVALID_REQUEST, "at least 4096"),
        ("1", [("log.cleaner.threads", "SET", "x")], ErrorCode.INVALID_REQUEST, "Not a number of type INT"),
        ("1", [("compression.type", "APPEND", "gzip")], ErrorCode.INVALID_CONFIG, "list configs only"),
    ],
)
def test_refusals_write_nothing(broker: str, ops: list[Any], code: ErrorCode, words: str) -> None:
    cluster = _cluster()
    produced, reply = broker_configs.alter_broker_configs(cluster.image, broker, _request(*ops))
    assert produced == []
    assert reply.error_code == code
    assert words in (reply.error_message or "")


def test_validate_only_answers_alike_and_writes_nothing() -> None:
    cluster = _cluster()
    produced, reply = broker_configs.alter_broker_configs(
        cluster.image, "1", _request((CORDONED, "SET", "*"), validate_only=True)
    )
    assert produced == [] and reply.error_code == 0 and reply.configs == {CORDONED: "*"}


def test_snapshot_records_rebuild_the_broker_configs() -> None:
    cluster = _cluster()
    for broker, ops in (
        ("", [(LEADER, "SET", "1")]),
        ("2", [(CORDONED, "SET", "*"), (FOLLOWER, "SET", "3")]),
    ):
        cluster.apply(broker_configs.alter_broker_configs(cluster.image, broker, _request(*ops))[0])
    fresh = ClusterImage()
    snapshot = cluster.image.to_records()
    assert len(snapshot) == cluster.image.record_count()
    for record in snapshot:
        fresh.replay(record, cluster.image.end_offset - 1)
    assert fresh.canonical() == cluster.image.canonical()
    assert fresh.broker_configs == cluster.image.broker_configs
    assert cluster.image.copy_for_snapshot().broker_configs == cluster.image.broker_configs
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_a_replayed_mapping_is_replaced_never_mutated() -> None:
    cluster = _cluster()
    cluster.apply([records.BrokerConfigRecord(broker="1", name=LEADER, value="1")])
    held = cluster.image.broker_configs["1"]
    cluster.apply([records.BrokerConfigRecord(broker="1", name=LEADER, value="2")])
    assert held == {LEADER: "1"} and cluster.image.broker_configs["1"] == {LEADER: "2"}


def test_replay_refuses_deleting_a_config_the_resource_does_not_have() -> None:
    with pytest.raises(ReplayError, match="does not have"):
        ClusterImage().replay(records.BrokerConfigRecord(broker="", name=LEADER, value=None), 0)


def test_cordoned_paths_normalise_trailing_slashes() -> None:
    assert broker_configs.cordoned_paths({CORDONED: " /d/a/ , /d/b"}) == ("/d/a", "/d/b")
    assert broker_configs.cordoned_paths({CORDONED: "*"}) == ("*",)
    assert broker_configs.cordoned_paths({}) == ()


# -- the levels of a broker config and the topic defaults they give ----------------------------


def test_levels_give_topic_defaults_with_kafkas_precedence_and_cleaner_settings() -> None:
    def levels(own: dict[str, str], default: dict[str, str], static: dict[str, str]) -> Any:
        return broker_configs.BrokerLevels(own=own, cluster_default=default, static=static)

    def retention(level: Any) -> tuple[str, broker_configs.ConfigSource]:
        found = broker_configs.topic_default(topic_configs.BY_NAME["retention.ms"], level)
        return found.value, found.source

    source = broker_configs.ConfigSource
    # ms over minutes over hours; a key no level sets has no synonyms (Kafka: DEFAULT_CONFIG).
    assert retention(levels({}, {}, {})) == ("604800000", source.DEFAULT_CONFIG)
    assert retention(levels({}, {}, {"log.retention.hours": "1"})) == ("3600000", source.DEFAULT_CONFIG)
    both = {"log.retention.hours": "1", "log.retention.minutes": "2"}
    assert retention(levels({}, {}, both)) == ("120000", source.DEFAULT_CONFIG)
    assert retention(levels({}, {"log.retention.ms": "5"}, both)) == (
        "5",
        source.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert retention(levels({"log.retention.ms": "-5"}, {"log.retention.ms": "5"}, both)) == (
        "-1",
        source.DYNAMIC_BROKER_CONFIG,
    )
    described = broker_configs.describe_broker_key(
        "log.retention.ms", levels({"log.retention.ms": "9"}, {}, {"log.retention.hours": "1"})
    )
    assert [(s.name, s.value, s.source) for s in described.synonyms] == [
        ("log.retention.ms", "9", source.DYNAMIC_BROKER_CONFIG),
        ("log.retention.hours", "1", source.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", source.DEFAULT_CONFIG),
    ]
    # Every topic default, and the resolve a broker makes of a topic without its own values.
    defaults = broker_configs.topic_defaults(
        levels({}, {"log.cleanup.policy": "compact"}, {"log.roll.hours": "2", "log.segment.bytes": "8192"})
    )
    resolved = topic_configs.resolve({}, defaults)
    assert resolved.compacted and resolved["segment.ms"] == 7_200_000 and resolved["segment.bytes"] == 8192
    assert resolved["retention.ms"] == -1  # not `delete`: never cut by retention
    # The cleaner's settings: dynamic over static over Kafka's defaults; an unusable value skipped.
    cleaner = broker_configs.cleaner_settings(
        levels(
            {"log.cleaner.threads": "x"},
            {"log.cleaner.threads": "3"},
            {
                "log.cleaner.threads": "2",
                "log.cleaner.io.buffer.load.factor": "0.5",
                "log.cleaner.enable": "false",
            },
        )
    )
    assert cleaner == broker_configs.CleanerSettings(enable=False, threads=3, io_buffer_load_factor=0.5)


def test_our_defaults_are_the_agents() -> None:
    """Every broker key the agent reads into a number or a flag has `KEYS[key].default` (Kafka's,
    unless `OUR_DEFAULTS` says ours differs) as the agent's default."""
    from jbod_agent import config

    fields = config.BrokerConfig.__dataclass_fields__
    checked = 0
    for key, (field_name, _parse) in config._KEYS.items():
        if key not in broker_configs.KEYS or field_name not in fields:
            continue
        default = fields[field_name].default
        if isinstance(default, bool):
            assert broker_configs.KEYS[key].default == str(default).lower(), key
            checked += 1
        elif isinstance(default, int) and default >= 0:  # -1: unset (the replication throttles)
            assert broker_configs.KEYS[key].default == str(default), key
            checked += 1
    assert checked >= 20
    assert broker_configs.cleaner_settings(config.parse_config(_MINIMAL).static_levels) == (
        broker_configs.CleanerSettings()
    )


_MINIMAL = (
    "node.id=1\nlog.dirs=/d/a\nmetadata.log.dir=/d/m\ncontroller.url=http://h:1\ncluster.token.file=/t\n"
)
