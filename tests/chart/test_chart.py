"""The Helm chart `charts/jbod`, the `Dockerfile` and `.dockerignore`, checked without a cluster.

What is checked: the chart's CRDs are byte-identical copies of `crds/`; `helm lint` (also
`--strict`) passes; `helm template` renders with the defaults and with every option on
(`values-all.yaml`), and the objects hold up: one operator Deployment (1 replica, Recreate),
every container non-root with a read-only root filesystem, RBAC granting exactly what the
operator does (`NAMESPACED_NEEDS`, `CLUSTER_NEEDS`, cross-checked against the calls in
`jbod_operator`) and never `*`, a Role per watched namespace, `values.schema.json` rejecting
bad values with helm's own error, alerts and dashboard queries naming only metrics the code
exports. The Dockerfile is checked for its structure (it cannot be built here).

helm is `$JBOD_HELM`, else the e2e toolchain's cached binary (`python -m e2e.toolchain build`),
else `helm` on PATH. Without one the helm tests skip, or fail when `JBOD_E2E_REQUIRED` is set.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kclient

pytestmark = pytest.mark.chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "jbod"
VALUES_ALL = Path(__file__).with_name("values-all.yaml")
RELEASE = "rel"
NAMESPACE = "jbod-system"
FALLBACK_KUBE_VERSION = "v1.36.3"

Obj = dict[str, Any]
Need = tuple[str, str, str]  # (API group, resource, verb)

# ---------------------------------------------------------------------------------------------
# What the operator does against the API server, written once. Read from jbod_operator/kube.py
# and every module that calls it or registers a kopf handler, plus kopf 1.4x itself (standalone, annotation progress storage):
# * kopf lists and watches every resource it indexes or handles; it merge-patches handled
#   objects (progress and diff-base annotations, the finalizer its timers and daemons need) and
#   their status subresource; it POSTs core/v1 Events (kopf.info, kopf.warn, handler errors);
#   it watches CRDs always, and namespaces only when given --namespace.
# * kube.apply is server-side apply: a PATCH that creates a missing object, for which the API
#   server also checks `create`.
# * builders.owner_reference sets blockOwnerDeletion, which needs `update` on the owner's
#   finalizers where the OwnerReferencesPermissionEnforcement admission plugin is on.

NAMESPACED_NEEDS: frozenset[Need] = frozenset(
    {
        ("jbod.dev", "jbodclusters", "get"),  # reconcile_broker: kube.get(JbodCluster)
        ("jbod.dev", "jbodclusters", "list"),  # kopf handlers, timer, daemon
        ("jbod.dev", "jbodclusters", "watch"),
        ("jbod.dev", "jbodclusters", "patch"),  # kopf annotations + finalizer
        ("jbod.dev", "jbodclusters/status", "patch"),  # kopf: patch.status
        ("jbod.dev", "jbodclusters/finalizers", "update"),  # blockOwnerDeletion
        ("jbod.dev", "jbodbrokers", "list"),  # brokers_index, handlers, timer
        ("jbod.dev", "jbodbrokers", "watch"),
        ("jbod.dev", "jbodbrokers", "create"),  # kube.apply(jbod_broker)
        ("jbod.dev", "jbodbrokers", "patch"),  # kube.apply, merge_patch, kopf
        ("jbod.dev", "jbodbrokers", "delete"),  # scaled-away brokers
        ("jbod.dev", "jbodbrokers/status", "patch"),
        ("jbod.dev", "jbodbrokers/finalizers", "update"),
        ("", "secrets", "get"),  # _tokens
        ("", "secrets", "create"),  # _ensure_secret
        ("", "secrets", "patch"),  # _ensure_tls (kube.apply), _update_client_secret, user Secrets
        ("", "secrets", "delete"),  # remove_user
        ("jbod.dev", "jbodusers", "list"),  # kopf handlers, timer
        ("jbod.dev", "jbodusers", "watch"),
        ("jbod.dev", "jbodusers", "patch"),  # kopf annotations + finalizer
        ("jbod.dev", "jbodusers/status", "patch"),
        ("jbod.dev", "jbodusers/finalizers", "update"),  # blockOwnerDeletion of the user's Secret
        ("jbod.dev", "jbodtopics", "list"),  # topic_handlers: kopf index, handlers, timer
        ("jbod.dev", "jbodtopics", "watch"),
        ("jbod.dev", "jbodtopics", "patch"),  # kopf annotations + finalizer
        ("jbod.dev", "jbodtopics/status", "patch"),
        ("", "services", "create"),  # kube.apply x3
        ("", "services", "patch"),
        ("", "configmaps", "create"),  # kube.apply(broker_config_map)
        ("", "configmaps", "patch"),
        ("apps", "statefulsets", "create"),  # kube.apply(controller_statefulset)
        ("apps", "statefulsets", "patch"),
        ("policy", "poddisruptionbudgets", "create"),  # kube.apply(broker/controller/etcd_disruption_budget)
        ("policy", "poddisruptionbudgets", "patch"),
        ("", "pods", "list"),  # pods_index
        ("", "pods", "watch"),
        ("", "pods", "create"),  # _converge_pod
        ("", "pods", "delete"),  # restarts
        ("", "pods/status", "patch"),  # set_pod_condition (readiness gate)
        ("", "persistentvolumeclaims", "list"),  # claims_index, list_objects
        ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "create"),  # volume_claim
        ("", "persistentvolumeclaims", "patch"),  # growth, annotations
        ("", "persistentvolumeclaims", "delete"),  # retired claims, removed brokers
        ("", "events", "create"),  # kopf events
        # spec.listeners (listener_objects.py): Services and Ingresses applied, read back, and
        # the ones of removed listeners or brokers listed and deleted; the brokers' ServiceAccount.
        ("", "services", "get"),
        ("", "services", "list"),
        ("", "services", "delete"),
        ("networking.k8s.io", "ingresses", "create"),
        ("networking.k8s.io", "ingresses", "patch"),
        ("networking.k8s.io", "ingresses", "list"),
        ("networking.k8s.io", "ingresses", "delete"),
        ("", "serviceaccounts", "create"),
        ("", "serviceaccounts", "patch"),
    }
)
CLUSTER_NEEDS: frozenset[Need] = frozenset(
    {
        ("", "persistentvolumes", "list"),  # volumes_index
        ("", "persistentvolumes", "watch"),
        ("storage.k8s.io", "volumeattachments", "list"),  # attachments_index
        ("storage.k8s.io", "volumeattachments", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),  # kopf resource observer
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("", "nodes", "get"),  # listener_objects: the brokers' nodes' addresses (nodeport)
        ("storage.k8s.io", "storageclasses", "get"),  # disk_growth: allowVolumeExpansion
        # listener_objects: the brokers' ServiceAccount bound to the node-reader ClusterRole,
        # the binding deleted once its cluster is gone (swept at start-up) or reads no node
        ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "patch"),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "list"),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "delete"),
    }
)
NAMESPACE_OBSERVER_NEEDS: frozenset[Need] = frozenset(
    {("", "namespaces", "list"), ("", "namespaces", "watch")}  # kopf, only with --namespace
)

# Kinds the operator touches → (API group, plural).
KINDS: Mapping[str, tuple[str, str]] = {
    "Secret": ("", "secrets"),
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "Pod": ("", "pods"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "StatefulSet": ("apps", "statefulsets"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "JbodCluster": ("jbod.dev", "jbodclusters"),
    "JbodBroker": ("jbod.dev", "jbodbrokers"),
    "JbodUser": ("jbod.dev", "jbodusers"),
    "StorageClass": ("storage.k8s.io", "storageclasses"),
    "Node": ("", "nodes"),
    "ServiceAccount": ("", "serviceaccounts"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
}
KOPF_RESOURCES: Mapping[str, tuple[str, str]] = {
    "names.CLUSTERS": ("jbod.dev", "jbodclusters"),
    "names.BROKERS": ("jbod.dev", "jbodbrokers"),
    "names.USERS": ("jbod.dev", "jbodusers"),
    "names.TOPICS": ("jbod.dev", "jbodtopics"),
    "pods": ("", "pods"),
    "persistentvolumeclaims": ("", "persistentvolumeclaims"),
    "persistentvolumes": ("", "persistentvolumes"),
    "volumeattachments": ("storage.k8s.io", "volumeattachments"),
}
CLUSTER_SCOPED = {
    "persistentvolumes",
    "volumeattachments",
    "customresourcedefinitions",
    "namespaces",
    "nodes",
    "clusterrolebindings",
    "storageclasses",
}

REQUIRED_ALERTS = {
    "JbodLogDirOffline",
    "JbodOfflineReplicas",
    "JbodBrokersFenced",
    "JbodLogDirAlmostFull",
    "JbodOperatorDown",
    "JbodConsumerGroupLagGrowing",
}
PER_DISK_METRICS = {
    "jbod_log_dir_usable_bytes",
    "jbod_log_directory_offline",
    "jbod_disk_probe_seconds_bucket",
}
CLUSTER_METRICS = {"jbod_controller_fenced_brokers", "jbod_controller_offline_partitions"}
METRIC_SOURCES = ("agent/jbod_agent", "controller/jbod_controller", "operator/jbod_operator")
PROMETHEUS_OWN_METRICS = {"up"}
BUILTIN_API_VERSIONS = {"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1"}


# ---------------------------------------------------------------------------------------------
# helm


def _toolchain_helm() -> tuple[Path | None, str]:
    """The e2e toolchain's helm and its Kubernetes version (e2e/toolchain.py may be mid-edit)."""
    try:
        from e2e import toolchain

        chain = toolchain.Toolchain.default()
        return chain.helm, chain.k8s_version
    except Exception:
        cache = Path(os.environ.get("JBOD_E2E_CACHE") or Path.home() / ".cache" / "jbod-e2e")
        found = sorted(cache.glob("v*/bin/helm"))
        if found:
            return found[-1], found[-1].parent.parent.name
        return None, FALLBACK_KUBE_VERSION


