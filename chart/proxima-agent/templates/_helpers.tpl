{{/*
Names. Every name is cut to fit Kubernetes limits: 63 characters for labels and most names;
the StatefulSet name to 52, because its pods carry a `controller-revision-hash` label of
`<statefulset>-<10-character hash>` that must stay within 63.
*/}}

{{- define "proxima-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "proxima-agent.fullname" -}}
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

{{/* "<fullname>-node-agent", the prefix cut so the suffix always survives (63). */}}
{{- define "proxima-agent.nodeAgent.fullname" -}}
{{- printf "%s-node-agent" (include "proxima-agent.fullname" . | trunc 52 | trimSuffix "-") -}}
{{- end -}}

{{/* "<fullname>-cluster-agent", at most 52 characters (see above). */}}
{{- define "proxima-agent.clusterAgent.fullname" -}}
{{- printf "%s-cluster-agent" (include "proxima-agent.fullname" . | trunc 38 | trimSuffix "-") -}}
{{- end -}}

{{/* The leader-election Role and RoleBinding: "<fullname>-cluster-agent-leader-election" (63). */}}
{{- define "proxima-agent.clusterAgent.leaderElectionName" -}}
{{- printf "%s-cluster-agent-leader-election" (include "proxima-agent.fullname" . | trunc 33 | trimSuffix "-") -}}
{{- end -}}

{{/* The events Role and RoleBinding: "<fullname>-events" (63). */}}
{{- define "proxima-agent.eventsName" -}}
{{- printf "%s-events" (include "proxima-agent.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{- define "proxima-agent.installToken.chartSecretName" -}}
{{- printf "%s-install-token" (include "proxima-agent.fullname" . | trunc 49 | trimSuffix "-") -}}
{{- end -}}

{{- define "proxima-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace every namespaced resource goes into. */}}
{{- define "proxima-agent.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/*
Labels. The chart's own labels win over commonLabels, so commonLabels can never break a
selector. The chart version is never part of a selector.
*/}}
{{- define "proxima-agent.selectorLabels" -}}
{{- toYaml (dict "app.kubernetes.io/name" (include "proxima-agent.name" .) "app.kubernetes.io/instance" .Release.Name) -}}
{{- end -}}

{{- define "proxima-agent.labels" -}}
{{- $own := include "proxima-agent.selectorLabels" . | fromYaml -}}
{{- $_ := set $own "helm.sh/chart" (include "proxima-agent.chart" .) -}}
{{- $_ := set $own "app.kubernetes.io/version" (.Chart.AppVersion | toString | trunc 63) -}}
{{- $_ := set $own "app.kubernetes.io/managed-by" .Release.Service -}}
{{- $_ := set $own "app.kubernetes.io/part-of" "proxima" -}}
{{- toYaml (merge $own (deepCopy .Values.commonLabels)) -}}
{{- end -}}

{{/* Labels of a component's resources: pass (dict "root" $ "component" "node-agent"). */}}
{{- define "proxima-agent.componentLabels" -}}
{{- $labels := include "proxima-agent.labels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- toYaml $labels -}}
{{- end -}}

{{- define "proxima-agent.componentSelectorLabels" -}}
{{- $labels := include "proxima-agent.selectorLabels" .root | fromYaml -}}
{{- toYaml (set $labels "app.kubernetes.io/component" .component) -}}
{{- end -}}

{{/* Pod template labels: component labels plus podLabels (never over the chart's own). */}}
{{- define "proxima-agent.podLabels" -}}
{{- $labels := include "proxima-agent.componentLabels" . | fromYaml -}}
{{- toYaml (merge $labels (deepCopy (.podLabels | default dict))) -}}
{{- end -}}

{{/*
The metadata of every resource: name, namespace (unless cluster-scoped), labels (with the
component's when given) and commonAnnotations merged over the resource's own annotations.
Pass (dict "root" $ "name" "..." "component" "node-agent" "clusterScoped" false "annotations" (dict)).
*/}}
{{- define "proxima-agent.metadata" -}}
name: {{ .name }}
{{- if not .clusterScoped }}
namespace: {{ include "proxima-agent.namespace" .root }}
{{- end }}
labels:
{{- if .component }}
  {{- include "proxima-agent.componentLabels" . | nindent 2 }}
{{- else }}
  {{- include "proxima-agent.labels" .root | nindent 2 }}
{{- end }}
{{- with merge (deepCopy (.annotations | default dict)) (deepCopy (.root.Values.commonAnnotations | default dict)) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template annotations: commonAnnotations plus the component's podAnnotations. */}}
{{- define "proxima-agent.podAnnotations" -}}
{{- $annotations := dict "kubectl.kubernetes.io/default-container" .container -}}
{{- $annotations = merge $annotations (deepCopy (.podAnnotations | default dict)) (deepCopy (.root.Values.commonAnnotations | default dict)) -}}
{{- toYaml $annotations -}}
{{- end -}}

{{/* image reference: pass (dict "root" $ "image" .Values.x.image). A digest wins over a tag. */}}
{{- define "proxima-agent.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{- define "proxima-agent.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
{{- if kindIs "string" . }}
  - name: {{ . | quote }}
{{- else }}
  - name: {{ .name | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "proxima-agent.nodeAgent.serviceAccountName" -}}
{{- if .Values.nodeAgent.serviceAccount.create -}}
{{- default (include "proxima-agent.nodeAgent.fullname" .) .Values.nodeAgent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.nodeAgent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "proxima-agent.clusterAgent.serviceAccountName" -}}
{{- if .Values.clusterAgent.serviceAccount.create -}}
{{- default (include "proxima-agent.clusterAgent.fullname" .) .Values.clusterAgent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.clusterAgent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "proxima-agent.clusterAgent.leaseName" -}}
{{- default (include "proxima-agent.clusterAgent.fullname" .) .Values.clusterAgent.leaseName -}}
{{- end -}}

{{/* The Secret and key the install token is read from. */}}
{{- define "proxima-agent.installToken.secretName" -}}
{{- default (include "proxima-agent.installToken.chartSecretName" .) .Values.installToken.existingSecret.name -}}
{{- end -}}

{{- define "proxima-agent.installToken.secretKey" -}}
{{- if .Values.installToken.existingSecret.name -}}
{{- .Values.installToken.existingSecret.key -}}
{{- else -}}
token
{{- end -}}
{{- end -}}

{{/*
Cluster slug. The rule (docs/chart.md, "The cluster slug"), which the agent and the Console
implement identically:
  1. replace every run of characters outside [A-Za-z0-9-] with one "-"
  2. lowercase (ASCII only remains)
  3. collapse runs of "-" into one
  4. trim "-" from both ends
  5. cut to 63 characters, then trim a trailing "-"
*/}}
{{- define "proxima-agent.slugify" -}}
{{- $s := regexReplaceAll "[^A-Za-z0-9-]+" (toString .) "-" | lower -}}
{{- $s = regexReplaceAll "-+" $s "-" | trimAll "-" -}}
{{- $s | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The slug in use: clusterAgent.clusterSlug when set, else derived from clusterName. */}}
{{- define "proxima-agent.clusterSlug" -}}
{{- if .Values.clusterAgent.clusterSlug -}}
{{- .Values.clusterAgent.clusterSlug -}}
{{- else -}}
{{- include "proxima-agent.slugify" .Values.clusterAgent.clusterName -}}
{{- end -}}
{{- end -}}

{{/* Environment shared by both agents. */}}
{{- define "proxima-agent.commonEnv" -}}
# The pod itself, for the Kubernetes Events the agent records on it (EnrollmentRefused).
- name: PROXIMA_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PROXIMA_POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: PROXIMA_BACKEND_URL
  value: {{ .root.Values.backendUrl | quote }}
- name: PROXIMA_INSTALL_TOKEN_FILE
  value: /etc/proxima/install-token/token
- name: PROXIMA_DATA_DIR
  value: /var/lib/proxima-agent
- name: PROXIMA_LOG_LEVEL
  value: {{ .agent.logLevel | quote }}
- name: PROXIMA_LOG_FORMAT
  value: {{ .agent.logFormat | quote }}
- name: PROXIMA_HEARTBEAT_INTERVAL
  value: {{ .agent.heartbeatInterval | quote }}
- name: PROXIMA_HEALTH_HOST
  value: "0.0.0.0"
- name: PROXIMA_HEALTH_PORT
  value: {{ .agent.healthPort | quote }}
{{- with .root.Values.clusterAgent.clusterName }}
- name: PROXIMA_CLUSTER_NAME
  value: {{ . | quote }}
{{- end }}
{{- with include "proxima-agent.clusterSlug" .root }}
- name: PROXIMA_CLUSTER_SLUG
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Probes on the agent's health server: pass (dict "agent" .Values.x). /readyz is "running
and working", never "enrolled": a refused enrollment or a Console outage must not hold a
rollout or mark the fleet unready (docs/kubernetes-agents.md). */}}
{{- define "proxima-agent.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: health
  {{- toYaml .agent.readinessProbe | nindent 2 }}
livenessProbe:
  httpGet:
    path: /livez
    port: health
  {{- toYaml .agent.livenessProbe | nindent 2 }}
{{- end -}}

{{/* The install token, mounted as a file (never as an env var, never logged). */}}
{{- define "proxima-agent.installToken.volume" -}}
- name: install-token
  secret:
    secretName: {{ include "proxima-agent.installToken.secretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "proxima-agent.installToken.secretKey" . }}
        path: token
{{- end -}}

{{/*
Validation. Every problem is collected and reported in one `fail`, so `helm template` (and an
Argo CD sync) shows all of them at once; `required` would stop at the first.
*/}}
{{- define "proxima-agent.validate" -}}
{{- $v := .Values -}}
{{- $errors := list -}}
{{- if not (or $v.nodeAgent.enabled $v.clusterAgent.enabled) -}}
{{- $errors = append $errors "nodeAgent.enabled and clusterAgent.enabled are both false: nothing to deploy" -}}
{{- end -}}
{{- if not $v.backendUrl -}}
{{- $errors = append $errors "backendUrl is required: the Proxima Console backend URL, e.g. --set backendUrl=https://api-console.prxm.uz" -}}
{{- else if not (regexMatch "^https?://[^/?#\\s]+" $v.backendUrl) -}}
{{- $errors = append $errors (printf "backendUrl must be an https:// or http:// URL, got %q" $v.backendUrl) -}}
{{- end -}}
{{- $secretName := $v.installToken.existingSecret.name -}}
{{- if and $v.installToken.value $secretName -}}
{{- $errors = append $errors "installToken.value and installToken.existingSecret.name are both set: use one of them" -}}
{{- else if not (or $v.installToken.value $secretName) -}}
{{- $errors = append $errors "an install token is required: set installToken.value, or installToken.existingSecret.name and installToken.existingSecret.key to read it from an existing Secret" -}}
{{- end -}}
{{- if and $secretName (not $v.installToken.existingSecret.key) -}}
{{- $errors = append $errors (printf "installToken.existingSecret.key is required with installToken.existingSecret.name: the key in Secret %q that holds the token" $secretName) -}}
{{- end -}}
{{- if $v.nodeAgent.enabled -}}
{{- $dir := $v.nodeAgent.hostDataDir -}}
{{- if or (not (hasPrefix "/" $dir)) (eq $dir "/") (ne (clean $dir) $dir) -}}
{{- $errors = append $errors (printf "nodeAgent.hostDataDir must be a clean absolute path other than \"/\" (like /var/lib/proxima-node-agent), got %q" $dir) -}}
{{- end -}}
{{- end -}}
{{- if $v.clusterAgent.enabled -}}
{{- if not $v.clusterAgent.clusterName -}}
{{- $errors = append $errors "clusterAgent.clusterName is required when clusterAgent.enabled is true: the cluster's display name in the Console" -}}
{{- end -}}
{{- if and (gt (int $v.clusterAgent.replicas) 1) (not $v.clusterAgent.persistence.enabled) -}}
{{- $errors = append $errors (printf "clusterAgent.replicas is %d but clusterAgent.persistence.enabled is false: high availability needs one PVC per replica for a stable identity" (int $v.clusterAgent.replicas)) -}}
{{- end -}}
{{- end -}}
{{- $slug := $v.clusterAgent.clusterSlug | toString -}}
{{- if $slug -}}
{{- if not (and (le (len $slug) 63) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $slug)) -}}
{{- $errors = append $errors (printf "clusterAgent.clusterSlug %q is not a DNS label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit" $slug) -}}
{{- end -}}
{{- else if and $v.clusterAgent.clusterName (not (include "proxima-agent.slugify" $v.clusterAgent.clusterName)) -}}
{{- $errors = append $errors (printf "clusterAgent.clusterName %q has no letter or digit to derive a slug from: set clusterAgent.clusterSlug" $v.clusterAgent.clusterName) -}}
{{- end -}}
{{- if $errors -}}
{{- fail (printf "\n\nproxima-agent: %d invalid value(s):\n  - %s\n" (len $errors) (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
