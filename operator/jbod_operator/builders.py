"""Pure builders of the Kubernetes objects of a cluster: same inputs, same manifests (as dicts).

Guarantees:
* Every object carries the cluster's labels and, except data volume claims, an owner reference, so
  deleting a `JbodCluster` garbage-collects its controller, Services, Secret, brokers and pods.
  Data and metadata claims have no owner: deleting a cluster never deletes volumes holding
  replicas (remove them by label when you mean it).
* A broker pod carries the readiness gate `jbod.dev/unfenced` and an annotation hashing its spec
  and configuration; a different hash means the pod must be recreated (bare pods cannot be
  patched in place).
* Processes run as non-root with a read-only root filesystem; everything they write is a volume.
* `spec.template` (labels, annotations, affinity, tolerations, spread, security context...) is
  applied to the broker pods and the controller and etcd StatefulSets' pods by `scheduling`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jbod_core import auto_create
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from jbod_operator import listeners as listener_decisions
from jbod_operator import model, names, scheduling

Manifest = dict[str, Any]
RUN_AS: int = 10001
PRINCIPAL_FROM_CN = "RULE:^CN=(.*?)(,.*)?$/$1/"


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(
    name: str, namespace: str, labels: dict[str, str], owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def _resources(resources: model.Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resources.limits:
        out["limits"] = dict(resources.limits)
    if resources.requests:
        out["requests"] = dict(resources.requests)
    return out


def spec_hash(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


_POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY: dict[str, Any] = {
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


# The root filesystem is read-only: /tmp is a small emptyDir for anything a library writes there.
_TMP_VOLUME: dict[str, Any] = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}
_TMP_MOUNT: dict[str, Any] = {"name": "tmp", "mountPath": "/tmp"}


def _probe(path: str, port: int, *, period: int, failures: int = 3, tls: bool = False) -> dict[str, Any]:
    """An HTTP(S) GET probe (the kubelet does not verify the server's certificate)."""
    get: dict[str, Any] = {"path": path, "port": port}
    if tls:
        get["scheme"] = "HTTPS"
    return {
        "httpGet": get,
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _claim_template(name: str, volume: model.Volume) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    if isinstance(volume, model.Disk) and volume.volume_attributes_class:
        spec["volumeAttributesClassName"] = volume.volume_attributes_class
    return {"metadata": {"name": name}, "spec": spec}


# ---------------------------------------------------------------------------------------------
# Cluster-wide objects


def tokens_secret(  # noqa: PLR0913  the Secret's name parts, its three values and its owner
    cluster: str,
    namespace: str,
    *,
    cluster_id: str,
    cluster_token: str,
    admin_token: str,
    owner: Mapping[str, Any],
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names.secret(cluster), namespace, names.cluster_labels(cluster, "tokens"), owner),
        "type": "Opaque",
        "stringData": {
            names.SECRET_CLUSTER_ID: cluster_id,
            names.SECRET_CLUSTER_TOKEN: cluster_token,
            names.SECRET_ADMIN_TOKEN: admin_token,
        },
    }


_POD_NAME_ENV: dict[str, Any] = {
    "name": "POD_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
}


# ---------------------------------------------------------------------------------------------
# TLS (spec.tls): the cluster CA's Secrets, the pods' certificates and how pods mount them


def tls_certificates(
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_ids: Sequence[int],
    assigned: listener_decisions.Assigned | None = None,
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Secret name → (common name, DNS names) of every certificate the cluster's pods present:
    one per broker, one shared by the controllers (a StatefulSet mounts one Secret), one shared
    by the etcd members the operator runs. Empty without TLS. A broker's names end with those of
    its TLS listeners of `spec.listeners` (`listeners.certificate_names`; IP addresses among
    them are the certificate's IP addresses)."""
    if not spec.tls.enabled:
        return {}
    svc = f"{namespace}.svc"
    wanted: dict[str, tuple[str, tuple[str, ...]]] = {}
    for broker_id in sorted(set(broker_ids)):
        host = names.broker_host(cluster, namespace, broker_id)
        wanted[names.broker_tls(cluster, broker_id)] = (
            host,
            (
                host,
                f"{names.brokers_service(cluster)}.{svc}",
                f"{names.ready_brokers_service(cluster)}.{svc}",
                f"{names.kafka_bootstrap_service(cluster)}.{svc}",
                names.kafka_bootstrap_service(cluster),
                f"{names.kafka_bootstrap_service(cluster)}.{namespace}",
                *listener_decisions.certificate_names(
                    spec, cluster, namespace, broker_id, assigned or listener_decisions.Assigned()
                ),
            ),
        )
    controller_service = f"{names.controller(cluster)}.{svc}"
    wanted[names.controller_tls(cluster)] = (
        controller_service,
        (
            controller_service,
            # The Service's short names too: pods of the namespace dial https://<cluster>-controller:9093.
            names.controller(cluster),
            f"{names.controller(cluster)}.{namespace}",
            *(names.controller_host(cluster, namespace, n) for n in range(spec.controller.replicas)),
        ),
    )
    if spec.controller.runs_etcd:
        etcd_service = f"{names.etcd(cluster)}.{svc}"
        wanted[names.etcd_tls(cluster)] = (
            etcd_service,
            (
                etcd_service,
                *(names.etcd_member_host(cluster, namespace, n) for n in range(names.ETCD_MEMBERS)),
            ),
        )
    return wanted


def secret_data(values: Mapping[str, str]) -> dict[str, str]:
    """A Secret's `data` (base64). Secrets the operator server-side applies carry `data`, not
    `stringData`: the API server tracks the owner of each `data` key, so a key left out of the
    next apply is removed (with `stringData` it would stay)."""
    return {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}


def cluster_ca_secret(
    cluster: str, namespace: str, *, key_pem: str, cert_pem: str, owner: Mapping[str, Any]
) -> Manifest:
    """The signing CA (key and certificate): read by the operator only, never mounted."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names.cluster_ca(cluster), namespace, names.cluster_labels(cluster, "ca"), owner),
        "type": "Opaque",
        "data": secret_data({names.CA_KEY: key_pem, names.TLS_CA: cert_pem}),
    }


def cluster_ca_cert_secret(
    cluster: str, namespace: str, *, bundle: str, since: str, owner: Mapping[str, Any]
) -> Manifest:
    """The trust bundle every pod and client mounts; `since`: when its signing CA joined it."""
    meta = _meta(names.cluster_ca_cert(cluster), namespace, names.cluster_labels(cluster, "ca"), owner)
    meta["annotations"] = {names.ANNOTATION_CA_SINCE: since}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": secret_data({names.TLS_CA: bundle}),
    }


def tls_secret(  # noqa: PLR0913  the Secret's name and place, then the key, certificate, chain and owner
    name: str,
    cluster: str,
    namespace: str,
    *,
    key_pem: str,
    cert_pem: str,
    chain: str,
    owner: Mapping[str, Any],
) -> Manifest:
    """A pod's certificate in cert-manager's layout: `tls.key`, `tls.crt` (leaf then chain) and
    `tls-combined.pem` (key, leaf, chain: the agent's and controller's keystore)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, namespace, names.cluster_labels(cluster, "tls"), owner),
        "type": "kubernetes.io/tls",
        "data": secret_data(
            {
                names.TLS_KEY: key_pem,
                names.TLS_CERT: cert_pem + chain,
                names.TLS_KEYSTORE: key_pem + cert_pem + chain,
            }
        ),
    }


def _tls_volume(spec: model.ClusterSpec, cluster: str, leaf: str) -> dict[str, Any]:
    """The pod's certificate (Secret `leaf`) and the trust bundle, as one directory: the
    operator's and a user CA's bundle come from `<cluster>-cluster-ca-cert` (one place to update
    during a CA renewal), cert-manager's from the leaf Secret's own `ca.crt`."""
    keys = [names.TLS_KEYSTORE, names.TLS_CERT, names.TLS_KEY]
    if spec.tls.issuer == "cert-manager":
        keys.append(names.TLS_CA)
    sources: list[dict[str, Any]] = [
        {"secret": {"name": leaf, "items": [{"key": k, "path": k} for k in keys]}}
    ]
    if spec.tls.issuer != "cert-manager":
        sources.append(
            {
                "secret": {
                    "name": names.cluster_ca_cert(cluster),
                    "items": [{"key": names.TLS_CA, "path": names.TLS_CA}],
                }
            }
        )
    return {"name": "tls", "projected": {"sources": sources, "defaultMode": 0o440}}


_TLS_MOUNT: dict[str, Any] = {"name": "tls", "mountPath": names.TLS_DIR, "readOnly": True}
_KEYSTORE = f"{names.TLS_DIR}/{names.TLS_KEYSTORE}"
_TRUSTSTORE = f"{names.TLS_DIR}/{names.TLS_CA}"


def etcd_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """Headless, and publishing members before they are ready: peers must find each other to start."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(names.etcd(cluster), namespace, names.cluster_labels(cluster, "etcd"), owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.etcd_selector(cluster),
            "ports": [
                {"name": "client", "port": names.ETCD_CLIENT_PORT, "targetPort": names.ETCD_CLIENT_PORT},
                {"name": "peer", "port": names.ETCD_PEER_PORT, "targetPort": names.ETCD_PEER_PORT},
            ],
        },
    }


def etcd_statefulset(
    spec: model.ClusterSpec, cluster: str, namespace: str, *, owner: Mapping[str, Any]
) -> Manifest:
    """Three etcd members for the controller quorum, from `spec.controller.etcd.image` (by default
    kubeadm's etcd image, `names.ETCD_IMAGE`). Only `etcd` and its flags: no shell is needed."""
    labels = names.cluster_labels(cluster, "etcd")
    host = f"$(POD_NAME).{names.etcd(cluster)}.{namespace}.svc"
    tls = spec.tls.enabled
    scheme = names.scheme(tls)
    initial = ",".join(
        f"{names.etcd(cluster)}-{n}={scheme}://{names.etcd_member_host(cluster, namespace, n)}:{names.ETCD_PEER_PORT}"
        for n in range(names.ETCD_MEMBERS)
    )
    tls_args = (
        [
            f"--cert-file={names.TLS_DIR}/{names.TLS_CERT}",
            f"--key-file={names.TLS_DIR}/{names.TLS_KEY}",
            f"--trusted-ca-file={_TRUSTSTORE}",
            "--client-cert-auth",
            f"--peer-cert-file={names.TLS_DIR}/{names.TLS_CERT}",
            f"--peer-key-file={names.TLS_DIR}/{names.TLS_KEY}",
            f"--peer-trusted-ca-file={_TRUSTSTORE}",
            "--peer-client-cert-auth",
            f"--listen-metrics-urls=http://0.0.0.0:{names.ETCD_METRICS_PORT}",
        ]
        if tls
        else []
    )
    container = {
        "name": "etcd",
        "image": spec.controller.etcd.image or names.ETCD_IMAGE,
        # A pinned tag: pulled once (and never with the project image's policy "Always").
        "imagePullPolicy": "IfNotPresent",
        "command": ["etcd"],
        "args": [
            "--name=$(POD_NAME)",
            f"--data-dir={names.ETCD_MOUNT}/data",
            f"--listen-client-urls={scheme}://0.0.0.0:{names.ETCD_CLIENT_PORT}",
            f"--advertise-client-urls={scheme}://{host}:{names.ETCD_CLIENT_PORT}",
            f"--listen-peer-urls={scheme}://0.0.0.0:{names.ETCD_PEER_PORT}",
            f"--initial-advertise-peer-urls={scheme}://{host}:{names.ETCD_PEER_PORT}",
            f"--initial-cluster={initial}",
            f"--initial-cluster-token={cluster}-{namespace}",
            "--initial-cluster-state=new",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
            *tls_args,
        ],
        "env": [_POD_NAME_ENV],
        "ports": [
            {"name": "client", "containerPort": names.ETCD_CLIENT_PORT},
            {"name": "peer", "containerPort": names.ETCD_PEER_PORT},
        ],
        # With TLS the client port wants a client certificate: the probe asks the metrics port.
        "readinessProbe": _probe(
            "/health", names.ETCD_METRICS_PORT if tls else names.ETCD_CLIENT_PORT, period=5
        ),
        "volumeMounts": [
            {"name": "data", "mountPath": names.ETCD_MOUNT},
            _TMP_MOUNT,
            *([_TLS_MOUNT] if tls else []),
        ],
        "securityContext": _CONTAINER_SECURITY,
        "resources": _resources(spec.controller.etcd.resources),
    }
    # Parallel: the members must start together to form the cluster.
    return _statefulset(
        names.etcd(cluster),
        namespace,
        labels,
        names.etcd_selector(cluster),
        owner,
        replicas=names.ETCD_MEMBERS,
        container=container,
        volumes=[_TMP_VOLUME, *([_tls_volume(spec, cluster, names.etcd_tls(cluster))] if tls else [])],
        data=spec.controller.etcd.storage,
        template=spec.template.etcd,
        spread=scheduling.default_spread(names.etcd_selector(cluster), scheduling.rack_topology_key(spec)),
    )


def controller_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(
            names.controller(cluster), namespace, names.cluster_labels(cluster, "controller"), owner
        ),
        "spec": {
            "clusterIP": "None",  # also the StatefulSet's governing Service, which must be headless
            "selector": names.controller_selector(cluster),
            "ports": [{"name": "http", "port": names.CONTROLLER_PORT, "targetPort": names.CONTROLLER_PORT}],
        },
    }


def _tokens_volume(cluster: str) -> dict[str, Any]:
    return {"name": "tokens", "secret": {"secretName": names.secret(cluster), "defaultMode": 0o440}}


def _cluster_id_env(cluster: str) -> dict[str, Any]:
    return {
        "name": "JBOD_CLUSTER_ID",
        "valueFrom": {"secretKeyRef": {"name": names.secret(cluster), "key": names.SECRET_CLUSTER_ID}},
    }


def controller_statefulset(
    spec: model.ClusterSpec, cluster: str, namespace: str, *, image: str, owner: Mapping[str, Any]
) -> Manifest:
    labels = names.cluster_labels(cluster, "controller")
    args = [
        f"--data-dir={names.CONTROLLER_MOUNT}/data",
        "--cluster-id=$(JBOD_CLUSTER_ID)",
        f"--listen=0.0.0.0:{names.CONTROLLER_PORT}",
        f"--cluster-token-file={names.TOKENS_DIR}/{names.SECRET_CLUSTER_TOKEN}",
        f"--admin-token-file={names.TOKENS_DIR}/{names.SECRET_ADMIN_TOKEN}",
        f"--broker-session-timeout-ms={spec.config.session_timeout_ms}",
        f"--default-replication-factor={spec.replication_factor()}",
        f"--default-min-insync-replicas={spec.config.min_insync_replicas}",
    ]
    env = [_cluster_id_env(cluster)]
    replicas = spec.controller.replicas
    tls = spec.tls.enabled
    if tls:
        args += [f"--ssl-keystore-location={_KEYSTORE}", f"--ssl-truststore-location={_TRUSTSTORE}"]
    if spec.controller.quorum:
        etcd_endpoints = (
            ",".join(spec.controller.etcd.endpoints)
            if spec.controller.etcd.endpoints
            else names.etcd_endpoints(cluster, namespace, tls=tls)
        )
        env.append(_POD_NAME_ENV)
        if spec.controller.etcd.tls_secret:
            args += [
                f"--etcd-cacert={names.ETCD_TLS_DIR}/ca.crt",
                f"--etcd-cert={names.ETCD_TLS_DIR}/tls.crt",
                f"--etcd-key={names.ETCD_TLS_DIR}/tls.key",
            ]
        elif tls and spec.controller.runs_etcd:
            # The controllers' own certificate is also their etcd client certificate (clientAuth).
            args += [
                f"--etcd-cacert={_TRUSTSTORE}",
                f"--etcd-cert={names.TLS_DIR}/{names.TLS_CERT}",
                f"--etcd-key={names.TLS_DIR}/{names.TLS_KEY}",
            ]
        args += [
            f"--etcd-endpoints={etcd_endpoints}",
            "--node-id=$(POD_NAME)",  # controller-K is node K+1
            f"--advertised-url={names.scheme(tls)}://$(POD_NAME).{names.controller(cluster)}.{namespace}.svc:"
            f"{names.CONTROLLER_PORT}",
        ]
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": names.CONTROLLER_MOUNT},
        {"name": "tokens", "mountPath": names.TOKENS_DIR, "readOnly": True},
        _TMP_MOUNT,
    ]
    container = {
        "name": "controller",
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["jbod-controller"],
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": names.CONTROLLER_PORT}],
        "readinessProbe": _probe("/readyz", names.CONTROLLER_PORT, period=2, tls=tls),
        "livenessProbe": _probe("/healthz", names.CONTROLLER_PORT, period=10, failures=6, tls=tls),
        "volumeMounts": mounts,
        "securityContext": _CONTAINER_SECURITY,
        "resources": _resources(spec.controller.resources),
    }
    volumes = [_tokens_volume(cluster), _TMP_VOLUME]
    if tls:
        volumes.append(_tls_volume(spec, cluster, names.controller_tls(cluster)))
        mounts.append(_TLS_MOUNT)
    if spec.controller.quorum and spec.controller.etcd.tls_secret:
        secret = spec.controller.etcd.tls_secret
        volumes.append({"name": "etcd-tls", "secret": {"secretName": secret, "defaultMode": 0o440}})
        mounts.append({"name": "etcd-tls", "mountPath": names.ETCD_TLS_DIR, "readOnly": True})
    return _statefulset(
        names.controller(cluster),
        namespace,
        labels,
        names.controller_selector(cluster),
        owner,
        replicas=replicas,
        container=container,
        volumes=volumes,
        data=spec.controller.storage,
        template=spec.template.controller,
        # A quorum's members spread like the brokers; a single controller has nothing to spread.
        spread=scheduling.default_spread(
            names.controller_selector(cluster), scheduling.rack_topology_key(spec)
        )
        if spec.controller.quorum
        else None,
    )


