"""Kafka ACLs (jbod_core.acls): the authorizer's decisions, CreateAcls validation, DeleteAcls and
DescribeAcls filters, and their replay into the cluster image."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import acls, records
from jbod_core.acls import Acl, AclFilter, AclIndex, AclOperation, PatternType, PermissionType, ResourceType
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage, ReplayError

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
ALLOW = PermissionType.ALLOW
DENY = PermissionType.DENY
Op = AclOperation


def acl(
    name: str,
    op: AclOperation,
    *,
    kind: ResourceType = TOPIC,
    pattern: PatternType = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    permission: PermissionType = ALLOW,
) -> Acl:
    return Acl(kind, name, pattern, principal, host, op, permission)


def index_of(*entries: Acl) -> AclIndex:
    index = AclIndex()
    for n, entry in enumerate(entries):
        index.add(Uuid(1, n + 1), entry)
    return index


def allowed(
    index: AclIndex,
    op: AclOperation,
    name: str,
    *,
    principal: str = "User:alice",
    super_users: frozenset[str] = frozenset(),
    allow_everyone_if_no_acl_found: bool = False,
) -> bool:
    authorizer = acls.Authorizer(super_users, allow_everyone_if_no_acl_found)
    return authorizer.authorize(index, acls.Requester(principal, "10.0.0.1"), op, acls.Resource(TOPIC, name))


def may(index: AclIndex, host: str, op: AclOperation, kind: ResourceType, name: str) -> bool:
    return acls.Authorizer().authorize(
        index, acls.Requester("User:alice", host), op, acls.Resource(kind, name)
    )


def test_nothing_is_allowed_without_an_acl_unless_everyone_is_allowed_then() -> None:
    empty = AclIndex()
    assert not allowed(empty, Op.READ, "orders")
    assert allowed(empty, Op.READ, "orders", allow_everyone_if_no_acl_found=True)
    # An ACL on the resource, even for somebody else, turns the default off.
    other = index_of(acl("orders", Op.READ, principal="User:bob"))
    assert not allowed(other, Op.READ, "orders", allow_everyone_if_no_acl_found=True)


def test_super_users_may_do_everything_even_when_denied() -> None:
    index = index_of(acl("orders", Op.ALL, permission=DENY))
    assert allowed(index, Op.WRITE, "orders", super_users=frozenset({"User:alice"}))
    assert not allowed(index, Op.WRITE, "orders")


def test_prefixed_literal_and_wildcard_patterns() -> None:
    index = index_of(acl("orders-", Op.WRITE, pattern=PREFIXED), acl("*", Op.READ), acl("audit", Op.ALTER))
    assert allowed(index, Op.WRITE, "orders-eu")
    assert allowed(index, Op.WRITE, "orders-")
    assert not allowed(index, Op.WRITE, "orders")
    assert not allowed(index, Op.WRITE, "payments")
    assert allowed(index, Op.READ, "payments")  # LITERAL `*`: every topic
    assert allowed(index, Op.ALTER, "audit")
    assert not allowed(index, Op.ALTER, "audit2")


def test_deny_beats_allow() -> None:
    index = index_of(acl("orders-", Op.ALL, pattern=PREFIXED), acl("orders-secret", Op.READ, permission=DENY))
    assert allowed(index, Op.READ, "orders-eu")
    assert not allowed(index, Op.READ, "orders-secret")
    assert allowed(index, Op.WRITE, "orders-secret")
    # A DENY of READ does not deny the DESCRIBE it would imply as an ALLOW.
    assert allowed(index, Op.DESCRIBE, "orders-secret")


def test_implied_operations() -> None:
    for granting in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(index_of(acl("t", granting)), Op.DESCRIBE, "t")
    assert not allowed(index_of(acl("t", Op.CREATE)), Op.DESCRIBE, "t")
    assert allowed(index_of(acl("t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(index_of(acl("t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, "t")
    assert not allowed(index_of(acl("t", Op.DESCRIBE)), Op.READ, "t")
    assert allowed(index_of(acl("t", Op.ALL)), Op.IDEMPOTENT_WRITE, "t")
    assert not allowed(index_of(acl("t", Op.ALL, permission=DENY), acl("t", Op.READ)), Op.READ, "t")


def test_wildcard_principal_and_hosts() -> None:
    index = index_of(acl("t", Op.READ, principal="User:*"), acl("u", Op.READ, host="10.0.0.2"))
    assert allowed(index, Op.READ, "t", principal="User:bob")
    assert not allowed(index, Op.READ, "u")  # from 10.0.0.1
    assert may(index, "10.0.0.2", Op.READ, TOPIC, "u")
    # The resource type is part of the pattern.
    assert not may(index, "10.0.0.1", Op.READ, GROUP, "t")


names = st.sampled_from(["a", "ab", "abc", "b", "*", "a*"])
operations = st.sampled_from([o for o in Op if o not in (Op.ANY, Op.UNKNOWN)])
any_acl = st.builds(
    Acl,
    resource_type=st.sampled_from([TOPIC, GROUP]),
    resource_name=names,
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    operation=operations,
    permission_type=st.sampled_from([ALLOW, DENY]),
)


def _reference(entries: list[Acl], principal: str, op: AclOperation, name: str, default: bool) -> bool:
    """Kafka's rules, read naively over a list."""

    def resource_matches(a: Acl) -> bool:
        if a.resource_type != TOPIC:
            return False
        if a.pattern_type == LITERAL:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    on_resource = [a for a in entries if resource_matches(a)]
    if not on_resource:
        return default
    mine = [a for a in on_resource if a.principal in (principal, "User:*") and a.host in ("10.0.0.1", "*")]
    if any(a.permission_type == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    implied = {op}
    if op == Op.DESCRIBE:
        implied |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        implied.add(Op.ALTER_CONFIGS)
    return any(a.permission_type == ALLOW and (a.operation == Op.ALL or a.operation in implied) for a in mine)


@given(st.lists(any_acl, unique=True, max_size=8), names, operations, st.booleans())
def test_authorize_agrees_with_a_naive_reading_of_kafkas_rules(
    entries: list[Acl], name: str, op: AclOperation, default: bool
) -> None:
    index = index_of(*entries)
    got = allowed(index, op, name, allow_everyone_if_no_acl_found=default)
    assert got == _reference(entries, "User:alice", op, name, default)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resource_type": ResourceType.ANY}, "Invalid resourceType ANY"),
        ({"resource_type": ResourceType.UNKNOWN}, "Invalid resourceType"),
        ({"pattern_type": PatternType.MATCH}, "Invalid patternType MATCH"),
        ({"pattern_type": PatternType.ANY}, "Invalid patternType ANY"),
        ({"operation": Op.ANY}, "Invalid operation ANY"),
        ({"permission_type": PermissionType.ANY}, "Invalid permissionType"),
        ({"resource_name": ""}, "Resource name should not be empty"),
        ({"principal": ""}, "Could not parse principal"),
        ({"principal": "alice"}, "Could not parse principal"),
        ({"principal": "User:"}, "Invalid principal"),
        ({"host": ""}, "Host should not be empty"),
        ({"resource_type": ResourceType.CLUSTER}, "kafka-cluster"),
    ],
)
def test_invalid_creations_are_invalid_request_and_write_nothing(
    change: dict[str, object], message: str
) -> None:
    valid = acl("orders", Op.READ)
    bad = Acl(**{**{f: getattr(valid, f) for f in Acl.__dataclass_fields__}, **change})
    produced, results = acls.create_acls(AclIndex(), [bad, valid], rng=random.Random(1))
    assert results[0].error_code == ErrorCode.INVALID_REQUEST
    assert message in (results[0].error_message or "")
    assert results[1].error_code == ErrorCode.NONE
    assert len(produced) == 1
    assert isinstance(produced[0], records.AccessControlEntryRecord)
    assert produced[0].resource_name == "orders"


