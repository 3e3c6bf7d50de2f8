"""`jbod-controller`: command line, data-dir identity, tokens, and the server's lifetime (§5).

Guarantees:
* Bad flags, an unusable data dir, a cluster id that differs from the stored one, an unreadable
  token file or a port in use print one line `jbod-controller: error: ...` and exit 2 (usage) or
  1 (environment); never a traceback.
* The cluster id is stored in `<data-dir>/meta.properties` on first start. A token file that
  does not exist is created with a fresh random token (mode 0600) and its path is printed (with the
  `Listening on` line).
* The listening port is bound before anything is written, so a port in use touches no file. A
  start that fails after that (unreadable token, unrecoverable log) removes every file and dir
  it created (data dir, lock, `meta.properties`, token files and their parent dirs) before it
  exits; a failed start leaves the disk as it found it.
* Only one controller runs on a data dir at a time (an exclusive lock on `<data-dir>/.lock`).
* The HTTP server answers `/healthz` while the log is recovered; `/readyz` turns 200 after.
* TLS (issue 25): with `--ssl-keystore-location` the controller serves https only on `--listen`
  (TLS 1.2+, the keystore and truststore re-read when they change: `jbod_runtime.tls`); a file
  that does not load, or an `--advertised-url` that is not https, is refused before anything is
  bound or written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from jbod_controller.etcd_gateway import EtcdTls
from jbod_controller.http_api import CONNECTION_LIMITS, ControllerApi, Tokens
from jbod_controller.metrics import ControllerMetrics
from jbod_controller.quorum import QuorumConfig
from jbod_controller.service import ControllerConfig, ControllerService, RecoveryError
from jbod_core import meta_properties
from jbod_runtime import console, durable_files, http_server, tls
from jbod_runtime.event_loop import run_event_loop

PROG = "jbod-controller"
CLUSTER_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
CONTROLLER_NODE_ID = 0

log = logging.getLogger("jbod_controller")


def _at_least_one(seconds: int) -> int:
    if seconds < 1:
        raise UsageError(f"--leader-imbalance-check-interval-seconds must be >= 1, got {seconds}")
    return seconds


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line."""


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port_text)


def build_parser() -> argparse.ArgumentParser:
    parser = console.ArgumentParser(
        prog=PROG, description="The JBOD metadata controller (KIP-858 control plane)."
    )
    parser.add_argument(
        "--data-dir", required=True, type=Path, help="where the metadata log and identity live"
    )
    parser.add_argument("--cluster-id", required=True, help="the cluster id (stored on first start)")
    parser.add_argument(
        "--listen", default="127.0.0.1:9093", type=parse_listen, help="HOST:PORT (port 0 = any free port)"
    )
    parser.add_argument(
        "--cluster-token-file", type=Path, help="bearer token of brokers (default DATA_DIR/cluster.token)"
    )
    parser.add_argument(
        "--admin-token-file", type=Path, help="bearer token of admins (default DATA_DIR/admin.token)"
    )
    parser.add_argument(
        "--broker-session-timeout-ms",
        type=int,
        default=9000,
        help="fence brokers not heard from for this long",
    )
    parser.add_argument(
        "--snapshot-interval-records",
        type=int,
        default=200_000,
        help="cut a snapshot after this many records",
    )
    parser.add_argument(
        "--log-retention-bytes",
        type=int,
        default=1024**3,
        help="delete log segments covered by a snapshot beyond this size",
    )
    parser.add_argument(
        "--default-replication-factor",
        type=int,
        help="replication factor of a topic created without one (Kafka's default.replication.factor)",
    )
    parser.add_argument(
        "--default-min-insync-replicas",
        type=int,
        help="min.insync.replicas written into a new topic's configs when the create sets none",
    )
    parser.add_argument(
        "--auto-leader-rebalance-enable",
        choices=["true", "false"],
        default="true",
        help="move leadership back to preferred replicas periodically (Kafka's auto.leader.rebalance.enable)",
    )
    parser.add_argument(
        "--leader-imbalance-check-interval-seconds",
        type=int,
        default=300,
        help="how often leadership is balanced (Kafka's leader.imbalance.check.interval.seconds)",
    )
    parser.add_argument(
        "--connections-max-idle-ms",
        type=int,
        default=int(CONNECTION_LIMITS.idle_timeout_s * 1000),
        help="close a connection with no request in progress after this long (Kafka's key)",
    )
    parser.add_argument(
        "--request-read-timeout-ms",
        type=int,
        default=int(CONNECTION_LIMITS.read_timeout_s * 1000),
        help="a request's headers, and its body, must arrive within this long, else the connection closes",
    )
    quorum = parser.add_argument_group("controller quorum on etcd (high availability, §3.8)")
    quorum.add_argument(
        "--etcd-endpoints",
        help="URL[,URL...] of etcd v3.5+ (its v3 JSON gateway); without it, one controller and its file log",
    )
    quorum.add_argument(
        "--node-id",
        help="this controller's id in the quorum (unique, >= 1), or a StatefulSet pod name NAME-K (id K+1)",
    )
    quorum.add_argument("--etcd-prefix", help="key prefix of this cluster in etcd (default /jbod/CLUSTER_ID)")
    quorum.add_argument(
        "--lease-ms", type=int, default=2000, help="etcd lease of the election (whole seconds in etcd)"
    )
    quorum.add_argument("--etcd-cacert", type=Path, help="CA bundle that signed etcd's certificate (https)")
    quorum.add_argument("--etcd-cert", type=Path, help="client certificate for etcd (--client-cert-auth)")
    quorum.add_argument("--etcd-key", type=Path, help="the client certificate's private key")
    parser.add_argument(
        "--advertised-url",
        help="the URL clients use to reach this controller (default http(s)://LISTEN_HOST:PORT)",
    )
    tls_flags = parser.add_argument_group("TLS (issue 25): https on --listen, PEM files")
    tls_flags.add_argument(
        "--ssl-keystore-location",
        type=Path,
        help="PEM file: the private key and certificate chain (leaf first); serve https only",
    )
    tls_flags.add_argument(
        "--ssl-truststore-location",
        type=Path,
        help="PEM bundle of the CAs client certificates are verified against",
    )
    tls_flags.add_argument(
        "--ssl-client-auth",
        default="none",
        choices=list(tls.CLIENT_AUTH_MODES),
        help="ask clients for a certificate (default none)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?-(\d{1,9})")