def _statefulset(  # noqa: PLR0913  a parameter per field the controller and etcd StatefulSets differ in
    name: str,
    namespace: str,
    labels: dict[str, str],
    selector: dict[str, str],
    owner: Mapping[str, Any],
    *,
    replicas: int,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    data: model.Volume,
    template: model.ComponentTemplate,
    spread: list[dict[str, Any]] | None,
) -> Manifest:
    """A StatefulSet of one container, a `data` claim per pod, pods started in parallel; the
    pods' `spec.template` entry applied (`scheduling.apply_pod_template`)."""
    pod_spec = scheduling.apply_pod_template(
        {
            "securityContext": _POD_SECURITY,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 30,
            "containers": [container],
            "volumes": volumes,
        },
        template,
        spread=spread,
    )
    pod_meta: dict[str, Any] = {"labels": scheduling.pod_labels(labels, template)}
    if template.pod.metadata.annotations:
        pod_meta["annotations"] = scheduling.pod_annotations({}, template)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, namespace, labels, owner),
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": selector},
            "podManagementPolicy": "Parallel",
            "template": {"metadata": pod_meta, "spec": pod_spec},
            "volumeClaimTemplates": [_claim_template("data", data)],
        },
    }


def _kafka_ports(tls: bool) -> list[dict[str, Any]]:
    ports = [{"name": "kafka", "port": names.KAFKA_PORT, "targetPort": "kafka"}]
    if tls:
        ports.append({"name": "kafka-tls", "port": names.KAFKA_TLS_PORT, "targetPort": "kafka-tls"})
    return ports


