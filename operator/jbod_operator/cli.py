"""`jbod-operator`: runs the kopf operator (protocol §5) with the handlers `jbod_operator.handlers` registers.

Bad flags or missing Kubernetes credentials print one line and exit non-zero (2 for usage, 1
otherwise; `jbod_runtime.console`), Ctrl-C exits 130. The operator runs
standalone (one replica, `strategy: Recreate` in the chart), so kopf's peering is off.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import sys
from typing import Any

import click
import kopf
from kubernetes import config as kube_config
from prometheus_client import start_http_server

from jbod_operator import rotation
from jbod_runtime import console

PROG = "jbod-operator"


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--namespace", "-n", "namespaces", multiple=True, help="watch this namespace (repeatable)")
@click.option(
    "--all-namespaces", "-A", is_flag=True, help="watch every namespace (the default without --namespace)"
)
@click.option("--image", envvar="JBOD_IMAGE", help="default image of controllers and brokers")
@click.option(
    "--metrics-address", default="0.0.0.0:8000", show_default=True, help="HOST:PORT of /metrics ('' = off)"
)
@click.option(
    "--health-address",
    default="0.0.0.0:8080",
    show_default=True,
    help="HOST:PORT of the liveness probe /healthz",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(0.1, 600),
    default=2.0,
    show_default=True,
    help="how often to ask each cluster's controller and brokers for their view",
)
@click.option(
    "--secret-propagation-seconds",
    type=click.IntRange(10, 3600),
    default=int(rotation.PROPAGATION.total_seconds()),
    show_default=True,
    help="how long the kubelets take to update a mounted Secret in every pod (their sync period plus "
    "cache, with a margin): a rotation waits this long before it relies on pods having new files",
)
@click.option(
    "--endpoints-file",
    envvar="JBOD_ENDPOINTS_FILE",
    type=click.Path(dir_okay=False),
    help="JSON map of host:port to reachable host:port, for an operator outside the cluster",
)
@click.option(
    "--lag-seconds",
    type=click.FloatRange(0, 3600),
    default=30.0,
    show_default=True,
    help="how often to compute every consumer group's lag (jbod_consumergroup_lag); 0 turns it off",
)
@click.option("--verbose", "-v", is_flag=True, help="debug logging")
def command(  # noqa: PLR0913  click command: one parameter per option
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    image: str | None,
    metrics_address: str,
    health_address: str,
    poll_seconds: float,
    secret_propagation_seconds: int,
    endpoints_file: str | None,
    lag_seconds: float,
    verbose: bool,
) -> None:
    """Run the JBOD operator: reconcile JbodCluster and JbodBroker resources."""
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    health = _listen(health_address)
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        try:
            kube_config.load_kube_config()
        except (kube_config.ConfigException, OSError) as exc:
            raise click.ClickException(f"no Kubernetes credentials: {exc}".splitlines()[0]) from None
    if endpoints_file:
        os.environ["JBOD_ENDPOINTS_FILE"] = endpoints_file
    from jbod_operator import (
        cluster_access,
        handlers,  # noqa: F401  importing it registers every handler with kopf
        lag_handlers,
        views,
    )

    cluster_access.ENDPOINTS = views.Endpoints(endpoints_file)
    cluster_access.SETTINGS["poll_seconds"] = poll_seconds
    lag_handlers.SETTINGS["lag_seconds"] = lag_seconds
    cluster_access.SETTINGS["secret_propagation"] = dt.timedelta(seconds=secret_propagation_seconds)
    if image:
        cluster_access.SETTINGS["image"] = image
    if metrics_address:
        host, port = _listen(metrics_address)
        try:
            start_http_server(port, addr=host)
        except OSError as exc:
            raise click.ClickException(f"cannot serve metrics on {metrics_address}: {exc.strerror}") from None
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    kwargs: dict[str, Any] = {
        "standalone": True,
        "liveness_endpoint": f"http://{health[0]}:{health[1]}/healthz",
    }
    if namespaces:
        kwargs["namespaces"] = list(namespaces)
        cluster_access.SETTINGS["namespaces"] = frozenset(namespaces)
    else:
        kwargs["clusterwide"] = True
    asyncio.run(kopf.operator(**kwargs))


def main(argv: list[str] | None = None) -> int:
    return console.run_click(command, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
