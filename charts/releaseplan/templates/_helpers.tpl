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

{{/*
The operator image: <repository>@<digest> when image.digest is set, else
<repository>:<tag or appVersion>. There is no published image, so the
repository must be set (the image is built with `make dist` or the Dockerfile).
*/}}
{{- define "releaseplan.image" -}}
{{- $repo := required "image.repository is required: there is no published releaseplan image. Build it with `make dist` (or the repository's Dockerfile), push it to your registry and set image.repository (e.g. --set image.repository=registry.example.com/releaseplan), with image.tag or image.digest" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end }}

{{/*
Combinations of values that would install something broken: fails the
install (and `helm template`) with what to change.
*/}}
{{- define "releaseplan.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicaCount=%d needs leaderElection.enabled=true: without leader election every replica reconciles and writes the same plans and Deployments. Set leaderElection.enabled=true, or replicaCount=1" (int .Values.replicaCount)) -}}
{{- end -}}
{{- $shards := int (.Values.leaderElection.shards | default 1) -}}
{{- if and (gt $shards 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "leaderElection.shards=%d needs leaderElection.enabled=true: each shard is served by the holder of its Lease" $shards) -}}
{{- end -}}
{{- if lt (int .Values.replicaCount) $shards -}}
{{- fail (printf "replicaCount=%d is below leaderElection.shards=%d: a replica serves one shard, so the plans of %d shards would have no replica. Set replicaCount to at least %d (one more keeps a standby)" (int .Values.replicaCount) $shards (sub $shards (int .Values.replicaCount)) $shards) -}}
{{- end -}}
{{- end }}

{{/*
Whether the PodDisruptionBudget is rendered: only with more than one
replica, since with one replica minAvailable 1 would block every node drain.
*/}}
{{- define "releaseplan.pdb" -}}
{{- if and .Values.podDisruptionBudget.enabled (gt (int .Values.replicaCount) 1) -}}
true
{{- end -}}
{{- end }}

{{/* The rules the operator needs on the namespaces it watches. */}}
{{- define "releaseplan.rules" -}}
# Only what the operator calls (see README.md, RBAC).
# get: a plan is read again after a conflicting status write; patch: the
# finalizer is added and removed with a merge patch.
- apiGroups: ["releaseplan.io"]
  resources: ["releaseplans"]
  verbs: ["get", "list", "watch", "patch"]
# Gate templates a plan uses are cached (list, watch) and only read.
- apiGroups: ["releaseplan.io"]
  resources: ["gatetemplates"]
  verbs: ["get", "list", "watch"]
# The status is written whole (PUT) under the plan's resourceVersion.
- apiGroups: ["releaseplan.io"]
  resources: ["releaseplans/status"]
  verbs: ["update"]
# Cached (list, watch), written with server-side apply (patch, and create
# for a new one; a merge patch scales them while the plan is deleted),
# deleted when pruned; get: a Deployment a component adopts (spec.components[].adopt),
# read by name until the apply of its label brings it into the cache.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The StatefulSet of each StatefulSet component: cached (list, watch),
# created (create), then written with server-side apply (patch); read one by
# one (get) only when a create finds the name taken, to tell ours from
# someone else's; deleted (delete) when its component leaves the plan.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The DaemonSet of each revision of each DaemonSet component: as for
# StatefulSets; deleted (delete) once its revision runs on no node.
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The stored template of each revision: cached (list, watch), written with
# server-side apply (patch, and create for a new one), pruned (delete).
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# The Jobs of Job gates: cached (list, watch; never read one by one),
# created with a fixed name (create), deleted once an earlier step's or
# rollout's (delete). Never changed in place.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch", "create", "delete"]
# Cached (list, watch) for the pod health checks and to count a StatefulSet
# component's pods by revision; delete: only a StatefulSet component's pod
# that is not Ready on a revision its set is leaving (a StatefulSet never
# moves past such a pod by itself; its claims stay).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
# The stable and canary Services of components with traffic settings, and
# their routes (one rule per router: HTTPRoutes, Traefik IngressRoutes):
# cached (list, watch), created (create), then written with server-side
# apply (patch); read one by one (get) only when a create finds the name
# taken, to tell ours from someone else's. The plan's deletion takes them
# (owner references): never deleted by the operator.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["traefik.io"]
  resources: ["ingressroutes"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The stable and canary InferencePools of components whose route goes
# through the Gateway API Inference Extension
# (traffic.gatewayAPI.inferencePool): written with their Services (create,
# then server-side apply: patch), read one by one (get) only when a create
# finds the name taken. Not cached. The plan's deletion takes them.
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "create", "patch"]
# The ComponentScale of each autoscaled component: cached (list, watch),
# created once (create; its replicas then belong to the autoscaler), its
# status written with a merge patch (componentscales/status patch), read one
# by one (get) only when a create finds the name taken, deleted when the
# component stops being autoscaled.
- apiGroups: ["releaseplan.io"]
  resources: ["componentscales"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: ["releaseplan.io"]
  resources: ["componentscales/status"]
  verbs: ["patch"]
# The HPA the operator owns for a component with autoscaling.maxReplicas:
# cached (list, watch), created, written with server-side apply (patch),
# read one by one (get) only when a create finds the name taken, deleted
# when the spec no longer asks for it.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Each namespace's notification settings (docs/notifications.md): the
# ConfigMap releaseplan-notifications only (resourceNames), read by name
# when a transition notifies.
- apiGroups: [""]
  resources: ["configmaps"]
  resourceNames: ["releaseplan-notifications"]
  verbs: ["get"]
# Events are created, never patched: a repeat is a new Event, not a series
# (src/controller/events.rs).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{- define "releaseplan.clusterTemplateRules" -}}
# ClusterGateTemplates plans use are cached (list, watch) and only read.
- apiGroups: ["releaseplan.io"]
  resources: ["clustergatetemplates"]
  verbs: ["get", "list", "watch"]
# GatePolicies (cluster-scoped) and the namespaces' labels their
# namespaceSelectors match are cached (list, watch; metadata only for
# namespaces) and only read.
- apiGroups: ["releaseplan.io"]
  resources: ["gatepolicies"]
  verbs: ["get", "list", "watch"]
# ReleaseFreezes (cluster-scoped) hold the rollouts they select: cached
# (list, watch) and only read.
- apiGroups: ["releaseplan.io"]
  resources: ["releasefreezes"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
