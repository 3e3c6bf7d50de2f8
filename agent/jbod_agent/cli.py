"""`jbod-agent --config server.properties [--set key=value ...]`: the per-pod broker agent.

Guarantees: a bad flag, a config error (naming the key), storage that must not start (duplicate
ids, unreadable metadata dir, unformatted dir, ...) or a port in use print one line
`jbod-agent: error: ...` and exit non-zero; no traceback; so does a TLS keystore or truststore
that does not load (naming the file). With TLS listeners only, no plaintext port is opened. The exit code tells why a running
agent stopped (0: asked by the controller or a signal; 3: an offline dir could not be reported
in time while leading replicas in it; 4: storage lost; 5: registration refused).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from aiohttp import web

from jbod_agent.config import BrokerConfig, ConfigError, load_config, parse_overrides
from jbod_agent.kafka import server as kafka_server
from jbod_agent.lifecycle.agent import Agent
from jbod_agent.lifecycle.http_api import AgentApi
from jbod_agent.storage import log_format, storage
from jbod_client.controller import ClientError, read_token
from jbod_runtime import console, tls
from jbod_runtime.event_loop import run_event_loop

PROG = "jbod-agent"
log = logging.getLogger("jbod_agent")


class StartupError(Exception):
    pass


def _read_token(path: Path, key: str) -> str:
    try:
        return read_token(path)
    except ClientError as exc:
        raise StartupError(f"{key}: {exc}") from exc


def _refuse_legacy_logs(loaded: storage.LoadedStorage) -> None:
    """A replica in jbod's legacy record format is never read as Kafka batches."""
    for loaded_dir in loaded.online:
        try:
            legacy = log_format.find_legacy(loaded_dir.path)
        except OSError:
            continue  # the dir's probe takes it offline; nothing of it is read meanwhile
        if legacy:
            names = ", ".join(p.name for p in legacy[:3]) + (", ..." if len(legacy) > 3 else "")
            raise StartupError(
                f"log dir {loaded_dir.path} holds {len(legacy)} replica(s) in jbod's legacy record format "
                f"({names}); convert them to Kafka's RecordBatch v2 with "
                f"`jbod-storage convert-logs --config server.properties` before starting"
            )


async def serve(config: BrokerConfig) -> int:
    loaded = storage.load(
        config.log_dirs,
        config.metadata_log_dir,
        node_id=config.node_id,
        format_on_start=config.format_on_start,
        cluster_id=config.cluster_id,
    )
    for path, reason in loaded.offline:
        log.error("Started without log dir %s: %s", path, reason)
    _refuse_legacy_logs(loaded)
    cluster_token = _read_token(config.cluster_token_file, "cluster.token.file")
    tokens = [cluster_token]
    admin_token = None
    if config.admin_token_file is not None:
        admin_token = _read_token(config.admin_token_file, "admin.token.file")
        tokens.append(admin_token)
    https, kafka_tls = _server_tls(config)
    agent = Agent(config, loaded, token=cluster_token)
    api = AgentApi(agent, tuple(tokens))
    runner = api.runner(shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(
        runner,
        host=config.listener.host,
        port=config.listener.port,
        reuse_address=True,
        ssl_context=https.context if https is not None else None,
    )
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(f"listeners: cannot listen on {config.listener.url}: {exc.strerror}") from exc
    sockets = getattr(site._server, "sockets", None) or []
    port = sockets[0].getsockname()[1] if sockets else config.listener.port
    agent.state.listener_port = port
    print(f"Listening on {config.listener.scheme}://{config.listener.host}:{port}", flush=True)
    try:
        kafka_servers = await kafka_server.start_listeners(agent, admin_password=admin_token, tls=kafka_tls)
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(exc.strerror or str(exc)) from exc
    for server in kafka_servers.servers:
        print(f"Listening on {server.listener.name}://{server.listener.host}:{server.port}", flush=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.request_stop)
    try:
        return await agent.run()
    finally:
        await kafka_servers.close()
        await runner.cleanup()


def _server_tls(config: BrokerConfig) -> tuple[tls.ServerTls | None, dict[str, tls.ServerTls]]:
    """The TLS of the https API (None on http) and of each TLS Kafka listener by name: the same
    files, one context per client-certificate mode (`BrokerConfig.client_auth_of`)."""
    by_mode: dict[str, tls.ServerTls] = {}

    def of(mode: str) -> tls.ServerTls:
        if mode not in by_mode:
            try:
                by_mode[mode] = tls.ServerTls(config.tls_files_of(mode))
            except tls.TlsConfigError as exc:
                raise StartupError(str(exc)) from exc
        return by_mode[mode]

    https = of(config.ssl_client_auth) if config.listener.scheme == "https" else None
    kafka = {k.name: of(config.client_auth_of(k)) for k in config.kafka_listeners if k.tls}
    return https, kafka


def _main(argv: list[str] | None) -> int:
    parser = console.ArgumentParser(prog=PROG, description="The JBOD broker agent.")
    parser.add_argument("--config", required=True, type=Path, help="server.properties")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = load_config(args.config, parse_overrides(args.set))
    return run_event_loop(serve(config))


def main(argv: list[str] | None = None) -> int:
    return console.run_main(
        lambda: _main(argv),
        prog=PROG,
        describe=console.user_errors(ConfigError, storage.StorageError, StartupError, tls.TlsConfigError),
    )


if __name__ == "__main__":
    sys.exit(main())
