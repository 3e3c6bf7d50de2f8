"""Leader elections on request (Kafka's ElectLeaders, `kafka-leader-election.sh`) and the
controller's automatic preferred-leader balance (`auto.leader.rebalance.enable`), as KRaft's
controller decides them (pure).

Guarantees:
* PREFERRED: a partition whose leader is its preferred replica (the first in its replica list)
  is ELECTION_NOT_NEEDED (84); else the preferred replica becomes leader when it is in the ISR
  and may lead (registered, unfenced, not shutting down, its dir online and not reported slow:
  `election.Acceptor`), else PREFERRED_LEADER_NOT_AVAILABLE (80) and nothing changes.
* UNCLEAN: a partition that has a leader is ELECTION_NOT_NEEDED; else a leader is elected by the
  §3.6 rule with unclean election allowed whatever the topic says (a clean leader first, else
  the first replica that may lead, the ISR then that leader alone), else
  ELIGIBLE_LEADERS_NOT_AVAILABLE (83).
* An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION (3) with Kafka's message; a result
  per partition asked, in the order asked. Asked for every partition (`partitions` None), the
  partitions that need no election are left out of the answer, as Kafka leaves them out.
* Each elected leader is one `PartitionChangeRecord` (leader, leader epoch + 1, partition epoch
  + 1); the ISR and replicas are otherwise unchanged.
* `preferred_leader_balance` picks at most `limit` partitions (by topic id and partition) whose
  leader is not their preferred replica, whose preferred replica is in the ISR and may lead, and
  that are not being reassigned, and moves their leadership back: what KRaft's periodic balance
  does after a broker returns.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Final

from jbod_core import records
from jbod_core.draft import Draft
from jbod_core.election import Acceptor, partition_change
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, PartitionKey, PartitionRegistration
from jbod_core.messages import (
    ElectLeadersReply,
    ElectLeadersRequest,
    PartitionElectionResult,
    TopicElectionResults,
)

#: Kafka's default message of each error an election answers (`Errors.X.message()`).
MESSAGES: Final[dict[ErrorCode, str]] = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}
#: Kafka's cap on the partitions one automatic balance moves.
MAX_ELECTIONS_PER_BALANCE: Final = 1000


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


def _preferred_change(
    acceptor: Acceptor, key: PartitionKey, part: PartitionRegistration
) -> records.PartitionChangeRecord | None:
    """Leadership to the preferred replica, or None when it is not in the ISR or may not lead."""
    preferred = part.replicas[0]
    if (
        preferred not in part.isr
        or not acceptor.accepts(preferred, part.directories[0])
        or acceptor.slow(preferred, part.directories[0])
    ):
        return None
    return records.PartitionChangeRecord(
        topic_id=key[0],
        partition_id=key[1],
        partition_epoch=part.partition_epoch + 1,
        leader=preferred,
        leader_epoch=part.leader_epoch + 1,
    )


def _elect(
    draft: Draft, acceptor: Acceptor, election: ElectionType, key: PartitionKey, part: PartitionRegistration
) -> ErrorCode:
    """Elect one partition's leader into `draft`; the error the partition is answered."""
    if election is ElectionType.PREFERRED:
        if part.leader == part.replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED
        record = _preferred_change(acceptor, key, part)
        missing = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    else:
        if part.leader != records.NO_LEADER:
            return ErrorCode.ELECTION_NOT_NEEDED
        record = partition_change(draft, key, part, acceptor=acceptor, unclean=True)
        missing = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    if record is None:
        return missing
    draft.append(record)
    return ErrorCode.NONE


def _asked(image: ClusterImage, request: ElectLeadersRequest) -> Iterator[tuple[str, list[int]]]:
    if request.partitions is None:
        for topic in sorted(image.topics.values(), key=lambda t: t.name):
            yield topic.name, sorted(topic.partitions)
        return
    for entry in request.partitions:
        yield entry.topic, list(entry.partitions)


def elect_leaders(
    image: ClusterImage, request: ElectLeadersRequest
) -> tuple[list[records.Record], ElectLeadersReply]:
    """The records and the answer of an ElectLeaders request (the module's guarantees)."""
    election = ElectionType(request.election_type)
    every = request.partitions is None
    draft = Draft(image)
    acceptor = Acceptor(draft)
    results = []
    for name, partitions in _asked(image, request):
        topic_id = image.topic_ids_by_name.get(name)
        answered = []
        for index in partitions:
            part = None if topic_id is None else draft.partition((topic_id, index))
            if topic_id is None or part is None:
                message = (
                    f"No such topic as {name}" if topic_id is None else f"No such partition as {name}-{index}"
                )
                answered.append(
                    PartitionElectionResult(
                        partition=index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=message,
                    )
                )
                continue
            error = _elect(draft, acceptor, election, (topic_id, index), part)
            if every and error is ErrorCode.ELECTION_NOT_NEEDED:
                continue
            answered.append(
                PartitionElectionResult(partition=index, error_code=error, error_message=MESSAGES.get(error))
            )
        if answered or not every:
            results.append(TopicElectionResults(topic=name, partitions=answered))
    return draft.records, ElectLeadersReply(results=results)


def preferred_leader_balance(
    image: ClusterImage, *, limit: int = MAX_ELECTIONS_PER_BALANCE
) -> list[records.Record]:
    """Leadership back to the preferred replicas, at most `limit` partitions (the module's guarantee)."""
    draft = Draft(image)
    acceptor = Acceptor(draft)
    for topic_id in sorted(image.topics):
        for index, part in sorted(image.topics[topic_id].partitions.items()):
            if len(draft.records) >= limit:
                return draft.records
            if part.leader == part.replicas[0] or part.reassigning:
                continue
            record = _preferred_change(acceptor, (topic_id, index), part)
            if record is not None:
                draft.append(record)
    return draft.records
