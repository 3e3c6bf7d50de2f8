"""A small client of Kafka's protocol for what librdkafka does not offer: DescribeLogDirs and
AlterReplicaLogDirs (`jbodctl log-dirs` and `move-replica`; the demo finds a leader's disk with
it), AlterPartitionReassignments and ListPartitionReassignments (`jbodctl reassign`), plus
Metadata's list of brokers; the connection also carries `jbod_client.open_transactions`' calls
(Metadata's leaders, ListOffsets by isolation level, DescribeProducers). Requests are encoded and responses decoded with kio's types
(Kafka's own message schemas) through `jbod_kafka.protocol`; SASL through `sasl_client`.

Guarantees:
* `KafkaConnection.open` connects, learns the broker's versions (ApiVersions v0, which every
  broker answers) and logs in as its `KafkaSecurity` says (SaslHandshake v1, then
  SaslAuthenticate with SCRAM's two rounds or PLAIN's one). Each request is then sent at the
  highest version both sides know (`CLIENT_VERSIONS` and the broker's range); an API the broker
  does not serve in any version this client knows is a `KafkaProtocolError` naming it, sent nowhere.
* One request at a time per connection (a lock), each answered before the next and matched by its
  correlation id; a request not answered within the connection's timeout closes the connection.
* Every failure is one line naming the listener (`jbod_client.kafka_errors`):
  `KafkaUnreachableError` (refused, reset, timed out; the OSError stays the cause),
  `KafkaAuthenticationError` (the broker refused the login: its error code and message, or a
  server that failed SCRAM's proof), `KafkaProtocolError` (an answer that does not decode, or an
  API the broker does not serve).
* Results are frozen values (`LogDir`, `ReplicaOnDisk`); error codes stay Kafka's ints, and
  `describe_error` names them as Kafka does (`KAFKA_STORAGE_ERROR (errorCode 56)`).
* `partition_leaders` (Metadata: brokers, leaders, refused topics) and `latest_offsets`
  (ListOffsets latest under an isolation level) serve `open_transactions` and `group_offsets`.
* `KafkaAdmin` keeps one connection per address for the life of one command; a connection that
  failed is dropped, so the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from jbod_client import sasl_client
from jbod_client.controller import ClientError
from jbod_client.kafka_config import KafkaSecurity
from jbod_client.kafka_errors import KafkaAuthenticationError, KafkaProtocolError, KafkaUnreachableError
from jbod_kafka import protocol

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
LIST_OFFSETS: Final = 2
METADATA: Final = 3
ALTER_REPLICA_LOG_DIRS: Final = 34
DESCRIBE_LOG_DIRS: Final = 35
ALTER_PARTITION_REASSIGNMENTS: Final = 45
LIST_PARTITION_REASSIGNMENTS: Final = 46
DESCRIBE_PRODUCERS: Final = 61
OFFSET_FETCH: Final = 9
LIST_GROUPS: Final = 16
#: The versions this client sends of each API it uses: (lowest, highest). DescribeLogDirs v4 is
#: the first with total and usable bytes (KIP-827); Metadata v1 the first where no topics means none;
#: ListOffsets v2 the first with an isolation level (KIP-98); OffsetFetch v8 the first with many
#: groups in one request (KIP-709), v9 the last naming topics (v10 names them by id).
CLIENT_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    LIST_OFFSETS: (2, 7),
    METADATA: (1, 12),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_PRODUCERS: (0, 0),
    OFFSET_FETCH: (8, 9),
    LIST_GROUPS: (0, 5),
}
_API_NAMES: Final = {
    LIST_OFFSETS: "ListOffsets",
    METADATA: "Metadata",
    SASL_HANDSHAKE: "SaslHandshake",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    ALTER_REPLICA_LOG_DIRS: "AlterReplicaLogDirs",
    DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
    LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
    DESCRIBE_PRODUCERS: "DescribeProducers",
    OFFSET_FETCH: "OffsetFetch",
    LIST_GROUPS: "ListGroups",
}
LATEST: Final = -1  # ListOffsets' timestamp for the log end (or the LSO under read_committed)
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
CONSUMER: Final = -1  # ListOffsets' replica id of a client
NO_TOPIC_ID: Final = uuid.UUID(int=0)  # Metadata by name, not by id
PartitionName = tuple[str, int]
_SIZE: Final = struct.Struct(">i")
_CORRELATION: Final = struct.Struct(">i")
CLIENT_ID: Final = "jbodctl"
#: The largest response frame accepted (a DescribeLogDirs of every replica of a big broker fits).
MAX_FRAME_BYTES: Final = 256 * 1024 * 1024


def error_name(code: int) -> str:
    """Kafka's name of an error code (`KAFKA_STORAGE_ERROR`), or `UNKNOWN_ERROR`."""
    try:
        return KafkaErrorCode(code).name.upper()
    except ValueError:
        return "UNKNOWN_ERROR"