def _broker_service_ports(tls: bool = False) -> list[dict[str, Any]]:
    return [*_kafka_ports(tls), {"name": "http", "port": names.BROKER_HTTP_PORT, "targetPort": "http"}]


def _broker_service(  # noqa: PLR0913  the Service's name and place, its owner, then its kind and ports
    name: str, cluster: str, namespace: str, owner: Mapping[str, Any], *, headless: bool, tls: bool
) -> Manifest:
    spec: dict[str, Any] = {"selector": names.broker_selector(cluster), "ports": _broker_service_ports(tls)}
    if headless:
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, names.cluster_labels(cluster, "broker"), owner),
        "spec": spec,
    }


def brokers_service(cluster: str, namespace: str, owner: Mapping[str, Any], *, tls: bool = False) -> Manifest:
    """Headless: per-pod DNS names for every broker, published before they are ready."""
    return _broker_service(names.brokers_service(cluster), cluster, namespace, owner, headless=True, tls=tls)


def ready_brokers_service(
    cluster: str, namespace: str, owner: Mapping[str, Any], *, tls: bool = False
) -> Manifest:
    """Only Ready brokers: a pod is Ready once its process is up and the controller has unfenced it."""
    return _broker_service(
        names.ready_brokers_service(cluster), cluster, namespace, owner, headless=False, tls=tls
    )


