{{/* Chart name, overridable with nameOverride. */}}
{{- define "releaseplan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or <release> when it contains the chart name. */}}
{{- define "releaseplan.fullname" -}}
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

{{- define "releaseplan.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "releaseplan.labels" -}}
helm.sh/chart: {{ include "releaseplan.chart" . }}
{{ include "releaseplan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels that select the operator pods. */}}
{{- define "releaseplan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "releaseplan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Name of the ServiceAccount. */}}
{{- define "releaseplan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "releaseplan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The rules the operator needs on the namespaces it watches. */}}
{{- define "releaseplan.rules" -}}
- apiGroups: ["releaseplan.io"]
  resources: ["releaseplans"]
  # patch: the finalizer is added and removed with a merge patch.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["releaseplan.io"]
  resources: ["releaseplans/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["releaseplan.io"]
  resources: ["releaseplans/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# The stored template of each revision: cached (list, watch), written with
# server-side apply (patch, and create for a new one), pruned (delete).
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
