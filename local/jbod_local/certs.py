"""The certificates of a `jbodctl local up --tls` cluster, under DIR/tls (PEM files only):

    tls/ca.pem              the truststore: the CA bundle every process and client trusts
                            (the current CA; during a CA rotation the previous one too)
    tls/ca-key.pem          the current CA's key and certificate (what signs the others)
    tls/<process>.pem       a process's keystore: its key, then its certificate and the CA's
                            (controller, controller-N, broker-N, etcd-K), SANs 127.0.0.1 and localhost

Guarantees:
* `ensure` makes what is missing and keeps what exists (a restarted cluster keeps its CA, so
  clients holding tls/ca.pem keep working).
* Every file is written atomically (temp file, fsync, rename) with mode 0600 (the truststore
  0644): a process re-reading a file sees the old one or the new one, never a part of it.
* `rotate` re-issues every keystore (new keys, new serials). With `ca="renew"` it first renews
  the CA certificate keeping its key (`certificates.renew_ca`) and writes the bundle old + new:
  whoever read the old bundle, running Kafka clients included, still verifies every certificate
  (until the old CA certificate expires). With `ca="new-key"` it makes a CA with a new key,
  writes the bundle old + new, waits `trust_delay` seconds (the processes re-read their
  truststore at most once a second, so they trust the new CA before any certificate signed by
  it is presented), then writes the new keystores; a client that read its truststore before
  must restart before the old CA is dropped. `drop_old_ca` leaves only the current CA in the
  bundle.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Literal

from jbod_runtime import certificates, durable_files

TLS_DIR: Final = "tls"
HOST_NAMES: Final = ("localhost",)
HOST_IPS: Final = ("127.0.0.1",)
TRUST_DELAY_S: Final = 2.0


def tls_dir(root: Path) -> Path:
    return root / TLS_DIR


def truststore(root: Path) -> Path:
    return tls_dir(root) / "ca.pem"


def ca_key_file(root: Path) -> Path:
    return tls_dir(root) / "ca-key.pem"


def keystore(root: Path, name: str) -> Path:
    return tls_dir(root) / f"{name}.pem"


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    durable_files.write_atomically(path, data)
    os.chmod(path, mode)


def current_ca(root: Path) -> certificates.Certificate:
    """The CA that signs now: its key and certificate (tls/ca-key.pem)."""
    data = ca_key_file(root).read_bytes()
    key, _sep, cert = data.partition(b"-----END PRIVATE KEY-----\n")
    return certificates.Certificate(cert_pem=cert, key_pem=key + b"-----END PRIVATE KEY-----\n")


def _issue(root: Path, ca: certificates.Certificate, name: str) -> None:
    leaf = certificates.issue(ca, name, dns_names=HOST_NAMES, ip_addresses=HOST_IPS)
    _write(keystore(root, name), leaf.keystore_pem([ca.cert_pem]))


def ensure(root: Path, names: Iterable[str]) -> None:
    """The CA, the truststore and a keystore per name: those missing are made."""
    if not ca_key_file(root).exists():
        ca = certificates.make_ca(f"jbod local CA {root.name}")
        _write(ca_key_file(root), ca.key_pem + ca.cert_pem)
        _write(truststore(root), ca.cert_pem, 0o644)
    ca = current_ca(root)
    for name in names:
        if not keystore(root, name).exists():
            _issue(root, ca, name)


CaRenewal = Literal["renew", "new-key"]


def rotate(
    root: Path,
    names: Iterable[str],
    *,
    ca: CaRenewal | None = None,
    trust_delay: float = TRUST_DELAY_S,
) -> None:
    """Re-issue every keystore; with `ca`, under a renewed CA or one with a new key (module
    docstring)."""
    signing = current_ca(root)
    if ca is not None:
        old = signing
        if ca == "renew":
            signing = certificates.renew_ca(old)
        else:
            signing = certificates.make_ca(f"jbod local CA {root.name} {time.strftime('%Y%m%d%H%M%S')}")
        _write(truststore(root), certificates.trust_bundle(old.cert_pem, signing.cert_pem), 0o644)
        if ca == "new-key":
            time.sleep(trust_delay)
        _write(ca_key_file(root), signing.key_pem + signing.cert_pem)
    for name in names:
        _issue(root, signing, name)


def drop_old_ca(root: Path) -> None:
    """The truststore holds the current CA only."""
    _write(truststore(root), current_ca(root).cert_pem, 0o644)


def served_serial(keystore_path: Path) -> int:
    """The serial of the certificate a keystore presents."""
    return certificates.serial_of(keystore_path.read_bytes())