def describe_error(code: int, message: str | None = None) -> str:
    """One line: `LOG_DIR_NOT_FOUND (errorCode 57)[: message]`."""
    text = f"{error_name(code)} (errorCode {code})"
    return f"{text}: {message}" if message else text


@dataclass(frozen=True, slots=True)
class ReplicaOnDisk:
    """A replica DescribeLogDirs lists in a dir; `future` marks the copy of a move in progress."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int
    future: bool


@dataclass(frozen=True, slots=True)
class LogDir:
    """One dir of DescribeLogDirs: its path, Kafka's error code for it (KAFKA_STORAGE_ERROR: offline,
    and then no replicas), its space (None before v4) and its replicas."""

    path: str
    error_code: int
    total_bytes: int | None
    usable_bytes: int | None
    replicas: tuple[ReplicaOnDisk, ...]


def encode_request(api_key: int, version: int, body: Any, *, correlation_id: int) -> bytes:
    """The size-prefixed frame of a request (`jbod_kafka.protocol.encode_request`, as jbodctl)."""
    return protocol.encode_request(api_key, version, body, correlation_id=correlation_id, client_id=CLIENT_ID)


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix; ValueError and kio's
    errors when it does not decode."""
    body_type = protocol.response_type(api_key, version)
    if body_type.__flexible__ and api_key != API_VERSIONS:
        header, offset = entity_reader(ResponseHeaderV1)(frame, 0)
        correlation_id = int(header.correlation_id)
    else:
        (correlation_id,) = _CORRELATION.unpack_from(frame)
        offset = _CORRELATION.size
    body, _size = entity_reader(body_type)(frame, offset)
    return correlation_id, body


def negotiate(api_key: int, broker: tuple[int, int] | None) -> int | None:
    """The version to send of `api_key`: the highest both know, or None when there is none."""
    low, high = CLIENT_VERSIONS[api_key]
    if broker is None:
        return None
    version = min(high, broker[1])
    return version if version >= max(low, broker[0]) else None


