"""When the operator issues, renews and retires certificates (`rotation`, pure), and the
certificates it makes (`certificates`), checked by a real TLS handshake.

Covers: a missing CA is created (the operator's own CA only); a CA is renewed `caRenewBeforeDays`
before it expires by a second CA beside it; leaf certificates move to the new CA only after the
bundle had time to reach every pod; the old CA is dropped only once every leaf is from the new CA
and had time to reach its pod (or once it has expired); a leaf is renewed `renewBeforeDays` before
it expires, for changed DNS names, or when no CA of the bundle signed it, and not when a new one
would expire no later (a user's CA capping it). The certificates made: a server presenting the
keystore `issue` makes is trusted by a client holding the bundle, with hostname verification,
during a CA renewal (both CAs) too; a certificate of another CA is refused.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest

from jbod_operator import certificates, rotation
from jbod_operator.rotation import Authority, Certificate, Policy

NOW = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
POLICY = Policy()


def cert(
    fp: str, issuer: str, *, made: dt.datetime, days: int, dns: frozenset[str] = frozenset()
) -> Certificate:
    return Certificate(
        fingerprint=fp,
        issuer=issuer,
        not_before=made,
        not_after=made + days * DAY,
        dns_names=dns,
        issued_at=made,
    )


CA = cert("ca1", "ca1", made=NOW - 100 * DAY, days=1825)
NAMES = frozenset({"demo-broker-0.demo-brokers.ns.svc"})


def leaf(issuer: str = "ca1", *, made: dt.datetime = NOW - 10 * DAY, days: int = 365) -> Certificate:
    return cert(f"leaf-{issuer}", issuer, made=made, days=days, dns=NAMES)


def test_a_missing_ca_is_created_only_by_the_operator_issuer() -> None:
    assert rotation.ca_action(Authority(current=None), [], POLICY, NOW) == "create"
    assert rotation.ca_action(Authority(current=None), [], Policy(operator_ca=False), NOW) is None


def test_the_ca_is_renewed_ca_renew_before_days_before_it_expires() -> None:
    expiring = cert("ca1", "ca1", made=NOW - 1700 * DAY, days=1825)  # 125 days left
    assert rotation.ca_action(Authority(current=expiring), [leaf()], POLICY, NOW) == "renew-certificate"
    replacing = Policy(ca_expiration="replace-key")
    assert rotation.ca_action(Authority(current=expiring), [leaf()], replacing, NOW) == "replace-key"
    assert rotation.ca_action(Authority(current=CA), [leaf()], POLICY, NOW) is None
    # A user's CA (issuer secret) is the user's to renew.
    assert rotation.ca_action(Authority(current=expiring), [leaf()], Policy(operator_ca=False), NOW) is None


def test_a_renewal_asked_for_runs_now_unless_one_is_under_way() -> None:
    for asked in ("renew-certificate", "replace-key"):
        assert rotation.ca_action(Authority(current=CA), [leaf()], POLICY, NOW, requested=asked) == asked
    new = cert("ca2", "ca2", made=NOW, days=1825)
    renewing = Authority(current=new, previous=(CA,), current_since=NOW)
    assert rotation.ca_action(renewing, [leaf()], POLICY, NOW, requested="replace-key") is None
    user_ca = Policy(operator_ca=False)
    assert rotation.ca_action(Authority(current=CA), [leaf()], user_ca, NOW, requested="replace-key") is None


def test_after_a_renewal_that_kept_the_key_leaves_are_signed_again_at_once() -> None:
    """Both CA certificates verify the old leaves (one key): `describe` names the current one, and
    the leaves signed before it joined the bundle are re-issued without waiting, then the old
    certificate leaves the bundle once the new leaves reached the pods."""
    renewed = cert("ca1b", "ca1b", made=NOW, days=1825)
    renewing = Authority(current=renewed, previous=(CA,), current_since=NOW)
    old_leaf = leaf("ca1b")  # made 10 days ago, verified by the renewed certificate too
    reason = rotation.leaf_reason(old_leaf, NAMES, renewing, POLICY, NOW)
    assert reason is not None and "renewed" in reason
    assert rotation.ca_action(renewing, [old_leaf], POLICY, NOW + DAY) is None
    new_leaf = leaf("ca1b", made=NOW)
    assert rotation.leaf_reason(new_leaf, NAMES, renewing, POLICY, NOW) is None
    assert rotation.ca_action(renewing, [new_leaf], POLICY, NOW) is None
    assert rotation.ca_action(renewing, [new_leaf], POLICY, NOW + rotation.PROPAGATION) == "drop-previous"
    # Once dropped, the bundle's only CA still joined at NOW: the new leaves stay.
    settled = Authority(current=renewed, current_since=NOW)
    assert rotation.leaf_reason(new_leaf, NAMES, settled, POLICY, NOW + DAY) is None
    # Certificate times are whole seconds: a leaf signed in the pass that renewed is not "before".
    same_second = Authority(current=renewed, current_since=NOW + dt.timedelta(microseconds=999))
    assert rotation.leaf_reason(new_leaf, NAMES, same_second, POLICY, NOW) is None


def test_leaves_move_to_the_new_ca_only_once_the_bundle_reached_the_pods() -> None:
    new = cert("ca2", "ca2", made=NOW, days=1825)
    fresh = Authority(current=new, previous=(CA,), current_since=NOW)
    assert rotation.leaf_reason(leaf(), NAMES, fresh, POLICY, NOW) is None
    later = NOW + rotation.PROPAGATION
    reason = rotation.leaf_reason(leaf(), NAMES, fresh, POLICY, later)
    assert reason is not None and "previous CA" in reason
    assert rotation.leaf_reason(leaf("ca2", made=later), NAMES, fresh, POLICY, later) is None


def test_the_old_ca_is_dropped_only_after_every_leaf_is_from_the_new_one_and_delivered() -> None:
    new = cert("ca2", "ca2", made=NOW, days=1825)
    renewing = Authority(current=new, previous=(CA,), current_since=NOW)
    issued = NOW + rotation.PROPAGATION
    mixed = [leaf("ca2", made=issued), leaf("ca1")]
    assert rotation.ca_action(renewing, mixed, POLICY, issued + DAY) is None
    moved = [leaf("ca2", made=issued), leaf("ca2", made=issued)]
    assert rotation.ca_action(renewing, moved, POLICY, issued) is None  # not delivered yet
    assert rotation.ca_action(renewing, moved, POLICY, issued + rotation.PROPAGATION) == "drop-previous"
    assert rotation.ca_action(renewing, [*moved, None], POLICY, issued + DAY) is None
    # An expired old CA signs nothing valid: dropped at once.
    expired = cert("ca0", "ca0", made=NOW - 2000 * DAY, days=1825)
    gone = Authority(current=new, previous=(expired,), current_since=NOW)
    assert rotation.ca_action(gone, mixed, POLICY, NOW) == "drop-previous"


@pytest.mark.parametrize(
    ("certificate", "dns", "expected"),
    [
        (None, NAMES, "there is none"),
        (leaf(), frozenset({"other"}), "DNS names"),
        (leaf(""), NAMES, "no CA"),
        (leaf(made=NOW - 340 * DAY), NAMES, "expires at"),
        (leaf(made=NOW - 300 * DAY), NAMES, None),
        (leaf(), NAMES, None),
    ],
)
def test_leaf_reasons(certificate: Certificate | None, dns: frozenset[str], expected: str | None) -> None:
    reason = rotation.leaf_reason(certificate, dns, Authority(current=CA), POLICY, NOW)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_a_leaf_capped_by_its_ca_is_not_renewed_again_and_again() -> None:
    user_ca = cert("ca1", "ca1", made=NOW - 300 * DAY, days=310)  # expires in 10 days
    capped = Certificate("leaf", "ca1", NOW - DAY, user_ca.not_after, NAMES, NOW - DAY)
    assert rotation.leaf_reason(capped, NAMES, Authority(current=user_ca), POLICY, NOW) is None


def test_nothing_is_issued_without_a_ca() -> None:
    assert rotation.leaf_reason(None, NAMES, Authority(current=None), POLICY, NOW) is None


# ---------------------------------------------------------------------------------------------
# The certificates themselves, in a real handshake


def _serve_once(context: ssl.SSLContext) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def _handshake(tmp_path: Path, keystore: str, bundle: str, host: str) -> bytes:
    (tmp_path / "server.pem").write_text(keystore)
    (tmp_path / "bundle.pem").write_text(bundle)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "server.pem")
    port, thread = _serve_once(server)
    client = ssl.create_default_context(cafile=str(tmp_path / "bundle.pem"))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname=host) as tls,
        ):
            return tls.recv(2)
    finally:
        thread.join(10)


def test_an_issued_certificate_is_trusted_by_the_bundle_with_hostname_verification(tmp_path: Path) -> None:
    host = "demo-broker-0.demo-brokers.ns.svc"
    ca = certificates.make_ca("demo cluster CA", days=30, now=dt.datetime.now(dt.UTC))
    pair = certificates.issue(ca, host, (host,), days=10, now=dt.datetime.now(dt.UTC))
    assert _handshake(tmp_path, pair.keystore(ca.cert_pem), ca.cert_pem, host) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, pair.keystore(ca.cert_pem), ca.cert_pem, "another-host.ns.svc")
    described = certificates.describe(pair.cert_pem, ca.cert_pem)
    assert described.issuer == certificates.fingerprint(ca.cert_pem)
    assert described.dns_names == {host}


def test_during_a_ca_renewal_the_bundle_trusts_both_and_an_unknown_ca_is_refused(tmp_path: Path) -> None:
    host = "demo-controller.ns.svc"
    now = dt.datetime.now(dt.UTC)
    old, new, stranger = (certificates.make_ca(n, days=30, now=now) for n in ("old", "new", "stranger"))
    bundle = old.cert_pem + new.cert_pem
    for ca in (old, new):
        pair = certificates.issue(ca, host, (host,), days=10, now=now)
        assert _handshake(tmp_path, pair.keystore(ca.cert_pem), bundle, host) == b"ok"
        assert certificates.describe(pair.cert_pem, bundle).issuer == certificates.fingerprint(ca.cert_pem)
    foreign = certificates.issue(stranger, host, (host,), days=10, now=now)
    assert certificates.describe(foreign.cert_pem, bundle).issuer == ""
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, foreign.keystore(stranger.cert_pem), bundle, host)
    assert certificates.split(bundle) == [old.cert_pem, new.cert_pem]


def test_a_leaf_never_outlives_its_ca_and_a_non_ca_cannot_sign() -> None:
    now = dt.datetime.now(dt.UTC)
    ca = certificates.make_ca("short", days=5, now=now)
    pair = certificates.issue(ca, "u", days=365, now=now)
    described = certificates.describe(pair.cert_pem, ca.cert_pem)
    assert described.not_after <= certificates.describe(ca.cert_pem).not_after
    with pytest.raises(certificates.CertificateError, match="not a CA"):
        certificates.issue(pair, "x", days=1, now=now)
    with pytest.raises(certificates.CertificateError):
        certificates.describe("not a certificate")


def test_the_operator_trusts_a_clusters_bundle_for_its_hosts_only(tmp_path: Path) -> None:
    from jbod_operator import views

    endpoints = views.Endpoints()
    bundle = tmp_path / "ca.crt"
    endpoints.trust("demo-controller.ns.svc", bundle)
    assert endpoints.ca_file("https://demo-controller.ns.svc:9093") == bundle
    assert endpoints.ca_file("https://demo-controller-1.demo-controller.ns.svc:9093,https://x:1") == bundle
    assert endpoints.ca_file("https://xdemo-controller.ns.svc:9093") is None
    endpoints.trust("demo-controller.ns.svc", None)
    assert endpoints.ca_file("https://demo-controller.ns.svc:9093") is None
    https = {
        "listeners": [
            {"name": "SASL_SSL", "host": "b", "port": 9092},
            {"name": "https", "host": "b", "port": 9192},
        ]
    }
    assert views.listener_url(https) == "https://b:9192"


def test_a_user_certificate_is_named_by_its_cn_only() -> None:
    from cryptography import x509

    now = dt.datetime.now(dt.UTC)
    ca = certificates.make_ca("demo cluster CA", days=30, now=now)
    pair = certificates.issue(ca, "orders-reader", days=10, now=now)
    subject = x509.load_pem_x509_certificate(pair.cert_pem.encode()).subject.rfc4514_string()
    assert subject == "CN=orders-reader"  # User:orders-reader under the CN mapping rule
