{{/*
The routed-IP trust settings (tollgate.runtime.settings.RoutedIPTrustSettings) from the `routedipTrust` value, as
the environment variables both services read: the routedip controller acts by them and the webhook judges
ClusterRoutedIPClasses by them, so the routedip and webhook charts are given the same value. Nothing when the
chart has no `routedipTrust`.
*/}}
{{- define "tollgate.routedipTrust" -}}
{{- with .Values.routedipTrust }}
- name: TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS
  value: {{ join "," .apiURLs | quote }}
- name: TOLLGATE_ROUTEDIP_DIGITALOCEAN_HTTP_HOSTS
  value: {{ join "," (.httpHosts | default list) | quote }}
- name: TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT
  value: {{ .jobServiceAccount | quote }}
{{- end }}
{{- end -}}
