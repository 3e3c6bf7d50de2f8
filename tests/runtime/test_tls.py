"""jbod_runtime.tls and jbod_runtime.certificates over real loopback TLS sockets: what a client
with the right CA accepts, what it refuses (wrong CA, expired, another host, TLS 1.1), client
certificates, reload of changed files, and Kafka's principal mapping rules."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jbod_runtime import certificates, tls


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca = certificates.make_ca("test CA")
    server = certificates.issue(ca, "broker", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    client = certificates.issue(ca, "alice", server=False)
    return {
        "ca": _write(tmp_path / "ca.pem", ca.cert_pem),
        "ca_key": _write(tmp_path / "ca.key", ca.key_pem),
        "server": _write(tmp_path / "server.pem", server.keystore_pem()),
        "client": _write(tmp_path / "client.pem", client.keystore_pem()),
    }


class TlsEcho:
    """A TLS server thread on 127.0.0.1 that answers each connection with the principal it saw."""

    def __init__(self, holder: tls.ServerTls) -> None:
        self.holder = holder
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.holder.context.wrap_socket(raw, server_side=True) as conn:
                    subject = tls.peer_subject(conn)
                    conn.sendall((subject or "-").encode())
            except (ssl.SSLError, OSError) as exc:
                self.errors.append(str(exc))
                raw.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def serve(pki: dict[str, Path]) -> Iterator[list[TlsEcho]]:
    servers: list[TlsEcho] = []
    yield servers
    for server in servers:
        server.close()


def _connect(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> tuple[str, int]:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        assert der is not None
        data = conn.recv(1000).decode()
        return data, certificates.serial_of(ssl.DER_cert_to_PEM_cert(der).encode())


def test_a_client_with_the_ca_connects_and_checks_the_host(
    pki: dict[str, Path], serve: list[TlsEcho]
) -> None:
    server = TlsEcho(tls.ServerTls(tls.TlsFiles(keystore=pki["server"])))
    serve.append(server)
    assert _connect(server.port, tls.client_context(pki["ca"]))[0] == "-"
    assert _connect(server.port, tls.client_context(pki["ca"]), host="localhost")[0] == "-"
    with pytest.raises(
        ssl.SSLCertVerificationError, match=r"Hostname mismatch|doesn't match|IP address mismatch"
    ):
        _connect(server.port, tls.client_context(pki["ca"]), host="broker.example.com")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_refused_wrong_ca_expired_and_old_protocols(
    pki: dict[str, Path], serve: list[TlsEcho], tmp_path: Path
) -> None:
    other_ca = certificates.make_ca("another CA")
    server = TlsEcho(tls.ServerTls(tls.TlsFiles(keystore=pki["server"])))
    serve.append(server)
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _connect(server.port, tls.client_context(_write(tmp_path / "other.pem", other_ca.cert_pem)))

    ca = certificates.Certificate(pki["ca"].read_bytes(), pki["ca_key"].read_bytes())
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    expired = certificates.issue(
        ca, "broker", ip_addresses=["127.0.0.1"], not_before=old, validity=dt.timedelta(days=1)
    )
    stale = TlsEcho(
        tls.ServerTls(tls.TlsFiles(keystore=_write(tmp_path / "expired.pem", expired.keystore_pem())))
    )
    serve.append(stale)
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        _connect(stale.port, tls.client_context(pki["ca"]))

    with pytest.raises(tls.TlsConfigError, match=r"TLS 1\.2 is the minimum"):
        tls.parse_protocols("TLSv1.1,TLSv1.2")
    legacy = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    legacy.load_verify_locations(pki["ca"])
    legacy.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    legacy.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, OSError)):
        _connect(server.port, legacy)


def test_client_certificates_required_and_mapped(pki: dict[str, Path], serve: list[TlsEcho]) -> None:
    files = tls.TlsFiles(keystore=pki["server"], truststore=pki["ca"], client_auth="required")
    server = TlsEcho(tls.ServerTls(files))
    serve.append(server)
    dn, _ = _connect(server.port, tls.client_context(pki["ca"], keystore=pki["client"]))
    assert dn == "CN=alice"
    assert tls.map_principal(tls.parse_principal_rules(tls.DEFAULT_PRINCIPAL_RULES), dn) == "alice"
    with pytest.raises((ssl.SSLError, OSError)):
        # TLS 1.3: the server's refusal arrives with the first read.
        _connect(server.port, tls.client_context(pki["ca"]))


def test_changed_files_are_used_for_new_connections(
    pki: dict[str, Path], serve: list[TlsEcho], tmp_path: Path
) -> None:
    now = [0.0]
    holder = tls.ServerTls(tls.TlsFiles(keystore=pki["server"]), clock=lambda: now[0])
    server = TlsEcho(holder)
    serve.append(server)
    first = certificates.serial_of(pki["server"].read_bytes())
    assert _connect(server.port, tls.client_context(pki["ca"]))[1] == first

    new_ca = certificates.make_ca("new CA")
    renewed = certificates.issue(new_ca, "broker", ip_addresses=["127.0.0.1"])
    pki["server"].write_bytes(renewed.keystore_pem())
    trust = _write(
        tmp_path / "bundle.pem", certificates.trust_bundle(pki["ca"].read_bytes(), new_ca.cert_pem)
    )
    client = tls.ClientTls(pki["ca"], clock=lambda: now[0])
    assert _connect(server.port, client.context)[1] == first  # not re-stat'ed within the second
    now[0] += 1.5
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(server.port, client.context)  # the new CA is not trusted by this client yet
    client = tls.ClientTls(trust, clock=lambda: now[0])
    assert _connect(server.port, client.context)[1] == renewed.serial
    assert holder.reloads == 1

    pki["server"].write_bytes(b"not a keystore")
    now[0] += 1.5
    assert _connect(server.port, client.context)[1] == renewed.serial  # the bad file is not used


def test_principal_rules() -> None:
    rules = tls.parse_principal_rules("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L, DEFAULT")
    assert tls.map_principal(rules, "CN=Alice,OU=Sales") == "alice@sales"
    assert tls.map_principal(rules, "CN=bob,O=acme") == "CN=bob,O=acme"
    default = tls.parse_principal_rules(tls.DEFAULT_PRINCIPAL_RULES)
    assert tls.map_principal(default, "CN=bob,O=acme") == "bob"
    assert tls.map_principal(default, "O=acme") == "O=acme"
    with pytest.raises(tls.TlsConfigError, match="is not DEFAULT or RULE"):
        tls.parse_principal_rules("RULE:broken")


def test_certificates_say_when_they_expire() -> None:
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    ca = certificates.make_ca(now=now)
    leaf = certificates.issue(ca, "x", now=now, validity=dt.timedelta(days=10))
    assert certificates.expires_at(leaf.keystore_pem()) == leaf.not_after
    assert leaf.not_after == now - certificates.BACKDATE + dt.timedelta(days=10)


def test_a_renewed_ca_keeps_its_key_so_either_certificate_verifies_the_other_s_leaves(
    pki: dict[str, Path], serve: list[TlsEcho], tmp_path: Path
) -> None:
    """A client that read only the old CA certificate accepts a server certificate signed after the
    renewal, and a client with only the renewed CA accepts one signed before it; a CA made anew
    (a new key) is refused by the old trust."""
    old_ca = certificates.Certificate(pki["ca"].read_bytes(), pki["ca_key"].read_bytes())
    renewed = certificates.renew_ca(old_ca)
    assert renewed.key_pem == old_ca.key_pem and renewed.serial != old_ca.serial
    assert renewed.certificate.subject == old_ca.certificate.subject
    assert renewed.not_after > old_ca.not_after - dt.timedelta(minutes=1)
    only_new = _write(tmp_path / "new.pem", renewed.cert_pem)

    before = TlsEcho(tls.ServerTls(tls.TlsFiles(keystore=pki["server"])))
    serve.append(before)
    assert _connect(before.port, tls.client_context(only_new))[0] == "-"

    leaf = certificates.issue(renewed, "broker", ip_addresses=["127.0.0.1"])
    after_file = _write(tmp_path / "after.pem", leaf.keystore_pem([renewed.cert_pem]))
    after = TlsEcho(tls.ServerTls(tls.TlsFiles(keystore=after_file)))
    serve.append(after)
    assert _connect(after.port, tls.client_context(pki["ca"]))[1] == leaf.serial

    replaced = certificates.make_ca("test CA")  # same name, another key
    other = certificates.issue(replaced, "broker", ip_addresses=["127.0.0.1"])
    other_file = _write(tmp_path / "other.pem", other.keystore_pem([replaced.cert_pem]))
    refused = TlsEcho(tls.ServerTls(tls.TlsFiles(keystore=other_file)))
    serve.append(refused)
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(refused.port, tls.client_context(pki["ca"]))