def parse_node_id(text: str) -> int:
    """`--node-id`: an integer >= 1, or a StatefulSet pod name `NAME-K` meaning K + 1 (extension)."""
    if text.isdigit():
        value = int(text)
    elif (match := POD_NAME.fullmatch(text)) is not None:
        value = int(match.group(2)) + 1
    else:
        raise UsageError(f"--node-id must be an integer >= 1 or a StatefulSet pod name NAME-K, got {text!r}")
    if not 1 <= value <= 2**31 - 1:
        raise UsageError(f"--node-id must be between 1 and {2**31 - 1}, got {text}")
    return value


def etcd_tls(args: argparse.Namespace, endpoints: tuple[str, ...]) -> EtcdTls | None:
    """The TLS flags checked (files readable, cert and key together, https endpoints)."""
    given = {"--etcd-cacert": args.etcd_cacert, "--etcd-cert": args.etcd_cert, "--etcd-key": args.etcd_key}
    if all(value is None for value in given.values()):
        return None
    if (args.etcd_cert is None) != (args.etcd_key is None):
        raise UsageError("--etcd-cert and --etcd-key go together")
    for flag, path in given.items():
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: not a readable file")
    plain = [e for e in endpoints if not e.startswith("https://")]
    if plain:
        raise UsageError(f"--etcd-cacert/--etcd-cert need https:// endpoints, got {plain[0]}")
    etcd = EtcdTls(
        cacert=str(args.etcd_cacert) if args.etcd_cacert else None,
        cert=str(args.etcd_cert) if args.etcd_cert else None,
        key=str(args.etcd_key) if args.etcd_key else None,
    )
    try:
        etcd.context()
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise UsageError(f"cannot use the etcd TLS files: {exc}") from exc
    return etcd


def quorum_config(args: argparse.Namespace) -> QuorumConfig | None:
    """The quorum flags checked; None without `--etcd-endpoints` (UsageError on bad flags)."""
    if args.etcd_endpoints is None:
        for flag, value in (
            ("--node-id", args.node_id),
            ("--etcd-prefix", args.etcd_prefix),
            ("--etcd-cacert", args.etcd_cacert),
            ("--etcd-cert", args.etcd_cert),
            ("--etcd-key", args.etcd_key),
        ):
            if value is not None:
                raise UsageError(f"{flag} needs --etcd-endpoints")
        return None
    endpoints = tuple(e.strip().rstrip("/") for e in args.etcd_endpoints.split(",") if e.strip())
    if not endpoints:
        raise UsageError("--etcd-endpoints: no URL given")
    for endpoint in endpoints:
        if not re.fullmatch(r"https?://[^/\s]+", endpoint):
            raise UsageError(f"--etcd-endpoints: {endpoint!r} is not an http(s)://HOST:PORT URL")
    if args.node_id is None:
        raise UsageError("--etcd-endpoints needs --node-id N (unique in the quorum, >= 1)")
    node_id = parse_node_id(args.node_id)
    if not 1000 <= args.lease_ms <= 60_000:
        raise UsageError(f"--lease-ms must be between 1000 and 60000, got {args.lease_ms}")
    prefix = args.etcd_prefix if args.etcd_prefix is not None else f"/jbod/{args.cluster_id}"
    if not prefix.startswith("/") or len(prefix) < 2:
        raise UsageError(f"--etcd-prefix must start with / and name something, got {prefix!r}")
    return QuorumConfig(
        tls=etcd_tls(args, endpoints),
        node_id=node_id,
        url="",
        endpoints=endpoints,
        prefix=prefix.rstrip("/"),
        lease_ms=args.lease_ms,
    )


