{{/*
Names, labels and the RBAC rules shared by several templates.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "jbod.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". Truncated to 63 characters (DNS label).
*/}}
{{- define "jbod.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "jbod-0.1.0" for the helm.sh/chart label. */}}
{{- define "jbod.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the chart's objects of this release (stable across upgrades). */}}
{{- define "jbod.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jbod.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The standard labels of every object the chart renders. */}}
{{- define "jbod.labels" -}}
helm.sh/chart: {{ include "jbod.chart" . }}
{{ include "jbod.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: jbod
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "jbod.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jbod.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The chart's image: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "jbod.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The analytics image: like jbod.image; its tag defaults to "<appVersion>-pipeline" (Dockerfile target `pipeline`). */}}
{{- define "jbod.analyticsImage" -}}
{{- $image := .Values.analytics.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default (printf "%s-pipeline" .Chart.AppVersion) $image.tag) }}
{{- end }}
{{- end }}

{{/* The Prometheus job name of the operator's metrics Service (the ServiceMonitor uses the Service name). */}}
{{- define "jbod.metricsServiceName" -}}
{{- printf "%s-metrics" (include "jbod.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The operator's permissions in every namespace it watches: a Role per namespace when
watchNamespaces is set, else one ClusterRole. Exactly the verbs of jbod_operator/kube.py,
jbod_operator's handler modules and kopf itself; no wildcards.
Server-side apply (kube.apply) is a PATCH that creates a missing object, so the API server asks
for both `patch` and `create` on every kind the operator applies.
*/}}
{{- define "jbod.rbac.namespacedRules" -}}
# JbodCluster: kopf lists and watches them (handlers, timer, daemon); reconcile_broker reads its
# cluster with kube.get; kopf merge-patches its progress/diff-base annotations and its finalizer
# (daemons and timers need one).
- apiGroups: ["jbod.dev"]
  resources: ["jbodclusters"]
  verbs: ["get", "list", "watch", "patch"]
# JbodCluster status: kopf merge-patches the status subresource (patch.status in reconcile_cluster).
- apiGroups: ["jbod.dev"]
  resources: ["jbodclusters/status"]
  verbs: ["patch"]
# JbodBroker: kopf lists and watches them (brokers_index, handlers, timer); reconcile_cluster
# server-side applies one per broker (create + patch) and deletes removed ones;
# reconcile_broker merge-patches the jbod.dev/replace-disks annotation; kopf patches its
# annotations and finalizer.
- apiGroups: ["jbod.dev"]
  resources: ["jbodbrokers"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# JbodBroker status: kopf merge-patches the status subresource (patch.status in reconcile_broker).
- apiGroups: ["jbod.dev"]
  resources: ["jbodbrokers/status"]
  verbs: ["patch"]
# Owner references with blockOwnerDeletion (builders.owner_reference, on everything a JbodCluster
# or JbodBroker owns): where the OwnerReferencesPermissionEnforcement admission plugin is on
# (e.g. OpenShift) setting one needs `update` on the owner's finalizers subresource.
- apiGroups: ["jbod.dev"]
  resources: ["jbodclusters/finalizers", "jbodbrokers/finalizers", "jbodusers/finalizers"]
  verbs: ["update"]
# Secrets <cluster>-tokens (the cluster id and admin token, cluster_access.tokens) and
# <cluster>-kafka-client (the Kafka client user's password, cluster_handlers._register_kafka_user): read,
# and created once with fresh values (kube.create). With spec.tls: the cluster CA, its trust
# bundle and the pods' certificates are server-side applied when issued or renewed
# (cluster_tls.ensure_tls), and the client Secret's CA and properties merge-patched
# (cluster_handlers._update_client_secret). A JbodUser's Secret is applied by reconcile_user and deleted
# by remove_user; never listed or watched.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch", "delete"]
# JbodUsers: watched and handled by kopf (reconcile_user, and remove_user behind kopf's
# finalizer, which also deletes the user's Secret above); status through the subresource.
- apiGroups: ["jbod.dev"]
  resources: ["jbodusers"]
  verbs: ["list", "watch", "patch"]
# JbodUser status (ready, secret): kopf merge-patches the status subresource.
- apiGroups: ["jbod.dev"]
  resources: ["jbodusers/status"]
  verbs: ["patch"]
# JbodTopics: watched, indexed and handled by kopf (topic_handlers: reconcile_topic, its drift
# timer, and delete_topic behind kopf's finalizer); status through the subresource. The topics
# themselves are changed through the controller's HTTP API, not the Kubernetes API.
- apiGroups: ["jbod.dev"]
  resources: ["jbodtopics"]
  verbs: ["list", "watch", "patch"]
# JbodTopic status (topicName, topicId, configKeys, conditions): kopf merge-patches the subresource.
- apiGroups: ["jbod.dev"]
  resources: ["jbodtopics/status"]
  verbs: ["patch"]
# Services (controller, brokers, ready brokers, Kafka bootstrap) and ConfigMaps (server.properties): server-side apply.
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["create", "patch"]
# The controller StatefulSet: server-side apply.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["create", "patch"]
# The PodDisruptionBudgets of the brokers, the controllers and etcd: server-side apply.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch"]
# Broker pods: pods_index lists and watches them; bare pods are created by _converge_pod and
# deleted to restart them (a new volume or a changed spec).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "delete"]
# The jbod.dev/unfenced readiness gate: kube.set_pod_condition patches pods/status.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Volume claims: claims_index lists and watches them, kube.list_objects lists a removed broker's
# claims; claims are created per disk generation, merge-patched (growth, directory id, retired
# annotations) and deleted once retired and empty or when a broker is removed.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Events: kopf.info/kopf.warn and kopf's own handler events are POSTed as core/v1 Events.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# spec.listeners (listener_objects.py): the listeners' Services are read back (node ports,
# load balancer addresses), and those of removed listeners or brokers listed and deleted.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "delete"]
# Ingresses of ingress listeners: server-side applied; removed ones listed and deleted.
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["create", "patch", "list", "delete"]
# The brokers' ServiceAccount <cluster>-broker (node-info init container): server-side apply.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Cluster-scoped reads, always through a ClusterRole: objects that live in no namespace.
*/}}
{{- define "jbod.rbac.clusterRules" -}}
# PersistentVolumes: volumes_index lists and watches them to tell a lost or released volume
# (disk state Detached).
- apiGroups: [""]
  resources: ["persistentvolumes"]
  verbs: ["list", "watch"]
# VolumeAttachments: attachments_index lists and watches them to notice a detached volume.
- apiGroups: ["storage.k8s.io"]
  resources: ["volumeattachments"]
  verbs: ["list", "watch"]
# StorageClasses: whether a full disk's claim may grow (allowVolumeExpansion; disk_growth).
- apiGroups: ["storage.k8s.io"]
  resources: ["storageclasses"]
  verbs: ["get"]
# CRDs: kopf's resource observer watches CustomResourceDefinitions to notice JbodCluster and
# JbodBroker being added, changed or removed (else it only scans at start-up).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
# Nodes: the address of the node a broker runs on, for a nodeport listener's status and
# certificate (listener_objects.reconcile); also what lets the operator bind the node reader below.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
# The binding of a cluster's brokers' ServiceAccount to the ClusterRole jbod-broker-node-reader
# (get nodes), for the node-info init container: server-side apply; listed and deleted once its
# JbodCluster is gone or reads no node (the binding is cluster-scoped, so nothing owns it).
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterrolebindings"]
  verbs: ["create", "patch", "list", "delete"]
{{- if .Values.watchNamespaces }}
# Namespaces: with --namespace, kopf's namespace observer lists and watches namespaces to
# start and stop watching the named ones as they come and go (not used with --all-namespaces).
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/*
Prefix of cluster-scoped objects (ClusterRoles, ClusterRoleBindings): also names the release
namespace, so two releases of the same name in different namespaces do not collide.
*/}}
{{- define "jbod.clusterScopedName" -}}
{{- printf "%s-%s" (include "jbod.fullname" .) .Release.Namespace | trunc 54 | trimSuffix "-" }}
{{- end }}