def find_helm() -> tuple[str | None, str]:
    """(helm binary or None, Kubernetes version to render for)."""
    toolchain_helm, kube_version = _toolchain_helm()
    if os.environ.get("JBOD_HELM"):
        return os.environ["JBOD_HELM"], kube_version
    if toolchain_helm is not None and os.access(toolchain_helm, os.X_OK):
        return str(toolchain_helm), kube_version
    return shutil.which("helm"), kube_version


class Helm:
    def __init__(self, binary: str, kube_version: str) -> None:
        self.binary = binary
        self.kube_version = kube_version

    def run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"helm {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def template(
        self, *args: str | Path, chart: Path = CHART, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "template",
            RELEASE,
            chart,
            "--namespace",
            NAMESPACE,
            "--kube-version",
            self.kube_version,
            *args,
            check=check,
        )

    def render(self, *args: str | Path) -> list[Obj]:
        return parse_manifests(self.template(*args).stdout)


def parse_manifests(text: str) -> list[Obj]:
    """The rendered objects, each with its template file under the key `__source__`."""
    objects = []
    for chunk in re.split(r"^---\s*$", text, flags=re.M):
        source = re.search(r"^# Source: (\S+)", chunk, flags=re.M)
        body = yaml.safe_load(chunk)
        if body:
            body["__source__"] = source.group(1) if source else "?"
            objects.append(body)
    return objects


