{{/* A Prometheus Operator ServiceMonitor for the service's /metrics (on the health port), when
metrics.serviceMonitor.enabled. */}}
{{- define "tollgate.serviceMonitor" -}}
{{- $monitor := dig "serviceMonitor" dict (.Values.metrics | default dict) -}}
{{- if $monitor.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "tollgate.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
    {{- with $monitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "tollgate.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames:
    - {{ .Release.Namespace }}
  endpoints:
  - port: health
    path: /metrics
    interval: {{ $monitor.interval | default "30s" }}
{{- end }}
{{- end -}}
