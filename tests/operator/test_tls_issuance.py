"""`cluster_tls.ensure_tls` through a whole life of a cluster CA, on an in-memory store of Secrets
(a unit test of that one function: the API server's get and apply are replaced by a dict).

Covers: the first pass makes the CA, the trust bundle and a certificate per broker and for the
controllers, each signed by the CA and naming its pod; nothing changes on a second pass; leaf
certificates are renewed `renewBeforeDays` before they expire; the CA is renewed
`caRenewBeforeDays` before it expires with both CAs in the bundle and the leaves left alone until
the bundle has reached the pods; then every leaf is re-issued by the new CA; then the old CA
leaves the bundle. At every step a server presenting any pod's keystore is trusted by a client
holding the current bundle (a real TLS handshake). `issuer: secret` signs with the user's CA and
makes none.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from jbod_operator import certificates, cluster_access, cluster_tls, model, names, rotation
from tests.operator.test_model_builders import OWNER, example
from tests.operator.test_rotation import _handshake

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


class Store:
    """Secrets by name, as the API server would return them (`data` base64)."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.users: list[dict[str, Any]] = []
        self.writes = 0

    def list_objects(
        self, api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        assert kind == "JbodUser"
        return self.users

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        assert (api_version, kind) == ("v1", "Secret")
        return self.secrets.get(name)

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        assert manifest["kind"] == "Secret"
        data = dict(manifest.get("data") or {})
        data |= {
            k: base64.b64encode(v.encode()).decode() for k, v in (manifest.get("stringData") or {}).items()
        }
        metadata = dict(manifest["metadata"])
        kept = (self.secrets.get(metadata["name"], {}).get("metadata") or {}).get("annotations") or {}
        # Server-side apply keeps the annotations another manager (kubectl annotate) set.
        metadata["annotations"] = {**kept, **(metadata.get("annotations") or {})}
        stored = {"metadata": metadata, "data": data}
        self.secrets[manifest["metadata"]["name"]] = stored
        self.writes += 1
        return stored

    def merge_patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> None:
        assert (api_version, kind) == ("v1", "Secret") and set(patch) <= {"metadata", "data"}
        annotations = self.secrets[name]["metadata"].setdefault("annotations", {})
        for key, value in patch["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self.secrets[name]["data"] = {**self.secrets[name]["data"], **(patch.get("data") or {})}
        self.writes += 1

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.secrets[name]["metadata"].get("annotations") or {})

    def text(self, name: str, key: str) -> str:
        return base64.b64decode(self.secrets[name]["data"][key]).decode()


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    fake = Store()
    monkeypatch.setattr(cluster_tls.kube, "get", fake.get)
    monkeypatch.setattr(cluster_tls.kube, "apply", fake.apply)
    monkeypatch.setattr(cluster_tls.kube, "list_objects", fake.list_objects)
    monkeypatch.setattr(cluster_tls.kube, "merge_patch", fake.merge_patch)
    monkeypatch.setattr(cluster_tls.kopf, "info", lambda *a, **k: None)
    return fake


def _spec(**tls: Any) -> model.ClusterSpec:
    data = example()["spec"]
    data["tls"] = {"enabled": True, **tls}
    return model.parse_cluster("demo", data)


SPEC_TLS = {"validityDays": 30, "renewBeforeDays": 5, "caValidityDays": 100, "caRenewBeforeDays": 20}
LEAVES = ["demo-broker-0-tls", "demo-broker-1-tls", "demo-broker-2-tls", "demo-controller-tls"]


def _pass(
    store: Store, monkeypatch: pytest.MonkeyPatch, at: dt.datetime, spec: model.ClusterSpec
) -> str | None:
    monkeypatch.setattr(cluster_access, "now", lambda: at)
    return cluster_tls.ensure_tls({}, spec, "demo", "ns", OWNER, [0, 1, 2])


def _fingerprints(store: Store) -> dict[str, str]:
    return {n: certificates.fingerprint(store.text(n, "tls.crt")) for n in LEAVES}


def _issuers(store: Store) -> set[str]:
    """The CA certificate each leaf reads as signed by, the signing one tried first (as the
    operator does: after a renewal with the same key, both verify every leaf)."""
    bundle = certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))
    signing = store.text("demo-cluster-ca", "ca.crt") if "demo-cluster-ca" in store.secrets else bundle[-1]
    trust = certificates.signing_first(signing, bundle)
    return {certificates.describe(store.text(n, "tls.crt"), trust).issuer for n in LEAVES}