def kafka_bootstrap_service(
    cluster: str, namespace: str, owner: Mapping[str, Any], *, tls: bool = False
) -> Manifest:
    """The Kafka clients' bootstrap: the Ready brokers' Kafka port only."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(
            names.kafka_bootstrap_service(cluster), namespace, names.cluster_labels(cluster, "broker"), owner
        ),
        "spec": {
            "selector": names.broker_selector(cluster),
            "ports": _kafka_ports(tls),
        },
    }


def scram_client_settings(
    cluster: str, namespace: str, *, user: str, password: str, ca_bundle: str | None
) -> dict[str, str]:
    """A SCRAM-SHA-512 user's client settings: one by one, a Java client's properties file and a
    librdkafka properties file (kcat's `-F`, confluent-kafka's config). With `ca_bundle` (TLS
    on) the protocol is SASL_SSL and the files trust `ca.crt` where the Secret is mounted
    (`names.CLIENT_SECRET_MOUNT`)."""
    bootstrap = names.kafka_bootstrap_servers(cluster, namespace)
    protocol = names.KAFKA_TLS_SECURITY_PROTOCOL if ca_bundle is not None else names.KAFKA_SECURITY_PROTOCOL
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
    common = f"bootstrap.servers={bootstrap}\nsecurity.protocol={protocol}\nsasl.mechanism={names.KAFKA_SASL_MECHANISM}\n"
    java_tls = rdkafka_tls = ""
    settings: dict[str, str] = {}
    if ca_bundle is not None:
        ca_file = f"{names.CLIENT_SECRET_MOUNT}/{names.TLS_CA}"
        java_tls = f"ssl.truststore.type=PEM\nssl.truststore.location={ca_file}\n"
        rdkafka_tls = f"ssl.ca.location={ca_file}\n"
        settings[names.TLS_CA] = ca_bundle
    return {
        **settings,
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "sasl.mechanism": names.KAFKA_SASL_MECHANISM,
        "username": user,
        "password": password,
        "sasl.jaas.config": jaas,
        "client.properties": common + java_tls + f"sasl.jaas.config={jaas}\n",
        "librdkafka.properties": common + rdkafka_tls + f"sasl.username={user}\nsasl.password={password}\n",
    }


def tls_client_settings(
    cluster: str, namespace: str, *, key_pem: str, cert_pem: str, ca_bundle: str
) -> dict[str, str]:
    """A certificate user's client settings (the SSL listener, `names.KAFKA_TLS_PORT`): its
    key and certificate, `user.pem` (key then chain, Kafka's PEM keystore), the trust bundle and
    properties files naming them where the Secret is mounted."""
    bootstrap = f"{names.kafka_bootstrap_service(cluster)}.{namespace}.svc:{names.KAFKA_TLS_PORT}"
    mount = names.CLIENT_SECRET_MOUNT
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "user.crt": cert_pem,
        "user.key": key_pem,
        "user.pem": key_pem + cert_pem,
        names.TLS_CA: ca_bundle,
        "client.properties": (
            f"bootstrap.servers={bootstrap}\nsecurity.protocol=SSL\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={mount}/{names.TLS_CA}\n"
            f"ssl.keystore.type=PEM\nssl.keystore.location={mount}/user.pem\n"
        ),
        "librdkafka.properties": (
            f"bootstrap.servers={bootstrap}\nsecurity.protocol=SSL\n"
            f"ssl.ca.location={mount}/{names.TLS_CA}\n"
            f"ssl.certificate.location={mount}/user.crt\nssl.key.location={mount}/user.key\n"
        ),
    }


def user_secret(
    user: str, namespace: str, cluster: str, data: Mapping[str, str], *, owner: Mapping[str, Any]
) -> Manifest:
    """A JbodUser's Secret `<user>`: its credential and client settings (`scram_client_settings`
    or `tls_client_settings`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(user, namespace, names.cluster_labels(cluster, "kafka-user"), owner),
        "type": "Opaque",
        "data": secret_data(data),
    }


