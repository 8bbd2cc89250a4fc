{{/* Names, labels and shared pod parts. Helpers are namespaced by component: day0.<component>.* */}}

{{- define "day0.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "day0.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Common labels; call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "day0.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "day0.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: day0
{{- end -}}

{{- define "day0.selectorLabels" -}}
app.kubernetes.io/name: {{ include "day0.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "day0.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "day0.webhook.fullname" -}}{{ include "day0.fullname" . }}-webhook{{- end -}}
{{- define "day0.worker.fullname" -}}{{ include "day0.fullname" . }}-worker{{- end -}}
{{- define "day0.runner.fullname" -}}{{ include "day0.fullname" . }}-runner{{- end -}}
{{- define "day0.ray.fullname" -}}{{ include "day0.fullname" . }}-ray{{- end -}}
{{- define "day0.prefectServer.fullname" -}}{{ include "day0.fullname" . }}-prefect-server{{- end -}}
{{- define "day0.clusterSpec.configMapName" -}}{{ include "day0.fullname" . }}-clusters{{- end -}}
{{- define "day0.workPool.configMapName" -}}{{ include "day0.fullname" . }}-work-pool{{- end -}}
{{/* Where flow-run Jobs and RayClusters run: a namespace of their own (see values: runs.namespace). */}}
{{- define "day0.runs.namespace" -}}{{ default (printf "%s-runs" .Release.Namespace | trunc 63 | trimSuffix "-") .Values.runs.namespace }}{{- end -}}

{{/* Where the cluster-spec ConfigMap is mounted in flow-run pods (DAY0_CLUSTERS_DIR). */}}
{{- define "day0.clusterSpec.mountPath" -}}/etc/day0/clusters{{- end -}}

{{- define "day0.prefect.apiUrl" -}}
{{- if .Values.prefectServer.enabled -}}
{{- printf "http://%s.%s.svc:%d/api" (include "day0.prefectServer.fullname" .) .Release.Namespace (int .Values.prefectServer.port) -}}
{{- else -}}
{{- required "prefect.apiUrl is required when prefectServer.enabled is false" .Values.prefect.apiUrl -}}
{{- end -}}
{{- end -}}

{{/* Environment every day0 container shares: Prefect API, the checkout's configs/ (day0 may be installed
   outside it), the artifact store, writable homes on /tmp. */}}
{{- define "day0.env" -}}
- name: PREFECT_API_URL
  value: {{ include "day0.prefect.apiUrl" . | quote }}
{{- with .Values.prefect.apiKeySecret.name }}
- name: PREFECT_API_KEY
  valueFrom: {secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.prefect.apiKeySecret.key | quote }}}}
{{- end }}
{{- with .Values.prefect.authSecret.name }}
- name: PREFECT_API_AUTH_STRING
  valueFrom: {secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.prefect.authSecret.key | quote }}}}
{{- end }}
- name: PREFECT_HOME
  value: /tmp/prefect
- name: PREFECT_SERVER_ANALYTICS_ENABLED
  value: "false"
- name: HOME
  value: /tmp
- name: DAY0_CONFIGS_DIR
  value: {{ printf "%s/configs" .Values.image.workdir | quote }}
{{- with .Values.store.endpointUrl }}
- name: DAY0_STORE_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
- name: DAY0_STORE_REGION
  value: {{ .Values.store.region | quote }}
{{- with .Values.store.existingSecret }}
- name: DAY0_STORE_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ . | quote }}, key: access-key-id}}
- name: DAY0_STORE_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ . | quote }}, key: secret-access-key}}
{{- end }}
{{- end -}}

{{/* A file:// store's volume (store.volume) and its mount at the store's path, as dicts: none for s3://. */}}
{{- define "day0.store.volumes" -}}
{{- if hasPrefix "file://" .Values.store.uri }}
{{- list (merge (dict "name" "store") .Values.store.volume) | toYaml }}
{{- else }}[]{{ end }}
{{- end -}}
{{- define "day0.store.volumeMounts" -}}
{{- if hasPrefix "file://" .Values.store.uri }}
{{- list (dict "name" "store" "mountPath" (trimPrefix "file://" .Values.store.uri)) | toYaml }}
{{- else }}[]{{ end }}
{{- end -}}

{{- define "day0.podSecurity" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* A writable /tmp: the root filesystem is read-only. */}}
{{- define "day0.tmpVolume" -}}
- name: tmp
  emptyDir: {sizeLimit: 1Gi}
{{- end -}}

{{/* A Kubernetes quantity (`500m`, `2`, `1.5`, `512Mi`, `4Gi`; values.schema.json checked its form) in base
   units, as a float: for comparing requests with limits. */}}
{{- define "day0.quantity" -}}
{{- $q := toString . -}}
{{- $suffix := regexFind "[A-Za-z]+$" $q -}}
{{- $scale := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 (trimSuffix $suffix $q)) (get $scale $suffix) -}}
{{- end -}}

{{/* Fail unless each request is at most its limit; call with (dict "where" "worker.resources" "requests" ... "limits" ...). */}}
{{- define "day0.checkRequests" -}}
{{- range $name, $request := .requests }}
{{- $limit := get $.limits $name }}
{{- if and (ne (toString $limit) "") (gt (include "day0.quantity" $request | float64) (include "day0.quantity" $limit | float64)) }}
{{- fail (printf "%s: the request of %s (%v) is above its limit (%v): the API server refuses such a pod" $.where $name $request $limit) }}
{{- end }}
{{- end }}
{{- end -}}