def _all_trusted(store: Store, tmp_path: Path) -> None:
    bundle = store.text("demo-cluster-ca-cert", "ca.crt")
    for name in ("demo-broker-1-tls", "demo-controller-tls"):
        host = sorted(certificates.describe(store.text(name, "tls.crt")).dns_names)[0]
        # The handshake runs now: the certificates' validity is checked against the real clock,
        # so this holds for the first pass only; later passes compare issuers.
        assert _handshake(tmp_path, store.text(name, "tls-combined.pem"), bundle, host) == b"ok"


def test_a_cluster_ca_lives_renews_and_retires(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """caExpirationPolicy replace-key: the renewed CA has a new key, so the leaves wait for the
    bundle to reach the pods before they move to it."""
    spec = _spec(**SPEC_TLS, caExpirationPolicy="replace-key")
    now = dt.datetime.now(dt.UTC)
    bundle = _pass(store, monkeypatch, now, spec)
    assert bundle == store.text("demo-cluster-ca-cert", "ca.crt")
    assert set(store.secrets) == {"demo-cluster-ca", "demo-cluster-ca-cert", *LEAVES}
    ca_fp = certificates.fingerprint(store.text("demo-cluster-ca", "ca.crt"))
    assert _issuers(store) == {ca_fp}
    assert (
        "demo-broker-1.demo-brokers.ns.svc"
        in certificates.describe(store.text("demo-broker-1-tls", "tls.crt")).dns_names
    )
    _all_trusted(store, tmp_path)
    writes = store.writes
    _pass(store, monkeypatch, now + dt.timedelta(minutes=1), spec)
    assert store.writes == writes, "a second pass changes nothing"

    first = _fingerprints(store)
    _pass(store, monkeypatch, now + 26 * DAY, spec)  # leaves expire at +30 days, renewed 5 before
    renewed = _fingerprints(store)
    assert all(renewed[n] != first[n] for n in LEAVES)
    assert certificates.fingerprint(store.text("demo-cluster-ca", "ca.crt")) == ca_fp
    _pass(store, monkeypatch, now + 52 * DAY, spec)  # and again: they expire at +82 days
    renewed = _fingerprints(store)

    renewal = now + 81 * DAY  # the CA expires at +100 days, renewed 20 before
    _pass(store, monkeypatch, renewal, spec)
    new_fp = certificates.fingerprint(store.text("demo-cluster-ca", "ca.crt"))
    assert new_fp != ca_fp
    both = certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))
    assert [certificates.fingerprint(p) for p in both] == [ca_fp, new_fp]
    assert _fingerprints(store) == renewed, "leaves wait until the bundle has reached the pods"

    moved_at = renewal + rotation.PROPAGATION
    _pass(store, monkeypatch, moved_at, spec)
    assert _issuers(store) == {new_fp}
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 2, "old CA kept a while"
    _pass(store, monkeypatch, moved_at + dt.timedelta(minutes=1), spec)
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 2

    _pass(store, monkeypatch, moved_at + rotation.PROPAGATION, spec)
    [only] = certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))
    assert certificates.fingerprint(only) == new_fp
    assert _issuers(store) == {new_fp}


