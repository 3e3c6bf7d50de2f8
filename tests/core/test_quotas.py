"""Client quotas (`jbod_core.quotas`): validation as Kafka 4.3.1's controller answers it, the
records AlterClientQuotas writes and their replay, KIP-55's resolution order, DescribeClientQuotas'
filters, and the sampled rate with its throttle time."""

from __future__ import annotations

import pytest

from jbod_core import quotas, records
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, ReplayError
from jbod_core.quotas import (
    CLIENT_ID,
    IP,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    USER,
    AlterEntry,
    FilterComponent,
    QuotaOp,
    SampledRate,
    SensorKey,
)

INVALID = ErrorCode.INVALID_REQUEST


def _set(*components: tuple[str, str | None], **values: float) -> AlterEntry:
    return AlterEntry(components, tuple(QuotaOp(k, v) for k, v in values.items()))


def _remove(*components: tuple[str, str | None], keys: tuple[str, ...]) -> AlterEntry:
    return AlterEntry(components, tuple(QuotaOp(k, None, remove=True) for k in keys))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (AlterEntry((), (QuotaOp("producer_byte_rate", 1),)), "Invalid empty client quota entity"),
        (_set(("group", "g"), producer_byte_rate=1), "Unhandled client quota entity type: group"),
        (_set((USER, "a"), (USER, "b"), producer_byte_rate=1), "Duplicate entity type"),
        (_set((USER, "a"), (IP, "1.2.3.4"), producer_byte_rate=1), "Invalid quota entity combination"),
        (_set((IP, "not-an-ip"), connection_creation_rate=1), "not a valid IP"),
        (_set((USER, "u"), bogus=1), "Invalid configuration key bogus"),
        (_set((USER, "u"), connection_creation_rate=3), "Invalid configuration key connection_creation_rate"),
        (_set((IP, "1.2.3.4"), producer_byte_rate=3), "Invalid configuration key producer_byte_rate"),
        (_set((USER, "u"), producer_byte_rate=0), "Quota producer_byte_rate must be greater than 0"),
        (_set((USER, "u"), request_percentage=-5), "Quota request_percentage must be greater than 0"),
        (_set((USER, "u"), producer_byte_rate=1.5), "producer_byte_rate cannot be a fractional value."),
        (
            AlterEntry(((USER, "u"),), (QuotaOp("producer_byte_rate", 1), QuotaOp("producer_byte_rate", 2))),
            "Duplicate quota key",
        ),
    ],
)
def test_refused_entries_change_nothing_and_do_not_stop_the_others(entry: AlterEntry, message: str) -> None:
    good = _set((USER, "ok"), producer_byte_rate=10)
    produced, results = quotas.alter_client_quotas({}, [entry, good])
    assert results[0].error_code == INVALID and message in (results[0].error_message or "")
    assert results[0].entity == entry.entity  # named as the request named it
    assert results[1].error_code == ErrorCode.NONE
    assert produced == [records.ClientQuotaRecord(((USER, "ok"),), "producer_byte_rate", 10.0)]