def test_cluster_acls_and_existing_acls() -> None:
    cluster = acl("kafka-cluster", Op.CREATE, kind=ResourceType.CLUSTER)
    image = ClusterImage()
    produced, results = acls.create_acls(image.acls, [cluster, cluster], rng=random.Random(2))
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(produced) == 1  # the same ACL twice in one request is written once
    image.replay(produced[0], 0)
    again, results = acls.create_acls(image.acls, [cluster], rng=random.Random(2))
    assert again == [] and results[0].error_code == ErrorCode.NONE
    assert may(image.acls, "h", Op.CREATE, ResourceType.CLUSTER, "kafka-cluster")


def _image_with(*entries: Acl) -> ClusterImage:
    image = ClusterImage()
    produced, _ = acls.create_acls(image.acls, list(entries), rng=random.Random(3))
    for offset, record in enumerate(produced):
        image.replay(record, offset)
    return image


def test_filters_match_as_kafkas_acl_binding_filter() -> None:
    entries = [
        acl("orders-", Op.WRITE, pattern=PREFIXED),
        acl("orders-eu", Op.READ),
        acl("*", Op.DESCRIBE, principal="User:bob"),
        acl("payments", Op.READ, permission=DENY),
        acl("g1", Op.READ, kind=GROUP),
    ]
    image = _image_with(*entries)
    assert len(acls.describe_acls(image.acls, AclFilter())) == 5
    assert acls.describe_acls(image.acls, AclFilter(resource_type=GROUP)) == [entries[4]]
    match = acls.describe_acls(
        image.acls, AclFilter(resource_name="orders-eu", pattern_type=PatternType.MATCH)
    )
    assert set(match) == {entries[0], entries[1], entries[2]}
    literal = acls.describe_acls(image.acls, AclFilter(resource_name="orders-eu", pattern_type=LITERAL))
    assert literal == [entries[1]]
    assert acls.describe_acls(image.acls, AclFilter(resource_name="orders-eu")) == [entries[1]]
    assert acls.describe_acls(image.acls, AclFilter(principal="User:bob")) == [entries[2]]
    assert acls.describe_acls(image.acls, AclFilter(permission_type=DENY)) == [entries[3]]
    assert acls.describe_acls(image.acls, AclFilter(operation=Op.WRITE)) == [entries[0]]


