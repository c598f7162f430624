{{/* The name of every object of the release. */}}
{{- define "kiln.fullname" -}}
{{- if contains "kiln" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kiln" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kiln.labels" -}}
app.kubernetes.io/name: kiln
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kiln.selector" -}}
app.kubernetes.io/name: kiln
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Whether replicas share a store, and so may be more than one and forward. */}}
{{- define "kiln.shared" -}}
{{- if or .Values.redis.url .Values.shared -}}true{{- end -}}
{{- end -}}

{{- define "kiln.secretName" -}}
{{- default (include "kiln.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* Refuse values that cannot work, with the reason. */}}
{{- define "kiln.check" -}}
{{- if and (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled) (not (include "kiln.shared" .)) -}}
{{- fail "more than one kiln replica (replicaCount > 1, or autoscaling) needs redis.url (or shared: true with REDIS_URL in existingSecret): replicas share sessions through Redis" -}}
{{- end -}}
{{- if and .Values.s3.endpoint (not (include "kiln.shared" .)) -}}
{{- fail "s3.endpoint needs redis.url: Redis keeps the metadata of what the bucket holds" -}}
{{- end -}}
{{- if and .Values.s3.endpoint (not .Values.s3.bucket) -}}
{{- fail "s3.endpoint needs s3.bucket" -}}
{{- end -}}
{{- end -}}
