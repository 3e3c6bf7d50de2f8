"""`jbodctl local walkthrough`: KIP-858's controller side, step by step, against a real controller.

Where `jbodctl local demo` runs real brokers and shows that no acknowledged record is lost, this
walk-through needs only a controller and shows the protocol itself: it starts a local
`jbod-controller` process and plays three JBOD brokers over the real HTTP API: registration with
two dirs each, a topic whose replicas start UNASSIGNED, placement through AssignReplicasToDirs,
the fencing gate that keeps a restarted multi-dir broker fenced until its placements are
confirmed, and a disk failure that moves leadership off the failed dir. Every step prints the
controller's own view as tables, and the run fails loudly if the controller's answers ever
contradict what the step expects.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.rule import Rule

from jbod_cli import tables
from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_core.ids import UNASSIGNED_DIR_TEXT, Uuid, random_uuid
from jbod_core.messages import (
    AlterPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopic,
    AssignDirectory,
    AssignReplicasToDirsRequest,
    AssignTopic,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    Message,
    PartitionIndex,
    RegisterBrokerReply,
    RegisterBrokerRequest,
)
from jbod_local.processes import LocalController

TOPIC = "orders"


class WalkthroughError(ClientError):
    """The controller answered something the walk-through did not expect."""


@dataclass
class SimulatedBroker:
    """Plays the broker side of the protocol for one broker id (what `jbod-agent` will do)."""

    broker_id: int
    dirs: list[Uuid]
    rng: random.Random
    epoch: int = -1
    incarnation: Uuid = field(init=False)
    offline: list[Uuid] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.incarnation = random_uuid(self.rng)

    def register(self, client: ControllerClient, cluster_id: str) -> RegisterBrokerReply:
        reply = client.register(
            RegisterBrokerRequest(
                broker_id=self.broker_id,
                cluster_id=cluster_id,
                incarnation_id=self.incarnation,
                log_dirs=self.dirs,
            )
        )
        _expect(reply, f"broker {self.broker_id} registration")
        self.epoch = reply.broker_epoch
        return reply

    def restart(self) -> None:
        self.incarnation = random_uuid(self.rng)
        self.offline = []

    def heartbeat(self, client: ControllerClient, *, want_shut_down: bool = False) -> BrokerHeartbeatReply:
        applied = int(client.cluster()["metadataEndOffset"]) - 1  # the broker has applied everything
        reply = client.heartbeat(
            BrokerHeartbeatRequest(
                broker_id=self.broker_id,
                broker_epoch=self.epoch,
                current_metadata_offset=applied,
                want_fence=False,
                want_shut_down=want_shut_down,
                offline_log_dirs=self.offline,
            )
        )
        _expect(reply, f"broker {self.broker_id} heartbeat")
        return reply

    def place_replicas(self, client: ControllerClient, topic: dict[str, Any]) -> int:
        """Choose a dir for every UNASSIGNED replica (fewest replicas first) and report them."""
        load = dict.fromkeys(self.dirs, 0)
        chosen: dict[Uuid, list[int]] = {d: [] for d in self.dirs}
        for p in topic["partitions"]:
            if self.broker_id not in p["replicas"]:
                continue
            current = p["directories"][p["replicas"].index(self.broker_id)]
            if current != UNASSIGNED_DIR_TEXT:
                load[Uuid.parse(current)] = load.get(Uuid.parse(current), 0) + 1
                continue
            target = min(self.dirs, key=lambda d: (load[d], d))
            load[target] += 1
            chosen[target].append(p["partitionIndex"])
        topic_id = Uuid.parse(topic["topicId"])
        directories = [
            AssignDirectory(
                id=d,
                topics=[
                    AssignTopic(
                        topic_id=topic_id, partitions=[PartitionIndex(partition_index=i) for i in idx]
                    )
                ],
            )
            for d, idx in chosen.items()
            if idx
        ]
        if not directories:
            return 0
        reply = client.assign_replicas_to_dirs(
            AssignReplicasToDirsRequest(
                broker_id=self.broker_id, broker_epoch=self.epoch, directories=directories
            )
        )
        _expect(reply, f"broker {self.broker_id} AssignReplicasToDirs")
        for d in reply.directories:
            for t in d.topics:
                for placed in t.partitions:
                    if placed.error_code != 0:
                        raise WalkthroughError(
                            f"placement of {TOPIC}-{placed.partition_index} failed: {placed.error_code}"
                        )
        return sum(len(idx) for idx in chosen.values())


def _rejoin_isr(client: ControllerClient, brokers: list[SimulatedBroker], *, joining: int) -> int:
    """Every leader asks the controller to add `joining` back to its ISR (the leader's side of §3.4)."""
    topic = client.describe_topic(TOPIC)
    topic_id = Uuid.parse(topic["topicId"])
    by_id = {b.broker_id: b for b in brokers}
    count = 0
    for p in topic["partitions"]:
        if joining in p["isr"] or p["leader"] == -1 or joining not in p["replicas"]:
            continue
        leader = by_id[p["leader"]]
        new_isr = [b for b in p["replicas"] if b in p["isr"] or b == joining]
        reply = client.alter_partition(
            AlterPartitionRequest(
                broker_id=leader.broker_id,
                broker_epoch=leader.epoch,
                topics=[
                    AlterPartitionTopic(
                        topic_id=topic_id,
                        partitions=[
                            AlterPartitionData(
                                partition_index=p["partitionIndex"],
                                leader_epoch=p["leaderEpoch"],
                                partition_epoch=p["partitionEpoch"],
                                new_isr=new_isr,
                            )
                        ],
                    )
                ],
            )
        )
        _expect(reply, "AlterPartition")
        code = reply.topics[0].partitions[0].error_code
        _check(code == 0, f"AlterPartition of {TOPIC}-{p['partitionIndex']} failed with errorCode {code}")
        count += 1
    return count


def _expect(reply: dict[str, Any] | Message, what: str) -> None:
    """Raise unless the reply (a model, or the JSON of an admin call) carries errorCode 0."""
    if isinstance(reply, Message):
        code, message = getattr(reply, "error_code", 0), getattr(reply, "error_message", None)
    else:
        code, message = reply.get("errorCode", 0), reply.get("errorMessage")
    if code != 0:
        raise WalkthroughError(f"{what} failed: {message} (errorCode {code})")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise WalkthroughError(message)


class _Story:
    def __init__(self, console: Console, client: ControllerClient, aliases: dict[str, str]) -> None:
        self.console = console
        self.client = client
        self.aliases = aliases
        self.step = 0

    def title(self, text: str) -> None:
        self.step += 1
        self.console.print(Rule(f"[bold]Step {self.step}[/]  {text}", align="left"))

    def say(self, text: str) -> None:
        self.console.print(text)

    def brokers(self) -> list[dict[str, Any]]:
        brokers = self.client.brokers()
        self.console.print(tables.brokers_table(brokers, self.aliases))
        return brokers

    def topic(self) -> dict[str, Any]:
        topic = self.client.describe_topic(TOPIC)
        self.console.print(tables.partitions_table(topic, self.aliases))
        return topic


def _fenced(brokers: Iterable[dict[str, Any]]) -> dict[int, bool]:
    return {b["brokerId"]: b["fenced"] for b in brokers}


def play(client: ControllerClient, *, cluster_id: str, console: Console, rng: random.Random) -> None:
    brokers = [
        SimulatedBroker(broker_id=i, dirs=[random_uuid(rng), random_uuid(rng)], rng=rng) for i in (1, 2, 3)
    ]
    aliases = {str(d): f"b{b.broker_id}/disk{n}" for b in brokers for n, d in enumerate(b.dirs)}
    story = _Story(console, client, aliases)
    _register(story, brokers, cluster_id=cluster_id)
    _create_and_place(story, brokers)
    _restart_broker_one(story, brokers, cluster_id=cluster_id)
    _fail_a_disk(story, brokers)
    story.title("The cluster and the tail of its metadata log")
    console.print(tables.cluster_table(client.cluster()))
    end = int(client.cluster()["metadataEndOffset"])
    tail = client.metadata(from_offset=max(0, end - 12))["records"]
    console.print(tables.records_table(tail, title="Metadata log (last records)"))


def _register(story: _Story, brokers: list[SimulatedBroker], *, cluster_id: str) -> None:
    client = story.client
    story.title("Three JBOD brokers register, two disks (log dirs) each")
    for b in brokers:
        b.register(client, cluster_id)
    _check(all(_fenced(story.brokers()).values()), "new registrations must start fenced")

    story.title("They heartbeat; caught up with the metadata log, they are unfenced")
    for b in brokers:
        b.heartbeat(client)
    _check(
        not any(_fenced(story.brokers()).values()), "caught-up brokers without unassigned replicas unfence"
    )


def _create_and_place(story: _Story, brokers: list[SimulatedBroker]) -> None:
    client = story.client
    story.title(f"Create topic '{TOPIC}': 6 partitions, replication factor 3")
    created = client.create_topic(
        TOPIC, partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    _expect(created, "topic creation")
    story.say("Multi-dir brokers choose the disk, so every replica starts [yellow]UNASSIGNED[/]:")
    topic = story.topic()

    story.title("Brokers 2 and 3 place their replicas (least-loaded disk) and report them")
    for b in brokers[1:]:
        count = b.place_replicas(client, topic)
        story.say(f"Broker {b.broker_id} sent AssignReplicasToDirs for {count} replicas")
    story.topic()


def _restart_broker_one(story: _Story, brokers: list[SimulatedBroker], *, cluster_id: str) -> None:
    client = story.client
    story.title("Broker 1 restarts: controlled shutdown, then a new incarnation")
    one = brokers[0]
    reply = one.heartbeat(client, want_shut_down=True)
    story.say(
        f"Broker 1 asked to shut down: shouldShutDown={reply.should_shut_down} (it must hand over leadership first)"
    )
    for b in brokers[1:]:
        b.heartbeat(client)  # the others catch up with the leader changes
    reply = one.heartbeat(client, want_shut_down=True)
    _check(reply.should_shut_down, "broker 1 may shut down once it leads nothing")
    story.say("Broker 1 leads nothing now and shuts down; it comes back as a new incarnation:")
    one.restart()
    one.register(client, cluster_id)
    reply = one.heartbeat(client)
    story.brokers()
    _check(reply.is_fenced, "a multi-dir broker with UNASSIGNED replicas must stay fenced")
    story.say(
        "It is caught up, yet the controller keeps it [red]fenced[/]: it has UNASSIGNED replicas (the JBOD gate)"
    )

    story.title("Broker 1 places its replicas; the controller learns every placement and unfences it")
    count = one.place_replicas(client, client.describe_topic(TOPIC))
    story.say(f"Broker 1 sent AssignReplicasToDirs for {count} replicas")
    reply = one.heartbeat(client)
    _check(not reply.is_fenced, "broker 1 must unfence once no replica is unassigned")
    story.brokers()

    story.title("Leaders take broker 1 back into their ISRs once it has caught up (AlterPartition)")
    rejoined = _rejoin_isr(client, brokers, joining=one.broker_id)
    story.say(f"Leaders sent AlterPartition for {rejoined} partitions")
    story.topic()


def _fail_a_disk(story: _Story, brokers: list[SimulatedBroker]) -> None:
    client = story.client
    two = brokers[1]
    failed = two.dirs[0]
    before = client.describe_topic(TOPIC)
    hosted = [
        p["partitionIndex"]
        for p in before["partitions"]
        if two.broker_id in p["replicas"]
        and p["directories"][p["replicas"].index(two.broker_id)] == str(failed)
    ]
    story.title(f"Disk {story.aliases[str(failed)]} of broker 2 fails (it hosts partitions {hosted})")
    two.offline = [failed]
    two.heartbeat(client)
    story.say(
        "Broker 2 reports the dir in its next heartbeat; the controller moves ISR and leadership off it:"
    )
    after = story.topic()
    for p in after["partitions"]:
        if p["partitionIndex"] in hosted:
            _check(p["leader"] != two.broker_id, "a replica on an offline dir must not lead")
            _check(two.broker_id in p["offlineReplicas"], "the replica on the failed dir must be offline")
    story.brokers()


def run(*, data_dir: Path | None, keep: bool) -> None:
    console = Console()
    workdir = data_dir or Path(tempfile.mkdtemp(prefix="jbod-walkthrough-"))
    controller = LocalController(data_dir=workdir, cluster_id="walkthrough")
    console.print(f"Starting jbod-controller (data dir {workdir}) ...")
    controller.start()
    console.print(f"Controller ready at [bold]{controller.url}[/]")
    try:
        with ControllerClient(controller.url, token=read_token(controller.admin_token_file)) as admin:
            play(admin, cluster_id=controller.cluster_id, console=console, rng=random.Random())
        console.print(Rule())
        console.print(
            "[bold green]Walk-through complete:[/] every step matched KIP-858's controller behaviour."
        )
        if keep:
            console.print(
                f"The controller keeps running (pid {controller.process.pid if controller.process else '?'}). Try:\n"
                f"  jbodctl --controller {controller.url} --token-file {controller.admin_token_file} topics describe {TOPIC}"
            )
    finally:
        if not keep:
            controller.stop()
