"""X.509 for the operator: a cluster CA, the certificates it signs, and what a PEM certificate says.

Guarantees:
* Certificates are made by the shared `jbod_runtime.certificates` (ECDSA P-256 keys in
  unencrypted PKCS#8 PEM, what the agent, the controller, etcd, librdkafka and Kafka's Java
  clients all read); this module adds the operator's strings, a leaf's cap at its CA's expiry and
  the reading of certificates. A certificate's `notBefore` is `BACKDATE` before the clock the
  caller passes, so a node whose clock is a little behind accepts a fresh certificate.
* `issue` signs a certificate valid for serverAuth and clientAuth with the given DNS names
  (subject CN = the first name, or the user name of a client certificate), chained to the CA;
  `keystore` is the agent's and controller's `ssl.keystore.location` file: key, then the chain.
* `renew_ca` keeps the CA's key and subject (what `rotation`'s `renew-certificate` means).
* `describe` reads what the rotation decisions need (`rotation.Certificate`) and never raises on
  a well-formed PEM certificate; `CertificateError` for anything that is not one.
* Nothing here reads a clock, a file or the API server: same inputs, same checks (keys are random).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from jbod_operator.rotation import Authority, Certificate
from jbod_runtime import certificates as runtime_certificates

BACKDATE: Final = runtime_certificates.BACKDATE
_BEGIN: Final = "-----BEGIN CERTIFICATE-----"


class CertificateError(ValueError):
    """Not a PEM certificate or key the operator can use; `str()` is one line."""


@dataclass(frozen=True)
class KeyPair:
    """A private key and its certificate, both PEM."""

    key_pem: str
    cert_pem: str

    def keystore(self, chain: str = "") -> str:
        """One PEM file: the unencrypted key, the certificate, then `chain` (the issuing CA)."""
        return self.key_pem + self.cert_pem + chain


def make_ca(common_name: str, *, days: int, now: dt.datetime) -> KeyPair:
    """A self-signed CA (`jbod_runtime.certificates.make_ca`) valid `days` from `now`."""
    made = runtime_certificates.make_ca(common_name, now=now, validity=dt.timedelta(days=days) + BACKDATE)
    return KeyPair(made.key_pem.decode(), made.cert_pem.decode())


def renew_ca(ca: KeyPair, *, days: int, now: dt.datetime) -> KeyPair:
    """The CA's certificate made again with its key and subject
    (`jbod_runtime.certificates.renew_ca`), valid `days` from `now`: certificates signed before
    verify against it, and the ones it signs against the old certificate."""
    load_ca(ca)
    made = runtime_certificates.renew_ca(
        runtime_certificates.Certificate(ca.cert_pem.encode(), ca.key_pem.encode()),
        now=now,
        validity=dt.timedelta(days=days) + BACKDATE,
    )
    return KeyPair(made.key_pem.decode(), made.cert_pem.decode())


def load_ca(pair: KeyPair) -> tuple[PrivateKeyTypes, x509.Certificate]:
    """The CA's key and certificate; `CertificateError` if they are not a CA and its key."""
    try:
        key = serialization.load_pem_private_key(pair.key_pem.encode(), password=None)
        cert = x509.load_pem_x509_certificate(pair.cert_pem.encode())
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not an unencrypted PEM key and certificate: {exc}") from None
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertificateError("the certificate is not a CA (basicConstraints CA:TRUE)")
    public = key.public_key()
    if public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise CertificateError("the key is not the certificate's key")
    return key, cert


def issue(  # noqa: PLR0913  the CA, then the certificate's names, addresses, life and clock
    ca: KeyPair,
    common_name: str,
    dns_names: tuple[str, ...] = (),
    *,
    days: int,
    now: dt.datetime,
    ip_addresses: tuple[str, ...] = (),
) -> KeyPair:
    """A leaf certificate signed by `ca` for `dns_names`, for server and client use
    (`jbod_runtime.certificates.issue`), never outliving the CA. An IP address among
    `dns_names` (a listener advertised at a node's or load balancer's IP) becomes an IP
    address of the certificate (`describe` lists both kinds among its names)."""
    _, ca_cert = load_ca(ca)
    ip_addresses = (*ip_addresses, *(n for n in dns_names if _is_ip(n)))
    dns_names = tuple(n for n in dns_names if not _is_ip(n))
    start = now - BACKDATE
    until = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    made = runtime_certificates.issue(
        runtime_certificates.Certificate(ca.cert_pem.encode(), ca.key_pem.encode()),
        common_name,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        not_before=start,
        validity=until - start,
    )
    return KeyPair(made.key_pem.decode(), made.cert_pem.decode())


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def split(bundle: str) -> list[str]:
    """The PEM certificates of a bundle, in order, each ending with a newline."""
    parts = [part.strip() for part in bundle.split(_BEGIN) if part.strip()]
    return [f"{_BEGIN}\n{part.removeprefix(_BEGIN).strip()}\n" for part in parts]


def _load(pem: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate: {exc}") from None


def fingerprint(pem: str) -> str:
    """SHA-256 of the certificate (hex): how a CA is named in `rotation`."""
    return _load(pem).fingerprint(hashes.SHA256()).hex()


def signing_first(signing_pem: str, bundle: list[str]) -> str:
    """The bundle's text with the signing CA first: what `describe` takes, so that a certificate
    both a renewed CA and its predecessor verify (one key) reads as the signing CA's."""
    return "".join([signing_pem, *(pem for pem in bundle if pem != signing_pem)])


def authority(signing_pem: str, bundle: list[str], since: dt.datetime | None) -> Authority:
    """The trust state `rotation` decides on: the signing CA, the bundle's others, and when the
    signing CA joined the bundle."""
    return Authority(
        current=describe(signing_pem),
        previous=tuple(describe(pem) for pem in bundle if pem != signing_pem),
        current_since=since,
    )


def describe(pem: str, ca_bundle: str = "") -> Certificate:
    """What `rotation` needs of a certificate: validity, names, and the fingerprint of the first
    certificate of `ca_bundle` that verifies it ("" when none does)."""
    cert = _load(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = frozenset(san.get_values_for_type(x509.DNSName)) | {
            str(ip) for ip in san.get_values_for_type(x509.IPAddress)
        }
    except x509.ExtensionNotFound:
        dns = frozenset()
    issuer = ""
    for ca_pem in split(ca_bundle):
        ca_cert = _load(ca_pem)
        if ca_cert.subject != cert.issuer:
            continue
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, InvalidSignature):
            continue
        issuer = ca_cert.fingerprint(hashes.SHA256()).hex()
        break
    return Certificate(
        fingerprint=cert.fingerprint(hashes.SHA256()).hex(),
        issuer=issuer,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=dns,
        issued_at=cert.not_valid_before_utc + BACKDATE,
    )
