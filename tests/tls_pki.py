"""A test PKI on disk (jbod_runtime.certificates): a CA, keystores for loopback servers and named
clients, and the bad certificates the refusal tests need (another CA, expired, another host)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from jbod_runtime import certificates

LOOPBACK_DNS = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)


@dataclass
class Pki:
    dir: Path
    ca: certificates.Certificate

    @classmethod
    def create(cls, directory: Path, name: str = "test CA") -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        pki = cls(directory, certificates.make_ca(name))
        pki.ca_file.write_bytes(pki.ca.cert_pem)
        return pki

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.pem"

    def keystore(
        self,
        name: str,
        *,
        dns: tuple[str, ...] = LOOPBACK_DNS,
        ips: tuple[str, ...] = LOOPBACK_IPS,
        expired: bool = False,
    ) -> Path:
        """`<dir>/<name>.pem`: key and certificate (CN=name) for a loopback server and client."""
        extra = {}
        if expired:
            extra = {
                "not_before": dt.datetime.now(dt.UTC) - dt.timedelta(days=10),
                "validity": dt.timedelta(days=1),
            }
        cert = certificates.issue(self.ca, name, dns_names=dns, ip_addresses=ips, **extra)  # type: ignore[arg-type]
        path = self.dir / f"{name}.pem"
        path.write_bytes(cert.keystore_pem())
        return path


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (from /proc: its sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def plaintext_answers(port: int) -> list[bytes]:
    """What a port answers to a plaintext HTTP request and to a plaintext Kafka ApiVersions v0
    (each on its own connection, 5 s at most each): a TLS-only port answers no HTTP status line
    and no Kafka response (its correlation id)."""
    import socket
    import struct

    http = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    header = struct.pack(">hhih", 18, 0, 0x5A5A5A5A, 4) + b"test"  # ApiVersions v0, correlation id
    kafka = struct.pack(">i", len(header)) + header
    answers = []
    for request in (http, kafka):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request)
            received = b""
            try:
                while len(received) < 4096:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    received += chunk
            except (TimeoutError, ConnectionError):
                pass
            answers.append(received)
    return answers


def speaks_plaintext(port: int) -> bool:
    http, kafka = plaintext_answers(port)
    return http.startswith(b"HTTP/") or kafka[4:8] == b"\x5a\x5a\x5a\x5a"