@dataclass
class Created:
    """The files and dirs this start created, so that a failed start can remove them again."""

    paths: list[Path] = field(default_factory=list)
    tokens: list[Path] = field(default_factory=list)

    def note_missing(self, path: Path) -> None:
        """Remember the outermost of `path` and its parents that does not exist yet."""
        top = None
        for candidate in (path, *path.parents):
            if candidate.exists() or candidate.is_symlink():
                break
            top = candidate
        if top is not None:
            self.paths.append(top)

    def remove(self) -> None:
        """Remove what was created, newest first (a dir with everything in it)."""
        for path in reversed(self.paths):
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        self.paths.clear()


def load_or_create_token(path: Path, created: Created | None = None) -> str:
    """The token in `path`; a missing file gets a fresh token (mode 0600), noted in `created`."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        if created is not None:
            created.note_missing(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise UsageError(f"cannot create token file {path}: {exc.strerror}") from exc
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        if created is not None:
            created.tokens.append(path)
        else:
            print(f"Created token file {path}", flush=True)
        return token
    except OSError as exc:
        raise UsageError(f"cannot read token file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read token file {path}: not UTF-8 text") from exc
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"token file {path} is empty or holds whitespace inside the token")
    return token


def claim_data_dir(data_dir: Path, cluster_id: str, created: Created | None = None) -> int:
    """Create/lock the data dir and check (or store) its cluster id; returns the lock's fd."""
    created = created if created is not None else Created()
    try:
        created.note_missing(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        created.note_missing(data_dir / ".lock")
        lock_fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot use data dir {data_dir}: {exc.strerror}") from exc
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(lock_fd)
        raise UsageError(f"data dir {data_dir} is in use by another controller") from exc
    try:
        stored = durable_files.read_meta_properties(data_dir)
    except FileNotFoundError:
        created.note_missing(data_dir / meta_properties.FILE_NAME)
        durable_files.write_meta_properties(
            data_dir, meta_properties.MetaProperties(cluster_id=cluster_id, node_id=CONTROLLER_NODE_ID)
        )
        return lock_fd
    except (OSError, ValueError) as exc:  # ValueError: MetaPropertiesError, UnicodeDecodeError
        raise UsageError(f"cannot read {data_dir / meta_properties.FILE_NAME}: {exc}") from exc
    if stored.cluster_id != cluster_id:
        raise UsageError(f"data dir {data_dir} belongs to cluster {stored.cluster_id}, not {cluster_id}")
    return lock_fd


def bind_listener(listen: tuple[str, int]) -> socket.socket:
    """Bind and listen on HOST:PORT before anything is written (a port in use touches no file)."""
    host, port = listen
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


async def serve(  # noqa: PLR0913 - the config, tokens and socket, then keyword-only settings
    config: ControllerConfig,
    tokens: Tokens,
    listen: tuple[str, int] | socket.socket,
    *,
    created_tokens: tuple[Path, ...] = (),
    limits: http_server.ConnectionLimits = CONNECTION_LIMITS,
    server_tls: tls.ServerTls | None = None,
) -> int:
    sock = bind_listener(listen) if isinstance(listen, tuple) else listen
    host = sock.getsockname()[0]
    scheme = "https" if server_tls is not None else "http"
    url = config.url or f"{scheme}://{host}:{sock.getsockname()[1]}"
    quorum = dataclasses.replace(config.quorum, url=url) if config.quorum is not None else None
    config = dataclasses.replace(config, url=url, quorum=quorum)
    service = ControllerService(config)
    metrics = ControllerMetrics(
        lambda: service.image,
        lambda: service.record_log.committed_offset,
        active=lambda: service.active,
        elections=lambda: service.elections,
    )
    api = ControllerApi(service, tokens, metrics, limits=limits)
    runner = api.runner(shutdown_timeout=5.0)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=server_tls.context if server_tls is not None else None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"cannot serve on {host}: {exc.strerror}") from exc
    for path in created_tokens:
        print(f"Created token file {path}", flush=True)
    print(f"Listening on {scheme}://{host}:{sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await service.start()
    except RecoveryError as exc:
        await runner.cleanup()
        service.record_log.close()
        raise UsageError(str(exc)) from exc
    if quorum is None:
        log.info("Became the active controller of cluster %s", config.cluster_id)
    else:
        log.info("Joined the controller quorum of cluster %s as node %d", config.cluster_id, quorum.node_id)
    await stop.wait()
    log.info("Stopping the controller")
    service.ready = False
    await service.commits.close()
    await runner.cleanup()
    await service.stop()
    return 0


def server_tls(args: argparse.Namespace) -> tls.ServerTls | None:
    """The https flags checked and loaded; None without `--ssl-keystore-location`."""
    if args.ssl_keystore_location is None:
        for flag, value in (
            ("--ssl-truststore-location", args.ssl_truststore_location),
            ("--ssl-client-auth", None if args.ssl_client_auth == "none" else args.ssl_client_auth),
        ):
            if value is not None:
                raise UsageError(f"{flag} needs --ssl-keystore-location")
        return None
    if args.advertised_url is not None and not args.advertised_url.startswith("https://"):
        raise UsageError(
            f"--advertised-url must be https:// with --ssl-keystore-location, got {args.advertised_url!r}"
        )
    files = tls.TlsFiles(
        keystore=args.ssl_keystore_location,
        truststore=args.ssl_truststore_location,
        client_auth=args.ssl_client_auth,
    )
    try:
        return tls.ServerTls(files)
    except tls.TlsConfigError as exc:
        flag = "--ssl-truststore-location" if "truststore" in str(exc) else "--ssl-keystore-location"
        raise UsageError(f"{flag}: {exc}") from None


def _claim_and_serve(
    args: argparse.Namespace, data_dir: Path, sock: socket.socket, https: tls.ServerTls | None = None
) -> int:
    """Claim the data dir and tokens, then serve; a failed start removes what it created."""
    created = Created()
    lock_fd: int | None = None
    try:
        lock_fd = claim_data_dir(data_dir, args.cluster_id, created)
        tokens = Tokens(
            cluster=load_or_create_token(args.cluster_token_file or data_dir / "cluster.token", created),
            admin=load_or_create_token(args.admin_token_file or data_dir / "admin.token", created),
        )
        config = ControllerConfig(
            data_dir=data_dir,
            cluster_id=args.cluster_id,
            session_timeout_s=args.broker_session_timeout_ms / 1000,
            snapshot_interval_records=args.snapshot_interval_records,
            log_retention_bytes=args.log_retention_bytes,
            default_replication_factor=args.default_replication_factor,
            default_min_insync_replicas=args.default_min_insync_replicas,
            url=args.advertised_url.rstrip("/") if args.advertised_url else "",
            quorum=quorum_config(args),
            auto_leader_rebalance=args.auto_leader_rebalance_enable == "true",
            leader_imbalance_check_interval_s=float(
                _at_least_one(args.leader_imbalance_check_interval_seconds)
            ),
        )
        if config.quorum is None:
            created.note_missing(data_dir / "metadata")
        limits = http_server.ConnectionLimits(
            idle_timeout_s=args.connections_max_idle_ms / 1000,
            read_timeout_s=args.request_read_timeout_ms / 1000,
        )
        return run_event_loop(
            serve(config, tokens, sock, created_tokens=tuple(created.tokens), limits=limits, server_tls=https)
        )
    except UsageError:
        created.remove()
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per etcd call otherwise
    if not CLUSTER_ID_PATTERN.fullmatch(args.cluster_id):
        raise UsageError(f"--cluster-id {args.cluster_id!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
    if args.broker_session_timeout_ms < 1:
        raise UsageError("--broker-session-timeout-ms must be at least 1")
    for flag, value in (
        ("--default-replication-factor", args.default_replication_factor),
        ("--default-min-insync-replicas", args.default_min_insync_replicas),
    ):
        if value is not None and not 1 <= value <= 2**31 - 1:
            raise UsageError(f"{flag} must be a positive 32-bit integer, got {value}")
    if args.snapshot_interval_records < 1:
        raise UsageError("--snapshot-interval-records must be at least 1")
    for flag, value in (
        ("--connections-max-idle-ms", args.connections_max_idle_ms),
        ("--request-read-timeout-ms", args.request_read_timeout_ms),
    ):
        if not 100 <= value <= 2**31 - 1:
            raise UsageError(f"{flag} must be between 100 and {2**31 - 1}, got {value}")
    quorum_config(args)  # bad quorum flags are refused before anything is bound or written
    if args.advertised_url is not None and not re.fullmatch(r"https?://[^/\s]+/?", args.advertised_url):
        raise UsageError(f"--advertised-url must be http(s)://HOST:PORT, got {args.advertised_url!r}")
    https = server_tls(args)
    data_dir: Path = args.data_dir
    with contextlib.closing(bind_listener(args.listen)) as sock:
        return _claim_and_serve(args, data_dir, sock, https)


def main(argv: list[str] | None = None) -> int:
    return console.run_main(lambda: _main(argv), prog=PROG, describe=console.user_errors(UsageError))


if __name__ == "__main__":
    sys.exit(main())