class KafkaConnection:
    """One authenticated connection to one broker's Kafka listener (the module's guarantees)."""

    def __init__(
        self,
        address: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        timeout: float,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._correlation_id = 0
        self._versions: dict[int, tuple[int, int]] = {}
        self.closed = False

    @classmethod
    async def open(
        cls, address: str, security: KafkaSecurity, *, timeout: float = 10.0, nonce: str | None = None
    ) -> KafkaConnection:
        """Connect, learn the versions and log in; the nonce is SCRAM's (a fresh one if None)."""
        host, _sep, port = address.rpartition(":")
        try:
            context = security.ssl_context()
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host.strip("[]"),
                    int(port),
                    ssl=context,
                    server_hostname=host.strip("[]") if context is not None else None,
                ),
                timeout,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError (a refused certificate) is an OSError
            raise KafkaUnreachableError(
                f"cannot reach the Kafka listener at {address}: {_reason(exc)}", address=address
            ) from exc
        connection = cls(address, reader, writer, timeout=timeout)
        try:
            await connection._learn_versions()
            if security.sasl:
                await connection._authenticate(security, nonce or sasl_client.new_nonce())
        except BaseException:
            await connection.close()
            raise
        return connection

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    # -- requests -----------------------------------------------------------------------------

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        async with self._lock:
            if self.closed:
                raise KafkaUnreachableError(
                    f"the connection to {self.address} is closed", address=self.address
                )
            self._correlation_id += 1
            sent_id = self._correlation_id
            try:
                self._writer.write(encode_request(api_key, version, body, correlation_id=sent_id))
                frame = await asyncio.wait_for(self._read_frame(), self.timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                await self.close()
                raise KafkaUnreachableError(
                    f"the Kafka listener at {self.address} did not answer "
                    f"{_API_NAMES.get(api_key, f'API {api_key}')}: {_reason(exc)}",
                    address=self.address,
                ) from exc
            try:
                correlation_id, response = decode_response(frame, api_key, version)
            except Exception as exc:  # kio raises ValueError, IndexError, struct.error...
                await self.close()
                raise KafkaProtocolError(
                    f"the answer of {self.address} to API {api_key} v{version} does not decode: {exc}"
                ) from exc
            if correlation_id != sent_id:
                await self.close()
                raise KafkaProtocolError(
                    f"{self.address} answered request {correlation_id} where {sent_id} was expected"
                )
            return response

    async def _read_frame(self) -> bytes:
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))
        if not 0 <= size <= MAX_FRAME_BYTES:
            raise OSError(f"a response frame of {size} bytes")
        return await self._reader.readexactly(size)

    async def request(self, api_key: int, **fields: Any) -> Any:
        """Send `api_key` built from `fields` (`protocol.build`: fields a version lacks are dropped)
        at the negotiated version; its decoded response."""
        version = negotiate(api_key, self._versions.get(api_key))
        if version is None:
            name = _API_NAMES.get(api_key, f"API {api_key}")
            low, high = CLIENT_VERSIONS[api_key]
            raise KafkaProtocolError(f"the broker at {self.address} does not serve {name} v{low}-v{high}")
        body = protocol.build(protocol.request_type(api_key, version), **fields)
        return await self._exchange(api_key, version, body)

    async def _learn_versions(self) -> None:
        response = await self._exchange(API_VERSIONS, 0, protocol.request_type(API_VERSIONS, 0)())
        if int(response.error_code) != 0:
            raise KafkaProtocolError(
                f"{self.address} refused ApiVersions: {describe_error(int(response.error_code))}"
            )
        self._versions = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}

    async def _authenticate(self, security: KafkaSecurity, nonce: str) -> None:
        mechanism = str(security.mechanism)
        handshake = await self.request(SASL_HANDSHAKE, mechanism=mechanism)
        code = int(handshake.error_code)
        if code != 0:
            offered = ", ".join(handshake.mechanisms or ()) or "none"
            raise KafkaAuthenticationError(
                f"the Kafka listener at {self.address} does not take {mechanism} "
                f"({describe_error(code)}; it offers {offered})"
            )
        try:
            await sasl_client.converse(
                mechanism,
                str(security.username),
                str(security.password),
                nonce=nonce,
                round_trip=lambda token: self._sasl_round(token, security),
            )
        except sasl_client.SaslClientError as exc:
            raise KafkaAuthenticationError(f"login to {self.address} failed: {exc}") from exc

    async def _sasl_round(self, token: bytes, security: KafkaSecurity) -> bytes:
        response = await self.request(SASL_AUTHENTICATE, auth_bytes=token)
        code = int(response.error_code)
        if code != 0:
            raise KafkaAuthenticationError(
                f"the Kafka listener at {self.address} refused {security.describe()}: "
                f"{describe_error(code, response.error_message)}"
            )
        return bytes(response.auth_bytes)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the connection was closed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# -- the calls ---------------------------------------------------------------------------------


