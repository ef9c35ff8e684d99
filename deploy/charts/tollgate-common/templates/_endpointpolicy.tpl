{{/*
The endpoint address policy (tollgate.runtime.settings.EndpointPolicySettings) from the `endpointPolicy` value, as
the service's own variables: the webhook judges endpoints at admission, the allocator at registration and xds before
it serves a VirtualService, so the three charts are given the same value. Nothing when the chart has no
`endpointPolicy`.
*/}}
{{- define "tollgate.endpointPolicy" -}}
{{- with .Values.endpointPolicy }}
- name: {{ $.Values.envPrefix }}ENDPOINT_DENIED_RANGES
  value: {{ join "," .deniedRanges | quote }}
- name: {{ $.Values.envPrefix }}ENDPOINT_ALLOWED_RANGES
  value: {{ join "," .allowedRanges | quote }}
{{- end }}
{{- end -}}
