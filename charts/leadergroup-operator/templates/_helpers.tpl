{{/* vim: set filetype=mustache: */}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "leadergroup-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified name of the release's objects. Truncated to 63 characters (DNS label); a release
name that already contains the chart name is used as is.
*/}}
{{- define "leadergroup-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Value of the helm.sh/chart label. */}}
{{- define "leadergroup-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the operator's pods: never change them, Deployment selectors are immutable. */}}
{{- define "leadergroup-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leadergroup-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels on every object of the chart. */}}
{{- define "leadergroup-operator.labels" -}}
{{ include "leadergroup-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "leadergroup-operator.chart" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Name of the ServiceAccount the operator runs as. */}}
{{- define "leadergroup-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "leadergroup-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Where metrics.certSecret is mounted: the operator's --metrics-cert-dir. */}}
{{- define "leadergroup-operator.metricsCertDir" -}}
/etc/leadergroup-operator/metrics-tls
{{- end -}}

{{/*
Name of the operator's own HA Lease, in the release namespace. One per release. Never of the form
leadergroup-<name>: that is the Lease of a LeaderGroup (the operator refuses such a name).
*/}}
{{- define "leadergroup-operator.leaseName" -}}
{{- printf "operator-%s" (include "leadergroup-operator.fullname" .) -}}
{{- end -}}

{{/*
The one namespace the operator watches, or "" for all: watchNamespace, else the deprecated list
watchNamespaces (at most one entry). Refuses two entries, and the two values disagreeing.
*/}}
{{- define "leadergroup-operator.watchNamespace" -}}
{{- $listed := .Values.watchNamespaces | default list -}}
{{- if gt (len $listed) 1 -}}
{{- fail (printf "watchNamespaces lists %d namespaces (%s), but one operator process watches one namespace (--namespace) or all of them. Set watchNamespace to one namespace or leave it empty (all namespaces, ClusterRole), or install one release per namespace, each with watchNamespace=<that namespace> and, for all but the first, crds.enabled=false (a CRD belongs to one release)." (len $listed) (join ", " $listed)) -}}
{{- end -}}
{{- $fromList := first $listed | default "" -}}
{{- if and .Values.watchNamespace $fromList (ne .Values.watchNamespace $fromList) -}}
{{- fail (printf "watchNamespace is %q but the deprecated watchNamespaces says %q: set watchNamespace only" .Values.watchNamespace $fromList) -}}
{{- end -}}
{{- default $fromList .Values.watchNamespace -}}
{{- end -}}

{{/*
Image reference: global.imageRegistry/ when set, the repository, then @digest if set, else :tag
(default: appVersion).
*/}}
{{- define "leadergroup-operator.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.global.imageRegistry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Image pull policy: image.pullPolicy when set; else Never for the default repository, the image
`images/build.sh operator` builds and the install loads onto the nodes (nothing is published: a
pull could only fail, and from Docker Hub), IfNotPresent for an image in a registry.
*/}}
{{- define "leadergroup-operator.imagePullPolicy" -}}
{{- if .Values.image.pullPolicy -}}
{{- .Values.image.pullPolicy -}}
{{- else if and (eq .Values.image.repository "leadergroup-operator") (not .Values.global.imageRegistry) -}}
Never
{{- else -}}
IfNotPresent
{{- end -}}
{{- end -}}

{{/*
The rules the operator needs on the namespaces it watches, and nothing else. Shared by the
ClusterRole (all namespaces) and the Role (watchNamespace), so the two modes can
never grant different things.
*/}}
{{- define "leadergroup-operator.rules" -}}
- apiGroups: ["leadergroup.io"]
  resources: ["leadergroups"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["leadergroup.io"]
  resources: ["leadergroups/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["leadergroup.io"]
  resources: ["leadergroups/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
{{- end -}}

{{/*
The operator's marks on pods (src/crd.rs: ROLE_LABEL, EPOCH_ANNOTATION, GROUP_ANNOTATION), as a
YAML list for fromYamlArray: the metadata field each lives in, its noun in messages, its key. Read
by the admission guard and by the check that the operator's own pods carry none of them.
*/}}
{{- define "leadergroup-operator.marks" -}}
- {field: labels, noun: label, key: leadergroup.io/role}
- {field: annotations, noun: annotation, key: leadergroup.io/epoch}
- {field: annotations, noun: annotation, key: leadergroup.io/group}
{{- end -}}

{{/* The user name the API server gives the operator's ServiceAccount tokens. */}}
{{- define "leadergroup-operator.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "leadergroup-operator.serviceAccountName" .) -}}
{{- end -}}

{{/*
Name of the admission guard's policy and binding. They are cluster-scoped while the release is
not: the release namespace is part of the name, so releases of the same name in two namespaces
(one per watched namespace) do not collide. The dot cannot occur in either part, so two releases
never map to one name.
*/}}
{{- define "leadergroup-operator.guardName" -}}
{{- printf "%s-marks.%s" (include "leadergroup-operator.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Name of the guard of the groups' Leases (lease-guard.yaml): as the marks' guard, per release. */}}
{{- define "leadergroup-operator.leaseGuardName" -}}
{{- printf "%s-leases.%s" (include "leadergroup-operator.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
Names of the secure /metrics' ClusterRoles (and their bindings): the operator's reviews
(metrics-auth) and the scrapers' right (metrics-reader). Cluster-scoped in every RBAC mode: per
release namespace, as the guard's.
*/}}
{{- define "leadergroup-operator.metricsAuthName" -}}
{{- printf "%s-metrics-auth.%s" (include "leadergroup-operator.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- define "leadergroup-operator.metricsReaderName" -}}
{{- printf "%s-metrics-reader.%s" (include "leadergroup-operator.fullname" .) .Release.Namespace -}}
{{- end -}}
{{/* The ServiceMonitor's scraper: its ServiceAccount and token Secret (the fullname cut to 47). */}}
{{- define "leadergroup-operator.metricsScraperName" -}}
{{- printf "%s-metrics-scraper" (include "leadergroup-operator.fullname" . | trunc 47 | trimSuffix "-") -}}
{{- end -}}

{{/* The name of every group's Lease starts with this (LEASE_PREFIX in client/src/wire.rs). */}}
{{- define "leadergroup-operator.groupLeasePrefix" -}}
leadergroup-
{{- end -}}

{{/*
The namespaces the guard covers: admissionGuard.namespaceSelector when set; else the watched
namespace alone when there is one (another release's operator marks the pods of other
namespaces, and this release's guard would refuse it); else every namespace.
*/}}
{{- define "leadergroup-operator.guardNamespaceSelector" -}}
{{- $watched := include "leadergroup-operator.watchNamespace" . -}}
{{- if .Values.admissionGuard.namespaceSelector -}}
{{- toYaml .Values.admissionGuard.namespaceSelector -}}
{{- else if $watched -}}
matchLabels:
  kubernetes.io/metadata.name: {{ $watched }}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/*
Refuses combinations the operator cannot run safely, with a message that says what to do.
Included from the Deployment so every render checks it.
*/}}
{{- define "leadergroup-operator.validate" -}}
{{- $_ := include "leadergroup-operator.watchNamespace" . -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas is %d but leaderElection.enabled is false: several active operators would fight over the same groups. Set leaderElection.enabled=true (the default) or replicas=1." (int .Values.replicas)) -}}
{{- end -}}
{{- /* The operator's pods carrying a mark would be refused by the guard (and taken for a group's). */ -}}
{{- range fromYamlArray (include "leadergroup-operator.marks" .) -}}
{{- $values := ternary $.Values.podLabels $.Values.podAnnotations (eq .field "labels") -}}
{{- if hasKey $values .key -}}
{{- fail (printf "pod%s sets %s %s: that is the operator's mark on the pods it elects, never on its own pods. Remove it." (ternary "Labels" "Annotations" (eq .field "labels")) .noun .key) -}}
{{- end -}}
{{- if and (eq .field "labels") (hasKey ($.Values.commonLabels | default dict) .key) -}}
{{- fail (printf "commonLabels sets %s %s: that is the operator's mark on the pods it elects, never on its own pods. Remove it." .noun .key) -}}
{{- end -}}
{{- end -}}
{{- /* commonLabels beside the chart's own labels: the same key twice would be invalid YAML. */ -}}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "helm.sh/chart" -}}
{{- if hasKey ($.Values.commonLabels | default dict) $key -}}
{{- fail (printf "commonLabels sets %s, which the chart sets itself (app.kubernetes.io/name and /instance select the operator's pods). Remove it." $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