def test_alter_writes_only_changes_and_replays_into_the_image() -> None:
    image = ClusterImage()
    user_client = ((USER, "u"), (CLIENT_ID, "c"))  # as a request may order it
    produced, results = quotas.alter_client_quotas(
        image.client_quotas,
        [
            _set(*user_client, producer_byte_rate=500, request_percentage=1.5),
            _set((USER, None), consumer_byte_rate=2048),
            _set((CLIENT_ID, None), controller_mutation_rate=10),
            _set((IP, None), connection_creation_rate=5),
        ],
    )
    assert all(r.error_code == ErrorCode.NONE for r in results)
    canonical = ((CLIENT_ID, "c"), (USER, "u"))
    assert produced == [
        records.ClientQuotaRecord(canonical, "producer_byte_rate", 500.0),
        records.ClientQuotaRecord(canonical, "request_percentage", 1.5),
        records.ClientQuotaRecord(((USER, None),), "consumer_byte_rate", 2048.0),
        records.ClientQuotaRecord(((CLIENT_ID, None),), "controller_mutation_rate", 10.0),
        records.ClientQuotaRecord(((IP, None),), "connection_creation_rate", 5.0),
    ]
    for offset, record in enumerate(produced):
        assert records.decode(record.TYPE, record.to_data()) == record
        image.replay(record, offset)
    assert image.client_quotas[canonical] == {"producer_byte_rate": 500.0, "request_percentage": 1.5}
    # Setting the same value again, or removing what is not set, writes nothing; validate_only nothing.
    again, _ = quotas.alter_client_quotas(
        image.client_quotas,
        [_set(*user_client, producer_byte_rate=500), _remove((USER, "u"), keys=("consumer_byte_rate",))],
    )
    assert again == []
    checked, results = quotas.alter_client_quotas(
        image.client_quotas, [_remove(*user_client, keys=("producer_byte_rate",))], validate_only=True
    )
    assert checked == [] and results[0].error_code == ErrorCode.NONE
    removed, _ = quotas.alter_client_quotas(
        image.client_quotas, [_remove(*user_client, keys=("producer_byte_rate", "request_percentage"))]
    )
    assert removed == [
        records.ClientQuotaRecord(canonical, "producer_byte_rate", 0.0, remove=True),
        records.ClientQuotaRecord(canonical, "request_percentage", 0.0, remove=True),
    ]
    for offset, record in enumerate(removed, start=len(produced)):
        image.replay(record, offset)
    assert canonical not in image.client_quotas  # an entity with no key left disappears
    # A snapshot gives the same image back; removing a key not set is impossible on replay.
    copy = ClusterImage()
    for record in image.to_records():
        copy.replay(record, image.end_offset)
    assert copy.canonical() == image.canonical() and image.record_count() == len(image.to_records())
    with pytest.raises(ReplayError):
        image.replay(records.ClientQuotaRecord(canonical, "producer_byte_rate", 0.0, remove=True), 99)


def test_resolution_follows_kip_55_order() -> None:
    levels: list[tuple[quotas.Entity, SensorKey]] = [
        (((CLIENT_ID, "c"), (USER, "u")), SensorKey("u", "c")),
        (((CLIENT_ID, None), (USER, "u")), SensorKey("u", "c")),
        (((USER, "u"),), SensorKey("u", "")),
        (((CLIENT_ID, "c"), (USER, None)), SensorKey("u", "c")),
        (((CLIENT_ID, None), (USER, None)), SensorKey("u", "c")),
        (((USER, None),), SensorKey("u", "")),
        (((CLIENT_ID, "c"),), SensorKey("", "c")),
        (((CLIENT_ID, None),), SensorKey("", "c")),
    ]
    configured = {entity: {"producer_byte_rate": float(i + 1)} for i, (entity, _s) in enumerate(levels)}
    configured[((USER, "other"),)] = {"producer_byte_rate": 99.0}
    for i, (entity, sensor) in enumerate(levels):
        found = quotas.resolve(configured, "producer_byte_rate", user="u", client_id="c")
        assert found is not None and (found.quota, found.sensor, found.entity) == (
            float(i + 1),
            sensor,
            entity,
        )
        del configured[entity]  # the next level decides once this one is gone
    assert quotas.resolve(configured, "producer_byte_rate", user="u", client_id="c") is None
    # Another key does not count: the entity must set the key asked for.
    assert (
        quotas.resolve(
            {((USER, "u"),): {"consumer_byte_rate": 1.0}}, "producer_byte_rate", user="u", client_id="c"
        )
        is None
    )


def test_describe_filters_match_exact_default_any_and_strict() -> None:
    stored: dict[quotas.Entity, dict[str, float]] = {
        ((USER, "u"),): {"producer_byte_rate": 1.0},
        ((USER, None),): {"consumer_byte_rate": 2.0},
        ((CLIENT_ID, "c"), (USER, "u")): {"producer_byte_rate": 3.0},
        ((CLIENT_ID, None), (USER, None)): {"producer_byte_rate": 4.0},
        ((CLIENT_ID, "c"),): {"request_percentage": 5.0},
    }

    def found(*components: FilterComponent, strict: bool) -> list[quotas.Entity]:
        assert quotas.filter_problem(components) is None
        return [entity for entity, _v in quotas.describe(stored, components, strict=strict)]

    assert found(FilterComponent(USER, MATCH_ANY), strict=True) == [((USER, None),), ((USER, "u"),)]
    assert found(FilterComponent(USER, MATCH_EXACT, "u"), strict=False) == [
        ((CLIENT_ID, "c"), (USER, "u")),
        ((USER, "u"),),
    ]
    assert found(
        FilterComponent(USER, MATCH_DEFAULT), FilterComponent(CLIENT_ID, MATCH_ANY), strict=True
    ) == [((CLIENT_ID, None), (USER, None))]
    assert found(FilterComponent(CLIENT_ID, MATCH_EXACT, "c"), strict=True) == [((CLIENT_ID, "c"),)]
    assert len(found(strict=False)) == len(stored)
    assert found(FilterComponent(USER, MATCH_EXACT, "nobody"), strict=False) == []
    for bad in (
        [FilterComponent(USER, MATCH_ANY), FilterComponent(USER, MATCH_ANY)],
        [FilterComponent(IP, MATCH_ANY), FilterComponent(USER, MATCH_ANY)],
        [FilterComponent(USER, 7)],
        [FilterComponent(USER, MATCH_EXACT, None)],
        [FilterComponent("group", MATCH_ANY)],
    ):
        problem = quotas.filter_problem(bad)
        assert problem is not None and problem[0] == INVALID