def test_a_ca_renewed_with_its_key_re_signs_the_leaves_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default caExpirationPolicy, renew-certificate: the new CA certificate has the old one's
    key; every leaf is signed again in the same pass (peers holding either certificate verify it),
    and the old certificate leaves the bundle once the new leaves have reached the pods."""
    spec = _spec(**SPEC_TLS)
    now = T0
    _pass(store, monkeypatch, now, spec)
    old_ca, old_key = store.text("demo-cluster-ca", "ca.crt"), store.text("demo-cluster-ca", "ca.key")
    first = _fingerprints(store)

    renewal = now + 81 * DAY  # the CA expires at +100 days, renewed 20 before
    _pass(store, monkeypatch, renewal, spec)
    new_ca = store.text("demo-cluster-ca", "ca.crt")
    assert new_ca != old_ca and store.text("demo-cluster-ca", "ca.key") == old_key
    assert certificates.split(store.text("demo-cluster-ca-cert", "ca.crt")) == [old_ca, new_ca]
    renewed = _fingerprints(store)
    assert all(renewed[n] != first[n] for n in LEAVES), "leaves signed again in the same pass"
    assert _issuers(store) == {certificates.fingerprint(new_ca)}
    # Each leaf verifies against the old certificate alone, too (what running clients hold).
    assert {certificates.describe(store.text(n, "tls.crt"), old_ca).issuer for n in LEAVES} == {
        certificates.fingerprint(old_ca)
    }
    assert certificates.describe(store.text("demo-broker-0-tls", "tls.crt")).not_after > renewal + 29 * DAY

    writes = store.writes
    _pass(store, monkeypatch, renewal + dt.timedelta(minutes=1), spec)
    assert store.writes == writes, "nothing re-issued again"
    _pass(store, monkeypatch, renewal + rotation.PROPAGATION, spec)
    assert certificates.split(store.text("demo-cluster-ca-cert", "ca.crt")) == [new_ca]
    assert _fingerprints(store) == renewed


def test_a_renewal_is_asked_for_with_an_annotation_on_the_ca_secret(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md: `jbod.dev/force-renew: "true"` renews the CA's certificate now (same
    key), `jbod.dev/force-replace: "true"` gives it a new key; the annotation is removed once done."""
    spec = _spec()
    _pass(store, monkeypatch, T0, spec)
    key = store.text("demo-cluster-ca", "ca.key")
    ca = store.text("demo-cluster-ca", "ca.crt")

    def annotate(name: str) -> None:
        store.secrets["demo-cluster-ca"]["metadata"].setdefault("annotations", {})[name] = "true"

    annotate("jbod.dev/force-renew")
    _pass(store, monkeypatch, T0 + DAY, spec)
    assert store.text("demo-cluster-ca", "ca.key") == key and store.text("demo-cluster-ca", "ca.crt") != ca
    assert "jbod.dev/force-renew" not in store.annotations("demo-cluster-ca")
    _pass(store, monkeypatch, T0 + DAY + rotation.PROPAGATION, spec)
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 1

    annotate("jbod.dev/force-replace")
    _pass(store, monkeypatch, T0 + 2 * DAY, spec)
    assert store.text("demo-cluster-ca", "ca.key") != key
    assert "jbod.dev/force-replace" not in store.annotations("demo-cluster-ca")
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 2
    # Asked again while that renewal is under way: it waits (the annotation stays).
    annotate("jbod.dev/force-renew")
    key = store.text("demo-cluster-ca", "ca.key")
    ca = store.text("demo-cluster-ca", "ca.crt")
    _pass(store, monkeypatch, T0 + 2 * DAY + dt.timedelta(minutes=1), spec)
    assert store.text("demo-cluster-ca", "ca.crt") == ca
    assert store.annotations("demo-cluster-ca").get("jbod.dev/force-renew") == "true"


