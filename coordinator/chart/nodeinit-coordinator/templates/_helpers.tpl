{{/* The labels on every object; the selector uses the name only, as coordinator/deploy does. */}}
{{- define "nodeinit-coordinator.labels" -}}
app.kubernetes.io/name: nodeinit-coordinator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nodeinit-coordinator.selector" -}}
app.kubernetes.io/name: nodeinit-coordinator
{{- end -}}

{{/* The coordinator's configuration: values.config as a map, or as the
file's text (a string, comments kept). */}}
{{- define "nodeinit-coordinator.config" -}}
{{- if kindIs "string" .Values.config -}}
{{ .Values.config }}
{{- else -}}
{{ toYaml .Values.config }}
{{- end -}}
{{- end }}