def test_sampled_rate_and_throttle_time_as_kafka_windows() -> None:
    rate = SampledRate(window_num=11, window_s=1.0)
    # A fresh rate is measured over at least 10 whole windows: 1000 bytes at once is 100 B/s.
    rate.record(1000, now=0.0)
    assert rate.rate(0.0) == pytest.approx(100.0)
    assert rate.throttle_ms(100.0, now=0.0) == 0  # at the quota, not above it
    rate.record(1000, now=0.5)
    # Half a window later the span is 0.5 s + the 10 whole windows still missing.
    assert rate.rate(0.5) == pytest.approx(2000 / 10.5)
    # (rate - quota) / quota * 10.5 s: 9.5 s without traffic brings 2000 B back to 100 B/s over 20 s.
    assert rate.throttle_ms(100.0, now=0.5) == 9_500
    # Bounded by the whole sample span (11 windows of 1 s).
    rate.record(100_000, now=0.6)
    assert rate.throttle_ms(100.0, now=0.6) == 11_000
    # After 11 windows every sample has expired.
    assert rate.rate(12.0) == 0.0
    # Measured over the time since the oldest kept sample once that exceeds 10 windows.
    steady = SampledRate(window_num=2, window_s=1.0)
    for second in range(5):
        steady.record(100, now=float(second))
    assert steady.rate(4.5) == pytest.approx(200 / 1.5)
    steady.unrecord(100, now=4.5)
    assert steady.rate(4.5) == pytest.approx(100 / 1.5)


def test_a_rate_is_obsolete_once_nothing_was_recorded_for_its_whole_span() -> None:
    rate = SampledRate(window_num=11, window_s=1.0)
    assert rate.obsolete(0.0)  # nothing recorded yet: as new
    rate.record(1000, now=0.0)
    assert not rate.obsolete(11.0)
    assert rate.obsolete(11.01)
    new = SampledRate(window_num=11, window_s=1.0)
    for measured in (rate, new):  # measures from then on as a new rate does
        measured.record(500, now=11.5)
    assert rate.rate(12.0) == new.rate(12.0) and rate.throttle_ms(10.0, 12.0) == new.throttle_ms(10.0, 12.0)


def test_an_address_has_its_own_connection_rate_else_the_default_ip_one() -> None:
    configured = {
        ((IP, None),): {quotas.CONNECTION_CREATION_RATE: 5.0},
        ((IP, "10.0.0.7"),): {quotas.CONNECTION_CREATION_RATE: 2.0},
        ((IP, "::1"),): {quotas.CONNECTION_CREATION_RATE: 3.0},
        ((USER, None),): {quotas.PRODUCER_BYTE_RATE: 1.0},
    }
    assert quotas.ip_connection_rate(configured, "10.0.0.7") == 2.0
    assert quotas.ip_connection_rate(configured, "0:0::1") == 3.0  # compared as addresses
    assert quotas.ip_connection_rate(configured, "10.0.0.8") == 5.0  # the default ip entity
    assert quotas.ip_connection_rate({((USER, None),): {quotas.PRODUCER_BYTE_RATE: 1.0}}, "10.0.0.8") is None


def test_a_throttle_time_may_be_bounded_below_the_sample_span() -> None:
    rate = SampledRate(window_num=11, window_s=1.0)
    rate.record(1000, now=0.0)
    assert rate.throttle_ms(1.0, now=0.0) == 11_000
    assert rate.throttle_ms(1.0, now=0.0, most_s=1.0) == 1_000  # KIP-612: one window at the most