def test_delete_removes_each_matching_acl_once_and_lists_it_per_filter() -> None:
    entries = [acl("orders-", Op.WRITE, pattern=PREFIXED), acl("orders-eu", Op.READ), acl("x", Op.READ)]
    image = _image_with(*entries)
    produced, results = acls.delete_acls(
        image.acls,
        [
            AclFilter(resource_type=TOPIC, resource_name="orders-eu", pattern_type=PatternType.MATCH),
            AclFilter(operation=Op.READ),
            AclFilter(resource_type=ResourceType.UNKNOWN),
        ],
    )
    assert set(results[0].matching) == {entries[0], entries[1]}
    assert set(results[1].matching) == {entries[1], entries[2]}
    assert results[2].error_code == ErrorCode.INVALID_REQUEST and results[2].matching == ()
    assert len(produced) == 3
    for offset, record in enumerate(produced, start=image.end_offset):
        image.replay(record, offset)
    assert len(image.acls) == 0
    assert not may(image.acls, "h", Op.READ, TOPIC, "x")


def test_acls_survive_a_snapshot_and_bad_records_are_replay_errors() -> None:
    image = _image_with(acl("orders-", Op.WRITE, pattern=PREFIXED), acl("g", Op.READ, kind=GROUP))
    copy = ClusterImage()
    for record in image.copy_for_snapshot().to_records():
        copy.replay(record, image.end_offset - 1)
    assert copy.canonical() == image.canonical()
    assert image.record_count() == len(image.to_records())
    assert may(copy.acls, "h", Op.WRITE, TOPIC, "orders-1")
    with pytest.raises(ReplayError, match="unknown ACL id"):
        copy.replay(records.RemoveAccessControlEntryRecord(id=Uuid(7, 7)), copy.end_offset)
    bad = acl("t", Op.READ).to_record(Uuid(8, 8))
    with pytest.raises(ReplayError):
        copy.replay(dataclasses.replace(bad, operation=99), copy.end_offset)
    existing_id, existing = next(iter(copy.acls))
    with pytest.raises(ReplayError, match="exists already"):
        copy.replay(existing.to_record(Uuid(9, 9)), copy.end_offset)
    assert copy.acls.by_id[existing_id] == existing


def test_super_users_parse_as_kafkas_list() -> None:
    assert acls.parse_super_users("User:a; User:b;;") == frozenset({"User:a", "User:b"})
    assert acls.parse_super_users("") == frozenset()


@given(st.lists(st.tuples(st.booleans(), any_acl), max_size=30), names)
def test_the_index_after_adds_and_removes_equals_one_built_from_scratch(
    steps: list[tuple[bool, Acl]], name: str
) -> None:
    index = AclIndex()
    live: dict[Acl, Uuid] = {}
    for n, (add, entry) in enumerate(steps):
        if add and entry not in live:
            live[entry] = Uuid(2, n + 1)
            index.add(live[entry], entry)
        elif not add and entry in live:
            assert index.remove(live.pop(entry)) == entry
    fresh = AclIndex()
    for entry, acl_id in live.items():
        fresh.add(acl_id, entry)
    assert index.by_id == fresh.by_id
    for kind in (TOPIC, GROUP):
        assert sorted(map(repr, index.applying_to(kind, name))) == sorted(
            map(repr, fresh.applying_to(kind, name))
        )


def test_authorize_any_is_kafkas_authorize_by_resource_type() -> None:
    def any_write(*entries: Acl) -> bool:
        requester = acls.Requester("User:alice", "10.0.0.1")
        return acls.Authorizer().authorize_any(index_of(*entries), requester, Op.WRITE, TOPIC)

    assert not any_write()
    assert any_write(acl("orders-", Op.WRITE, pattern=PREFIXED))
    assert any_write(acl("t", Op.ALL))
    assert not any_write(acl("t", Op.READ))
    assert not any_write(acl("t", Op.WRITE, principal="User:bob"))
    # A DENY covering every ALLOW: of the same literal, of a prefix, or of `*`.
    assert not any_write(acl("t", Op.WRITE), acl("t", Op.WRITE, permission=DENY))
    assert not any_write(
        acl("orders-eu", Op.WRITE), acl("orders-", Op.ALL, pattern=PREFIXED, permission=DENY)
    )
    assert not any_write(acl("orders-", Op.WRITE, pattern=PREFIXED), acl("*", Op.WRITE, permission=DENY))
    # ... but not one ALLOW left uncovered.
    assert any_write(acl("t", Op.WRITE), acl("u", Op.WRITE), acl("t", Op.WRITE, permission=DENY))
    assert acls.Authorizer(super_users=frozenset({"User:alice"})).authorize_any(
        AclIndex(), acls.Requester("User:alice", "h"), Op.WRITE, TOPIC
    )
