"""Certificates for TLS (issue 25): make a CA, issue server and client certificates signed by it,
read when a certificate expires. PEM in, PEM out; the callers write the files.

Guarantees:
* Pure but for the randomness of keys and serials: nothing here reads a clock unless `now` is
  left out, and nothing touches a file. Keys are ECDSA P-256 (small, fast, accepted by
  OpenSSL, librdkafka and Java); signatures SHA-256.
* A CA certificate is a v3 CA (basicConstraints CA:true, keyCertSign); a leaf is CA:false with
  the key usages TLS needs (digitalSignature, keyEncipherment) and the extended key usages asked
  for (server, client or both), its subjectAltName listing the DNS names and IP addresses given.
* `renew_ca` makes a CA certificate again with the same key and subject: certificates signed
  before or after the renewal verify against either CA certificate.
* `keystore_pem` is the agreed keystore format: the unencrypted private key, then the chain
  (leaf first). `Certificate.serial` is the serial a TLS peer sees (tests compare it).

Importable by every component (the operator, jbodctl's local cluster, tests): it imports only
`cryptography`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long a certificate made without an explicit validity lasts.
DEFAULT_VALIDITY = dt.timedelta(days=365)
#: Certificates start this long before `now`, so a peer whose clock is a little behind accepts them.
BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Certificate:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def not_after(self) -> dt.datetime:
        return self.certificate.not_valid_after_utc

    def keystore_pem(self, chain: Sequence[bytes] = ()) -> bytes:
        """The keystore file: the private key, this certificate, then `chain` (its issuers)."""
        return self.key_pem + self.cert_pem + b"".join(chain)


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(
    common_name: str = "jbod CA",
    *,
    now: dt.datetime | None = None,
    validity: dt.timedelta = 10 * DEFAULT_VALIDITY,
) -> Certificate:
    """A self-signed CA, with a new key, valid from `now` (less `BACKDATE`) for `validity`."""
    key = _key()
    return Certificate(_self_signed(_name(common_name), key, _now(now) - BACKDATE, validity), _key_pem(key))


def renew_ca(
    ca: Certificate,
    *,
    now: dt.datetime | None = None,
    validity: dt.timedelta = 10 * DEFAULT_VALIDITY,
) -> Certificate:
    """The CA certificate made again with the same key and subject, valid from `now` (less
    `BACKDATE`) for `validity`, with a new serial.

    Whatever the old certificate signed, the new one verifies too, and the reverse: a peer that
    trusts only the old certificate accepts certificates the renewed CA signs (until the old
    certificate expires). That is how running clients, which read their truststore once, live
    through a CA renewal."""
    key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("only an ECDSA or RSA CA key can be renewed")
    return Certificate(_self_signed(ca.certificate.subject, key, _now(now) - BACKDATE, validity), ca.key_pem)


def _self_signed(
    name: x509.Name,
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    start: dt.datetime,
    validity: dt.timedelta,
) -> bytes:
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
    return cert.public_bytes(serialization.Encoding.PEM)


def issue(  # noqa: PLR0913 - the certificate's fields, all keyword-only
    ca: Certificate,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = True,
    client: bool = True,
    now: dt.datetime | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    not_before: dt.datetime | None = None,
) -> Certificate:
    """A leaf certificate for `common_name`, signed by `ca`, with the SANs given.

    `not_before` (default `now - BACKDATE`) and `validity` set the validity window; a window in
    the past makes an expired certificate (for tests).
    """
    start = not_before if not_before is not None else _now(now) - BACKDATE
    key = _key()
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ca_cert = ca.certificate
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return Certificate(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def expires_at(cert_pem: bytes) -> dt.datetime:
    """When the first certificate of `cert_pem` (a PEM file, e.g. a keystore) stops being valid."""
    return x509.load_pem_x509_certificates(cert_pem)[0].not_valid_after_utc


def serial_of(cert_pem: bytes) -> int:
    """The serial number of the first certificate in `cert_pem`."""
    return x509.load_pem_x509_certificates(cert_pem)[0].serial_number


def trust_bundle(*cas: bytes) -> bytes:
    """A truststore file: the CA certificates given, one after the other (old and new CA during
    a rotation)."""
    return b"".join(ca if ca.endswith(b"\n") else ca + b"\n" for ca in cas)