def kafka_client_secret(
    cluster: str,
    namespace: str,
    *,
    password: str,
    owner: Mapping[str, Any],
    ca_bundle: str | None = None,
) -> Manifest:
    """What an application mounts to reach the cluster with a Kafka client, as the user
    `names.KAFKA_CLIENT_USER` (`scram_client_settings`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(
            names.kafka_client_secret(cluster),
            namespace,
            names.cluster_labels(cluster, "kafka-client"),
            owner,
        ),
        "type": "Opaque",
        "stringData": scram_client_settings(
            cluster, namespace, user=names.KAFKA_CLIENT_USER, password=password, ca_bundle=ca_bundle
        ),
    }


def broker_disruption_budget(
    brokers: int, cluster: str, namespace: str, owner: Mapping[str, Any]
) -> Manifest:
    """At most one broker down by eviction. An integer `minAvailable`, because the pods' owner
    (`JbodBroker`) has no scale subresource for the disruption controller to count from. The
    budget counts Ready pods, and a broker pod is Ready only once unfenced (readiness gate): an
    eviction is allowed only while every other broker is unfenced. A pod that is not Ready (a
    fenced broker, serving nothing) may always be evicted (`AlwaysAllow`), so it cannot block a
    node drain; its volumes stay (docs/decisions.md, "Pod templates and disruption")."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(
            names.brokers_service(cluster), namespace, names.cluster_labels(cluster, "broker"), owner
        ),
        "spec": {
            "minAvailable": max(0, brokers - 1),
            "selector": {"matchLabels": names.broker_selector(cluster)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def quorum_disruption_budget(
    name: str, namespace: str, labels: dict[str, str], selector: dict[str, str], owner: Mapping[str, Any]
) -> Manifest:
    """The controllers' or the etcd members' budget: one pod evicted at a time, so a quorum of 3
    or 5 keeps its majority (a single controller may be evicted: `maxUnavailable` 0 would block
    every drain of its node). Unhealthy pods are evicted only while the budget holds
    (`IfHealthyBudget`, Kubernetes' default): a member not Ready may be one catching up, whose
    eviction would lengthen the time without a spare."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name, namespace, labels, owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        },
    }


def controller_disruption_budget(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    return quorum_disruption_budget(
        names.controller(cluster),
        namespace,
        names.cluster_labels(cluster, "controller"),
        names.controller_selector(cluster),
        owner,
    )


def etcd_disruption_budget(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    return quorum_disruption_budget(
        names.etcd(cluster),
        namespace,
        names.cluster_labels(cluster, "etcd"),
        names.etcd_selector(cluster),
        owner,
    )


def disk_entry(disk: model.Disk) -> dict[str, Any]:
    """A disk as written into a JbodBroker's spec."""
    entry: dict[str, Any] = {"name": disk.name, "size": disk.size}
    if disk.storage_class:
        entry["storageClass"] = disk.storage_class
    if disk.max_size:
        entry["maxSize"] = disk.max_size
    if disk.removed:
        entry["removed"] = True
    if disk.spec_name:
        entry["specName"] = disk.spec_name
    if disk.volume_attributes_class:
        entry["volumeAttributesClassName"] = disk.volume_attributes_class
    return entry


def jbod_broker(
    cluster: str, namespace: str, broker_id: int, disks: Sequence[model.Disk], owner: Mapping[str, Any]
) -> Manifest:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "JbodBroker",
        "metadata": _meta(
            names.broker(cluster, broker_id), namespace, names.broker_labels(cluster, broker_id), owner
        ),
        "spec": {
            "clusterName": cluster,
            "brokerId": broker_id,
            "disks": [disk_entry(disk) for disk in disks],
        },
    }


# ---------------------------------------------------------------------------------------------
# Per-broker objects


def server_properties(  # noqa: PLR0913  the broker (spec, cluster, namespace, id, disks), its listeners
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    disks: Sequence[model.Disk],
    added: listener_decisions.BrokerListeners | None = None,
) -> str:
    """The broker's `server.properties` (protocol §4.2 keys), with the listeners of
    `spec.listeners` and the rack (`listeners.BrokerListeners.amend`) when given."""
    settings = spec.config
    host = names.broker_host(cluster, namespace, broker_id)
    tls = spec.tls.enabled
    if tls:
        listeners = [
            f"{names.KAFKA_TLS_SECURITY_PROTOCOL}://{{host}}:{names.KAFKA_PORT}",
            f"SSL://{{host}}:{names.KAFKA_TLS_PORT}",
            f"https://{{host}}:{names.BROKER_HTTP_PORT}",
        ]
    else:
        listeners = [
            f"{names.KAFKA_SECURITY_PROTOCOL}://{{host}}:{names.KAFKA_PORT}",
            f"http://{{host}}:{names.BROKER_HTTP_PORT}",
        ]
    lines = [
        f"node.id={broker_id}",
        "log.dirs=" + ",".join(names.log_dir(d.name) for d in disks),
        f"metadata.log.dir={names.metadata_log_dir()}",
        f"controller.url={names.controller_urls(cluster, namespace, spec.controller.replicas, tls=tls)}",
        "listeners=" + ",".join(listener.format(host="0.0.0.0") for listener in listeners),
        "advertised.listeners=" + ",".join(listener.format(host=host) for listener in listeners),
        # Replication: the followers fetch from their leaders' client listener, as `jbod-broker`
        # with the cluster token (docs/decisions.md, "Replication is Kafka's Fetch").
        "inter.broker.listener.name="
        + (names.KAFKA_TLS_SECURITY_PROTOCOL if tls else names.KAFKA_SECURITY_PROTOCOL),
        f"cluster.token.file={names.TOKENS_DIR}/{names.SECRET_CLUSTER_TOKEN}",
        f"admin.token.file={names.TOKENS_DIR}/{names.SECRET_ADMIN_TOKEN}",
        f"broker.heartbeat.interval.ms={settings.heartbeat_interval_ms}",
        f"broker.session.timeout.ms={settings.session_timeout_ms}",
        f"log.dir.failure.timeout.ms={settings.log_dir_failure_timeout_ms}",
        f"log.dir.probe.interval.ms={settings.log_dir_probe_interval_ms}",
        f"min.insync.replicas={settings.min_insync_replicas}",
        f"replica.lag.time.max.ms={settings.replica_lag_time_max_ms}",
        # Topic auto-creation: the controller's default replication factor, so that a topic
        # created by a Metadata request and one created with -1 replicas get the same.
        f"{auto_create.AUTO_CREATE_TOPICS_ENABLE}={'true' if settings.auto_create_topics_enable else 'false'}",
        f"{auto_create.NUM_PARTITIONS}={settings.num_partitions}",
        f"{auto_create.DEFAULT_REPLICATION_FACTOR}={spec.replication_factor()}",
    ]
    if spec.rack is not None and spec.rack.follower_fetching:
        # Follower fetching (KIP-392): a consumer with client.rack reads from its rack's replica.
        lines.append(f"replica.selector.class={RACK_AWARE_SELECTOR}")
    if tls:
        lines += [
            # The Kafka admin (the admin token's principal) is a super user of the authorizer.
            f"super.users={names.ADMIN_PRINCIPAL}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={_KEYSTORE}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={_TRUSTSTORE}",
            # The SSL listener (9094) is for client certificates: required there. The https API
            # asks for one without requiring it (the kubelet's probes have none); SASL_SSL
            # clients log in with a password (KIP-684: ssl.client.auth never reaches SASL_SSL).
            "ssl.client.auth=requested",
            "listener.name.ssl.ssl.client.auth=required",
            # The principal of a client certificate is its CN (`User:<CN>`, a JbodUser's name), by
            # Kafka's rule syntax rather than `DEFAULT`, which in Kafka is the whole DN.
            f"ssl.principal.mapping.rules={PRINCIPAL_FROM_CN}",
        ]
    text = "\n".join(lines) + "\n"
    return text if added is None else added.amend(text)


def broker_config_map(  # noqa: PLR0913  the broker (spec, cluster, namespace, id, disks), its owner and listeners
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    disks: Sequence[model.Disk],
    owner: Mapping[str, Any],
    listeners: listener_decisions.BrokerListeners | None = None,
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(
            names.broker(cluster, broker_id), namespace, names.broker_labels(cluster, broker_id), owner
        ),
        "data": {
            "server.properties": server_properties(spec, cluster, namespace, broker_id, disks, listeners)
        },
    }


def volume_claim(  # noqa: PLR0913  the broker (cluster, namespace, id), then the claim's disk, volume and generation
    cluster: str,
    namespace: str,
    broker_id: int,
    *,
    disk: str,
    volume: model.Volume,
    generation: int | None,
) -> Manifest:
    """A broker's data claim (`generation` set) or metadata claim (`generation` None); never owned."""
    labels = {**names.broker_labels(cluster, broker_id), names.LABEL_DISK: disk}
    if generation is None:
        name = names.metadata_claim(cluster, broker_id)
    else:
        name = names.claim(cluster, broker_id, disk, generation)
        labels[names.LABEL_GENERATION] = str(generation)
    template = _claim_template(name, volume)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(name, namespace, labels, None),
        "spec": template["spec"],
    }


