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

{{/* The namespaces a namespaced operator watches: the release's unless listed. */}}
{{- define "kafka-mirror-operator.namespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- toJson .Values.watch.namespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
What the operator does, and nothing more: watch and patch its two resources and their status;
read the Secrets a mirror names (by name: no list); apply and delete each mirror's children
(ConfigMap, Deployment, Service, CronJob, and the audit's ServiceAccount, Role and RoleBinding,
whose rules it must hold itself); post events; read the worker Deployments' status.
*/}}
{{- define "kafka-mirror-operator.rules" -}}
- apiGroups: ["kafkamirror.io"]
  resources: ["kafkamirrors", "mirrortopicselections"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["kafkamirror.io"]
  resources: ["kafkamirrors/status", "mirrortopicselections/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["configmaps", "services", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end -}}
