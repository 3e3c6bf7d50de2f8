"""A draft of records being decided against an image, without touching the image.

Guarantees:
* `Draft.append` records a record and makes its effect visible through `broker()` and
  `partition()` of the same draft (using the image's own pure transition functions), so a
  decision made of several steps sees its earlier steps; the image itself is never modified.
* `next_record_offset` is the offset the next appended record will get once written, because the
  writer appends a decision's records in order right after the image's end offset.
"""

from __future__ import annotations

from jbod_core import records
from jbod_core.image import (
    BrokerRegistration,
    ClusterImage,
    PartitionKey,
    PartitionRegistration,
    apply_broker_change,
    apply_partition_change,
    registration_from_record,
)


class Draft:
    __slots__ = ("_brokers", "_changes", "_partitions", "image", "records")

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.records: list[records.Record] = []
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._partitions: dict[PartitionKey, PartitionRegistration] = {}
        # Partition changes not yet applied to the overlay: applied when the partition is read
        # again, so a decision that touches each partition once never pays for the overlay.
        self._changes: dict[PartitionKey, list[records.PartitionChangeRecord]] = {}

    @property
    def next_record_offset(self) -> int:
        return self.image.end_offset + len(self.records)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def partition(self, key: PartitionKey) -> PartitionRegistration | None:
        pending = self._changes.pop(key, None)
        part = self._partitions.get(key)
        if part is None:
            part = self.image.partition(key)
        if pending is not None:
            if part is None:
                raise ValueError(f"draft changes unknown partition {key}")
            for change in pending:
                part = apply_partition_change(part, change)
            self._partitions[key] = part
        return part

    def append(self, record: records.Record) -> None:
        self.records.append(record)
        if isinstance(record, records.PartitionChangeRecord):
            key = (record.topic_id, record.partition_id)
            pending = self._changes.get(key)
            if pending is None:
                self._changes[key] = [record]
            else:
                pending.append(record)
        elif isinstance(record, records.BrokerRegistrationChangeRecord):
            reg = self.broker(record.broker_id)
            if reg is None:
                raise ValueError(f"draft changes unregistered broker {record.broker_id}")
            self._brokers[record.broker_id] = apply_broker_change(reg, record)
        elif isinstance(record, records.RegisterBrokerRecord):
            self._brokers[record.broker_id] = registration_from_record(record)
        elif isinstance(record, records.UnregisterBrokerRecord):
            self._brokers[record.broker_id] = None