def broker_pod(  # noqa: PLR0913  the broker (spec, cluster, namespace, id), then its disks, claims, image and owner
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    *,
    disks: Sequence[model.Disk],
    claims: Mapping[str, str],
    image: str,
    owner: Mapping[str, Any],
    listeners: listener_decisions.BrokerListeners | None = None,
) -> Manifest:
    """The broker pod: a `format` init container, then the agent; `claims` maps disk name → claim name.
    With listeners needing the node (`BrokerListeners.node_info`), a `node-info` init container
    first (`node_info_container`)."""
    config = server_properties(spec, cluster, namespace, broker_id, disks, listeners)
    data_mounts = [{"name": f"disk-{d.name}", "mountPath": names.disk_mount(d.name)} for d in disks]
    mounts = [
        {"name": "config", "mountPath": names.CONFIG_DIR, "readOnly": True},
        {"name": "tokens", "mountPath": names.TOKENS_DIR, "readOnly": True},
        {"name": "metadata", "mountPath": names.METADATA_MOUNT},
        _TMP_MOUNT,
        *data_mounts,
    ]
    volumes = [
        {"name": "config", "configMap": {"name": names.broker(cluster, broker_id)}},
        _tokens_volume(cluster),
        _TMP_VOLUME,
        {
            "name": "metadata",
            "persistentVolumeClaim": {"claimName": names.metadata_claim(cluster, broker_id)},
        },
        *({"name": f"disk-{d.name}", "persistentVolumeClaim": {"claimName": claims[d.name]}} for d in disks),
    ]
    tls = spec.tls.enabled
    if tls:
        volumes.append(_tls_volume(spec, cluster, names.broker_tls(cluster, broker_id)))
        mounts.append(_TLS_MOUNT)
    properties = f"{names.CONFIG_DIR}/server.properties"
    common = {
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "securityContext": _CONTAINER_SECURITY,
    }
    init = {
        "name": "format",
        **common,
        "command": ["jbod-storage"],
        "args": ["format", f"--config={properties}", "--cluster-id=$(JBOD_CLUSTER_ID)", "--ignore-formatted"],
        "env": [_cluster_id_env(cluster)],
        "volumeMounts": mounts,
    }
    agent = {
        "name": "agent",
        **common,
        "command": ["jbod-agent"],
        "args": [f"--config={properties}"],
        "ports": [{"name": p["name"], "containerPort": p["port"]} for p in _broker_service_ports(tls)],
        "readinessProbe": _probe("/readyz", names.BROKER_HTTP_PORT, period=2, tls=tls),
        "livenessProbe": _probe("/healthz", names.BROKER_HTTP_PORT, period=10, failures=6, tls=tls),
        "volumeMounts": mounts,
        "resources": _resources(spec.resources),
    }
    pod_spec = {
        "hostname": names.broker(cluster, broker_id),
        "subdomain": names.brokers_service(cluster),
        "readinessGates": [{"conditionType": names.READINESS_GATE}],
        "securityContext": _POD_SECURITY,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": max(30, spec.config.session_timeout_ms // 1000 * 2),
        "restartPolicy": "Always",
        "initContainers": [init],
        "containers": [agent],
        "volumes": volumes,
    }
    if listeners is not None and listeners.node_info:
        add_node_info(pod_spec, cluster, listeners, common)
    template = spec.template.broker
    pod_spec = scheduling.apply_pod_template(
        pod_spec,
        template,
        spread=scheduling.default_spread(names.broker_selector(cluster), scheduling.rack_topology_key(spec)),
    )
    labels = scheduling.pod_labels(names.broker_labels(cluster, broker_id), template)
    # The template's labels and annotations are part of the hash (only when set, so a cluster
    # without them keeps its hash): a change recreates the pod like any other spec change.
    metadata = template.pod.metadata
    hashed = (
        (pod_spec, config, metadata.model_dump())
        if metadata.labels or metadata.annotations
        else (pod_spec, config)
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **_meta(names.broker(cluster, broker_id), namespace, labels, owner),
            "annotations": scheduling.pod_annotations(
                {
                    names.ANNOTATION_SPEC_HASH: spec_hash(*hashed),
                    names.ANNOTATION_CONFIG_HASH: spec_hash(config),
                },
                template,
            ),
        },
        "spec": pod_spec,
    }