@pytest.fixture(scope="session")
def helm() -> Helm:
    binary, kube_version = find_helm()
    if binary is None:
        reason = "no helm binary: set JBOD_HELM or build the e2e toolchain (python -m e2e.toolchain build --only helm)"
        if os.environ.get("JBOD_E2E_REQUIRED"):
            pytest.fail(reason + " (JBOD_E2E_REQUIRED is set)")
        pytest.skip(reason)
    return Helm(binary, kube_version.lstrip("v"))


@pytest.fixture(scope="session")
def default_objects(helm: Helm) -> list[Obj]:
    return helm.render()


@pytest.fixture(scope="session")
def all_objects(helm: Helm) -> list[Obj]:
    return helm.render("--values", VALUES_ALL)


@pytest.fixture(scope="session")
def renders(default_objects: list[Obj], all_objects: list[Obj]) -> dict[str, list[Obj]]:
    return {"defaults": default_objects, "everything on": all_objects}


def of_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: Iterable[Obj], kind: str) -> Obj:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


# ---------------------------------------------------------------------------------------------
# CRDs and lint


def test_chart_crds_are_byte_identical_copies() -> None:
    sources = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    copies = sorted(p.name for p in (CHART / "crds").iterdir())
    assert sources, "no CRDs in crds/"
    assert copies == sources, "charts/jbod/crds/ must hold exactly the files of crds/"
    for name in sources:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"charts/jbod/crds/{name} differs from crds/{name}: cp crds/*.yaml charts/jbod/crds/"
        )


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("values", [None, VALUES_ALL], ids=["defaults", "everything-on"])
def test_helm_lint_passes(helm: Helm, strict: bool, values: Path | None) -> None:
    args: list[str | Path] = ["lint", CHART]
    if strict:
        args.append("--strict")
    if values is not None:
        args += ["--values", values]
    out = helm.run(*args).stdout
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


# ---------------------------------------------------------------------------------------------
# Rendered objects


def test_both_renders_hold_the_expected_objects(default_objects: list[Obj], all_objects: list[Obj]) -> None:
    kinds = {o["kind"] for o in default_objects}
    assert {
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "ConfigMap",
    } <= kinds
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "CronJob", "JbodCluster"}
    kinds_all = {o["kind"] for o in all_objects}
    assert {
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "CronJob",
        "JbodCluster",
        "Role",
        "RoleBinding",
    } <= kinds_all


def test_one_resource_kind_per_template_file(renders: dict[str, list[Obj]]) -> None:
    for label, objects in renders.items():
        kinds_by_file: dict[str, set[str]] = {}
        for obj in objects:
            kinds_by_file.setdefault(obj["__source__"], set()).add(obj["kind"])
        mixed = {f: k for f, k in kinds_by_file.items() if len(k) > 1}
        assert not mixed, f"{label}: template files rendering several kinds: {mixed}"


def test_every_object_has_the_standard_labels(renders: dict[str, list[Obj]]) -> None:
    for label, objects in renders.items():
        for obj in objects:
            labels = obj["metadata"].get("labels") or {}
            where = f"{label}: {obj['kind']} {obj['metadata']['name']}"
            assert labels.get("app.kubernetes.io/name") == "jbod", where
            assert labels.get("app.kubernetes.io/instance") == RELEASE, where
            assert labels.get("app.kubernetes.io/version") == "0.1.0", where
            assert labels.get("app.kubernetes.io/managed-by") == "Helm", where
            assert labels.get("helm.sh/chart") == "jbod-0.1.0", where
            assert labels.get("app.kubernetes.io/component"), where