def test_issuer_secret_signs_with_the_users_ca_and_makes_none(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = certificates.make_ca("my CA", days=400, now=T0)
    store.apply(
        {
            "kind": "Secret",
            "metadata": {"name": "my-ca"},
            "stringData": {"tls.crt": mine.cert_pem, "tls.key": mine.key_pem},
        }
    )
    spec = _spec(issuer="secret", caSecret="my-ca")
    bundle = _pass(store, monkeypatch, T0 + DAY, spec)
    assert bundle == mine.cert_pem
    assert "demo-cluster-ca" not in store.secrets
    assert _issuers(store) == {certificates.fingerprint(mine.cert_pem)}
    # The user's CA near its end is the user's to renew: leaves capped by it are not re-issued
    # on every pass.
    _pass(store, monkeypatch, T0 + 380 * DAY, spec)
    capped = _fingerprints(store)
    _pass(store, monkeypatch, T0 + 381 * DAY, spec)
    assert _fingerprints(store) == capped


def test_issuer_secret_without_its_secret_waits(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(cluster_tls.kopf.TemporaryError, match="caSecret"):
        _pass(store, monkeypatch, T0, _spec(issuer="secret", caSecret="missing"))
    assert store.secrets == {}


def test_without_tls_nothing_is_made(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _pass(store, monkeypatch, T0, model.parse_cluster("demo", example()["spec"])) is None
    assert store.secrets == {}
    assert names.cluster_ca("demo") == "demo-cluster-ca"


def test_deleting_a_secret_forces_a_renewal_without_a_gap(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md, "Forcing a renewal": a deleted pod certificate is issued again on the
    next pass; a deleted CA Secret starts a CA renewal in which the old CA stays trusted until
    every certificate is from the new one."""
    spec = _spec()
    _pass(store, monkeypatch, T0, spec)
    old_fp = certificates.fingerprint(store.text("demo-cluster-ca", "ca.crt"))
    before = _fingerprints(store)
    del store.secrets["demo-broker-2-tls"]
    _pass(store, monkeypatch, T0 + DAY, spec)
    after = _fingerprints(store)
    assert after["demo-broker-2-tls"] != before["demo-broker-2-tls"]
    assert {n: after[n] for n in LEAVES if n != "demo-broker-2-tls"} == {
        n: before[n] for n in LEAVES if n != "demo-broker-2-tls"
    }

    del store.secrets["demo-cluster-ca"]
    _pass(store, monkeypatch, T0 + 2 * DAY, spec)
    new_fp = certificates.fingerprint(store.text("demo-cluster-ca", "ca.crt"))
    bundle = certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))
    assert [certificates.fingerprint(p) for p in bundle] == [old_fp, new_fp]
    assert _issuers(store) == {old_fp}
    _pass(store, monkeypatch, T0 + 2 * DAY + rotation.PROPAGATION, spec)
    assert _issuers(store) == {new_fp}
    _pass(store, monkeypatch, T0 + 2 * DAY + 2 * rotation.PROPAGATION, spec)
    assert [
        certificates.fingerprint(p) for p in certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))
    ] == [new_fp]


def test_the_old_ca_stays_until_the_users_certificates_moved(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JbodUser's certificate (`reconcile_user` renews it) holds the old CA in the bundle too."""
    spec = _spec()
    _pass(store, monkeypatch, T0, spec)
    old = certificates.KeyPair(
        store.text("demo-cluster-ca", "ca.key"), store.text("demo-cluster-ca", "ca.crt")
    )
    reader = certificates.issue(old, "reader", days=30, now=T0)
    store.users = [
        {"metadata": {"name": "reader"}, "spec": {"cluster": "demo", "authentication": {"type": "tls"}}}
    ]
    store.apply(
        {"kind": "Secret", "metadata": {"name": "reader"}, "stringData": {"user.crt": reader.cert_pem}}
    )
    del store.secrets["demo-cluster-ca"]  # a forced CA renewal
    _pass(store, monkeypatch, T0 + DAY, spec)
    _pass(store, monkeypatch, T0 + DAY + rotation.PROPAGATION, spec)
    _pass(store, monkeypatch, T0 + DAY + 3 * rotation.PROPAGATION, spec)
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 2
    new = certificates.KeyPair(
        store.text("demo-cluster-ca", "ca.key"), store.text("demo-cluster-ca", "ca.crt")
    )
    moved = certificates.issue(new, "reader", days=30, now=T0 + DAY + 3 * rotation.PROPAGATION)
    store.apply(
        {"kind": "Secret", "metadata": {"name": "reader"}, "stringData": {"user.crt": moved.cert_pem}}
    )
    _pass(store, monkeypatch, T0 + DAY + 4 * rotation.PROPAGATION, spec)
    assert len(certificates.split(store.text("demo-cluster-ca-cert", "ca.crt"))) == 1


def test_the_bundle_makes_the_operators_own_calls_https_and_verified() -> None:
    """`reconcile_cluster` hands `_ensure_tls`'s bundle to `_trust`: from then on the operator
    dials the controllers over https, verifying them with that bundle (None: back to http)."""
    try:
        cluster_access.trust("demo", "ns", "BUNDLE\n")
        url = cluster_access.controller_url("demo", "ns")
        assert url == "https://demo-controller.ns.svc:9093"
        path = cluster_access.ENDPOINTS.ca_file(url)
        assert path is not None and path.read_text() == "BUNDLE\n"
        assert cluster_access.ENDPOINTS.ca_file("https://demo-broker-0.demo-brokers.ns.svc:9192") == path
    finally:
        cluster_access.trust("demo", "ns", None)
    assert cluster_access.controller_url("demo", "ns") == "http://demo-controller.ns.svc:9093"
    assert cluster_access.ENDPOINTS.ca_file("https://demo-controller.ns.svc:9093") is None