BROKER_SERVICE_ACCOUNT_SUFFIX = "-broker"
#: The ClusterRole (charts/jbod/templates) the brokers' ServiceAccount is bound to: get nodes.
BROKER_NODE_READER = "jbod-broker-node-reader"
_NODE_INFO_VOLUME = "node-info"
_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def broker_service_account(cluster: str) -> str:
    return f"{cluster}{BROKER_SERVICE_ACCOUNT_SUFFIX}"


def add_node_info(
    pod_spec: dict[str, Any],
    cluster: str,
    listeners: listener_decisions.BrokerListeners,
    common: Mapping[str, Any],
) -> None:
    """The `node-info` init container first (`jbod_operator.node_info`), writing the node's
    address and rack into an emptyDir every container mounts read-only but it; the pod runs as
    the brokers' ServiceAccount and only that container gets its token."""
    args = [f"--out={listener_decisions.NODE_INFO_FILE}", "--node=$(NODE_NAME)"]
    args += [f"--listener={name}:{kind or ''}" for name, kind in listeners.node_addresses]
    if listeners.rack_label is not None:
        args.append(f"--rack-label={listeners.rack_label}")
    token = {
        "name": "node-info-token",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ]
        },
    }
    init = {
        "name": "node-info",
        **common,
        "command": ["python", "-m", "jbod_operator.node_info"],
        "args": args,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [
            {"name": _NODE_INFO_VOLUME, "mountPath": listener_decisions.NODE_INFO_DIR},
            {"name": "node-info-token", "mountPath": _TOKEN_DIR, "readOnly": True},
            _TMP_MOUNT,  # the Kubernetes client's discovery cache
        ],
    }
    mount = {"name": _NODE_INFO_VOLUME, "mountPath": listener_decisions.NODE_INFO_DIR, "readOnly": True}
    for container in [*pod_spec["initContainers"], *pod_spec["containers"]]:
        container["volumeMounts"] = [*container["volumeMounts"], mount]
    pod_spec["initContainers"] = [init, *pod_spec["initContainers"]]
    pod_spec["volumes"] = [
        *pod_spec["volumes"],
        {"name": _NODE_INFO_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}},
        token,
    ]
    pod_spec["serviceAccountName"] = broker_service_account(cluster)


def node_reader_binding(cluster: str, namespace: str) -> str:
    """The name of the cluster's brokers' ClusterRoleBinding to `BROKER_NODE_READER`."""
    return f"jbod-{namespace}-{broker_service_account(cluster)}"


def broker_rbac(cluster: str, namespace: str, owner: Mapping[str, Any]) -> list[Manifest]:
    """The brokers' ServiceAccount (owned by the cluster) and its binding to the chart's
    ClusterRole `BROKER_NODE_READER` (get nodes): what the node-info init container reads with.
    The binding is cluster-scoped, so it has no owner; it names the cluster and namespace in its
    labels, by which the operator deletes it once the cluster is gone
    (`listeners.orphan_node_readers`)."""
    account = broker_service_account(cluster)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(account, namespace, names.cluster_labels(cluster, "broker"), owner),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {
                "name": node_reader_binding(cluster, namespace),
                "labels": {**names.cluster_labels(cluster, "broker"), names.LABEL_NAMESPACE: namespace},
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": BROKER_NODE_READER,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]