async def metadata_brokers(connection: KafkaConnection) -> dict[int, str]:
    """node id → `host:port` of every broker Metadata lists (Kafka lists the unfenced ones)."""
    response = await connection.request(
        METADATA, topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return {int(b.node_id): f"{b.host}:{int(b.port)}" for b in response.brokers}


async def partition_leaders(
    connection: KafkaConnection, topics: Sequence[str] | None
) -> tuple[dict[int, str], dict[PartitionName, int], dict[str, int]]:
    """Metadata of `topics` (every topic when None): brokers (id → `host:port`), each partition's
    leader (-1: none), and the error code of each topic Metadata refused."""
    response = await connection.request(
        METADATA,
        topics=None if topics is None else [{"name": t, "topic_id": NO_TOPIC_ID} for t in topics],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in response.brokers}
    leaders: dict[PartitionName, int] = {}
    refused: dict[str, int] = {}
    for topic in response.topics:
        code = int(topic.error_code)
        if code != 0:
            refused[str(topic.name)] = code
            continue
        for p in topic.partitions:
            leaders[(str(topic.name), int(p.partition_index))] = int(p.leader_id)
    return brokers, leaders, refused


def by_topic(partitions: Sequence[PartitionName]) -> dict[str, list[int]]:
    """Each topic's partition indexes, sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, index in partitions:
        grouped.setdefault(topic, []).append(index)
    return {t: sorted(ps) for t, ps in grouped.items()}


async def latest_offsets(
    connection: KafkaConnection, partitions: Sequence[PartitionName], isolation: int
) -> dict[PartitionName, tuple[int, int]]:
    """(error code, offset) of each partition's latest offset under `isolation`
    (`READ_UNCOMMITTED`: the high watermark; `READ_COMMITTED`: the last stable offset)."""
    response = await connection.request(
        LIST_OFFSETS,
        replica_id=CONSUMER,
        isolation_level=isolation,
        topics=[
            {
                "name": t,
                "partitions": [
                    {"partition_index": i, "current_leader_epoch": -1, "timestamp": LATEST} for i in ps
                ],
            }
            for t, ps in by_topic(partitions).items()
        ],
    )
    return {
        (str(t.name), int(p.partition_index)): (int(p.error_code), int(p.offset))
        for t in response.topics
        for p in t.partitions
    }


async def describe_log_dirs(
    connection: KafkaConnection, topics: Mapping[str, Sequence[int]] | None = None
) -> list[LogDir]:
    """Every log dir of the broker (`topics` None: with every replica; else only those named)."""
    wanted = None if topics is None else [{"topic": t, "partitions": list(p)} for t, p in topics.items()]
    response = await connection.request(DESCRIBE_LOG_DIRS, topics=wanted)
    code = int(getattr(response, "error_code", 0))
    if code != 0:
        raise KafkaProtocolError(
            f"the broker at {connection.address} refused DescribeLogDirs: {describe_error(code)}"
        )
    dirs = []
    for result in response.results:
        total = getattr(result, "total_bytes", None)
        usable = getattr(result, "usable_bytes", None)
        replicas = tuple(
            ReplicaOnDisk(
                topic=topic.name,
                partition=int(p.partition_index),
                size_bytes=int(p.partition_size),
                offset_lag=int(p.offset_lag),
                future=bool(p.is_future_key),
            )
            for topic in result.topics
            for p in topic.partitions
        )
        dirs.append(
            LogDir(
                path=result.log_dir,
                error_code=int(result.error_code),
                total_bytes=None if total is None or int(total) < 0 else int(total),
                usable_bytes=None if usable is None or int(usable) < 0 else int(usable),
                replicas=replicas,
            )
        )
    return dirs


async def alter_replica_log_dir(connection: KafkaConnection, *, path: str, topic: str, partition: int) -> int:
    """Ask the broker to move its replica of `topic`-`partition` to the log dir at `path`; Kafka's
    error code for it (0: the move started, runs, or there was nothing to do)."""
    response = await connection.request(
        ALTER_REPLICA_LOG_DIRS,
        dirs=[{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}],
    )
    for result in response.results:
        for p in result.partitions:
            if result.topic_name == topic and int(p.partition_index) == partition:
                return int(p.error_code)
    raise KafkaProtocolError(f"the broker at {connection.address} did not answer for {topic}-{partition}")


@dataclass(frozen=True, slots=True)
class ReassignmentInProgress:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


async def alter_partition_reassignments(
    connection: KafkaConnection,
    targets: Mapping[PartitionName, Sequence[int] | None],
    *,
    timeout_ms: int = 60_000,
) -> dict[PartitionName, tuple[int, str | None]]:
    """Start (target replicas) or cancel (None) reassignments; Kafka's (error code, message) per
    partition. A top-level refusal (authorization, no controller) is given to every partition."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "replicas": None if replicas is None else list(replicas)}
        )
    response = await connection.request(
        ALTER_PARTITION_REASSIGNMENTS,
        timeout=timeout_ms,
        allow_replication_factor_change=True,
        topics=[{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    )
    top = int(response.error_code)
    out: dict[PartitionName, tuple[int, str | None]] = {}
    for topic in response.responses:
        for p in topic.partitions:
            code = int(p.error_code) or top
            out[(topic.name, int(p.partition_index))] = (code, p.error_message or response.error_message)
    for name in targets:
        out.setdefault(
            name,
            (top, response.error_message)
            if top
            else (int(KafkaErrorCode.unknown_server_error), "not answered"),
        )
    return out


async def list_partition_reassignments(
    connection: KafkaConnection, topics: Mapping[str, Sequence[int]] | None = None
) -> list[ReassignmentInProgress]:
    """The partitions being reassigned (all, or those of `topics` that are), by topic and partition."""
    wanted = (
        None if topics is None else [{"name": t, "partition_indexes": list(p)} for t, p in topics.items()]
    )
    response = await connection.request(LIST_PARTITION_REASSIGNMENTS, timeout=60_000, topics=wanted)
    code = int(response.error_code)
    if code != 0:
        raise KafkaProtocolError(
            f"the broker at {connection.address} refused ListPartitionReassignments: "
            f"{describe_error(code, response.error_message)}"
        )
    found = [
        ReassignmentInProgress(
            topic=topic.name,
            partition=int(p.partition_index),
            replicas=tuple(int(b) for b in p.replicas),
            adding_replicas=tuple(int(b) for b in p.adding_replicas),
            removing_replicas=tuple(int(b) for b in p.removing_replicas),
        )
        for topic in response.topics
        for p in topic.partitions
    ]
    return sorted(found, key=lambda o: (o.topic, o.partition))


class KafkaAdmin:
    """The connections one command makes: to the bootstrap servers for Metadata, and to brokers
    by address (the module's guarantees)."""

    def __init__(self, bootstrap: Sequence[str], security: KafkaSecurity, *, timeout: float = 10.0) -> None:
        self.bootstrap = list(bootstrap)
        self.security = security
        self.timeout = timeout
        self._connections: dict[str, asyncio.Task[KafkaConnection]] = {}

    async def connection(self, address: str) -> KafkaConnection:
        task = self._connections.get(address)
        if task is not None and task.done() and (task.exception() is not None or task.result().closed):
            task = None
        if task is None:
            task = asyncio.ensure_future(KafkaConnection.open(address, self.security, timeout=self.timeout))
            self._connections[address] = task
        return await asyncio.shield(task)

    async def brokers(self) -> dict[int, str]:
        """Metadata's brokers, from the first bootstrap server that answers; the last server's
        error when none does (each tried once, in order)."""
        failure: ClientError | None = None
        for address in self.bootstrap:
            try:
                return await metadata_brokers(await self.connection(address))
            except KafkaAuthenticationError:
                raise  # the same credentials fail everywhere
            except ClientError as exc:
                failure = exc
        if failure is None:
            raise KafkaUnreachableError("no Kafka bootstrap server to ask")
        if len(self.bootstrap) > 1:
            raise KafkaUnreachableError(
                f"no Kafka bootstrap server answered ({', '.join(self.bootstrap)}): {failure}"
            ) from failure
        raise failure

    async def describe_log_dirs(
        self, address: str, topics: Mapping[str, Sequence[int]] | None = None
    ) -> list[LogDir]:
        return await describe_log_dirs(await self.connection(address), topics)

    async def alter_replica_log_dir(self, address: str, *, path: str, topic: str, partition: int) -> int:
        return await alter_replica_log_dir(
            await self.connection(address), path=path, topic=topic, partition=partition
        )

    async def any_broker(self) -> KafkaConnection:
        """A connection to the first bootstrap server that answers (admin requests any broker
        forwards to the controller); the last server's error when none does."""
        failure: ClientError | None = None
        for address in self.bootstrap:
            try:
                return await self.connection(address)
            except KafkaAuthenticationError:
                raise
            except ClientError as exc:
                failure = exc
        raise failure or KafkaUnreachableError("no Kafka bootstrap server to ask")

    async def alter_partition_reassignments(
        self, targets: Mapping[PartitionName, Sequence[int] | None]
    ) -> dict[PartitionName, tuple[int, str | None]]:
        return await alter_partition_reassignments(await self.any_broker(), targets)

    async def list_partition_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None = None
    ) -> list[ReassignmentInProgress]:
        return await list_partition_reassignments(await self.any_broker(), topics)

    async def aclose(self) -> None:
        tasks = list(self._connections.values())
        self._connections.clear()
        for task in tasks:
            if not task.done():
                task.cancel()
            try:
                connection = await task
            except (ClientError, asyncio.CancelledError):
                continue
            await connection.close()

    async def __aenter__(self) -> KafkaAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
