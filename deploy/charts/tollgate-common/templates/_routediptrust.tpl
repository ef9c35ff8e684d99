{{/*
The routed-IP trust settings (tollgate.runtime.settings.RoutedIPTrustSettings) from the `routedipTrust` value, as
the environment variables both services read: the routedip controller acts by them and the webhook judges
ClusterRoutedIPClasses by them, so the routedip and webhook charts are given the same value. Nothing when the
chart has no `routedipTrust`.
*/}}
{{/* The job ServiceAccount: routedipTrust.jobServiceAccount, or (empty, the routedip chart's default) the
release's own `<release>-job`, so that two releases never share one. */}}
{{- define "tollgate.routedipJobServiceAccount" -}}
{{- .Values.routedipTrust.jobServiceAccount | default (printf "%s-job" (include "tollgate.fullname" .)) -}}
{{- end -}}

{{- define "tollgate.routedipTrust" -}}
{{- with .Values.routedipTrust }}
- name: TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS
  value: {{ join "," .apiURLs | quote }}
- name: TOLLGATE_ROUTEDIP_DIGITALOCEAN_HTTP_HOSTS
  value: {{ join "," (.httpHosts | default list) | quote }}
- name: TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT
  value: {{ include "tollgate.routedipJobServiceAccount" $ | quote }}
{{- end }}
{{- end -}}
