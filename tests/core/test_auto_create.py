"""Topic auto-creation's pure decision (`jbod_core.auto_create`): each row of its table on its
own topic, the settings' parsing, and the collision rule the controller applies to a creation
(`topics.create_topic`). The answers are Apache Kafka 4.3.1's, measured on a real broker
(tests/kafka_api/test_auto_create.py runs them against ours with real clients)."""

from __future__ import annotations

import random

import pytest

from jbod_core import auto_create, topics
from jbod_core.auto_create import AskedTopic, MetadataError, TopicAnswer
from jbod_core.errors import ErrorCode
from jbod_core.messages import CreateTopicRequest
from tests.core.support import Cluster, d

DESCRIBE_ONLY = {"may_describe": True, "may_create": False}
EVERYTHING = {"may_describe": True, "may_create": True}


def _asked(
    name: str = "new", *, exists: bool = False, being_created: bool = False, **may: bool
) -> AskedTopic:
    return AskedTopic(name=name, exists=exists, being_created=being_created, **(may or EVERYTHING))


@pytest.mark.parametrize(
    ("asked", "allowed", "expected"),
    [
        # Not DESCRIBE: 29 whatever else is true (a name that is not even legal included).
        (_asked(may_describe=False, may_create=True), True, MetadataError.TOPIC_AUTHORIZATION_FAILED),
        (_asked("a/b", may_describe=False, may_create=True), False, MetadataError.TOPIC_AUTHORIZATION_FAILED),
        (
            _asked(exists=True, may_describe=False, may_create=False),
            True,
            MetadataError.TOPIC_AUTHORIZATION_FAILED,
        ),
        # An existing topic is described; nothing is created.
        (_asked(exists=True, **DESCRIBE_ONLY), True, MetadataError.NONE),
        # Missing, creation allowed, no CREATE: 29 (before the name is looked at) ...
        (_asked(**DESCRIBE_ONLY), True, MetadataError.TOPIC_AUTHORIZATION_FAILED),
        (_asked("a/b", **DESCRIBE_ONLY), True, MetadataError.TOPIC_AUTHORIZATION_FAILED),
        # ... but without creation allowed the missing topic is 3, or 17 for an illegal name.
        (_asked(**DESCRIBE_ONLY), False, MetadataError.UNKNOWN_TOPIC_OR_PARTITION),
        (_asked("a/b", **DESCRIBE_ONLY), False, MetadataError.INVALID_TOPIC_EXCEPTION),
        (_asked("a/b"), True, MetadataError.INVALID_TOPIC_EXCEPTION),
        (_asked(".."), True, MetadataError.INVALID_TOPIC_EXCEPTION),
        (_asked(""), True, MetadataError.INVALID_TOPIC_EXCEPTION),
        (_asked("x" * 250), False, MetadataError.INVALID_TOPIC_EXCEPTION),
        (_asked(), False, MetadataError.UNKNOWN_TOPIC_OR_PARTITION),
        (_asked(being_created=True), True, MetadataError.UNKNOWN_TOPIC_OR_PARTITION),
        (_asked("__consumer_offsets"), True, MetadataError.UNKNOWN_TOPIC_OR_PARTITION),
        (_asked("__transaction_state"), True, MetadataError.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_what_a_named_topic_gets_and_nothing_is_created(
    asked: AskedTopic, allowed: bool, expected: MetadataError
) -> None:
    answer = auto_create.answer(asked, creation_allowed=allowed)
    assert answer.error is expected
    assert not answer.create


@pytest.mark.parametrize("name", ["new", "x" * 249, "a.b-c_D9", "..."])
def test_a_missing_topic_the_principal_may_create_is_created_and_answered_3(name: str) -> None:
    answer = auto_create.answer(_asked(name), creation_allowed=True)
    assert answer == TopicAnswer(
        name, MetadataError.UNKNOWN_TOPIC_OR_PARTITION, is_internal=False, create=True
    )


def test_internal_names_are_flagged_internal_except_when_not_describable() -> None:
    offsets = auto_create.answer(_asked("__consumer_offsets"), creation_allowed=False)
    assert offsets.is_internal
    hidden = auto_create.answer(
        _asked("__share_group_state", may_describe=False, may_create=False), creation_allowed=True
    )
    assert not hidden.is_internal


def test_a_name_asked_twice_is_answered_once_in_the_order_first_asked() -> None:
    asked = [_asked("b"), _asked("a", exists=True), _asked("b"), _asked("c", **DESCRIBE_ONLY)]
    answered = auto_create.answers(asked, creation_allowed=True)
    assert [(a.name, a.error, a.create) for a in answered] == [
        ("b", MetadataError.UNKNOWN_TOPIC_OR_PARTITION, True),
        ("a", MetadataError.NONE, False),
        ("c", MetadataError.TOPIC_AUTHORIZATION_FAILED, False),
    ]


@pytest.mark.parametrize(
    ("enabled", "version", "flag", "allowed"),
    [
        (True, 0, False, True),  # v0-v3 carry no flag: always allowed
        (True, 3, False, True),
        (True, 4, False, False),
        (True, 4, True, True),
        (True, 12, True, True),
        (False, 3, True, False),
        (False, 12, True, False),
    ],
)
def test_creation_is_allowed_by_the_broker_key_and_the_requests_flag(
    enabled: bool, version: int, flag: bool, allowed: bool
) -> None:
    settings = auto_create.AutoCreateSettings(enabled=enabled)
    assert settings.allows(version=version, allow_auto_topic_creation=flag) is allowed


def test_a_creation_uses_the_brokers_partitions_and_replication_factor_uncapped() -> None:
    settings = auto_create.AutoCreateSettings(num_partitions=6, replication_factor=5)
    assert settings.creation("orders") == CreateTopicRequest(
        name="orders", num_partitions=6, replication_factor=5
    )
    assert auto_create.AutoCreateSettings().values() == {
        "auto.create.topics.enable": "true",
        "num.partitions": "1",
        "default.replication.factor": "1",
    }


@pytest.mark.parametrize(
    ("key", "value", "parsed"),
    [
        ("auto.create.topics.enable", "false", False),
        ("auto.create.topics.enable", " TRUE ", True),
        ("num.partitions", "10000", 10000),
        ("default.replication.factor", "32767", 32767),
    ],
)
def test_settings_parse_as_kafka_reads_them(key: str, value: str, parsed: bool | int) -> None:
    assert auto_create.parse_setting(key, value) == parsed


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("auto.create.topics.enable", "yes"),
        ("auto.create.topics.enable", "1"),
        ("num.partitions", "0"),
        ("num.partitions", "10001"),
        ("num.partitions", "three"),
        ("default.replication.factor", "0"),
        ("default.replication.factor", "32768"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{key}: "):
        auto_create.parse_setting(key, value)


# -- the controller's collision rule ---------------------------------------------------------------


def _cluster_with(name: str) -> Cluster:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_topic([([1], [1], 1, [d(1)])], name=name)
    return cluster


@pytest.mark.parametrize(("existing", "new"), [("a.b", "a_b"), ("a_b", "a.b"), ("x.y_z", "x_y.z")])
def test_a_name_differing_only_in_dot_and_underscore_is_17_and_writes_nothing(
    existing: str, new: str
) -> None:
    cluster = _cluster_with(existing)
    before = cluster.image.canonical()
    produced, reply = topics.create_topic(
        cluster.image,
        CreateTopicRequest(name=new, num_partitions=1, replication_factor=1),
        rng=random.Random(0),
    )
    assert produced == []
    assert reply.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert reply.error_message == f"Topic '{new}' collides with existing topic: {existing}"
    assert cluster.image.canonical() == before


@pytest.mark.parametrize(
    ("existing", "new"), [("a.b", "a.b"), ("a.b", "a-b"), ("ab", "a_b"), ("a.b", "a.b.c")]
)
def test_names_that_do_not_collide(existing: str, new: str) -> None:
    cluster = _cluster_with(existing)
    _produced, reply = topics.create_topic(
        cluster.image,
        CreateTopicRequest(name=new, num_partitions=1, replication_factor=1),
        rng=random.Random(0),
    )
    expected = ErrorCode.TOPIC_ALREADY_EXISTS if new == existing else ErrorCode.NONE
    assert reply.error_code == expected
