"""X.509 for the operator: a cluster CA, the certificates it signs, and what a PEM certificate says.

Guarantees:
* Keys are ECDSA P-256 in unencrypted PKCS#8 PEM (what the agent, the controller, etcd, librdkafka
  and Kafka's Java clients all read). A certificate's `notBefore` is `BACKDATE` before the clock
  the caller passes, so a node whose clock is a little behind accepts a fresh certificate.
* `issue` signs a certificate valid for serverAuth and clientAuth with the given DNS names
  (subject CN = the first name, or the user name of a client certificate), chained to the CA;
  `keystore` is the agent's and controller's `ssl.keystore.location` file: key, then the chain.
* `describe` reads what the rotation decisions need (`rotation.Certificate`) and never raises on
  a well-formed PEM certificate; `CertificateError` for anything that is not one.
* Nothing here reads a clock, a file or the API server: same inputs, same checks (keys are random).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jbod_operator.rotation import Certificate

BACKDATE: Final = dt.timedelta(minutes=5)
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


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def make_ca(common_name: str, *, days: int, now: dt.datetime) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _key()
    subject = _name(common_name, "jbod")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())


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


def issue(  # noqa: PLR0913  the CA, then the certificate's names, life and clock
    ca: KeyPair,
    common_name: str,
    dns_names: tuple[str, ...] = (),
    *,
    days: int,
    now: dt.datetime,
    organization: str | None = None,
) -> KeyPair:
    """A leaf certificate signed by `ca` for `dns_names` (server and client use)."""
    ca_key, ca_cert = load_ca(ca)
    key = _key()
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return KeyPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())


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


def describe(pem: str, ca_bundle: str = "") -> Certificate:
    """What `rotation` needs of a certificate: validity, names, and the fingerprint of whichever
    certificate of `ca_bundle` signed it ("" when none did)."""
    cert = _load(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = frozenset(san.get_values_for_type(x509.DNSName))
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