def _unknown_fields(value: Any, type_name: str, path: str) -> Iterator[str]:
    """Keys the Kubernetes OpenAPI model of `type_name` does not have (typos, misplaced fields)."""
    # The client spells containers `list[...]`/`dict(...)` or, in newer versions, `List[...]`/`Dict(...)`.
    if type_name.lower().startswith("list[") and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _unknown_fields(item, type_name[5:-1], f"{path}[{i}]")
        return
    if type_name.lower().startswith("dict(") and isinstance(value, dict):
        inner = type_name[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            yield from _unknown_fields(item, inner, f"{path}.{key}")
        return
    model = getattr(kclient, type_name, None)
    if model is None or not isinstance(value, dict):
        return
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            yield f"{path}.{key}"
        else:
            yield from _unknown_fields(item, model.openapi_types[by_json[key]], f"{path}.{key}")


def test_builtin_objects_use_only_fields_kubernetes_knows(renders: dict[str, list[Obj]]) -> None:
    for label, objects in renders.items():
        for obj in objects:
            if obj["apiVersion"] not in BUILTIN_API_VERSIONS:
                continue  # custom resources (monitoring.coreos.com, jbod.dev)
            body = {k: v for k, v in obj.items() if k != "__source__"}
            model = f"V1{obj['kind']}"
            assert hasattr(kclient, model), f"no model {model}"
            unknown = list(_unknown_fields(body, model, obj["kind"]))
            assert not unknown, f"{label}: unknown fields {unknown}"


def _operator(objects: list[Obj]) -> tuple[Obj, Obj]:
    deployment = one(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return deployment, containers[0]


def test_one_operator_deployment_with_one_replica_and_recreate(renders: dict[str, list[Obj]]) -> None:
    for objects in renders.values():
        deployment, container = _operator(objects)
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        pod = deployment["spec"]["template"]["spec"]
        account = one(objects, "ServiceAccount")
        assert pod["serviceAccountName"] == account["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": 8000, "health": 8080}
        probe = container["livenessProbe"]["httpGet"]
        assert probe["path"] == "/healthz"
        assert ports[probe["port"]] == 8080
        assert container["command"] == ["jbod-operator"]
        assert "--metrics-address=0.0.0.0:8000" in container["args"]
        assert "--health-address=0.0.0.0:8080" in container["args"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["JBOD_IMAGE"] == container["image"], "clusters must default to the chart's image"


def test_operator_watches_all_namespaces_by_default(default_objects: list[Obj]) -> None:
    _, container = _operator(default_objects)
    assert "--all-namespaces" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--namespace")]
    assert container["image"] == "ghcr.io/jbod-dev/jbod:0.1.0"


def test_operator_watches_the_listed_namespaces(all_objects: list[Obj]) -> None:
    _, container = _operator(all_objects)
    assert "--all-namespaces" not in container["args"]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert container["image"].startswith("ghcr.io/jbod-dev/jbod@sha256:")


def _pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for obj in objects:
        if obj["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield obj["metadata"]["name"], obj["spec"]


def test_every_container_runs_non_root_with_a_read_only_root_filesystem(
    renders: dict[str, list[Obj]],
) -> None:
    seen = 0
    for label, objects in renders.items():
        for name, pod in _pod_specs(objects):
            pod_security = pod.get("securityContext") or {}
            tmp_volumes = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
            for container in pod.get("initContainers", []) + pod["containers"]:
                seen += 1
                where = f"{label}: {name}/{container['name']}"
                security = {**pod_security, **(container.get("securityContext") or {})}
                assert security.get("runAsNonRoot") is True, where
                assert security.get("runAsUser", 0) != 0, where
                assert security.get("readOnlyRootFilesystem") is True, where
                assert security.get("allowPrivilegeEscalation") is False, where
                assert security.get("capabilities", {}).get("drop") == ["ALL"], where
                tmp = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
                assert tmp and tmp[0]["name"] in tmp_volumes, (
                    f"{where}: /tmp must be an emptyDir (HOME, TMPDIR)"
                )
    assert seen >= 4  # operator (twice), analytics init + main


# ---------------------------------------------------------------------------------------------
# RBAC


def _grants(rules: Iterable[Obj]) -> set[Need]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def _bound_to_operator(objects: list[Obj]) -> tuple[set[Need], dict[str, set[Need]]]:
    """(cluster-wide grants, grants per namespace) of the operator's ServiceAccount."""
    account = one(objects, "ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    cluster_roles = {o["metadata"]["name"]: o for o in of_kind(objects, "ClusterRole")}
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in of_kind(objects, "Role")}
    cluster: set[Need] = set()
    per_namespace: dict[str, set[Need]] = {}
    for binding in of_kind(objects, "ClusterRoleBinding"):
        if subject in binding["subjects"]:
            cluster |= _grants(cluster_roles[binding["roleRef"]["name"]]["rules"])
    for binding in of_kind(objects, "RoleBinding"):
        if subject in binding["subjects"]:
            namespace = binding["metadata"]["namespace"]
            ref = binding["roleRef"]
            rules = (
                roles[(namespace, ref["name"])]["rules"]
                if ref["kind"] == "Role"
                else cluster_roles[ref["name"]]["rules"]
            )
            per_namespace.setdefault(namespace, set()).update(_grants(rules))
    return cluster, per_namespace


def test_rbac_has_no_wildcards(renders: dict[str, list[Obj]]) -> None:
    for label, objects in renders.items():
        for obj in objects:
            for rule in obj.get("rules", []) if obj["kind"] in {"ClusterRole", "Role"} else []:
                for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                    assert not any("*" in item for item in rule.get(key, [])), (
                        f"{label}: {obj['metadata']['name']}"
                    )


def test_rbac_all_namespaces_grants_exactly_what_the_operator_does(default_objects: list[Obj]) -> None:
    cluster, per_namespace = _bound_to_operator(default_objects)
    assert per_namespace == {}
    assert cluster == NAMESPACED_NEEDS | CLUSTER_NEEDS, (
        f"missing {sorted(NAMESPACED_NEEDS | CLUSTER_NEEDS - cluster)}, "
        f"extra {sorted(cluster - NAMESPACED_NEEDS - CLUSTER_NEEDS)}"
    )


def test_rbac_watch_namespaces_renders_a_role_per_namespace(all_objects: list[Obj]) -> None:
    roles = of_kind(all_objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in of_kind(all_objects, "RoleBinding")) == [
        "team-a",
        "team-b",
    ]
    cluster, per_namespace = _bound_to_operator(all_objects)
    assert cluster == CLUSTER_NEEDS | NAMESPACE_OBSERVER_NEEDS, (
        "only cluster-scoped reads may be cluster-wide"
    )
    assert all(resource in CLUSTER_SCOPED for _, resource, _ in cluster)
    assert set(per_namespace) == {"team-a", "team-b"}
    for namespace, grants in per_namespace.items():
        assert grants == NAMESPACED_NEEDS, f"{namespace}: missing {sorted(NAMESPACED_NEEDS - grants)}"


def test_rbac_can_be_left_to_an_administrator(helm: Helm) -> None:
    objects = helm.render("--set", "rbac.create=false")
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} & {o["kind"] for o in objects}


def test_rbac_rules_explain_themselves() -> None:
    """Every rule in _helpers.tpl is preceded by a comment saying why."""
    text = (CHART / "templates" / "_helpers.tpl").read_text()
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("- apiGroups:")]
    assert len(rules) >= 15
    for i in rules:
        previous = next(line for line in reversed(lines[:i]) if not line.startswith("{{"))
        assert previous.startswith("# "), f"rule at _helpers.tpl:{i + 1} has no comment"


def test_every_flag_the_chart_passes_is_one_of_the_operators(all_objects: list[Obj]) -> None:
    """The Deployment's args name only `jbod-operator` options, with the values given."""
    from jbod_operator import cli

    _, container = _operator(all_objects)
    options = {opt for param in cli.command.params for opt in param.opts}
    flags = [a.split("=", 1)[0] for a in container["args"] if a.startswith("--")]
    assert set(flags) <= options
    assert "--secret-propagation-seconds=60" in container["args"]
    assert "--poll-seconds=0.5" in container["args"]


def _decorated_resources(tree: ast.Module) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(resources kopf indexes or handles, resources with change handlers/timers/daemons)."""
    watched: set[tuple[str, str]] = set()
    handled: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            name = ast.unparse(decorator.func)
            if not name.startswith("kopf.") or name == "kopf.on.startup":
                continue
            last = ast.unparse(decorator.args[-1]).strip("'\"")
            assert last in KOPF_RESOURCES, (
                f"kopf watches {last!r}: add it to KOPF_RESOURCES and the chart's RBAC"
            )
            watched.add(KOPF_RESOURCES[last])
            if name != "kopf.index":
                handled.add(KOPF_RESOURCES[last])
    return watched, handled


def _builder_kinds() -> dict[str, str]:
    tree = ast.parse((ROOT / "operator" / "jbod_operator" / "builders.py").read_text())
    kinds = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict):
                    for key, value in zip(sub.keys, sub.values, strict=True):
                        if (
                            isinstance(key, ast.Constant)
                            and key.value == "kind"
                            and isinstance(value, ast.Constant)
                        ):
                            kinds.setdefault(node.name, value.value)
    return kinds


def test_rbac_needs_cover_every_call_of_the_operator() -> None:
    """Cross-check NAMESPACED_NEEDS/CLUSTER_NEEDS against the calls in every jbod_operator module
    that calls `kube` or registers a kopf handler."""
    package = ROOT / "operator" / "jbod_operator"
    sources = [
        text
        for module in sorted(package.glob("*.py"))
        if module.name != "kube.py" and ("kube." in (text := module.read_text()) or "@kopf." in text)
    ]
    source = "\n".join(sources)
    tree = ast.Module(body=[node for text in sources for node in ast.parse(text).body], type_ignores=[])
    found: set[Need] = set()
    watched, handled = _decorated_resources(tree)
    for group, resource in watched:
        found |= {(group, resource, "list"), (group, resource, "watch")}
    for group, resource in handled:
        found |= {(group, resource, "patch"), (group, f"{resource}/status", "patch")}
    verbs = {"get": "get", "delete": "delete", "merge_patch": "patch", "list_objects": "list"}
    for call, kind in re.findall(
        r"kube\.(get|delete|merge_patch|list_objects)\(\s*(?:\"[^\"]*\"|names\.API_VERSION),\s*\"(\w+)\"",
        source,
    ):
        assert kind in KINDS, f"the operator calls kube.{call} on {kind}: add it to KINDS and the RBAC"
        found.add((*KINDS[kind], verbs[call]))
    if "kube.set_pod_condition(" in source:
        found.add(("", "pods/status", "patch"))
    if re.search(r"kopf\.(info|warn|event|exception)\(", source):
        found.add(("", "events", "create"))
    # Objects built by builders.py: kube.create needs create; kube.apply (server-side apply) also patch.
    builder_kinds = _builder_kinds()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).startswith("builders.")):
            continue
        kind = builder_kinds.get(ast.unparse(node.func).removeprefix("builders."))
        if kind is None:
            continue
        assert kind in KINDS, f"builders make a {kind}: add it to KINDS and the RBAC"
        found.add((*KINDS[kind], "create"))
        ancestor: ast.AST | None = node
        while ancestor is not None:
            if isinstance(ancestor, ast.Call) and ast.unparse(ancestor.func) == "kube.apply":
                found.add((*KINDS[kind], "patch"))
            if isinstance(ancestor, ast.For) and "kube.apply(" in ast.unparse(ancestor):
                found.add((*KINDS[kind], "patch"))
            ancestor = parents.get(ancestor)
    missing = found - NAMESPACED_NEEDS - CLUSTER_NEEDS
    assert not missing, f"the operator does {sorted(missing)}, which the needs (and so the chart) lack"
    for need in found:
        expected = CLUSTER_NEEDS if need[1] in CLUSTER_SCOPED else NAMESPACED_NEEDS
        assert need in expected, need


# ---------------------------------------------------------------------------------------------
# values.yaml and values.schema.json


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("replicaCount=two", "/replicaCount"),
        ("replicaCount=2", "/replicaCount"),
        ("bogus=1", "bogus"),
        ("operator.bogus=1", "bogus"),
        ("analytics.job=nope", "/analytics/job"),
        ("analytics.driverMemory=lots", "/analytics/driverMemory"),
        ("analytics.enabled=true", "/analytics/cluster"),
        ("watchNamespaces={Team_A}", "/watchNamespaces/0"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
    ],
)
def test_values_schema_rejects_bad_values(helm: Helm, setting: str, message: str) -> None:
    proc = helm.template("--set", setting, check=False)
    assert proc.returncode != 0, f"--set {setting} rendered"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


def test_service_monitor_needs_the_metrics_service(helm: Helm) -> None:
    proc = helm.template(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false", check=False
    )
    assert proc.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in proc.stderr


def _schema_node(schema: Obj, path: list[str]) -> Obj | None:
    node: Obj | None = schema
    for key in path:
        if node is None:
            return None
        node = (node.get("properties") or {}).get(key)
    return node


def _is_free_form(node: Obj) -> bool:
    """A pass-through object (resources, labels, the example spec): its keys need no own comment."""
    return node.get("additionalProperties") is not False or "Kubernetes" in node.get("description", "")


def test_every_value_is_documented_by_a_comment_starting_with_its_name() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    documented = set()
    for i, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z_][\w.-]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        stack.append((indent, key))
        parent = _schema_node(schema, path[:-1])
        if parent is None or _is_free_form(parent) or (len(path) > 1 and _schema_node(schema, path) is None):
            continue
        dotted = ".".join(path)
        comment = lines[i - 1].strip() if i else ""
        assert comment.startswith(f"# {dotted} -- "), (
            f"values.yaml:{i + 1}: {dotted} needs '# {dotted} -- ...' above it"
        )
        documented.add(dotted)

    def declared(node: Obj, prefix: str) -> Iterator[str]:
        for key, child in (node.get("properties") or {}).items():
            if key == "global":
                continue
            yield prefix + key
            if child.get("type") == "object" and not _is_free_form(child):
                yield from declared(child, f"{prefix}{key}.")

    missing = set(declared(schema, "")) - documented
    assert not missing, f"schema properties without a documented value in values.yaml: {sorted(missing)}"


def test_schema_is_strict() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["replicaCount"]["enum"] == [1]

    def objects(node: Obj, path: str) -> Iterator[tuple[str, Obj]]:
        if "properties" in node:
            yield path, node
            for key, child in node["properties"].items():
                yield from objects(child, f"{path}.{key}")

    for path, node in objects(schema, "$"):
        if path not in {"$.global", "$.exampleCluster.spec"} and not path.endswith(".extraEnv"):
            assert node.get("additionalProperties") is False, f"{path} accepts unknown keys"


# ---------------------------------------------------------------------------------------------
# Monitoring: metric names come from the code


def code_metrics() -> set[str]:
    """Every series name the operator, controller and agent export (counters and histograms expanded)."""
    pattern = re.compile(
        r"\b(Counter|Gauge|Histogram|Summary|GaugeMetricFamily|CounterMetricFamily|HistogramMetricFamily)"
        r"\(\s*\"(jbod_[a-z0-9_]+)\""
    )
    names: set[str] = set()
    for source in METRIC_SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            for kind, name in pattern.findall(path.read_text()):
                if kind.startswith("Counter"):
                    base = name.removesuffix("_total")
                    names |= {base + "_total"}
                elif kind.startswith(("Histogram", "Summary")):
                    names |= {name + "_bucket", name + "_sum", name + "_count"}
                else:
                    names.add(name)
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (label names in matchers and groupings are not)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\(\s*([^,()]+),\s*\w+\s*\)", r"\1", expr)
    return set(re.findall(r"\b(jbod_[a-z0-9_]+|up)\b(?!\s*\()", expr))


def test_the_metrics_the_task_names_exist_in_the_code() -> None:
    exported = code_metrics()
    assert exported >= PER_DISK_METRICS | CLUSTER_METRICS
    assert {
        "jbod_offline_log_directory_count",
        "jbod_offline_replica_count",
        "jbod_log_directory_full",
    } <= exported
    assert "jbod_operator_reconciles_total" in exported


def test_prometheus_rule_alerts_on_disks_replicas_fencing_and_the_operator(all_objects: list[Obj]) -> None:
    rule = one(all_objects, "PrometheusRule")
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    alerts = {r["alert"]: r for r in rules}
    assert set(alerts) >= REQUIRED_ALERTS
    exported = code_metrics() | PROMETHEUS_OWN_METRICS
    for name, alert in alerts.items():
        expr = alert["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), name
        used = metric_names(expr)
        assert used, f"{name}: no metric in {expr!r}"
        assert used <= exported, f"{name} uses metrics no code exports: {sorted(used - exported)}"
        assert re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", alert["for"]), name
        assert alert["labels"]["severity"] in {"warning", "critical"}, name
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], name
    assert "10737418240" in alerts["JbodLogDirAlmostFull"]["expr"]
    assert 'job="rel-jbod-metrics"' in alerts["JbodOperatorDown"]["expr"]
    service = one(all_objects, "Service")
    assert service["metadata"]["name"] == "rel-jbod-metrics", "JbodOperatorDown's job is the Service name"


def test_monitors_scrape_the_operator_and_every_controller_and_broker(all_objects: list[Obj]) -> None:
    service = one(all_objects, "Service")
    monitor = one(all_objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    pods = one(all_objects, "PodMonitor")["spec"]
    assert pods["selector"]["matchLabels"]["app.kubernetes.io/name"] == "jbod"
    assert pods["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    endpoint = pods["podMetricsEndpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")  # builders.py names both ports http
    targets = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert {"jbod_cluster", "broker"} <= targets, "the dashboard and alerts group by these"


def test_pod_monitor_selects_pods_as_the_operator_labels_them() -> None:
    from jbod_operator import names

    selector_labels = {"app.kubernetes.io/name": "jbod", "app.kubernetes.io/managed-by": "jbod-operator"}
    for labels in (names.cluster_labels("demo", "controller"), names.broker_labels("demo", 0)):
        assert selector_labels.items() <= labels.items()
        assert labels[names.LABEL_COMPONENT] in {"controller", "broker"}
        assert names.LABEL_CLUSTER == "jbod.dev/cluster" and names.LABEL_BROKER == "jbod.dev/broker-id"


def test_dashboard_panels_query_metrics_the_code_exports(default_objects: list[Obj]) -> None:
    config_map = next(
        o for o in of_kind(default_objects, "ConfigMap") if o["metadata"]["name"].endswith("dashboard")
    )
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = config_map["data"].values()
    assert text == (CHART / "dashboards" / "jbod-disks.json").read_text().rstrip("\n")
    dashboard = json.loads(text)
    assert dashboard["uid"] and dashboard["title"]
    exported = code_metrics()
    used_anywhere: set[str] = set()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 5
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = metric_names(target["expr"])
            assert used, f"{panel['title']}: no metric in {target['expr']!r}"
            assert used <= exported, (
                f"{panel['title']}: {sorted(used - exported)} are not exported by the code"
            )
            used_anywhere |= used
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert metric_names(variable["query"]["query"]) <= exported, variable["name"]
    assert used_anywhere >= PER_DISK_METRICS | CLUSTER_METRICS
    per_disk = [
        p for p in panels if metric_names(" ".join(t["expr"] for t in p["targets"])) & PER_DISK_METRICS
    ]
    for panel in per_disk:
        legend = " ".join(t.get("legendFormat", "") for t in panel["targets"]) + " ".join(
            t["expr"] for t in panel["targets"]
        )
        assert "directory_id" in legend or "path" in legend, f"{panel['title']}: one series per directory"


def test_grafana_dashboard_can_be_left_out(helm: Helm) -> None:
    objects = helm.render("--set", "grafanaDashboard.enabled=false")
    assert not [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("dashboard")]


# ---------------------------------------------------------------------------------------------
# Analytics CronJob, example cluster, NOTES


def test_analytics_cron_job_exports_the_metadata_log_and_runs_the_pipeline(all_objects: list[Obj]) -> None:
    cron_job = one(all_objects, "CronJob")
    assert cron_job["metadata"]["namespace"] == "team-a"
    assert len(cron_job["metadata"]["name"]) <= 52
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (export,) = pod["initContainers"]
    assert export["command"] == ["jbodctl"]
    assert export["args"][-3:] == ["metadata", "export", "--out=/work/metadata.jsonl"]
    assert "--controller=http://demo-controller.team-a.svc:9093" in export["args"]
    (pipeline,) = pod["containers"]
    script, job, *rest = pipeline["command"][2:]
    assert pipeline["command"][:2] == ["/bin/sh", "-c"]
    assert 'exec jbod-pipeline "$0" --metadata /work/metadata.jsonl --out "$out" "$@"' in script
    assert job == "disks"
    assert rest == [
        "--master=local[*]",
        "--telemetry=/reports/telemetry.jsonl",
        "--driver-memory=1g",
        "--strict",
    ]
    assert pipeline["image"] == "ghcr.io/jbod-dev/jbod:0.1.0-pipeline"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "demo-tokens"
    assert volumes["reports"]["persistentVolumeClaim"]["claimName"] == "jbod-reports"


@pytest.mark.parametrize("job", ["disks", "plan", "all"])
def test_analytics_jobs_that_read_telemetry_need_it(helm: Helm, job: str) -> None:
    proc = helm.template(
        "--set",
        "analytics.enabled=true",
        "--set",
        "analytics.cluster=demo",
        "--set",
        f"analytics.job={job}",
        check=False,
    )
    assert proc.returncode != 0
    assert f"analytics.job={job} needs analytics.telemetry" in proc.stderr


def test_analytics_default_job_needs_only_the_metadata_log(helm: Helm) -> None:
    objects = helm.render("--set", "analytics.enabled=true", "--set", "analytics.cluster=demo")
    command = one(objects, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert command[3:] == ["blast-radius", "--master=local[*]"]


def test_example_cluster_is_the_repository_example_and_survives_uninstall(all_objects: list[Obj]) -> None:
    cluster = one(all_objects, "JbodCluster")
    example = yaml.safe_load((ROOT / "examples" / "jbodcluster.yaml").read_text())
    assert cluster["apiVersion"] == example["apiVersion"]
    assert cluster["spec"] == example["spec"]
    assert cluster["metadata"]["name"] == example["metadata"]["name"]
    assert cluster["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_notes_show_the_next_command(helm: Helm, tmp_path: Path) -> None:
    """NOTES.txt renders only on install; render it through a throw-away template in a copy of the chart."""
    chart = tmp_path / "jbod"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n  labels: {}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n'
    )
    for args, namespace in (((), "default"), (("--set", "watchNamespaces={team-a}"), "team-a")):
        out = helm.template("--show-only", "templates/zz-notes.yaml", *args, chart=chart).stdout
        notes = yaml.safe_load(out)["data"]["notes"]
        assert f"kubectl apply -n {namespace} -f examples/jbodcluster.yaml" in notes
        assert f"kubectl -n {namespace} get jbodbrokers -w" in notes
        assert "kind: JbodCluster" in notes


# ---------------------------------------------------------------------------------------------
# Dockerfile and .dockerignore (no Docker engine here: structure only)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        instruction, _, args = line.partition(" ")
        out.append((instruction.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continuation line"
    return out


def dockerfile_stages() -> list[dict[str, Any]]:
    args: dict[str, str] = {}
    stages: list[dict[str, Any]] = []
    for instruction, rest in dockerfile_instructions():
        if instruction == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
        elif instruction == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append({"image": image, "name": name, "instructions": []})
        else:
            assert stages, f"{instruction} before the first FROM"
            stages[-1]["instructions"].append((instruction, rest))
    return stages


def _stage_chain(stages: list[dict[str, Any]], stage: dict[str, Any]) -> list[dict[str, Any]]:
    """The stage and the stages it is built FROM, base first."""
    by_name = {s["name"]: s for s in stages if s["name"]}
    chain = [stage]
    while chain[0]["image"] in by_name:
        chain.insert(0, by_name[chain[0]["image"]])
    return chain


def _env(chain: list[dict[str, Any]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for stage in chain:
        for instruction, rest in stage["instructions"]:
            if instruction == "ENV":
                env.update(dict(re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", rest)))
    return env


def test_dockerfile_is_multi_stage_with_a_pipeline_target() -> None:
    stages = dockerfile_stages()
    names = [s["name"] for s in stages]
    assert len(stages) >= 3 and "builder" in names and "pipeline" in names
    assert stages[-1]["name"] not in {"pipeline", "builder"}, "the default target is the runtime image"
    for stage in stages:
        for instruction, rest in stage["instructions"]:
            if instruction == "COPY" and "--from=" in rest:
                source = re.search(r"--from=(\S+)", rest).group(1)  # type: ignore[union-attr]
                assert source in names[: names.index(stage["name"])], (
                    f"COPY --from={source} names no earlier stage"
                )
    pipeline = stages[names.index("pipeline")]
    run = " ".join(rest for instruction, rest in pipeline["instructions"] if instruction == "RUN")
    assert "openjdk-17-jre" in run, "the pipeline image needs a Java 17 JRE for PySpark"
    assert _env(_stage_chain(stages, pipeline)).get("JAVA_HOME")


def test_dockerfile_pins_base_images_and_adds_no_urls() -> None:
    stages = dockerfile_stages()
    names = {s["name"] for s in stages}
    for stage in stages:
        image = stage["image"]
        if image in names:
            continue
        assert "@sha256:" in image or ":" in image.rsplit("/", 1)[-1], f"{image} has no tag"
        assert not image.endswith(":latest"), image
        for instruction, rest in stage["instructions"]:
            assert instruction != "ADD" or not re.search(r"(https?|ftp)://|git@", rest), (
                f"ADD of a URL: {rest}"
            )
            assert instruction != "ENTRYPOINT", "no ENTRYPOINT: one image runs operator, controller and agent"
            assert ":latest" not in rest, rest


def test_dockerfile_final_images_run_non_root_on_a_read_only_root() -> None:
    stages = dockerfile_stages()
    finals = [stages[-1], next(s for s in stages if s["name"] == "pipeline")]
    for stage in finals:
        chain = _stage_chain(stages, stage)
        users = [rest for s in chain for instruction, rest in s["instructions"] if instruction == "USER"]
        assert users, f"{stage['name']}: no USER"
        user = users[-1]
        assert re.fullmatch(r"[0-9]+(:[0-9]+)?", user), (
            f"{stage['name']}: USER {user} must be numeric (runAsNonRoot)"
        )
        assert all(int(part) != 0 for part in user.split(":")), f"{stage['name']}: USER {user} is root"
        assert user.split(":")[0] == "10001", "the chart and builders.RUN_AS run as 10001"
        env = _env(chain)
        assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
        assert env.get("HOME") == "/tmp" and env.get("TMPDIR") == "/tmp", "writes go to the /tmp emptyDir"
        commands = [rest for s in chain for instruction, rest in s["instructions"] if instruction == "CMD"]
        assert commands, f"{stage['name']}: no CMD"
    default_chain = _stage_chain(stages, stages[-1])
    runtime_cmd = [
        rest for s in default_chain for instruction, rest in s["instructions"] if instruction == "CMD"
    ][-1]
    assert json.loads(runtime_cmd) == ["jbod-operator"]
    assert "runtime" in [s["name"] for s in default_chain], "the default target is the runtime"


def test_dockerfile_runtime_target_needs_no_pipeline_stage() -> None:
    """The legacy builder (no BuildKit, as on machines without the buildx plugin) builds every stage
    before its target: `--target runtime` must not install PySpark or Java."""
    stages = dockerfile_stages()
    names = [s["name"] for s in stages]
    runtime = names.index("runtime")
    assert all(not name.startswith("pipeline") for name in names[:runtime]), names
    assert not any("pipeline" in s["name"] for s in _stage_chain(stages, stages[runtime]))


def test_dockerignore_admits_exactly_the_sources_the_wheel_is_built_from() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", ".dockerignore is an allow-list: it starts with '*'"
    admitted = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    roots = pyproject["tool"]["setuptools"]["packages"]["find"]["where"]
    needed = {"pyproject.toml", pyproject["project"].get("readme", "README.md"), *roots}
    assert needed <= admitted, f".dockerignore must admit {sorted(needed - admitted)}"
    assert not admitted & {".venv", ".git", "tests", "e2e", "bench"}
    assert "**/__pycache__" in patterns and "**/*.egg-info" in patterns


def test_install_docs_list_every_value() -> None:
    docs = (ROOT / "docs" / "install.md").read_text()
    lines = (CHART / "values.yaml").read_text().splitlines()
    paths = [m.group(1) for line in lines if (m := re.match(r"^\s*# ([A-Za-z][\w.]*) -- ", line))]
    leaves = [p for p in paths if not any(other.startswith(p + ".") for other in paths)]
    missing = [p for p in leaves if f"| `{p}` |" not in docs]
    assert not missing, f"docs/install.md's values table lacks {missing}"
