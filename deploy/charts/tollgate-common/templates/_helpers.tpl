{{/* Name of every object of a service release: the release name. */}}
{{- define "tollgate.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tollgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tollgate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tollgate.serviceAccountName" -}}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}
