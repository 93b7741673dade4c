{{/* The release's full name, within the 63 characters of a label value. */}}
{{- define "kafka-mirror-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafka-mirror-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafka-mirror-operator.labels" -}}
{{ include "kafka-mirror-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kafka-mirror-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kafka-mirror-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kafka-mirror-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The audit pods' image: the operator image's repository with `-audit`, same tag. */}}
{{- define "kafka-mirror-operator.auditImage" -}}
{{- default (printf "%s-audit:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag)) .Values.auditImage -}}
{{- end -}}

{{/* "true" where the installer allows the audit a k8s:// Spark master (its driver makes pods). */}}
{{- define "kafka-mirror-operator.sparkOnKubernetes" -}}
{{- range .Values.allowed.sparkMasters }}{{ if hasPrefix "k8s://" . }}true{{ end }}{{ end -}}
{{- end -}}

{{/* The namespaces a namespaced operator watches: the release's unless listed. */}}
{{- define "kafka-mirror-operator.namespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- toJson .Values.watch.namespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
What the operator does, and nothing more (each verb is a call it makes):
- its two resources: kopf lists, watches and merge-patches them (annotations, and removing older
  versions' finalizer); the status loop lists them each interval; a
  selection's handler reads its mirror (get);
- their status: patched; get on kafkamirrors/status only because the audit's Role grants it,
  and a Role may only grant what its creator holds;
- kafkamirrors/finalizers: update, because kopf.adopt sets blockOwnerDeletion on the children,
  which the OwnerReferencesPermissionEnforcement admission plugin allows only to who may update
  the owner's finalizers;
- Secrets a mirror names: get by name (no list, no watch);
- each mirror's children (ConfigMap, Deployment, PodDisruptionBudget, Service, CronJob, and
  the audit's ServiceAccount, Role, RoleBinding and NetworkPolicy): get (is the name free, or the mirror's own?),
  server-side apply (patch, and create when the object is new), delete;
- events: create (core v1, as kopf and the status loop post them);
- pods, only where the installer allows a k8s:// Spark master: never used by the operator
  itself, but the audit's Role then grants its driver pods (its executors), and a Role may only
  grant what its creator holds.
*/}}
{{- define "kafka-mirror-operator.rules" -}}
- apiGroups: ["kafkamirror.io"]
  resources: ["kafkamirrors"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kafkamirror.io"]
  resources: ["mirrortopicselections"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["kafkamirror.io"]
  resources: ["kafkamirrors/status"]
  verbs: ["get", "patch"]
- apiGroups: ["kafkamirror.io"]
  resources: ["mirrortopicselections/status"]
  verbs: ["patch"]
- apiGroups: ["kafkamirror.io"]
  resources: ["kafkamirrors/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
{{- if include "kafka-mirror-operator.sparkOnKubernetes" . }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "get", "list", "watch", "delete", "deletecollection"]
{{- end }}
{{- end -}}
