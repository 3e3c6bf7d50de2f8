"""The pure parts of jbodctl's Kafka clients: client properties and JAAS as Kafka's tools read
them, bootstrap servers, the SCRAM client against Kafka's own transcripts and the brokers' SCRAM
server, the join of DescribeLogDirs with the broker's dir ids, a move's outcome, where `--offset`
starts, the producer's idempotence and the demo's verdict."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from jbod_cli import data_cli, demo, log_dirs_cli
from jbod_client import rdkafka, sasl_client
from jbod_client.history import History
from jbod_client.kafka_admin import LogDir, ReplicaOnDisk, negotiate
from jbod_client.kafka_config import (
    KafkaConfigError,
    KafkaSecurity,
    parse_bootstrap_servers,
    parse_jaas_options,
    parse_properties,
    security_from_properties,
)
from jbod_client.metadata import kafka_address
from jbod_kafka import sasl
from jbod_local import kafka_clients
from tests.kafka.test_sasl import KAFKA_TRANSCRIPTS, credential

# -- client properties ---------------------------------------------------------------------------


def test_properties_are_read_as_java_reads_them() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "   \n"
        "a=1\n"
        "b : two words \n"
        "c three\n"
        "long = first \\\n"
        "       second\n"
        "esc=tab\\there\\u0041\\=\\\\\n"
        "key\\ with\\ spaces=x\n"
        "empty=\n"
        "a=replaced\n"
    )
    assert parse_properties(text) == {
        "a": "replaced",
        "b": "two words ",
        "c": "three",
        "long": "first second",
        "esc": "tab\thereA=\\",
        "key with spaces": "x",
        "empty": "",
    }


def test_the_local_clusters_client_properties_read_back_as_admin() -> None:
    password = 'tok"en\\with=odd;chars'
    properties = parse_properties(kafka_clients.client_properties(password))
    security = security_from_properties(properties, source="admin.properties")
    assert security == KafkaSecurity.admin(password)
    assert password not in repr(security)
    assert security.librdkafka_config() == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": password,
    }


def test_jaas_options_quoted_or_not() -> None:
    options = parse_jaas_options(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username=alice password="a b;c";'
    )
    assert options == {"username": "alice", "password": "a b;c"}
    for broken in ("Module required username=alice", "Module required username;", "Module;"):
        with pytest.raises(KafkaConfigError, match=r"sasl\.jaas\.config"):
            parse_jaas_options(broken)


@pytest.mark.parametrize(
    ("properties", "needle"),
    [
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism GSSAPI is not served"),
        (
            {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"},
            "ssl.keystore.type PKCS12 is not supported",
        ),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"}, "no such file"),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/a.key", "ssl.certificate.location": "/b.crt"},
            "must name one PEM file",
        ),
        ({"security.protocol": "HTTP"}, "'HTTP' is not a Kafka security protocol"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism GSSAPI is not served"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs a user"),
    ],
)
def test_client_properties_that_cannot_work_are_one_line(properties: dict[str, str], needle: str) -> None:
    with pytest.raises(KafkaConfigError) as caught:
        security_from_properties(properties, source="my.properties")
    message = str(caught.value)
    assert message.startswith("my.properties: ") and needle in message and "\n" not in message


def test_tls_properties_for_librdkafka_and_java(tmp_path: Path) -> None:
    ca, keystore = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.write_text("x")
    keystore.write_text("x")
    security = security_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "pw",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "ssl.keystore.location": str(keystore),
        },
        source="f",
    )
    assert security.tls and security.sasl
    assert security.librdkafka_config()["ssl.ca.location"] == str(ca)
    assert security.librdkafka_config()["ssl.certificate.location"] == str(keystore)
    java = security.java_config()
    assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.location"] == str(ca)
    assert java["ssl.keystore.location"] == str(keystore)
    assert security_from_properties(java, source="java") == security  # read back the same
    librdkafka = security_from_properties({**security.librdkafka_config()}, source="rdkafka")
    assert librdkafka == security


def test_librdkafka_style_users_and_plaintext() -> None:
    plain = security_from_properties({}, source="f")
    assert plain == KafkaSecurity("PLAINTEXT") and plain.librdkafka_config() == {
        "security.protocol": "PLAINTEXT"
    }
    kcat = security_from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "scram-sha-256",
            "sasl.username": "bob",
            "sasl.password": "pw",
        },
        source="f",
    )
    assert kcat == KafkaSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "pw")
    assert kcat.describe() == "bob over SASL_PLAINTEXT/SCRAM-SHA-256"


def test_bootstrap_servers_are_host_port() -> None:
    assert parse_bootstrap_servers(" 127.0.0.1:9092, broker-1.jbod:19092 ,[::1]:9093") == (
        "127.0.0.1:9092",
        "broker-1.jbod:19092",
        "[::1]:9093",
    )
    assert parse_bootstrap_servers("") == ()
    with pytest.raises(KafkaConfigError, match=r"is a URL: Kafka listeners are host:port \(broker URLs go"):
        parse_bootstrap_servers("http://127.0.0.1:8080")
    for bad in ("127.0.0.1", "host:0", "host:99999", "a b:1"):
        with pytest.raises(KafkaConfigError, match="is not host:port"):
            parse_bootstrap_servers(bad)


def test_a_registered_kafka_listener_is_found_by_its_protocol() -> None:
    broker = {
        "listeners": [
            {"name": "http", "host": "127.0.0.1", "port": 8080},
            {"name": "SASL_PLAINTEXT", "host": "broker-1", "port": 9092},
            {"name": "PLAINTEXT", "host": "::1", "port": 9093},
        ]
    }
    assert kafka_address(broker, "SASL_PLAINTEXT") == "broker-1:9092"
    assert kafka_address(broker, "PLAINTEXT") == "[::1]:9093"
    assert kafka_address({"listeners": broker["listeners"][:1]}, "SASL_PLAINTEXT") is None


def test_versions_are_the_highest_both_sides_know() -> None:
    assert negotiate(35, (1, 5)) == 4  # DescribeLogDirs: this client sends up to v4
    assert negotiate(35, (1, 2)) == 2
    assert negotiate(34, (3, 9)) is None  # AlterReplicaLogDirs v1-v2 here
    assert negotiate(3, None) is None


# -- SCRAM ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("transcript", KAFKA_TRANSCRIPTS[:3], ids=lambda t: t["user"])
def test_scram_client_says_what_kafkas_client_says(transcript: dict[str, object]) -> None:
    """Kafka 4.3.1's ScramSaslClient transcripts: with its nonce, every message is the same (the
    non-ASCII password used as its UTF-8 bytes, as Kafka does); an extension-free first message."""
    first = str(transcript["client_first"])
    nonce = first.split(",r=", 1)[1].split(",", 1)[0]
    client = sasl_client.ScramClient(
        mechanism=str(transcript["mechanism"].value),  # type: ignore[attr-defined]
        username=str(transcript["user"]),
        password=str(transcript["password"]),
        nonce=nonce,
    )
    if "traceid" not in first:
        assert client.first() == first.encode()
    else:  # Kafka signed its extension: the proof differs, so only the first message is compared
        assert client.first() == first.split(",traceid", maxsplit=1)[0].encode()
        return
    assert client.final(str(transcript["server_first"]).encode()) == str(transcript["client_final"]).encode()
    client.verify(str(transcript["server_final"]).encode())


def test_scram_client_logs_in_to_the_brokers_server_and_checks_its_proof() -> None:
    mechanism = sasl.ScramMechanism.SCRAM_SHA_512
    server = sasl.ScramServer(
        mechanism,
        {"ali,ce=": credential(mechanism, "wonderland")}.get,
        server_nonce="server-nonce-0123456789",
        decoy_secret=b"a-secret-of-16-bytes-or-more",
    )
    client = sasl_client.ScramClient(
        mechanism="SCRAM-SHA-512", username="ali,ce=", password="wonderland", nonce=sasl_client.new_nonce()
    )
    assert client.first().startswith(b"n,,n=ali=2Cce=3D,r=")
    final = server.respond(client.final(server.respond(client.first()).token))
    assert final.principal == "ali,ce="
    client.verify(final.token)
    with pytest.raises(sasl_client.SaslClientError, match="signature is wrong"):
        client.verify(b"v=" + base64.b64encode(b"x" * 64))


@pytest.mark.parametrize(
    ("server_first", "needle"),
    [
        (b"r=someone-else,s=c2FsdA==,i=4096", "nonce does not extend"),
        (b"r=NONCE,s=c2FsdA==,i=4096", "nonce does not extend"),
        (b"r=NONCEx,s=c2FsdA==,i=1000", "1000 iterations"),
        (b"r=NONCEx,s=***,i=4096", "do not parse"),
        (b"e=other-error", "refused the exchange: other-error"),
        (b"garbage", "malformed"),
    ],
)
def test_scram_client_refuses_a_bad_server_first(server_first: bytes, needle: str) -> None:
    client = sasl_client.ScramClient(mechanism="SCRAM-SHA-256", username="u", password="p", nonce="NONCE")
    with pytest.raises(sasl_client.SaslClientError, match=needle):
        client.final(server_first)


# -- log dirs ------------------------------------------------------------------------------------


def _replica(partition: int, *, future: bool = False, lag: int = 0) -> ReplicaOnDisk:
    return ReplicaOnDisk("orders", partition, 100 + partition, lag, future)


def test_describe_log_dirs_is_joined_with_the_brokers_ids_by_path() -> None:
    described = [
        LogDir("/d/disk-1", 0, 1000, 600, (_replica(0), _replica(1))),
        LogDir("/d/disk-2", 56, 1000, 0, ()),
        LogDir("/d/disk-3", 0, 1000, 900, (_replica(0, future=True, lag=7),)),
    ]
    view = [
        {"path": "/d/disk-1", "directoryId": "ID1", "state": "online", "error": None, "since": 1.0},
        {
            "path": "/d/disk-2",
            "directoryId": "ID2",
            "state": "offline",
            "error": "EIO: Input/output error",
            "since": 2.0,
            "replicas": [{"topic": "orders", "partition": 2, "sizeBytes": 0, "future": False}],
        },
        {
            "path": "/d/disk-3",
            "directoryId": "ID3",
            "state": "online",
            "cordoned": True,
            "replicas": [
                {"topic": "orders", "partition": 0, "future": True, "moveState": "copying", "copiedBytes": 50}
            ],
        },
        {"path": "/d/disk-4", "directoryId": None, "state": "offline", "error": "failed at start"},
    ]
    merged = log_dirs_cli.merge_log_dirs(described, view)
    assert [(d["path"], d["directoryId"], d["state"]) for d in merged] == [
        ("/d/disk-1", "ID1", "online"),
        ("/d/disk-2", "ID2", "offline"),
        ("/d/disk-3", "ID3", "online"),
        ("/d/disk-4", None, "offline"),
    ]
    assert merged[0]["replicas"] == [
        {"topic": "orders", "partition": 0, "sizeBytes": 100, "future": False},
        {"topic": "orders", "partition": 1, "sizeBytes": 101, "future": False},
    ]
    assert (merged[0]["totalBytes"], merged[0]["usableBytes"]) == (1000, 600)
    # Offline: Kafka lists no replicas, the broker still names what it lost there, and why.
    assert merged[1]["replicas"] == view[1]["replicas"] and merged[1]["error"] == "EIO: Input/output error"
    assert merged[2]["replicas"] == [
        {
            "topic": "orders",
            "partition": 0,
            "sizeBytes": 100,
            "future": True,
            "offsetLag": 7,
            "moveState": "copying",
            "copiedBytes": 50,
        }
    ]
    # Cordoned (KIP-1066) is the broker's word, carried as it is.
    assert [d.get("cordoned") for d in merged] == [False, False, True, None]
    # Without the broker's view, Kafka's answer alone: no id.
    alone = log_dirs_cli.merge_log_dirs(described[1:2], [])
    assert alone[0]["directoryId"] is None and alone[0]["state"] == "offline"


def test_a_moves_outcome_is_read_from_where_the_replica_is() -> None:
    def dirs(current: str, future: str | None = None) -> list[LogDir]:
        out = []
        for path in ("/a", "/b", "/c"):
            replicas = (_replica(3),) if path == current else ()
            if path == future:
                replicas += (_replica(3, future=True),)
            out.append(LogDir(path, 0, None, None, replicas))
        return out

    def outcome(described: list[LogDir], destination: str) -> str | None:
        return log_dirs_cli.move_outcome(described, topic="orders", partition=3, destination=destination)

    assert outcome(dirs("/a"), "/a") == "already-there"
    assert outcome(dirs("/a"), "/b") == "started"
    assert outcome(dirs("/a", "/b"), "/b") == "in-progress"
    assert outcome(dirs("/a", "/b"), "/a") == "cancelled"
    assert outcome(dirs("/a", "/b"), "/c") == "started"  # the running move is replaced
    assert outcome(dirs("/none"), "/a") is None


# -- produce and consume -------------------------------------------------------------------------


def test_the_producer_is_idempotent_exactly_with_acks_all() -> None:
    def settings(acks: int) -> dict[str, object]:
        return data_cli.producer_settings(data_cli._Sending(key=None, partition=None, acks=acks, timeout=2.5))

    assert settings(-1)["acks"] == "all" and settings(-1)["enable.idempotence"] is True
    assert settings(1)["acks"] == "1" and settings(1)["enable.idempotence"] is False
    assert settings(0)["acks"] == "0" and settings(0)["enable.idempotence"] is False
    assert settings(-1)["message.timeout.ms"] == 2500 and settings(-1)["partitioner"] == "murmur2_random"


def test_an_offset_starts_within_the_log() -> None:
    assert data_cli.start_offset(5, 0, 10) == 5
    assert data_cli.start_offset(50, 0, 10) == 10  # beyond the end: at the end
    assert data_cli.start_offset(2, 4, 10) == 4  # deleted by retention: at the log start


# -- the demo's verdict --------------------------------------------------------------------------


def test_the_demos_verdict_counts_duplicates() -> None:
    log = demo.DeliveryLog()
    rids = [log.send(0), log.send(0)]
    log.on_ack(rids[0], 0, 0)
    log.on_ack(rids[1], 0, 1)
    consumed = [("demo", 0, 0, demo.make_value(*rids[0])), ("demo", 0, 1, demo.make_value(*rids[1]))]
    clean = log.history.check(consumed)
    assert clean.ok and clean.duplicates == 0
    assert demo.verdict(clean) == f"[green]{demo.VERDICT_OK}[/], duplicates 0"
    twice = log.history.check([*consumed, ("demo", 0, 2, demo.make_value(*rids[1]))])
    assert not twice.ok and twice.duplicates == 1 and twice.duplicated == [rids[1]]
    assert demo.verdict(twice) == "[red]FAILED[/] (see below), duplicates 1"


def test_producer_statistics_tell_a_producer_without_producer_id() -> None:
    statistics = rdkafka.ProducerStatistics()
    assert not statistics.waiting_for_producer_id  # no statistics yet: nothing to say
    statistics(
        '{"brokers": {"a": {"txretries": 2}, "b": {"txretries": 3}}, '
        '"eos": {"idemp_state": "WaitPID", "producer_id": -1}}'
    )
    assert statistics.retries == 5 and statistics.waiting_for_producer_id
    statistics('{"brokers": {}, "eos": {"idemp_state": "Assigned", "producer_id": 7}}')
    assert not statistics.waiting_for_producer_id and statistics.producer_id == 7
    statistics('{"brokers": {}, "eos": {"idemp_state": "Init", "producer_id": -1}}')  # not idempotent
    assert not statistics.waiting_for_producer_id
    assert History().check([]).duplicates == 0


def test_librdkafkas_errors_are_kept_per_broker_address() -> None:
    from confluent_kafka import KafkaError

    errors = rdkafka.ErrorLog()
    refused = (
        "sasl_plaintext://127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: "
        "Connection refused (after 0ms in state CONNECT)"
    )
    errors(KafkaError(KafkaError._TRANSPORT, refused))
    errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert errors.last == refused  # the summary says less than the error before it
    assert errors.refused("127.0.0.1:9092") and not errors.refused("127.0.0.1:9093")
    assert errors.authentication is None and errors.fatal is None
    denied = "sasl_plaintext://127.0.0.1:9093/1: SASL authentication error: invalid credentials"
    errors(KafkaError(KafkaError._AUTHENTICATION, denied))
    assert errors.authentication == denied and errors.by_address["127.0.0.1:9093"] == denied
    errors(KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/1: Disconnected"))
    assert not errors.refused("127.0.0.1:9092")  # it answered since


def test_a_refused_move_says_which_dir_is_in_the_way() -> None:
    replica = log_dirs_cli._Replica("orders", 3, 2)
    admin = KafkaSecurity.admin("token")
    offline = log_dirs_cli._Destination("AAAAbbbbCCCCddddEEEEff", "/data/d1", "offline")
    assert log_dirs_cli.refusal(56, replica, offline, admin) == (
        "KAFKA_STORAGE_ERROR (errorCode 56): log dir AAAAbbbbCCCCddddEEEEff is offline"
    )
    online = log_dirs_cli._Destination("AAAAbbbbCCCCddddEEEEff", "/data/d1", "online")
    assert log_dirs_cli.refusal(56, replica, online, admin).endswith(
        "the replica's own dir is offline or full"
    )
    assert log_dirs_cli.refusal(57, replica, online, admin) == (
        "LOG_DIR_NOT_FOUND (errorCode 57): broker 2 has no log dir at /data/d1"
    )
    alice = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "pw")
    assert log_dirs_cli.refusal(31, replica, online, alice).endswith(
        "alice may not move replicas (it needs ALTER on the cluster)"
    )
